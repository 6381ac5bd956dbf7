/* SPDX-License-Identifier: MIT */
/*
 * The profile model: what the correlator produces and every exporter
 * (report, memprof.proto, pprof, chrome trace) reads. Plain data, owned by
 * the struct mp_profile that holds it; see docs/PROFILE.md for the exact
 * definition of every figure.
 */
#ifndef MP_PROFILE_H
#define MP_PROFILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Most dimensions of a shape the profile keeps (as the ring carries:
 * MP_MAX_RANK of ring_abi.h, asserted where the two meet). */
#define MP_PROFILE_MAX_RANK 8

/* Kinds of pool (mp_mempool.kind). The ring ABI defines the same values
 * (ring_abi.h): a mismatch is a redefinition error where both meet. */
#define MP_POOL_KIND_HOST 0u
#define MP_POOL_KIND_DEVICE 1u

/* How allocations were traced (the file stores it as memprof.TraceMode). */
enum mp_trace_mode {
	/* Every allocation and free, exact. */
	MP_TRACE_PRECISE = 0,
	/* Byte-weighted Poisson sampling decided in BPF (mean interval
	 * sample_bytes); only sampled blocks and their frees are sent, sizes
	 * of sampled blocks below the interval are unbiased estimates. */
	MP_TRACE_SAMPLED = 1,
	/* No allocator probes: anonymous mappings, brk and rss_stat only. */
	MP_TRACE_RSS = 2,
};

/* Which path delivered the allocator calls (docs/TRACER.md "Two allocation
 * paths"). */
enum mp_tracer_path {
	MP_PATH_UNKNOWN = 0, /* written before the in-process path existed */
	MP_PATH_BPF = 1, /* uprobes on the target's allocator */
	MP_PATH_INPROCESS = 2, /* libmemprof's interposer, through the ring */
};

/* --tracer inject: the in-process path, by injection when libmemprof is
 * not the target's malloc; a choice, never a path a profile records. */
#define MP_TRACER_INJECT 3
#define MP_PROFILE_REASON_MAX 320

/* "bpf", "inprocess" <-> enum mp_tracer_path; -EINVAL otherwise. */
int mp_tracer_path_parse(const char *s, uint32_t *ret);
/* The same, "auto" -> 0 (the daemon picks per target) and "inject" ->
 * MP_TRACER_INJECT: --tracer. */
int mp_tracer_choice_parse(const char *s, uint32_t *ret);
/* "unknown" for MP_PATH_UNKNOWN and values out of range. */
const char *mp_tracer_path_name(uint32_t path);

/* "precise", "sampled", "rss" <-> enum mp_trace_mode; -EINVAL otherwise. */
int mp_trace_mode_parse(const char *s, uint32_t *ret);
const char *mp_trace_mode_name(uint32_t mode);

/* 2: call stacks (stack table, per-site stack id), the version of a new
 * profile. 3: the stacks as a prefix tree in the file, the version of
 * profiles with stacks (the others read as version 2 files); the newest
 * version read. */
#define MP_PROFILE_FORMAT_VERSION 2
#define MP_PROFILE_FORMAT_STACK_TREE 3
#define MP_PROFILE_MAX_EXECS 256
/* Objects named that the in-process interposer cannot see, and their
 * names' room. */
#define MP_PROFILE_MAX_UNSEEN 8
#define MP_PROFILE_UNSEEN_LEN 256

/* "No such index" (parent of a top-level invocation, phase before any
 * phase marker) and "unknown value" (RSS without samples). */
#define MP_NONE UINT32_MAX
#define MP_UNKNOWN UINT64_MAX

/* Index 0 of mp_profile.owners / .tags: allocations with no known owner /
 * made while no tag was open. */
#define MP_OWNER_UNKNOWN 0
#define MP_TAG_NONE 0

/* mp_invocation.flags */
#define MP_INV_F_OPEN_AT_ATTACH 0x1u /* begun before the daemon attached */
#define MP_INV_F_TRUNCATED 0x2u /* never ended: closed at profile end */
/* Records of its thread were lost while it was open (a gap in the thread's
 * record numbers): its begin or end may belong to another invocation, so it
 * is left out of the per-kernel figures (docs/PROFILE.md "Lost markers"). */
#define MP_INV_F_MARKERS_LOST 0x4u
/* Closed (with MP_INV_F_TRUNCATED) because the process called exec. */
#define MP_INV_F_EXEC 0x8u

/* mp_profile.corruption: what the daemon found wrong in the target's marker
 * ring (hostile or broken target); the marker figures are incomplete. */
#define MP_CORRUPT_RING_HEADER 0x1u /* a header counter had an impossible value */
#define MP_CORRUPT_RING_RECORDS 0x2u /* a record failed validation: markers stop there */
#define MP_CORRUPT_RING_OPEN 0x4u /* the ring was refused at attach: no markers */
/* records refused by validation (mp_profile.rejected), the rest kept */
#define MP_CORRUPT_RECORDS_REJECTED 0x8u
/* a ring stuck (its header claims records no slot holds, sequence words
 * going back, a record never completed): its thread's markers stop there */
#define MP_CORRUPT_RING_STUCK 0x10u

/* mp_profile.rejected[]: records read from the target (ring or allocator
 * arguments) that cannot be true, by reason; none reaches a figure
 * (docs/PROFILE.md "Corruption"). */
enum mp_reject {
	MP_REJECT_SIZE = 0, /* size or address beyond any address space */
	MP_REJECT_TIME, /* stamp outside the session's window */
	MP_REJECT_THREAD, /* thread id not the ring's thread */
	MP_REJECT_FREE, /* free of an address no allocator hands out */
	MP_REJECT_STACK, /* call stack longer than the ring ABI allows */
	MP_REJECT_MODE, /* heap record while the daemon did not ask for any */
	/* free of a block never seen allocated, at an address no malloc
	 * returns (not a multiple of 8) */
	MP_REJECT_FREE_MISALIGNED,
	/* free of a block never seen allocated, outside every writable
	 * mapping of the target (at the attach, at the daemon's last look) */
	MP_REJECT_FREE_UNMAPPED,
	MP_REJECT_COUNT
};

enum mp_clock {
	MP_CLOCK_MONOTONIC = 1,
};

struct mp_shape {
	uint32_t rank;
	int64_t dims[MP_PROFILE_MAX_RANK];
};

/* Heap traffic charged to something during some interval. */
struct mp_mem_stats {
	int64_t bytes_added; /* net change of live bytes */
	int64_t tensors_added; /* net change of live blocks */
	uint64_t alloc_bytes;
	uint64_t alloc_count;
	uint64_t free_bytes;
	uint64_t free_count;
	/* Sampled mode: estimated variances of alloc_bytes and free_bytes
	 * (docs/PROFILE.md "Sampled figures"); 0 when they are exact. */
	double alloc_var, free_var;
};

/* Anonymous mappings the program made itself (mmap, mremap, munmap), a
 * view apart from the heap: no heap figure ever counts them
 * (docs/PROFILE.md "Mappings"). Bytes are reserved bytes (the mappings'
 * lengths), not resident ones. */
struct mp_map_stats {
	uint64_t alloc_bytes, alloc_count; /* mapped (a grown mremap: its new length) */
	uint64_t free_bytes, free_count; /* unmapped (a moved mremap: its old length) */
	/* Reserved bytes still mapped: the profile's, an owner's or a tag's
	 * own at the end; for an invocation, a kernel (its last call) and a
	 * phase (when last left) the process's at that end. */
	uint64_t live_bytes;
	/* The highest of those: own (profile, owner, tag), or the process's
	 * while the invocation was open (kernel: max over calls) or the phase
	 * current. */
	uint64_t peak_bytes;
};

/* Breakdown of an invocation's (or a kernel's) traffic by owner or tag:
 * @id indexes mp_profile.owners or mp_profile.tags. */
struct mp_bucket {
	uint32_t id;
	uint64_t alloc_bytes;
	uint64_t alloc_count;
	uint64_t free_bytes;
	uint64_t free_count;
};

/* Traffic of one invocation (or kernel) in one pool (mp_profile.mempools),
 * inclusive of nested kernels. */
struct mp_pool_bucket {
	uint32_t id; /* index into mp_profile.mempools */
	uint64_t alloc_bytes;
	uint64_t alloc_count;
	uint64_t free_bytes;
	uint64_t free_count;
	/* Highest net bytes (allocated - freed) the invocation held in the
	 * pool at any time (>= 0). Kernel: max over calls. */
	uint64_t peak_added;
	/* Pool live bytes: highest while the invocation was open, and at its
	 * end. Kernel: max over calls / at the end of the last call. */
	uint64_t peak_bytes;
	uint64_t live_end;
	uint64_t live_count_end; /* pool live slices at the end */
};

/* Slices of one pool charged to one tag: the tag innermost open on the
 * allocating thread, as for heap blocks (a slice's free is charged to the
 * tag of its allocation). An invocation's (kernel's) breakdown, inclusive. */
struct mp_pool_tag_bucket {
	uint32_t pool; /* index into mp_profile.mempools */
	uint32_t tag; /* index into mp_profile.tags */
	uint64_t alloc_bytes;
	uint64_t alloc_count;
	uint64_t free_bytes;
	uint64_t free_count;
};

struct mp_invocation {
	uint32_t name; /* index into mp_profile.names */
	uint32_t tid; /* thread that ran the kernel */
	uint32_t parent; /* enclosing invocation on the same thread, or MP_NONE */
	uint32_t depth; /* 0 for a top-level kernel */
	uint32_t phase; /* phase current at begin, or MP_NONE */
	uint32_t flags; /* MP_INV_F_* */
	uint64_t begin_ns;
	uint64_t end_ns;
	struct mp_mem_stats incl; /* this kernel and the kernels it encloses */
	struct mp_mem_stats excl; /* this kernel alone */
	uint64_t total_bytes_snapshot; /* process live bytes at end */
	uint64_t total_tensors_snapshot; /* process live blocks at end */
	uint64_t peak_bytes; /* process live bytes peak during the invocation */
	uint64_t peak_added; /* highest incl.bytes_added reached (>= 0) */
	/* Bytes/blocks allocated by this kernel alone still live at the end
	 * of the profile. */
	uint64_t retained_bytes;
	uint64_t retained_count;
	/* Allocations made by threads that had no open kernel of their own
	 * (thread pool workers), charged here. */
	uint64_t cross_thread_allocs;
	uint64_t cross_thread_bytes;
	/* VmRSS of the samples nearest to begin and end (MP_UNKNOWN when none). */
	uint64_t rss_begin;
	uint64_t rss_end;
	/* Exact RSS change (rss_stat events) charged by thread like
	 * allocations; zero without --rss-exact. */
	int64_t rss_exact_incl;
	int64_t rss_exact_excl;
	/* These arrays, and the buckets of struct mp_kernel, are allocated
	 * with capacity max(2, next power of two >= n) so the correlator can
	 * extend them without storing a capacity. */
	uint32_t n_inputs, n_outputs;
	struct mp_shape *inputs, *outputs;
	uint32_t n_owners, n_tags;
	struct mp_bucket *owners, *tags; /* inclusive */
	/* One bucket per pool known when the invocation began or touched by
	 * it (capacity as above). */
	uint32_t n_pools;
	struct mp_pool_bucket *pools;
	/* Its pool slices by tag, one bucket per (pool, tag) touched
	 * (capacity as above). */
	uint32_t n_pool_tags;
	struct mp_pool_tag_bucket *pool_tags;
	/* Last, away from the fields the per-record path touches. */
	struct mp_map_stats maps; /* inclusive of nested kernels */
	/* Sampled mode (docs/PROFILE.md "Per-kernel peaks"; 0 otherwise):
	 * the estimated variance of the process live bytes when peak_bytes
	 * was reached (its upward bias is bounded by mp_profile's
	 * peak_bias_bound), the variance of incl.bytes_added now (at the
	 * end), at peak_added, and the bound on peak_added's upward bias. */
	double peak_var, added_var, peak_added_var, peak_added_bias_bound;
	/* Highest added_var reached (correlator state; not in the file). */
	double added_var_max;
};

/* All invocations of one kernel name (including those beyond the
 * per-invocation record cap). */
struct mp_kernel {
	uint32_t name;
	uint64_t calls;
	uint64_t total_ns, min_ns, max_ns;
	struct mp_mem_stats incl, excl;
	uint64_t peak_bytes; /* max over calls */
	uint64_t peak_added; /* max over calls */
	uint64_t retained_bytes, retained_count;
	uint64_t cross_thread_allocs, cross_thread_bytes;
	int64_t rss_delta_sum; /* sum of rss_end - rss_begin over rss_calls */
	/* calls with both RSS readings whose sample interval does not overlap
	 * that of an earlier counted call (docs/PROFILE.md) */
	uint64_t rss_calls;
	/* End reading's sample time of the last call counted (correlator
	 * state; not in the file). */
	uint64_t rss_last_ns;
	int64_t rss_exact_incl, rss_exact_excl;
	uint64_t open_at_attach; /* calls flagged MP_INV_F_OPEN_AT_ATTACH */
	uint64_t truncated; /* calls flagged MP_INV_F_TRUNCATED */
	/* Calls flagged MP_INV_F_MARKERS_LOST: counted here only, in no
	 * other field of the aggregate. */
	uint64_t markers_lost;
	uint32_t n_owners, n_tags;
	struct mp_bucket *owners, *tags;
	uint32_t n_pools;
	struct mp_pool_bucket *pools;
	uint32_t n_pool_tags;
	struct mp_pool_tag_bucket *pool_tags;
	struct mp_map_stats maps; /* inclusive; live_bytes: at the last call's end */
	/* Sampled mode: the variances of peak_bytes and peak_added (those of
	 * the calls that hold the maxima), the bound on peak_added's upward
	 * bias (for the maximum over every call), and the calls' highest
	 * added_var_max (correlator state; not in the file). */
	double peak_var, peak_added_var, peak_added_bias_bound, added_var_max;
};

/* The process replaced its image (exec): kernels open in the old image were
 * closed there. */
struct mp_exec {
	uint64_t ts_ns;
	uint32_t tid; /* thread that called exec */
	uint32_t kernels_closed; /* open kernels closed (MP_INV_F_EXEC) */
	/* the old image's live blocks, released by the exec */
	uint64_t released_bytes, released_blocks;
	char *path; /* the new image as /proc/PID/exe showed it, NULL if unknown */
};

/* An owner's or a tag's live bytes at a peak of the heap. */
struct mp_peak_part {
	uint32_t id; /* index into mp_profile.owners or mp_profile.tags */
	uint64_t bytes;
};

/* A process-wide phase; re-entering a phase accumulates into one entry. */
struct mp_phase {
	char *name;
	uint64_t first_ns; /* first time the phase was entered */
	uint64_t duration_ns; /* total time spent in it */
	uint64_t entries;
	struct mp_mem_stats mem; /* all heap traffic while it was current */
	uint64_t peak_bytes; /* process live bytes peak while current */
	uint64_t rss_peak; /* max VmRSS sampled while current */
	/* One bucket per pool known while the phase was current: slice
	 * traffic while current, peak_added, peak_bytes (the pool's highest
	 * live bytes while current, what was live on entry included) and the
	 * pool's live bytes and slices when the phase was last left. */
	uint32_t n_pools;
	struct mp_pool_bucket *pools;
	double peak_var; /* sampled mode: its variance (bias: the process's) */
	struct mp_map_stats maps; /* mapping traffic while current */
	/* Who held peak_bytes (docs/PROFILE.md "Who held the peak"): the
	 * bytes each owner and each tag had live when the phase first reached
	 * it, those with none left out, in index order; each list sums to
	 * peak_bytes. */
	uint32_t n_peak_owners, n_peak_tags;
	struct mp_peak_part *peak_owners, *peak_tags;
};

/* An owner (object file of the allocation's caller) or a tag. */
struct mp_pool {
	char *name;
	struct mp_mem_stats mem;
	uint64_t live_bytes, live_count; /* at profile end */
	uint64_t peak_bytes; /* peak of live_bytes */
	/* Its live bytes when the process heap first reached
	 * mp_profile.peak_bytes (docs/PROFILE.md "Who held the peak"): the
	 * owners' sum, and the tags', is that peak. */
	uint64_t peak_share;
	/* Correlator state (not in the file; 0 in a finished profile), beside
	 * live_bytes: the correlator's peak epoch at its last change, and its
	 * live bytes at the current phase's peak (as peak_share at the
	 * process's). */
	uint64_t epoch, ph_share;
	/* Sampled mode: the variance of live_bytes (at the end), and at
	 * peak_bytes, the bound on peak_bytes' upward bias, and the highest
	 * live_var reached (correlator state; not in the file). */
	double live_var, peak_var, peak_bias_bound, live_var_max;
	struct mp_map_stats maps; /* its anonymous mappings */
};

/* A pool's slices charged to one tag over the whole window (the figures
 * mp_profile.tags has for heap blocks). */
struct mp_pool_tag {
	uint32_t tag; /* index into mp_profile.tags */
	struct mp_mem_stats mem;
	uint64_t live_bytes, live_count; /* at profile end */
	uint64_t peak_bytes; /* peak of live_bytes */
};

/* Where a pool's slices are reported from. */
enum mp_pool_source {
	MP_POOL_SRC_API = 0, /* memprof_pool_* in the process */
	MP_POOL_SRC_PROBE = 1, /* --alloc/--free/--device functions with pool= */
};

/* A pool: memory the program (memprof_pool_*) or a device runtime
 * (--device, pool=) hands out. Its slices are a view of their own, never
 * part of the heap figures (the malloc backing an arena is in the heap
 * view once), and device pools are never part of RSS figures. */
struct mp_mempool {
	char *name;
	uint32_t kind; /* MP_POOL_KIND_HOST or MP_POOL_KIND_DEVICE */
	uint32_t source; /* enum mp_pool_source, as first seen */
	struct mp_mem_stats mem;
	uint64_t live_bytes, live_count; /* at profile end */
	uint64_t peak_bytes; /* peak of live_bytes */
	uint64_t resets; /* memprof_pool_reset() calls */
	uint64_t unknown_frees; /* slices freed that were never seen allocated */
	/* Its slices by tag, in order of first sight (capacity as
	 * mp_invocation's arrays). */
	uint32_t n_tags;
	struct mp_pool_tag *tags;
};

/* ---- Limits (docs/PROFILE.md "Limits") ----
 * The bounds of the daemon's own tables in one run, which a target with
 * very many live blocks, sites or stacks reaches (a hostile one on
 * purpose), and what went past them. mp_limits.reached: */
#define MP_LIMIT_LIVE 0x1u /* live table full: new blocks counted, not tracked */
#define MP_LIMIT_SITES 0x2u /* site table full: the smallest folded into "(other sites)" */
#define MP_LIMIT_STACKS 0x4u /* stack table full: the rest with their caller alone */
#define MP_LIMIT_NAMES 0x8u /* kernel names full: the rest named "(other)" */

struct mp_limits {
	uint32_t reached; /* MP_LIMIT_* */
	uint64_t memory; /* the run's memory bound for its tables, bytes (0: none) */
	uint64_t live_blocks; /* the live table's bound in blocks (0: none) */
	/* New blocks the live table had no room for: in no heap figure, so
	 * the heap figures are lower bounds; their frees are unknown frees. */
	uint64_t untracked_allocs, untracked_bytes;
	uint32_t sites; /* the site table's bound (0: not recorded) */
	uint32_t stacks; /* the stack table's bound in stacks (0: no stacks) */
	uint64_t stack_frames; /* and in frames */
	/* The site table past its bound (space-saving): sites whose figures
	 * were folded into "(other sites)" to admit a new one, and the
	 * largest mp_site.error_space of a site listed, the most bytes any
	 * listed site's alloc_space may lack. */
	uint64_t sites_evicted, site_error_bytes;
};

struct mp_rss_point {
	uint64_t ts_ns;
	uint64_t vm_rss, rss_anon, rss_file, rss_shmem, vm_swap, pss;
	/* Process live heap bytes (see "Live bytes") when the sample was
	 * taken; MP_UNKNOWN in files written before it was recorded. */
	uint64_t heap_live;
	/* Reserved bytes of the process's tracked anonymous mappings then;
	 * MP_UNKNOWN in files written before it was recorded. */
	uint64_t maps_live;
};

struct mp_profile {
	uint32_t format_version;
	/* Process (filled in by the daemon). */
	int32_t pid;
	char *exe, *build_id, *cmdline;
	/* Settings of the run (filled in by the daemon). */
	uint32_t clock; /* enum mp_clock */
	uint64_t rss_interval_ns, pss_interval_ns;
	bool rss_exact;
	uint64_t begin_ns, end_ns; /* attach window */

	/* Whole window. */
	struct mp_mem_stats mem; /* bytes_added = newBytes, tensors_added = newTensors */
	uint64_t peak_bytes; /* peakBytes */
	uint64_t peak_tensors;
	/* Who held the peaks: mp_pool.peak_share and mp_phase.peak_owners,
	 * .peak_tags are filled in; false in files written before they were
	 * recorded. */
	bool peak_parts;
	/* Sampled mode (docs/PROFILE.md "Sampled figures"; 0 otherwise):
	 * estimated variances of mem.bytes_added (the live bytes at the end)
	 * and of the live bytes when peak_bytes was reached, and an upper
	 * bound on peak_bytes' upward bias. */
	double added_var, peak_var, peak_bias_bound;
	uint64_t unknown_frees; /* frees of blocks allocated before attach */
	/* The allocator's own frees of blocks never seen allocated, called
	 * from inside its object (glibc flushing an exiting thread's cache:
	 * blocks the program had freed already); in no figure. */
	uint64_t internal_frees;
	/* In-process path: objects whose allocator calls bypass the
	 * interposer (their blocks in no figure), and the first
	 * MP_PROFILE_MAX_UNSEEN of them, "PATH: SYMBOL -> OBJECT". */
	uint64_t unseen_objects;
	uint32_t n_unseen_names;
	char unseen_names[MP_PROFILE_MAX_UNSEEN][MP_PROFILE_UNSEEN_LEN];
	uint64_t unmatched_ends, unmatched_tag_ends, orphan_shapes;
	uint64_t drops_ring, drops_bpf; /* filled in by the daemon */
	/* Of drops_bpf, the malloc family's allocations, frees and reallocs,
	 * and the rest (mappings, pools, exec); drops_bpf above their sum
	 * (a file from before they were counted): of unknown kind. Lost frees leave blocks live:
	 * the live, leaked and peak figures are then upper bounds; lost
	 * allocations make them lower bounds (mp_profile_heap_bound()). */
	uint64_t drops_bpf_allocs, drops_bpf_frees, drops_bpf_reallocs, drops_bpf_others;
	uint64_t invocations_dropped; /* beyond the record cap */
	uint64_t dropped_markers; /* beyond stack/name/shape caps */
	uint64_t accounting_errors; /* inconsistent frees, clamped */
	uint64_t probe_hits_unmatched; /* not the target's (daemon-filled) */
	uint64_t stream_chunks_lost; /* not delivered to a collector (daemon) */
	bool truncated;
	int64_t rss_exact_unattributed; /* rss_stat changes not charged */
	/* Hardening (docs/PROFILE.md "Lost markers", "Exec", "Corruption"). */
	uint64_t marker_gaps; /* gaps in a thread's record numbers */
	uint32_t corruption; /* MP_CORRUPT_* (set by the daemon) */
	uint64_t rejected[MP_REJECT_COUNT]; /* records refused, by enum mp_reject */
	uint64_t stuck_rings; /* rings found stuck (MP_CORRUPT_RING_STUCK) */
	uint32_t n_execs; /* at most MP_PROFILE_MAX_EXECS kept */
	struct mp_exec *execs;
	uint64_t exec_count; /* all execs, kept or not */

	uint32_t n_names;
	char **names; /* kernel names */
	uint32_t n_invocations;
	struct mp_invocation *invocations; /* in begin order */
	uint32_t n_kernels;
	struct mp_kernel *kernels; /* in order of first begin */
	uint32_t n_phases;
	struct mp_phase *phases;
	uint32_t n_owners;
	struct mp_pool *owners; /* [0] = "(unknown)" */
	uint32_t n_tags;
	struct mp_pool *tags; /* [0] = "(untagged)" */

	uint32_t n_rss;
	struct mp_rss_point *rss; /* bounded timeline */
	uint32_t rss_stride; /* one point kept every rss_stride samples */
	uint64_t rss_samples; /* samples seen */
	uint64_t rss_peak; /* max VmRSS sampled */
	uint64_t vm_hwm; /* last VmHWM sampled, MP_UNKNOWN if none */

	/* Allocation sites, in order of first allocation. Bounded: past the
	 * cap the site with the fewest bytes is folded into the "(other
	 * sites)" entry of its pool (MP_SITE_F_OTHER) to admit a new one
	 * (docs/PROFILE.md "Limits"); sites_dropped counts the allocations
	 * that entry holds. */
	uint32_t n_sites;
	struct mp_site *sites;
	uint64_t sites_dropped;
	/* Sampled mode: one per site, the estimated variances of its
	 * alloc_space and inuse_space (docs/OUTPUT.md); NULL otherwise. */
	struct mp_site_var *site_vars;
	/* Symbols of the sites' callers (mp_symbolize_profile()); empty
	 * until then. Locations are sorted by address, one per caller. */
	uint32_t n_objects;
	struct mp_object *objects;
	uint32_t n_locations;
	struct mp_location *locations;
	/* Tracing mode of the run (filled in by the daemon; enum
	 * mp_trace_mode of daemon/profile/profile.h: 0 precise, 1 sampled — heap
	 * figures are estimates from blocks sampled with mean interval
	 * sample_bytes — 2 rss: no allocator probes, heap figures cover
	 * anonymous mappings and brk only). */
	uint32_t trace_mode;
	uint64_t sample_bytes;
	/* Duty cycle (0: none): allocator probes attached duty_on_ns of
	 * every duty_period_ns, duty_active_ns in total; heap figures cover
	 * only those windows. */
	uint64_t duty_on_ns, duty_period_ns, duty_active_ns;
	/* How allocator calls were seen (enum mp_tracer_path; filled in by
	 * the daemon), and on the in-process path the heap records the
	 * target dropped (heap figures are then lower bounds) and the times
	 * an allocating thread waited for ring space. */
	uint32_t tracer_path;
	/* Why the path is what it is ("" when there is nothing to say), and
	 * whether libmemprof was injected into the running process. */
	char tracer_path_reason[MP_PROFILE_REASON_MAX];
	bool injected;
	uint64_t drops_heap;
	uint64_t heap_waits;
	/* Pools, in order of first sight. */
	uint32_t n_mempools;
	struct mp_mempool *mempools;
	/* Call stacks of the sites (--stacks): deduplicated, site.stack is
	 * an index + 1 into them (0: the site has no stack). stack_depth is
	 * the depth limit of the run (0: stacks off). */
	uint32_t n_stacks;
	struct mp_stack *stacks;
	/* One array holding every stack's frames (mp_profile_stacks_alloc()),
	 * or NULL: each stack's frames are an allocation of their own. */
	uint64_t *stack_frames;
	/* Or the stacks as the prefix tree the daemon's stack table keeps
	 * (mp_stack_table_export()), their frames NULL: read a stack's
	 * frames with mp_profile_stack_frames(). */
	struct mp_stack_tree *stack_tree;
	uint32_t stack_depth;
	uint64_t stacks_dropped; /* allocations whose stack was not kept */
	/* In-process path: call stacks the target unwound itself (FRAMES
	 * records) and those it sent as copies memprofd unwound (STACK
	 * records, where its unwinder could not give memprofd's walk). */
	uint64_t stacks_unwound, stacks_copied;
	/* Threads whose stacks had Python frames (docs/PROFILE.md "Python
	 * frames"), ascending, at most MP_PROFILE_MAX_PY_TIDS. */
	uint32_t n_python_tids;
	uint32_t *python_tids;
	/* Limits: the bounds of the run's tables and what passed them. */
	struct mp_limits limits;
	/* Anonymous mappings (docs/PROFILE.md "Mappings"): the whole
	 * window's, and the highest bound on their resident bytes an RSS
	 * sample gave (the lesser of the reserved bytes and RssAnon then;
	 * MP_UNKNOWN: no sample). */
	struct mp_map_stats maps;
	uint64_t maps_resident_peak;
	/* false: a file written before mappings were recorded (their
	 * figures unknown; its heap figures may include them). */
	bool maps_recorded;
	/* Allocator wrappers (docs/PROFILE.md "Owners"): whether the run
	 * looked past them and with the default list, the functions and
	 * objects resolved as wrappers, the allocations whose owner and site
	 * are a caller beyond them, and those left at the wrapper (no stack
	 * captured, or the unwind did not leave the wrappers). */
	struct mp_wrappers_info {
		bool on, default_list;
		uint32_t functions, objects;
		uint64_t skipped, fallbacks;
	} wrappers;
};

/* Bounds of the stack table, as the daemon keeps it (daemon/stacks) and as
 * the decoder accepts it: stacks, frames per stack, inlined frames per
 * location. */
#define MP_PROFILE_MAX_STACKS (1u << 24)
/* Frames of all stacks laid out one after the other, and nodes of the
 * file's prefix tree of them. */
#define MP_PROFILE_MAX_STACK_FRAMES (1u << 27)
#define MP_PROFILE_MAX_STACK_NODES (1u << 28)
#define MP_PROFILE_MAX_DEPTH 256
#define MP_PROFILE_MAX_INLINE 16
#define MP_PROFILE_MAX_PY_TIDS 4096

/* mp_stack.flags */
#define MP_STACK_F_TRUNCATED \
	0x1u /* deeper than recorded (depth limit,
				   * end of the copied slice, frame not
				   * unwindable) */

/* One call stack: return addresses, innermost first (frames[0] is in the
 * function that called the allocator). */
struct mp_stack {
	uint32_t n_frames;
	uint32_t flags;
	uint64_t *frames;
};

/* Call stacks as a prefix tree: node i (from 1) is return address
 * frame[i - 1] called from node parent[i - 1] (0: the outermost frame), a
 * parent's id below its children's; stack k is the path up from its
 * innermost node leaf[k] (0: no frames), p->stacks[k].n_frames long. */
struct mp_stack_tree {
	uint32_t n_nodes;
	uint64_t *frame;
	uint32_t *parent;
	uint32_t *leaf;
	/* every node is on some stack's path (false: not known) */
	bool complete;
};

/* An allocation site: allocations with the same caller address charged
 * to the same kernel in the same phase, owner and thread. */
struct mp_site {
	uint64_t caller; /* return address into the allocating code */
	uint32_t name; /* kernel charged (index into names), or MP_NONE */
	uint32_t phase; /* phase current at the allocation, or MP_NONE */
	uint32_t owner; /* index into owners */
	uint32_t tid; /* allocating thread */
	uint64_t alloc_objects, alloc_space; /* all allocations */
	uint64_t inuse_objects, inuse_space; /* still live at the end */
	/* 0: heap blocks; else slices of pool mempools[pool - 1], a view
	 * apart from the heap sites (at most 256 pools). */
	uint16_t pool;
	/* Limits: MP_SITE_F_OTHER, the "(other sites)" entry of its pool
	 * (heap: 0), holding every allocation beyond the site table's bound
	 * (caller 0, no kernel, phase, owner, thread or stack). Beside pool,
	 * so that a site stays small. */
	uint16_t flags;
	uint32_t stack; /* index + 1 into stacks, 0: none */
	/* Live when the process heap first reached peak_bytes (docs/PROFILE.md
	 * "Sites at the peak"); MP_UNKNOWN (both) in files written before it
	 * was recorded. */
	uint64_t peak_objects, peak_space;
	/* Correlator state (not in the file; 0 in a finished profile): the
	 * process peak whose figures peak_* hold while it is the current one. */
	uint64_t peak_ver;
	/* Limits: the site was admitted in place of one evicted from a full
	 * table (docs/PROFILE.md "Limits"); its figures are exact since then,
	 * and it may have allocated up to error_space bytes more before
	 * (which "(other sites)" holds). 0: admitted before the table was
	 * full. */
	uint64_t error_space;
};

#define MP_SITE_F_OTHER 0x1u
_Static_assert(sizeof(struct mp_site) <= 96, "a site's figures stay within two cache lines");

struct mp_site_var {
	double alloc_space, inuse_space;
};

/* mp_object.flags: what symbolization found for the object. */
#define MP_OBJ_F_FUNCTIONS 0x1u /* every location in it has a function name */
#define MP_OBJ_F_LINES 0x2u /* every location in it has file:line */

/* A file-backed executable mapping of the process holding site callers. */
struct mp_object {
	uint64_t start, limit; /* [start, limit) in the process */
	uint64_t file_offset; /* file offset mapped at start */
	char *path; /* as the process sees it */
	char *build_id; /* lowercase hex, NULL when the file has none */
	uint32_t flags; /* MP_OBJ_F_* */
};

/* A function inlined at a location. */
struct mp_inline_frame {
	char *function; /* NULL when unknown */
	char *file;
	uint32_t line;
};

/* The symbol of one caller address. */
struct mp_location {
	uint64_t addr; /* caller address in the process */
	uint32_t object; /* index into objects, or MP_NONE */
	uint64_t rel_addr; /* the address in the ELF file's terms (addr2line -e) */
	char *function; /* NULL when unknown */
	char *file; /* source file, NULL when unknown */
	uint32_t line; /* 0 when unknown */
	/* Functions inlined at @addr, innermost first; @function, @file and
	 * @line are then the function they were inlined into and the line of
	 * the outermost inlined call in it. */
	uint32_t n_inlined;
	struct mp_inline_frame *inlined;
	/* A Python frame (docs/PROFILE.md "Python frames"): @function, @file
	 * and @line are the Python code's, @addr memprofd's key for them, in
	 * no object. */
	bool python;
};

/* p->stacks for @n stacks (zeroed) and p->stack_frames for @n_frames
 * frames in all, replacing nothing (both NULL before). 0 or -ENOMEM. */
int mp_profile_stacks_alloc(struct mp_profile *p, uint32_t n, uint64_t n_frames);
/* Frees a stack tree and its arrays (NULL: nothing). */
void mp_stack_tree_free(struct mp_stack_tree *t);
/* Frees p->stacks and their frames (or tree); none are left. */
void mp_profile_stacks_free(struct mp_profile *p);
/* Of the prefix tree of stacks (p->stack_tree), only the stacks a site
 * names kept, renumbered in their order (site.stack rewritten), and only
 * the nodes on their paths; a profile with stacks as lists is left as it
 * is. 0 or -ENOMEM (the profile unchanged). */
int mp_profile_stacks_prune(struct mp_profile *p);
/* The frames of p->stacks[@i] (p->stacks[i].n_frames of them, at most
 * MP_PROFILE_MAX_DEPTH): its own, or laid out from p->stack_tree into
 * @buf. */
const uint64_t *mp_profile_stack_frames(const struct mp_profile *p, uint32_t i,
					uint64_t buf[MP_PROFILE_MAX_DEPTH]);

struct mp_profile *mp_profile_new(void);
void mp_profile_free(struct mp_profile *p);
/* A deep copy of @p in *@ret (free it with mp_profile_free()); -ENOMEM. */
int mp_profile_clone(const struct mp_profile *p, struct mp_profile **ret);
/* Sets the process fields (copies the strings, NULL allowed). */
int mp_profile_set_process(struct mp_profile *p, int32_t pid, const char *exe, const char *build_id,
			   const char *cmdline);

/* Finds the kernel aggregate / phase / tag / owner by name; NULL if none. */
const struct mp_kernel *mp_profile_kernel(const struct mp_profile *p, const char *name);
const struct mp_phase *mp_profile_phase(const struct mp_profile *p, const char *name);
const struct mp_pool *mp_profile_tag(const struct mp_profile *p, const char *name);
const struct mp_pool *mp_profile_owner(const struct mp_profile *p, const char *name);
const struct mp_mempool *mp_profile_mempool(const struct mp_profile *p, const char *name);
const char *mp_pool_kind_name(uint32_t kind);
/* Whether any slice of @mp was handed out or given back, or it was reset:
 * pools a --device preset declares but the program never calls have none
 * (the table and the Chrome trace leave them out). */
bool mp_mempool_used(const struct mp_mempool *mp);
/* Bucket of pool @id of an invocation's or kernel's pool breakdown, or NULL. */
const struct mp_pool_bucket *mp_pool_bucket_find(const struct mp_pool_bucket *b, uint32_t n,
						 uint32_t id);
/* Tag @tag's figures of pool @mp, or NULL. */
const struct mp_pool_tag *mp_pool_tag_find(const struct mp_mempool *mp, uint32_t tag);
/* Bucket of (@pool, @tag) of an invocation's or kernel's pool-tag
 * breakdown, or NULL. */
const struct mp_pool_tag_bucket *mp_pool_tag_bucket_find(const struct mp_pool_tag_bucket *b,
							 uint32_t n, uint32_t pool, uint32_t tag);
/* The location of @addr (p->locations is sorted), or NULL. */
const struct mp_location *mp_profile_location(const struct mp_profile *p, uint64_t addr);
/* Bucket @id of an invocation's or kernel's owner/tag breakdown, or NULL. */
const struct mp_bucket *mp_bucket_find(const struct mp_bucket *b, uint32_t n, uint32_t id);

/* Who held a peak (docs/PROFILE.md "Who held the peak"): the process's
 * (@phase MP_NONE) or phase @phase's, by owner or by tag (@tags), the most
 * bytes first (equal ones by index), those with none left out, in a new
 * array *@ret (free() it; NULL when there are none) of *@ret_n parts
 * summing to the peak, *@ret_peak. -ENOENT when the profile does not
 * record them (p->peak_parts false) or there is no such phase, -ENOMEM. */
int mp_profile_peak_parts(const struct mp_profile *p, uint32_t phase, bool tags,
			  struct mp_peak_part **ret, uint32_t *ret_n, uint64_t *ret_peak);

/* A region of the profile: the whole window, or one invocation and the
 * invocations nested in it. */
struct mp_region {
	bool whole;
	uint32_t inv; /* invocation index when !whole */
};
/* Resolves "NAME" (first invocation named NAME) or "NAME#N" (its N-th
 * invocation, 1-based); NULL or "" selects the whole profile.
 * -ENOENT when no such invocation exists. */
int mp_profile_region(const struct mp_profile *p, const char *spec, struct mp_region *ret);
/* Whether invocation @i is @anc or nested (at any depth) in it. */
bool mp_profile_inv_within(const struct mp_profile *p, uint32_t i, uint32_t anc);

/* What lost heap events make of the live figures (new bytes and blocks,
 * live, leaked, peak, per kernel, owner, tag and site; the allocated and
 * freed totals are lower bounds whatever was lost): a lost free leaves
 * its block live (upper bounds), a lost allocation leaves it out (lower
 * bounds), both or a lost realloc: neither holds. In-process drops are of
 * either kind (neither). docs/PROFILE.md "Drops". */
enum mp_heap_bound {
	MP_BOUND_EXACT, /* nothing of the malloc family was lost */
	MP_BOUND_LOWER,
	MP_BOUND_UPPER,
	MP_BOUND_NONE,
};
enum mp_heap_bound mp_profile_heap_bound(const struct mp_profile *p);
/* The same in words, for the report and the HTML page. */
const char *mp_profile_heap_bound_text(const struct mp_profile *p);
/* "exact", "lower", "upper", "none" (JSON drops.heapBound). */
const char *mp_heap_bound_name(enum mp_heap_bound b);

#endif /* MP_PROFILE_H */
