/* SPDX-License-Identifier: MIT */
/*
 * memprofd's service mode: a control socket (control.h) serving
 * attach/detach/list/status/dump for many targets at once, one session
 * thread per target (session.h), chunks streamed to collectors
 * (stream.h), configuration from a file (config.h), SIGHUP reload, SIGTERM
 * flush, sd_notify readiness. docs/SERVICE.md has the whole story.
 */
#ifndef MP_SERVICE_H
#define MP_SERVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct mp_service_opts {
	const char *control_path; /* NULL: MP_CTL_DEFAULT_PATH */
	const char *config_path; /* NULL: MP_CONFIG_DEFAULT_PATH, may be absent */
	bool verbose;
};

/* Runs until SIGTERM or SIGINT; returns 0 after flushing every target, or
 * a negative errno (logged) if the service could not start. */
int mp_service_run(const struct mp_service_opts *o);

/*
 * May the user @uid/@gid profile process @pid? Root may profile anything;
 * anyone else only a process whose real, effective and saved uids and gids
 * all equal theirs and which is dumpable (its /proc/PID/status is owned by
 * @uid: the kernel gives the /proc/PID files of a non-dumpable process to
 * root)
 * — what ptrace's PTRACE_MODE_READ check allows without capabilities.
 * Returns 0 or -EPERM/-ESRCH with the reason in @why.
 */
int mp_service_authorize(uid_t uid, gid_t gid, pid_t pid, char *why, size_t why_len);

/*
 * Whether the service may inject libmemprof (ptrace, docs/TRACER.md
 * "Injection") into a target that mp_service_authorize() let @uid attach
 * to: root's requests may; another user's only where the user could
 * ptrace the process itself, which past the credentials checked there
 * Yama decides (ptrace_scope 0: a user may attach to its own processes;
 * 1 and up: not to those it did not start, whatever the service could
 * do). NULL when it may, else the reason in @buf. @yama_path: NULL for
 * /proc/sys/kernel/yama/ptrace_scope (tests name a file).
 */
const char *mp_service_inject_refusal(uid_t uid, const char *yama_path, char *buf, size_t len);

/*
 * The memory a target of @mode (enum mp_trace_mode) costs the service at
 * least: its BPF ring buffer (@ring_bytes, 0: the mode's default) plus
 * MP_SERVICE_TARGET_BASE for the other BPF maps and programs and the
 * session's own heap (measured: bench/service-mem, docs/SERVICE.md). A
 * precise or sampled target costs more as its live blocks grow; the
 * service checks what it really uses too.
 */
#define MP_SERVICE_TARGET_BASE (2ull << 20)
uint64_t mp_service_target_cost(uint32_t mode, uint32_t ring_bytes);

/* What the service keeps for itself beside its targets: the collectors'
 * buffers (@buffer_bytes each for @n_collectors, at least one), the
 * control connections (@max_conns) and MP_SERVICE_FIXED_BYTES. */
#define MP_SERVICE_FIXED_BYTES (32ull << 20)
/* Limits: the memory budget when neither memory_budget nor the cgroup's
 * MemoryMax= sets one, and a target's share of the budget for its tables
 * (max_memory) when the configuration sets none: an eighth of the
 * targets' budget, within [MP_SESSION_MIN_MEMORY, MP_SESSION_DEFAULT_MEMORY]. */
#define MP_SERVICE_DEFAULT_BUDGET (2ull << 30)
uint64_t mp_service_target_tables(uint64_t budget, uint64_t configured);
uint64_t mp_service_reserved(uint64_t buffer_bytes, size_t n_collectors, unsigned max_conns);

#endif /* MP_SERVICE_H */
