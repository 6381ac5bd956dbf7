/* SPDX-License-Identifier: MIT */
/*
 * Attach-cookie layout of the allocator uprobes, shared by bpf/memprof.bpf.c
 * and daemon/sources/tracer.c (the raw events are in memprof_events.h).
 */
#ifndef MEMPROF_PROBE_H
#define MEMPROF_PROBE_H

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

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
	/* --alloc/--free with pool= (mp_pool_entry/mp_pool_return): ptr and
	 * size as MP_POOL_F_* say, ptr argument A, size argument B. */
	MP_KIND_POOL = 7,
};

/* Bits 32-39 of a MP_KIND_POOL cookie. */
#define MP_POOL_F_DEREF 0x01u /* ptr = *(u64 *)argA read at return */
#define MP_POOL_F_PTR_RET 0x02u /* ptr = return value */
#define MP_POOL_F_FREE 0x04u /* a free: ptr = argA */
#define MP_POOL_F_OK_ZERO 0x08u /* success when (u32)ret == 0 */
#define MP_POOL_F_OK_NONZERO 0x10u /* success when ret != 0 */
#define MP_POOL_F_NO_SIZE 0x20u /* size 0 */

#define MP_COOKIE(fn, kind, a, b, c, sp_slots)                                    \
	((__u64)(fn) | (__u64)(kind) << 8 | (__u64)(a) << 12 | (__u64)(b) << 16 | \
	 (__u64)(c) << 20 | (__u64)(sp_slots) << 24)
#define MP_COOKIE_FN(c) ((__u32)((c)&0xff))
#define MP_COOKIE_KIND(c) ((__u32)(((c) >> 8) & 0xf))
#define MP_COOKIE_A(c) ((__u32)(((c) >> 12) & 0xf))
#define MP_COOKIE_B(c) ((__u32)(((c) >> 16) & 0xf))
#define MP_COOKIE_C(c) ((__u32)(((c) >> 20) & 0xf))
#define MP_COOKIE_SP_SLOTS(c) ((__u32)(((c) >> 24) & 0xff))
#define MP_POOL_COOKIE(fn, a, b, flags) \
	(MP_COOKIE(fn, MP_KIND_POOL, a, b, 0, 0) | (__u64)(flags) << 32)
#define MP_COOKIE_POOL_FLAGS(c) ((__u32)(((c) >> 32) & 0xff))

/* Targets one daemon traces at once through bpf/memprof_hub.bpf.c (the
 * service's max_targets at most). */
#define MP_HUB_SLOTS 4096

#endif /* MEMPROF_PROBE_H */
