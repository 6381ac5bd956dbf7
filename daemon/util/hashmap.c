/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "hashmap.h"

#define MIN_SLOTS 16u

static inline uint64_t rotl64(uint64_t v, unsigned r)
{
	return v << r | v >> (64 - r);
}

/* A word at a time, each word spread by an odd multiply before it joins
 * the state; the final fmix64 makes the low bits usable as an index. */
uint64_t mp_hash_bytes(const void *p, size_t len, uint64_t seed)
{
	const unsigned char *b = p;
	uint64_t h = seed ^ (len * 0x9e3779b97f4a7c15ull);
	uint64_t w;

	for (; len >= 8; b += 8, len -= 8) {
		memcpy(&w, b, 8);
		h = rotl64(h ^ (w * 0x87c37b91114253d5ull), 31) * 0x4cf5ad432745937full;
	}
	if (len) {
		w = 0;
		memcpy(&w, b, len);
		h = rotl64(h ^ (w * 0x87c37b91114253d5ull), 31) * 0x4cf5ad432745937full;
	}
	return mp_hash_u64(h);
}

uint64_t mp_hash_str(const char *s)
{
	return mp_hash_bytes(s, strlen(s), 0);
}

/* Both halves, so that a caller's hash with weak high or low bits still
 * spreads. */
static inline uint32_t fold(uint64_t hash)
{
	return (uint32_t)(hash ^ hash >> 32);
}

void mp_hashmap_init(struct mp_hashmap *m, uint32_t max_entries)
{
	*m = (struct mp_hashmap){ .max = max_entries && max_entries < MP_HASHMAP_MAX_ENTRIES ?
						 max_entries :
						 MP_HASHMAP_MAX_ENTRIES };
}

void mp_hashmap_free(struct mp_hashmap *m)
{
	if (!m)
		return;
	free(m->slots);
	m->slots = NULL;
	m->mask = 0;
	m->n = 0;
}

void mp_hashmap_reset(struct mp_hashmap *m)
{
	if (m->slots)
		memset(m->slots, 0, ((size_t)m->mask + 1) * sizeof(*m->slots));
	m->n = 0;
}

/* Slots for @n entries at a load of at most 3/4: linear probing stays
 * short there, and a slot is only 8 bytes. */
static uint64_t slots_for(uint32_t n)
{
	uint64_t want = (uint64_t)n + n / 3 + 1, cap = MIN_SLOTS;

	while (cap < want)
		cap <<= 1;
	return cap;
}

static int resize(struct mp_hashmap *m, uint64_t cap)
{
	struct mp_hashmap_slot *ns = calloc(cap, sizeof(*ns));
	uint32_t mask = (uint32_t)(cap - 1);

	if (!ns)
		return -ENOMEM;
	if (m->slots) {
		for (uint64_t i = 0; i <= m->mask; i++) {
			struct mp_hashmap_slot s = m->slots[i];
			uint32_t j;

			if (!s.id1)
				continue;
			for (j = s.h32 & mask; ns[j].id1; j = (j + 1) & mask)
				;
			ns[j] = s;
		}
		free(m->slots);
	}
	m->slots = ns;
	m->mask = mask;
	return 0;
}

int mp_hashmap_reserve(struct mp_hashmap *m, uint32_t n)
{
	uint64_t cap;

	if (n > m->max)
		return -ENOSPC;
	cap = slots_for(n);
	if (m->slots && cap <= (uint64_t)m->mask + 1)
		return 0;
	return resize(m, cap);
}

/* Room for one more entry: checks the bound and grows before the load
 * passes 3/4. */
static int make_room(struct mp_hashmap *m)
{
	if (m->n >= m->max)
		return -ENOSPC;
	if (m->slots && (uint64_t)m->n + 1 <= ((uint64_t)m->mask + 1) / 4 * 3)
		return 0;
	return resize(m, m->slots ? ((uint64_t)m->mask + 1) * 2 : MIN_SLOTS);
}

int mp_hashmap_find(const struct mp_hashmap *m, uint64_t hash, mp_hashmap_eq_fn eq, const void *ctx,
		    const void *key, uint32_t *ret_id)
{
	uint32_t h32 = fold(hash), j;

	if (!m->slots)
		return -ENOENT;
	for (j = h32 & m->mask; m->slots[j].id1; j = (j + 1) & m->mask) {
		const struct mp_hashmap_slot *s = &m->slots[j];

		if (s->h32 == h32 && eq(ctx, s->id1 - 1, key)) {
			*ret_id = s->id1 - 1;
			return 0;
		}
	}
	return -ENOENT;
}

static void put(struct mp_hashmap *m, uint32_t h32, uint32_t id)
{
	uint32_t j;

	for (j = h32 & m->mask; m->slots[j].id1; j = (j + 1) & m->mask)
		;
	m->slots[j] = (struct mp_hashmap_slot){ .id1 = id + 1, .h32 = h32 };
	m->n++;
}

int mp_hashmap_insert(struct mp_hashmap *m, uint64_t hash, uint32_t id)
{
	int r;

	if (id >= MP_HASHMAP_MAX_ENTRIES)
		return -EINVAL;
	r = make_room(m);
	if (r < 0)
		return r;
	put(m, fold(hash), id);
	return 0;
}

int mp_hashmap_intern(struct mp_hashmap *m, uint64_t hash, mp_hashmap_eq_fn eq, const void *ctx,
		      const void *key, uint32_t new_id, uint32_t *ret_id)
{
	int r = mp_hashmap_find(m, hash, eq, ctx, key, ret_id);

	if (r == 0)
		return 0;
	r = mp_hashmap_insert(m, hash, new_id);
	if (r < 0)
		return r;
	*ret_id = new_id;
	return 1;
}

/* Whether @k lies cyclically in (@i, @j]. */
static inline bool in_range(uint32_t k, uint32_t i, uint32_t j)
{
	return i <= j ? i < k && k <= j : i < k || k <= j;
}

int mp_hashmap_remove(struct mp_hashmap *m, uint64_t hash, uint32_t id)
{
	uint32_t h32 = fold(hash), i, j;

	if (!m->slots || id >= MP_HASHMAP_MAX_ENTRIES)
		return -ENOENT;
	for (i = h32 & m->mask; m->slots[i].id1 != id + 1 || m->slots[i].h32 != h32;
	     i = (i + 1) & m->mask)
		if (!m->slots[i].id1)
			return -ENOENT;
	/* Backward shift: pull later members of the chain into the hole
	 * unless that would put one before its home slot. */
	for (j = i;;) {
		j = (j + 1) & m->mask;
		if (!m->slots[j].id1)
			break;
		if (in_range(m->slots[j].h32 & m->mask, i, j))
			continue;
		m->slots[i] = m->slots[j];
		i = j;
	}
	m->slots[i] = (struct mp_hashmap_slot){ 0 };
	m->n--;
	return 0;
}
