// SPDX-License-Identifier: MIT
#include "live.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "live_impl.h"

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
	free(l->spans);
	free(l);
}

void mp_live_set_max_bytes(struct mp_live *l, uint64_t bytes)
{
	size_t cap = MP_LIVE_MIN_CAP;

	if (!bytes) {
		l->max_cap = 0;
		return;
	}
	while (cap <= SIZE_MAX / 2 / sizeof(*l->slots) &&
	       (uint64_t)cap * 2 * sizeof(*l->slots) <= bytes)
		cap *= 2;
	/* never below what the table holds already */
	l->max_cap = cap > l->mask + 1 ? cap : l->mask + 1;
}

uint64_t mp_live_max_blocks(const struct mp_live *l)
{
	return l->max_cap ? (uint64_t)l->max_cap / 4 * 3 : UINT64_MAX;
}

uint64_t mp_live_bytes(const struct mp_live *l)
{
	return (uint64_t)(l->mask + 1) * sizeof(*l->slots);
}

static void put(struct mp_live *l, const struct mp_live_block *b)
{
	size_t i = mp_live_slot_of_(l, b->addr);

	while (l->slots[i].addr && l->slots[i].addr != b->addr)
		i = (i + 1) & l->mask;
	if (!l->slots[i].addr)
		l->used++;
	l->slots[i] = *b;
}

int mp_live_grow_(struct mp_live *l)
{
	size_t cap = (l->mask + 1) * 2, old_cap = l->mask + 1;
	struct mp_live_block *old = l->slots, *n;

	if (l->max_cap && cap > l->max_cap)
		return -ENOSPC;
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

/*
 * The heap break moved from ev->old_addr to ev->addr: growth is a block of
 * its own; a shrink releases every heap block above the new break (a block
 * it cuts is released and its remaining part allocated again).
 */
int mp_live_brk_(struct mp_live *l, const struct mp_raw_event *ev, mp_heap_cb cb, void *ctx)
{
	uint64_t brk = ev->addr;

	if (brk > ev->old_addr) {
		struct mp_raw_event a = *ev;

		a.type = MP_RAW_ALLOC;
		a.size = brk - ev->old_addr;
		mp_live_do_alloc_(l, &a, ev->old_addr, cb, ctx);
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
		mp_live_do_free_(l, ev, b.addr, cb, ctx);
		if (b.addr < brk) {
			struct mp_raw_event a = *ev;
			int r = mp_live_reserve_(l);

			if (r < 0)
				return r;
			a.type = MP_RAW_ALLOC;
			a.size = brk - b.addr;
			mp_live_do_alloc_(l, &a, b.addr, cb, ctx);
			/* The table may have grown: start over (the cut block
			 * now ends at the break and is skipped). */
			i = 0;
		}
	}
	return 0;
}

/* A new block the table has no room for: counted, not tracked. */
static void untracked(struct mp_live *l, uint64_t size)
{
	l->st.untracked++;
	l->st.untracked_bytes += size;
}

/* The end of the last page of [@addr, @addr + @len): what a mapping
 * reserves, and what munmap releases; saturated at the top. */
static uint64_t page_end(uint64_t addr, uint64_t len)
{
	uint64_t e = addr + len;

	if (e < addr || e > UINT64_MAX - 4095)
		return UINT64_MAX & ~4095ull;
	return (e + 4095) & ~4095ull;
}

/* The first span whose end is above @addr (n_spans: none). */
static size_t span_after(const struct mp_live *l, uint64_t addr)
{
	size_t lo = 0, hi = l->n_spans;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (l->spans[mid].end <= addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* Spans never overlap (a new mapping releases what it overlaps first), so
 * they are sorted by their ends as by their starts. */
void mp_live_special_added_(struct mp_live *l, const struct mp_live_block *b)
{
	struct mp_live_span s = { b->addr, page_end(b->addr, b->size) };
	size_t i;

	if (b->fn == MP_FN_BRK) {
		l->brk_blocks++;
		return;
	}
	if (l->n_spans == l->spans_cap) {
		size_t cap = l->spans_cap ? l->spans_cap * 2 : 64;
		struct mp_live_span *n = reallocarray(l->spans, cap, sizeof(*n));

		/* without a span, only a munmap of the whole mapping from
		 * its start releases it (mp_live_unmap_()) */
		if (!n)
			return;
		l->spans = n;
		l->spans_cap = cap;
	}
	/* sorted by their ends even where a hostile stream overlaps them */
	i = span_after(l, s.end);
	memmove(&l->spans[i + 1], &l->spans[i], (l->n_spans - i) * sizeof(s));
	l->spans[i] = s;
	l->n_spans++;
}

/* The span of @addr ending at @end (n_spans: none). Spans may overlap
 * in a hostile stream (a block named a mapping without the release of
 * what it covers): only the exact one is its block's. */
static size_t span_exact(const struct mp_live *l, uint64_t addr, uint64_t end)
{
	size_t lo = 0, hi = l->n_spans;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (l->spans[mid].end < end)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (; lo < l->n_spans && l->spans[lo].end == end; lo++)
		if (l->spans[lo].addr == addr)
			return lo;
	return l->n_spans;
}

static void span_drop(struct mp_live *l, size_t i)
{
	memmove(&l->spans[i], &l->spans[i + 1], (l->n_spans - i - 1) * sizeof(l->spans[0]));
	l->n_spans--;
}

void mp_live_special_removed_(struct mp_live *l, const struct mp_live_block *b)
{
	size_t i;

	if (b->fn == MP_FN_BRK) {
		l->brk_blocks--;
		return;
	}
	i = span_exact(l, b->addr, page_end(b->addr, b->size));
	if (i < l->n_spans)
		span_drop(l, i);
}

/* What a partial release leaves of a mapping: a mapping of its own. */
static int unmap_piece(struct mp_live *l, const struct mp_raw_event *ev, uint64_t addr,
		       uint64_t size, mp_heap_cb cb, void *ctx)
{
	struct mp_raw_event a = *ev;
	int r = mp_live_reserve_(l);

	if (r == -ENOSPC) {
		untracked(l, size);
		return 0;
	}
	if (r < 0)
		return r;
	a.type = MP_RAW_ALLOC;
	a.fn = MP_FN_MUNMAP;
	a.size = size;
	mp_live_do_alloc_(l, &a, addr, cb, ctx);
	return 0;
}

int mp_live_unmap_(struct mp_live *l, const struct mp_raw_event *ev, uint64_t addr, uint64_t len,
		   mp_heap_cb cb, void *ctx)
{
	uint64_t end = page_end(addr, len), start = addr & ~4095ull;
	struct mp_raw_event un = *ev;
	struct mp_live_block *b;
	int n = 0, r;

	un.type = MP_RAW_FREE;
	un.fn = MP_FN_MUNMAP;
	for (;;) {
		size_t i = span_after(l, start);
		struct mp_live_block old;

		if (i == l->n_spans || l->spans[i].addr >= end)
			break;
		b = mp_live_find_(l, l->spans[i].addr);
		if (!b || !mp_live_is_mapping_fn_(b->fn) ||
		    page_end(b->addr, b->size) != l->spans[i].end) {
			/* not its block's any more: the span is stale (each
			 * turn drops a span in the range or releases the one
			 * block it is exactly, what is left added outside) */
			span_drop(l, i);
			continue;
		}
		old = *b;
		mp_live_do_free_(l, &un, old.addr, cb, ctx);
		n++;
		/* munmap takes whole pages (the kernel refuses an @addr
		 * not page-aligned): what is left ends below @start, the
		 * next span found begins at @end or beyond */
		if (old.addr < start) {
			r = unmap_piece(l, &un, old.addr, start - old.addr, cb, ctx);
			if (r < 0)
				return r;
		}
		if (old.addr + old.size > end) {
			r = unmap_piece(l, &un, end, old.addr + old.size - end, cb, ctx);
			if (r < 0)
				return r;
		}
	}
	/* a mapping whose span found no room: released from its start */
	b = mp_live_find_(l, addr);
	if (!n && b && mp_live_is_mapping_fn_(b->fn) && page_end(b->addr, b->size) <= end) {
		mp_live_do_free_(l, &un, addr, cb, ctx);
		n++;
	}
	return n;
}

/*
 * @ev (an ALLOC or a REALLOC) while the table is at its bound: what needs
 * no new slot is applied as usual (a block replaced, resized, freed), a
 * new block is counted and left out. Out of line: only a full table
 * comes here.
 */
int mp_live_full_(struct mp_live *l, const struct mp_raw_event *ev, mp_heap_cb cb, void *ctx)
{
	if (ev->type == MP_RAW_ALLOC) {
		if (mp_live_find_(l, ev->addr))
			mp_live_do_alloc_(l, ev, ev->addr, cb, ctx);
		else
			untracked(l, ev->size);
		return 0;
	}
	if (ev->fn == MP_FN_BRK) {
		if (ev->addr > ev->old_addr) {
			untracked(l, ev->addr - ev->old_addr);
			return 0;
		}
		/* a shrink frees before it cuts */
		return mp_live_brk_(l, ev, cb, ctx);
	}
	/* fails or frees, resizes a tracked block, or replaces one */
	if (!ev->addr || (ev->old_addr && mp_live_find_(l, ev->old_addr)) ||
	    mp_live_find_(l, ev->addr)) {
		mp_live_do_realloc_(l, ev, cb, ctx);
		return 0;
	}
	/* a mapping never tracked: as mp_live_do_realloc_() ignores it */
	if (ev->fn == MP_FN_MREMAP) {
		l->st.ignored++;
		return 0;
	}
	if (ev->old_addr)
		mp_live_do_free_(l, ev, ev->old_addr, cb, ctx);
	untracked(l, ev->size);
	return 0;
}

int mp_live_apply(struct mp_live *l, const struct mp_raw_event *ev, mp_heap_cb cb, void *ctx)
{
	return mp_live_apply_inline_(l, ev, cb, ctx);
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
	b = mp_live_find_(l, addr);
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

void mp_live_map_user(struct mp_live *l, uint64_t (*fn)(void *ctx, uint64_t user), void *ctx)
{
	for (size_t i = 0; i <= l->mask; i++)
		if (l->slots[i].addr)
			l->slots[i].user = fn(ctx, l->slots[i].user);
}
