/* SPDX-License-Identifier: MIT */
/*
 * The heap's accounting steps, always inlined: heap.c (an allocation, a
 * free) and temporary.c (both at once) build their per-record paths from
 * them, so that the in-process path runs one function per record
 * (docs/RING.md "Consumer: reading and merging"). Not an interface.
 */
#ifndef MP_CORRELATE_HEAP_IMPL_H
#define MP_CORRELATE_HEAP_IMPL_H

#include "correlator_impl.h"

/* @var: the variance of @size as an estimate (0 when exact). */
static inline __attribute__((always_inline)) void mem_alloc(struct mp_mem_stats *m, uint64_t size,
							    double var)
{
	add_signed(&m->bytes_added, size);
	m->tensors_added++;
	m->alloc_bytes += size;
	m->alloc_count++;
	if (var) /* only sampled mode has any: keep precise mode's path */
		m->alloc_var += var;
}

static inline __attribute__((always_inline)) void mem_free(struct mp_mem_stats *m, uint64_t size,
							   double var)
{
	add_signed(&m->bytes_added, -size);
	m->tensors_added--;
	m->free_bytes += size;
	m->free_count++;
	if (var) /* only sampled mode has any: keep precise mode's path */
		m->free_var += var;
}

/* @hint: index + 1 of the bucket found last time (0: none), tried first
 * and updated. */
static inline int bucket_add(struct mp_bucket **v, uint32_t *n, uint32_t *hint, uint32_t id,
			     uint64_t size, bool alloc)
{
	struct mp_bucket *b = NULL;

	/* *hint 0 wraps to UINT32_MAX: no bucket */
	if (*hint - 1 < *n && (*v)[*hint - 1].id == id) {
		b = &(*v)[*hint - 1];
	} else {
		for (uint32_t i = 0; i < *n; i++) {
			if ((*v)[i].id == id) {
				b = &(*v)[i];
				break;
			}
		}
		if (!b) {
			if (corr_grow_implicit((void **)v, *n, sizeof(**v)) < 0)
				return -ENOMEM;
			b = &(*v)[(*n)++];
			*b = (struct mp_bucket){ .id = id };
		}
		*hint = (uint32_t)(b - *v) + 1;
	}
	if (alloc) {
		b->alloc_bytes += size;
		b->alloc_count++;
	} else {
		b->free_bytes += size;
		b->free_count++;
	}
	return 0;
}

static inline __attribute__((always_inline)) void
pool_alloc(const struct mp_correlator *c, struct mp_pool *pl, uint64_t size, double var)
{
	pool_keep_peak(c, pl);
	mem_alloc(&pl->mem, size, var);
	pl->live_bytes += size;
	pl->live_count++;
	if (pl->live_bytes > pl->peak_bytes)
		pl->peak_bytes = pl->live_bytes;
}

static inline __attribute__((always_inline)) void
pool_free(const struct mp_correlator *c, struct mp_pool *pl, uint64_t size, double var)
{
	pool_keep_peak(c, pl);
	mem_free(&pl->mem, size, var);
	sub_clamped(&pl->live_bytes, size);
	sub_clamped(&pl->live_count, 1);
}

/* Charges one alloc/free to @f and every kernel enclosing it. */
static inline __attribute__((always_inline)) void charge(struct mp_correlator *c, struct frame *f,
							 uint64_t size, double var, bool alloc,
							 uint32_t owner, uint32_t tag)
{
	struct mp_invocation *r = inv_rec(c, f);

	if (alloc)
		mem_alloc(&r->excl, size, var);
	else
		mem_free(&r->excl, size, var);
	for (; f; f = f->up) {
		r = inv_rec(c, f);
		if (alloc) {
			mem_alloc(&r->incl, size, var);
			if (r->incl.bytes_added > 0 &&
			    (uint64_t)r->incl.bytes_added > r->peak_added)
				r->peak_added = r->incl.bytes_added;
		} else {
			mem_free(&r->incl, size, var);
		}
		if (bucket_add(&r->owners, &r->n_owners, &f->own_ix, owner, size, alloc) < 0 ||
		    bucket_add(&r->tags, &r->n_tags, &f->tag_ix, tag, size, alloc) < 0)
			c->oom = true;
	}
}

/* The hint slot for @ev's thread and caller, or thread and stack; NULL
 * when the site and owner must be looked up each time: no owner cache
 * (owners resolved anew at each call), unless the owner comes from the
 * stack's frames (rules: kept per stack). A stack's slot is its thread's
 * stack's: an allocation with the stack of one shortly before it (a
 * loop's) finds its site there, in a line still in cache. */
static struct site_hint *site_hint_of(struct mp_correlator *c, const struct mp_heap_event *ev)
{
	if (ev->stack)
		return c->owner_cache || c->n_rules ?
			       &c->site_hint[(ev->stack * 0x9e3779b1u ^ ev->tid) &
					     (SITE_HINTS - 1)] :
			       NULL;
	if (!c->owner_cache)
		return NULL;
	return &c->site_hint[(ev->caller ^ ev->caller >> 9 ^ ev->tid * 0x9e3779b1u) &
			     (SITE_HINTS - 1)];
}

/* Where an allocation is charged: its kernel (frame, NULL: none), thread,
 * owner, tag, kernel name and site. */
struct alloc_at {
	struct frame *f;
	struct thread *t;
	bool cross;
	uint32_t owner, tag, name, site;
};

/* The first half of on_alloc_(): the attribution, the owner and the site
 * (found, or created and counted as on_alloc_() counts them). */
static inline __attribute__((always_inline)) void
alloc_at_(struct mp_correlator *c, const struct mp_heap_event *ev, struct alloc_at *a)
{
	struct site_hint *hint;

	a->f = attribute(c, ev->tid, &a->t, &a->cross);
	a->name = a->f ? a->f->name : MP_NONE;
	/* With a stack and rules, every frame can name the owner. */
	hint = site_hint_of(c, ev);
	if (hint && hint->caller == ev->caller && hint->tid == ev->tid &&
	    hint->stack == ev->stack && hint->name == a->name && hint->phase == c->cur_phase &&
	    hint->gen == c->site_gen) {
		a->owner = hint->owner;
		a->site = hint->site;
	} else {
		a->owner = ev->stack && c->n_rules ? corr_owner_of_stack(c, ev->caller, ev->stack) :
						     corr_owner_of(c, ev->caller);
		a->site = corr_site_of(c, ev->caller, a->name, c->cur_phase, a->owner, ev->tid,
				       ev->stack);
		/* a site beyond the cap is counted at each allocation (in
		 * sites_dropped: its "(other sites)" entry is never a hint) */
		if (hint && a->site != MP_NONE && !(c->p->sites[a->site].flags & MP_SITE_F_OTHER))
			*hint = (struct site_hint){ .caller = ev->caller,
						    .tid = ev->tid,
						    .stack = ev->stack,
						    .name = a->name,
						    .phase = c->cur_phase,
						    .gen = c->site_gen,
						    .owner = a->owner,
						    .site = a->site };
	}
	a->tag = open_tag(a->t);
}

/* The second half of on_alloc_(): the figures of an allocation charged at
 * @a. @sampled: c->opts.sample_bytes is set. Precise mode's copy (false)
 * has none of sampled mode's variance code: @var is 0 there. */
static inline __attribute__((always_inline)) uint64_t alloc_charge_(struct mp_correlator *c,
								    const struct mp_heap_event *ev,
								    const struct alloc_at *a,
								    const bool sampled)
{
	struct mp_profile *p = c->p;
	uint32_t owner = a->owner, tag = a->tag, name = a->name, inv = MP_NONE, site = a->site;
	struct frame *f = a->f;
	double var;

	var = sampled ? corr_sampled_alloc(c, ev) : 0;

	c->live_bytes += ev->size;
	c->live_count++;
	mem_alloc(&p->mem, ev->size, var);
	/* before the peaks: they keep what the owner and tag held before
	 * (pool_keep_peak()), then a new peak sees the block in them */
	pool_alloc(c, &p->owners[owner], ev->size, var);
	pool_alloc(c, &p->tags[tag], ev->size, var);
	if (c->live_bytes > p->peak_bytes) {
		p->peak_bytes = c->live_bytes;
		p->peak_var = c->live_var;
		site_new_peak(c, site, ev->size);
		process_new_peak(c);
	}
	if (c->live_count > p->peak_tensors)
		p->peak_tensors = c->live_count;
	if (c->cur_phase != MP_NONE) {
		struct mp_phase *ph = &p->phases[c->cur_phase];

		mem_alloc(&ph->mem, ev->size, var);
		if (c->live_bytes > ph->peak_bytes) {
			ph->peak_bytes = c->live_bytes;
			ph->peak_var = c->live_var;
			phase_new_peak(c);
		}
	}

	if (f) {
		struct mp_invocation *r = inv_rec(c, f);

		inv = f->inv;
		r->retained_bytes += ev->size;
		r->retained_count++;
		p->kernels[name].retained_bytes += ev->size;
		p->kernels[name].retained_count++;
		if (a->cross) {
			r->cross_thread_allocs++;
			r->cross_thread_bytes += ev->size;
		}
		charge(c, f, ev->size, var, true, owner, tag);
	}
	/* Peaks of open invocations decrease in begin order (an earlier one
	 * has seen everything a later one has): update only the tail that
	 * is below the new level. */
	for (struct frame *g = c->open_tail; g; g = g->prev) {
		struct mp_invocation *r = inv_rec(c, g);

		if (r->peak_bytes >= c->live_bytes)
			break;
		r->peak_bytes = c->live_bytes;
		r->peak_var = c->live_var;
	}
	/* All of sampled mode's figures; an exact block (var 0) can move a
	 * peak there too. */
	if (sampled)
		corr_sampled_tail(c, f, var, true, MP_NONE, site, owner, tag);
	if (site != MP_NONE) {
		struct mp_site *st = &p->sites[site];

		site_keep_peak(c, st);
		st->alloc_objects++;
		st->alloc_space += ev->size;
		st->inuse_objects++;
		st->inuse_space += ev->size;
		if (__builtin_expect(st->flags & MP_SITE_F_OTHER, 0))
			return U_OTHER_FLAG | (uint64_t)owner << U_OWNER_SHIFT |
			       (uint64_t)tag << U_TAG_SHIFT | (uint64_t)(name + 1) << U_NAME_SHIFT |
			       (uint64_t)(inv + 1) << U_INV_SHIFT;
		return U_SITE_FLAG | (uint64_t)(site & U_POOL_MASK) << U_OWNER_SHIFT |
		       (uint64_t)tag << U_TAG_SHIFT | (uint64_t)(site >> 12) << U_NAME_SHIFT |
		       (uint64_t)(inv + 1) << U_INV_SHIFT;
	}
	return (uint64_t)owner << U_OWNER_SHIFT | (uint64_t)tag << U_TAG_SHIFT |
	       (uint64_t)(name + 1) << U_NAME_SHIFT | (uint64_t)(inv + 1) << U_INV_SHIFT;
}

#endif /* MP_CORRELATE_HEAP_IMPL_H */
