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
	uint64_t lag_ns; /* merge watermark lag; 0: default (10 ms) */
	FILE *dump; /* print every event here in merged order (NULL: don't) */
	bool verbose;
	/* Called once everything is attached (memprof run resumes its child). */
	int (*on_attached)(void *ctx);
	void *on_attached_ctx;
};

/* Blocks SIGINT and SIGTERM in the calling thread (they end the session
 * cleanly) and runs until the duration elapses, the target exits or one of
 * those signals arrives. Errors are logged once, with context, to stderr.
 * Returns 0 and the profile, or a negative errno. */
int mp_session_run(const struct mp_session_opts *opts, struct mp_profile **ret);

#endif /* MP_SESSION_H */
