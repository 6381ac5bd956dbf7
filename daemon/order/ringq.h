/* SPDX-License-Identifier: MIT */
/*
 * Ring records held for the timestamp merge, one FIFO per ring.
 *
 * The in-process path puts tens of millions of records a second through
 * the daemon. Each ring is written by one thread, so its records are
 * already in timestamp order: they need no sort, only a k-way merge of
 * the rings' heads (a small heap over the rings that hold records, empty
 * of work when one thread allocates). Records wait here until the
 * watermark passes them (order.h), as in mp_merge, but as 56-byte copies
 * in FIFOs instead of 160-byte payloads in a binary heap of every item.
 * Marker records (rare, and with a name) are kept whole in a side store.
 *
 * Timestamps come from the target: a ring whose records go back in time
 * is merged in FIFO order, never reordered, and nothing here depends on
 * them being sorted for its safety. Memory grows by doubling and is
 * reused: steady state allocates nothing.
 */
#ifndef MP_RINGQ_H
#define MP_RINGQ_H

#include <stdint.h>

#include "consumer.h"
#include "memprof_events.h"

/* A held record. Heap records (MP_REC_ALLOC/FREE/REALLOC) are complete
 * here; for any other type @marker indexes the side store. */
struct mp_ringq_rec {
	uint64_t ts;
	uint64_t addr, size, caller, old_addr;
	uint32_t tid;
	uint8_t type; /* enum mp_record_type */
	uint8_t flags; /* MP_REC_F_* */
	uint16_t fn; /* heap records: enum mp_alloc_fn */
	uint32_t marker; /* other records: index of the stored mp_record */
	uint32_t stack; /* heap records: id of their unwound stack, 0 none */
};
_Static_assert(sizeof(struct mp_ringq_rec) == 56, "held record size (docs)");

struct mp_ringq;

/* Heap record @rec (MP_REC_ALLOC/FREE/REALLOC) as held, with stack id
 * @stack: what mp_ringq_push() stores, for a caller that releases a record
 * at once (nothing older held, the watermark past it). */
static inline void mp_ringq_heap_rec(const struct mp_record *rec, uint32_t stack,
				     struct mp_ringq_rec *e)
{
	e->ts = rec->ts_ns;
	e->tid = rec->tid;
	e->type = (uint8_t)rec->type;
	e->flags = (uint8_t)rec->flags;
	e->fn = (uint16_t)rec->fn;
	e->addr = rec->heap.addr;
	e->size = rec->heap.size;
	e->caller = rec->heap.caller;
	e->old_addr = rec->heap.old_addr;
	e->marker = 0;
	e->stack = stack;
}

/* Room for @rings rings (the consumer's thread slots); more are added
 * when a higher index is pushed. */
int mp_ringq_new(uint32_t rings, struct mp_ringq **ret);
void mp_ringq_free(struct mp_ringq *q);

/* Appends @rec, read from ring @ring, behind that ring's earlier records,
 * with @stack (a heap record's stack id, kept as is; the record's own
 * stack pointer is not kept: it dies with the consumer's read).
 * @ref is handed back with a marker record when it is released (the
 * owner of its name string); unused for heap records. -ENOMEM, -E2BIG for
 * a ring index beyond MP_RING_MAX_THREADS. */
int mp_ringq_push(struct mp_ringq *q, uint32_t ring, const struct mp_record *rec, uint32_t stack,
		  void *ref);

/* Timestamp of the record that would be released next, UINT64_MAX when
 * none is held. */
uint64_t mp_ringq_next_ts(const struct mp_ringq *q);

/* Called for each released record in timestamp order; @marker and @ref are
 * the stored record and its push's @ref for markers, NULL for heap
 * records. A negative return stops the release and is returned. */
typedef int (*mp_ringq_cb)(void *ctx, const struct mp_ringq_rec *rec,
			   const struct mp_record *marker, void *ref);

/* Shown a held heap record a few before its release (@rec), so that the
 * memory its release will touch is fetched while the records before it
 * go: the live table's slots of its addresses, 2-3 cache misses a record
 * otherwise taken one after the other. */
typedef void (*mp_ringq_pf)(void *ctx, const struct mp_ringq_rec *rec);
void mp_ringq_set_prefetch(struct mp_ringq *q, mp_ringq_pf pf, void *ctx);

/* Releases, oldest first, every held record whose timestamp is at most
 * @at_most and below @before (the caller passes its watermark and the
 * timestamp of its other streams' next item, which goes first on a tie).
 * Returns the number released or the callback's error. */
int64_t mp_ringq_release(struct mp_ringq *q, uint64_t at_most, uint64_t before, mp_ringq_cb cb,
			 void *ctx);

/* The ring whose records are all the records held, UINT32_MAX when none
 * is held or several rings hold some: its records can then be released
 * against a watermark that ignores its own progress. */
uint32_t mp_ringq_sole_ring(const struct mp_ringq *q);

/* Records held; the newest timestamp released so far (0: none). */
uint64_t mp_ringq_pending(const struct mp_ringq *q);
uint64_t mp_ringq_released_ts(const struct mp_ringq *q);

/* The raw event the uprobes would have sent for heap record @r of process
 * @pid (docs/TRACER.md): what mp_live_apply() takes. The size of a FREE is
 * 0; a scaled sample keeps its requested size (the caller estimates). */
static inline void mp_ringq_raw(const struct mp_ringq_rec *r, uint32_t pid, struct mp_raw_event *ev)
{
	ev->type = r->type == MP_REC_ALLOC ? MP_RAW_ALLOC :
		   r->type == MP_REC_FREE  ? MP_RAW_FREE :
					     MP_RAW_REALLOC;
	ev->fn = r->fn;
	ev->pid = pid;
	ev->tid = r->tid;
	ev->ts_ns = r->ts;
	ev->addr = r->addr;
	ev->size = r->type == MP_REC_FREE ? 0 : r->size;
	ev->old_addr = r->old_addr;
	ev->caller = r->caller;
}

#endif /* MP_RINGQ_H */
