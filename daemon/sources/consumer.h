/* SPDX-License-Identifier: MIT */
/*
 * The ring reader: the consumer side of the libmemprof marker ring
 * (libclient/ring_abi.h), one of memprofd's sources.
 *
 * The ring lives in memory the profiled process can write: everything read
 * from it is hostile input. Every offset, length, index and string is
 * bounds-checked; a corrupted ring yields -EBADMSG (or -EPROTO for an ABI
 * mismatch), never a crash and never an endless loop.
 */
#ifndef MP_SOURCES_CONSUMER_H
#define MP_SOURCES_CONSUMER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "ring_abi.h"

/* A call stack captured with a heap record: the registers and the copy
 * of the stack (MP_REC_STACK), or the frames libmemprof unwound
 * (MP_REC_FRAMES: @frames set, the rest zero). */
struct mp_rec_stack {
	uint64_t ip, sp, bp;
	uint32_t len; /* bytes of stack from sp up, <= MP_RING_STACK_MAX */
	const unsigned char *bytes;
	/* FRAMES: n_frames (1..the depth asked for) return addresses,
	 * innermost first, arbitrary values; truncated: the stack goes on */
	const uint64_t *frames;
	uint32_t n_frames;
	bool truncated;
};

/* A decoded, validated record. */
struct mp_record {
	uint32_t type; /* enum mp_record_type */
	uint32_t flags; /* MP_REC_F_* */
	uint32_t tid; /* kernel thread id of the writer */
	uint32_t rank; /* shapes: number of valid dims */
	uint64_t ts_ns; /* CLOCK_MONOTONIC */
	/* KERNEL_BEGIN, PHASE, TAG_BEGIN: NUL-terminated name, sanitised to
	 * printable ASCII, owned by the consumer and valid until
	 * mp_consumer_free(). NULL for other types. */
	const char *name;
	union {
		int64_t dims[MP_MAX_RANK]; /* shapes */
		struct { /* ALLOC, FREE, REALLOC */
			uint64_t addr;
			uint64_t size;
			uint64_t caller; /* return address into fn's caller */
			uint64_t old_addr;
		} heap;
	};
	/* Record number of the writer's thread slot: consecutive for one
	 * thread while a consumer is attached (a gap there is a dropped
	 * record). Continues across threads reusing the slot. */
	uint32_t seq;
	uint32_t fn; /* ALLOC, FREE, REALLOC: enum mp_alloc_fn */
	/* POOL_*: the slice (addr, size: ALLOC; addr: FREE), the return
	 * address into the caller of the memprof_pool_* function, and the
	 * pool's kind (MP_POOL_KIND_*). Zero for other types. */
	struct {
		uint64_t addr, size, caller;
		uint32_t kind;
	} pool;
	/* ALLOC, REALLOC: the call stack recorded with it (MP_REC_STACK), in
	 * consumer memory valid until the callback of
	 * mp_consumer_read_rings_at() returns; NULL for none. */
	const struct mp_rec_stack *stack;
};

struct mp_consumer;

/* Finds and maps the ring of process @pid (through /proc/PID/fd, works
 * across mount namespaces). -ENOENT: the process has no ring (libmemprof not
 * loaded or no marker yet); -ESRCH: no such process; -EPROTO: ABI mismatch;
 * -EBADMSG: corrupted header. After a successful open, the first records
 * read are the kernels and tags open at attach time (MP_REC_F_OPEN_AT_ATTACH,
 * outermost first, with their original timestamps), then live records. */
int mp_consumer_open_pid(pid_t pid, struct mp_consumer **ret);
/*
 * How to attach (mp_consumer_open_*_opts(); NULL: all zero).
 *
 * @alloc_mode (enum mp_alloc_mode of ring_abi.h; MP_ALLOC_OFF leaves the
 * interposer dormant), @alloc_sample_bytes (MP_ALLOC_SAMPLED's interval)
 * and @alloc_stack_bytes (as mp_consumer_set_alloc_stacks()) turn the
 * target's interposer on *with* the attach, before the snapshot of the
 * open kernels: every kernel that begins after the snapshot then has its
 * allocations recorded, and those recorded before it are told apart by
 * their record number (docs/RING.md "Per-thread state and late attach").
 * mp_consumer_set_alloc_mode() after the open leaves a window in which a
 * kernel's markers are recorded and its allocations are not.
 *
 * @before_attach, when set, runs once the header is validated and before
 * the consumer writes anything into the ring (@ctx, the consumer); a
 * negative return fails the open with it.
 *
 * @stall_ns (0: MP_CONSUMER_STALL_NS): how long a ring may stay stuck at a
 * record it cannot take before mp_consumer_complete_ns() passes it.
 */
#define MP_CONSUMER_STALL_NS (100 * 1000 * 1000ull)
struct mp_consumer_opts {
	uint32_t alloc_mode;
	uint32_t alloc_stack_bytes;
	/* With alloc_stack_bytes: the target unwinds in process and sends
	 * FRAMES records of at most this many frames (<= MP_FRAMES_MAX)
	 * where it can; FRAMES records deeper than this are refused. 0: it
	 * sends copies only. */
	uint32_t alloc_stack_depth;
	uint64_t alloc_sample_bytes;
	/* Precise mode: how long an allocating thread waits for room in its
	 * full ring before it drops (ring_abi.h alloc_max_wait_ns):
	 * MP_WAIT_LEASE while this consumer holds the lease; 0: libmemprof's
	 * old bound (1 s). */
	uint64_t alloc_max_wait_ns;
	int (*before_attach)(void *ctx, struct mp_consumer *c);
	void *ctx;
	uint64_t stall_ns;
	/* An image (mp_consumer_open_mem_opts()) whose stamps and thread ids
	 * are checked as a live target's: stamps against the clock from the
	 * open on, thread ids against the thread slots. Always so for a ring
	 * opened by pid. */
	bool strict;
};
/* -EINVAL: an unknown mode, a sampled mode without an interval, more
 * stack bytes than MP_RING_STACK_MAX, or frames than MP_FRAMES_MAX. */
int mp_consumer_open_pid_opts(pid_t pid, const struct mp_consumer_opts *o,
			      struct mp_consumer **ret);
/* Same, over a caller-owned memory image (tests, fuzzing). @mem must stay
 * valid and may change concurrently. */
int mp_consumer_open_mem(void *mem, size_t len, struct mp_consumer **ret);
int mp_consumer_open_mem_opts(void *mem, size_t len, const struct mp_consumer_opts *o,
			      struct mp_consumer **ret);
void mp_consumer_free(struct mp_consumer *c);
/* String @id of the ring's string table, sanitised (printable ASCII, at
 * most MP_NAME_MAX bytes) and kept until the consumer is freed; NULL when
 * the entry is invalid or @id 0. */
const char *mp_consumer_string(struct mp_consumer *c, uint32_t id);

/* A hint, while the rings are read, of the heap records some way ahead of
 * the one handed over: @pf(@ctx, address, realloc's old address or 0) for
 * a published heap record MP_CONSUMER_PF_AHEAD slots on, so that the live
 * table's slots it will touch are in the cache by then. The addresses are
 * the target's, unchecked: for a prefetch only. NULL: none. */
#define MP_CONSUMER_PF_AHEAD 8u
typedef void (*mp_consumer_pf)(void *ctx, uint64_t addr, uint64_t old_addr);
void mp_consumer_set_prefetch(struct mp_consumer *c, mp_consumer_pf pf, void *ctx);

/* mp_consumer_read_rings_at(): @ring of the records synthesised at attach
 * (open kernels and tags, the phase), which belong to no ring. */
#define MP_CONSUMER_RING_SYNTH UINT32_MAX
typedef int (*mp_consumer_ring_cb)(void *ctx, uint32_t ring, const struct mp_record *rec);
/*
 * The one way to read the rings. Reads up to @max records and hands each to
 * @cb with the index of the ring (thread slot) it came from: first the
 * attach snapshot's records (MP_CONSUMER_RING_SYNTH), then each ring's
 * records in that ring's order, ring after ring, *not* merged by timestamp
 * (the ordering stage merges; one ring's records are in the order its
 * thread wrote them). Records go straight from the slots to @cb, with no
 * copy in between. @now_ns: CLOCK_MONOTONIC as the caller read it before
 * the call, the time mp_consumer_complete_ns() then reports for the rings
 * found empty. Returns the number of records handed over (0: nothing
 * ready), a negative return of @cb, or negative errno when the ring is
 * corrupted (after the records before the corruption were handed over;
 * every later call returns it too: the consumer is then unusable). @rec,
 * and its stack, are valid only during the call; its name until
 * mp_consumer_free().
 */
int mp_consumer_read_rings_at(struct mp_consumer *c, size_t max, uint64_t now_ns,
			      mp_consumer_ring_cb cb, void *ctx);
/*
 * How far the rings have been read (docs/RING.md "Consumer: how far the
 * rings have been read"): a time C such that every record of any ring not
 * handed over yet by mp_consumer_read_rings_at() was published after C
 * (its ring was found empty by a read told C, or has been read a whole
 * ring's worth of records past where a read told C found it), or carries a
 * timestamp at or after C (its ring still held records after one stamped
 * C). A ring stuck at a record it cannot take (only a hostile writer
 * leaves one) counts as read up to stall_ns before each read once it has
 * been stuck that long (struct mp_consumer_opts). No record
 * still to come can therefore have happened before a record stamped
 * before C (less the clocks' disagreement): releasing the records read so
 * far up to C keeps every causal order. 0 until every ring has been
 * looked at; UINT64_MAX for NULL. Only mp_consumer_read_rings_at() moves
 * it.
 */
uint64_t mp_consumer_complete_ns(const struct mp_consumer *c);
/* Inside a callback of mp_consumer_read_rings_at() for a record of ring R:
 * the same over every ring but R (R's own records come in R's order, so
 * they need no bound against each other): a record of R stamped before it
 * (less the clocks' disagreement), with nothing older held elsewhere, may
 * be released at once. Outside a callback, mp_consumer_complete_ns(). */
uint64_t mp_consumer_complete_others_ns(const struct mp_consumer *c);
/* Records the producers dropped because the ring was full since this
 * consumer attached. The counter lives in memory the target writes: a value
 * that goes back or grows faster than one drop per nanosecond since attach
 * is not believed; the last plausible value is returned and
 * MP_CONSUMER_CORRUPT_HEADER is set. */
uint64_t mp_consumer_drops(struct mp_consumer *c);

/* mp_consumer_corruption(): what the consumer found wrong in the ring. */
/* a header counter (drops) overwritten with an impossible value */
#define MP_CONSUMER_CORRUPT_HEADER 0x1u
/* a slot, sequence number, length or name that fails validation: the
 * consumer stopped there (mp_consumer_read_rings_at() returned -EBADMSG) */
#define MP_CONSUMER_CORRUPT_RECORDS 0x2u
/* a ring stuck: its header says it holds records that no slot publishes,
 * its next slot holds a sequence word that no writer leaves there, or a
 * record never completes, for stall_ns; the other rings go on */
#define MP_CONSUMER_CORRUPT_STUCK 0x4u
/* records refused (mp_consumer_rejected()), reading goes on */
#define MP_CONSUMER_CORRUPT_REJECTED 0x8u
uint32_t mp_consumer_corruption(const struct mp_consumer *c);
/* Records read and refused, skipped and never handed over, by reason: */
enum mp_consumer_reject {
	/* a heap record stamped outside the window, from the attach to the
	 * read, with TS_SLACK_NS of error (strict) */
	MP_CONSUMER_REJECT_TIME,
	/* a thread id not the one of the ring's thread slot (strict) */
	MP_CONSUMER_REJECT_THREAD,
	/* a STACK record longer than MP_RING_STACK_MAX, with its heap record */
	MP_CONSUMER_REJECT_STACK,
	/* a heap record (or stack) while the interposer was never turned on */
	MP_CONSUMER_REJECT_MODE,
	MP_CONSUMER_REJECT_N
};
uint64_t mp_consumer_rejected(const struct mp_consumer *c, enum mp_consumer_reject why);
/* Rings found stuck (MP_CONSUMER_CORRUPT_STUCK), each once. */
uint64_t mp_consumer_stuck_rings(const struct mp_consumer *c);
/* Of those, heap records (ALLOC, FREE, REALLOC), since this consumer
 * attached: figures of the in-process path are lower bounds when nonzero. */
uint64_t mp_consumer_alloc_drops(const struct mp_consumer *c);
/* The header's alloc_tls_off (ring_abi.h); hostile like every field: it
 * only ever locates a word in the target's own memory. */
int64_t mp_consumer_alloc_tls_off(const struct mp_consumer *c);
/* The ring's doorbell (docs/RING.md "Doorbell"), a futex word shared with
 * the target, or NULL when its creator does not ring it. */
uint32_t *mp_consumer_bell(struct mp_consumer *c);
/* Times an allocating thread of the target waited for ring space since
 * this consumer attached. */
uint64_t mp_consumer_alloc_waits(const struct mp_consumer *c);
/* The barrier the attach made every producer pass (docs/RING.md
 * "Attach"): none (mp_consumer_open_mem), the expedited membarrier (the
 * ring's creator registered for it), the global one (a grace period), or
 * a 20 ms sleep (no membarrier). */
enum mp_attach_barrier {
	MP_ATTACH_BARRIER_NONE,
	MP_ATTACH_BARRIER_EXPEDITED,
	MP_ATTACH_BARRIER_GLOBAL,
	MP_ATTACH_BARRIER_SLEEP,
};
enum mp_attach_barrier mp_consumer_attach_barrier(const struct mp_consumer *c);
/* The FRAMES records' depth (as mp_consumer_opts.alloc_stack_depth, 0:
 * copies only), after the open. -EINVAL beyond MP_FRAMES_MAX. */
int mp_consumer_set_alloc_stack_depth(struct mp_consumer *c, uint32_t depth);
/* Call stacks taken with heap records so far: unwound by the target
 * (FRAMES) into *@ret_unwound, sent as copies (STACK) into *@ret_copied. */
void mp_consumer_stack_counts(const struct mp_consumer *c, uint64_t *ret_unwound,
			      uint64_t *ret_copied);

/* Turns the target's interposer on (enum mp_alloc_mode of ring_abi.h,
 * @sample_bytes for MP_ALLOC_SAMPLED) or off (MP_ALLOC_OFF). The
 * interposer is also turned off by mp_consumer_free(). -EINVAL for an
 * unknown mode or a sampled mode without an interval. */
int mp_consumer_set_alloc_mode(struct mp_consumer *c, uint32_t mode, uint64_t sample_bytes);
/* Call stacks on the in-process path: each recorded allocation then
 * carries @bytes (<= MP_RING_STACK_MAX, 0: off) of its thread's stack.
 * Takes effect at the next mp_consumer_set_alloc_mode(). -EINVAL beyond
 * the maximum. */
int mp_consumer_set_alloc_stacks(struct mp_consumer *c, uint32_t bytes);
/* Allocator wrappers (ring_abi.h wrap): @n ranges [lohi[2i], lohi[2i+1]),
 * sorted, at most MP_RING_WRAP_MAX; an allocation whose caller is in one
 * carries @stack_bytes of its stack. @n 0 turns it off. -EINVAL. */
int mp_consumer_set_wrappers(struct mp_consumer *c, const uint64_t *lohi, uint32_t n,
			     uint32_t stack_bytes);
/*
 * Heap records stamped with the TSC (mp_slot.clock MP_TS_TSC, docs/RING.md
 * "Clocks") are converted to CLOCK_MONOTONIC ns by the consumer:
 *   ns = @ns + (tsc - @tsc) * @mult / 2^32
 * (@mult: ns per tick in 32.32 fixed point), saturated to [0, UINT64_MAX].
 * The consumer keeps its own calibration from (rdtsc, clock_gettime) pairs
 * it takes, refreshed at every read. It believes TSC records only where
 * libmemprof would write them (mp_tsc_trusted() of ring_clock.h);
 * elsewhere they are corrupt (-EBADMSG).
 */
struct mp_tsc_cal {
	uint64_t tsc;
	uint64_t ns;
	uint64_t mult;
};
uint64_t mp_tsc_to_ns(const struct mp_tsc_cal *cal, uint64_t tsc);
/* Replaces the consumer's calibration by @cal for good (tests, replay of a
 * recorded ring); NULL: TSC records are corrupt from now on. */
void mp_consumer_set_tsc_cal(struct mp_consumer *c, const struct mp_tsc_cal *cal);

/* pid that created the ring (from the header, validated against the
 * opened process when opened by pid). */
pid_t mp_consumer_pid(const struct mp_consumer *c);

const char *mp_record_type_name(uint32_t type);

#endif /* MP_SOURCES_CONSUMER_H */
