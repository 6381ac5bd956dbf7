/* SPDX-License-Identifier: MIT */
/*
 * Heap events as the correlator sees them: produced by the tracer's
 * live-allocation table from raw BPF events, already paired (a free carries
 * the allocation it releases).
 */
#ifndef MP_HEAP_EVENT_H
#define MP_HEAP_EVENT_H

#include <stdint.h>

#include "memprof_events.h" /* enum mp_alloc_fn, shared with the BPF side */

/* In mp_raw_event.fn, set by the daemon (never by BPF): @size is a sampled
 * block's estimate, not its size. The block and its heap events are then
 * flagged (MP_LIVE_B_SCALED, MP_HEAP_F_SCALED). */
#define MP_LIVE_FN_SCALED 0x80000000u

enum mp_heap_kind {
	MP_HEAP_ALLOC = 1, /* a new live block */
	MP_HEAP_FREE = 2, /* a block allocated while attached is released */
	MP_HEAP_UNKNOWN_FREE = 3, /* free of a block allocated before attach */
};

struct mp_heap_event {
	uint32_t kind; /* enum mp_heap_kind */
	uint32_t fn; /* enum mp_alloc_fn of this event */
	uint32_t tid;
	uint32_t alloc_tid; /* FREE: thread that allocated the block */
	uint64_t ts_ns; /* CLOCK_MONOTONIC, same clock as the markers */
	uint64_t addr;
	uint64_t size; /* ALLOC/FREE: requested size; UNKNOWN_FREE: 0 */
	uint64_t caller; /* return address into the caller of @fn */
	uint64_t alloc_ts_ns; /* FREE: when the block was allocated */
	uint64_t alloc_caller; /* FREE: caller of the allocation */
	/* FREE: the value the consumer stored for this block when it saw the
	 * ALLOC (see mp_heap_cb); 0 otherwise. */
	uint64_t user;
	/* ALLOC: call stack id (mp_stack_table of the session), 0: none. */
	uint32_t stack;
	uint32_t flags; /* MP_HEAP_F_* */
};

/* ALLOC, FREE: @size is a sampled block's estimate (sampled mode, a block
 * below the interval), not its exact size. */
#define MP_HEAP_F_SCALED 0x1u
/* A FREE of a block that went with its image's address space at exec. */
#define MP_HEAP_F_EXEC 0x2u

/* Called for every heap event in order. For MP_HEAP_ALLOC the return value
 * is stored with the block and handed back in ->user when it is freed (the
 * correlator keeps its attribution there); ignored for other kinds. */
typedef uint64_t (*mp_heap_cb)(void *ctx, const struct mp_heap_event *ev);

#endif /* MP_HEAP_EVENT_H */
