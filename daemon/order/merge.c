// SPDX-License-Identifier: MIT
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "merge.h"

struct heap_ent {
	uint64_t ts;
	uint64_t seq; /* arrival order: ties keep it */
	uint32_t slot;
};

struct mp_merge {
	struct mp_merge_item *items;
	uint32_t *free_slots; /* stack of unused item slots */
	size_t n_free;
	struct heap_ent *heap;
	size_t n_heap;
	size_t cap;
	uint64_t seq;
	uint64_t released_ts;
	uint32_t last_slot; /* slot handed out by the last pop; recycled on the next call */
	int has_last;
	uint64_t late;
};

static int grow(struct mp_merge *m, size_t cap)
{
	struct mp_merge_item *items;
	struct heap_ent *heap;
	uint32_t *free_slots;

	if (cap > UINT32_MAX)
		return -ENOMEM;
	items = realloc(m->items, cap * sizeof(*items));
	if (!items)
		return -ENOMEM;
	m->items = items;
	heap = realloc(m->heap, cap * sizeof(*heap));
	if (!heap)
		return -ENOMEM;
	m->heap = heap;
	free_slots = realloc(m->free_slots, cap * sizeof(*free_slots));
	if (!free_slots)
		return -ENOMEM;
	m->free_slots = free_slots;
	/* New slots go below the existing free ones so low slots are reused first. */
	for (size_t i = cap; i > m->cap; i--)
		m->free_slots[m->n_free++] = (uint32_t)(i - 1);
	m->cap = cap;
	return 0;
}

int mp_merge_new(size_t initial_capacity, struct mp_merge **ret)
{
	struct mp_merge *m;
	int r;

	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	r = grow(m, initial_capacity ? initial_capacity : 1024);
	if (r < 0) {
		mp_merge_free(m);
		return r;
	}
	*ret = m;
	return 0;
}

void mp_merge_free(struct mp_merge *m)
{
	if (!m)
		return;
	free(m->items);
	free(m->heap);
	free(m->free_slots);
	free(m);
}

static int ent_less(const struct heap_ent *a, const struct heap_ent *b)
{
	if (a->ts != b->ts)
		return a->ts < b->ts;
	return a->seq < b->seq;
}

static void recycle_last(struct mp_merge *m)
{
	if (m->has_last) {
		m->free_slots[m->n_free++] = m->last_slot;
		m->has_last = 0;
	}
}

int mp_merge_push(struct mp_merge *m, uint32_t kind, uint64_t ts, const void *payload, size_t len)
{
	struct mp_merge_item *it;
	struct heap_ent e;
	size_t i;
	int r;

	if (len > MP_MERGE_PAYLOAD_MAX)
		return -E2BIG;
	recycle_last(m);
	if (m->n_free == 0) {
		r = grow(m, m->cap * 2);
		if (r < 0)
			return r;
	}
	e.slot = m->free_slots[--m->n_free];
	e.ts = ts;
	e.seq = m->seq++;
	it = &m->items[e.slot];
	it->ts = ts;
	it->kind = kind;
	it->len = (uint32_t)len;
	if (len)
		memcpy(it->payload.bytes, payload, len);
	if (ts < m->released_ts)
		m->late++;

	i = m->n_heap++;
	while (i > 0) {
		size_t parent = (i - 1) / 2;
		if (!ent_less(&e, &m->heap[parent]))
			break;
		m->heap[i] = m->heap[parent];
		i = parent;
	}
	m->heap[i] = e;
	return 0;
}

int mp_merge_pop(struct mp_merge *m, uint64_t watermark, const struct mp_merge_item **ret)
{
	struct heap_ent top, last;
	size_t i, n;

	recycle_last(m);
	if (m->n_heap == 0)
		return 0;
	top = m->heap[0];
	/* A late item is released at once: holding it back cannot restore order. */
	if (top.ts > watermark && top.ts >= m->released_ts)
		return 0;

	last = m->heap[--m->n_heap];
	n = m->n_heap;
	i = 0;
	for (;;) {
		size_t l = 2 * i + 1, r = l + 1, best = i;
		const struct heap_ent *bp = &last;
		if (l < n && ent_less(&m->heap[l], bp)) {
			best = l;
			bp = &m->heap[l];
		}
		if (r < n && ent_less(&m->heap[r], bp))
			best = r;
		if (best == i)
			break;
		m->heap[i] = m->heap[best];
		i = best;
	}
	if (n)
		m->heap[i] = last;

	if (top.ts > m->released_ts)
		m->released_ts = top.ts;
	m->last_slot = top.slot;
	m->has_last = 1;
	*ret = &m->items[top.slot];
	return 1;
}

uint64_t mp_merge_next_ts(const struct mp_merge *m)
{
	return m->n_heap ? m->heap[0].ts : UINT64_MAX;
}

void mp_merge_note_released(struct mp_merge *m, uint64_t ts)
{
	if (ts > m->released_ts)
		m->released_ts = ts;
}

size_t mp_merge_pending(const struct mp_merge *m)
{
	return m->n_heap;
}

uint64_t mp_merge_late(const struct mp_merge *m)
{
	return m->late;
}
