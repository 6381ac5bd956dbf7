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
#include "modules.h"
#include "symbolize.h"
#include "util.h"

#include "session_impl.h"

static const char *resolve_owner(void *ctx, uint64_t addr)
{
	struct session *s = ctx;
	const struct mp_mapping *m = NULL;

	/* a Python frame is in no object */
	if (MP_PYFRAME_IS(addr))
		return NULL;
	if (s->maps)
		m = mp_procmaps_find(s->maps, addr);
	/* Also when the event is younger than our copy: a library dlopen'd
	 * since then allocates. */
	if (!m && !s->exited &&
	    (mp_now_ns() - s->maps_read_ns >= MAPS_REREAD_NS || s->maps_read_ns < s->last_ts)) {
		struct mp_procmaps *fresh;

		s->maps_read_ns = mp_now_ns();
		if (mp_procmaps_read(s->o->pid, &fresh) == 0 &&
		    mp_procmaps_merge(&s->maps, fresh) == 0) {
			m = mp_procmaps_find(s->maps, addr);
			mp_sess_wrappers_update(s);
		}
	}
	if (!m || !m->path[0] || m->path[0] == '[')
		return NULL;
	return m->path;
}

/* The correlator's free_mapped hook: freecheck.h. */
static bool free_mapped(void *ctx, uint64_t addr, uint64_t ts_ns)
{
	struct session *s = ctx;

	if (!s->freecheck || mp_freecheck_mapped(s->freecheck, addr, ts_ns))
		return true;
	/* The eBPF path sees the process's own calls of its allocator, which
	 * a free of an unmapped address does not survive: one the maps cannot
	 * judge (a block of an arena mapped since the last read, whose
	 * allocation was lost, freed by a process gone before the next read)
	 * is an unknown free, not a forged one. A ring's record is judged
	 * strictly: the process writes it. */
	return s->path == MP_PATH_BPF && !mp_freecheck_judged(s->freecheck, ts_ns);
}

/* The correlator's free_internal hook: on the eBPF path, whether an
 * unknown free was called from inside the object whose free is probed
 * (its executable mappings at the attach). glibc's free is its internal
 * __libc_free too, which flushes an exiting thread's cache: the uprobe
 * sees frees the program never made. The in-process interposer sees only
 * calls that came through a GOT slot: no such free reaches it. */
static bool free_internal(void *ctx, uint64_t caller)
{
	struct session *s = ctx;

	if (s->path != MP_PATH_BPF || !s->tracer)
		return false;
	/* after an exec, once the new image's maps were read */
	if (!s->alloc_text_known && s->maps) {
		const struct mp_probe_info *pi;
		size_t n = mp_tracer_probes(s->tracer, &pi);
		const char *obj = NULL;

		s->alloc_text_known = true;
		for (size_t i = 0; i < n && !obj; i++)
			if (pi[i].fn == MP_FN_FREE)
				obj = pi[i].path;
		for (size_t i = 0; obj && i < s->maps->n; i++) {
			const struct mp_mapping *m = &s->maps->maps[i];

			if (!(m->perms & MP_MAP_X) || strcmp(m->path, obj) ||
			    s->alloc_text_n == ALLOC_TEXT_MAX)
				continue;
			s->alloc_text[2 * s->alloc_text_n] = m->start;
			s->alloc_text[2 * s->alloc_text_n + 1] = m->end;
			s->alloc_text_n++;
		}
	}
	for (uint32_t i = 0; i < s->alloc_text_n; i++)
		if (caller >= s->alloc_text[2 * i] && caller < s->alloc_text[2 * i + 1])
			return true;
	return false;
}

/* ---- allocator wrappers (docs/PROFILE.md "Owners") ---- */

/* Frames an unwind looks through for the first caller outside the
 * wrappers (libmemprof's own frames, then the wrappers' chain). */
#define WRAP_FRAMES 32
/* How often a caller in no known mapping may re-read the maps for its
 * wrappers: the sooner a library's are published, the fewer of its first
 * allocations go by without a stack (its object is resolved first, in
 * well under 1 ms). */
#define WRAP_REREAD_NS (5 * 1000 * 1000ull)

/* The target's filter (ring_abi.h wrap, the BPF side's wrap): at most
 * MP_RING_WRAP_MAX ranges covering the wrappers, as lo, hi pairs. */
static uint32_t wrap_filter(const struct session *s, uint64_t *lohi)
{
	struct mp_wrap_range cr[MP_RING_WRAP_MAX];
	size_t n = mp_wrappers_coarse(s->wrappers, cr, MP_RING_WRAP_MAX);

	for (size_t i = 0; i < n; i++) {
		lohi[2 * i] = cr[i].lo;
		lohi[2 * i + 1] = cr[i].hi;
	}
	return (uint32_t)n;
}

void mp_sess_wrappers_publish(struct session *s)
{
	uint64_t lohi[2 * MP_RING_WRAP_MAX];
	uint32_t n;

	if (!s->wrappers)
		return;
	n = wrap_filter(s, lohi);
	if (s->tracer)
		mp_tracer_set_wrappers(s->tracer, lohi, n);
	if (s->ring && s->path == MP_PATH_INPROCESS)
		mp_consumer_set_wrappers(s->ring, lohi, n, MP_SESSION_WRAP_STACK_BYTES);
}

/* The objects of the maps just read are queued and resolved a slice at a
 * time (wrappers.h mp_wrappers_step()), the one holding @first at once:
 * the event loop never stops for a whole import's libraries. */
static void wrap_step(struct session *s, const struct mp_procmaps *maps, uint64_t first)
{
	size_t pending = mp_wrappers_pending(s->wrappers);
	struct mp_wrappers_cost c;

	if (s->wrappers && mp_wrappers_step(s->wrappers, maps, first, mp_now_ns()) > 0)
		mp_sess_wrappers_publish(s);
	if (!s->wrappers || !pending || mp_wrappers_pending(s->wrappers))
		return;
	mp_wrappers_cost(s->wrappers, &c);
	log_debug("pid %d: wrappers: %" PRIu64 " objects resolved in %.1f ms (%.1f ms CPU), "
		  "the event loop held at most %.1f ms at once",
		  (int)s->o->pid, c.objects, (double)c.wall_ns / 1e6, (double)c.cpu_ns / 1e6,
		  (double)c.max_step_ns / 1e6);
}

void mp_sess_wrappers_update(struct session *s)
{
	wrap_step(s, s->maps, 0);
}

/* An allocation from @caller, as it is read: a caller in no mapping known
 * is code mapped since (dlopen), whose wrappers are resolved and
 * published before more of its allocations go by without a stack. */
static void wrap_note_caller(struct session *s, uint64_t caller)
{
	const struct mp_mapping *m;
	struct mp_procmaps *fresh;

	if (mp_wrappers_pending(s->wrappers))
		wrap_step(s, NULL, caller);
	if (caller - s->wrap_map_lo < s->wrap_map_hi - s->wrap_map_lo)
		return;
	m = s->maps ? mp_procmaps_find(s->maps, caller) : NULL;
	if (!m && !s->exited && mp_now_ns() - s->maps_read_ns >= WRAP_REREAD_NS) {
		s->maps_read_ns = mp_now_ns();
		if (mp_procmaps_read(s->o->pid, &fresh) == 0 &&
		    mp_procmaps_merge(&s->maps, fresh) == 0) {
			wrap_step(s, s->maps, caller);
			m = mp_procmaps_find(s->maps, caller);
		}
	}
	if (m) {
		s->wrap_map_lo = m->start;
		s->wrap_map_hi = m->end;
	}
}

/* The caller an allocation from @caller is charged to: when @caller is in
 * a wrapper, the first frame outside the wrappers, from the frames the
 * target unwound @given (a FRAMES record), or stack @stack (--stacks), or
 * else from the capture @regs, @bytes (@ring: an in-process one, whose
 * frames start inside libmemprof). Left at @caller and counted when no
 * frame is found. */
static uint64_t wrap_caller(struct session *s, uint64_t caller, uint32_t stack,
			    const struct mp_rec_stack *given, const struct mp_unwind_regs *regs,
			    const void *bytes, uint32_t len, bool ring)
{
	uint64_t frames[WRAP_FRAMES];
	const uint64_t *f = frames;
	struct mp_collect_target t;
	uint32_t n = 0;
	bool trunc;

	wrap_note_caller(s, caller);
	if (!mp_wrappers_has(s->wrappers, caller))
		return caller;
	t = (struct mp_collect_target){ .maps = s->maps, .exited = s->exited };
	if (given) {
		/* frames the target unwound itself (FRAMES): as they came,
		 * not laid out again from the stack table */
		f = given->frames;
		n = given->n_frames;
	} else if (stack) {
		n = mp_stack_collect_frames(s->collect, stack, &f);
	} else if (regs) {
		int k = mp_stack_collect_unwind(s->collect, &t, regs, bytes, len, ring ? caller : 0,
						frames, WRAP_FRAMES, &trunc);

		n = k > 0 ? (uint32_t)k : 0;
	}
	for (uint32_t i = 0; i < n; i++) {
		if (!mp_wrappers_has(s->wrappers, f[i])) {
			s->wrap_skipped++;
			return f[i];
		}
	}
	s->wrap_fallbacks++;
	s->wrap_no_stack += !regs && !stack;
	return caller;
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

const char *mp_sess_fn_name(const struct session *s, uint32_t fn)
{
	if (fn >= MP_FN_CUSTOM && fn - MP_FN_CUSTOM < s->o->n_extra)
		return s->o->extra[fn - MP_FN_CUSTOM].name;
	return mp_alloc_fn_name(fn);
}

void mp_sess_ring_ref_free(struct ring_ref *ref)
{
	if (!ref)
		return;
	mp_consumer_free(ref->c);
	free(ref);
}

uint32_t mp_sess_corruption_of(uint32_t consumer_flags)
{
	return (consumer_flags & MP_CONSUMER_CORRUPT_HEADER ? MP_CORRUPT_RING_HEADER : 0) |
	       (consumer_flags & MP_CONSUMER_CORRUPT_RECORDS ? MP_CORRUPT_RING_RECORDS : 0) |
	       (consumer_flags & MP_CONSUMER_CORRUPT_STUCK ? MP_CORRUPT_RING_STUCK : 0) |
	       (consumer_flags & MP_CONSUMER_CORRUPT_REJECTED ? MP_CORRUPT_RECORDS_REJECTED : 0);
}

uint32_t mp_sess_ring_rejects(const struct mp_consumer *c, uint64_t *rejected, uint64_t *stuck)
{
	rejected[MP_REJECT_TIME] += mp_consumer_rejected(c, MP_CONSUMER_REJECT_TIME);
	rejected[MP_REJECT_THREAD] += mp_consumer_rejected(c, MP_CONSUMER_REJECT_THREAD);
	rejected[MP_REJECT_STACK] += mp_consumer_rejected(c, MP_CONSUMER_REJECT_STACK);
	rejected[MP_REJECT_MODE] += mp_consumer_rejected(c, MP_CONSUMER_REJECT_MODE);
	*stuck += mp_consumer_stuck_rings(c);
	return mp_sess_corruption_of(mp_consumer_corruption(c));
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
	{
		uint64_t unwound, copied;

		mp_consumer_stack_counts(ref->c, &unwound, &copied);
		s->stacks_unwound_closed += unwound;
		s->stacks_copied_closed += copied;
	}
	s->corruption |= mp_sess_ring_rejects(ref->c, s->rejected, &s->stuck_rings);
	/* no thread may wait on a ring nobody reads any more */
	mp_consumer_set_alloc_mode(ref->c, MP_ALLOC_OFF, 0);
	s->ring = NULL;
	s->ring_ref = NULL;
	if (!ref->pending) {
		mp_sess_ring_ref_free(ref);
		return;
	}
	ref->next = s->retired;
	s->retired = ref;
}

void mp_sess_ring_stop(struct session *s)
{
	ring_retire(s);
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
			mp_sess_ring_ref_free(ref);
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
		kinds[e->kind <= 3 ? e->kind : 0], mp_sess_fn_name(s, e->fn), e->tid, e->ts_ns,
		e->addr, e->size, e->caller);
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
		s->ring_missing_ns = 0;
		s->ring_missing_told = false;
		/* the new image's interposer word, if any, is elsewhere */
		mp_tracer_set_inproc_tls(s->tracer, 0);
		mp_procmaps_free(s->maps);
		s->maps = NULL;
		s->maps_read_ns = 0;
		/* the next look at the objects reads the new image's maps */
		mp_sess_unseen_changed(s);
		mp_freecheck_exec(s->freecheck);
		s->alloc_text_known = false;
		s->alloc_text_n = 0;
		s->wrap_map_lo = s->wrap_map_hi = 0;
		if (s->wrappers) {
			mp_wrappers_reset(s->wrappers);
			mp_tracer_set_wrappers(s->tracer, NULL, 0);
		}
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
__attribute__((noinline)) int mp_sess_heap_flush(struct session *s)
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
			r = mp_sess_heap_flush(s);
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

int mp_sess_dispatch(void *ctx, const struct mp_merge_item *it)
{
	struct session *s = ctx;
	int r = mp_sess_heap_flush(s);

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
	r = mp_sess_heap_flush(s);
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
int mp_sess_on_idle(void *ctx)
{
	return mp_sess_heap_flush(ctx);
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
	struct mp_collect_target t;
	int n;

	if (MP_PYFRAME_IS(addr)) {
		/* the Python code's function and file (py: rules) */
		static char fn[MP_NAME_MAX + 1];
		const char *name = mp_stack_collect_pyname(s->collect, MP_PYFRAME_NAME(addr));
		const char *at = name ? strchr(name, '@') : NULL;

		if (!at || max < 1)
			return 0;
		snprintf(fn, sizeof(fn), "%.*s", (int)(at - name), name);
		ret[0] = (struct mp_src_frame){ .function = fn, .file = at + 1, .python = true };
		return 1;
	}
	t = target(s);
	n = mp_stack_collect_src_frames(s->collect, &t, addr, f, max);

	for (int i = 0; i < n; i++)
		ret[i] = (struct mp_src_frame){ .function = f[i].function, .file = f[i].file };
	return n;
}

static uint32_t stack_frames(void *ctx, uint32_t id, const uint64_t **ret_frames)
{
	struct session *s = ctx;

	return mp_stack_collect_frames(s->collect, id, ret_frames);
}

#define OBJECT_REREAD_NS (1000 * 1000ull)
#define OBJECTS_FROM_FILES 4096

/* An object the dynamic loader mapped (MP_RAW_OBJECT) at load bias @bias,
 * @path as it named it: its mappings are known from now on, from /proc
 * while the process lives, else from its file, so that the allocations
 * read after a process exited at once are still charged to it. */
static void object_loaded(struct session *s, uint64_t bias, const char *path)
{
	const struct mp_mapping *m = s->maps ? mp_procmaps_find(s->maps, bias) : NULL;
	struct mp_procmaps *fresh;

	/* The process writes the loader's list: a lying one may report
	 * objects without end. /proc is read at most every OBJECT_REREAD_NS
	 * for them, and at most OBJECTS_FROM_FILES are placed from files. */
	if (!path || !path[0] || s->objects_from_files >= OBJECTS_FROM_FILES)
		return;
	if (s->o->dump)
		fprintf(s->o->dump, "object bias=0x%" PRIx64 " path=%s\n", bias, path);
	mp_sess_unseen_changed(s);
	if (m && m->path[0] == '/')
		return;
	if (!s->exited && mp_now_ns() - s->maps_read_ns >= OBJECT_REREAD_NS &&
	    mp_procmaps_read(s->o->pid, &fresh) == 0 && mp_procmaps_merge(&s->maps, fresh) == 0) {
		s->maps_read_ns = mp_now_ns();
		m = mp_procmaps_find(s->maps, bias);
	}
	if ((!m || m->path[0] != '/') && mp_object_mappings(s->o->pid, path, bias, &fresh) == 0 &&
	    mp_procmaps_merge(&s->maps, fresh) == 0)
		s->objects_from_files++;
	mp_sess_wrappers_update(s);
}

static int on_raw(void *ctx, const struct mp_raw_event *ev)
{
	struct session *s = ctx;
	struct {
		struct mp_raw_event ev;
		uint32_t stack;
	} item = { .ev = *ev };

	if (ev->type == MP_RAW_OBJECT) {
		object_loaded(s, ev->addr, mp_tracer_object_path(s->tracer));
		return 0;
	}
	if (ev->type == MP_RAW_EXIT)
		s->exited = true;
	if (ev->type == MP_RAW_EXEC)
		exec_path_push(s);
	item.stack = unwind_event(s);
	if (s->wrappers && (ev->type == MP_RAW_ALLOC || ev->type == MP_RAW_REALLOC) && ev->addr) {
		const struct mp_raw_stack_view *sv = mp_tracer_stack(s->tracer);
		const struct mp_unwind_regs regs = { .ip = sv ? sv->ip : 0,
						     .sp = sv ? sv->sp : 0,
						     .bp = sv ? sv->bp : 0 };

		item.ev.caller = wrap_caller(s, ev->caller, item.stack, NULL, sv ? &regs : NULL,
					     sv ? sv->bytes : NULL, sv ? sv->len : 0, false);
		ev = &item.ev;
	}
	if (!item.stack)
		return mp_order_push(s->order, ITEM_BPF, ev->ts_ns, ev, sizeof(*ev));
	return mp_order_push(s->order, ITEM_BPF, ev->ts_ns, &item, sizeof(item));
}

int mp_sess_drain_tracer(struct session *s)
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

/* FRAMES records are the frames this daemon would take from a copy. */
_Static_assert(MP_COLLECT_RING_SKIP == MP_FRAMES_OWN_MAX && MP_UNWIND_MAX_DEPTH == MP_FRAMES_MAX,
	       "libmemprof's unwinder walks as the daemon's");

/* Thread @tid's stacks have Python frames: in the profile's list (sorted,
 * bounded). */
static void py_tid_note(struct session *s, uint32_t tid)
{
	uint32_t lo = 0, hi = s->n_py_tids;

	s->py_tid_last = tid;
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;

		if (s->py_tids[mid] < tid)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo < s->n_py_tids && s->py_tids[lo] == tid)
		return;
	if (s->n_py_tids >= MP_PROFILE_MAX_PY_TIDS)
		return;
	if (s->n_py_tids == s->py_tids_cap) {
		uint32_t cap = s->py_tids_cap ? s->py_tids_cap * 2 : 16;
		uint32_t *t = reallocarray(s->py_tids, cap, sizeof(*t));

		if (!t)
			return;
		s->py_tids = t;
		s->py_tids_cap = cap;
	}
	memmove(&s->py_tids[lo + 1], &s->py_tids[lo], (s->n_py_tids - lo) * sizeof(*s->py_tids));
	s->py_tids[lo] = tid;
	s->n_py_tids++;
}

/* The name of a Python frame's code, from the target's string table. */
static const char *ring_pyname(void *ctx, uint32_t id)
{
	struct session *s = ctx;

	return s->ring ? mp_consumer_string(s->ring, id) : NULL;
}

void mp_sess_pynames_init(struct session *s)
{
	mp_stack_collect_set_pynames(s->collect, ring_pyname, s);
}

/* A record read from the ring, to the ordering stage. A stack is unwound
 * now: the consumer's copy of its bytes ends when this callback returns.
 * A marker held keeps the reader (its name's owner) alive. */
static int on_ring_read(void *ctx, uint32_t ring, const struct mp_record *rec)
{
	struct session *s = ctx;
	uint32_t stack = 0;
	int r;

	struct mp_record wrapped;

	if (ring != MP_CONSUMER_RING_SYNTH && rec->stack && s->o->stacks) {
		const struct mp_rec_stack *st = rec->stack;
		struct mp_collect_target t = target(s);

		mp_stack_collect_set_bytes(s->collect, rec->heap.size);
		if (st->frames) {
			stack = mp_stack_collect_given(s->collect, &t, st->frames, st->n_frames,
						       st->truncated);
			if (mp_stack_collect_last_python(s->collect) && rec->tid != s->py_tid_last)
				py_tid_note(s, rec->tid);
		} else
			stack = mp_stack_collect_ring(s->collect, &t,
						      &(struct mp_unwind_regs){ .ip = st->ip,
										.sp = st->sp,
										.bp = st->bp },
						      st->bytes, st->len, rec->heap.caller);
	}
	if (s->wrappers && ring != MP_CONSUMER_RING_SYNTH &&
	    (rec->type == MP_REC_ALLOC || rec->type == MP_REC_REALLOC) && rec->heap.addr) {
		/* frames unwound by the target: through their stack, or as
		 * they are when stacks are off */
		const struct mp_rec_stack *st =
			rec->stack && !rec->stack->frames ? rec->stack : NULL;
		const struct mp_rec_stack *given =
			rec->stack && rec->stack->frames ? rec->stack : NULL;
		const struct mp_unwind_regs regs = { .ip = st ? st->ip : 0,
						     .sp = st ? st->sp : 0,
						     .bp = st ? st->bp : 0 };
		uint64_t c = wrap_caller(s, rec->heap.caller, stack, given, st ? &regs : NULL,
					 st ? st->bytes : NULL, st ? st->len : 0, true);

		/* charged past the wrappers by libmemprof itself */
		s->wrap_skipped += !!(rec->flags & MP_REC_F_PAST_WRAPPER);

		if (c != rec->heap.caller) {
			wrapped = *rec;
			wrapped.heap.caller = c;
			rec = &wrapped;
		}
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
	if (s->wrappers) {
		uint64_t lohi[2 * MP_RING_WRAP_MAX];

		return mp_consumer_set_wrappers(c, lohi, wrap_filter(s, lohi),
						MP_SESSION_WRAP_STACK_BYTES);
	}
	return mp_consumer_set_wrappers(c, NULL, 0, 0);
}

/* The live table's slots of a heap record the ring reader sees ahead:
 * with one busy ring, records are applied as they are read, and the
 * ordering stage's own prefetch (mp_sess_prefetch_heap()) never has a
 * queue to look into. */
static void ring_prefetch(void *ctx, uint64_t addr, uint64_t old_addr)
{
	const struct session *s = ctx;

	mp_correlator_prefetch_heap(s->corr, addr, old_addr);
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
	int r;

	if (s->path == MP_PATH_INPROCESS) {
		o.alloc_mode = s->o->mode == MP_TRACE_SAMPLED ? MP_ALLOC_SAMPLED : MP_ALLOC_PRECISE;
		o.alloc_sample_bytes = s->o->sample_bytes;
		o.alloc_max_wait_ns = s->o->max_wait_ns ? s->o->max_wait_ns : MP_WAIT_LEASE;
		o.alloc_stack_bytes = s->o->stacks ? session_stack_bytes(s->o) : 0;
		o.alloc_stack_depth =
			s->o->stack_depth ? s->o->stack_depth : MP_UNWIND_DEFAULT_DEPTH;
		o.before_attach = before_attach;
		o.ctx = s;
	}
	r = mp_consumer_open_pid_opts(s->o->pid, &o, &s->ring);
	if (r == 0)
		mp_consumer_set_prefetch(s->ring, ring_prefetch, s);
	return r;
}

/* The in-process path without a ring: libmemprof makes it at load, and in
 * a forked child at the fork, unless MEMPROF_RING_LAZY=1 (then at the
 * first marker); an image exec'd without libmemprof has none. The
 * allocations are not seen: told once an image, when it has lasted
 * RING_MISSING_NS. */
static void ring_missing(struct session *s, uint64_t now)
{
	if (!s->ring_missing_ns)
		s->ring_missing_ns = now;
	if (s->ring_missing_told || now - s->ring_missing_ns < RING_MISSING_NS)
		return;
	s->ring_missing_told = true;
	log_warning("pid %d: no libmemprof ring to read after 1 s: allocations are not seen until "
		    "the process makes one (with MEMPROF_RING_LAZY=1, at its first marker; an "
		    "image exec'd without libmemprof has none)",
		    (int)s->o->pid);
}

int mp_sess_drain_ring(struct session *s)
{
	int r;

	s->drain_more = false;
	if (!s->ring) {
		uint64_t now = mp_now_ns();

		if (s->exited || now < s->ring_retry_ns)
			return 0;
		s->ring_retry_ns = now + mp_sess_ring_retry_ns(s);
		r = ring_open(s);
		if (r == -ENOENT && s->path == MP_PATH_INPROCESS)
			ring_missing(s, now);
		if (r == -ENOENT || r == -ESRCH)
			return 0;
		s->ring_missing_ns = 0;
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
		/* the interposer is on: as for the uprobes (session.c) */
		if (s->path == MP_PATH_INPROCESS)
			(void)mp_freecheck_snapshot(s->freecheck);
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

/* One pass over every source, then release what is older than the
 * watermark: the clock is read before the drains, so anything published
 * after them is (up to the lag) newer. */
int mp_sess_cycle(struct session *s)
{
	uint64_t t0 = mp_now_ns();
	int r;

	r = mp_sess_drain_tracer(s);
	if (r < 0)
		return r;
	mp_order_read_begin(s->order, t0, mp_tracer_drained(s->tracer));
	s->read_ns = t0;
	r = mp_sess_drain_ring(s);
	s->read_ns = 0;
	mp_order_read_end(s->order);
	if (r < 0)
		return r;
	mp_sess_unseen_step(s, false);
	return mp_order_release(s->order, t0, s->ring);
}

void mp_sess_prefetch_heap(void *ctx, const struct mp_ringq_rec *rec)
{
	const struct session *s = ctx;

	mp_correlator_prefetch_heap(s->corr, rec->addr, rec->old_addr);
}

int mp_sess_on_ring_rec(void *ctx, const struct mp_ringq_rec *rec, const struct mp_record *marker,
			void *ref)
{
	return on_ring_rec(ctx, rec, marker, ref);
}

void mp_sess_correlator_hooks(struct session *s, struct mp_correlator_opts *o)
{
	o->resolve_owner = resolve_owner;
	o->resolve_frames = resolve_frames;
	o->stack_frames = stack_frames;
	o->resolve_ctx = s;
	o->observe_heap = s->o->dump ? dump_heap : NULL;
	o->observe_ctx = s;
	o->free_mapped = free_mapped;
	o->free_internal = free_internal;
	o->free_ctx = s;
}
