// SPDX-License-Identifier: MIT
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "hashmap.h"
#include "stacks.h"

struct mp_stack_table {
	struct mp_stack *stacks;
	uint32_t n, cap;
	struct mp_hashmap ids; /* index into stacks by frames and flags */
	uint64_t frames_total;
	uint64_t dropped;
	uint32_t max_stacks; /* bounds: MP_STACKS_MAX, MP_STACKS_MAX_FRAMES */
	uint64_t max_frames;
};

int mp_stack_table_new(struct mp_stack_table **ret)
{
	struct mp_stack_table *t = calloc(1, sizeof(*t));

	if (!t)
		return -ENOMEM;
	mp_hashmap_init(&t->ids, MP_STACKS_MAX);
	t->max_stacks = MP_STACKS_MAX;
	t->max_frames = MP_STACKS_MAX_FRAMES;
	*ret = t;
	return 0;
}

void mp_stack_table_set_max(struct mp_stack_table *t, uint32_t max_stacks, uint64_t max_frames)
{
	if (max_stacks && max_stacks <= MP_STACKS_MAX)
		t->max_stacks = max_stacks;
	if (max_frames)
		t->max_frames = max_frames;
	/* before the first stack: the map has allocated nothing yet */
	if (!t->n)
		mp_hashmap_init(&t->ids, t->max_stacks);
}

void mp_stack_table_free(struct mp_stack_table *t)
{
	if (!t)
		return;
	for (uint32_t i = 0; i < t->n; i++)
		free(t->stacks[i].frames);
	free(t->stacks);
	mp_hashmap_free(&t->ids);
	free(t);
}

struct stack_key {
	const uint64_t *frames;
	uint32_t n, flags;
};

static bool same(const void *ctx, uint32_t id, const void *key)
{
	const struct mp_stack *s = &((const struct mp_stack_table *)ctx)->stacks[id];
	const struct stack_key *k = key;

	/* an empty stack may have no frames array to compare */
	return s->n_frames == k->n && s->flags == k->flags &&
	       (!k->n || !memcmp(s->frames, k->frames, k->n * sizeof(*k->frames)));
}

uint32_t mp_stack_table_intern(struct mp_stack_table *t, const uint64_t *frames, uint32_t n,
			       uint32_t flags)
{
	const struct stack_key k = { .frames = frames, .n = n, .flags = flags };
	uint64_t h = mp_hash_bytes(frames, n * sizeof(*frames), (uint64_t)n << 1 | flags);
	struct mp_stack *s;
	uint32_t id;

	if (mp_hashmap_find(&t->ids, h, same, t, &k, &id) == 0)
		return id + 1;
	if (t->n >= t->max_stacks || t->frames_total + n > t->max_frames)
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
	if (mp_hashmap_insert(&t->ids, h, t->n) < 0) {
		free(s->frames);
		goto drop;
	}
	memcpy(s->frames, frames, n * sizeof(*frames));
	s->n_frames = n;
	s->flags = flags;
	t->frames_total += n;
	return ++t->n;
drop:
	t->dropped++;
	return 0;
}

uint32_t mp_stack_table_count(const struct mp_stack_table *t)
{
	return t->n;
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
	p->limits.stacks = t->max_stacks;
	p->limits.stack_frames = t->max_frames;
	if (t->dropped)
		p->limits.reached |= MP_LIMIT_STACKS;
	return 0;
}
