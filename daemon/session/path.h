/* SPDX-License-Identifier: MIT */
/*
 * Which path delivers a target's allocator calls (docs/TRACER.md "Two
 * allocation paths"): libmemprof's interposer through the marker ring when
 * the target's malloc resolves to it or libmemprof can be injected into it
 * (daemon/sources/injector.c), eBPF uprobes otherwise.
 */
#ifndef MP_SESSION_PATH_H
#define MP_SESSION_PATH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "profile.h"

/* Whether @pid's first malloc in lookup order is libmemprof's interposer:
 * the object that defines malloc also defines memprof_kernel_begin. 0 and
 * *ret filled, or a negative errno (-ESRCH: no such process). */
int mp_path_inprocess_available(pid_t pid, bool *ret);

struct mp_path_opts {
	pid_t pid;
	/* 0 (auto), MP_PATH_BPF, MP_PATH_INPROCESS or MP_TRACER_INJECT */
	uint32_t requested;
	uint32_t mode; /* enum mp_trace_mode */
	uint64_t duty_period_ns;
	/* libmemprof to inject (NULL: none found) and the bound on each call
	 * made in the target (0: the default) */
	const char *inject_lib;
	uint64_t inject_timeout_ns;
	/* why injection is not allowed here (NULL: it is) */
	const char *no_inject;
};

struct mp_path_choice {
	uint32_t path; /* enum mp_tracer_path */
	bool injected;
	/* why, in words; "" when there is nothing to say */
	char reason[MP_PROFILE_REASON_MAX];
};

/*
 * The path for a session. Auto takes in-process when libmemprof is the
 * target's malloc, else injects it, else takes eBPF with the reason;
 * inprocess and inject take in-process by either way or fail. Modes that
 * trace no allocator call (rss) or cycle the probes (--duty) take eBPF.
 * -EOPNOTSUPP (with ret->reason) when the path requested is impossible.
 */
int mp_path_pick(const struct mp_path_opts *o, struct mp_path_choice *ret);

/* libmemprof to inject, in @buf (PATH_MAX bytes): $MEMPROF_INJECT_LIB or
 * $MEMPROF_PRELOAD_LIB, else the build tree next to the running program
 * (cli/ -> libclient/), else the installed one; NULL when none is
 * readable. */
const char *mp_path_inject_lib(char *buf, size_t len);

#endif /* MP_SESSION_PATH_H */
