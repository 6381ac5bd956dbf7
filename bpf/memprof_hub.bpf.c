// SPDX-License-Identifier: (MIT OR GPL-2.0)
/*
 * The system-wide tracepoints of every target of one daemon, attached once:
 * each program finds the current process's slot and tail-calls that
 * target's own program (bpf/memprof.bpf.c, loaded but not attached), which
 * does the work as before. Attached per target, N targets ran N programs
 * on every syscall and page fault of the machine, the daemon's own
 * included: attaching slowed down with the number of targets attached
 * (docs/TRACER.md, "Many targets").
 */
#include "vmlinux.h"
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "memprof_arch.h"
#include "memprof_probe.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

/* The daemon's pid namespace when it is not the initial one: slots are
 * keyed by the pids the daemon sees (see memprof.bpf.c). */
const volatile __u64 pidns_dev = 0;
const volatile __u64 pidns_ino = 0;

/* tgid (as the daemon sees it) -> slot of the target's programs */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, MP_HUB_SLOTS);
	__type(key, __u32);
	__type(value, __u32);
} slots SEC(".maps");

/* rss_stat of a target's mm counted by another task (reclaim, a remote
 * fault): the mm -> slot, learnt from the target's own events, forgotten
 * at detach. A stale entry only costs a call that the target's program
 * filters out. Not preallocated: memory grows with the targets only. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, MP_HUB_SLOTS);
	__type(key, __u64);
	__type(value, __u32);
} mm_slots SEC(".maps");

#define PROG_ARRAY(name)                               \
	struct {                                       \
		__uint(type, BPF_MAP_TYPE_PROG_ARRAY); \
		__uint(max_entries, MP_HUB_SLOTS);     \
		__type(key, __u32);                    \
		__type(value, __u32);                  \
	} name SEC(".maps")

/* One array per hook: a tail call needs the same attach point. */
PROG_ARRAY(sys_enter_progs);
PROG_ARRAY(sys_exit_progs);
PROG_ARRAY(exec_progs);
PROG_ARRAY(rss_stat_progs);

static __always_inline __u32 *current_slot(void)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;

	if (pidns_ino) {
		struct bpf_pidns_info ns;

		/* Fails for a task of another namespace than the daemon's. */
		if (bpf_get_ns_current_pid_tgid(pidns_dev, pidns_ino, &ns, sizeof(ns)))
			return 0;
		tgid = ns.tgid;
	}
	return bpf_map_lookup_elem(&slots, &tgid);
}

/* Only the syscalls a target's program looks at pay the lookup. */
static __always_inline bool traced_syscall(long id)
{
	return id == NR_MMAP || id == NR_MUNMAP || id == NR_MREMAP || id == NR_BRK;
}

SEC("tp_btf/sys_enter")
int BPF_PROG(mp_hub_sys_enter, struct pt_regs *regs, long id)
{
	__u32 *slot;

	if (!traced_syscall(id))
		return 0;
	slot = current_slot();
	if (slot)
		bpf_tail_call(ctx, &sys_enter_progs, *slot);
	return 0;
}

SEC("tp_btf/sys_exit")
int BPF_PROG(mp_hub_sys_exit, struct pt_regs *regs, long ret)
{
	__u32 *slot;

	if (!traced_syscall(BPF_CORE_READ(regs, orig_ax)))
		return 0;
	slot = current_slot();
	if (slot)
		bpf_tail_call(ctx, &sys_exit_progs, *slot);
	return 0;
}

SEC("tp_btf/sched_process_exec")
int BPF_PROG(mp_hub_exec, struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm)
{
	__u32 *slot = current_slot();

	if (slot)
		bpf_tail_call(ctx, &exec_progs, *slot);
	return 0;
}

SEC("tp_btf/rss_stat")
int BPF_PROG(mp_hub_rss_stat, struct mm_struct *mm, int member)
{
	__u64 key = (__u64)mm;
	__u32 *slot = current_slot();

	if (slot) {
		struct task_struct *cur = bpf_get_current_task_btf();
		__u32 *known;

		if ((__u64)BPF_CORE_READ(cur, mm) == key) {
			known = bpf_map_lookup_elem(&mm_slots, &key);
			if (!known || *known != *slot)
				bpf_map_update_elem(&mm_slots, &key, slot, BPF_ANY);
			bpf_tail_call(ctx, &rss_stat_progs, *slot);
			return 0;
		}
	}
	/* Another task changed the counters of a target's mm. */
	slot = bpf_map_lookup_elem(&mm_slots, &key);
	if (slot)
		bpf_tail_call(ctx, &rss_stat_progs, *slot);
	return 0;
}
