/* SPDX-License-Identifier: MIT */
/*
 * The live-allocation table's inside, for live.c and for the correlator's
 * fused in-process path (mp_correlator_apply_heap(), correlator.h): one
 * implementation of mp_live_apply(), inlined where it is used so that the
 * heap-event callback can be inlined into it too. Not an interface: use
 * live.h.
 */
#ifndef MP_LIVE_IMPL_H
#define MP_LIVE_IMPL_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <string.h>

#include "live.h"

/* Open addressing, linear probing, backward-shift deletion (no
 * tombstones); address 0 marks an empty slot since it is never a block. */
struct mp_live {
	struct mp_live_block *slots;
	size_t mask; /* capacity - 1, capacity a power of two */
	size_t used;
	size_t brk_blocks; /* live blocks with fn MP_FN_BRK */
	/* The live mappings' spans, sorted by address (live.c): what a
	 * munmap of a range, or a mapping made over others, releases. */
	struct mp_live_span *spans;
	size_t n_spans, spans_cap;
	size_t max_cap; /* the most slots (a power of two); 0: no bound */
	uint16_t cur_flags; /* MP_LIVE_B_* of the event being applied */
	struct mp_live_stats st;
};

#define MP_LIVE_MIN_CAP 1024

struct mp_live_span {
	uint64_t addr, end; /* end: the last page's end */
};

static inline bool mp_live_is_mapping_fn_(uint32_t fn)
{
	/* munmap: what a partial munmap leaves of a mapping */
	return fn == MP_FN_MMAP || fn == MP_FN_MREMAP || fn == MP_FN_MUNMAP;
}

/* live.c: doubles the table (-ENOMEM: unchanged; -ENOSPC: at its bound);
 * the heap break moving (mp_live_apply() of an MP_FN_BRK realloc); an
 * event that may need a new slot while the table is at its bound. */
int mp_live_grow_(struct mp_live *l);
int mp_live_brk_(struct mp_live *l, const struct mp_raw_event *ev, mp_heap_cb cb, void *ctx);
int mp_live_full_(struct mp_live *l, const struct mp_raw_event *ev, mp_heap_cb cb, void *ctx);
/* A block of a mapping or brk function entered or left the table (its
 * span, brk_blocks); the mappings overlapping [@addr, @addr + @len)
 * released, as munmap or a mapping made over them releases them (what is
 * left of one stays a mapping: fn MP_FN_MUNMAP), event @ev their cause:
 * the number released, or -ENOMEM. */
void mp_live_special_added_(struct mp_live *l, const struct mp_live_block *b);
void mp_live_special_removed_(struct mp_live *l, const struct mp_live_block *b);
int mp_live_unmap_(struct mp_live *l, const struct mp_raw_event *ev, uint64_t addr, uint64_t len,
		   mp_heap_cb cb, void *ctx);

static inline size_t mp_live_slot_of_(const struct mp_live *l, uint64_t addr)
{
	return (size_t)((addr * 0x9e3779b97f4a7c15ULL) >> 17) & l->mask;
}

static inline struct mp_live_block *mp_live_find_(const struct mp_live *l, uint64_t addr)
{
	size_t i = mp_live_slot_of_(l, addr);

	while (l->slots[i].addr) {
		if (l->slots[i].addr == addr)
			return &l->slots[i];
		i = (i + 1) & l->mask;
	}
	return NULL;
}

/* The slot holding @addr, or the empty slot where it would go. */
static inline size_t mp_live_probe_(const struct mp_live *l, uint64_t addr)
{
	size_t i = mp_live_slot_of_(l, addr);

	while (l->slots[i].addr && l->slots[i].addr != addr)
		i = (i + 1) & l->mask;
	return i;
}

/* Room for one more block, so that applying an event cannot fail halfway. */
static inline int mp_live_reserve_(struct mp_live *l)
{
	if ((l->used + 1) * 4 > (l->mask + 1) * 3)
		return mp_live_grow_(l);
	return 0;
}

static inline void mp_live_remove_slot_(struct mp_live *l, struct mp_live_block *b)
{
	size_t i = (size_t)(b - l->slots), j = i;

	for (;;) {
		size_t home;

		j = (j + 1) & l->mask;
		if (!l->slots[j].addr)
			break;
		home = mp_live_slot_of_(l, l->slots[j].addr);
		/* Move j back into the hole unless its home lies cyclically in
		 * (i, j]. */
		if (i <= j ? (home <= i || home > j) : (home <= i && home > j)) {
			l->slots[i] = l->slots[j];
			i = j;
		}
	}
	memset(&l->slots[i], 0, sizeof(l->slots[i]));
	l->used--;
}

static inline uint32_t mp_live_fn_index_(uint32_t fn)
{
	return fn < MP_LIVE_FN_MAX ? fn : MP_LIVE_FN_MAX - 1;
}

static inline __attribute__((always_inline)) void mp_live_do_alloc_(struct mp_live *l,
								    const struct mp_raw_event *ev,
								    uint64_t addr, mp_heap_cb cb,
								    void *ctx)
{
	uint32_t fn = mp_live_fn_index_(ev->fn);
	struct mp_live_fn_stats *fs = &l->st.fn[fn];
	size_t i = mp_live_probe_(l, addr);
	struct mp_live_block *b;
	uint64_t user = 0;

	/* The allocator handed out a block we think is live: we missed its
	 * release (dropped event). Forget the stale one quietly. */
	if (l->slots[i].addr) {
		struct mp_live_block *old = &l->slots[i];

		if (__builtin_expect(old->fn >= MP_FN_MMAP && old->fn <= MP_FN_BRK, 0))
			mp_live_special_removed_(l, old);
		l->st.live_bytes -= old->size;
		l->st.live_blocks--;
		mp_live_remove_slot_(l, old);
		i = mp_live_probe_(l, addr);
	}
	if (cb) {
		struct mp_heap_event he = {
			.kind = MP_HEAP_ALLOC,
			.fn = ev->fn,
			.tid = ev->tid,
			.ts_ns = ev->ts_ns,
			.addr = addr,
			.size = ev->size,
			.caller = ev->caller,
			.flags = (l->cur_flags & MP_LIVE_B_SCALED) ? MP_HEAP_F_SCALED : 0,
		};
		user = cb(ctx, &he);
	}
	/* the callback does not touch the table: slot i is still the one */
	b = &l->slots[i];
	b->addr = addr;
	b->size = ev->size;
	b->ts_ns = ev->ts_ns;
	b->caller = ev->caller;
	b->user = user;
	b->tid = ev->tid;
	b->fn = (uint16_t)fn;
	b->flags = l->cur_flags;
	l->used++;
	if (__builtin_expect(fn >= MP_FN_MMAP && fn <= MP_FN_BRK, 0))
		mp_live_special_added_(l, b);
	fs->allocs++;
	fs->alloc_bytes += ev->size;
	l->st.live_bytes += ev->size;
	l->st.live_blocks++;
}

static inline __attribute__((always_inline)) void mp_live_do_free_(struct mp_live *l,
								   const struct mp_raw_event *ev,
								   uint64_t addr, mp_heap_cb cb,
								   void *ctx)
{
	struct mp_live_fn_stats *fs = &l->st.fn[mp_live_fn_index_(ev->fn)];
	struct mp_live_block *b = mp_live_find_(l, addr);
	struct mp_heap_event he = {
		.fn = ev->fn,
		.tid = ev->tid,
		.ts_ns = ev->ts_ns,
		.addr = addr,
		.caller = ev->caller,
	};

	if (!b) {
		fs->unknown_frees++;
		l->st.unknown_frees++;
		if (cb) {
			he.kind = MP_HEAP_UNKNOWN_FREE;
			cb(ctx, &he);
		}
		return;
	}
	he.kind = MP_HEAP_FREE;
	he.size = b->size;
	he.alloc_tid = b->tid;
	he.alloc_ts_ns = b->ts_ns;
	he.alloc_caller = b->caller;
	he.user = b->user;
	he.flags = (b->flags & MP_LIVE_B_SCALED) ? MP_HEAP_F_SCALED : 0;
	fs->frees++;
	fs->freed_bytes += b->size;
	l->st.live_bytes -= b->size;
	l->st.live_blocks--;
	if (__builtin_expect(b->fn >= MP_FN_MMAP && b->fn <= MP_FN_BRK, 0))
		mp_live_special_removed_(l, b);
	mp_live_remove_slot_(l, b);
	if (cb)
		cb(ctx, &he);
}

/* The statistics of allocation @al of a block absent from the table,
 * then its free @fr (MP_RAW_FREE, not munmap), nothing in between: the
 * table ends as it began. */
static inline __attribute__((always_inline)) void
mp_live_temp_(struct mp_live *l, const struct mp_raw_event *al, const struct mp_raw_event *fr)
{
	struct mp_live_fn_stats *fa = &l->st.fn[mp_live_fn_index_(al->fn)];
	struct mp_live_fn_stats *ff = &l->st.fn[mp_live_fn_index_(fr->fn)];

	fa->allocs++;
	fa->alloc_bytes += al->size;
	ff->frees++;
	ff->freed_bytes += al->size;
}

static inline __attribute__((always_inline)) void
mp_live_do_realloc_(struct mp_live *l, const struct mp_raw_event *ev, mp_heap_cb cb, void *ctx)
{
	if (ev->fn == MP_FN_MREMAP) {
		struct mp_live_block *b = mp_live_find_(l, ev->old_addr);

		/* File mappings and mappings from before attach: not ours. */
		if (!b || !mp_live_is_mapping_fn_(b->fn)) {
			l->st.ignored++;
			return;
		}
		if (ev->addr) {
			/* the old one released first: what the new range
			 * overlaps was replaced (MREMAP_FIXED) */
			int r;

			mp_live_do_free_(l, ev, ev->old_addr, cb, ctx);
			r = mp_live_unmap_(l, ev, ev->addr, ev->size, cb, ctx);
			if (r >= 0)
				r = mp_live_reserve_(l);
			if (r == -ENOSPC) {
				/* the table at its bound: counted, not tracked */
				l->st.untracked++;
				l->st.untracked_bytes += ev->size;
			}
			if (r < 0)
				return;
			mp_live_do_alloc_(l, ev, ev->addr, cb, ctx);
			return;
		}
	}
	if (!ev->old_addr) {
		/* realloc(NULL, n) is malloc(n). */
		if (ev->addr)
			mp_live_do_alloc_(l, ev, ev->addr, cb, ctx);
		return;
	}
	if (!ev->addr) {
		/* glibc (REALLOC_ZERO_BYTES_FREES) and jemalloc
		 * (zero_realloc:free) free the block for size 0 and return
		 * NULL; otherwise NULL is a failure that keeps it. */
		if (ev->size == 0 && ev->fn != MP_FN_MREMAP)
			mp_live_do_free_(l, ev, ev->old_addr, cb, ctx);
		else
			l->st.failed++;
		return;
	}
	mp_live_do_free_(l, ev, ev->old_addr, cb, ctx);
	mp_live_do_alloc_(l, ev, ev->addr, cb, ctx);
}

/* mp_live_apply() of an event whose fn has no MP_LIVE_FN_SCALED. */
static inline __attribute__((always_inline)) int
mp_live_apply_one_(struct mp_live *l, const struct mp_raw_event *ev, mp_heap_cb cb, void *ctx)
{
	int r;

	switch (ev->type) {
	case MP_RAW_ALLOC:
		if (!ev->addr)
			return 0;
		/* a new mapping replaces what it overlaps (MAP_FIXED) */
		if (__builtin_expect(ev->fn == MP_FN_MMAP, 0)) {
			r = mp_live_unmap_(l, ev, ev->addr, ev->size, cb, ctx);
			if (r < 0)
				return r;
		}
		r = mp_live_reserve_(l);
		if (r < 0)
			return r == -ENOSPC ? mp_live_full_(l, ev, cb, ctx) : r;
		mp_live_do_alloc_(l, ev, ev->addr, cb, ctx);
		return 0;
	case MP_RAW_FREE:
		if (!ev->addr)
			return 0;
		if (ev->fn == MP_FN_MUNMAP) {
			/* munmap cannot tell anonymous from file mappings:
			 * only mappings we saw created count, each for the
			 * part of it the range covers. */
			r = mp_live_unmap_(l, ev, ev->addr, ev->size, cb, ctx);
			if (r == 0)
				l->st.ignored++;
			return r < 0 ? r : 0;
		}
		mp_live_do_free_(l, ev, ev->addr, cb, ctx);
		return 0;
	case MP_RAW_REALLOC:
		r = mp_live_reserve_(l);
		if (r < 0)
			return r == -ENOSPC ? mp_live_full_(l, ev, cb, ctx) : r;
		if (ev->fn == MP_FN_BRK)
			return mp_live_brk_(l, ev, cb, ctx);
		mp_live_do_realloc_(l, ev, cb, ctx);
		return 0;
	case MP_RAW_EXEC:
		/* the old image's blocks are gone with its address space:
		 * released at the exec, each as a free */
		for (size_t i = 0; cb && i <= l->mask; i++) {
			const struct mp_live_block *b = &l->slots[i];
			struct mp_heap_event he = {
				.kind = MP_HEAP_FREE,
				.fn = b->fn,
				.tid = ev->tid,
				.alloc_tid = b->tid,
				.ts_ns = ev->ts_ns,
				.addr = b->addr,
				.size = b->size,
				.alloc_ts_ns = b->ts_ns,
				.alloc_caller = b->caller,
				.user = b->user,
				.flags = MP_HEAP_F_EXEC |
					 ((b->flags & MP_LIVE_B_SCALED) ? MP_HEAP_F_SCALED : 0),
			};

			if (b->addr)
				cb(ctx, &he);
		}
		l->st.exec_dropped += l->st.live_blocks;
		memset(l->slots, 0, (l->mask + 1) * sizeof(*l->slots));
		l->used = 0;
		l->brk_blocks = 0;
		l->n_spans = 0;
		l->st.live_bytes = 0;
		l->st.live_blocks = 0;
		return 0;
	default:
		return 0;
	}
}

/* mp_live_apply(), inlined. */
static inline __attribute__((always_inline)) int
mp_live_apply_inline_(struct mp_live *l, const struct mp_raw_event *ev, mp_heap_cb cb, void *ctx)
{
	struct mp_raw_event e = *ev;
	int r;

	/* one inlined copy of the event code for both (cur_flags is 0
	 * outside this call) */
	if (e.fn & MP_LIVE_FN_SCALED) {
		e.fn &= ~MP_LIVE_FN_SCALED;
		l->cur_flags = MP_LIVE_B_SCALED;
	}
	r = mp_live_apply_one_(l, &e, cb, ctx);
	l->cur_flags = 0;
	return r;
}

#endif /* MP_LIVE_IMPL_H */
