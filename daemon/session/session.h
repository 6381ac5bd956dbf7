/* SPDX-License-Identifier: MIT */
/*
 * One profiling session of one process: attaches the BPF tracer, the marker
 * ring consumer and the RSS sampler, merges their streams by timestamp,
 * feeds the correlator, and hands back the profile. Used by `memprofd --pid`
 * and `memprof run`.
 */
#ifndef MP_SESSION_H
#define MP_SESSION_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "profile.h"
#include "tracer.h"

#define MP_SESSION_MAX_OWNER_RULES 64
#define MP_SESSION_MAX_WRAPPERS 64

/* Why mp_session_ctl.on_snapshot is called. */
enum mp_snapshot_reason {
	MP_SNAPSHOT_REQUESTED = 1, /* snapshot_fd became readable */
	MP_SNAPSHOT_PERIODIC = 2, /* every snapshot_period_ns */
};

/*
 * Control of a session run by another thread (service mode). With a ctl,
 * the session leaves the signal mask alone and ends only when stop_fd
 * becomes readable, the duration elapses or the target exits.
 */
struct mp_session_ctl {
	int stop_fd; /* eventfd: readable = end the session */
	int snapshot_fd; /* eventfd (-1: none): readable = one snapshot requested */
	uint64_t snapshot_period_ns; /* also snapshot this often; 0: never */
	/* Receives each snapshot (or NULL and a negative errno when taking it
	 * failed); the callee owns @p. Called on the session's thread. */
	void (*on_snapshot)(void *ctx, enum mp_snapshot_reason why, struct mp_profile *p, int err);
	/* Optional: asked before each periodic snapshot (which copies the
	 * whole profile); false skips it. */
	bool (*want_periodic)(void *ctx);
	void *ctx;
	/* Optional (limits): the bytes of the target's live-allocation table,
	 * stored here (relaxed atomic) at every tick, for the service's
	 * memory budget. */
	uint64_t *tables_bytes;
};

struct mp_session_opts {
	pid_t pid;
	uint64_t duration_ns; /* 0: until the target exits or a stop signal */
	unsigned rss_hz; /* 0: no RSS sampling */
	unsigned pss_every; /* read smaps_rollup every Nth sample; 0: never */
	bool rss_exact; /* rss_stat tracepoint attribution */
	/* Tracing mode (enum mp_trace_mode), sampling interval, duty cycle:
	 * see struct mp_tracer_opts. */
	uint32_t mode;
	uint64_t sample_bytes;
	uint64_t duty_on_ns, duty_period_ns;
	struct mp_tracer_func extra[MP_TRACER_MAX_EXTRA];
	size_t n_extra;
	const char *owner_rules[MP_SESSION_MAX_OWNER_RULES]; /* "GLOB=NAME" */
	size_t n_owner_rules;
	/* Allocator wrappers (daemon/sources/wrappers.h): object globs,
	 * symbol globs, and whether the default list is off. */
	const char *wrapper_dsos[MP_SESSION_MAX_WRAPPERS];
	size_t n_wrapper_dsos;
	const char *wrapper_fns[MP_SESSION_MAX_WRAPPERS];
	size_t n_wrapper_fns;
	bool no_default_wrappers;
	uint64_t lag_ns; /* merge watermark lag; 0: default (10 ms) */
	/* Precise mode, in-process path: how long an allocating thread waits
	 * for ring space before it drops; 0: as long as the daemon lives (it
	 * holds the ring's lease). */
	uint64_t max_wait_ns;
	FILE *dump; /* print every event here in merged order (NULL: don't) */
	bool verbose;
	/* Called once everything is attached (memprof run resumes its child). */
	int (*on_attached)(void *ctx);
	void *on_attached_ctx;
	/* The kernel's release of the probes (tens of ms) is left to a short
	 * process of its own that nobody waits for: for callers that exit
	 * once the session is over (memprof run, memprofd --pid). */
	bool release_detached;
	/* NULL: stop on SIGINT/SIGTERM (foreground use). */
	const struct mp_session_ctl *ctl;
	uint32_t bpf_ring_bytes; /* 0: MP_TRACER_RING_BYTES */
	/* Call stacks of allocations (--stacks): unwound in the daemon from
	 * stack_bytes of the thread's stack (0: MP_SESSION_STACK_BYTES), at
	 * most stack_depth frames (0: MP_UNWIND_DEFAULT_DEPTH). */
	bool stacks;
	uint32_t stack_depth;
	uint32_t stack_bytes;
	/* --tracer: MP_PATH_BPF, MP_PATH_INPROCESS (enum mp_tracer_path),
	 * MP_TRACER_INJECT, or 0 for auto (in-process whenever the target's
	 * malloc is libmemprof's or libmemprof can be injected). */
	uint32_t tracer;
	/* Why libmemprof may not be injected into this target (the service:
	 * its requester may not ptrace it); NULL: it may. */
	const char *no_inject;
	/* Limits (docs/PROFILE.md "Limits"): the memory the target's tables
	 * may take (0: MP_SESSION_DEFAULT_MEMORY), shared out by
	 * mp_session_limits(); the sites and stacks kept (0: from it). */
	uint64_t max_memory;
	uint32_t max_sites;
	uint32_t max_stacks;
};

#define MP_SESSION_STACK_BYTES 16384
/* Bytes of stack an allocation whose caller is a wrapper carries, without
 * --stacks (docs/PROFILE.md "Owners": what covers the default list's
 * chains). */
#define MP_SESSION_WRAP_STACK_BYTES 2048

/* Limits: the default memory bound of a target's tables, the lowest one
 * accepted and the most sites. */
#define MP_SESSION_DEFAULT_MEMORY (512ull << 20)
#define MP_SESSION_MIN_MEMORY (4ull << 20)
#define MP_SESSION_MAX_SITES (1u << 24)

/* How the memory bound @max_memory (0: the default) is shared out: half
 * to the live-allocation table's slots, an eighth to the sites (160 bytes
 * each: the entry, its variances, its map and heap slots and an eighth
 * more for evicted sites' live blocks), a quarter with @stacks (as many
 * sites as stacks), and to the stack table a bound in frames whose stacks
 * laid out take half of it (8 bytes a frame), the table itself a quarter
 * at most (daemon/stacks/stacks.h); @max_sites, when set, replaces the
 * sites' share. */
struct mp_session_limits {
	uint64_t memory;
	uint64_t live_bytes;
	uint32_t sites;
	uint64_t stack_frames;
};
void mp_session_limits(uint64_t max_memory, uint32_t max_sites, bool stacks,
		       struct mp_session_limits *ret);

/* Without a ctl, blocks SIGINT and SIGTERM in the calling thread (they end
 * the session cleanly) and runs until the duration elapses, the target
 * exits or one of those signals arrives; with a ctl, see mp_session_ctl. Errors are logged once, with context, to stderr.
 * Returns 0 and the profile, or a negative errno. */
int mp_session_run(const struct mp_session_opts *opts, struct mp_profile **ret);

#endif /* MP_SESSION_H */
