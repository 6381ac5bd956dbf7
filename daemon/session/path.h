/* SPDX-License-Identifier: MIT */
/*
 * Which path delivers a target's allocator calls (docs/TRACER.md "Two
 * allocation paths"): libmemprof's interposer through the marker ring when
 * the target's malloc resolves to it, eBPF uprobes otherwise.
 */
#ifndef MP_SESSION_PATH_H
#define MP_SESSION_PATH_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

/* Whether @pid's first malloc in lookup order is libmemprof's interposer:
 * the object that defines malloc also defines memprof_kernel_begin. 0 and
 * *ret filled, or a negative errno (-ESRCH: no such process). */
int mp_path_inprocess_available(pid_t pid, bool *ret);

/*
 * The path for a session: @requested is MP_PATH_BPF, MP_PATH_INPROCESS or
 * 0 (auto). Auto picks in-process when it is available and the mode traces
 * the allocator without a duty cycle. -EOPNOTSUPP (with *ret_why) when
 * in-process is requested but not possible.
 */
int mp_path_pick(pid_t pid, uint32_t requested, uint32_t mode, uint64_t duty_period_ns,
		 uint32_t *ret_path, const char **ret_why);

#endif /* MP_SESSION_PATH_H */
