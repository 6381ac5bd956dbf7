/* SPDX-License-Identifier: MIT */
/*
 * The correlator: turns the merged, timestamp-ordered stream of marker
 * records, raw heap events and RSS readings of one process into a profile.
 * It owns the process's live-allocation table (live.h) on both paths, eBPF
 * and in-process: raw events are paired there, then accounted.
 *
 * Attribution (docs/PROFILE.md): a heap event on thread T at time t is
 * charged to T's innermost open kernel at t; when T has none, to the
 * process's most recently begun, still open kernel (counted as
 * cross-thread); otherwise to no kernel. Pure ordering logic, no time
 * windows: exact however short the kernel.
 *
 * Pure logic: no I/O, no logging, no threads. Callers feed events in
 * timestamp order (equal timestamps: in the order they happened).
 */
#ifndef MP_CORRELATOR_H
#define MP_CORRELATOR_H

#include <stdint.h>

#include "heap_event.h"
#include "memprof_events.h"
#include "consumer.h"
#include "profile.h"
#include "rss_sample.h"

/* Path of the object file containing @caller_addr, or NULL when unknown.
 * The string only needs to stay valid until the call returns. */
typedef const char *(*mp_resolve_owner_fn)(void *ctx, uint64_t caller_addr);

/* Source frames at a return address, innermost first (inlined functions,
 * then the function containing them): fn: and src: owner rules match
 * them. Strings valid until the call returns; @file a full path. */
struct mp_src_frame {
	const char *function, *file;
	bool python; /* a Python frame's code (py: rules) */
};
typedef int (*mp_resolve_frames_fn)(void *ctx, uint64_t addr, struct mp_src_frame *ret, int max);
/* The frames (return addresses, innermost first) of stack @id of
 * mp_heap_event.stack; 0 when unknown. */
typedef uint32_t (*mp_stack_frames_fn)(void *ctx, uint32_t id, const uint64_t **ret_frames);
/* Shown every heap event that the live table pairs, before it is
 * accounted (--dump-events). */
typedef void (*mp_observe_heap_fn)(void *ctx, const struct mp_heap_event *ev);

struct mp_correlator_opts {
	uint64_t begin_ns; /* attach time; 0: the first event's timestamp */
	mp_resolve_owner_fn resolve_owner; /* NULL: every owner unknown */
	mp_resolve_frames_fn resolve_frames; /* NULL: fn:/src: rules never match */
	mp_stack_frames_fn stack_frames; /* NULL: owners from the caller only */
	void *resolve_ctx;
	mp_observe_heap_fn observe_heap; /* NULL: none (the fast path) */
	void *observe_ctx;
	uint32_t max_invocations; /* per-invocation records kept; 0: 65536 */
	uint32_t max_rss_points; /* RSS timeline length; 0: 4096 */
	uint32_t max_sites; /* allocation sites kept; 0: 65536 */
	/* Bytes the live-allocation table's slots may take (0: no bound):
	 * past it new blocks are counted, not tracked (docs/PROFILE.md
	 * "Limits"). */
	uint64_t max_live_bytes;
	/* Sampled mode's mean interval (0: exact figures): heap events
	 * flagged MP_HEAP_F_SCALED then carry estimates, whose variances the
	 * profile sums beside them (docs/PROFILE.md "Sampled figures"). */
	uint64_t sample_bytes;
	/* A free of the malloc family of a block never seen allocated (an
	 * unknown free), at @addr, stamped @ts_ns: whether @addr lies where
	 * the target's allocator could have put a block (freecheck.h).
	 * false: refused (rejected free_unmapped), never an unknown free.
	 * NULL: only the address's range and alignment are checked. */
	bool (*free_mapped)(void *ctx, uint64_t addr, uint64_t ts_ns);
	/* Whether an unknown free's @caller lies inside the allocator's own
	 * object: the allocator freeing a block itself (glibc flushing an
	 * exiting thread's cache through free's entry, where a uprobe sees
	 * it). Counted in the profile's internal_frees instead. NULL: never. */
	bool (*free_internal)(void *ctx, uint64_t caller);
	void *free_ctx;
};

struct mp_correlator;

int mp_correlator_new(const struct mp_correlator_opts *opts, struct mp_correlator **ret);
void mp_correlator_free(struct mp_correlator *c);

/* An owner rule (--owner), fnmatch(3) globs:
 *   "GLOB=NAME" or "dso:GLOB=NAME"  object files whose basename matches
 *   "fn:GLOB=NAME"                  functions (inlined ones too)
 *   "src:GLOB=NAME"                 source files (full path), Python's too
 *   "py:GLOB=NAME"                  Python source files (full path) of the
 *                                   Python frames of a stack
 * An allocation's frames are tried innermost first (the caller, then its
 * callers when the allocation has a stack; within a frame its inlined
 * functions first); at each, the rules in the order added; the first
 * match names the owner. Without a match the owner is the caller's object
 * file, named by its basename. -EINVAL on a malformed spec. Add rules
 * before feeding events. */
int mp_correlator_add_owner_rule(struct mp_correlator *c, const char *spec);

/* Whether the correlator refuses heap event @ev before any table sees it
 * (a block no address space can hold: counted in the profile's rejected
 * sizes). mp_correlator_apply_heap() asks it first; a caller that applies
 * events through a live table of its own asks it too. */
bool mp_correlator_heap_refused(struct mp_correlator *c, const struct mp_raw_event *ev);

/* Feeds one event. Return 0 or -ENOMEM; malformed or unmatched records are
 * counted in the profile, never an error. */
int mp_correlator_on_record(struct mp_correlator *c, const struct mp_record *rec);
/* A heap event already paired (the live table bypassed; tests and fuzzing
 * drive the accounting with it). Has the mp_heap_cb signature (@ctx is the
 * correlator): returns the value to store with an allocated block, which
 * it expects back in ->user when the block is freed. */
uint64_t mp_correlator_on_heap(void *ctx, const struct mp_heap_event *ev);
/*
 * A raw heap event of either path: a uprobe's (bpf/memprof_events.h), or
 * a heap record of the ring as the uprobes would have delivered it. The
 * correlator's own live table pairs it (docs/TRACER.md) and the resulting
 * heap events are accounted: exactly as mp_live_apply(live, @ev,
 * mp_correlator_on_heap, @c) would (the same blocks, events and figures),
 * an allocation carrying stack id @stack (mp_heap_event.stack; 0: none).
 * The table and the accounting are inlined into one function (the ring's
 * tens of millions of records a second: docs/RING.md "Consumer: reading
 * and merging"). EXEC forgets every live block. Returns what
 * mp_live_apply() returns: 0 or -ENOMEM.
 */
int mp_correlator_apply_heap(struct mp_correlator *c, const struct mp_raw_event *ev,
			     uint32_t stack);
/*
 * A temporary allocation (heaptrack's term): raw allocation @al, carrying
 * stack id @stack, and the raw free @fr that follows it, applied as
 * mp_correlator_apply_heap(@al, @stack) then mp_correlator_apply_heap(@fr,
 * 0) apply them (the same profile and live table, field for field). The
 * caller guarantees that nothing else goes to the correlator between the
 * two: they are consecutive in the merged order. When @fr frees @al's
 * block on the same thread (precise mode, no pool, no observer, no block
 * live at that address already), the block never enters the live table
 * and is attributed once: its counts and the peaks its level reached are
 * charged, the running levels stay. Otherwise the two steps. Returns the
 * first error of the steps, or 0.
 */
int mp_correlator_apply_temporary(struct mp_correlator *c, const struct mp_raw_event *al,
				  uint32_t stack, const struct mp_raw_event *fr);
/* The blocks' values that mp_correlator_on_heap() returns are kept in
 * live table @l of the caller's, which applies its events with it as the
 * callback: when the site table is past its bound the correlator may
 * rewrite them there (docs/PROFILE.md "Limits"), as it does in its own.
 * Without it, values held outside are never rewritten, and an evicted
 * site's entry is taken again only once its blocks are freed. */
struct mp_live;
void mp_correlator_values_in(struct mp_correlator *c, struct mp_live *l);
/* The correlator's live table, to read (live.h: mp_live_stats(),
 * mp_live_lookup(), mp_live_foreach()); valid until mp_correlator_free(). */
const struct mp_live *mp_correlator_live(const struct mp_correlator *c);
/* A heap record at @addr (and a realloc's @old_addr, 0: none) is applied
 * soon: its live-table slots are fetched into the cache. */
void mp_correlator_prefetch_heap(const struct mp_correlator *c, uint64_t addr, uint64_t old_addr);
/* The process replaced its image (exec) at @ts_ns on thread @tid; @path is
 * the new image (NULL if unknown). Every open kernel is closed, flagged
 * truncated and exec; tags and the phase end; the event is recorded. */
int mp_correlator_on_exec(struct mp_correlator *c, uint64_t ts_ns, uint32_t tid, const char *path);
int mp_correlator_on_rss(struct mp_correlator *c, const struct mp_rss_sample *s);
int mp_correlator_on_rss_stat(struct mp_correlator *c, const struct mp_rss_stat_event *ev);

/* Pools (docs/PROFILE.md, "Pools"): the pool named @name of @kind
 * (MP_POOL_KIND_*), created on first use (@source: enum mp_pool_source);
 * its index in the profile's mempools in *ret. -E2BIG beyond 256 pools. */
int mp_correlator_pool_declare(struct mp_correlator *c, const char *name, uint32_t kind,
			       uint32_t source, uint32_t *ret);
/* Heap events of function @fn (a --alloc/--free function, MP_FN_CUSTOM + i)
 * are slices of pool @name: they go to the pool, never to the heap. A free
 * function frees a block of whichever probed pool holds it. */
int mp_correlator_set_fn_pool(struct mp_correlator *c, uint32_t fn, const char *name,
			      uint32_t kind);

/* Closes kernels still open at @end_ns (flagging them and the profile
 * truncated) and hands over the profile. The correlator can then only be
 * freed (-EALREADY on a second call). -ENOMEM if an allocation failed at
 * any point while feeding (the partial profile is then not returned). */
int mp_correlator_finish(struct mp_correlator *c, uint64_t end_ns, struct mp_profile **ret);

/* A copy of the profile as if finished at @now_ns (open kernels closed and
 * flagged truncated in the copy), for periodic streaming and status; the
 * correlator goes on unchanged. */
int mp_correlator_snapshot(struct mp_correlator *c, uint64_t now_ns, struct mp_profile **ret);

#endif /* MP_CORRELATOR_H */
