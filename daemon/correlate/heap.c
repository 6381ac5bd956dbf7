/* SPDX-License-Identifier: MIT */
/* Heap events: the accounting of an allocation and of its free. */
#include "correlator_impl.h"
#include "heap_impl.h"
#include "live_impl.h"
#include "sampling.h"

/* @sampled: as for alloc_charge_(). */
static inline __attribute__((always_inline)) uint64_t
on_alloc_(struct mp_correlator *c, const struct mp_heap_event *ev, const bool sampled)
{
	struct alloc_at a;

	alloc_at_(c, ev, &a);
	return alloc_charge_(c, ev, &a, sampled);
}

/* @sampled: as for on_alloc_(). */
static inline __attribute__((always_inline)) void
on_free_(struct mp_correlator *c, const struct mp_heap_event *ev, const bool sampled)
{
	struct mp_profile *p = c->p;
	uint32_t owner = (ev->user >> U_OWNER_SHIFT) & U_POOL_MASK;
	uint32_t tag = (ev->user >> U_TAG_SHIFT) & U_POOL_MASK;
	uint32_t name = (uint32_t)((ev->user >> U_NAME_SHIFT) & U_NAME_MASK) - 1;
	uint32_t inv = (uint32_t)((ev->user >> U_INV_SHIFT) & U_INV_MASK) - 1;
	struct mp_site *st = NULL;
	struct thread *t;
	struct frame *f;
	bool cross;
	double var = 0;

	if (ev->user & U_SITE_FLAG) {
		uint32_t site = owner | (uint32_t)((ev->user >> U_NAME_SHIFT) & U_NAME_MASK) << 12;

		owner = MP_OWNER_UNKNOWN;
		name = MP_NONE;
		if (site < p->n_sites) {
			st = &p->sites[site];
			owner = st->owner;
			name = st->name;
			/* limits: its site was evicted (sites.c) */
			if (__builtin_expect(st->flags & SITE_F_HOLE, 0))
				st = corr_site_retired_free(c, st);
		}
	} else if (__builtin_expect(ev->user & U_OTHER_FLAG, 0) && c->other_site[0]) {
		st = &p->sites[c->other_site[0] - 1]; /* limits: "(other sites)" */
	}

	if (owner >= p->n_owners)
		owner = MP_OWNER_UNKNOWN;
	if (tag >= p->n_tags)
		tag = MP_TAG_NONE;
	if (ev->size > c->live_bytes || !c->live_count) {
		/* The tracer paired a free we never saw allocated. */
		p->accounting_errors++;
		return;
	}
	c->live_bytes -= ev->size;
	c->live_count--;
	if (sampled && (ev->flags & MP_HEAP_F_SCALED)) {
		var = mp_sample_var(ev->size, c->opts.sample_bytes, 1);
		/* no rounding residue once the last one is gone */
		if (c->live_scaled)
			c->live_scaled--;
		c->live_var = c->live_scaled && c->live_var > var ? c->live_var - var : 0;
	}
	if (st) {
		site_keep_peak(c, st);
		sub_clamped(&st->inuse_space, ev->size);
		sub_clamped(&st->inuse_objects, 1);
	}
	mem_free(&p->mem, ev->size, var);
	if (c->cur_phase != MP_NONE)
		mem_free(&p->phases[c->cur_phase].mem, ev->size, var);
	pool_free(c, &p->owners[owner], ev->size, var);
	pool_free(c, &p->tags[tag], ev->size, var);
	if (name < p->n_kernels) {
		sub_clamped(&p->kernels[name].retained_bytes, ev->size);
		sub_clamped(&p->kernels[name].retained_count, 1);
	}
	if (inv < p->n_invocations) {
		sub_clamped(&p->invocations[inv].retained_bytes, ev->size);
		sub_clamped(&p->invocations[inv].retained_count, 1);
	}
	f = attribute(c, ev->tid, &t, &cross);
	if (f)
		charge(c, f, ev->size, var, false, owner, tag);
	if (sampled)
		corr_sampled_tail(c, f, var, false, inv, st ? (uint32_t)(st - p->sites) : MP_NONE,
				  owner, tag);
}

/* Sampled mode's copies, out of line: only precise mode's are inlined
 * into every caller. */
static __attribute__((noinline)) uint64_t on_alloc_sampled(struct mp_correlator *c,
							   const struct mp_heap_event *ev)
{
	return on_alloc_(c, ev, true);
}

static __attribute__((noinline)) void on_free_sampled(struct mp_correlator *c,
						      const struct mp_heap_event *ev)
{
	on_free_(c, ev, true);
}

static inline __attribute__((always_inline)) uint64_t on_alloc(struct mp_correlator *c,
							       const struct mp_heap_event *ev)
{
	return c->opts.sample_bytes ? on_alloc_sampled(c, ev) : on_alloc_(c, ev, false);
}

static inline __attribute__((always_inline)) void on_free(struct mp_correlator *c,
							  const struct mp_heap_event *ev)
{
	if (c->opts.sample_bytes)
		on_free_sampled(c, ev);
	else
		on_free_(c, ev, false);
}

/* mp_correlator_on_heap(), inlined into mp_correlator_apply_heap(). */
/* A block released by the exec just recorded (mp_correlator_on_exec()). */
static void exec_released(struct mp_correlator *c, const struct mp_heap_event *ev)
{
	struct mp_profile *p = c->p;

	if (!p->n_execs || p->exec_count != p->n_execs)
		return; /* beyond the execs kept: counted in exec_count only */
	p->execs[p->n_execs - 1].released_bytes += ev->size;
	p->execs[p->n_execs - 1].released_blocks++;
}

/* The smallest alignment of a block of any malloc on Linux: glibc's
 * MALLOC_ALIGNMENT is 16 on 64-bit targets (8 on i386); jemalloc,
 * tcmalloc and mimalloc give 8-byte requests 8-byte blocks. */
#define MALLOC_MIN_ALIGN 8u

/* A free of a block never seen allocated: one allocated before the attach
 * (or whose allocation the daemon lost), counted apart, or a forged one,
 * refused by reason (docs/PROFILE.md "Corruption"). Pools and functions
 * named on the command line have their own rules (pools.c): only the
 * malloc family's are held to malloc's. */
static __attribute__((noinline)) void unknown_free(struct mp_correlator *c,
						   const struct mp_heap_event *ev)
{
	enum mp_reject why = MP_REJECT_COUNT;

	/* No allocator hands out an address past every user address space */
	if (ev->addr >= CORR_SIZE_LIMIT)
		why = MP_REJECT_FREE;
	else if (ev->fn < MP_FN_MMAP && ev->addr % MALLOC_MIN_ALIGN)
		why = MP_REJECT_FREE_MISALIGNED;
	else if (ev->fn < MP_FN_MMAP && c->opts.free_internal &&
		 c->opts.free_internal(c->opts.free_ctx, ev->caller)) {
		c->p->internal_frees++;
		return;
	} else if (ev->fn < MP_FN_MMAP && c->opts.free_mapped &&
		   !c->opts.free_mapped(c->opts.free_ctx, ev->addr, ev->ts_ns))
		why = MP_REJECT_FREE_UNMAPPED;
	if (why == MP_REJECT_COUNT) {
		c->p->unknown_frees++;
		return;
	}
	c->p->rejected[why]++;
	c->p->corruption |= MP_CORRUPT_RECORDS_REJECTED;
}

static inline __attribute__((always_inline)) uint64_t on_heap(struct mp_correlator *c,
							      const struct mp_heap_event *ev)
{
	if (c->finished)
		return 0;
	start(c, ev->ts_ns);
	if (pool_heap_event(c, ev)) {
		/* a copy: @ev itself stays out of memory on the heap's path */
		struct mp_heap_event copy = *ev;

		if (ev->kind == MP_HEAP_FREE ? (ev->user & U_MAP_FLAGS) == U_MAP_FLAGS :
					       c->fn_pool[ev->fn] == FN_POOL_MAP)
			return corr_map_event(c, &copy);
		return corr_pool_heap_alloc(c, &copy);
	}
	switch (ev->kind) {
	case MP_HEAP_ALLOC:
		return on_alloc(c, ev);
	case MP_HEAP_FREE:
		on_free(c, ev);
		if (__builtin_expect(ev->flags & MP_HEAP_F_EXEC, 0))
			exec_released(c, ev);
		break;
	case MP_HEAP_UNKNOWN_FREE:
		unknown_free(c, ev);
		break;
	default:
		break;
	}
	return 0;
}

uint64_t mp_correlator_on_heap(void *ctx, const struct mp_heap_event *ev)
{
	struct mp_correlator *c = ctx;

	/* the blocks' values are the caller's to keep (sites.c) */
	if (!c->values)
		c->users_outside = true;
	return on_heap(c, ev);
}

/* mp_correlator_apply_heap()'s callback: the stack id of the event being
 * applied is in c->apply_stack (a pointer to a context on the stack would
 * keep the event out of registers). */
static inline __attribute__((always_inline)) uint64_t on_heap_stack(void *ctx,
								    const struct mp_heap_event *ev)
{
	struct mp_correlator *c = ctx;

	if (ev->kind == MP_HEAP_ALLOC && c->apply_stack) {
		struct mp_heap_event with = *ev;

		with.stack = c->apply_stack;
		return on_heap(c, &with);
	}
	return on_heap(c, ev);
}

/* The live table's callback when every heap event is shown to
 * opts.observe_heap (--dump-events): out of line, apart from the
 * per-record path. */
static uint64_t on_heap_observed(void *ctx, const struct mp_heap_event *ev)
{
	struct mp_correlator *c = ctx;

	c->opts.observe_heap(c->opts.observe_ctx, ev);
	if (ev->kind == MP_HEAP_ALLOC && c->apply_stack) {
		struct mp_heap_event with = *ev;

		with.stack = c->apply_stack;
		return on_heap(c, &with);
	}
	return on_heap(c, ev);
}

int mp_correlator_apply_heap(struct mp_correlator *c, const struct mp_raw_event *ev, uint32_t stack)
{
	int r;

	if (corr_size_refused(c, ev))
		return 0;
	c->apply_stack = stack;
	if (__builtin_expect(c->opts.observe_heap != NULL, 0))
		r = mp_live_apply(c->live, ev, on_heap_observed, c);
	else
		r = mp_live_apply_inline_(c->live, ev, on_heap_stack, c);
	c->apply_stack = 0;
	return r;
}

bool mp_correlator_heap_refused(struct mp_correlator *c, const struct mp_raw_event *ev)
{
	return corr_size_refused(c, ev);
}

void mp_correlator_prefetch_heap(const struct mp_correlator *c, uint64_t addr, uint64_t old_addr)
{
	const struct mp_live *l = c->live;

	if (addr)
		__builtin_prefetch(&l->slots[mp_live_slot_of_(l, addr)]);
	if (old_addr)
		__builtin_prefetch(&l->slots[mp_live_slot_of_(l, old_addr)]);
}

void mp_correlator_values_in(struct mp_correlator *c, struct mp_live *l)
{
	c->values = l;
}

const struct mp_live *mp_correlator_live(const struct mp_correlator *c)
{
	return c->live;
}
