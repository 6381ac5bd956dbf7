/* SPDX-License-Identifier: MIT */
/* Temporary allocations (heaptrack's term): an allocation and the free
 * right after it, accounted in one step. */
#include "correlator_impl.h"
#include "heap_impl.h"
#include "live_impl.h"

/* An allocation freed by the next event: its counts, not its level. */
static inline __attribute__((always_inline)) void mem_temp(struct mp_mem_stats *m, uint64_t size)
{
	m->alloc_bytes += size;
	m->alloc_count++;
	m->free_bytes += size;
	m->free_count++;
}

static inline __attribute__((always_inline)) void pool_temp(struct mp_pool *pl, uint64_t size)
{
	mem_temp(&pl->mem, size);
	if (pl->live_bytes + size > pl->peak_bytes)
		pl->peak_bytes = pl->live_bytes + size;
}

/* A new peak, the process's or the phase's (@phase), reached by a
 * temporary block of @size of owner @o and tag @t: live there, though
 * their live bytes never hold it. */
static inline __attribute__((always_inline)) void pool_temp_peak(struct mp_correlator *c,
								 struct mp_pool *o,
								 struct mp_pool *t, uint64_t size,
								 bool phase)
{
	/* what they hold is theirs at the earlier peaks */
	pool_keep_peak(c, o);
	pool_keep_peak(c, t);
	if (phase) {
		phase_new_peak(c);
		o->ph_share = o->live_bytes + size;
		t->ph_share = t->live_bytes + size;
	} else {
		process_new_peak(c);
		o->peak_share = o->live_bytes + size;
		t->peak_share = t->live_bytes + size;
	}
	o->epoch = t->epoch = c->epoch;
}

static inline void bucket_temp(struct mp_bucket **v, uint32_t *n, uint32_t *hint, uint32_t id,
			       uint64_t size, bool *oom)
{
	if (bucket_add(v, n, hint, id, size, true) < 0)
		*oom = true;
	else
		(*v)[*hint - 1].free_bytes += size, (*v)[*hint - 1].free_count++;
}

/* charge() of the allocation, then of its free. */
static inline __attribute__((always_inline)) void
charge_temp(struct mp_correlator *c, struct frame *f, uint64_t size, uint32_t owner, uint32_t tag)
{
	mem_temp(&inv_rec(c, f)->excl, size);
	for (; f; f = f->up) {
		struct mp_invocation *r = inv_rec(c, f);
		int64_t added = (int64_t)((uint64_t)r->incl.bytes_added + size);

		mem_temp(&r->incl, size);
		if (added > 0 && (uint64_t)added > r->peak_added)
			r->peak_added = (uint64_t)added;
		bucket_temp(&r->owners, &r->n_owners, &f->own_ix, owner, size, &c->oom);
		bucket_temp(&r->tags, &r->n_tags, &f->tag_ix, tag, size, &c->oom);
	}
}

/* Whether an allocation of @size charged at @a and freed right after
 * leaves every level it passes through where it was: on_free_() clamps
 * or rejects a free larger than a level, so a level that wrapped on the
 * way up would not come back (hostile sizes). */
static inline __attribute__((always_inline)) bool temp_fits(const struct mp_correlator *c,
							    const struct alloc_at *a, uint64_t size)
{
	const struct mp_profile *p = c->p;
	uint64_t top = c->live_bytes;

	if (p->owners[a->owner].live_bytes > top)
		top = p->owners[a->owner].live_bytes;
	if (p->tags[a->tag].live_bytes > top)
		top = p->tags[a->tag].live_bytes;
	if (a->f) {
		if (p->kernels[a->name].retained_bytes > top)
			top = p->kernels[a->name].retained_bytes;
		if (inv_rec((struct mp_correlator *)c, a->f)->retained_bytes > top)
			top = inv_rec((struct mp_correlator *)c, a->f)->retained_bytes;
	}
	if (a->site != MP_NONE && p->sites[a->site].inuse_space > top)
		top = p->sites[a->site].inuse_space;
	return top + size >= top;
}

/* alloc_charge_() then on_free_() of the same block by the same thread,
 * nothing in between (precise mode, temp_fits()): the cumulative figures
 * and the peaks the block's level reached, the running levels untouched. */
static inline __attribute__((always_inline)) void
temp_charge_(struct mp_correlator *c, uint64_t size, const struct alloc_at *a)
{
	struct mp_profile *p = c->p;
	uint64_t level = c->live_bytes + size;
	struct frame *f = a->f;

	mem_temp(&p->mem, size);
	if (level > p->peak_bytes) {
		p->peak_bytes = level;
		p->peak_var = c->live_var;
		site_new_peak(c, a->site, size);
		pool_temp_peak(c, &p->owners[a->owner], &p->tags[a->tag], size, false);
	}
	if (c->live_count + 1 > p->peak_tensors)
		p->peak_tensors = c->live_count + 1;
	if (c->cur_phase != MP_NONE) {
		struct mp_phase *ph = &p->phases[c->cur_phase];

		mem_temp(&ph->mem, size);
		if (level > ph->peak_bytes) {
			ph->peak_bytes = level;
			ph->peak_var = c->live_var;
			pool_temp_peak(c, &p->owners[a->owner], &p->tags[a->tag], size, true);
		}
	}
	pool_temp(&p->owners[a->owner], size);
	pool_temp(&p->tags[a->tag], size);
	if (f) {
		struct mp_invocation *r = inv_rec(c, f);

		/* the free gives back the retained figures of a kept record
		 * only (on_free_(): inv < n_invocations), not a scratch one */
		if (f->inv == MP_NONE) {
			r->retained_bytes += size;
			r->retained_count++;
		}
		if (a->cross) {
			r->cross_thread_allocs++;
			r->cross_thread_bytes += size;
		}
		charge_temp(c, f, size, a->owner, a->tag);
	}
	for (struct frame *g = c->open_tail; g; g = g->prev) {
		struct mp_invocation *r = inv_rec(c, g);

		if (r->peak_bytes >= level)
			break;
		r->peak_bytes = level;
		r->peak_var = c->live_var;
	}
	if (a->site != MP_NONE) {
		struct mp_site *st = &p->sites[a->site];

		st->alloc_objects++;
		st->alloc_space += size;
	}
}

/* mp_live_do_alloc_()'s callback in the fallback of
 * mp_correlator_apply_temporary(): the block's value, charged already. */
static inline __attribute__((always_inline)) uint64_t temp_user(void *ctx,
								const struct mp_heap_event *ev)
{
	(void)ev;
	return *(const uint64_t *)ctx;
}

int mp_correlator_apply_temporary(struct mp_correlator *c, const struct mp_raw_event *al,
				  uint32_t stack, const struct mp_raw_event *fr)
{
	struct mp_live *l = c->live;
	struct mp_heap_event he;
	struct alloc_at a;
	uint64_t user;
	bool full;
	int r;

	if (c->finished || c->opts.sample_bytes || c->opts.observe_heap ||
	    al->size > CORR_SIZE_LIMIT - c->live_bytes || al->type != MP_RAW_ALLOC || !al->addr ||
	    (al->fn & MP_LIVE_FN_SCALED) || (al->fn < FN_POOL_MAX && c->fn_pool[al->fn]) ||
	    fr->type != MP_RAW_FREE || fr->addr != al->addr || fr->tid != al->tid ||
	    fr->fn == MP_FN_MUNMAP || (fr->fn & MP_LIVE_FN_SCALED) ||
	    /* a free whose size field corr_size_refused() would refuse
	     * after the allocation: refused there, as in two steps */
	    fr->size > CORR_SIZE_LIMIT - c->live_bytes - al->size)
		goto two_steps;
	/* as the allocation's own step: the table grows at the same point;
	 * a table at its bound still takes a temporary, which needs no slot */
	r = mp_live_reserve_(l);
	if (r < 0 && r != -ENOSPC)
		return r;
	full = r == -ENOSPC;
	/* a block still live there: the allocation forgets it first */
	if (mp_live_find_(l, al->addr))
		goto two_steps;
	he = (struct mp_heap_event){ .kind = MP_HEAP_ALLOC,
				     .fn = al->fn,
				     .tid = al->tid,
				     .ts_ns = al->ts_ns,
				     .addr = al->addr,
				     .size = al->size,
				     .caller = al->caller,
				     .stack = stack };
	start(c, al->ts_ns);
	alloc_at_(c, &he, &a);
	if (__builtin_expect(!temp_fits(c, &a, al->size), 0)) {
		if (full)
			goto two_steps;
		/* the two steps, the first one's attribution done */
		user = alloc_charge_(c, &he, &a, false);
		mp_live_do_alloc_(l, al, al->addr, temp_user, &user);
		return mp_correlator_apply_heap(c, fr, 0);
	}
	temp_charge_(c, al->size, &a);
	mp_live_temp_(l, al, fr);
	return 0;

two_steps:
	r = mp_correlator_apply_heap(c, al, stack);
	if (r < 0)
		return r;
	return mp_correlator_apply_heap(c, fr, 0);
}
