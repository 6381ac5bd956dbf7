/* SPDX-License-Identifier: MIT */
/*
 * Internal to libmemprof (hidden, never exported): what the producers of
 * the library (pools, pool.c; the allocator interposer, interpose.c; the
 * stack capture, stack_capture.c) need from the ring writer at the bottom
 * (ring.c, heap_writer.c) to put their records into the calling thread's
 * ring. The ring writer calls nothing above it.
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

/* Incremented in a forked child: process-private state keyed on the ring
 * (the interposer's sampled-block set) belongs to the parent. */
extern MP_HIDDEN uint32_t mp_fork_gen;

/*
 * The interposer's per-thread block; the interposer owns every field. The
 * ring writer defines it (ring.c) because the ring header it creates says
 * where in_alloc is (alloc_tls_off), for the daemon's syscall tracepoints.
 * One block, so that a traced call reaches in_alloc and the countdown
 * through one offset. initial-exec: no __tls_get_addr, which may allocate.
 */
struct mp_alloc_tls {
	/* Nonzero while this thread is inside the next allocator on behalf
	 * of a traced call: the daemon's syscall tracepoints read it
	 * (through the ring header's alloc_tls_off) to leave the allocator's
	 * own mmap/munmap to the heap records. Written only when the path is
	 * on. The sampled-block set's own mapping is hidden the same way
	 * (interpose.c set_get()). */
	uint64_t in_alloc;
	int64_t countdown; /* bytes left before the next sample */
	uint64_t rng;
	bool seeded;
	/* While a traced call records its allocation: the frame record
	 * (saved rbp, return address) of the interposed function the
	 * program called, when it has one, else NULL. A wrapped allocation's
	 * walk starts there, at the wrapper's frame, instead of climbing
	 * libmemprof's own frames first (stack_capture.c). */
	const uint64_t *entry_fp;
};
extern MP_HIDDEN __thread struct mp_alloc_tls mp_alloc_tls
	__attribute__((tls_model("initial-exec")));

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

/* The calling thread's memo of its last stack walk (local_unwind.h), in
 * its thread slot's private data; NULL before the thread's first record. */
struct mp_unwind_memo;
MP_HIDDEN struct mp_unwind_memo *mp_rw_unwind_memo(void);

/* The same with a FRAMES record (type 25) carrying the @n (1..
 * MP_FRAMES_MAX) return addresses at @frames instead, flagged
 * MP_FRAMES_F_TRUNCATED when @truncated. */
MP_HIDDEN int mp_ring_write_frames(uint8_t type, uint8_t flags, uint32_t name_id, const uint64_t *w,
				   unsigned nw, enum mp_rw_wait wait, const uint64_t *frames,
				   uint32_t n, bool truncated);

/* Counts one heap record as dropped (drops and alloc_drops). */
MP_HIDDEN void mp_ring_count_alloc_drop(void);

/* The string-table id of @name (interned on first use; 0 when the table is
 * full) in *ret_id. 0 or a negative errno (no ring, no thread slot). */
MP_HIDDEN int mp__intern(const char *name, uint32_t *ret_id);

/* Writes one record into the calling thread's ring, timestamped now, with
 * @n payload words (at most MP_MAX_RANK) in the slot's dims. Nothing is
 * written while no consumer is attached (returns 0). 0, -ENOSPC (ring
 * full, counted) or the thread's first-marker error. */
MP_HIDDEN int mp__ring_record(uint8_t type, uint32_t name_id, const int64_t *words, int n);

#endif /* MEMPROF_RING_WRITER_H */
