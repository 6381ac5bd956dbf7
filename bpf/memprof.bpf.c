// SPDX-License-Identifier: (MIT OR GPL-2.0)
/*
 * Allocator tracing for one target process: entry uprobes record the
 * arguments and the caller, uretprobes emit the result; anonymous
 * mmap/munmap/mremap come from the raw syscall tracepoints.
 */
#include "vmlinux.h"
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "memprof_arch.h"
#include "memprof_events.h"
#include "memprof_probe.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

/* Syscall numbers and mmap flags: memprof_arch.h (x86-64 only). libbpf
 * before 1.3 (Debian 12 has 1.1) defines five parameters. */
#ifndef PT_REGS_PARM6
#define PT_REGS_PARM6(x) (__PT_REGS_CAST(x)->r9)
#endif

const volatile __u32 target_tgid = 0;
/* Machine facts of the running kernel, set by tracer.c before load (the
 * verifier sees them as constants). */
const volatile __u32 page_size = 4096;
const volatile __u32 nr_mm_counters = 4; /* NR_MM_COUNTERS */
/*
 * The daemon's pid namespace (nsfs device and inode of /proc/self/ns/pid)
 * when it is not the initial one: target_tgid is then a pid of that
 * namespace, while bpf_get_current_pid_tgid() returns initial-namespace
 * ids. 0: the daemon runs in the initial namespace.
 */
const volatile __u64 pidns_dev = 0;
const volatile __u64 pidns_ino = 0;
/* The target's initial-namespace tgid, learnt from its first probe hit
 * (pidns_ino set only). */
__u32 target_host_tgid = 0;
/*
 * Sampled mode when non-zero: byte-weighted Poisson sampling with mean
 * interval sample_bytes (per-thread countdown); allocations of at least
 * sample_bytes are always sent. exp_table[i] is E[-ln U | U in the i-th
 * 1/MP_EXP_TABLE of (0, 1)] in 16.16 fixed point, filled in by tracer.c, so
 * that a draw has exactly mean sample_bytes.
 */
const volatile __u64 sample_bytes = 0;
/* rss mode: no allocator probes, the heap is followed through brk. */
const volatile bool trace_brk = false;
const volatile __u32 exp_table[MP_EXP_TABLE] = {};
/* Waking the consumer on every event costs more than the probe itself;
 * wake it once this much is pending (it also polls on a timer). */
const volatile __u64 wakeup_bytes = 256 << 10;
/* Bumped by tracer.c before every (re-)attach of the uprobes: a call
 * recorded under an older generation lost its return probe (detached in
 * the middle of the call: duty cycle, exec) and must not make later calls
 * look nested. */
volatile __u64 attach_gen = 0;
/* Call stacks (0: none): bytes of the user stack copied with each sampled
 * allocation (every allocation in precise mode), at most
 * MP_STACK_MAX_BYTES; the daemon unwinds them. */
const volatile __u32 stack_bytes = 0;

/* Allocator wrappers (daemon/sources/wrappers.h): an allocation whose
 * caller is in one of the first wrap_count ranges [lo, hi) of wrap
 * (sorted, inside [wrap_lo, wrap_hi)) carries wrap_stack_bytes of its
 * stack even without stacks, for the daemon to find the first caller
 * outside the wrappers. Written by tracer.c as libraries are mapped. */
const volatile __u32 wrap_stack_bytes = 0;
volatile __u64 wrap_lo = 0, wrap_hi = 0;
volatile __u32 wrap_count = 0;
volatile struct mp_bpf_wrap wrap[MP_WRAP_MAX] = {};

/* In-process path: offset from the thread pointer (x86-64 fs base) of
 * libmemprof's per-thread "inside an allocator call" word, set by the
 * daemon from the ring header; 0 when the path is off. */
volatile __s64 inproc_tls_off = 0;
/* Nonzero while the daemon sleeps without a tick (an idle target): a
 * record below the wakeup_bytes marks then wakes it if the ring was empty
 * (the kernel's adaptive wakeup), so that a target that starts again is
 * read at once; 0 while it polls, when records below the marks wake
 * nobody. */
volatile __u32 consumer_idle = 0;
/* A ring-buffer record: 8-byte header, body rounded up to 8. */
#define RECORD_BYTES (8 + ((sizeof(struct mp_raw_event) + 7) & ~7ULL))

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 8 << 20); /* MP_TRACER_RING_BYTES, settable */
} events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, MP_DROP_KINDS);
	__type(key, __u32);
	__type(value, __u64);
} drops SEC(".maps");

/* A stack record is built here (too big for the BPF stack), one slot per
 * CPU (max_entries set by tracer.c), then copied into the ring buffer at
 * its real size. 4 KiB of slack keep every page read in bounds. */
struct mp_stack_record {
	struct mp_raw_event ev;
	struct mp_raw_stack st;
	__u8 data[MP_STACK_MAX_BYTES + 4096];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct mp_stack_record);
} stackbuf SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} unmatched SEC(".maps");

/* An allocator call in progress on a thread, from entry to return. */
struct call_state {
	__u64 active; /* between entry and return */
	__u64 cookie;
	__u64 a, b, c;
	__u64 caller;
	__u64 sp; /* user stack pointer at entry: nesting check */
	__u32 depth; /* nested probed calls inside this one (reallocarray ->
		      * realloc, an allocator calling another entry point) */
	__u32 seeded; /* countdown drawn (sampled mode) */
	__u64 gen; /* attach_gen when recorded */
	__s64 countdown; /* sampled mode: bytes left before the next sample */
};

/* Per-thread state lives in task storage: cheaper than a hash map on
 * every probe hit, and freed with the thread. */
struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct call_state);
} calls SEC(".maps");

struct sys_state {
	__u64 active;
	__u64 nr;
	__u64 a, b, c;
	__u64 caller;
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct sys_state);
} syscalls SEC(".maps");

/* Caller of a libc syscall wrapper that builds a stack frame before the
 * syscall (mremap is variadic), recorded by a uprobe at its entry. */
struct caller_hint {
	__u64 active;
	__u64 caller;
	__u64 sp;
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct caller_hint);
} hints SEC(".maps");

/* Sampled mode: blocks that were sampled, so that only their frees are
 * sent (max_entries set by tracer.c; 1 in precise mode). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 1);
	__type(key, __u64);
	__type(value, __u8);
} sampled SEC(".maps");

/* rss_stat: the target's mm, learnt from the target's own threads. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} target_mm SEC(".maps");

static __always_inline void *thread_state(void *map, bool create)
{
	return bpf_task_storage_get(map, bpf_get_current_task_btf(), 0,
				    create ? BPF_LOCAL_STORAGE_GET_F_CREATE : 0);
}

/* A call of this thread is in progress at a stack pointer at or above @sp
 * (so a probed call at @sp is inside it). */
static __always_inline bool in_call(const struct call_state *st, __u64 sp)
{
	return st && st->active && st->gen == attach_gen && sp <= st->sp;
}

static __always_inline bool is_target(__u64 pid_tgid)
{
	struct bpf_pidns_info ns;
	__u32 tgid = pid_tgid >> 32;

	if (!pidns_ino)
		return tgid == target_tgid;
	if (target_host_tgid)
		return tgid == target_host_tgid;
	/* Fails for a task of another namespace than the daemon's. */
	if (bpf_get_ns_current_pid_tgid(pidns_dev, pidns_ino, &ns, sizeof(ns)) ||
	    ns.tgid != target_tgid)
		return false;
	target_host_tgid = tgid;
	return true;
}

/* Uprobe hits that were not the target's (the uprobes are attached to the
 * target alone): a pid mismatch, reported by the tracer, never silent. */
static __always_inline void count_unmatched(void)
{
	__u32 zero = 0;
	__u64 *n = bpf_map_lookup_elem(&unmatched, &zero);

	if (n)
		*n += 1;
}

/* A lost event of @type (MP_RAW_*, flags allowed) from @fn: by kind
 * (enum mp_drop_kind), since a lost free makes the live figures upper
 * bounds and a lost allocation lower ones. */
static __always_inline void count_drop(__u32 type, __u32 fn)
{
	__u32 kind = MP_DROP_OTHER;
	__u64 *n;

	if (fn < MP_FN_MMAP) {
		type &= 0xff;
		if (type == MP_RAW_ALLOC)
			kind = MP_DROP_ALLOC;
		else if (type == MP_RAW_FREE)
			kind = MP_DROP_FREE;
		else if (type == MP_RAW_REALLOC)
			kind = MP_DROP_REALLOC;
	}
	n = bpf_map_lookup_elem(&drops, &kind);
	if (n)
		*n += 1;
}

/* The fields of @e every event has: @type, @fn, ids and time. */
static __always_inline void event_head(struct mp_raw_event *e, __u64 pid_tgid, __u32 type, __u32 fn)
{
	e->type = type;
	e->fn = fn;
	e->pid = pid_tgid >> 32;
	e->tid = (__u32)pid_tgid;
	if (pidns_ino) {
		/* Userspace (markers, /proc) knows the daemon's namespace ids. */
		struct bpf_pidns_info ns = {};

		bpf_get_ns_current_pid_tgid(pidns_dev, pidns_ino, &ns, sizeof(ns));
		e->pid = ns.tgid;
		e->tid = e->tid ? ns.pid : 0;
	}
	e->ts_ns = bpf_ktime_get_ns();
}

static __always_inline int emit(__u64 pid_tgid, __u32 type, __u32 fn, __u64 addr, __u64 size,
				__u64 old_addr, __u64 caller)
{
	struct mp_raw_event *e;
	__u64 avail;
	bool wake;

	e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		count_drop(type, fn);
		return 0;
	}
	event_head(e, pid_tgid, type, fn);
	e->addr = addr;
	e->size = size;
	e->old_addr = old_addr;
	e->caller = caller;
	/* Wake the consumer each time the backlog crosses a multiple of
	 * wakeup_bytes (this record's header and body included), not on every
	 * record above it. */
	avail = bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA);
	wake = type == MP_RAW_EXEC || avail / wakeup_bytes != (avail - RECORD_BYTES) / wakeup_bytes;
	bpf_ringbuf_submit(e, wake ? BPF_RB_FORCE_WAKEUP : consumer_idle ? 0 : BPF_RB_NO_WAKEUP);
	return 0;
}

/* Sends the allocation event already in @b with the caller's registers
 * and up to stack_bytes of its stack, read page by page so that the end of
 * the stack mapping only shortens the copy. */
static __noinline int emit_stack(struct pt_regs *ctx, struct mp_stack_record *b, __u32 want)
{
	__u64 sp = ctx->sp, avail, total;
	__u32 len = 0;
	bool wake;

	b->st.ip = ctx->ip;
	b->st.sp = sp;
	b->st.bp = ctx->bp;
	b->st.pad = 0;
	if (want > MP_STACK_MAX_BYTES)
		want = MP_STACK_MAX_BYTES;
	for (int i = 0; i < MP_STACK_MAX_BYTES / 4096 + 1; i++) {
		__u64 n = 4096 - ((sp + len) & 4095), off = len;

		if (len >= want)
			break;
		if (n > want - len)
			n = want - len;
		/* Bounds the verifier can see on the registers it checks. */
		barrier_var(n);
		barrier_var(off);
		if (n == 0 || n > 4096 || off > MP_STACK_MAX_BYTES)
			break;
		if (bpf_probe_read_user(b->data + off, n, (void *)(sp + off)))
			break;
		len += n;
	}
	b->st.len = len;
	total = sizeof(b->ev) + sizeof(b->st) + len;
	if (total > sizeof(*b))
		return 0;
	avail = bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA);
	wake = avail / wakeup_bytes != (avail + total + 8) / wakeup_bytes;
	if (bpf_ringbuf_output(&events, b, total,
			       wake	     ? BPF_RB_FORCE_WAKEUP :
			       consumer_idle ? 0 :
					       BPF_RB_NO_WAKEUP))
		count_drop(b->ev.type, b->ev.fn);
	return 0;
}

/* An allocation: with its stack when stacks are on (the branch is on a
 * read-only constant, so the verifier drops the dead one); a plain event
 * when this CPU has no stack slot. */
/* Whether @caller is in an allocator wrapper: one compare outside
 * [wrap_lo, wrap_hi). */
static __always_inline bool wrapped(__u64 caller)
{
	__u64 lo = wrap_lo;
	__u32 n = wrap_count;

	if (caller - lo >= wrap_hi - lo)
		return false;
	for (__u32 i = 0; i < MP_WRAP_MAX; i++) {
		if (i >= n || caller < wrap[i].lo)
			break;
		if (caller < wrap[i].hi)
			return true;
	}
	return false;
}

static __always_inline int emit_alloc(struct pt_regs *ctx, __u64 pid_tgid, __u32 type, __u32 fn,
				      __u64 addr, __u64 size, __u64 old_addr, __u64 caller)
{
	struct mp_stack_record *b;
	__u32 cpu, want = stack_bytes;

	if (!want) {
		if (!wrap_stack_bytes || !wrapped(caller))
			return emit(pid_tgid, type, fn, addr, size, old_addr, caller);
		want = wrap_stack_bytes;
	}
	cpu = bpf_get_smp_processor_id();
	b = bpf_map_lookup_elem(&stackbuf, &cpu);
	if (!b)
		return emit(pid_tgid, type, fn, addr, size, old_addr, caller);
	b->ev.type = type | MP_RAW_F_STACK;
	b->ev.fn = fn;
	b->ev.pid = pid_tgid >> 32;
	b->ev.tid = (__u32)pid_tgid;
	b->ev.ts_ns = bpf_ktime_get_ns();
	b->ev.addr = addr;
	b->ev.size = size;
	b->ev.old_addr = old_addr;
	b->ev.caller = caller;
	return emit_stack(ctx, b, want);
}

static __always_inline __u64 arg(struct pt_regs *ctx, __u32 i)
{
	/* The verifier rejects a variable offset into ctx: load every argument
	 * register at a fixed offset, then select. */
	__u64 a0 = PT_REGS_PARM1(ctx), a1 = PT_REGS_PARM2(ctx), a2 = PT_REGS_PARM3(ctx),
	      a3 = PT_REGS_PARM4(ctx), a4 = PT_REGS_PARM5(ctx), a5 = PT_REGS_PARM6(ctx);

	barrier_var(a0);
	barrier_var(a1);
	barrier_var(a2);
	barrier_var(a3);
	barrier_var(a4);
	barrier_var(a5);
	switch (i) {
	case 0:
		return a0;
	case 1:
		return a1;
	case 2:
		return a2;
	case 3:
		return a3;
	case 4:
		return a4;
	case 5:
		return a5;
	}
	return 0;
}

/* clang cannot lower __builtin_mul_overflow to BPF. */
static __always_inline bool mul_overflow(__u64 a, __u64 b, __u64 *ret)
{
	__u64 lim = ~0ULL;

	/* Keep clang from turning the division back into a 128-bit multiply. */
	barrier_var(lim);
	if (a && b > lim / a)
		return true;
	*ret = a * b;
	return false;
}

static __always_inline __u64 read_caller(__u64 sp, __u32 slots)
{
	__u64 ra = 0;

	bpf_probe_read_user(&ra, sizeof(ra), (void *)(sp + 8ULL * slots));
	return ra;
}

static __always_inline __s64 draw_interval(void)
{
	__u32 i = bpf_get_prandom_u32() & (MP_EXP_TABLE - 1);

	return (__s64)((sample_bytes * exp_table[i]) >> 16) + 1;
}

enum { NOT_SAMPLED = 0, SAMPLED_EXACT = 1, SAMPLED_SCALED = 2 };

/* Whether an allocation of @size bytes is sampled; every byte allocated
 * below sample_bytes advances this thread's countdown. */
static __always_inline int sample(struct call_state *st, __u64 size)
{
	if (!sample_bytes || size >= sample_bytes)
		return SAMPLED_EXACT;
	if (!st->seeded) {
		st->seeded = 1;
		st->countdown = draw_interval();
	}
	st->countdown -= (__s64)size;
	if (st->countdown > 0)
		return NOT_SAMPLED;
	for (int i = 0; i < 64 && st->countdown <= 0; i++)
		st->countdown += draw_interval();
	return SAMPLED_SCALED;
}

/* Remember a sampled block; a block that cannot be remembered is not sent
 * (its free would be lost). */
static __always_inline int keep_sampled(__u64 addr, int how)
{
	__u8 one = 1;

	if (!sample_bytes || how == NOT_SAMPLED)
		return how;
	if (bpf_map_update_elem(&sampled, &addr, &one, BPF_ANY)) {
		/* neither the block nor its free is sent */
		count_drop(MP_RAW_ALLOC, MP_FN_MALLOC);
		return NOT_SAMPLED;
	}
	return how;
}

/* Forget a block being released; false when it was not sampled. */
static __always_inline bool was_sampled(__u64 addr)
{
	return !sample_bytes || bpf_map_delete_elem(&sampled, &addr) == 0;
}

static __always_inline __u32 alloc_type(int how)
{
	return how == SAMPLED_SCALED ? MP_RAW_ALLOC | MP_RAW_F_SCALED : MP_RAW_ALLOC;
}

/* realloc family: @old (0: none) resized to @size bytes returned @ret. */
static __always_inline void emit_realloc(struct pt_regs *ctx, __u64 pid_tgid, struct call_state *st,
					 __u32 fn, __u64 ret, __u64 size, __u64 old)
{
	bool old_s;
	int how;

	if (!sample_bytes) {
		if (ret)
			emit_alloc(ctx, pid_tgid, MP_RAW_REALLOC, fn, ret, size, old, st->caller);
		else
			emit(pid_tgid, MP_RAW_REALLOC, fn, ret, size, old, st->caller);
		return;
	}
	if (!ret) {
		/* size 0 frees the block; otherwise a failure keeps it. */
		if (size == 0 && old && was_sampled(old))
			emit(pid_tgid, MP_RAW_REALLOC, fn, 0, 0, old, st->caller);
		return;
	}
	old_s = old && was_sampled(old);
	how = keep_sampled(ret, sample(st, size));
	if (old_s && how != NOT_SAMPLED)
		emit_alloc(ctx, pid_tgid,
			   how == SAMPLED_SCALED ? MP_RAW_REALLOC | MP_RAW_F_SCALED :
						   MP_RAW_REALLOC,
			   fn, ret, size, old, st->caller);
	else if (old_s)
		emit(pid_tgid, MP_RAW_FREE, fn, old, 0, 0, st->caller);
	else if (how != NOT_SAMPLED)
		emit_alloc(ctx, pid_tgid, alloc_type(how), fn, ret, size, 0, st->caller);
}

SEC("uprobe")
int mp_entry(struct pt_regs *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u64 cookie = bpf_get_attach_cookie(ctx);
	__u64 sp = PT_REGS_SP(ctx);
	struct call_state *st;

	if (!is_target(pid_tgid)) {
		count_unmatched();
		return 0;
	}
	st = thread_state(&calls, true);
	if (!st)
		return 0;
	/* A deeper (or, for a tail call, equal) stack than the recorded
	 * call's means we are inside it; a shallower one means its return was
	 * never seen (longjmp, probe detached mid-call): start over. */
	if (in_call(st, sp)) {
		st->depth++;
		return 0;
	}
	st->active = 1;
	st->gen = attach_gen;
	st->depth = 0;
	st->cookie = cookie;
	st->a = arg(ctx, MP_COOKIE_A(cookie));
	st->b = arg(ctx, MP_COOKIE_B(cookie));
	st->c = arg(ctx, MP_COOKIE_C(cookie));
	st->caller = read_caller(sp, MP_COOKIE_SP_SLOTS(cookie));
	st->sp = sp + 8ULL * MP_COOKIE_SP_SLOTS(cookie);
	return 0;
}

SEC("uretprobe")
int mp_return(struct pt_regs *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u64 ret = PT_REGS_RC(ctx), size, ptr = 0;
	struct call_state *st;
	__u32 fn, kind;
	int how;

	if (!is_target(pid_tgid))
		return 0;
	st = thread_state(&calls, false);
	if (!st || !st->active || st->gen != attach_gen)
		return 0;
	if (st->depth) {
		st->depth--;
		return 0;
	}
	fn = MP_COOKIE_FN(st->cookie);
	kind = MP_COOKIE_KIND(st->cookie);
	switch (kind) {
	case MP_KIND_ALLOC:
		if (ret && (how = keep_sampled(ret, sample(st, st->a))))
			emit_alloc(ctx, pid_tgid, alloc_type(how), fn, ret, st->a, 0, st->caller);
		break;
	case MP_KIND_CALLOC:
		/* An overflowing product fails in calloc itself. */
		if (ret && !mul_overflow(st->a, st->b, &size) &&
		    (how = keep_sampled(ret, sample(st, size))))
			emit_alloc(ctx, pid_tgid, alloc_type(how), fn, ret, size, 0, st->caller);
		break;
	case MP_KIND_REALLOC:
		emit_realloc(ctx, pid_tgid, st, fn, ret, st->b, st->a);
		break;
	case MP_KIND_REALLOCARRAY:
		/* On overflow reallocarray fails without touching the block. */
		if (!mul_overflow(st->b, st->c, &size))
			emit_realloc(ctx, pid_tgid, st, fn, ret, size, st->a);
		break;
	case MP_KIND_FREE:
		if (st->a && was_sampled(st->a))
			emit(pid_tgid, MP_RAW_FREE, fn, st->a, 0, 0, st->caller);
		break;
	case MP_KIND_MEMALIGN_OUT:
		if ((__u32)ret == 0 && !bpf_probe_read_user(&ptr, sizeof(ptr), (void *)st->a) &&
		    ptr && (how = keep_sampled(ptr, sample(st, st->c))))
			emit_alloc(ctx, pid_tgid, alloc_type(how), fn, ptr, st->c, 0, st->caller);
		break;
	}
	st->active = 0;
	return 0;
}

SEC("uprobe")
int mp_free(struct pt_regs *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u64 cookie = bpf_get_attach_cookie(ctx);
	__u64 ptr = arg(ctx, MP_COOKIE_A(cookie)), sp = PT_REGS_SP(ctx);
	struct call_state *st;

	/* One load of the stack pointer: the verifier refuses a derived ctx pointer. */
	barrier_var(sp);
	if (!ptr)
		return 0;
	if (!is_target(pid_tgid)) {
		count_unmatched();
		return 0;
	}
	st = thread_state(&calls, false);
	/* Released by an allocator function in progress (realloc built on
	 * free): that call's own event accounts for it. */
	if (in_call(st, sp))
		return 0;
	if (!was_sampled(ptr))
		return 0;
	return emit(pid_tgid, MP_RAW_FREE, MP_COOKIE_FN(cookie), ptr, 0, 0,
		    read_caller(sp, MP_COOKIE_SP_SLOTS(cookie)));
}

SEC("uprobe")
int mp_caller_hint(struct pt_regs *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	struct caller_hint *h;

	if (!is_target(pid_tgid))
		return 0;
	h = thread_state(&hints, true);
	if (!h)
		return 0;
	h->active = 1;
	h->sp = PT_REGS_SP(ctx);
	h->caller = read_caller(h->sp, 0);
	return 0;
}

SEC("tp_btf/sys_enter")
int BPF_PROG(mp_sys_enter, struct pt_regs *regs, long id)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	struct sys_state *s;
	struct call_state *st;
	struct caller_hint *h;
	__u64 usp, caller = 0;

	if (id != NR_MMAP && id != NR_MUNMAP && id != NR_MREMAP && (id != NR_BRK || !trace_brk))
		return 0;
	if (!is_target(pid_tgid))
		return 0;
	usp = PT_REGS_SP_CORE(regs);
	/* Mappings made by the allocator itself belong to its blocks. */
	st = thread_state(&calls, false);
	if (in_call(st, usp))
		return 0;
	if (inproc_tls_off) {
		struct task_struct *cur = bpf_get_current_task_btf();
		__u64 in_alloc = 0;

		/* the interposer's word; a target can only hide its own
		 * mappings with it */
		bpf_probe_read_user(&in_alloc, sizeof(in_alloc),
				    (void *)(BPF_CORE_READ(cur, thread.fsbase) + inproc_tls_off));
		if (in_alloc)
			return 0;
	}
	if (id == NR_MMAP && !(PT_REGS_PARM4_CORE_SYSCALL(regs) & MAP_ANONYMOUS_FLAG))
		return 0;
	/* The mmap and munmap wrappers make no stack frame before the
	 * syscall, so the top of the stack is their return address; mremap's
	 * caller was recorded at its entry. */
	h = thread_state(&hints, false);
	if (h && h->active && h->sp >= usp && h->sp - usp < 4096) {
		caller = h->caller;
		h->active = 0;
	} else {
		bpf_probe_read_user(&caller, sizeof(caller), (void *)usp);
	}
	s = thread_state(&syscalls, true);
	if (!s)
		return 0;
	s->active = 1;
	s->nr = id;
	s->a = PT_REGS_PARM1_CORE_SYSCALL(regs);
	s->b = PT_REGS_PARM2_CORE_SYSCALL(regs);
	s->c = PT_REGS_PARM3_CORE_SYSCALL(regs);
	s->caller = caller;
	if (id == NR_BRK) {
		struct task_struct *cur = bpf_get_current_task_btf();

		/* The break before the call: brk() returns the new one. */
		s->a = BPF_CORE_READ(cur, mm, brk);
	}
	return 0;
}

SEC("tp_btf/sys_exit")
int BPF_PROG(mp_sys_exit, struct pt_regs *regs, long ret)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	struct sys_state *s;

	if (!is_target(pid_tgid))
		return 0;
	s = thread_state(&syscalls, false);
	if (!s || !s->active)
		return 0;
	s->active = 0;
	if (ret < 0 && ret > -4096)
		return 0;
	switch (s->nr) {
	case NR_MMAP:
		emit(pid_tgid, MP_RAW_ALLOC, MP_FN_MMAP, ret, s->b, 0, s->caller);
		break;
	case NR_MUNMAP:
		emit(pid_tgid, MP_RAW_FREE, MP_FN_MUNMAP, s->a, s->b, 0, s->caller);
		break;
	case NR_MREMAP:
		emit(pid_tgid, MP_RAW_REALLOC, MP_FN_MREMAP, ret, s->c, s->a, s->caller);
		break;
	case NR_BRK:
		/* brk(0) and failures leave the break where it was. */
		if ((__u64)ret != s->a)
			emit(pid_tgid, MP_RAW_REALLOC, MP_FN_BRK, ret, 0, s->a, s->caller);
		break;
	}
	return 0;
}

/* ---- objects the dynamic loader maps (dlopen) ----
 *
 * A library loaded and called by a process that exits at once is gone
 * from /proc before the daemon reads its allocations: the loader's own
 * notification names it while it is mapped. The loader calls
 * _dl_debug_state() (a uprobe, not a return probe: dlopen finds its
 * caller by its return address) with r_debug's state RT_ADD before it maps
 * a new object and RT_CONSISTENT once every new object is mapped, each one
 * appended to the list r_debug heads (struct link_map, <link.h>). dlopen
 * runs one at a time in a process (the loader's lock). */
struct mp_link_map {
	__u64 l_addr, l_name, l_ld, l_next, l_prev;
};

#define R_DEBUG_MAP 8 /* r_debug.r_map */
#define R_DEBUG_STATE 24 /* r_debug.r_state */
#define MP_RT_CONSISTENT 0
#define MP_RT_ADD 1
#define DL_WALK_MAX 4096 /* objects in the list */
#define DL_NEW_MAX 256 /* new objects reported after one load */

/* _r_debug's address minus _dl_debug_state's in the target's loader, set by
 * tracer.c (0: not known, nothing is reported). */
volatile __s64 r_debug_delta = 0;
/* The last object of the list when a load began (RT_ADD). */
__u64 dl_tail = 0;
__u32 dl_adding = 0;

static __always_inline __u64 link_next(__u64 lm)
{
	__u64 next = 0;

	bpf_probe_read_user(&next, sizeof(next),
			    (void *)(lm + __builtin_offsetof(struct mp_link_map, l_next)));
	return next;
}

/* The walks are bpf_loop() callbacks: verified once, not per step (a
 * bounded loop of DL_WALK_MAX steps would cost the verifier, and every
 * attach, that many). */
struct dl_walk {
	__u64 lm;
	__u64 pid_tgid;
};

static long dl_to_tail(__u32 i, void *data)
{
	struct dl_walk *w = data;
	__u64 next = link_next(w->lm);

	if (!next)
		return 1;
	w->lm = next;
	return 0;
}

static long dl_send(__u32 i, void *data)
{
	struct dl_walk *w = data;
	struct mp_link_map l;
	struct mp_raw_object *o;

	if (!w->lm || bpf_probe_read_user(&l, sizeof(l), (void *)w->lm))
		return 1;
	o = bpf_ringbuf_reserve(&events, sizeof(*o), 0);
	if (!o) {
		count_drop(MP_RAW_OBJECT, 0);
		return 1;
	}
	event_head(&o->ev, w->pid_tgid, MP_RAW_OBJECT, 0);
	o->ev.addr = l.l_addr;
	o->ev.size = 0;
	o->ev.old_addr = w->lm;
	o->ev.caller = 0;
	o->path[0] = '\0';
	if (l.l_name)
		bpf_probe_read_user_str(o->path, sizeof(o->path), (void *)l.l_name);
	/* rare, and wanted before the process can exit */
	bpf_ringbuf_submit(o, BPF_RB_FORCE_WAKEUP);
	w->lm = l.l_next;
	return 0;
}

SEC("uprobe")
int mp_dl_state(struct pt_regs *ctx)
{
	struct dl_walk w = { .pid_tgid = bpf_get_current_pid_tgid() };
	int state = -1;
	__u64 r;

	if (!is_target(w.pid_tgid) || !r_debug_delta)
		return 0;
	/* a uprobe's handler sees the probed address */
	r = PT_REGS_IP(ctx) + r_debug_delta;
	if (bpf_probe_read_user(&state, sizeof(state), (void *)(r + R_DEBUG_STATE)))
		return 0;
	if (state == MP_RT_ADD) {
		bpf_probe_read_user(&w.lm, sizeof(w.lm), (void *)(r + R_DEBUG_MAP));
		if (w.lm)
			bpf_loop(DL_WALK_MAX, dl_to_tail, &w, 0);
		dl_tail = w.lm;
		dl_adding = 1;
		return 0;
	}
	if (state != MP_RT_CONSISTENT || !dl_adding || !dl_tail) {
		dl_adding = 0; /* RT_DELETE: a dlclose */
		return 0;
	}
	dl_adding = 0;
	/* from the tail on: the loader may have appended the first new
	 * object before it said RT_ADD (glibc 2.36 does); an old one sent
	 * again is known already */
	w.lm = dl_tail;
	bpf_loop(DL_NEW_MAX, dl_send, &w, 0);
	return 0;
}

SEC("tp_btf/sched_process_exec")
int BPF_PROG(mp_exec, struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	struct call_state *st;

	if (!is_target(pid_tgid))
		return 0;
	/* Nothing of the old image is in progress any more; a stale call
	 * would make every call of the new image look nested. */
	st = thread_state(&calls, false);
	if (st)
		st->active = 0;
	dl_adding = 0;
	return emit(pid_tgid, MP_RAW_EXEC, 0, 0, 0, 0, 0);
}

/* Kernels before 6.2 keep the counters in struct mm_rss_stat (atomics);
 * later ones in an array of percpu_counter. Both are read as the
 * tracepoint itself reports them: the approximate (non-summed) value. */
struct mm_rss_stat___old {
	atomic_long_t count[4];
} __attribute__((preserve_access_index));

struct mm_struct___old {
	struct mm_rss_stat___old rss_stat;
} __attribute__((preserve_access_index));

static __always_inline long rss_count(struct mm_struct *mm, int member)
{
	if (bpf_core_type_exists(struct mm_rss_stat___old)) {
		struct mm_struct___old *om = (void *)mm;

		return BPF_CORE_READ(om, rss_stat.count[member].counter);
	}
	return BPF_CORE_READ(mm, rss_stat[member].count);
}

/* Exact RSS changes of the target's mm (autoload off unless enabled). */
SEC("tp_btf/rss_stat")
int BPF_PROG(mp_rss_stat, struct mm_struct *mm, int member)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 zero = 0, tid = 0;
	__u64 *tmm, value;
	long count;

	tmm = bpf_map_lookup_elem(&target_mm, &zero);
	if (!tmm)
		return 0;
	if (is_target(pid_tgid)) {
		struct task_struct *cur = bpf_get_current_task_btf();

		*tmm = (__u64)BPF_CORE_READ(cur, mm);
		tid = (__u32)pid_tgid;
	}
	if (!*tmm || *tmm != (__u64)mm || member < 0 || member >= nr_mm_counters)
		return 0;
	/* Clamped at zero, in bytes. */
	count = rss_count(mm, member);
	value = count > 0 ? (__u64)count * page_size : 0;
	return emit((pid_tgid & 0xffffffff00000000ULL) | tid, MP_RAW_RSS_STAT, member, 0, value, 0,
		    0);
}

/*
 * Pool functions (--alloc/--free with pool=, --device): device allocators
 * return the pointer through an out-parameter, read at return from the
 * address saved at entry, and report success in their return value; a
 * failed call records nothing. Their own call state, apart from the
 * allocator's, so that host allocations made inside a device allocator
 * still count as host allocations, while a pool function called inside
 * another (cudaMalloc -> cuMemAlloc_v2) counts once. Never sampled.
 */
struct pool_call {
	__u64 active;
	__u64 cookie;
	__u64 a, b;
	__u64 caller;
	__u64 sp;
	__u64 gen;
	__u32 depth;
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct pool_call);
} pool_calls SEC(".maps");

SEC("uprobe")
int mp_pool_entry(struct pt_regs *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u64 cookie = bpf_get_attach_cookie(ctx);
	__u64 sp = ctx->sp;
	struct pool_call *st;

	if (!is_target(pid_tgid))
		return 0;
	st = thread_state(&pool_calls, true);
	if (!st)
		return 0;
	if (st->active && st->gen == attach_gen && sp <= st->sp) {
		st->depth++;
		return 0;
	}
	st->active = 1;
	st->gen = attach_gen;
	st->depth = 0;
	st->cookie = cookie;
	st->a = arg(ctx, MP_COOKIE_A(cookie));
	st->b = arg(ctx, MP_COOKIE_B(cookie));
	st->caller = read_caller(sp, 0);
	st->sp = sp;
	return 0;
}

SEC("uretprobe")
int mp_pool_return(struct pt_regs *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u64 ret = ctx->ax, ptr = 0;
	struct pool_call *st;
	__u32 flags;

	if (!is_target(pid_tgid))
		return 0;
	st = thread_state(&pool_calls, false);
	if (!st || !st->active || st->gen != attach_gen)
		return 0;
	if (st->depth) {
		st->depth--;
		return 0;
	}
	st->active = 0;
	flags = MP_COOKIE_POOL_FLAGS(st->cookie);
	if ((flags & MP_POOL_F_OK_ZERO) && (__u32)ret != 0)
		return 0;
	if ((flags & MP_POOL_F_OK_NONZERO) && ret == 0)
		return 0;
	if (flags & MP_POOL_F_PTR_RET)
		ptr = ret;
	else if (!(flags & MP_POOL_F_DEREF))
		ptr = st->a;
	else if (bpf_probe_read_user(&ptr, sizeof(ptr), (void *)st->a))
		return 0;
	if (!ptr)
		return 0;
	if (flags & MP_POOL_F_FREE)
		return emit(pid_tgid, MP_RAW_FREE, MP_COOKIE_FN(st->cookie), ptr, 0, 0, st->caller);
	return emit(pid_tgid, MP_RAW_ALLOC, MP_COOKIE_FN(st->cookie), ptr,
		    (flags & MP_POOL_F_NO_SIZE) ? 0 : st->b, 0, st->caller);
}
