/* SPDX-License-Identifier: MIT */
/*
 * Anonymous mappings the program made itself (mmap, mremap, munmap from
 * the syscall tracepoints): a view apart from the heap (docs/PROFILE.md
 * "Mappings"). Their blocks share the live table with the heap's, so a
 * munmap or mremap is paired as a free is; their figures are in no heap
 * figure. Mapping events are syscalls, rare beside the malloc family: this
 * file is off the per-record path (on_heap() routes them here through the
 * branch of probed pool functions, which costs the heap nothing more).
 */
#include "correlator_impl.h"

static void map_traffic(struct mp_map_stats *m, uint64_t size, bool alloc)
{
	if (alloc) {
		m->alloc_bytes += size;
		m->alloc_count++;
	} else {
		m->free_bytes += size;
		m->free_count++;
	}
}

/* Figures with a live total of their own: the profile's, an owner's, a
 * tag's. */
static void map_own(struct mp_map_stats *m, uint64_t size, bool alloc)
{
	map_traffic(m, size, alloc);
	if (alloc) {
		m->live_bytes += size;
		if (m->live_bytes > m->peak_bytes)
			m->peak_bytes = m->live_bytes;
	} else {
		sub_clamped(&m->live_bytes, size);
	}
}

/* The traffic of the kernel open on @tid (and of those enclosing it, and
 * of the phase) under the attribution rule of heap blocks. */
static struct frame *map_charge(struct mp_correlator *c, uint32_t tid, uint64_t size, bool alloc,
				struct thread **ret_thr)
{
	struct frame *f, *g;
	bool cross;

	f = attribute(c, tid, ret_thr, &cross);
	for (g = f; g; g = g->up)
		map_traffic(&inv_rec(c, g)->maps, size, alloc);
	if (c->cur_phase != MP_NONE) {
		struct mp_phase *ph = &c->p->phases[c->cur_phase];

		map_traffic(&ph->maps, size, alloc);
		if (c->maps_live > ph->maps.peak_bytes)
			ph->maps.peak_bytes = c->maps_live;
	}
	/* every open invocation sees the process's level */
	for (g = c->open_head; g; g = g->next) {
		struct mp_invocation *r = inv_rec(c, g);

		if (c->maps_live > r->maps.peak_bytes)
			r->maps.peak_bytes = c->maps_live;
	}
	return f;
}

static uint64_t map_alloc(struct mp_correlator *c, const struct mp_heap_event *ev)
{
	struct mp_profile *p = c->p;
	struct thread *t;
	struct frame *f;
	uint32_t owner, tag, name, inv;

	/* as the heap's: no address space holds more (a hostile size) */
	if (ev->size > CORR_SIZE_LIMIT - c->maps_live) {
		p->rejected[MP_REJECT_SIZE]++;
		p->corruption |= MP_CORRUPT_RECORDS_REJECTED;
		return 0;
	}
	c->maps_live += ev->size;
	f = map_charge(c, ev->tid, ev->size, true, &t);
	owner = ev->stack && c->n_rules ? corr_owner_of_stack(c, ev->caller, ev->stack) :
					  corr_owner_of(c, ev->caller);
	tag = open_tag(t);
	name = f ? f->name : MP_NONE;
	inv = f ? f->inv : MP_NONE;
	map_own(&p->maps, ev->size, true);
	if (owner < p->n_owners)
		map_own(&p->owners[owner].maps, ev->size, true);
	if (tag < p->n_tags)
		map_own(&p->tags[tag].maps, ev->size, true);
	return U_MAP_FLAGS | (uint64_t)owner << U_OWNER_SHIFT | (uint64_t)tag << U_TAG_SHIFT |
	       (uint64_t)((name + 1) & U_NAME_MASK) << U_NAME_SHIFT |
	       (uint64_t)((inv + 1) & U_INV_MASK) << U_INV_SHIFT;
}

static void map_free(struct mp_correlator *c, const struct mp_heap_event *ev)
{
	struct mp_profile *p = c->p;
	uint32_t owner = (ev->user >> U_OWNER_SHIFT) & U_POOL_MASK;
	uint32_t tag = (ev->user >> U_TAG_SHIFT) & U_POOL_MASK;
	struct thread *t;

	if (ev->size > c->maps_live) {
		p->accounting_errors++;
		return;
	}
	c->maps_live -= ev->size;
	map_own(&p->maps, ev->size, false);
	if (owner < p->n_owners)
		map_own(&p->owners[owner].maps, ev->size, false);
	if (tag < p->n_tags)
		map_own(&p->tags[tag].maps, ev->size, false);
	map_charge(c, ev->tid, ev->size, false, &t);
}

uint64_t corr_map_event(struct mp_correlator *c, const struct mp_heap_event *ev)
{
	switch (ev->kind) {
	case MP_HEAP_ALLOC:
		return map_alloc(c, ev);
	case MP_HEAP_FREE:
		map_free(c, ev);
		return 0;
	default:
		/* the live table pairs munmap and mremap only with mappings
		 * it saw made: nothing else comes here */
		return 0;
	}
}

void corr_maps_begin(const struct mp_correlator *c, struct mp_invocation *r)
{
	r->maps.peak_bytes = c->maps_live;
}

void corr_maps_end(const struct mp_correlator *c, struct mp_invocation *r)
{
	r->maps.live_bytes = c->maps_live;
}

void corr_maps_phase_enter(const struct mp_correlator *c, struct mp_phase *ph)
{
	if (c->maps_live > ph->maps.peak_bytes)
		ph->maps.peak_bytes = c->maps_live;
}

void corr_maps_phase_leave(const struct mp_correlator *c, struct mp_phase *ph)
{
	ph->maps.live_bytes = c->maps_live;
}

void corr_maps_aggregate(struct mp_kernel *k, const struct mp_invocation *r)
{
	k->maps.alloc_bytes += r->maps.alloc_bytes;
	k->maps.alloc_count += r->maps.alloc_count;
	k->maps.free_bytes += r->maps.free_bytes;
	k->maps.free_count += r->maps.free_count;
	k->maps.live_bytes = r->maps.live_bytes;
	if (r->maps.peak_bytes > k->maps.peak_bytes)
		k->maps.peak_bytes = r->maps.peak_bytes;
}

void corr_maps_rss(struct mp_correlator *c, uint64_t rss_anon)
{
	uint64_t res;

	if (rss_anon == MP_UNKNOWN)
		return;
	/* An upper bound: the mappings' resident pages are anonymous and
	 * within their reserved bytes. */
	res = c->maps_live < rss_anon ? c->maps_live : rss_anon;
	if (c->p->maps_resident_peak == MP_UNKNOWN || res > c->p->maps_resident_peak)
		c->p->maps_resident_peak = res;
}
