/* SPDX-License-Identifier: MIT */
/*
 * Internal to libmemprof (hidden, never exported): what the other producers
 * of the library (the allocator interposer, interpose.c) need from the
 * marker ring writer of memprof.c to put their own records into the calling
 * thread's ring.
 */
#ifndef MEMPROF_RING_WRITER_H
#define MEMPROF_RING_WRITER_H

#include <stdbool.h>
#include <stdint.h>

#include "ring_abi.h"

#define MP_HIDDEN __attribute__((visibility("hidden")))

/* The shared ring header, for its allocator control words (alloc_mode,
 * alloc_sample_bytes, alloc_epoch): a static all-zero header (dormant)
 * until the ring exists, and again in a forked child. One load of this
 * pointer and one of the mode is all a dormant allocator call costs. */
extern MP_HIDDEN const struct mp_ring_hdr *mp_alloc_hdr;

/* Wait policy of mp_ring_write() when the ring is full. */
enum mp_rw_wait {
	MP_RW_NOWAIT = 0, /* drop and count (markers, sampled records) */
	MP_RW_WAIT = 1, /* bounded wait for the consumer, then drop and count */
};

/*
 * Appends one record of @type (with @flags and @name_id) to the calling
 * thread's ring, stamped now, with @nw (3 or 4) words in dims[0..]. Never
 * allocates; the first record of a thread takes its slot (syscalls allowed
 * once). A call re-entered from a signal handler while the thread is
 * writing a record drops the new record. Every drop is counted in drops,
 * and for heap records (types 8-15) in alloc_drops. Returns 0 or a
 * negative errno (-ENOSPC ring full, -EBUSY re-entered, others from the
 * thread's first record).
 */
MP_HIDDEN int mp_ring_write(uint8_t type, uint8_t flags, uint32_t name_id, const uint64_t *w,
			    unsigned nw, enum mp_rw_wait wait);

/*
 * The same heap record preceded by a STACK record (type 24) carrying the
 * registers @regs (ip, sp, bp) and the @len bytes at @stack, in the
 * slots after it; published together, the STACK record last. Without
 * room for both (after the bounded wait in MP_RW_WAIT), or before the
 * thread's first record, the heap record alone, as mp_ring_write().
 */
MP_HIDDEN int mp_ring_write_stacked(uint8_t type, uint8_t flags, uint32_t name_id,
				    const uint64_t *w, unsigned nw, enum mp_rw_wait wait,
				    const uint64_t regs[3], const void *stack, uint32_t len);

/* stack_capture.c: mp_ring_write_stacked() with the registers of the
 * caller at this call and the bytes of its stack from its stack pointer up
 * to @stack_end, at most @max; none when the stack pointer is outside
 * [@stack_lo, @stack_end) (a signal stack). */
MP_HIDDEN int mp_stack_put(uint8_t type, uint8_t flags, uint32_t name_id, const uint64_t *w,
			   unsigned nw, enum mp_rw_wait wait, uint64_t stack_lo, uint64_t stack_end,
			   uint32_t max);

/* interpose.c: alloc_tls_off of the ring header. */
MP_HIDDEN int64_t mp_interpose_tls_off(void);

/* Counts one heap record as dropped (drops and alloc_drops). */
MP_HIDDEN void mp_ring_count_alloc_drop(void);

/* Incremented in a forked child: process-private state keyed on the ring
 * (the interposer's sampled-block set) belongs to the parent. */
extern MP_HIDDEN uint32_t mp_fork_gen;

#endif /* MEMPROF_RING_WRITER_H */
