// SPDX-License-Identifier: MIT
#include "live.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* Open addressing, linear probing, backward-shift deletion (no
 * tombstones); address 0 marks an empty slot since it is never a block. */
struct mp_live {
	struct mp_live_block *slots;
	size_t mask; /* capacity - 1, capacity a power of two */
	size_t used;
	size_t brk_blocks; /* live blocks with fn MP_FN_BRK */
	uint16_t cur_flags; /* MP_LIVE_B_* of the event being applied */
	struct mp_live_stats st;
};

#define MP_LIVE_MIN_CAP 1024

static size_t slot_of(const struct mp_live *l, uint64_t addr)
{
	return (size_t)((addr * 0x9e3779b97f4a7c15ULL) >> 17) & l->mask;
}

int mp_live_new(struct mp_live **ret)
{
	struct mp_live *l = calloc(1, sizeof(*l));

	if (!l)
		return -ENOMEM;
	l->slots = calloc(MP_LIVE_MIN_CAP, sizeof(*l->slots));
	if (!l->slots) {
		free(l);
		return -ENOMEM;
	}
	l->mask = MP_LIVE_MIN_CAP - 1;
	*ret = l;
	return 0;
}

void mp_live_free(struct mp_live *l)
{
	if (!l)
		return;
	free(l->slots);
	free(l);
}

static struct mp_live_block *find(const struct mp_live *l, uint64_t addr)
{
	size_t i = slot_of(l, addr);

	while (l->slots[i].addr) {
		if (l->slots[i].addr == addr)
			return &l->slots[i];
		i = (i + 1) & l->mask;
	}
	return NULL;
}

/* The slot holding @addr, or the empty slot where it would go. */
static size_t probe(const struct mp_live *l, uint64_t addr)
{
	size_t i = slot_of(l, addr);

	while (l->slots[i].addr && l->slots[i].addr != addr)
		i = (i + 1) & l->mask;
	return i;
}

static void put(struct mp_live *l, const struct mp_live_block *b)
{
	size_t i = slot_of(l, b->addr);

	while (l->slots[i].addr && l->slots[i].addr != b->addr)
		i = (i + 1) & l->mask;
	if (!l->slots[i].addr)
		l->used++;
	l->slots[i] = *b;
}

static int grow(struct mp_live *l)
{
	size_t cap = (l->mask + 1) * 2, old_cap = l->mask + 1;
	struct mp_live_block *old = l->slots, *n;

	if (cap > SIZE_MAX / sizeof(*n))
		return -ENOMEM;
	n = calloc(cap, sizeof(*n));
	if (!n)
		return -ENOMEM;
	l->slots = n;
	l->mask = cap - 1;
	l->used = 0;
	for (size_t i = 0; i < old_cap; i++)
		if (old[i].addr)
			put(l, &old[i]);
	free(old);
	return 0;
}

/* Room for one more block, so that applying an event cannot fail halfway. */
static int reserve(struct mp_live *l)
{
	if ((l->used + 1) * 4 > (l->mask + 1) * 3)
		return grow(l);
	return 0;
}

static void remove_slot(struct mp_live *l, struct mp_live_block *b)
{
	size_t i = (size_t)(b - l->slots), j = i;

	for (;;) {
		size_t home;

		j = (j + 1) & l->mask;
		if (!l->slots[j].addr)
			break;
		home = slot_of(l, l->slots[j].addr);
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

static uint32_t fn_index(uint32_t fn)
{
	return fn < MP_LIVE_FN_MAX ? fn : MP_LIVE_FN_MAX - 1;
}

static void do_alloc(struct mp_live *l, const struct mp_raw_event *ev, uint64_t addr, mp_heap_cb cb,
		     void *ctx)
{
	struct mp_live_block b = {
		.addr = addr,
		.size = ev->size,
		.ts_ns = ev->ts_ns,
		.caller = ev->caller,
		.tid = ev->tid,
		.fn = (uint16_t)fn_index(ev->fn),
		.flags = l->cur_flags,
	};
	struct mp_live_fn_stats *fs = &l->st.fn[fn_index(ev->fn)];
	size_t i = probe(l, addr);

	/* The allocator handed out a block we think is live: we missed its
	 * release (dropped event). Forget the stale one quietly. */
	if (l->slots[i].addr) {
		struct mp_live_block *old = &l->slots[i];

		if (old->fn == MP_FN_BRK)
			l->brk_blocks--;
		l->st.live_bytes -= old->size;
		l->st.live_blocks--;
		remove_slot(l, old);
		i = probe(l, addr);
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
		b.user = cb(ctx, &he);
	}
	/* the callback does not touch the table: slot i is still the one */
	l->slots[i] = b;
	l->used++;
	if (b.fn == MP_FN_BRK)
		l->brk_blocks++;
	fs->allocs++;
	fs->alloc_bytes += ev->size;
	l->st.live_bytes += ev->size;
	l->st.live_blocks++;
}

static void do_free(struct mp_live *l, const struct mp_raw_event *ev, uint64_t addr, mp_heap_cb cb,
		    void *ctx)
{
	struct mp_live_fn_stats *fs = &l->st.fn[fn_index(ev->fn)];
	struct mp_live_block *b = find(l, addr);
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
	if (b->fn == MP_FN_BRK)
		l->brk_blocks--;
	remove_slot(l, b);
	if (cb)
		cb(ctx, &he);
}

static bool is_mapping_fn(uint32_t fn)
{
	return fn == MP_FN_MMAP || fn == MP_FN_MREMAP;
}

/*
 * The heap break moved from ev->old_addr to ev->addr: growth is a block of
 * its own; a shrink releases every heap block above the new break (a block
 * it cuts is released and its remaining part allocated again).
 */
static int do_brk(struct mp_live *l, const struct mp_raw_event *ev, mp_heap_cb cb, void *ctx)
{
	uint64_t brk = ev->addr;

	if (brk > ev->old_addr) {
		struct mp_raw_event a = *ev;

		a.type = MP_RAW_ALLOC;
		a.size = brk - ev->old_addr;
		do_alloc(l, &a, ev->old_addr, cb, ctx);
		return 0;
	}
	for (size_t i = 0; l->brk_blocks && i <= l->mask;) {
		struct mp_live_block b = l->slots[i];

		if (!b.addr || b.fn != MP_FN_BRK || b.addr + b.size <= brk) {
			i++;
			continue;
		}
		/* Backward-shift deletion may move another block into slot i:
		 * look at it again. */
		do_free(l, ev, b.addr, cb, ctx);
		if (b.addr < brk) {
			struct mp_raw_event a = *ev;
			int r = reserve(l);

			if (r < 0)
				return r;
			a.type = MP_RAW_ALLOC;
			a.size = brk - b.addr;
			do_alloc(l, &a, b.addr, cb, ctx);
			/* The table may have grown: start over (the cut block
			 * now ends at the break and is skipped). */
			i = 0;
		}
	}
	return 0;
}

static void do_realloc(struct mp_live *l, const struct mp_raw_event *ev, mp_heap_cb cb, void *ctx)
{
	if (ev->fn == MP_FN_MREMAP) {
		struct mp_live_block *b = find(l, ev->old_addr);

		/* File mappings and mappings from before attach: not ours. */
		if (!b || !is_mapping_fn(b->fn)) {
			l->st.ignored++;
			return;
		}
	}
	if (!ev->old_addr) {
		/* realloc(NULL, n) is malloc(n). */
		if (ev->addr)
			do_alloc(l, ev, ev->addr, cb, ctx);
		return;
	}
	if (!ev->addr) {
		/* glibc (REALLOC_ZERO_BYTES_FREES) and jemalloc
		 * (zero_realloc:free) free the block for size 0 and return
		 * NULL; otherwise NULL is a failure that keeps it. */
		if (ev->size == 0 && ev->fn != MP_FN_MREMAP)
			do_free(l, ev, ev->old_addr, cb, ctx);
		else
			l->st.failed++;
		return;
	}
	do_free(l, ev, ev->old_addr, cb, ctx);
	do_alloc(l, ev, ev->addr, cb, ctx);
}

static int apply(struct mp_live *l, const struct mp_raw_event *ev, mp_heap_cb cb, void *ctx);

int mp_live_apply(struct mp_live *l, const struct mp_raw_event *ev, mp_heap_cb cb, void *ctx)
{
	struct mp_raw_event e;
	int r;

	if (!(ev->fn & MP_LIVE_FN_SCALED))
		return apply(l, ev, cb, ctx);
	e = *ev;
	e.fn &= ~MP_LIVE_FN_SCALED;
	l->cur_flags = MP_LIVE_B_SCALED;
	r = apply(l, &e, cb, ctx);
	l->cur_flags = 0;
	return r;
}

static int apply(struct mp_live *l, const struct mp_raw_event *ev, mp_heap_cb cb, void *ctx)
{
	int r;

	switch (ev->type) {
	case MP_RAW_ALLOC:
		if (!ev->addr)
			return 0;
		r = reserve(l);
		if (r < 0)
			return r;
		do_alloc(l, ev, ev->addr, cb, ctx);
		return 0;
	case MP_RAW_FREE:
		if (!ev->addr)
			return 0;
		if (ev->fn == MP_FN_MUNMAP) {
			struct mp_live_block *b = find(l, ev->addr);

			/* munmap cannot tell anonymous from file mappings:
			 * only releases of mappings we saw created count. */
			if (!b || !is_mapping_fn(b->fn)) {
				l->st.ignored++;
				return 0;
			}
		}
		do_free(l, ev, ev->addr, cb, ctx);
		return 0;
	case MP_RAW_REALLOC:
		r = reserve(l);
		if (r < 0)
			return r;
		if (ev->fn == MP_FN_BRK)
			return do_brk(l, ev, cb, ctx);
		do_realloc(l, ev, cb, ctx);
		return 0;
	case MP_RAW_EXEC:
		l->st.exec_dropped += l->st.live_blocks;
		memset(l->slots, 0, (l->mask + 1) * sizeof(*l->slots));
		l->used = 0;
		l->brk_blocks = 0;
		l->st.live_bytes = 0;
		l->st.live_blocks = 0;
		return 0;
	default:
		return 0;
	}
}

void mp_live_stats(const struct mp_live *l, struct mp_live_stats *ret)
{
	*ret = l->st;
}

int mp_live_lookup(const struct mp_live *l, uint64_t addr, struct mp_live_block *ret_block)
{
	const struct mp_live_block *b;

	if (!addr)
		return -ENOENT;
	b = find(l, addr);
	if (!b)
		return -ENOENT;
	*ret_block = *b;
	return 0;
}

int mp_live_foreach(const struct mp_live *l, int (*cb)(void *ctx, const struct mp_live_block *b),
		    void *ctx)
{
	for (size_t i = 0; i <= l->mask; i++) {
		if (l->slots[i].addr) {
			int r = cb(ctx, &l->slots[i]);

			if (r)
				return r;
		}
	}
	return 0;
}
