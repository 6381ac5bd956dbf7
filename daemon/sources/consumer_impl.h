/* SPDX-License-Identifier: MIT */
/*
 * The ring reader's inside, for consumer.c and ring_checks.c (the checks
 * of what a ring claims: refused records, stuck rings). Not an interface:
 * use consumer.h.
 */
#ifndef MP_SOURCES_CONSUMER_IMPL_H
#define MP_SOURCES_CONSUMER_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "consumer.h"
#include "ring_abi.h"
#include "tsc_clock.h"

#define LOAD(p, mo) __atomic_load_n((p), __ATOMIC_##mo)
#define STORE(p, v, mo) __atomic_store_n((p), (v), __ATOMIC_##mo)
#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)

/* One read looks at READ_SCAN_BUDGET slots at most (records already in the
 * attach snapshot are looked at and skipped), and gives a ring's space back
 * every TAIL_EVERY records it hands over. */
#define READ_SCAN_BUDGET (4 * 65536)
#define TAIL_EVERY 256
/* Attempts at a consistent copy of one thread slot. */
#define SNAP_SPINS 4096
#define SNAP_YIELDS 256
/* Yields for the whole attach: a ring whose thread slots never settle (a
 * hostile writer) cannot make the open take long. */
#define SNAP_YIELD_BUDGET 2048
#define MAX_FD_SCAN 65536
/* The open-at-attach records of kernels begun while detached carry the
 * attach's clock reading less this: a heap record the interposer writes
 * once the mode is on is stamped after that reading, give or take the TSC
 * conversion's error (docs/RING.md "Clocks": ~60 ns at most), and must
 * come after the begin of the kernel it belongs to. */
#define ATTACH_TS_EARLY_NS 1000
/* A slot's first cache line: header fields and dims[0..2]. */
#define HEAP_WORDS_END 64
_Static_assert(offsetof(struct mp_slot, dims) + 3 * 8 == HEAP_WORDS_END, "heap record layout");
/* Heap records name a builtin function of enum mp_alloc_fn. */
#define MP_HEAP_FN_MAX 32u
/* A heap record's stamp may be this far outside the session's window (the
 * attach, the clock read after the record was seen): the TSC conversion's
 * error is ~60 ns (docs/RING.md "Clocks"); this also covers a read's own
 * length between two clock reads. */
#define TS_SLACK_NS (1000 * 1000ull)
/* Thread ids are at most PID_MAX_LIMIT (4 Mi) on 64-bit Linux. */
#define TID_MAX (4u << 20)

static inline bool mp_record_is_heap(uint32_t type)
{
	return type >= MP_REC_ALLOC && type <= MP_REC_REALLOC;
}

struct tstate {
	uint64_t pos; /* next position in this thread slot's ring */
	struct mp_slot *slots; /* the ring: slot_at(c, i, 0) */
	/* Last TSC record's converted stamp: a recalibration between two
	 * reads never puts a thread's record before its predecessor. */
	uint64_t tsc_last_ns;
	/* mp_consumer_complete_ns(): every record of this ring not yet
	 * handed over was published after this CLOCK_MONOTONIC time, or is
	 * stamped at or after it (0: not known yet). */
	uint64_t done_ns;
	/* Lap mark: once pos reaches lap_pos, every record not handed over
	 * was published after lap_ns (0: no mark). Set by a read that finds
	 * records, at its position plus a whole ring: the writer could not
	 * reach that position before we freed the one a lap behind it. */
	uint64_t lap_pos, lap_ns;
	/* A published record that could not be taken (a STACK record whose
	 * unit is not all there: only a hostile writer leaves one): at which
	 * position, since which read (0: not stuck). */
	uint64_t stuck_pos, stuck_ns;
	uint32_t snap_seq; /* records up to this one are in the snapshot */
	/* The thread id of the records taken last, and the owner the thread
	 * slot named then (tid_ok()). */
	uint32_t tid, owner;
	/* Since when the ring's header claims records no slot holds, or its
	 * next slot holds a sequence word no writer leaves there, at @stale_pos
	 * (0: not so); flagged once (check_heads()). */
	uint64_t stale_ns, stale_pos;
	bool stale, stuck_flagged;
	bool snap_valid;
	/* Heap records of this ring may still precede the snapshot (tseq
	 * below snap_seq): cleared at the first record at or after it. */
	bool heap_pre_snap;
};

struct mp_consumer {
	unsigned char *base;
	size_t len;
	void *map; /* ours to munmap, NULL for open_mem */
	size_t map_len;
	struct mp_ring_hdr *hdr;
	/* validated copy of the static header */
	uint32_t slot_count;
	uint64_t mask;
	uint32_t thread_count;
	uint32_t str_max;
	uint32_t blob_size;
	uint64_t ring_off, threads_off, strent_off, blob_off;
	pid_t pid;

	int err;
	int err_pending; /* found by a read; reported after its records */
	uint32_t corruption; /* MP_CONSUMER_CORRUPT_* */
	/* drops counter at attach, and the last plausible count since then */
	uint64_t drops_base, drops_seen, attach_ns;
	/* alloc_drops and alloc_waits at attach: an earlier consumer's are
	 * not this one's */
	uint64_t alloc_drops_base, alloc_waits_base;
	/* FRAMES records refused beyond this depth (0: MP_FRAMES_MAX) */
	uint32_t stack_depth;
	uint64_t n_unwound, n_copied; /* FRAMES and STACK records taken */
	/* A stuck ring counts as read up to stall_ns before each read once it
	 * has been stuck that long (mp_consumer_opts.stall_ns). */
	uint64_t stall_ns;
	bool attached; /* we set the header's attached flag */
	uint8_t attach_barrier; /* enum mp_attach_barrier of the attach */
	bool lease; /* we hold the ring's lease (lease.h) */
	bool alloc_on; /* we turned the interposer on */
	/* Heap records are expected: this consumer turned the interposer on
	 * at some point, or reads an image (!strict). */
	bool heap_ok;
	/* Validate stamps and thread ids against the live process (a ring
	 * opened by pid, or opts.strict); an image's are made up. */
	bool strict;
	/* Heap records stamped outside [ts_lo, ts_hi] are refused; ts_hi is a
	 * clock reading plus TS_SLACK_NS, read again when a record passes it. */
	uint64_t ts_lo, ts_hi;
	uint64_t rejected[MP_CONSUMER_REJECT_N];
	uint64_t stuck_rings, heads_ns; /* heads_ns: last check_heads() */
	unsigned yield_budget;
	mp_consumer_pf pf; /* mp_consumer_set_prefetch() */
	void *pf_ctx;
	struct tstate *ts; /* per thread slot */
	uint32_t scan_start;
	/* the rings a read found with records, in the order it reads them */
	uint32_t *active;
	struct mp_record *synth;
	size_t nsynth, next_synth;
	char **names; /* per string id, sanitised copies */
	/* The stack of the record being handed over (MP_REC_STACK), valid
	 * until its callback returns; allocated at the first stack. */
	unsigned char *stk;
	struct mp_tsc_clock clk;
	/* mp_consumer_complete_others_ns() while the records of a ring are
	 * handed over (reading: that ring + 1; 0: none) */
	uint32_t reading;
	uint64_t others_ns;
};

static inline struct mp_slot *slot_at(const struct mp_consumer *c, uint32_t ring, uint64_t pos)
{
	return (struct mp_slot *)(c->base + c->ring_off) + (uint64_t)ring * c->slot_count +
	       (pos & c->mask);
}

static inline struct mp_thread *thread_at(const struct mp_consumer *c, uint32_t i)
{
	return (struct mp_thread *)(c->base + c->threads_off) + i;
}

/* ring_checks.c: the slow paths of the checks. */
/* Counts a record refused for @why and marks it skipped; returns 0. */
int mp_cons_reject_(struct mp_consumer *c, enum mp_consumer_reject why, bool *skipped);
/* A stamp outside [ts_lo, ts_hi]: 1 before, 2 after even by a clock read
 * now, 0 inside (ts_hi moved on). */
int mp_cons_ts_outside_(struct mp_consumer *c, uint64_t ns);
/* A heap record of ring @t stamped outside the window (@out of
 * mp_cons_ts_outside_()) with record number @tseq: skipped or refused. */
int mp_cons_ts_reject_(struct mp_consumer *c, const struct tstate *t, int out, uint32_t tseq,
		       bool *skipped);
/* Whether a record of ring @t with another thread id than its last may be
 * believed. */
bool mp_cons_tid_ok_(struct mp_consumer *c, struct tstate *t, uint32_t tid);
void mp_cons_ring_stuck_(struct mp_consumer *c, struct tstate *t);
void mp_cons_check_heads_(struct mp_consumer *c, uint64_t now_ns);

#endif /* MP_SOURCES_CONSUMER_IMPL_H */
