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
	 * failure; realloc(p, 0) returning NULL frees p). For brk: the break
	 * moved from @old_addr to @addr (@size 0). */
	MP_RAW_REALLOC = 3,
	/* The target called execve: its address space was replaced. */
	MP_RAW_EXEC = 4,
	/* The target exited (synthesised by the tracer after the final flush). */
	MP_RAW_EXIT = 5,
	/* rss_stat: counter @fn (enum mp_rss_member) of the target's mm is now
	 * @size bytes. */
	MP_RAW_RSS_STAT = 6,
	/* The dynamic loader mapped an object (dlopen): its load bias is
	 * @addr, its struct link_map @old_addr; the record is struct
	 * mp_raw_object (its path follows the event). */
	MP_RAW_OBJECT = 7,
};

/* Which function produced the event. Custom --alloc/--free functions are
 * numbered from MP_FN_CUSTOM in command-line order. */
enum mp_alloc_fn {
	MP_FN_MALLOC = 0,
	MP_FN_CALLOC,
	MP_FN_REALLOC,
	MP_FN_REALLOCARRAY,
	MP_FN_FREE,
	MP_FN_POSIX_MEMALIGN,
	MP_FN_ALIGNED_ALLOC,
	MP_FN_MEMALIGN,
	MP_FN_VALLOC,
	MP_FN_PVALLOC,
	MP_FN_MMAP,
	MP_FN_MUNMAP,
	MP_FN_MREMAP,
	MP_FN_BRK, /* the heap break moved (growth: alloc, shrink: free) */
	MP_FN_BUILTIN_COUNT,
	MP_FN_CUSTOM = 32,
};

/* The BPF side's drops (events lost to a full ring buffer, or a sampled
 * block it could not remember), counted by what they take from the heap
 * figures: the malloc family's allocations, frees and reallocs; anything
 * else (mappings, pools, exec) is OTHER. Keys of the drops map. */
enum mp_drop_kind {
	MP_DROP_ALLOC = 0,
	MP_DROP_FREE,
	MP_DROP_REALLOC,
	MP_DROP_OTHER,
	MP_DROP_KINDS,
};

/* Or'ed into @type by the BPF side in sampled mode for a sampled allocation
 * smaller than the sampling interval; the tracer replaces @size with its
 * unbiased estimate and clears the flag before delivering the event. */
#define MP_RAW_F_SCALED 0x100u

/* Or'ed into @type of an allocation that carries its call stack: the
 * record is struct mp_raw_event, struct mp_raw_stack, then @len bytes of
 * the user stack from @sp up. */
#define MP_RAW_F_STACK 0x200u

/* Largest stack slice a record carries (--stack-bytes). */
#define MP_STACK_MAX_BYTES 32768

/* Allocator wrapper ranges the BPF side tests a caller against. */
#define MP_WRAP_MAX 16
struct mp_bpf_wrap {
	__u64 lo, hi; /* [lo, hi) */
};

/* Entries of the exponential-draw table of sampled mode. */
#define MP_EXP_TABLE 4096

struct mp_raw_event {
	__u32 type; /* enum mp_raw_type */
	__u32 fn; /* enum mp_alloc_fn */
	__u32 pid; /* tgid */
	__u32 tid;
	__u64 ts_ns; /* bpf_ktime_get_ns(): CLOCK_MONOTONIC */
	__u64 addr;
	__u64 size;
	__u64 old_addr;
	__u64 caller; /* return address into the caller of @fn */
};

/* User registers where the allocator returned into its caller (the
 * uretprobe): what CFI unwinding of the caller's frame needs. */
struct mp_raw_stack {
	__u64 ip, sp, bp;
	__u32 len; /* stack bytes that follow */
	__u32 pad;
};

/* The path of an MP_RAW_OBJECT as the loader named it (l_name, cut to
 * MP_OBJECT_PATH_MAX - 1 bytes, NUL-terminated). */
#define MP_OBJECT_PATH_MAX 512
struct mp_raw_object {
	struct mp_raw_event ev;
	char path[MP_OBJECT_PATH_MAX];
};

#endif /* MEMPROF_EVENTS_H */
