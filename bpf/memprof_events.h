/* SPDX-License-Identifier: MIT */
/*
 * Raw events from bpf/memprof.bpf.c to userspace through the BPF ring
 * buffer. ABI between the kernel and user sides; nothing else belongs here.
 */
#ifndef MEMPROF_EVENTS_H
#define MEMPROF_EVENTS_H

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

enum mp_raw_type {
	/* @fn returned @addr (non-NULL) for a request of @size bytes. */
	MP_RAW_ALLOC = 1,
	/* @fn released @addr; @size is the length for munmap, else 0. */
	MP_RAW_FREE = 2,
	/* realloc/reallocarray/mremap(@old_addr, @size) returned @addr (0 on
	 * failure; realloc(p, 0) returning NULL frees p). */
	MP_RAW_REALLOC = 3,
	/* The target called execve: its address space was replaced. */
	MP_RAW_EXEC = 4,
	/* The target exited (synthesised by the tracer after the final flush). */
	MP_RAW_EXIT = 5,
	/* rss_stat: counter @fn (enum mp_rss_member) of the target's mm is now
	 * @size bytes. */
	MP_RAW_RSS_STAT = 6,
};

struct mp_raw_event {
	__u32 type; /* enum mp_raw_type */
	__u32 fn; /* enum mp_alloc_fn (daemon/heap_event.h) */
	__u32 pid; /* tgid */
	__u32 tid;
	__u64 ts_ns; /* bpf_ktime_get_ns(): CLOCK_MONOTONIC */
	__u64 addr;
	__u64 size;
	__u64 old_addr;
	__u64 caller; /* return address into the caller of @fn */
};

/*
 * BPF attach cookie of the allocator uprobes: which function, how to read
 * its arguments, and where the return address is relative to the stack
 * pointer at the probe point (non-zero when the probe is placed after the
 * function entry and after pushes).
 */
enum mp_probe_kind {
	MP_KIND_ALLOC = 1, /* size = argA */
	MP_KIND_CALLOC = 2, /* size = argA * argB */
	MP_KIND_REALLOC = 3, /* ptr = argA, size = argB */
	MP_KIND_REALLOCARRAY = 4, /* ptr = argA, size = argB * argC */
	MP_KIND_MEMALIGN_OUT = 5, /* *argA = result on 0 return, size = argC */
	MP_KIND_FREE = 6, /* ptr = argA */
};

#define MP_COOKIE(fn, kind, a, b, c, sp_slots)                                    \
	((__u64)(fn) | (__u64)(kind) << 8 | (__u64)(a) << 12 | (__u64)(b) << 16 | \
	 (__u64)(c) << 20 | (__u64)(sp_slots) << 24)
#define MP_COOKIE_FN(c) ((__u32)((c)&0xff))
#define MP_COOKIE_KIND(c) ((__u32)(((c) >> 8) & 0xf))
#define MP_COOKIE_A(c) ((__u32)(((c) >> 12) & 0xf))
#define MP_COOKIE_B(c) ((__u32)(((c) >> 16) & 0xf))
#define MP_COOKIE_C(c) ((__u32)(((c) >> 20) & 0xf))
#define MP_COOKIE_SP_SLOTS(c) ((__u32)(((c) >> 24) & 0xff))

#endif /* MEMPROF_EVENTS_H */
