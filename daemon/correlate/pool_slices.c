/* SPDX-License-Identifier: MIT */
/* The live slices of pools: a hash of (pool, address) and a list per pool. */
#include <stdlib.h>

#include "correlator_impl.h"

static uint32_t slice_hash(const struct mp_correlator *c, uint32_t pool, uint64_t addr)
{
	return hash_u64(addr ^ (uint64_t)pool << 48) & (c->slice_ht_cap - 1);
}

uint32_t corr_slice_find(const struct mp_correlator *c, uint32_t pool, uint64_t addr)
{
	if (!c->slice_ht_cap)
		return 0;
	for (uint32_t i = c->slice_ht[slice_hash(c, pool, addr)]; i; i = c->slices[i].hnext)
		if (c->slices[i].addr == addr && c->slices[i].pool == pool)
			return i;
	return 0;
}

static int slice_rehash(struct mp_correlator *c)
{
	uint32_t ncap = c->slice_ht_cap ? c->slice_ht_cap * 2 : 1024;
	uint32_t *ht = calloc(ncap, sizeof(*ht));

	if (!ht)
		return -ENOMEM;
	free(c->slice_ht);
	c->slice_ht = ht;
	c->slice_ht_cap = ncap;
	for (uint32_t pl = 0; pl < c->p->n_mempools; pl++) {
		for (uint32_t i = c->pool_head[pl]; i; i = c->slices[i].pnext) {
			uint32_t h = slice_hash(c, pl, c->slices[i].addr);

			c->slices[i].hnext = ht[h];
			ht[h] = i;
		}
	}
	return 0;
}

/* A new live slice; 0 when out of memory or beyond MAX_SLICES. */
uint32_t corr_slice_insert(struct mp_correlator *c, uint32_t pool, uint64_t addr, uint64_t size)
{
	struct slice *sl;
	uint32_t i, h;

	if (c->n_live_slices >= MAX_SLICES)
		return 0;
	if (c->n_live_slices + 1 > c->slice_ht_cap && slice_rehash(c) < 0)
		return 0;
	if (c->free_slices) {
		i = c->free_slices;
		c->free_slices = c->slices[i].hnext;
	} else {
		if (corr_grow((void **)&c->slices, &c->slices_cap, c->slices_used + 2,
			      sizeof(*c->slices)) < 0)
			return 0;
		i = ++c->slices_used;
	}
	sl = &c->slices[i];
	h = slice_hash(c, pool, addr);
	*sl = (struct slice){ .addr = addr, .size = size, .pool = pool };
	sl->hnext = c->slice_ht[h];
	c->slice_ht[h] = i;
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
	uint32_t *pp = &c->slice_ht[slice_hash(c, sl->pool, sl->addr)];

	while (*pp != i)
		pp = &c->slices[*pp].hnext;
	*pp = sl->hnext;
	if (sl->pprev)
		c->slices[sl->pprev].pnext = sl->pnext;
	else
		c->pool_head[sl->pool] = sl->pnext;
	if (sl->pnext)
		c->slices[sl->pnext].pprev = sl->pprev;
	sl->hnext = c->free_slices;
	c->free_slices = i;
	c->n_live_slices--;
}
