/* SPDX-License-Identifier: MIT */
/*
 * The system-wide tracepoints (sys_enter, sys_exit, sched_process_exec,
 * rss_stat) attached once per daemon for all its targets
 * (bpf/memprof_hub.bpf.c): a target registers its own loaded programs
 * under its pid and the hub's programs tail-call them. Thread-safe; the
 * hub is loaded with the first target and unloaded with the last.
 */
#ifndef MP_HUB_H
#define MP_HUB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* A target's programs, by hook (fd, or -1 for none). */
struct mp_hub_progs {
	int sys_enter, sys_exit, exec, rss_stat;
};

/* How to load the hub when it is not loaded yet. */
struct mp_hub_load_opts {
	const char *btf_custom_path; /* NULL: libbpf's default */
	bool rss_stat; /* the kernel has the rss_stat tracepoint */
	uint64_t pidns_dev, pidns_ino; /* the daemon's pid namespace (0: initial) */
};

/* Register the programs of target @pid (the pid the daemon sees); its
 * slot in *ret_slot. -EBUSY: @pid is registered already. */
int mp_hub_add(const struct mp_hub_load_opts *lo, pid_t pid, const struct mp_hub_progs *progs,
	       uint32_t *ret_slot);
/* No call reaches the target's programs once this returns. */
void mp_hub_remove(pid_t pid, uint32_t slot);
/* Loads the hub now if it is not (0 or the error), for a target about to
 * be added: its load may then overlap the target's own. The hub stays
 * until mp_hub_unload_unused() or the last target's removal. */
int mp_hub_preload(const struct mp_hub_load_opts *lo);
/* Unloads a hub that has no target (one preloaded for an add that did not
 * come). */
void mp_hub_unload_unused(void);

#endif /* MP_HUB_H */
