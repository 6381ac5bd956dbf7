// SPDX-License-Identifier: MIT
#include <bpf/libbpf.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "correlator.h"
#include "log.h"
#include "live.h"
#include "consumer.h"
#include "order.h"
#include "order_inline.h"
#include "path.h"
#include "procmaps.h"
#include "ring_abi.h"
#include "rss.h"
#include "session.h"
#include "collect.h"
#include "symbolize.h"
#include "util.h"

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
/* How often to look for the target's marker ring until it has one. */
#define RING_RETRY_NS (50 * 1000 * 1000ull)
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

static uint32_t session_stack_bytes(const struct mp_session_opts *o)
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

enum { EP_TRACER = 1, EP_TICK, EP_RSS, EP_SIGNAL, EP_DEADLINE, EP_STOP, EP_SNAPSHOT, EP_PERIODIC };

struct session {
	const struct mp_session_opts *o;
	struct mp_tracer *tracer;
	struct mp_consumer *ring; /* = ring_ref->c */
	struct ring_ref *ring_ref;
	struct ring_ref *retired; /* given up, items still pending */
	uint32_t corruption; /* MP_CORRUPT_* of rings given up */
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
	/* the unwinder and --stacks' stack table */
	struct mp_stack_collector *collect;
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
	uint64_t ring_drops_closed; /* drops of rings closed at exec */
	uint64_t heap_drops_closed, heap_waits_closed; /* the same, heap records */
	uint32_t path; /* enum mp_tracer_path */
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
	int epfd, tickfd, sigfd, deadlinefd, periodicfd;
	char exe[PATH_MAX];
	char *cmdline;
	bool exited;
	bool stop;
	bool warned_unmatched;
	int err;
};

static const char *resolve_owner(void *ctx, uint64_t addr)
{
	struct session *s = ctx;
	const struct mp_mapping *m = NULL;

	if (s->maps)
		m = mp_procmaps_find(s->maps, addr);
	/* Also when the event is younger than our copy: a library dlopen'd
	 * since then allocates. */
	if (!m && !s->exited &&
	    (mp_now_ns() - s->maps_read_ns >= MAPS_REREAD_NS || s->maps_read_ns < s->last_ts)) {
		struct mp_procmaps *fresh;

		s->maps_read_ns = mp_now_ns();
		if (mp_procmaps_read(s->o->pid, &fresh) == 0) {
			mp_procmaps_free(s->maps);
			s->maps = fresh;
			m = mp_procmaps_find(s->maps, addr);
		}
	}
	if (!m || !m->path[0] || m->path[0] == '[')
		return NULL;
	return m->path;
}

/* libbpf's messages through the log module: its warnings as warnings,
 * the rest only at debug level (-v). */
__attribute__((format(printf, 2, 0))) static int libbpf_print(enum libbpf_print_level level,
							      const char *fmt, va_list ap)
{
	int lvl = level == LIBBPF_WARN ? LOG_WARNING : LOG_DEBUG;
	char buf[1024];
	int n;

	if (lvl > mp_log_get_max_level())
		return 0;
	n = vsnprintf(buf, sizeof(buf), fmt, ap);
	if (n < 0)
		return n;
	if (n > 0 && (size_t)n < sizeof(buf) && buf[n - 1] == '\n')
		buf[n - 1] = '\0';
	mp_log_internal(lvl, 0, "%s", buf);
	return n;
}

static int ep_add(struct session *s, int fd, uint32_t tag)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.u32 = tag };

	return epoll_ctl(s->epfd, EPOLL_CTL_ADD, fd, &ev) < 0 ? -errno : 0;
}

static void dump_record(FILE *f, const struct mp_record *r)
{
	fprintf(f, "marker %s tid=%" PRIu32 " ts=%" PRIu64, mp_record_type_name(r->type), r->tid,
		r->ts_ns);
	if (r->name)
		fprintf(f, " name=\"%s\"", r->name);
	if (r->type == MP_REC_INPUT_SHAPE || r->type == MP_REC_OUTPUT_SHAPE) {
		fputs(" shape=[", f);
		for (uint32_t i = 0; i < r->rank && i < MP_PROFILE_MAX_RANK; i++)
			fprintf(f, "%s%" PRId64, i ? "," : "", r->dims[i]);
		fputc(']', f);
	}
	if (r->flags & MP_REC_F_OPEN_AT_ATTACH)
		fputs(" open-at-attach", f);
	fputc('\n', f);
}

static const char *fn_name(const struct session *s, uint32_t fn)
{
	if (fn >= MP_FN_CUSTOM && fn - MP_FN_CUSTOM < s->o->n_extra)
		return s->o->extra[fn - MP_FN_CUSTOM].name;
	return mp_alloc_fn_name(fn);
}

static void ring_ref_free(struct ring_ref *ref)
{
	if (!ref)
		return;
	mp_consumer_free(ref->c);
	free(ref);
}

static uint32_t corruption_of(uint32_t consumer_flags)
{
	return (consumer_flags & MP_CONSUMER_CORRUPT_HEADER ? MP_CORRUPT_RING_HEADER : 0) |
	       (consumer_flags & MP_CONSUMER_CORRUPT_RECORDS ? MP_CORRUPT_RING_RECORDS : 0);
}

/* Stops reading the current ring. Its reader lives on while merge items
 * point into it. */
static void ring_retire(struct session *s)
{
	struct ring_ref *ref = s->ring_ref;

	if (!ref)
		return;
	s->ring_drops_closed += mp_consumer_drops(ref->c);
	s->heap_drops_closed += mp_consumer_alloc_drops(ref->c);
	s->heap_waits_closed += mp_consumer_alloc_waits(ref->c);
	s->corruption |= corruption_of(mp_consumer_corruption(ref->c));
	s->ring = NULL;
	s->ring_ref = NULL;
	if (!ref->pending) {
		ring_ref_free(ref);
		return;
	}
	ref->next = s->retired;
	s->retired = ref;
}

/* One item of @ref has been dispatched. */
static void ring_ref_put(struct session *s, struct ring_ref *ref)
{
	struct ring_ref **pp;

	if (--ref->pending || ref == s->ring_ref)
		return;
	for (pp = &s->retired; *pp; pp = &(*pp)->next) {
		if (*pp == ref) {
			*pp = ref->next;
			ring_ref_free(ref);
			return;
		}
	}
}

/* Queues the image the target runs now, for the exec event being merged. */
static void exec_path_push(struct session *s)
{
	char path[64], exe[PATH_MAX];
	uint32_t i;
	ssize_t n;

	if (s->exec_n == EXEC_PATHS) {
		s->execs_arrived++;
		return;
	}
	snprintf(path, sizeof(path), "/proc/%d/exe", (int)s->o->pid);
	n = readlink(path, exe, sizeof(exe) - 1);
	exe[n > 0 ? n : 0] = '\0';
	i = (s->exec_head + s->exec_n++) % EXEC_PATHS;
	s->exec_paths[i] = n > 0 ? strdup(exe) : NULL;
	s->exec_idx[i] = s->execs_arrived++;
}

/* The path of the next exec dispatched, NULL when it got none. */
static char *exec_path_pop(struct session *s)
{
	uint64_t want = s->execs_dispatched++;
	char *p;

	if (!s->exec_n || s->exec_idx[s->exec_head] != want)
		return NULL;
	p = s->exec_paths[s->exec_head];
	s->exec_paths[s->exec_head] = NULL;
	s->exec_head = (s->exec_head + 1) % EXEC_PATHS;
	s->exec_n--;
	return p;
}

/* --dump-events: every heap event the correlator's live table pairs. */
static void dump_heap(void *ctx, const struct mp_heap_event *e)
{
	struct session *s = ctx;
	static const char *const kinds[] = { "?", "alloc", "free", "unknown-free" };

	fprintf(s->o->dump,
		"%s fn=%s tid=%" PRIu32 " ts=%" PRIu64 " addr=0x%" PRIx64 " size=%" PRIu64
		" caller=0x%" PRIx64 "\n",
		kinds[e->kind <= 3 ? e->kind : 0], fn_name(s, e->fn), e->tid, e->ts_ns, e->addr,
		e->size, e->caller);
}

static int handle_bpf(struct session *s, const struct mp_raw_event *ev, uint32_t stack)
{
	struct mp_rss_stat_event rs;
	int r;

	switch (ev->type) {
	case MP_RAW_RSS_STAT:
		rs = (struct mp_rss_stat_event){ .ts_ns = ev->ts_ns,
						 .tid = ev->tid,
						 .member = ev->fn,
						 .value = (int64_t)ev->size };
		if (s->o->dump)
			fprintf(s->o->dump,
				"rss_stat member=%" PRIu32 " tid=%" PRIu32 " ts=%" PRIu64
				" bytes=%" PRId64 "\n",
				rs.member, rs.tid, rs.ts_ns, rs.value);
		return mp_correlator_on_rss_stat(s->corr, &rs);
	case MP_RAW_EXEC: {
		char *path = exec_path_pop(s);

		if (s->o->dump)
			fprintf(s->o->dump, "exec tid=%" PRIu32 " ts=%" PRIu64 " path=%s\n",
				ev->tid, (uint64_t)ev->ts_ns, path ? path : "?");
		r = mp_correlator_on_exec(s->corr, ev->ts_ns, ev->tid, path);
		free(path);
		if (r < 0)
			return log_error_errno(r, "pid %d: exec: %m", (int)s->o->pid);
		/* The new image gets a new ring and a new address space. */
		ring_retire(s);
		s->ring_retry_ns = 0;
		/* the new image's interposer word, if any, is elsewhere */
		mp_tracer_set_inproc_tls(s->tracer, 0);
		mp_procmaps_free(s->maps);
		s->maps = NULL;
		s->maps_read_ns = 0;
		break;
	}
	case MP_RAW_EXIT:
		if (s->o->dump)
			fprintf(s->o->dump, "exit ts=%" PRIu64 "\n", (uint64_t)ev->ts_ns);
		return 0;
	default:
		break;
	}
	r = mp_correlator_apply_heap(s->corr, ev, stack);
	if (r < 0)
		return log_error_errno(r, "pid %d: live-allocation table: %m", (int)s->o->pid);
	return 0;
}

/* In-process path: a heap record of the ring is the raw event the uprobes
 * would have delivered, and goes through the same live table. */
static inline __attribute__((always_inline)) int handle_heap_record(struct session *s,
								    const struct mp_ringq_rec *rec)
{
	struct mp_raw_event ev;
	int r;

	/* Records come only when we turned the interposer on; a forged one
	 * is just another event of a process that can lie about its heap. */
	if (rec->fn >= MP_FN_MMAP)
		return 0;
	mp_ringq_raw(rec, (uint32_t)s->o->pid, &ev);
	if ((rec->flags & MP_REC_F_SCALED) && s->o->mode == MP_TRACE_SAMPLED) {
		ev.size = mp_tracer_sample_estimate(ev.size, s->o->sample_bytes);
		ev.fn |= MP_LIVE_FN_SCALED;
	}
	r = mp_correlator_apply_heap(s->corr, &ev, rec->stack);
	if (r < 0)
		return log_error_errno(r, "pid %d: live-allocation table: %m", (int)s->o->pid);
	return 0;
}

/* The held allocation, applied alone: what comes next is not its free. */
static __attribute__((noinline)) int heap_flush(struct session *s)
{
	if (!s->holding)
		return 0;
	s->holding = false;
	return handle_heap_record(s, &s->held);
}

/* Heap record @rec, released in the merged order: held when it is an
 * allocation (precise mode; not while the last ones held were not freed
 * next: hold_skip), applied with the held one when it is the next free,
 * else alone after it. The held allocation and @rec are then
 * consecutive in the merged order: nothing else reaches the correlator or
 * the live table in between, which mp_correlator_apply_temporary()
 * requires. */
static inline __attribute__((always_inline)) int heap_record(struct session *s,
							     const struct mp_ringq_rec *rec)
{
	struct mp_raw_event al, fr;
	int r;

	if (s->holding) {
		/* only the free of the held block by the same thread (the
		 * correlator tests it too, and applies anything else in two
		 * steps); a free handle_heap_record() would ignore is not
		 * paired */
		if (rec->type != MP_REC_FREE || rec->addr != s->held.addr ||
		    rec->tid != s->held.tid || rec->fn >= MP_FN_MMAP) {
			if (++s->hold_misses >= HOLD_MISSES) {
				s->hold_misses = 0;
				s->hold_skip = HOLD_SKIP;
			}
			r = heap_flush(s);
			if (r < 0)
				return r;
		} else {
			s->holding = false;
			s->hold_misses = 0;
			s->pairs++;
			mp_ringq_raw(&s->held, (uint32_t)s->o->pid, &al);
			mp_ringq_raw(rec, (uint32_t)s->o->pid, &fr);
			r = mp_correlator_apply_temporary(s->corr, &al, s->held.stack, &fr);
			if (rec->ts > s->last_ts)
				s->last_ts = rec->ts;
			if (r < 0)
				return log_error_errno(r, "pid %d: live-allocation table: %m",
						       (int)s->o->pid);
			return 0;
		}
	}
	if (rec->ts > s->last_ts)
		s->last_ts = rec->ts;
	if (rec->type == MP_REC_ALLOC && s->pairing && rec->fn < MP_FN_MMAP) {
		if (!s->hold_skip) {
			/* field by field: a struct copy of a record just built
			 * field by field (release_now()) reads wide what was
			 * stored narrow, and the store buffer cannot forward
			 * it (measured in bench-consumer: ~1 ns a record) */
			s->held.ts = rec->ts;
			s->held.addr = rec->addr;
			s->held.size = rec->size;
			s->held.caller = rec->caller;
			s->held.old_addr = rec->old_addr;
			s->held.tid = rec->tid;
			s->held.type = rec->type;
			s->held.flags = rec->flags;
			s->held.fn = rec->fn;
			s->held.marker = rec->marker;
			s->held.stack = rec->stack;
			s->holding = true;
			return 0;
		}
		s->hold_skip--;
	}
	return handle_heap_record(s, rec);
}

static int dispatch(void *ctx, const struct mp_merge_item *it)
{
	struct session *s = ctx;
	int r = heap_flush(s);

	if (r < 0)
		return r;
	/* The tracer stamps EXIT after detaching, which takes a while: the
	 * window of an exited target ends with its last real event. */
	if (it->ts > s->last_ts &&
	    !(it->kind == ITEM_BPF &&
	      ((const struct mp_raw_event *)it->payload.bytes)->type == MP_RAW_EXIT))
		s->last_ts = it->ts;
	switch (it->kind) {
	case ITEM_BPF: {
		struct mp_raw_event ev;
		uint32_t stack = 0;

		memcpy(&ev, it->payload.bytes, sizeof(ev));
		if (it->len >= sizeof(ev) + sizeof(stack))
			memcpy(&stack, it->payload.bytes + sizeof(ev), sizeof(stack));
		return handle_bpf(s, &ev, stack);
	}
	case ITEM_RSS: {
		struct mp_rss_sample rs;

		memcpy(&rs, it->payload.bytes, sizeof(rs));
		if (s->o->dump)
			fprintf(s->o->dump,
				"rss ts=%" PRIu64 " vm_rss=%" PRIu64 " anon=%" PRIu64
				" file=%" PRIu64 " shmem=%" PRIu64 "\n",
				rs.ts_ns, rs.vm_rss, rs.rss_anon, rs.rss_file, rs.rss_shmem);
		return mp_correlator_on_rss(s->corr, &rs);
	}
	}
	return 0;
}

/* A ring record released by the ordering stage (inlined where a record is
 * released as it is read: its held copy then stays in registers). */
static inline __attribute__((always_inline)) int
on_ring_rec(void *ctx, const struct mp_ringq_rec *rec, const struct mp_record *marker, void *ref)
{
	struct session *s = ctx;
	int r;

	if (!marker)
		return heap_record(s, rec);
	r = heap_flush(s);
	if (r < 0)
		return r;
	if (rec->ts > s->last_ts)
		s->last_ts = rec->ts;
	if (s->o->dump)
		dump_record(s->o->dump, marker);
	r = mp_correlator_on_record(s->corr, marker);
	if (ref) /* NULL: released as it was read, never held */
		ring_ref_put(s, ref);
	return r;
}

/* Nothing more released for now: a held allocation's free, if any, comes
 * after what is not released yet. */
static int on_idle(void *ctx)
{
	return heap_flush(ctx);
}

static struct mp_collect_target target(const struct session *s)
{
	return (struct mp_collect_target){ .maps = s->maps, .exited = s->exited };
}

/* The stack id of the BPF event being delivered (0: none): unwound now,
 * while the tracer's copy of the stack is valid. */
static uint32_t unwind_event(struct session *s)
{
	const struct mp_raw_stack_view *sv = mp_tracer_stack(s->tracer);
	struct mp_collect_target t = target(s);

	if (!sv)
		return 0;
	return mp_stack_collect_event(
		s->collect, &t,
		&(struct mp_unwind_regs){ .ip = sv->ip, .sp = sv->sp, .bp = sv->bp }, sv->bytes,
		sv->len);
}

/* The correlator's view of the code (fn:/src: owner rules). */
static int resolve_frames(void *ctx, uint64_t addr, struct mp_src_frame *ret, int max)
{
	struct mp_sym_frame f[MP_MAX_INLINE];
	struct session *s = ctx;
	struct mp_collect_target t = target(s);
	int n = mp_stack_collect_src_frames(s->collect, &t, addr, f, max);

	for (int i = 0; i < n; i++)
		ret[i] = (struct mp_src_frame){ .function = f[i].function, .file = f[i].file };
	return n;
}

static uint32_t stack_frames(void *ctx, uint32_t id, const uint64_t **ret_frames)
{
	struct session *s = ctx;

	return mp_stack_collect_frames(s->collect, id, ret_frames);
}

static int on_raw(void *ctx, const struct mp_raw_event *ev)
{
	struct session *s = ctx;
	struct {
		struct mp_raw_event ev;
		uint32_t stack;
	} item = { .ev = *ev };

	if (ev->type == MP_RAW_EXIT)
		s->exited = true;
	if (ev->type == MP_RAW_EXEC)
		exec_path_push(s);
	item.stack = unwind_event(s);
	if (!item.stack)
		return mp_order_push(s->order, ITEM_BPF, ev->ts_ns, ev, sizeof(*ev));
	return mp_order_push(s->order, ITEM_BPF, ev->ts_ns, &item, sizeof(item));
}

static int drain_tracer(struct session *s)
{
	int r = mp_tracer_consume(s->tracer, on_raw, s);

	if (r == -ESRCH) {
		s->exited = true;
		return 0;
	}
	if (r < 0)
		return log_error_errno(r, "pid %d: reading BPF events: %m", (int)s->o->pid);
	if (mp_tracer_exited(s->tracer))
		s->exited = true;
	return 0;
}

/* A ring stuck at a record it cannot take (a hostile writer) is passed by
 * the consumer after RING_STALL_LAGS x lag (100 ms by default), and only
 * then: mp_order_watermark() has no floor past the rings' bound (a daemon
 * more than 100 ms behind, with a drain cut at RING_BATCH, released BPF
 * events past ring records it had not read yet, into the wrong kernel). */
#define RING_STALL_LAGS 10

/* A record read from the ring, to the ordering stage. A stack is unwound
 * now: the consumer's copy of its bytes ends when this callback returns.
 * A marker held keeps the reader (its name's owner) alive. */
static int on_ring_read(void *ctx, uint32_t ring, const struct mp_record *rec)
{
	struct session *s = ctx;
	uint32_t stack = 0;
	int r;

	if (ring != MP_CONSUMER_RING_SYNTH && rec->stack) {
		const struct mp_rec_stack *st = rec->stack;
		struct mp_collect_target t = target(s);

		stack = mp_stack_collect_ring(
			s->collect, &t,
			&(struct mp_unwind_regs){ .ip = st->ip, .sp = st->sp, .bp = st->bp },
			st->bytes, st->len, rec->heap.caller);
	}
	r = mp_order_ring_inline(s->order, s->ring, ring, rec, stack, s->ring_ref, on_ring_rec);

	if (r > 0)
		s->ring_ref->pending++;
	return r < 0 ? r : 0;
}

/* The consumer's set-up before it writes into the ring: the syscall
 * tracepoints skip the interposer's own mappings from its first record on. */
static int before_attach(void *ctx, struct mp_consumer *c)
{
	struct session *s = ctx;

	mp_tracer_set_inproc_tls(s->tracer, mp_consumer_alloc_tls_off(c));
	return 0;
}

/* Opens the target's ring; on the in-process path the interposer goes on
 * with the attach, before its snapshot of the open kernels (docs/RING.md
 * "Per-thread state and late attach"): turned on after it, a kernel begun
 * in between had its markers recorded and its allocations not (2-6
 * invocations of ~1 ms under load in inproc::attach_detach_reattach). */
static int ring_open(struct session *s)
{
	uint64_t lag = s->o->lag_ns ? s->o->lag_ns : DEFAULT_LAG_NS;
	struct mp_consumer_opts o = { .stall_ns = RING_STALL_LAGS * lag };

	if (s->path == MP_PATH_INPROCESS) {
		o.alloc_mode = s->o->mode == MP_TRACE_SAMPLED ? MP_ALLOC_SAMPLED : MP_ALLOC_PRECISE;
		o.alloc_sample_bytes = s->o->sample_bytes;
		o.alloc_stack_bytes = s->o->stacks ? session_stack_bytes(s->o) : 0;
		o.before_attach = before_attach;
		o.ctx = s;
	}
	return mp_consumer_open_pid_opts(s->o->pid, &o, &s->ring);
}

static int drain_ring(struct session *s)
{
	int r;

	s->drain_more = false;
	if (!s->ring) {
		uint64_t now = mp_now_ns();

		if (s->exited || now < s->ring_retry_ns)
			return 0;
		s->ring_retry_ns = now + RING_RETRY_NS;
		r = ring_open(s);
		if (r == -ENOENT || r == -ESRCH)
			return 0;
		if (r == -EINVAL) /* our own settings: the interposer's mode */
			return log_error_errno(r, "pid %d: turning the interposer on: %m",
					       (int)s->o->pid);
		if (r < 0) {
			/* A broken or foreign ring costs us the markers, not the
			 * allocation profile. */
			log_warning_errno(
				r, "pid %d: marker ring unusable, profiling without markers: %m",
				(int)s->o->pid);
			if (r == -EBADMSG)
				s->corruption |= MP_CORRUPT_RING_OPEN;
			s->ring_retry_ns = UINT64_MAX;
			return 0;
		}
		s->ring_ref = calloc(1, sizeof(*s->ring_ref));
		if (!s->ring_ref) {
			mp_consumer_free(s->ring);
			s->ring = NULL;
			return log_error_errno(-ENOMEM, "pid %d: marker ring: %m", (int)s->o->pid);
		}
		s->ring_ref->c = s->ring;
		log_debug("pid %d: marker ring attached%s", (int)s->o->pid,
			  s->path == MP_PATH_INPROCESS ? ", in-process allocation path on" : "");
	}
	r = mp_consumer_read_rings_at(s->ring, RING_BATCH, s->read_ns ? s->read_ns : mp_now_ns(),
				      on_ring_read, s);
	if (r > 0)
		s->ring_busy = true;
	s->drain_more = r >= RING_BATCH;
	if (r > 0) {
		s->drains++;
		s->drains_full += s->drain_more;
		if (mp_order_held(s->order) > s->held_max)
			s->held_max = mp_order_held(s->order);
	}
	if (r == -ENOMEM)
		return log_error_errno(r, "pid %d: merging markers: %m", (int)s->o->pid);
	if (r < 0) {
		log_warning_errno(r, "pid %d: marker ring corrupted, markers stop here: %m",
				  (int)s->o->pid);
		ring_retire(s);
		s->ring_retry_ns = UINT64_MAX;
	}
	return 0;
}

static int sample_rss(struct session *s)
{
	struct mp_rss_sample rs;
	int r;

	r = mp_rss_sampler_sample(s->rss, &rs);
	if (r == -ESRCH || r == -EAGAIN)
		return 0;
	if (r < 0) {
		/* The process may be gone between its exit and our noticing. */
		if (!s->exited)
			log_warning_errno(r, "pid %d: RSS sample: %m", (int)s->o->pid);
		return 0;
	}
	return mp_order_push(s->order, ITEM_RSS, rs.ts_ns, &rs, sizeof(rs));
}

/* One pass over every source, then release what is older than the
 * watermark: the clock is read before the drains, so anything published
 * after them is (up to the lag) newer. */
static int cycle(struct session *s)
{
	uint64_t t0 = mp_now_ns();
	int r;

	r = drain_tracer(s);
	if (r < 0)
		return r;
	mp_order_read_begin(s->order, t0, mp_tracer_drained(s->tracer));
	s->read_ns = t0;
	r = drain_ring(s);
	s->read_ns = 0;
	mp_order_read_end(s->order);
	if (r < 0)
		return r;
	return mp_order_release(s->order, t0, s->ring);
}

static char *read_text(const char *path, size_t max, bool nul_to_space)
{
	char *buf = malloc(max + 1);
	FILE *f;
	size_t n;

	if (!buf)
		return NULL;
	f = fopen(path, "re");
	if (!f) {
		free(buf);
		return NULL;
	}
	n = fread(buf, 1, max, f);
	fclose(f);
	while (n && (buf[n - 1] == '\0' || buf[n - 1] == '\n'))
		n--;
	buf[n] = '\0';
	if (nul_to_space)
		for (size_t i = 0; i < n; i++)
			if (buf[i] == '\0')
				buf[i] = ' ';
	return buf;
}

/* Read while the target is alive: a zombie has neither. */
static void describe_process(struct session *s)
{
	char path[64];
	ssize_t n;

	snprintf(path, sizeof(path), "/proc/%d/exe", (int)s->o->pid);
	n = readlink(path, s->exe, sizeof(s->exe) - 1);
	s->exe[n > 0 ? n : 0] = '\0';
	snprintf(path, sizeof(path), "/proc/%d/cmdline", (int)s->o->pid);
	s->cmdline = read_text(path, 4096, true);
}

/* The session's fds: epoll, tick, deadline, signals or the periodic
 * snapshot timer. */
static int setup_fds(struct session *s, sigset_t *blocked)
{
	const struct mp_session_opts *o = s->o;

	s->epfd = epoll_create1(EPOLL_CLOEXEC);
	s->tickfd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
	s->deadlinefd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
	if (!o->ctl)
		s->sigfd = signalfd(-1, blocked, SFD_CLOEXEC | SFD_NONBLOCK);
	if (o->ctl && o->ctl->snapshot_period_ns)
		s->periodicfd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
	if (s->epfd < 0 || s->tickfd < 0 || s->deadlinefd < 0 || (!o->ctl && s->sigfd < 0) ||
	    (o->ctl && o->ctl->snapshot_period_ns && s->periodicfd < 0))
		return log_error_errno(-errno, "pid %d: event loop setup: %m", (int)o->pid);

	return 0;
}

/* The allocator tracer, on the path picked (mp_path_pick()). */
static int setup_tracer(struct session *s)
{
	const struct mp_session_opts *o = s->o;
	struct mp_tracer_opts topts = {
		.pid = o->pid,
		.ring_bytes = o->bpf_ring_bytes,
		.extra = o->extra,
		.n_extra = o->n_extra,
		.rss_exact = o->rss_exact,
		/* low-overhead modes */
		.mode = o->mode,
		.sample_bytes = o->sample_bytes,
		.mark_scaled = true,
		.duty_on_ns = o->duty_on_ns,
		.duty_period_ns = o->duty_period_ns,
		.stack_bytes = o->stacks ? session_stack_bytes(o) : 0,
		.no_heap_probes = s->path == MP_PATH_INPROCESS,
	};
	int r;

	r = mp_tracer_new(&topts, &s->tracer);
	if (r == -EOPNOTSUPP && (o->rss_exact || o->mode == MP_TRACE_RSS))
		return log_error_errno(r,
				       "pid %d: --rss-exact (and --mode rss) does not apply: "
				       "this kernel has no rss_stat tracepoint",
				       (int)o->pid);
	if (r < 0)
		return log_error_errno(r, "pid %d: attaching the allocator tracer: %m",
				       (int)o->pid);
	return 0;
}

/* The correlator, with the owner rules and the pools of --alloc
 * functions. */
static int setup_correlator(struct session *s)
{
	const struct mp_session_opts *o = s->o;
	struct mp_correlator_opts copts = {
		.resolve_owner = resolve_owner,
		.resolve_frames = resolve_frames,
		.stack_frames = stack_frames,
		.resolve_ctx = s,
		.observe_heap = o->dump ? dump_heap : NULL,
		.observe_ctx = s,
		.sample_bytes = o->mode == MP_TRACE_SAMPLED ? o->sample_bytes : 0,
		.begin_ns = mp_now_ns(),
	};
	int r;

	r = mp_correlator_new(&copts, &s->corr);
	if (r < 0)
		return log_error_errno(r, "pid %d: correlator: %m", (int)o->pid);
	for (size_t i = 0; i < o->n_owner_rules; i++) {
		r = mp_correlator_add_owner_rule(s->corr, o->owner_rules[i]);
		if (r < 0)
			return log_error_errno(r, "invalid --owner '%s' (expected GLOB=NAME): %m",
					       o->owner_rules[i]);
	}
	for (size_t i = 0; i < o->n_extra; i++) {
		if (!o->extra[i].pool[0])
			continue;
		r = mp_correlator_set_fn_pool(s->corr, MP_FN_CUSTOM + (uint32_t)i, o->extra[i].pool,
					      o->extra[i].pool_kind);
		if (r < 0)
			return log_error_errno(r, "pid %d: pool '%s' of %s: %m", (int)o->pid,
					       o->extra[i].pool, o->extra[i].name);
	}
	return 0;
}

/* The ordering stage, its sink the correlator's input, on the path
 * picked: --alloc functions keep their uprobes, which stamp an allocation
 * with its stack before reserving it, so then the lag alone. */
static int setup_order(struct session *s)
{
	const struct mp_session_opts *o = s->o;
	struct mp_order_opts oopts = {
		.lag_ns = o->lag_ns ? o->lag_ns : DEFAULT_LAG_NS,
		.fast_release = s->path == MP_PATH_INPROCESS && !(o->stacks && o->n_extra),
	};
	const struct mp_order_sink sink = {
		.ctx = s, .ring = on_ring_rec, .item = dispatch, .idle = on_idle
	};
	int r = mp_order_new(&oopts, &sink, &s->order);

	if (r < 0)
		return log_error_errno(r, "pid %d: ordering: %m", (int)o->pid);
	/* Sampled mode sends few temporary allocations, and they are
	 * estimates; the dump shows every event as it is applied. */
	s->pairing = s->path == MP_PATH_INPROCESS && o->mode == MP_TRACE_PRECISE && !o->dump;
	return 0;
}

/* The stages: maps, stack collector, ordering, tracer,
 * correlator, RSS sampler. */
static int setup_pipeline(struct session *s)
{
	const struct mp_session_opts *o = s->o;
	const char *why = "";
	int r;

	/* The address space as it is now: the owners of allocations made by
	 * a process that exits before we process them are still known. */
	s->maps_read_ns = mp_now_ns();
	r = mp_procmaps_read(o->pid, &s->maps);
	if (r < 0)
		return log_error_errno(r, "pid %d: reading /proc/%d/maps: %m", (int)o->pid,
				       (int)o->pid);

	r = mp_stack_collector_new(o->pid, o->stacks, o->stack_depth, &s->collect);
	if (r == -EINVAL)
		return log_error_errno(r, "pid %d: stack depth %u: %m", (int)o->pid,
				       o->stack_depth);
	if (r < 0)
		return log_error_errno(r, "pid %d: stack table: %m", (int)o->pid);

	describe_process(s);
	r = mp_path_pick(o->pid, o->tracer, o->mode, o->duty_period_ns, &s->path, &why);
	if (r == -EOPNOTSUPP)
		return log_error_errno(r, "pid %d: --tracer inprocess: %s", (int)o->pid, why);
	if (r < 0)
		return log_error_errno(r, "pid %d: choosing the allocation path: %m", (int)o->pid);
	r = setup_order(s);
	if (r == 0)
		r = setup_tracer(s);
	if (r == 0)
		r = setup_correlator(s);
	if (r < 0 || !o->rss_hz)
		return r;

	r = mp_rss_sampler_new(o->pid, o->rss_hz, o->pss_every, &s->rss);
	if (r < 0)
		return log_error_errno(r, "pid %d: RSS sampler: %m", (int)o->pid);
	r = ep_add(s, mp_rss_sampler_fd(s->rss), EP_RSS);
	if (r < 0)
		return log_error_errno(r, "pid %d: epoll: %m", (int)o->pid);
	return 0;
}

/* Timers armed, every fd in the epoll set. */
static int setup_loop(struct session *s)
{
	const struct mp_session_opts *o = s->o;
	int r;

	s->tick_ns = s->path == MP_PATH_INPROCESS ? TICK_INPROCESS_NS : TICK_NS;
	r = mp_timer_arm(s->tickfd, s->tick_ns, s->tick_ns);
	if (r < 0)
		return log_error_errno(r, "timerfd: %m");
	if (o->duration_ns) {
		r = mp_timer_arm(s->deadlinefd, o->duration_ns, 0);
		if (r < 0)
			return log_error_errno(r, "timerfd: %m");
	}
	r = ep_add(s, mp_tracer_fd(s->tracer), EP_TRACER);
	if (r == 0)
		r = ep_add(s, s->tickfd, EP_TICK);
	if (r == 0 && s->sigfd >= 0)
		r = ep_add(s, s->sigfd, EP_SIGNAL);
	if (r == 0 && o->ctl)
		r = ep_add(s, o->ctl->stop_fd, EP_STOP);
	if (r == 0 && o->ctl && o->ctl->snapshot_fd >= 0)
		r = ep_add(s, o->ctl->snapshot_fd, EP_SNAPSHOT);
	if (r == 0 && s->periodicfd >= 0) {
		r = mp_timer_arm(s->periodicfd, o->ctl->snapshot_period_ns,
				 o->ctl->snapshot_period_ns);
		if (r == 0)
			r = ep_add(s, s->periodicfd, EP_PERIODIC);
	}
	if (r == 0)
		r = ep_add(s, s->deadlinefd, EP_DEADLINE);
	if (r < 0)
		return log_error_errno(r, "pid %d: epoll: %m", (int)o->pid);

	return 0;
}

static int setup(struct session *s, sigset_t *blocked)
{
	const struct mp_session_opts *o = s->o;
	int r;

	libbpf_set_print(libbpf_print);
	r = setup_fds(s, blocked);
	if (r == 0)
		r = setup_pipeline(s);
	if (r == 0)
		r = setup_loop(s);
	if (r < 0)
		return r;

	/* The ring may already exist (memprof run stops the target after
	 * libmemprof's constructor): open it before the target runs on. */
	r = drain_ring(s);
	if (r < 0)
		return r;
	/* --dump-events announces it: a consumer of the dump waits for it. */
	log_full_errno(o->dump ? LOG_INFO : LOG_DEBUG, 0,
		       "attached to pid %d (%s path, %zu allocator probes)", (int)o->pid,
		       s->path == MP_PATH_INPROCESS ? "in-process" : "eBPF",
		       mp_tracer_probes(s->tracer, &(const struct mp_probe_info *){ NULL }));
	if (o->on_attached) {
		r = o->on_attached(o->on_attached_ctx);
		if (r < 0)
			return log_error_errno(r, "pid %d: resuming the target: %m", (int)o->pid);
	}
	return 0;
}

/* Probes that fire for nobody must not give an empty profile in silence
 * (a pid the BPF side did not recognise: see TRACER.md, PID namespaces). */
static void warn_unmatched(struct session *s, struct mp_profile *p)
{
	p->probe_hits_unmatched = mp_tracer_unmatched(s->tracer);
	if (!p->probe_hits_unmatched || mp_tracer_heap_events(s->tracer) || s->warned_unmatched)
		return;
	s->warned_unmatched = true;
	log_warning("pid %d: %" PRIu64 " allocator probe hits, none of them recognised as the "
		    "target's: the heap figures are empty",
		    (int)s->o->pid, p->probe_hits_unmatched);
}

/* The daemon's part of a profile: process, settings, drop counters. */
static int fill_profile(struct session *s, struct mp_profile *p)
{
	const struct mp_session_opts *o = s->o;
	int r;

	r = mp_profile_set_process(p, (int32_t)o->pid, s->exe[0] ? s->exe : NULL, NULL, s->cmdline);
	if (r < 0)
		return r;
	p->rss_interval_ns = o->rss_hz ? 1000000000ull / o->rss_hz : 0;
	p->pss_interval_ns = o->rss_hz && o->pss_every ? p->rss_interval_ns * o->pss_every : 0;
	p->drops_bpf = mp_tracer_drops(s->tracer);
	warn_unmatched(s, p);
	/* rss mode implies rss_stat attribution */
	p->rss_exact = o->rss_exact || o->mode == MP_TRACE_RSS;
	p->trace_mode = o->mode;
	p->sample_bytes = o->mode == MP_TRACE_SAMPLED ? o->sample_bytes : 0;
	p->duty_on_ns = o->duty_period_ns ? o->duty_on_ns : 0;
	p->duty_period_ns = o->duty_period_ns;
	p->duty_active_ns = o->duty_period_ns ? mp_tracer_duty_on_ns(s->tracer) : 0;
	/* The first ON window opens while attaching, just before the profile's
	 * window does: active time never exceeds the window. */
	if (p->duty_active_ns > p->end_ns - p->begin_ns)
		p->duty_active_ns = p->end_ns - p->begin_ns;
	p->drops_ring = s->ring_drops_closed + (s->ring ? mp_consumer_drops(s->ring) : 0);
	p->tracer_path = s->path;
	p->drops_heap = s->heap_drops_closed + (s->ring ? mp_consumer_alloc_drops(s->ring) : 0);
	p->heap_waits = s->heap_waits_closed + (s->ring ? mp_consumer_alloc_waits(s->ring) : 0);
	p->corruption |= s->corruption | corruption_of(mp_consumer_corruption(s->ring));
	if (o->stacks) {
		p->stack_depth = o->stack_depth ? o->stack_depth : MP_UNWIND_DEFAULT_DEPTH;
		r = mp_stack_collect_export(s->collect, p);
		if (r < 0)
			return r;
	}
	/* Best effort: a profile without symbols is still a profile. */
	if (mp_symbolize_profile(p, s->maps, o->pid) < 0)
		log_warning_errno(-ENOMEM, "pid %d: symbolizing allocation sites: %m", (int)o->pid);
	return 0;
}

/* Everything released so far, as a profile ending now: events younger
 * than the merge lag wait for the next snapshot. */
static void snapshot(struct session *s, enum mp_snapshot_reason why)
{
	struct mp_profile *p = NULL;
	uint64_t now = mp_now_ns();
	int r;

	r = heap_flush(s);
	if (r == 0)
		r = mp_correlator_snapshot(s->corr, now > s->last_ts ? now : s->last_ts, &p);
	if (r == 0)
		r = fill_profile(s, p);
	if (r < 0) {
		log_error_errno(r, "pid %d: snapshot: %m", (int)s->o->pid);
		mp_profile_free(p);
		p = NULL;
	}
	s->o->ctl->on_snapshot(s->o->ctl->ctx, why, p, r);
}

/* After a tick's cycle: the in-process path's period follows the ring
 * (TICK_IDLE_AFTER). */
static int tick_adapt(struct session *s)
{
	uint64_t want = s->tick_ns;
	int r;

	if (s->path != MP_PATH_INPROCESS)
		return 0;
	if (s->ring_busy) {
		s->idle_ticks = 0;
		want = TICK_INPROCESS_NS;
	} else if (++s->idle_ticks >= TICK_IDLE_AFTER) {
		s->idle_ticks = 0;
		want = s->tick_ns * 2 < TICK_NS ? s->tick_ns * 2 : TICK_NS;
	}
	s->ring_busy = false;
	if (want == s->tick_ns)
		return 0;
	s->tick_ns = want;
	r = mp_timer_arm(s->tickfd, want, want);
	return r < 0 ? log_error_errno(r, "timerfd: %m") : 0;
}

static int loop(struct session *s)
{
	struct epoll_event evs[8];
	uint64_t expirations;
	int n, r;

	while (!s->stop && !s->exited) {
		bool ticked = false;

		/* a drain left records: look at the other fds, don't sleep */
		n = epoll_wait(s->epfd, evs, 8, s->drain_more ? 0 : -1);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return log_error_errno(-errno, "epoll_wait: %m");
		}
		for (int i = 0; i < n; i++) {
			switch (evs[i].data.u32) {
			case EP_TICK:
				if (read(s->tickfd, &expirations, sizeof(expirations)) < 0 &&
				    errno != EAGAIN)
					return log_error_errno(-errno, "timerfd: %m");
				ticked = true;
				break;
			case EP_RSS:
				r = sample_rss(s);
				if (r < 0)
					return r;
				break;
			case EP_SIGNAL: {
				struct signalfd_siginfo si;

				if (read(s->sigfd, &si, sizeof(si)) == sizeof(si))
					s->stop = true;
				break;
			}
			case EP_DEADLINE:
			case EP_STOP:
				s->stop = true;
				break;
			case EP_SNAPSHOT:
			case EP_PERIODIC:
				/* Both counters are reset by the read; several
				 * requests in one wakeup share one snapshot. */
				if (read(evs[i].data.u32 == EP_SNAPSHOT ? s->o->ctl->snapshot_fd :
									  s->periodicfd,
					 &expirations, sizeof(expirations)) != sizeof(expirations))
					break;
				if (evs[i].data.u32 == EP_PERIODIC && s->o->ctl->want_periodic &&
				    !s->o->ctl->want_periodic(s->o->ctl->ctx))
					break;
				r = cycle(s);
				if (r < 0)
					return r;
				snapshot(s, evs[i].data.u32 == EP_SNAPSHOT ? MP_SNAPSHOT_REQUESTED :
									     MP_SNAPSHOT_PERIODIC);
				break;
			default:
				break;
			}
		}
		r = cycle(s);
		if (r == 0 && ticked)
			r = tick_adapt(s);
		if (r < 0)
			return r;
	}
	return 0;
}

/* --dump-events: the live table's own account, after the last event. */
static void dump_summary(struct session *s)
{
	FILE *f = s->o->dump;
	struct mp_live_stats st;

	mp_live_stats(mp_correlator_live(s->corr), &st);
	fprintf(f,
		"summary live_bytes=%" PRIu64 " live_blocks=%" PRIu64 " unknown_frees=%" PRIu64
		" failed=%" PRIu64 " ignored=%" PRIu64 " drops=%" PRIu64 "\n",
		st.live_bytes, st.live_blocks, st.unknown_frees, st.failed, st.ignored,
		mp_tracer_drops(s->tracer));
	for (uint32_t fn = 0; fn < MP_LIVE_FN_MAX; fn++) {
		const struct mp_live_fn_stats *fs = &st.fn[fn];

		if (!fs->allocs && !fs->frees && !fs->unknown_frees)
			continue;
		fprintf(f,
			"fn %s allocs=%" PRIu64 " alloc_bytes=%" PRIu64 " frees=%" PRIu64
			" freed_bytes=%" PRIu64 " unknown_frees=%" PRIu64 "\n",
			fn_name(s, fn), fs->allocs, fs->alloc_bytes, fs->frees, fs->freed_bytes,
			fs->unknown_frees);
	}
	fflush(f);
}

static void teardown(struct session *s)
{
	if (s->drains)
		log_debug("pid %d: %" PRIu64 " ring drains, %" PRIu64
			  " of them at the batch limit; at most %" PRIu64
			  " ring records held for the merge after a drain",
			  (int)s->o->pid, s->drains, s->drains_full, s->held_max);
	if (s->pairs)
		log_debug("pid %d: %" PRIu64 " allocations applied with the free that followed",
			  (int)s->o->pid, s->pairs);
	mp_tracer_free(s->tracer);
	ring_ref_free(s->ring_ref);
	while (s->retired) {
		struct ring_ref *next = s->retired->next;

		ring_ref_free(s->retired);
		s->retired = next;
	}
	mp_rss_sampler_free(s->rss);
	mp_correlator_free(s->corr);
	mp_order_free(s->order);
	mp_procmaps_free(s->maps);
	mp_stack_collector_free(s->collect);
	free(s->cmdline);
	while (s->exec_n) {
		free(s->exec_paths[s->exec_head]);
		s->exec_head = (s->exec_head + 1) % EXEC_PATHS;
		s->exec_n--;
	}
	if (s->epfd >= 0)
		close(s->epfd);
	if (s->tickfd >= 0)
		close(s->tickfd);
	if (s->sigfd >= 0)
		close(s->sigfd);
	if (s->deadlinefd >= 0)
		close(s->deadlinefd);
	if (s->periodicfd >= 0)
		close(s->periodicfd);
}

int mp_session_run(const struct mp_session_opts *opts, struct mp_profile **ret)
{
	struct session s = {
		.o = opts, .epfd = -1, .tickfd = -1, .sigfd = -1, .deadlinefd = -1, .periodicfd = -1
	};
	struct mp_profile *p = NULL;
	sigset_t blocked, old;
	uint64_t end;
	int r;

	sigemptyset(&old);
	sigemptyset(&blocked);
	sigaddset(&blocked, SIGINT);
	sigaddset(&blocked, SIGTERM);
	if (!opts->ctl)
		sigprocmask(SIG_BLOCK, &blocked, &old);

	r = setup(&s, &blocked);
	if (r == 0)
		r = loop(&s);
	if (r == 0) {
		/* Final flush: the tracer drains its ring once more at exit,
		 * and the rings are read to the end (every ring may be full:
		 * more than one drain's worth), at most their largest capacity
		 * (a target still running after a stop keeps writing). */
		r = drain_tracer(&s);
		for (uint32_t i = 0; r == 0 && (i == 0 || s.drain_more) && i < FINAL_DRAINS; i++)
			r = drain_ring(&s);
		if (r == 0)
			r = mp_order_release_to(s.order, UINT64_MAX);
		if (r == 0 && opts->dump)
			dump_summary(&s);
	}
	if (r == 0) {
		end = s.exited && s.last_ts ? s.last_ts : mp_now_ns();
		r = mp_correlator_finish(s.corr, end > s.last_ts ? end : s.last_ts, &p);
		if (r < 0)
			log_error_errno(r, "pid %d: building the profile: %m", (int)opts->pid);
	}
	if (r == 0)
		r = fill_profile(&s, p);
	if (r == 0) {
		*ret = p;
		p = NULL;
	}
	mp_profile_free(p);
	teardown(&s);
	if (!opts->ctl)
		sigprocmask(SIG_SETMASK, &old, NULL);
	return r;
}
