/* SPDX-License-Identifier: MIT */
/*
 * Inside one session: its state, shared by session.c (setup, loop,
 * teardown) and flow.c (the per-event path: the sources read into the
 * ordering stage, and what it releases handed to the correlator, with the
 * session's own bookkeeping of ring readers, execs and maps).
 */
#ifndef MP_SESSION_IMPL_H
#define MP_SESSION_IMPL_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>

#include "collect.h"
#include "consumer.h"
#include "correlator.h"
#include "freecheck.h"
#include "order.h"
#include "procmaps.h"
#include "rss.h"
#include "session.h"
#include "symbolize.h"
#include "wrappers.h"

#define DEFAULT_LAG_NS (10 * 1000 * 1000ull)
/* Ring drain and watermark release period. */
#define TICK_NS (5 * 1000 * 1000ull)
/* In-process path: an allocating thread fills its ring (32k slots) in about
 * a millisecond, and in precise mode waits when it is full. */
#define TICK_INPROCESS_NS (500 * 1000ull)
/* ... but an idle ring is polled less and less often, down to TICK_NS (the
 * BPF path's period for markers), and at TICK_INPROCESS_NS again from the
 * first tick that finds records: 2,000 wake-ups a second per idle target
 * become 200. The first burst after a quiet spell may wait up to TICK_NS in
 * precise mode, far inside the producer's bound (100 ms, docs/RING.md).
 * The period doubles after this many empty ticks (about 0.5 s from 0.5 ms
 * to 5 ms). */
#define TICK_IDLE_AFTER 64
/* Sampled mode at an interval of this much or more writes a record per
 * that many bytes allocated: 10 GB/s is 160k records/s, 800 a TICK_NS,
 * far from a ring's 32k slots, so its ring is read every TICK_NS (a
 * target's 2,000 wake-ups a second of the daemon were ~12% of a CPU beside
 * an allocation-bound program, perf on cfrac-like). Finer intervals record
 * as often as precise mode, and never wait: read as often. */
#define TICK_SAMPLED_SLOW_BYTES (64u << 10)
/* How often to look for the target's marker ring until it has one: first
 * after RING_RETRY_NS, then twice as long each time up to RING_RETRY_MAX_NS
 * (idle.c mp_sess_ring_retry_ns()); from RING_RETRY_NS again after an exec
 * and when an idle target wakes up. */
#define RING_RETRY_NS (50 * 1000 * 1000ull)
#define RING_RETRY_MAX_NS (1600 * 1000 * 1000ull)
/* A ring missing this long on the in-process path is told (flow.c). */
#define RING_MISSING_NS (1000 * 1000 * 1000ull)
/* idle.c: empty ticks at TICK_NS before the session sleeps without a tick,
 * and the RSS sampling period of a sleeping session whose RSS changes wake
 * no event (the rss_stat tracepoint off). */
#define IDLE_AFTER_TICKS 20
#define IDLE_RSS_NS (1000 * 1000 * 1000ull)
/* Bounded work per ring drain so one flooding producer can't starve the
 * rest of the loop. A drain that reads this many goes again at once, with
 * a fresh clock (drain_more): records published while a drain runs are
 * stamped after the clock it read, so they are held in the ring queue
 * until the next one; short drains keep that window (and the queue) small
 * and give the ring's space back without a sleep between them. */
#define RING_BATCH 8192
/* Drains of the final flush at most: every ring full at the largest
 * capacity a ring may have (16 Mi slots in all, docs/RING.md). */
#define FINAL_DRAINS ((16u << 20) / RING_BATCH)
/* heap_record(): allocations held in a row without their free next before
 * the session stops holding, and how many it then applies alone. */
#define HOLD_MISSES 8
#define HOLD_SKIP 256
/* How often a caller address that is in no known mapping may trigger a
 * re-read of /proc/PID/maps (libraries loaded after attach). */
#define MAPS_REREAD_NS (100 * 1000 * 1000ull)

/* Execs between two drains of the tracer beyond this get no path. */
#define EXEC_PATHS 8

static inline uint32_t session_stack_bytes(const struct mp_session_opts *o)
{
	return o->stack_bytes ? o->stack_bytes : MP_SESSION_STACK_BYTES;
}

/* The ordering stage's items other than ring records. */
enum item_kind {
	ITEM_BPF = 2,
	ITEM_RSS = 3,
};

/* A marker ring reader and the marker items of it still in the merge: the
 * records' name strings belong to the reader, so a reader given up (ring
 * corrupted, exec) is freed only when its last item has been dispatched. */
struct ring_ref {
	struct mp_consumer *c;
	uint64_t pending; /* items in the merge that point into c */
	struct ring_ref *next; /* retired list */
};

enum {
	EP_TRACER = 1,
	EP_TICK,
	EP_RSS,
	EP_SIGNAL,
	EP_DEADLINE,
	EP_STOP,
	EP_SNAPSHOT,
	EP_PERIODIC,
	EP_BELL
};

/* idle.c: a session with nothing to read sleeps without a tick. */
enum idle_state {
	IDLE_POLL = 0, /* the tick drains every source */
	IDLE_GRACE, /* wake-ups armed, one more tick to see nothing was missed */
	IDLE_ASLEEP, /* no tick: the sources' own wake-ups, a one-shot tick */
};

struct bell_waiter;

struct sess_idle {
	enum idle_state state;
	uint32_t quiet_ticks;
	uint64_t drains_seen, events_seen;
	bool rss_changed; /* an RSS sample differed from the one before */
	bool have_rss;
	struct mp_rss_sample last_rss;
	uint32_t ring_tries; /* marker ring searches in a row */
	uint32_t *bell; /* the ring's doorbell armed, NULL: none */
	struct bell_waiter *waiter; /* NULL until a ring has a doorbell */
};

#define ALLOC_TEXT_MAX 4

struct session {
	const struct mp_session_opts *o;
	struct mp_tracer *tracer;
	struct mp_consumer *ring; /* = ring_ref->c */
	struct ring_ref *ring_ref;
	struct ring_ref *retired; /* given up, items still pending */
	uint32_t corruption; /* MP_CORRUPT_* of rings given up */
	/* records the rings given up refused (enum mp_reject), stuck rings */
	uint64_t rejected[MP_REJECT_COUNT], stuck_rings;
	/* Paths of execs seen by the tracer and not yet dispatched, read from
	 * /proc/PID/exe when the event arrives (closer to the exec than its
	 * dispatch, which waits for the merge). */
	char *exec_paths[EXEC_PATHS];
	uint64_t exec_idx[EXEC_PATHS]; /* which exec each path belongs to */
	uint32_t exec_head, exec_n;
	uint64_t execs_arrived, execs_dispatched;
	struct mp_rss_sampler *rss;
	struct mp_order *order;
	struct mp_correlator *corr;
	struct mp_procmaps *maps;
	uint64_t maps_read_ns;
	/* objects the loader named that /proc no longer showed: their
	 * mappings taken from their files (flow.c object_loaded()) */
	uint64_t objects_from_files;
	/* where a free of a block never seen allocated may point */
	struct mp_freecheck *freecheck;
	/* The executable ranges of the object whose free the eBPF path
	 * probes [lo, hi), found at the first unknown free (flow.c). */
	uint64_t alloc_text[2 * ALLOC_TEXT_MAX];
	uint32_t alloc_text_n;
	bool alloc_text_known;
	/* the unwinder and --stacks' stack table */
	struct mp_stack_collector *collect;
	/* Allocator wrappers (NULL: none): the allocations charged past
	 * them and those left at one; the mapping the last caller checked
	 * was in (a caller in none re-reads the maps: dlopen). */
	struct mp_wrappers *wrappers;
	/* in-process path: objects past the interposer (unseen.c) */
	struct mp_unseen *unseen;
	uint64_t wrap_skipped, wrap_fallbacks, wrap_no_stack;
	uint64_t wrap_map_lo, wrap_map_hi;
	/* A heap allocation released to the correlator but not applied yet:
	 * when the next record released is its free, the two go as one
	 * temporary allocation (mp_correlator_apply_temporary()); anything
	 * else applies it first (heap_flush()). Precise mode, no dump. */
	struct mp_ringq_rec held;
	bool holding, pairing;
	/* A program whose allocations are not freed by its next one pays
	 * the holding for nothing: after HOLD_MISSES held ones in a row that
	 * were not, the next HOLD_SKIP go alone (the path, never the figures,
	 * changes). */
	uint32_t hold_misses, hold_skip;
	uint64_t ring_retry_ns;
	/* On the in-process path, when the ring was first found missing
	 * (0: found, or not looked for yet), and whether that was told */
	uint64_t ring_missing_ns;
	bool ring_missing_told;
	uint64_t ring_drops_closed; /* drops of rings closed at exec */
	uint64_t heap_drops_closed, heap_waits_closed; /* the same, heap records */
	uint64_t stacks_unwound_closed, stacks_copied_closed; /* and stacks */
	/* threads whose stacks had Python frames (the profile's python_tids),
	 * the last one apart so that a thread's stacks look it up once */
	uint32_t *py_tids, n_py_tids, py_tids_cap, py_tid_last;
	/* the debug files opened while the final profile's stacks are laid
	 * out (symbols.c); NULL: none */
	struct mp_symbolize_warm *warm;
	uint32_t path; /* enum mp_tracer_path */
	bool injected; /* libmemprof injected (path.c) */
	char path_reason[MP_PROFILE_REASON_MAX];
	uint64_t last_ts;
	uint64_t read_ns; /* the clock before the current read (0: none) */
	uint64_t tick_ns; /* the tick's current period */
	uint32_t idle_ticks; /* ticks in a row that found the ring empty */
	bool ring_busy; /* records read since the last tick */
	/* The last drain stopped at RING_BATCH: records are waiting (and in
	 * precise mode, maybe a producer), so the loop drains again without
	 * sleeping. */
	bool drain_more;
	/* for the debug log: drains that read records, those that stopped
	 * at RING_BATCH, and the most ring records the ring queue held at
	 * the end of one (read after the drain's clock: held for the next) */
	uint64_t drains, drains_full, held_max;
	uint64_t pairs; /* allocations applied with their free (heap_record()) */
	struct sess_idle idle;
	int epfd, tickfd, sigfd, deadlinefd, periodicfd;
	char exe[PATH_MAX];
	char *cmdline;
	bool exited;
	bool stop;
	bool warned_unmatched;
	int err;
};

/* idle.c: an event of the loop's (EP_*) before it is handled, a tick's
 * end, an RSS sample, the delay before the next marker ring search, and
 * the waiter's end. */
/* flow.c: the stack collector's source of Python frame names. */
void mp_sess_pynames_init(struct session *s);
int mp_sess_idle_event(struct session *s, uint32_t ep);
int mp_sess_idle_tick(struct session *s);
int mp_sess_idle_rss(struct session *s);
uint64_t mp_sess_ring_retry_ns(struct session *s);
void mp_sess_idle_free(struct session *s);

/* symbols.c: for the @final profile of a session with stacks, the debug
 * files opened ahead (mp_symbolize_warm_start()); the profile's symbols,
 * with what was opened (mp_symbolize_warmed()), whose files are then
 * closed in a thread of their own while the profile is written
 * (mp_symbolize_warm_retire(); the session's end joins it). */
void mp_sess_warm_start(struct session *s, bool final);
int mp_sess_symbolize(struct session *s, struct mp_profile *p, struct mp_symbolize_stats *st);

/* flow.c: the per-event path. */
/* One pass: the tracer's events, the rings' records and an RSS sample
 * into the ordering stage, and what it releases to the correlator. */
int mp_sess_cycle(struct session *s);
int mp_sess_drain_tracer(struct session *s);
/* The rings are read no more (the final drain is done): their counters
 * are taken now and the interposer turned off, so that no thread waits
 * for a ring while the profile is built (a precise-mode thread waits as
 * long as the daemon holds the lease). */
void mp_sess_ring_stop(struct session *s);
int mp_sess_drain_ring(struct session *s);
/* The wrappers of the address space as s->maps has it, resolved and
 * published to the tracer and the ring when they changed. */
void mp_sess_wrappers_update(struct session *s);
/* The wrappers as resolved now, published to the tracer and the ring. */
void mp_sess_wrappers_publish(struct session *s);
/* The held allocation (temporary pairing) applied alone. */
int mp_sess_heap_flush(struct session *s);
/* The ordering stage's sink: ring records, other items, nothing more now. */
int mp_sess_on_ring_rec(void *ctx, const struct mp_ringq_rec *rec, const struct mp_record *marker,
			void *ref);
int mp_sess_dispatch(void *ctx, const struct mp_merge_item *it);
int mp_sess_on_idle(void *ctx);
/* The order's prefetch hook: a heap record's live-table slots. */
void mp_sess_prefetch_heap(void *ctx, const struct mp_ringq_rec *rec);
/* The correlator's questions to the session: owners from the maps,
 * frames from the stack collector, and the --dump-events observer. */
void mp_sess_correlator_hooks(struct session *s, struct mp_correlator_opts *o);
void mp_sess_ring_ref_free(struct ring_ref *ref);
/* unseen.c: a look at the objects loaded since the last (at most every
 * 250 ms, a few ms at most; all of them when @final), and its result in a
 * profile. */
/* The tick's period while the rings have records: TICK_INPROCESS_NS on the
 * in-process path but in sampled mode at a coarse interval. */
static inline uint64_t mp_sess_busy_tick(const struct session *s)
{
	if (s->path != MP_PATH_INPROCESS ||
	    (s->o->mode == MP_TRACE_SAMPLED && s->o->sample_bytes >= TICK_SAMPLED_SLOW_BYTES))
		return TICK_NS;
	return TICK_INPROCESS_NS;
}

void mp_sess_unseen_step(struct session *s, bool final);
void mp_sess_unseen_fill(const struct session *s, struct mp_profile *p);
void mp_sess_unseen_free(struct mp_unseen *u);
/* The loader mapped an object: the next look is at it (none is taken
 * while nothing changed). */
void mp_sess_unseen_changed(struct session *s);
/* Whether a look is still due (an object loaded and not looked at, or one
 * to confirm): the session keeps its tick until it was made. */
bool mp_sess_unseen_pending(const struct session *s);
uint32_t mp_sess_corruption_of(uint32_t consumer_flags);
/* What ring reader @c refused and found stuck, added to @rejected (enum
 * mp_reject) and *@stuck; its MP_CORRUPT_* bits. */
uint32_t mp_sess_ring_rejects(const struct mp_consumer *c, uint64_t *rejected, uint64_t *stuck);
const char *mp_sess_fn_name(const struct session *s, uint32_t fn);

#endif /* MP_SESSION_IMPL_H */
