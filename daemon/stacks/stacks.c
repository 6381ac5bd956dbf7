// SPDX-License-Identifier: MIT
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "stacks.h"

struct mp_stack_table {
	struct mp_stack *stacks;
	uint32_t n, cap;
	uint32_t *ht; /* id, 0 empty; open addressing */
	uint32_t ht_cap;
	uint64_t frames_total;
	uint64_t dropped;
};

static uint64_t hash_frames(const uint64_t *f, uint32_t n, uint32_t flags)
{
	uint64_t h = 0xcbf29ce484222325ull ^ ((uint64_t)n << 1 | flags);

	for (uint32_t i = 0; i < n; i++) {
		h ^= f[i];
		h *= 0x100000001b3ull;
		h ^= h >> 29;
	}
	return h;
}

int mp_stack_table_new(struct mp_stack_table **ret)
{
	struct mp_stack_table *t = calloc(1, sizeof(*t));

	if (!t)
		return -ENOMEM;
	*ret = t;
	return 0;
}

void mp_stack_table_free(struct mp_stack_table *t)
{
	if (!t)
		return;
	for (uint32_t i = 0; i < t->n; i++)
		free(t->stacks[i].frames);
	free(t->stacks);
	free(t->ht);
	free(t);
}

static bool same(const struct mp_stack *s, const uint64_t *f, uint32_t n, uint32_t flags)
{
	return s->n_frames == n && s->flags == flags && !memcmp(s->frames, f, n * sizeof(*f));
}

static int grow(struct mp_stack_table *t)
{
	uint32_t ncap = t->ht_cap ? t->ht_cap * 2 : 1024;
	uint32_t *ht = calloc(ncap, sizeof(*ht));

	if (!ht)
		return -ENOMEM;
	for (uint32_t id = 1; id <= t->n; id++) {
		const struct mp_stack *s = &t->stacks[id - 1];
		uint32_t i = (uint32_t)hash_frames(s->frames, s->n_frames, s->flags) & (ncap - 1);

		while (ht[i])
			i = (i + 1) & (ncap - 1);
		ht[i] = id;
	}
	free(t->ht);
	t->ht = ht;
	t->ht_cap = ncap;
	return 0;
}

uint32_t mp_stack_table_intern(struct mp_stack_table *t, const uint64_t *frames, uint32_t n,
			       uint32_t flags)
{
	uint64_t h = hash_frames(frames, n, flags);
	struct mp_stack *s;
	uint32_t i;

	if (t->ht_cap) {
		for (i = (uint32_t)h & (t->ht_cap - 1); t->ht[i]; i = (i + 1) & (t->ht_cap - 1))
			if (same(&t->stacks[t->ht[i] - 1], frames, n, flags))
				return t->ht[i];
	}
	if (t->n >= MP_STACKS_MAX || t->frames_total + n > MP_STACKS_MAX_FRAMES)
		goto drop;
	if ((t->n + 1) * 2 > t->ht_cap && grow(t) < 0)
		goto drop;
	if (t->n == t->cap) {
		uint32_t ncap = t->cap ? t->cap * 2 : 256;
		struct mp_stack *ns = realloc(t->stacks, ncap * sizeof(*ns));

		if (!ns)
			goto drop;
		t->stacks = ns;
		t->cap = ncap;
	}
	s = &t->stacks[t->n];
	s->frames = malloc((n ? n : 1) * sizeof(*frames));
	if (!s->frames)
		goto drop;
	memcpy(s->frames, frames, n * sizeof(*frames));
	s->n_frames = n;
	s->flags = flags;
	t->frames_total += n;
	t->n++;
	for (i = (uint32_t)h & (t->ht_cap - 1); t->ht[i]; i = (i + 1) & (t->ht_cap - 1))
		;
	t->ht[i] = t->n;
	return t->n;
drop:
	t->dropped++;
	return 0;
}

const struct mp_stack *mp_stack_table_get(const struct mp_stack_table *t, uint32_t id)
{
	return id && id <= t->n ? &t->stacks[id - 1] : NULL;
}

int mp_stack_table_export(const struct mp_stack_table *t, struct mp_profile *p)
{
	struct mp_stack *out = calloc(t->n ? t->n : 1, sizeof(*out));

	if (!out)
		return -ENOMEM;
	for (uint32_t i = 0; i < t->n; i++) {
		out[i] = t->stacks[i];
		out[i].frames = malloc((t->stacks[i].n_frames ? t->stacks[i].n_frames : 1) *
				       sizeof(uint64_t));
		if (!out[i].frames) {
			for (uint32_t j = 0; j < i; j++)
				free(out[j].frames);
			free(out);
			return -ENOMEM;
		}
		memcpy(out[i].frames, t->stacks[i].frames,
		       t->stacks[i].n_frames * sizeof(uint64_t));
	}
	for (uint32_t i = 0; i < p->n_stacks; i++)
		free(p->stacks[i].frames);
	free(p->stacks);
	p->stacks = out;
	p->n_stacks = t->n;
	p->stacks_dropped = t->dropped;
	return 0;
}
