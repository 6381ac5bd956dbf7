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

#include "session_impl.h"

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
		.release_in_child = o->release_detached,
		.wrap_stack_bytes = s->wrappers && !o->stacks ? MP_SESSION_WRAP_STACK_BYTES : 0,
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
	mp_sess_wrappers_publish(s);
	return 0;
}

/* The allocator wrappers of the address space as it is now (none when
 * the default list is off and none was named). */
static int setup_wrappers(struct session *s)
{
	const struct mp_session_opts *o = s->o;
	const struct mp_wrappers_opts wo = { .dso_globs = o->wrapper_dsos,
					     .n_dso = o->n_wrapper_dsos,
					     .fn_globs = o->wrapper_fns,
					     .n_fn = o->n_wrapper_fns,
					     .no_default = o->no_default_wrappers };
	int r;

	if (o->no_default_wrappers && !o->n_wrapper_dsos && !o->n_wrapper_fns)
		return 0;
	r = mp_wrappers_new(o->pid, &wo, &s->wrappers);
	if (r < 0)
		return log_error_errno(r, "pid %d: allocator wrappers: %m", (int)o->pid);
	r = mp_wrappers_update(s->wrappers, s->maps);
	if (r < 0)
		return log_error_errno(r, "pid %d: allocator wrappers: %m", (int)o->pid);
	return 0;
}

void mp_session_limits(uint64_t max_memory, uint32_t max_sites, bool stacks,
		       struct mp_session_limits *ret)
{
	uint64_t m = max_memory ? max_memory : MP_SESSION_DEFAULT_MEMORY;
	/* an eighth, with stacks a quarter (as many sites as stacks), at 160
	 * bytes a site (docs/PROFILE.md "Limits") */
	uint64_t sites = max_sites ? max_sites : m / (stacks ? 4 : 8) / 160;

	*ret = (struct mp_session_limits){
		.memory = m,
		.live_bytes = m / 2,
		.sites = sites > MP_SESSION_MAX_SITES ? MP_SESSION_MAX_SITES :
			 sites			      ? (uint32_t)sites :
							1,
		.stack_frames = m / 2 / sizeof(uint64_t),
	};
}

/* The correlator, with the owner rules and the pools of --alloc
 * functions. */
static int setup_correlator(struct session *s)
{
	const struct mp_session_opts *o = s->o;
	struct mp_session_limits lim;
	struct mp_correlator_opts copts = {
		.resolve_ctx = s,
		.sample_bytes = o->mode == MP_TRACE_SAMPLED ? o->sample_bytes : 0,
		.begin_ns = mp_now_ns(),
	};
	int r;

	mp_session_limits(o->max_memory, o->max_sites, o->stacks, &lim);
	copts.max_live_bytes = lim.live_bytes;
	copts.max_sites = lim.sites;

	mp_sess_correlator_hooks(s, &copts);
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
	const struct mp_order_sink sink = { .ctx = s,
					    .ring = mp_sess_on_ring_rec,
					    .item = mp_sess_dispatch,
					    .idle = mp_sess_on_idle,
					    .prefetch = mp_sess_prefetch_heap };
	int r = mp_order_new(&oopts, &sink, &s->order);

	if (r < 0)
		return log_error_errno(r, "pid %d: ordering: %m", (int)o->pid);
	/* Sampled mode sends few temporary allocations, and they are
	 * estimates; the dump shows every event as it is applied. */
	s->pairing = s->path == MP_PATH_INPROCESS && o->mode == MP_TRACE_PRECISE && !o->dump;
	return 0;
}

/* The allocation path (path.c): libmemprof's interposer, injected when
 * it must be, or eBPF uprobes. */
static int pick_path(struct session *s)
{
	const struct mp_session_opts *o = s->o;
	const char *tmo = getenv("MEMPROFD_INJECT_TIMEOUT_MS");
	char lib[PATH_MAX];
	struct mp_path_opts po = {
		.pid = o->pid,
		.requested = o->tracer,
		.mode = o->mode,
		.duty_period_ns = o->duty_period_ns,
		.inject_lib = mp_path_inject_lib(lib, sizeof(lib)),
		.inject_timeout_ns = tmo ? strtoull(tmo, NULL, 10) * 1000000ull : 0,
		.no_inject = o->no_inject,
	};
	struct mp_path_choice c;
	int r;

	r = mp_path_pick(&po, &c);
	if (r == -EOPNOTSUPP)
		return log_error_errno(r, "pid %d: --tracer %s: %s", (int)o->pid,
				       o->tracer == MP_TRACER_INJECT ? "inject" : "inprocess",
				       c.reason);
	if (r < 0)
		return log_error_errno(r, "pid %d: choosing the allocation path: %m", (int)o->pid);
	s->path = c.path;
	s->injected = c.injected;
	snprintf(s->path_reason, sizeof(s->path_reason), "%s", c.reason);
	return 0;
}

/* The stages: maps, stack collector, ordering, tracer,
 * correlator, RSS sampler. */
static int setup_pipeline(struct session *s)
{
	const struct mp_session_opts *o = s->o;
	int r;

	/* The address space as it is now: the owners of allocations made by
	 * a process that exits before we process them are still known. */
	s->maps_read_ns = mp_now_ns();
	r = mp_procmaps_read(o->pid, &s->maps);
	if (r == -ESRCH) /* gone already: what it sent is still read */
		r = mp_procmaps_parse("", 0, &s->maps);
	if (r < 0)
		return log_error_errno(r, "pid %d: reading /proc/%d/maps: %m", (int)o->pid,
				       (int)o->pid);
	r = mp_freecheck_new(o->pid, s->maps, s->maps_read_ns, &s->freecheck);
	if (r < 0)
		return log_error_errno(r, "pid %d: free check: %m", (int)o->pid);

	r = mp_stack_collector_new(o->pid, o->stacks, o->stack_depth, &s->collect);
	if (r == -EINVAL)
		return log_error_errno(r, "pid %d: stack depth %u: %m", (int)o->pid,
				       o->stack_depth);
	if (r < 0)
		return log_error_errno(r, "pid %d: stack table: %m", (int)o->pid);
	mp_sess_pynames_init(s);
	{
		struct mp_session_limits lim;

		mp_session_limits(o->max_memory, o->max_sites, o->stacks, &lim);
		mp_stack_collector_set_max(s->collect, o->max_stacks, lim.stack_frames);
	}

	r = setup_wrappers(s);
	if (r < 0)
		return r;
	describe_process(s);
	r = pick_path(s);
	if (r < 0)
		return r;
	r = setup_order(s);
	if (r == 0)
		r = setup_tracer(s);
	if (r == 0)
		r = setup_correlator(s);
	if (r < 0)
		return r;
	/* the uprobes are on: blocks of the attach window are in maps now
	 * (a failed read leaves the first snapshot) */
	if (s->path != MP_PATH_INPROCESS)
		(void)mp_freecheck_snapshot(s->freecheck);
	if (!o->rss_hz)
		return 0;

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

	s->tick_ns = mp_sess_busy_tick(s);
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

	/* The ring may exist (memprof run stops the target after libmemprof's
	 * constructor), and the RSS timeline begins here: before the target runs on. */
	r = mp_sess_drain_ring(s);
	if (r == 0 && s->rss)
		r = mp_sess_idle_rss(s);
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

/* The daemon's part of a profile: process, settings, drop counters;
 * what could not be symbolized is said once, of the @final profile. */
static int fill_profile(struct session *s, struct mp_profile *p, bool final)
{
	const struct mp_session_opts *o = s->o;
	struct mp_symbolize_stats st;
	int r;

	r = mp_profile_set_process(p, (int32_t)o->pid, s->exe[0] ? s->exe : NULL, NULL, s->cmdline);
	if (r < 0)
		return r;
	p->rss_interval_ns = o->rss_hz ? 1000000000ull / o->rss_hz : 0;
	p->pss_interval_ns = o->rss_hz && o->pss_every ? p->rss_interval_ns * o->pss_every : 0;
	{
		uint64_t k[MP_DROP_KINDS];

		mp_tracer_drops_by_kind(s->tracer, k);
		p->drops_bpf_allocs = k[MP_DROP_ALLOC];
		p->drops_bpf_frees = k[MP_DROP_FREE];
		p->drops_bpf_reallocs = k[MP_DROP_REALLOC];
		p->drops_bpf_others = k[MP_DROP_OTHER];
		p->drops_bpf =
			k[MP_DROP_ALLOC] + k[MP_DROP_FREE] + k[MP_DROP_REALLOC] + k[MP_DROP_OTHER];
	}
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
	p->injected = s->injected;
	snprintf(p->tracer_path_reason, sizeof(p->tracer_path_reason), "%s", s->path_reason);
	p->drops_heap = s->heap_drops_closed + (s->ring ? mp_consumer_alloc_drops(s->ring) : 0);
	p->heap_waits = s->heap_waits_closed + (s->ring ? mp_consumer_alloc_waits(s->ring) : 0);
	for (int i = 0; i < MP_REJECT_COUNT; i++)
		p->rejected[i] += s->rejected[i];
	p->stuck_rings = s->stuck_rings;
	p->corruption |= s->corruption;
	if (s->ring)
		p->corruption |= mp_sess_ring_rejects(s->ring, p->rejected, &p->stuck_rings);
	p->limits.memory = o->max_memory ? o->max_memory : MP_SESSION_DEFAULT_MEMORY;
	if (o->stacks) {
		uint64_t unwound = 0, copied = 0;

		if (s->ring)
			mp_consumer_stack_counts(s->ring, &unwound, &copied);
		p->stacks_unwound = s->stacks_unwound_closed + unwound;
		p->stacks_copied = s->stacks_copied_closed + copied;
		p->stack_depth = o->stack_depth ? o->stack_depth : MP_UNWIND_DEFAULT_DEPTH;
		if (s->n_py_tids) {
			free(p->python_tids);
			p->python_tids = malloc(s->n_py_tids * sizeof(*p->python_tids));
			if (!p->python_tids)
				return -ENOMEM;
			memcpy(p->python_tids, s->py_tids, s->n_py_tids * sizeof(*p->python_tids));
			p->n_python_tids = s->n_py_tids;
		}
		mp_sess_warm_start(s, final);
		r = mp_stack_collect_export(s->collect, p);
		if (r < 0)
			return r;
		/* best effort: unpruned, the profile is only larger */
		if (mp_profile_stacks_prune(p) < 0)
			log_warning("pid %d: out of memory pruning the stacks no site names",
				    (int)o->pid);
	}
	if (s->wrappers) {
		p->wrappers.on = true;
		p->wrappers.default_list = !o->no_default_wrappers;
		mp_wrappers_counts(s->wrappers, &p->wrappers.functions, &p->wrappers.objects);
		p->wrappers.skipped = s->wrap_skipped;
		p->wrappers.fallbacks = s->wrap_fallbacks;
	}
	mp_sess_unseen_step(s, final);
	mp_sess_unseen_fill(s, p);
	/* Best effort: a profile without symbols is still a profile. */
	r = mp_sess_symbolize(s, p, &st);
	if (r < 0)
		log_warning_errno(r, "pid %d: symbolizing allocation sites: %m", (int)o->pid);
	else if (final && st.unsymbolized)
		log_notice("pid %d: %" PRIu32 " of %" PRIu32 " frames without a symbol (%" PRIu32
			   " in anonymous memory such as JIT code; %" PRIu32 " of %" PRIu32
			   " file mappings unreadable): shown as addresses%s",
			   (int)o->pid, st.unsymbolized, st.frames, st.anonymous,
			   st.objects_unreadable, st.objects, mp_symbolize_net_hint());
	return 0;
}

/* Everything released so far, as a profile ending now: events younger
 * than the merge lag wait for the next snapshot. */
static void snapshot(struct session *s, enum mp_snapshot_reason why)
{
	struct mp_profile *p = NULL;
	uint64_t now = mp_now_ns();
	int r;

	r = mp_sess_heap_flush(s);
	if (r == 0)
		r = mp_correlator_snapshot(s->corr, now > s->last_ts ? now : s->last_ts, &p);
	if (r == 0)
		r = fill_profile(s, p, false);
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
		want = mp_sess_busy_tick(s);
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
			r = mp_sess_idle_event(s, evs[i].data.u32);
			if (r < 0)
				return r;
			switch (evs[i].data.u32) {
			case EP_TICK:
				if (read(s->tickfd, &expirations, sizeof(expirations)) < 0 &&
				    errno != EAGAIN)
					return log_error_errno(-errno, "timerfd: %m");
				ticked = true;
				break;
			case EP_RSS:
				r = mp_sess_idle_rss(s);
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
				r = mp_sess_cycle(s);
				if (r < 0)
					return r;
				snapshot(s, evs[i].data.u32 == EP_SNAPSHOT ? MP_SNAPSHOT_REQUESTED :
									     MP_SNAPSHOT_PERIODIC);
				break;
			default:
				break;
			}
		}
		/* asleep, an RSS sample equal to the last reads nothing */
		r = s->idle.state == IDLE_ASLEEP && !ticked ? 0 : mp_sess_cycle(s);
		if (r == 0 && ticked)
			r = tick_adapt(s);
		if (r == 0 && ticked)
			r = mp_sess_idle_tick(s);
		if (r < 0)
			return r;
		if (ticked && s->o->ctl && s->o->ctl->tables_bytes)
			__atomic_store_n(s->o->ctl->tables_bytes,
					 mp_live_bytes(mp_correlator_live(s->corr)),
					 __ATOMIC_RELAXED);
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
			mp_sess_fn_name(s, fn), fs->allocs, fs->alloc_bytes, fs->frees,
			fs->freed_bytes, fs->unknown_frees);
	}
	fflush(f);
}

static void teardown(struct session *s)
{
	mp_symbolize_warm_free(s->warm);
	mp_sess_idle_free(s);
	if (s->drains)
		log_debug("pid %d: %" PRIu64 " ring drains, %" PRIu64
			  " of them at the batch limit; at most %" PRIu64
			  " ring records held for the merge after a drain",
			  (int)s->o->pid, s->drains, s->drains_full, s->held_max);
	if (s->pairs)
		log_debug("pid %d: %" PRIu64 " allocations applied with the free that followed",
			  (int)s->o->pid, s->pairs);
	if (mp_freecheck_reads(s->freecheck))
		log_debug("pid %d: /proc/%d/maps re-read for frees of blocks never seen "
			  "allocated: %" PRIu64,
			  (int)s->o->pid, (int)s->o->pid, mp_freecheck_reads(s->freecheck));
	if (s->objects_from_files)
		log_debug("pid %d: %" PRIu64 " loaded objects placed from their files (gone from "
			  "/proc/%d/maps when read)",
			  (int)s->o->pid, s->objects_from_files, (int)s->o->pid);
	if (s->wrap_fallbacks)
		log_debug("pid %d: %" PRIu64 " allocations left at a wrapper, %" PRIu64
			  " of them without a stack",
			  (int)s->o->pid, s->wrap_fallbacks, s->wrap_no_stack);
	mp_tracer_free(s->tracer);
	mp_sess_ring_ref_free(s->ring_ref);
	while (s->retired) {
		struct ring_ref *next = s->retired->next;

		mp_sess_ring_ref_free(s->retired);
		s->retired = next;
	}
	mp_rss_sampler_free(s->rss);
	mp_correlator_free(s->corr);
	mp_order_free(s->order);
	mp_procmaps_free(s->maps);
	mp_freecheck_free(s->freecheck);
	mp_stack_collector_free(s->collect);
	free(s->py_tids);
	mp_wrappers_free(s->wrappers);
	mp_sess_unseen_free(s->unseen);
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
		r = mp_sess_drain_tracer(&s);
		for (uint32_t i = 0; r == 0 && (i == 0 || s.drain_more) && i < FINAL_DRAINS; i++)
			r = mp_sess_drain_ring(&s);
		if (r == 0)
			r = mp_order_release_to(s.order, UINT64_MAX);
		if (r == 0)
			mp_sess_ring_stop(&s);
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
		r = fill_profile(&s, p, true);
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
