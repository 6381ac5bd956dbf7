/* SPDX-License-Identifier: MIT */
/*
 * Layout of the libmemprof marker ring: a memfd shared between the profiled
 * process (producers) and memprofd (the single consumer). This header is the
 * ABI between the two and holds nothing else; docs/RING.md explains it.
 *
 * All integers are native-endian; the consumer only ever talks to processes
 * on the same machine. Every field is fixed-size and naturally aligned so the
 * layout is the same for every compiler and both sides of the boundary.
 */
#ifndef MEMPROF_RING_ABI_H
#define MEMPROF_RING_ABI_H

#include <stdint.h>
#include <stddef.h>

/* memfd name; the consumer looks for "/memfd:" MP_RING_MEMFD_NAME in
 * /proc/PID/fd. */
#define MP_RING_MEMFD_NAME "memprof-ring"
#define MP_RING_MAGIC 0x3130474e4952504dULL /* "MPRING01" little-endian */
/* 2: heap records (types 8-10) and pool records (types 16-19).
 * 3: the allocator wrappers' table in the header (wrap_*). */
#define MP_RING_ABI_VERSION 3u

/* Limits the consumer enforces on a header (anything larger is corrupt). */
/* all rings together */
#define MP_RING_MAX_SLOTS (1u << 24)
#define MP_RING_MAX_THREADS 4096u
#define MP_RING_MAX_STRINGS (1u << 20)
#define MP_RING_MAX_BLOB (64u << 20)
#define MP_NAME_MAX 255u

#define MP_KSTACK_MAX 32u
/* STACK records (type 24): at most this many bytes of stack, carried in
 * the slots that follow the record's own, MP_STACK_SLOT_BYTES per slot
 * (all of a slot but its seq word). */
#define MP_RING_STACK_MAX (32u << 10)
#define MP_STACK_SLOT_BYTES 120u
/* FRAMES records (type 25): at most MP_FRAMES_MAX return addresses,
 * MP_FRAMES_PER_SLOT per continuation slot; the walk that made them went
 * through at most MP_FRAMES_OWN_MAX frames of libmemprof's own first. */
#define MP_FRAMES_MAX 256u
#define MP_FRAMES_PER_SLOT (MP_STACK_SLOT_BYTES / 8u)
#define MP_FRAMES_OWN_MAX 8u
/* A frame of a FRAMES record that is not a return address but a Python
 * frame (libclient/expand.h): MP_PYFRAME_TAG in the top byte, the string
 * id of its code's "qualname@filename" (the ring's string table) in the
 * next 32 bits, its line in the low 24 (0: unknown). No user-space
 * address has this top byte. */
#define MP_PYFRAME_TAG (0xfaull << 56)
#define MP_PYFRAME(name_id, line) \
	(MP_PYFRAME_TAG | (uint64_t)(uint32_t)(name_id) << 24 | ((uint64_t)(line)&0xffffffu))
#define MP_PYFRAME_IS(v) (((uint64_t)(v) >> 56) == 0xfau)
#define MP_PYFRAME_NAME(v) ((uint32_t)((uint64_t)(v) >> 24))
#define MP_PYFRAME_LINE(v) ((uint32_t)((uint64_t)(v)&0xffffffu))
#define MP_TSTACK_MAX 16u
/* Address ranges of allocator wrappers in the header (wrap). */
#define MP_RING_WRAP_MAX 16u
/* Frames of a FRAMES record sent for a wrapped allocation alone. */
#define MP_WRAP_FRAMES 16u

/* Ring record types are enum mp_record_type, at the end of this file. */

/*
 * The consumer's lease (docs/RING.md "A consumer that dies"): a consumer
 * that holds an open-file-description read lock (F_OFD_SETLK) on byte
 * MP_RING_LEASE_BYTE of the ring's memfd for as long as it is attached
 * writes attached with MP_ATTACHED_LEASE set, and in its other bits a
 * number that differs from the previous consumer's (its alloc_epoch). The
 * kernel drops the lock when the consumer's last reference to the file
 * goes, at the latest when it dies; libmemprof, finding the bit set and no
 * lock held, swaps attach_word to 0 (detached and dormant). A consumer
 * without the bit (an older one) is never released.
 */
#define MP_RING_LEASE_BYTE 0
#define MP_ATTACHED_LEASE 0x80000000u
/* mp_ring_hdr.alloc_max_wait_ns: no bound while the lease is held. */
#define MP_WAIT_LEASE UINT64_MAX

/* Values of mp_ring_hdr.alloc_mode. */
enum mp_alloc_mode {
	MP_ALLOC_OFF = 0, /* dormant: no record, no shared write */
	MP_ALLOC_PRECISE = 1, /* every call; a full ring makes the caller wait */
	MP_ALLOC_SAMPLED = 2, /* byte-weighted Poisson samples; never waits */
};

/* mp_ring_hdr.creator_flags. */
/* The creator's process registered for MEMBARRIER_CMD_GLOBAL_EXPEDITED: a
 * consumer's attach barrier (docs/RING.md "Attach") can be the expedited
 * one, IPIs to the CPUs running its threads, instead of a grace period. */
#define MP_RING_F_MEMBARRIER_EXPEDITED 0x1u
/* The creator rings the doorbell (mp_ring_hdr.bell, docs/RING.md
 * "Doorbell"): a consumer may sleep on it instead of polling. */
#define MP_RING_F_BELL 0x2u
/* Values of mp_ring_hdr.bell. */
#define MP_BELL_QUIET 0u /* the consumer polls: producers do nothing */
#define MP_BELL_ARMED 1u /* the consumer sleeps: the next record wakes it */

struct mp_ring_hdr {
	/* Written once by the creator before the memfd is visible. */
	uint64_t magic;
	uint32_t abi_version;
	uint32_t hdr_size;
	uint64_t total_size;
	uint32_t creator_pid;
	uint32_t slot_size;
	uint32_t slot_count; /* per thread ring, power of two */
	uint32_t thread_size;
	uint32_t thread_count; /* thread slots, and as many rings */
	uint32_t str_max; /* entries in the string table, id 0 reserved */
	uint32_t blob_size; /* bytes of string storage */
	uint32_t creator_flags; /* MP_RING_F_* (0 from an older creator) */
	uint64_t ring_off; /* thread_count rings of slot_count slots */
	uint64_t threads_off;
	uint64_t strent_off;
	uint64_t blob_off;
	union {
		struct {
			/* Read by every producer on every marker, written
			 * only at attach and detach: shares its line with
			 * read-only data. Nonzero while a consumer is
			 * attached; with MP_ATTACHED_LEASE, the consumer
			 * holds the ring's lease (above). */
			uint32_t attached;
			/* In-process allocation path (ABI 2), written by the
			 * consumer, read by the interposer on every
			 * allocator call: enum mp_alloc_mode. MP_ALLOC_OFF
			 * (the value of a fresh ring) keeps it dormant. */
			uint32_t alloc_mode;
		};
		/* Both as one word: libmemprof releases the ring of a
		 * consumer whose lease is gone by swapping it to 0. */
		uint64_t attach_word;
	};
	/* MP_ALLOC_SAMPLED: mean sampling interval in bytes. */
	uint64_t alloc_sample_bytes;
	/* Incremented by each consumer that turns the interposer on: the
	 * interposer forgets the sampled blocks of an earlier session. */
	uint64_t alloc_epoch;
	/* Offset from the thread pointer (x86-64 fs base) of the interposer's
	 * per-thread word that is nonzero while it is inside the allocator:
	 * the daemon's syscall tracepoints skip the allocator's own mappings
	 * with it. Written once by the creator; 0 unknown. */
	int64_t alloc_tls_off;
	/* Precise mode, written by the consumer before alloc_mode: how long a
	 * thread waits for room in its full ring before it drops the record
	 * (docs/RING.md "Waiting for space"). 0 (an older consumer): 1 s.
	 * MP_WAIT_LEASE: as long as the consumer holds the ring's lease (1 s
	 * for a consumer without it). In what was padding before drops: no
	 * other field moved. */
	uint64_t alloc_max_wait_ns;
	/* Records dropped because a ring was full, all threads. */
	uint64_t drops __attribute__((aligned(64)));
	/* Global order of memprof_phase() calls, for the attach snapshot. */
	uint64_t phase_order;
	/* String table allocation. */
	uint32_t str_count;
	uint32_t blob_used;
	/* Heap records (types 8-15) dropped: ring full after the bounded wait
	 * (precise), ring full (sampled), a sampled block that could not be
	 * remembered, or an allocator call re-entered from a signal handler
	 * while the thread was writing a record. Also counted in drops. */
	uint64_t alloc_drops;
	/* Times an allocating thread found its ring full and waited. */
	uint64_t alloc_waits;
	/* Call stacks on the in-process path (written by the consumer only,
	 * before alloc_mode): nonzero, each recorded allocation is preceded
	 * by a STACK record (type 24) with at most this many bytes of the
	 * thread's stack (<= MP_RING_STACK_MAX). 0 (an older consumer): none. */
	uint32_t alloc_stack_bytes;
	/* Allocator wrappers (docs/RING.md "Allocator wrappers"), written by
	 * the consumer only, read by the interposer with relaxed loads: an
	 * allocation whose caller is in one of the first wrap_count ranges
	 * [lo, hi) of wrap (sorted, all inside [wrap_lo, wrap_hi)) carries a
	 * STACK record of at most wrap_stack_bytes (<= MP_RING_STACK_MAX),
	 * from which the consumer finds the first caller outside the
	 * wrappers. A torn read only adds or misses one stack. 0: none. */
	uint32_t wrap_stack_bytes;
	uint64_t wrap_lo, wrap_hi;
	uint32_t wrap_count;
	/* Call stacks unwound in process (written by the consumer only,
	 * before alloc_mode, with alloc_stack_bytes): nonzero, an allocation
	 * that carries alloc_stack_bytes of stack sends, where libmemprof can
	 * unwind it, a FRAMES record (type 25) of at most this many frames
	 * (<= MP_FRAMES_MAX) instead of its STACK record; an allocation that
	 * has its caller in an allocator wrapper (wrap) is walked at most
	 * min(alloc_stack_depth, MP_WRAP_FRAMES) frames, up to the first
	 * frame past the caller outside every wrap range, which becomes the
	 * record's caller (MP_REC_F_PAST_WRAPPER; a walk that ends inside
	 * the wrappers sends its frames). 0: STACK only. */
	uint32_t alloc_stack_depth;
	struct {
		uint64_t lo, hi;
	} wrap[MP_RING_WRAP_MAX];
	/* The doorbell (MP_RING_F_BELL), a shared futex word: the consumer
	 * stores MP_BELL_ARMED before it sleeps; a producer that publishes a
	 * record and finds it armed swaps it to MP_BELL_QUIET and, if it was
	 * the one to, wakes the futex (one syscall per sleep of the consumer,
	 * none while it polls). In what was padding: no other field moved. */
	uint32_t bell;
};

_Static_assert(offsetof(struct mp_ring_hdr, alloc_max_wait_ns) == 120 &&
		       offsetof(struct mp_ring_hdr, drops) == 128,
	       "alloc_max_wait_ns took the padding before drops");

/* Values of mp_slot.clock (docs/RING.md "Clocks"). */
enum mp_ts_clock {
	MP_TS_MONOTONIC = 0, /* CLOCK_MONOTONIC nanoseconds */
	/* TSC ticks (rdtsc): written only where the TSC is invariant and the
	 * kernel's clocksource is tsc; the consumer converts them with its
	 * own calibration against CLOCK_MONOTONIC, and rejects them where it
	 * does not trust the TSC itself. */
	MP_TS_TSC = 1,
};

/* One ring slot. Thread slot i owns ring i. seq == pos + 1 once the record
 * for position pos of that ring (slot pos & (slot_count - 1)) is published;
 * anything else means not published yet. Only the owning thread writes a
 * ring's slots; the consumer reports progress through the thread slot's
 * tail alone, so slot cache lines never travel back. */
struct mp_slot {
	uint64_t seq;
	uint64_t ts_ns;
	uint8_t type;
	uint8_t flags;
	uint8_t rank;
	/* Heap records (types 8-15): enum mp_ts_clock, the clock of ts_ns.
	 * Other records: ignored (always CLOCK_MONOTONIC ns). */
	uint8_t clock;
	uint32_t tid;
	uint32_t tseq; /* per thread-slot record number */
	uint32_t reserved1;
	uint32_t name_id;
	uint32_t reserved2;
	int64_t dims[8];
	uint64_t reserved3[2];
} __attribute__((aligned(128)));

struct mp_frame {
	uint32_t name_id;
	uint32_t reserved;
	uint64_t ts_ns; /* 0: begun while no consumer was attached */
};

/* Per-thread state a late consumer snapshots. gen is a seqlock written only
 * by the owning thread: odd while the stacks change; every record the thread
 * writes carries tseq = gen / 2 after its update, so the snapshot taken at an
 * even gen G reflects exactly the records with tseq <= G / 2. */
struct mp_thread {
	uint32_t state; /* 0 free, 1 owned */
	uint32_t tid;
	uint64_t gen;
	uint32_t depth; /* open kernels; may exceed MP_KSTACK_MAX */
	uint32_t tag_depth; /* open tags; may exceed MP_TSTACK_MAX */
	uint32_t phase_id; /* last phase set by this thread (0: none) */
	uint32_t reserved0;
	uint64_t phase_ts;
	uint64_t phase_order;
	uint64_t head; /* next position in this slot's ring (producer) */
	uint64_t reserved1;
	struct mp_frame kernels[MP_KSTACK_MAX];
	struct mp_frame tags[MP_TSTACK_MAX];
	/* Consumer's position in this slot's ring: every position below it
	 * has been read and may be reused. Written by the consumer only, on
	 * its own cache line; the producer reads it once per lap. A thread
	 * reusing the slot continues at head, after the old records. */
	uint64_t tail __attribute__((aligned(64)));
	uint64_t reserved2[7];
} __attribute__((aligned(64)));

/* String table entry: (offset << 32) | (len + 1); 0 until published. */
typedef uint64_t mp_strent;

_Static_assert(sizeof(struct mp_ring_hdr) == 512, "ring header ABI");
_Static_assert(__builtin_offsetof(struct mp_ring_hdr, bell) == 456,
	       "the doorbell took the padding after wrap");
_Static_assert(__builtin_offsetof(struct mp_ring_hdr, attached) == 88 &&
		       __builtin_offsetof(struct mp_ring_hdr, alloc_mode) == 92 &&
		       __builtin_offsetof(struct mp_ring_hdr, attach_word) == 88,
	       "ring header ABI: attached and alloc_mode");
_Static_assert(sizeof(struct mp_slot) == 128, "ring slot ABI");
_Static_assert(sizeof(struct mp_thread) == 896, "thread slot ABI");

/* Where each part of a ring lives, from its parameters: the header, then
 * thread_count rings of slot_count slots (128-byte aligned), the thread
 * slots, the string table and the string blob; @end is the first byte
 * after the blob. The creator (libmemprof), the test image builder and
 * the fuzzer lay rings out with this one function. */
struct mp_ring_layout {
	uint64_t ring_off;
	uint64_t threads_off;
	uint64_t strent_off;
	uint64_t blob_off;
	uint64_t end;
};

static inline struct mp_ring_layout mp_ring_layout_of(uint32_t slot_count, uint32_t thread_count,
						      uint32_t str_max, uint32_t blob_size)
{
	struct mp_ring_layout l;

	l.ring_off = (sizeof(struct mp_ring_hdr) + 127) & ~(uint64_t)127;
	l.threads_off = l.ring_off + (uint64_t)thread_count * slot_count * sizeof(struct mp_slot);
	l.strent_off = l.threads_off + (uint64_t)thread_count * sizeof(struct mp_thread);
	l.blob_off = l.strent_off + (uint64_t)str_max * sizeof(mp_strent);
	l.end = l.blob_off + blob_size;
	return l;
}

/* Records of the ring (mp_slot.type), their flags and bounds. */
#define MP_MAX_RANK 8

enum mp_record_type {
	MP_REC_KERNEL_BEGIN = 1,
	MP_REC_KERNEL_END = 2,
	MP_REC_INPUT_SHAPE = 3,
	MP_REC_OUTPUT_SHAPE = 4,
	MP_REC_PHASE = 5,
	MP_REC_TAG_BEGIN = 6,
	MP_REC_TAG_END = 7,
	/* Ranges reserved so that work in parallel does not collide; each
	 * range's owner defines its records (MP_RING_ABI_VERSION 2):
	 *   8-15  allocation records of the in-process path (interposer)
	 *   16-23 pool records (memprof_pool_* API)
	 *   24-31 call-stack payload records
	 *   32-39 further markers */
	/* In-process path (docs/RING.md): the same events as the eBPF
	 * tracer's raw MP_RAW_ALLOC / MP_RAW_FREE / MP_RAW_REALLOC, with
	 * the same semantics; fn is enum mp_alloc_fn. */
	MP_REC_ALLOC = 8, /* fn returned addr for a request of size bytes */
	MP_REC_FREE = 9, /* fn is releasing addr (stamped before release) */
	/* fn resized old_addr (0: none) to size bytes and returned addr
	 * (0: failed; with size 0, old_addr was freed). */
	MP_REC_REALLOC = 10,
	/* Pools (memprof_pool_*): @name is the pool's name, @pool the rest. */
	MP_REC_POOL_ALLOC = 16,
	MP_REC_POOL_FREE = 17,
	MP_REC_POOL_RESET = 18,
	MP_REC_POOL_DECLARE = 19,
	/* Call stack of the heap record that follows it in the same ring
	 * (ALLOC or REALLOC, always): dims[0..3] = ip, sp, bp (the
	 * registers of the capturing frame inside libmemprof), len; then
	 * ceil(len / MP_STACK_SLOT_BYTES) continuation slots holding the
	 * len bytes of stack from sp up, each after its seq word. Never
	 * returned on its own: the consumer attaches it to that heap record
	 * (mp_record.stack). */
	MP_REC_STACK = 24,
	/* The call stack of the heap record that follows it in the same
	 * ring (ALLOC or REALLOC, always), unwound by libmemprof: dims[0] =
	 * n (1..MP_FRAMES_MAX), flags MP_FRAMES_F_TRUNCATED or 0; then
	 * ceil(n / MP_FRAMES_PER_SLOT) continuation slots holding the n
	 * return addresses, innermost first (the first returns into the
	 * allocating function), each slot's after its seq word. Attached
	 * to that heap record as STACK is (mp_record.stack). */
	MP_REC_FRAMES = 25,
	/* 32-39 further markers. The process-wide phase ends (memprof_phase_end):
	 * no phase is current until the next MP_REC_PHASE. */
	MP_REC_PHASE_END = 32,
};

/* Kinds of pool (memprof.h's enum memprof_pool_kind). */
#define MP_POOL_KIND_HOST 0u
#define MP_POOL_KIND_DEVICE 1u

/* The record was synthesised from a thread's open-kernel (or open-tag) stack
 * when the consumer attached: the kernel was already open. */
#define MP_REC_F_OPEN_AT_ATTACH 0x1u
/* KERNEL_END / TAG_END written by the library when the thread exited with
 * the kernel (tag) still open; ts_ns is the thread's exit time. */
#define MP_REC_F_THREAD_EXIT 0x2u
/* With MP_REC_F_OPEN_AT_ATTACH: the kernel (tag) began while no consumer was
 * attached, so the library did not read the clock; ts_ns is the attach time
 * (an upper bound of the real begin). */
#define MP_REC_F_TS_UNKNOWN 0x4u
/* ALLOC / REALLOC in sampled mode: a sample of a block smaller than the
 * sampling interval; size is the requested size, which the consumer of the
 * record replaces by its unbiased estimate (as for MP_RAW_F_SCALED). */
#define MP_REC_F_SCALED 0x8u
/* ALLOC / REALLOC whose direct caller was in an allocator wrapper the
 * consumer published (ring header's wrapper table): libmemprof walked
 * past the wrappers and caller is the first frame outside them, to which
 * the block is charged; no FRAMES record comes with it. */
#define MP_REC_F_PAST_WRAPPER 0x10u
/* The flags a heap record may carry. */
#define MP_REC_HEAP_FLAGS (MP_REC_F_SCALED | MP_REC_F_PAST_WRAPPER)
/* FRAMES: the stack goes on beyond its frames (the depth bound). */
#define MP_FRAMES_F_TRUNCATED 0x1u

#endif /* MEMPROF_RING_ABI_H */
