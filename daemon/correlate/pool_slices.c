/* SPDX-License-Identifier: MIT */
/* The live slices of pools: a hash of (pool, address) and a list per pool. */
#include <stdlib.h>

#include "correlator_impl.h"

static uint64_t slice_hash(uint32_t pool, uint64_t addr)
{
	return mp_hash_combine(mp_hash_u64(addr), pool);
}

struct slice_key {
	uint64_t addr;
	uint32_t pool;
};

static bool slice_eq(const void *ctx, uint32_t id, const void *key)
{
	const struct slice *sl = &((const struct mp_correlator *)ctx)->slices[id];
	const struct slice_key *k = key;

	return sl->addr == k->addr && sl->pool == k->pool;
}

uint32_t corr_slice_find(const struct mp_correlator *c, uint32_t pool, uint64_t addr)
{
	struct slice_key k = { .addr = addr, .pool = pool };
	uint32_t i;

	if (mp_hashmap_find(&c->slice_map, slice_hash(pool, addr), slice_eq, c, &k, &i) < 0)
		return 0;
	return i;
}

/* A new live slice; 0 when out of memory or beyond MAX_SLICES. */
uint32_t corr_slice_insert(struct mp_correlator *c, uint32_t pool, uint64_t addr, uint64_t size)
{
	struct slice *sl;
	uint32_t i;

	if (c->n_live_slices >= MAX_SLICES)
		return 0;
	/* the insert below cannot fail then */
	if (mp_hashmap_reserve(&c->slice_map, c->n_live_slices + 1) < 0)
		return 0;
	if (c->free_slices) {
		i = c->free_slices;
		c->free_slices = c->slices[i].next_free;
	} else {
		if (corr_grow((void **)&c->slices, &c->slices_cap, c->slices_used + 2,
			      sizeof(*c->slices)) < 0)
			return 0;
		i = ++c->slices_used;
	}
	sl = &c->slices[i];
	*sl = (struct slice){ .addr = addr, .size = size, .pool = pool };
	mp_hashmap_insert(&c->slice_map, slice_hash(pool, addr), i);
	sl->pnext = c->pool_head[pool];
	if (sl->pnext)
		c->slices[sl->pnext].pprev = i;
	c->pool_head[pool] = i;
	c->n_live_slices++;
	return i;
}

void corr_slice_remove(struct mp_correlator *c, uint32_t i)
{
	struct slice *sl = &c->slices[i];

	mp_hashmap_remove(&c->slice_map, slice_hash(sl->pool, sl->addr), i);
	if (sl->pprev)
		c->slices[sl->pprev].pnext = sl->pnext;
	else
		c->pool_head[sl->pool] = sl->pnext;
	if (sl->pnext)
		c->slices[sl->pnext].pprev = sl->pprev;
	sl->next_free = c->free_slices;
	c->free_slices = i;
	c->n_live_slices--;
}
