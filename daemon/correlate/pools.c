/* SPDX-License-Identifier: MIT */
/*
 * Pools. Slices of pools (memprof_pool_* records, and blocks of --alloc functions
 * with pool=) are accounted here, apart from the heap: they never change a
 * heap figure. Each invocation gets one bucket per pool, so per-kernel pool
 * peaks are exact like the heap's.
 */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "correlator_impl.h"

int mp_correlator_pool_declare(struct mp_correlator *c, const char *name, uint32_t kind,
			       uint32_t source, uint32_t *ret)
{
	struct mp_profile *p = c->p;
	struct mp_mempool *mp;
	char *d;
	uint32_t i;

	if (!name || kind > MP_POOL_KIND_DEVICE)
		return -EINVAL;
	for (i = 0; i < p->n_mempools; i++) {
		if (p->mempools[i].kind == kind &&
		    strncmp(p->mempools[i].name, name, MAX_NAME_LEN) == 0) {
			*ret = i;
			return 0;
		}
	}
	if (p->n_mempools >= MAX_MEMPOOLS)
		return -E2BIG;
	if (corr_grow((void **)&p->mempools, &c->mempools_cap, p->n_mempools + 1,
		      sizeof(*p->mempools)) < 0)
		return -ENOMEM;
	/* pool_head has mempools_cap entries, zeroed as they are added */
	if (p->n_mempools == 0 || (p->n_mempools & (p->n_mempools - 1)) == 0) {
		uint32_t *h = reallocarray(c->pool_head, c->mempools_cap, sizeof(*h));

		if (!h)
			return -ENOMEM;
		c->pool_head = h;
	}
	d = strndup(name, MAX_NAME_LEN);
	if (!d)
		return -ENOMEM;
	mp = &p->mempools[p->n_mempools];
	*mp = (struct mp_mempool){ .name = d, .kind = kind, .source = source };
	c->pool_head[p->n_mempools] = 0;
	*ret = p->n_mempools++;
	return 0;
}

int mp_correlator_set_fn_pool(struct mp_correlator *c, uint32_t fn, const char *name, uint32_t kind)
{
	uint32_t pool;
	int r;

	if (fn >= FN_POOL_MAX)
		return -EINVAL;
	r = mp_correlator_pool_declare(c, name, kind, MP_POOL_SRC_PROBE, &pool);
	if (r < 0)
		return r;
	c->fn_pool[fn] = pool + 1;
	return 0;
}

static struct mp_pool_bucket *bucket_in(struct mp_pool_bucket **v, uint32_t *n, uint32_t pool)
{
	return bucket_get(v, n, sizeof(**v), &pool, sizeof(pool));
}

/* An invocation's bucket of @pool's slices charged to @tag. */
static struct mp_pool_tag_bucket *pool_tag_bucket(struct mp_invocation *r, uint32_t pool,
						  uint32_t tag)
{
	struct mp_pool_tag_bucket key = { .pool = pool, .tag = tag };

	return bucket_get(&r->pool_tags, &r->n_pool_tags, sizeof(key), &key,
			  offsetof(struct mp_pool_tag_bucket, alloc_bytes));
}

/* The index of @tag in @pool's tags, added on first sight; MP_NONE when out
 * of memory. */
static uint32_t pool_tag_of(struct mp_correlator *c, uint32_t pool, uint32_t tag)
{
	struct mp_mempool *mp = &c->p->mempools[pool];
	struct mp_pool_tag *pt = bucket_get(&mp->tags, &mp->n_tags, sizeof(*pt), &tag, sizeof(tag));

	if (!pt) {
		c->oom = true;
		return MP_NONE;
	}
	return (uint32_t)(pt - mp->tags);
}

static struct mp_pool_bucket *pool_bucket(struct mp_invocation *r, uint32_t pool)
{
	return bucket_in(&r->pools, &r->n_pools, pool);
}

/* What is live in a pool when a phase is entered is live during it. */
int corr_pools_phase_enter(struct mp_correlator *c, struct mp_phase *ph)
{
	for (uint32_t i = 0; i < c->p->n_mempools; i++) {
		struct mp_pool_bucket *b = bucket_in(&ph->pools, &ph->n_pools, i);

		if (!b)
			return -ENOMEM;
		if (c->p->mempools[i].live_bytes > b->peak_bytes)
			b->peak_bytes = c->p->mempools[i].live_bytes;
	}
	return 0;
}

void corr_pools_phase_leave(struct mp_correlator *c, struct mp_phase *ph)
{
	for (uint32_t i = 0; i < ph->n_pools; i++) {
		if (ph->pools[i].id < c->p->n_mempools) {
			ph->pools[i].live_end = c->p->mempools[ph->pools[i].id].live_bytes;
			ph->pools[i].live_count_end = c->p->mempools[ph->pools[i].id].live_count;
		}
	}
}

/* The current phase's bucket of @pool: traffic and peaks while current. */
static void pool_charge_phase(struct mp_correlator *c, uint32_t pool, uint64_t bytes,
			      uint64_t count, bool alloc)
{
	struct mp_pool_bucket *b;

	if (c->cur_phase == MP_NONE)
		return;
	b = bucket_in(&c->p->phases[c->cur_phase].pools, &c->p->phases[c->cur_phase].n_pools, pool);
	if (!b) {
		c->oom = true;
		return;
	}
	if (alloc) {
		b->alloc_bytes += bytes;
		b->alloc_count += count;
		if (b->alloc_bytes > b->free_bytes &&
		    b->alloc_bytes - b->free_bytes > b->peak_added)
			b->peak_added = b->alloc_bytes - b->free_bytes;
		if (c->p->mempools[pool].live_bytes > b->peak_bytes)
			b->peak_bytes = c->p->mempools[pool].live_bytes;
	} else {
		b->free_bytes += bytes;
		b->free_count += count;
	}
}

/* What is live in a pool when a kernel begins is live during it. */
int corr_pools_begin(struct mp_correlator *c, struct mp_invocation *r)
{
	r->n_pools = 0;
	r->pools = NULL;
	for (uint32_t i = 0; i < c->p->n_mempools; i++) {
		struct mp_pool_bucket *b = pool_bucket(r, i);

		if (!b)
			return -ENOMEM;
		b->peak_bytes = b->live_end = c->p->mempools[i].live_bytes;
		b->live_count_end = c->p->mempools[i].live_count;
	}
	return 0;
}

void corr_pools_end(struct mp_correlator *c, struct mp_invocation *r)
{
	for (uint32_t i = 0; i < r->n_pools; i++)
		if (r->pools[i].id < c->p->n_mempools) {
			r->pools[i].live_end = c->p->mempools[r->pools[i].id].live_bytes;
			r->pools[i].live_count_end = c->p->mempools[r->pools[i].id].live_count;
		}
}

int corr_pool_buckets_merge(struct mp_pool_bucket **dst, uint32_t *n,
			    const struct mp_pool_bucket *src, uint32_t ns)
{
	for (uint32_t i = 0; i < ns; i++) {
		struct mp_pool_bucket *b = bucket_in(dst, n, src[i].id);

		if (!b)
			return -ENOMEM;
		ADD_COUNTS(b, &src[i]);
		if (src[i].peak_added > b->peak_added)
			b->peak_added = src[i].peak_added;
		if (src[i].peak_bytes > b->peak_bytes)
			b->peak_bytes = src[i].peak_bytes;
		b->live_end = src[i].live_end;
		b->live_count_end = src[i].live_count_end;
	}
	return 0;
}

int corr_pool_tag_buckets_merge(struct mp_pool_tag_bucket **dst, uint32_t *n,
				const struct mp_pool_tag_bucket *src, uint32_t ns)
{
	for (uint32_t i = 0; i < ns; i++) {
		struct mp_pool_tag_bucket *b =
			bucket_get(dst, n, sizeof(**dst), &src[i],
				   offsetof(struct mp_pool_tag_bucket, alloc_bytes));

		if (!b)
			return -ENOMEM;
		ADD_COUNTS(b, &src[i]);
	}
	return 0;
}

/* Aggregates @tmp, a copy of open invocation @f, into snapshot @q with its
 * pools' live figures as they are now (what frame_close would record), in
 * @q only. */
int corr_aggregate_open(struct mp_correlator *c, struct mp_profile *q, const struct frame *f,
			struct mp_invocation *tmp)
{
	struct mp_pool_bucket *scratch = NULL;
	int r;

	if (f->inv != MP_NONE) {
		tmp->pools = q->invocations[f->inv].pools;
	} else if (tmp->n_pools) {
		scratch = malloc(tmp->n_pools * sizeof(*scratch));
		if (!scratch)
			return -ENOMEM;
		memcpy(scratch, tmp->pools, tmp->n_pools * sizeof(*scratch));
		tmp->pools = scratch;
	}
	corr_pools_end(c, tmp);
	r = corr_aggregate(q, tmp);
	free(scratch);
	return r;
}

/* @count slices (or blocks) of @bytes in all, allocated or freed, in
 * figures with a live total and its peak: a pool's, a pool's tag's. */
static void live_charge(struct mp_mem_stats *m, uint64_t *live, uint64_t *live_count,
			uint64_t *peak, uint64_t bytes, uint64_t count, bool alloc)
{
	if (alloc) {
		add_signed(&m->bytes_added, bytes);
		add_signed(&m->tensors_added, count);
		m->alloc_bytes += bytes;
		m->alloc_count += count;
		*live += bytes;
		*live_count += count;
		if (*live > *peak)
			*peak = *live;
	} else {
		add_signed(&m->bytes_added, -bytes);
		add_signed(&m->tensors_added, -count);
		m->free_bytes += bytes;
		m->free_count += count;
		sub_clamped(live, bytes);
		sub_clamped(live_count, count);
	}
}

/* Charges @count slices of @bytes in all, of tag @ptag of the pool (index
 * into its tags), to the invocation of @tid (the attribution rule of the
 * heap) and every kernel enclosing it. */
static void pool_charge(struct mp_correlator *c, uint32_t tid, uint32_t pool, uint32_t ptag,
			uint64_t bytes, uint64_t count, bool alloc)
{
	struct mp_mempool *mp = &c->p->mempools[pool];
	uint32_t tag = MP_TAG_NONE;
	struct thread *t;
	struct frame *f;
	bool cross;

	live_charge(&mp->mem, &mp->live_bytes, &mp->live_count, &mp->peak_bytes, bytes, count,
		    alloc);
	if (ptag < mp->n_tags) {
		struct mp_pool_tag *pt = &mp->tags[ptag];

		tag = pt->tag;
		live_charge(&pt->mem, &pt->live_bytes, &pt->live_count, &pt->peak_bytes, bytes,
			    count, alloc);
	}
	pool_charge_phase(c, pool, bytes, count, alloc);
	for (f = attribute(c, tid, &t, &cross); f; f = f->up) {
		struct mp_pool_bucket *b = pool_bucket(inv_rec(c, f), pool);
		struct mp_pool_tag_bucket *tb = pool_tag_bucket(inv_rec(c, f), pool, tag);
		uint64_t net;

		if (!b || !tb) {
			c->oom = true;
			return;
		}
		if (alloc) {
			b->alloc_bytes += bytes;
			b->alloc_count += count;
			tb->alloc_bytes += bytes;
			tb->alloc_count += count;
		} else {
			b->free_bytes += bytes;
			b->free_count += count;
			tb->free_bytes += bytes;
			tb->free_count += count;
		}
		net = b->alloc_bytes - b->free_bytes;
		if (b->alloc_bytes > b->free_bytes && net > b->peak_added)
			b->peak_added = net;
	}
	if (!alloc)
		return;
	for (f = c->open_tail; f; f = f->prev) {
		struct mp_pool_bucket *b = pool_bucket(inv_rec(c, f), pool);

		if (!b) {
			c->oom = true;
			return;
		}
		if (mp->live_bytes > b->peak_bytes)
			b->peak_bytes = mp->live_bytes;
	}
}

/* The site of a pool slice: sites of the heap's kind with the pool set, in
 * the same table (the hash ignores the pool, lookups compare it). */
static uint32_t pool_site_of(struct mp_correlator *c, uint32_t pool, uint32_t tid, uint64_t caller)
{
	struct mp_profile *p = c->p;
	uint32_t owner = corr_owner_of(c, caller), name = MP_NONE, id;
	struct thread *t;
	struct frame *f = attribute(c, tid, &t, &(bool){ false });
	struct site_key k;

	if (f)
		name = f->name;
	k = (struct site_key){ .caller = caller,
			       .name = name,
			       .phase = c->cur_phase,
			       .owner = owner,
			       .tid = tid,
			       .pool = pool + 1 };
	if (mp_hashmap_find(&c->site_map, site_hash(&k), site_eq, p, &k, &id) == 0)
		return id;
	return corr_site_new(c, caller, name, c->cur_phase, owner, tid, 0, pool + 1);
}

static void pool_alloc_slice(struct mp_correlator *c, uint32_t pool, uint32_t tid, uint64_t addr,
			     uint64_t size, uint64_t caller)
{
	uint32_t old = corr_slice_find(c, pool, addr), slice, site;
	struct slice *sl;

	if (old) {
		/* Handed out again without being given back: the old slice
		 * is gone. */
		c->p->accounting_errors++;
		pool_charge(c, tid, pool, c->slices[old].ptag, c->slices[old].size, 1, false);
		corr_slice_remove(c, old);
	}
	slice = corr_slice_insert(c, pool, addr, size);
	if (!slice) {
		if (c->n_live_slices < MAX_SLICES)
			c->oom = true;
		c->p->dropped_markers++;
		return;
	}
	/* The tag open on the allocating thread, as for a heap block; its
	 * free is charged to the same tag. */
	sl = &c->slices[slice];
	sl->ptag = pool_tag_of(c, pool, open_tag(thread_find(c, tid)));
	pool_charge(c, tid, pool, sl->ptag, size, 1, true);
	site = pool_site_of(c, pool, tid, caller);
	if (site != MP_NONE) {
		struct mp_site *st = &c->p->sites[site];

		site_keep_peak(c, st);
		st->alloc_objects++;
		st->alloc_space += size;
		st->inuse_objects++;
		st->inuse_space += size;
		c->slices[slice].site = site + 1;
	}
}

static void slice_site_free(struct mp_correlator *c, uint32_t i)
{
	struct mp_site *st;

	if (!c->slices[i].site || c->slices[i].site > c->p->n_sites)
		return;
	st = &c->p->sites[c->slices[i].site - 1];
	/* limits: its site was evicted (sites.c) */
	if (st->flags & SITE_F_HOLE) {
		st = corr_site_retired_free(c, st);
		if (!st)
			return;
	}
	site_keep_peak(c, st);
	sub_clamped(&st->inuse_space, c->slices[i].size);
	sub_clamped(&st->inuse_objects, 1);
}

/* Frees slice @addr of @pool; with @any, of any probed pool if not there
 * (one free function for several pools: cudaFree of managed memory). */
static void pool_free_slice(struct mp_correlator *c, uint32_t pool, uint32_t tid, uint64_t addr,
			    bool any)
{
	uint32_t i = corr_slice_find(c, pool, addr);

	for (uint32_t pl = 0; !i && any && pl < c->p->n_mempools; pl++)
		if (c->p->mempools[pl].source == MP_POOL_SRC_PROBE)
			i = corr_slice_find(c, pl, addr);
	if (!i) {
		c->p->mempools[pool].unknown_frees++;
		return;
	}
	pool = c->slices[i].pool;
	pool_charge(c, tid, pool, c->slices[i].ptag, c->slices[i].size, 1, false);
	slice_site_free(c, i);
	corr_slice_remove(c, i);
}

/* Frees every slice of @pool, charged per tag of the pool (the last sum
 * holds slices without one). */
static void pool_reset(struct mp_correlator *c, uint32_t pool, uint32_t tid)
{
	struct mp_mempool *mp = &c->p->mempools[pool];
	uint32_t nt = mp->n_tags;
	bool sums = corr_grow((void **)&c->reset_sums, &c->reset_sums_cap, nt + 1,
			      sizeof(*c->reset_sums)) == 0;

	if (sums)
		memset(c->reset_sums, 0, (nt + 1) * sizeof(*c->reset_sums));
	else
		c->oom = true; /* the figures are lost anyway */
	while (c->pool_head[pool]) {
		uint32_t i = c->pool_head[pool];
		uint32_t k = c->slices[i].ptag < nt ? c->slices[i].ptag : nt;

		if (sums) {
			c->reset_sums[k].bytes += c->slices[i].size;
			c->reset_sums[k].count++;
		}
		slice_site_free(c, i);
		corr_slice_remove(c, i);
	}
	mp->resets++;
	for (uint32_t k = 0; sums && k <= nt; k++)
		if (c->reset_sums[k].count)
			pool_charge(c, tid, pool, k, c->reset_sums[k].bytes, c->reset_sums[k].count,
				    false);
}

int corr_pool_record(struct mp_correlator *c, const struct mp_record *rec)
{
	uint32_t pool;
	int r;

	r = mp_correlator_pool_declare(c, rec->name ? rec->name : "(null)", rec->pool.kind,
				       MP_POOL_SRC_API, &pool);
	if (r == -E2BIG || r == -EINVAL) {
		c->p->dropped_markers++;
		return 0;
	}
	if (r < 0)
		return r;
	switch (rec->type) {
	case MP_REC_POOL_ALLOC:
		pool_alloc_slice(c, pool, rec->tid, rec->pool.addr, rec->pool.size,
				 rec->pool.caller);
		break;
	case MP_REC_POOL_FREE:
		pool_free_slice(c, pool, rec->tid, rec->pool.addr, false);
		break;
	case MP_REC_POOL_RESET:
		pool_reset(c, pool, rec->tid);
		break;
	}
	return c->oom ? -ENOMEM : 0;
}

uint64_t corr_pool_heap_alloc(struct mp_correlator *c, const struct mp_heap_event *ev)
{
	uint32_t pool;

	if (ev->kind == MP_HEAP_FREE) {
		pool = (uint32_t)(ev->user >> U_OWNER_SHIFT) & U_POOL_MASK;
		if (pool < c->p->n_mempools)
			pool_free_slice(c, pool, ev->tid, ev->addr, true);
		return 0;
	}
	pool = c->fn_pool[ev->fn] - 1;
	if (ev->kind == MP_HEAP_UNKNOWN_FREE) {
		c->p->mempools[pool].unknown_frees++;
		return 0;
	}
	pool_alloc_slice(c, pool, ev->tid, ev->addr, ev->size, ev->caller);
	return U_POOL_FLAG | (uint64_t)pool << U_OWNER_SHIFT;
}
