/* SPDX-License-Identifier: MIT */
/*
 * BPF allocator tracer for one process: resolves the allocator the target
 * really uses, attaches uprobes/uretprobes and syscall tracepoints, and
 * delivers raw events (bpf/memprof_events.h) in ring-buffer order. Pairing
 * allocations with frees is live.h's job, not this module's.
 */
#ifndef MP_TRACER_H
#define MP_TRACER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "memprof_events.h"
#include "profile.h" /* enum mp_trace_mode */

#define MP_TRACER_MAX_EXTRA 32

/* How a --alloc/--free function reports its pointer and success. */
enum mp_func_ptr {
	MP_FUNC_PTR_RET = 0, /* the return value (allocators) / argument (frees) */
	MP_FUNC_PTR_OUT = 1, /* stored through argument ptr_arg: ptr=*argN */
};
enum mp_func_ok {
	MP_FUNC_OK_ANY = 0, /* every return (allocators: a non-NULL pointer) */
	MP_FUNC_OK_ZERO = 1, /* ok=ret==0 (cudaError_t, CUresult, hipError_t) */
	MP_FUNC_OK_NONZERO = 2, /* ok=ret!=0 */
};

/* An extra allocator (--alloc) or free (--free) function. */
struct mp_tracer_func {
	char name[128];
	char object[256]; /* "" = first definition in lookup order; a glob */
	bool is_free;
	uint32_t arg; /* 0-based index of the size (alloc) or pointer (free) */
	/* The out-parameter form (docs/TRACER.md, "Pools and device memory"). */
	uint32_t ptr; /* enum mp_func_ptr */
	uint32_t ptr_arg;
	uint32_t ok; /* enum mp_func_ok */
	char pool[64]; /* "": the heap; else its blocks are slices of this pool */
	uint32_t pool_kind; /* with pool: MP_POOL_KIND_*, kind=host|device (default device) */
	bool optional; /* --device presets: skipped when not found */
};

struct mp_tracer_opts {
	pid_t pid;
	uint32_t mode; /* enum mp_trace_mode */
	uint64_t sample_bytes; /* MP_TRACE_SAMPLED: mean sampling interval */
	/* Sampled blocks tracked in BPF at once (0: MP_TRACER_SAMPLED_MAX);
	 * a sampled block beyond that is counted as a drop. */
	uint32_t sampled_max;
	/* Mark an estimated size (MP_LIVE_FN_SCALED in the delivered event's
	 * fn) for the live table, which flags the block's heap events. */
	bool mark_scaled;
	/* Duty cycle (0: always on): the allocator probes are attached for
	 * duty_on_ns at the start of every duty_period_ns. */
	uint64_t duty_on_ns, duty_period_ns;
	const struct mp_tracer_func *extra; /* enum mp_alloc_fn MP_FN_CUSTOM + i */
	size_t n_extra;
	bool naive_placement; /* probe every function at its entry */
	/* One perf-event uprobe per function even when the kernel has
	 * multi-uprobe links (slow to detach; for comparison). */
	bool perf_uprobes;
	bool rss_exact; /* also deliver MP_RAW_RSS_STAT */
	/* In-process path: libmemprof reports the malloc family through the
	 * marker ring, so no uprobe on it (--alloc/--free functions and the
	 * syscall tracepoints stay). */
	bool no_heap_probes;
	/* The uprobe links are released by a short-lived child process of
	 * their own, which nobody waits for (mp_tracer_detach_begin()): for a
	 * caller that exits after the session, whose exit would otherwise
	 * wait for the kernel's release (tens of ms). That process is forked
	 * by mp_tracer_new(), while the caller is small
	 * (mp_release_holder_start()). */
	bool release_in_child;
	/* BPF ring buffer size: a power of two, at least one page; 0 means
	 * mp_tracer_ring_bytes(mode, 0). */
	uint32_t ring_bytes;
	/* Call stacks (0: off): bytes of the user stack copied with every
	 * allocation event (at most MP_STACK_MAX_BYTES); see
	 * mp_tracer_stack(). */
	uint32_t stack_bytes;
	/* Allocator wrappers (0: off): bytes of the user stack copied with
	 * an allocation whose caller is in a range of
	 * mp_tracer_set_wrappers() when stack_bytes is 0. */
	uint32_t wrap_stack_bytes;
};

#define MP_TRACER_RING_BYTES (8u << 20)
/* An rss-mode target sends no allocator events, only syscalls, exec and
 * at most one rss_stat record per page-counter change: 16384 records of
 * 64 bytes, a quarter of which wakes the consumer (docs/SERVICE.md,
 * "Memory per target"). */
#define MP_TRACER_RSS_RING_BYTES (1u << 20)

/* The ring buffer size of a target of @mode: @configured, or the default
 * of the mode when it is 0. */
uint32_t mp_tracer_ring_bytes(uint32_t mode, uint32_t configured);
/* The mean sampling interval of sampled mode unless one is given: Go's
 * and jemalloc's default (tcmalloc's is 2 MiB). A fleet profile gets a
 * sample per 512 KiB allocated, and the cost of a sample and of its
 * sampled-block entry stays out of the program's way (docs/TRACER.md,
 * "Sampled mode"). */
#define MP_SAMPLE_BYTES_DEFAULT (512ull << 10)
#define MP_TRACER_SAMPLED_MAX (1u << 20)
/* In-process path, sampled mode: the --alloc functions' blocks alone
 * (libmemprof samples the malloc family itself). */
#define MP_TRACER_SAMPLED_MAX_EXTRA (1u << 16)

/* Unbiased size estimate of a block of @size bytes sampled with mean
 * interval @interval (size < interval): size / (1 - exp(-size/interval)). */
uint64_t mp_tracer_sample_estimate(uint64_t size, uint64_t interval);

/* One attached allocator function. */
struct mp_probe_info {
	uint32_t fn; /* enum mp_alloc_fn */
	const char *name; /* symbol */
	const char *path; /* object, as the target sees it */
	uint64_t offset; /* file offset of the function */
	uint64_t probe_delta; /* entry probe placed this many bytes later */
	int alias_of; /* index of the probe with the same address, or -1 */
};

/* Not thread-safe: one thread calls consume/drops/free. */
struct mp_tracer;

/* Raw event callback; a negative return stops mp_tracer_consume() and is
 * returned by it. */
typedef int (*mp_raw_cb)(void *ctx, const struct mp_raw_event *ev);

/*
 * Resolve, load and attach. Errors: -ESRCH no such process, -EPERM/-EACCES
 * not permitted, -ENOENT no allocator (malloc and free) found, -ENXIO an
 * extra function not found, -EINVAL bad options or a thread id, others from
 * libbpf.
 */
int mp_tracer_new(const struct mp_tracer_opts *opts, struct mp_tracer **ret);
/* Detaches every probe and unloads every program. */
void mp_tracer_free(struct mp_tracer *t);
/* Begins detaching the probes in a thread of its own (mp_tracer_consume()
 * does once the target is gone and its last events are read): the kernel
 * takes a grace period or more per link (closing a uprobe_multi link
 * takes 20-25 ms here), which then passes while the profile is built.
 * What was probed stays known (mp_tracer_probes()): the session still asks
 * while it reads the last events. mp_tracer_free() waits for the thread. Without probes, or when no thread starts, a no-op (then
 * mp_tracer_free() detaches them). */
void mp_tracer_detach_begin(struct mp_tracer *t);
/* Whether mp_tracer_detach_begin() started its thread (for tests). */
bool mp_tracer_detaching(const struct mp_tracer *t);

/* Events are batched: the fd becomes readable when a batch is pending, at
 * an exec or exit of the target; poll it with a timeout of at most
 * MP_TRACER_POLL_MS and call mp_tracer_consume() on timeouts too. */
#define MP_TRACER_POLL_MS 50
int mp_tracer_fd(const struct mp_tracer *t);

/*
 * Deliver every pending raw event, without blocking. After an exec of the
 * target (MP_RAW_EXEC delivered), the probes are re-resolved and re-attached
 * before returning (an image without malloc/free gets no uprobes, only the
 * syscall tracepoints). When the target has exited, the ring is drained a last
 * time and MP_RAW_EXIT is delivered; later calls return -ESRCH. Returns the
 * number of events delivered.
 */
int mp_tracer_consume(struct mp_tracer *t, mp_raw_cb cb, void *ctx);

/* Registers and stack slice of the event being delivered to the raw event
 * callback (MP_RAW_F_STACK records: allocations when stack_bytes is set),
 * or NULL; valid during the callback only. @bytes are @len bytes of the
 * target's stack from regs.sp up: hostile input. */
struct mp_raw_stack_view {
	uint64_t ip, sp, bp;
	const void *bytes;
	uint32_t len;
};
const struct mp_raw_stack_view *mp_tracer_stack(const struct mp_tracer *t);
/* During the callback of an MP_RAW_OBJECT: the object's path as the
 * loader named it (NUL-terminated, possibly empty), else NULL. */
const char *mp_tracer_object_path(const struct mp_tracer *t);

/* Whether the uprobes are multi-uprobe BPF links (kernel 6.6+) rather than
 * one perf event each. */
bool mp_tracer_multi_uprobes(const struct mp_tracer *t);

/* Duty cycle: whether the allocator probes are attached now, and for how
 * long they have been in total since attach. */
bool mp_tracer_duty_on(const struct mp_tracer *t);
uint64_t mp_tracer_duty_on_ns(const struct mp_tracer *t);

/* In-process path: mappings a thread makes while its libmemprof
 * interposer word at @tls_off from its thread pointer is nonzero belong to
 * an allocator call (reported through the ring) and are not delivered.
 * 0 turns that off. */
void mp_tracer_set_inproc_tls(struct mp_tracer *t, int64_t tls_off);
/* The session sleeps without a tick (@idle) or polls again: while it
 * sleeps, the first record in an empty ring buffer wakes its fd. */
void mp_tracer_set_idle(struct mp_tracer *t, bool idle);
/* Events read from the ring buffer since the tracer started. */
uint64_t mp_tracer_delivered(const struct mp_tracer *t);
/* The allocator wrappers' ranges the BPF side tests callers against:
 * @n (<= MP_WRAP_MAX) sorted ranges [lohi[2i], lohi[2i+1]); 0: none. */
void mp_tracer_set_wrappers(struct mp_tracer *t, const uint64_t *lohi, uint32_t n);
/* Events lost to a full ring buffer since attach (all CPUs). */
uint64_t mp_tracer_drops(const struct mp_tracer *t);
/* The same by what they lost (enum mp_drop_kind, memprof_events.h). */
void mp_tracer_drops_by_kind(const struct mp_tracer *t, uint64_t ret[MP_DROP_KINDS]);
/* Allocator probe hits that were not the target's, although the uprobes
 * are attached to the target alone: its pid was not recognised (a
 * vfork'ed child sharing its memory also counts). */
uint64_t mp_tracer_unmatched(const struct mp_tracer *t);
/* Allocation, free and realloc events delivered since attach. */
uint64_t mp_tracer_heap_events(const struct mp_tracer *t);
bool mp_tracer_exited(const struct mp_tracer *t);
/* Whether the last mp_tracer_consume() emptied the BPF ring buffer: no
 * event left and none reserved but not yet submitted. The programs stamp
 * an event after reserving it (except an allocation with its stack, on the
 * eBPF path), so every event still to come is stamped after a clock
 * reading taken before that consume (docs/TRACER.md "Ring buffer, drops,
 * wakeups"). False when unknown. */
bool mp_tracer_drained(const struct mp_tracer *t);

/* The attached allocator functions, valid until the next consume/free. */
size_t mp_tracer_probes(const struct mp_tracer *t, const struct mp_probe_info **ret_probes);

/* Parse "SYMBOL[@OBJECT]:KEY=VALUE[,KEY=VALUE...]", N counted from 0:
 * allocators (@is_free false) size=argN, ptr=ret|*argN, ok=ret==0|ret!=0,
 * pool=NAME, kind=host|device; frees (true) ptr=argN, ok=..., pool=NAME.
 * "SYMBOL:size=argN" and "SYMBOL:ptr=argN" are the plain forms. An
 * out-parameter (ptr=*argN) or ok= needs pool= unless it is exactly
 * posix_memalign's shape (ptr=*argN,size=argM,ok=ret==0). -EINVAL. */
int mp_tracer_parse_func(const char *spec, bool is_free, struct mp_tracer_func *ret);

/* The functions of --device @name ("cuda", "hip") in *ret_funcs (static
 * storage), or -EINVAL. */
int mp_tracer_device_preset(const char *name, const struct mp_tracer_func **ret_funcs,
			    size_t *ret_n);

/* Bytes after the entry of a free-like function (pointer in argument
 * @ptr_arg, code at @code) where its entry probe may go instead: past an
 * endbr64 and a "test ptr,ptr; je" NULL check. 0 = at the entry. */
uint64_t mp_tracer_place_free_probe(const uint8_t *code, size_t len, uint32_t ptr_arg);

/* Name of a builtin function ("custom" for MP_FN_CUSTOM and above). */
const char *mp_alloc_fn_name(uint32_t fn);
/* Same, with the symbol of --alloc/--free functions. */
const char *mp_tracer_fn_name(const struct mp_tracer *t, uint32_t fn);

#endif /* MP_TRACER_H */
