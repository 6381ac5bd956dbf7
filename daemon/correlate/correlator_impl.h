/* SPDX-License-Identifier: MIT */
/*
 * The correlator's inside, shared by its sections (one file each: names,
 * threads, attribution, heap, temporaries, sampled mode, RSS, markers,
 * pools). Not an interface: use correlator.h.
 */
#ifndef MP_CORRELATOR_IMPL_H
#define MP_CORRELATOR_IMPL_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "correlator.h"
#include "hashmap.h"
#include "live.h"

/* Bounds: the marker stream comes from the profiled process and is hostile;
 * none of these may let it grow the daemon without limit. */
#define MAX_DEPTH 256
#define MAX_TAG_DEPTH 64
#define MAX_THREADS 16384
#define MAX_NAMES 65535 /* 16 bits in the block value, 0 = none */
#define MAX_NAME_LEN 256
#define MAX_SHAPES 64
#define MAX_PHASES 256
#define MAX_SRC_FRAMES 16 /* inlined functions per frame considered */
#define MAX_POOLS 4095 /* owners and tags: 12 bits in the block value */
#define MAX_INVOCATIONS ((1u << 21) - 2)
#define DEFAULT_INVOCATIONS 65536
#define DEFAULT_RSS_POINTS 4096
#define OWNER_CACHE_SIZE 8192 /* callers cached before starting over */
#define MAX_PENDING 4096
#define DEFAULT_SITES 65536
#define SITE_HINTS 256 /* power of two */
#define MAX_SITES (1u << 24)

/* The value stored with each live block (mp_heap_cb): where the allocation
 * was charged, so its free is charged to the same owner, tag and
 * allocating kernel without a second address table. */
#define U_OWNER_SHIFT 0
#define U_TAG_SHIFT 12
#define U_NAME_SHIFT 24
#define U_INV_SHIFT 40
#define U_POOL_MASK 0xfffu
#define U_NAME_MASK 0xffffu
#define U_INV_MASK 0x1fffffu
/* When the allocation has a site, the owner and name fields hold the site
 * index instead (the site knows both), so its free can update the site's
 * in-use figures: site = owner field | name field << 12. */
#define U_SITE_FLAG (1ull << 63)
/* A block of a --alloc function with pool=: the pool's index is in the
 * owner field and the slice is in the pool table. */
#define U_POOL_FLAG (1ull << 62)
/* Limits: a block counted in the heap's "(other sites)" entry; the other
 * fields as for a block without a site (the entry has no owner or name). */
#define U_OTHER_FLAG (1ull << 61)
/* An anonymous mapping (mappings.c): both flags, which no heap block or
 * pool slice has; the other fields as for a block without a site. */
#define U_MAP_FLAGS (U_SITE_FLAG | U_POOL_FLAG)
/* fn_pool[] of mmap, mremap and munmap (what a partial munmap leaves):
 * their blocks are mappings, not a pool's. */
#define FN_POOL_MAP UINT32_MAX
#define MAX_MEMPOOLS 256
#define MAX_SLICES (1u << 24)
#define FN_POOL_MAX 64 /* MP_LIVE_FN_MAX */

/* Limits (sites.c): entries of p->sites that are no site. A site evicted
 * from the full table while blocks of it are live: their values still
 * name its index, so it stays, retired, until they are freed (its
 * inuse_objects counts them, its owner and name are theirs; its other
 * figures are in "(other sites)", where their frees go) or rewritten;
 * then free, for a new site. Never in a profile handed out. */
#define SITE_F_RETIRED 0x8000u
#define SITE_F_FREE 0x4000u
#define SITE_F_HOLE (SITE_F_RETIRED | SITE_F_FREE)

struct ss_node {
	uint64_t key;
	uint32_t site;
};

/* A live slice of a pool; indices are 1-based, 0 ends a list. */
struct slice {
	uint64_t addr, size;
	uint32_t pool;
	uint32_t site; /* index + 1, 0: none */
	uint32_t ptag; /* index into the pool's tags, MP_NONE: none */
	uint32_t next_free; /* the free list, while not live */
	uint32_t pnext, pprev; /* the pool's live slices */
};

/* Slices of one tag that a pool reset frees. */
struct tag_sum {
	uint64_t bytes, count;
};

struct rss_cand {
	uint64_t ts;
	uint64_t val; /* MP_UNKNOWN: no sample yet */
};

struct thread;

/* One open kernel. */
struct frame {
	struct frame *up; /* enclosing open kernel, same thread */
	struct frame *prev, *next; /* all open kernels, in begin order */
	struct thread *thr;
	uint32_t inv; /* record index, or MP_NONE beyond the cap */
	uint32_t name; /* = kernel aggregate index */
	struct mp_invocation scratch; /* the record when inv == MP_NONE */
	struct rss_cand rss_b;
	bool rss_b_pending;
	/* index + 1 of the owner and tag buckets this invocation was last
	 * charged to (0: none): a thread charges the same ones again and
	 * again, and the search of the breakdowns was a visible share of
	 * every heap event */
	uint32_t own_ix, tag_ix;
};

struct thread {
	uint32_t tid;
	uint32_t depth;
	uint32_t overflow; /* begins beyond MAX_DEPTH not ended yet */
	struct frame *top;
	uint32_t ntags, tag_overflow;
	uint16_t tags[MAX_TAG_DEPTH];
	/* Record number and time of the thread's last record: the next
	 * one must be last_seq + 1, or records were lost in between. */
	bool seq_known;
	uint32_t last_seq;
	uint64_t last_ts;
};

/* A site allocated at lately, by thread, caller and stack (0: none): the
 * owner and the site of the next allocation of the same caller and stack
 * on the same thread in the same kernel name and phase, while the owner
 * cache holds what it held then (site_gen). */
struct site_hint {
	uint64_t caller;
	uint32_t tid, stack, name, phase, gen, owner, site;
};

/* An ended kernel whose RSS readings may still be improved by the next
 * sample (the nearest sample can come after the event). */
struct pending {
	uint32_t inv, name;
	uint64_t begin_ns, end_ns;
	struct rss_cand b, e;
	bool b_pending;
	bool lost; /* MP_INV_F_MARKERS_LOST: no kernel figures */
};

enum { RULE_DSO, RULE_FN, RULE_SRC, RULE_PY };

struct owner_rule {
	char *glob, *name;
	int kind;
};

struct owner_slot {
	uint64_t caller;
	uint32_t owner;
};

struct mp_correlator {
	struct mp_correlator_opts opts;
	struct mp_profile *p;
	struct mp_live *live; /* the blocks live now, paired with their frees */
	bool started, finished, finishing, oom;
	uint64_t live_bytes, live_count;
	/* Sampled mode (docs/PROFILE.md "Sampled figures"): estimated
	 * variance of live_bytes, its highest value, and the estimated
	 * number of allocations (every time live_bytes could peak). */
	double live_var, live_var_max, n_allocs_est;
	uint64_t live_scaled; /* live blocks whose size is an estimate */
	/* Bumped at each new process peak (p->peak_bytes): a site whose
	 * peak_ver is not this one has not changed since that peak
	 * (site_keep_peak()). */
	uint64_t peak_ver;
	/* Who held the peaks (pool_keep_peak()): bumped at each new peak of
	 * the process or of the current phase, and its values at the last new
	 * peak of each; ph_reached: the current phase reached a new peak since
	 * it was entered, so its breakdown is to be written when it is left
	 * (corr_peak_parts_phase()). */
	uint64_t epoch, peak_epoch, ph_epoch;
	bool ph_reached;

	uint32_t names_cap, kernels_cap, invs_cap, phases_cap, owners_cap, tags_cap, rss_cap;
	struct mp_hashmap names; /* kernel name -> index in p->names */

	/* Threads by tid: open addressing of its own (threads.c), not
	 * mp_hashmap, as a lookup runs per event whenever the thread changes
	 * (docs/ARCHITECTURE.md "Hash tables"). */
	struct thread **thr_ht;
	uint32_t thr_ht_cap, n_threads;
	struct thread *last_thr;

	struct frame *open_head, *open_tail, *free_frames;

	uint32_t cur_phase;
	uint64_t phase_entered;

	struct owner_rule *rules;
	uint32_t n_rules;
	struct owner_slot *owner_cache; /* OWNER_CACHE_SIZE, in order cached */
	struct mp_hashmap owner_map; /* caller -> index in owner_cache */
	bool frame_rules; /* some fn:, src: or py: rule */
	bool native_frame_rules; /* some fn: or src: rule (native frames resolved) */
	uint32_t *stack_owner; /* per stack id: owner + 1, 0 unknown */
	uint32_t stack_owner_cap;
	uint32_t owner_cache_used;
	/* Bumped whenever corr_owner_of() may answer differently for a caller
	 * (its cache emptied): the threads' site hints are stale then. */
	uint32_t site_gen;
	struct site_hint site_hint[SITE_HINTS];

	struct rss_cand last_rss;
	struct pending *pending;
	uint32_t n_pending;

	int64_t rss_member[MP_RSS_MEMBER_COUNT];
	bool rss_member_known[MP_RSS_MEMBER_COUNT];

	uint32_t sites_cap, site_vars_cap;
	struct mp_hashmap site_map; /* struct site_key -> index in p->sites */
	/* Heap sites with a stack: per stack id, the index + 1 of the first
	 * site of that stack still listed (0: none), which the site map does
	 * not hold, and STACK_SITE_MORE when the map holds others of it
	 * (another thread, kernel, phase or owner); n_stack_sites: those
	 * first sites (attribution.c "Sites by stack"). */
	uint32_t *stack_site;
	uint32_t stack_site_cap, n_stack_sites;
	bool stack_site_lost; /* the array failed to grow once */
	/* Limits: per pool (heap: 0) its "(other sites)" entry's index + 1,
	 * 0: none yet. */
	uint32_t other_site[MAX_MEMPOOLS + 1];
	/* The site table past its bound (space-saving, sites.c), from the
	 * first site that finds it full on: the listed sites in a min-heap
	 * by key (error_space + alloc_space; a key only grows, so the heap
	 * holds each as it was when last looked at, refreshed when it comes
	 * to the top); the holes of p->sites (SITE_F_RETIRED or
	 * SITE_F_FREE), at most ss_spare, and the free ones' indices. */
	struct ss_node *ss_heap;
	uint32_t ss_n, ss_holes, ss_spare, ss_n_free;
	uint32_t *ss_free;
	uint64_t sites_evicted;
	/* Where the blocks' values are kept (mp_correlator_values_in()),
	 * and whether mp_correlator_on_heap() returned some to a caller that
	 * keeps them elsewhere, where they cannot be rewritten. */
	struct mp_live *values;
	bool users_outside;

	/* pools */
	uint32_t mempools_cap;
	uint32_t *pool_head; /* per pool: first live slice */
	struct slice *slices; /* [0] unused */
	uint32_t slices_cap, slices_used, free_slices, n_live_slices;
	struct mp_hashmap slice_map; /* (pool, address) -> live slice */
	uint32_t fn_pool[FN_POOL_MAX]; /* pool + 1 of a probed function, 0: none */
	struct tag_sum *reset_sums; /* a reset's slices per tag of the pool */
	uint32_t reset_sums_cap;
	uint32_t apply_stack; /* mp_correlator_apply_heap(): its @stack */
	uint64_t maps_live; /* reserved bytes of the live anonymous mappings */
};

/* The sections' entry points into each other. Each file defines those of
 * its section; correlator.c has the lifecycle and the arrays' growth. */

/* correlator.c */
int corr_grow(void **arr, uint32_t *cap, uint32_t need, size_t elsz);
int corr_pool_add(struct mp_pool **v, uint32_t *n, uint32_t *cap, const char *name);

/* names.c, threads.c */
int corr_name_intern(struct mp_correlator *c, const char *name, uint32_t *ret);
struct thread *corr_thread_find_slow(struct mp_correlator *c, uint32_t tid);
int corr_thread_get(struct mp_correlator *c, uint32_t tid, struct thread **ret);

/* attribution.c */
struct site_key;
uint32_t corr_owner_of(struct mp_correlator *c, uint64_t caller);
uint32_t corr_owner_of_stack(struct mp_correlator *c, uint64_t caller, uint32_t stack);
uint32_t corr_site_new(struct mp_correlator *c, uint64_t caller, uint32_t name, uint32_t phase,
		       uint32_t owner, uint32_t tid, uint32_t stack, uint32_t pool);
void corr_limits_fill(const struct mp_correlator *c, struct mp_profile *p);
uint32_t corr_site_of(struct mp_correlator *c, uint64_t caller, uint32_t name, uint32_t phase,
		      uint32_t owner, uint32_t tid, uint32_t stack);
void corr_sites_settle(const struct mp_correlator *c, struct mp_profile *p);

uint32_t corr_site_append(struct mp_correlator *c, const struct mp_site *st);
int corr_site_key_add(struct mp_correlator *c, const struct site_key *k, uint64_t hash,
		      uint32_t id);
void corr_site_key_remove(struct mp_correlator *c, const struct site_key *k, uint64_t hash,
			  uint32_t id);
uint32_t corr_site_other(struct mp_correlator *c, uint32_t pool);
uint32_t corr_site_dropped(struct mp_correlator *c, uint32_t pool);

/* sites.c: the site table past its bound */
uint32_t corr_site_evict(struct mp_correlator *c, const struct mp_site *st, uint64_t hash);
struct mp_site *corr_site_retired_free(struct mp_correlator *c, struct mp_site *st);
void corr_sites_compact(const struct mp_correlator *c, struct mp_profile *p);
void corr_sites_free(struct mp_correlator *c);

/* sampled.c */
double corr_sampled_alloc(struct mp_correlator *c, const struct mp_heap_event *ev);
void corr_sampled_tail(struct mp_correlator *c, struct frame *f, double var, bool alloc,
		       uint32_t alloc_inv, uint32_t site, uint32_t owner, uint32_t tag);
void corr_sampled_settle(const struct mp_correlator *c, struct mp_profile *p);

/* rss.c */
void corr_pending_apply(struct mp_profile *p, const struct pending *pe);
void corr_pending_flush(struct mp_correlator *c);

/* peaks.c: who held the peaks, the process's and the phases' */
int corr_peak_parts_phase(const struct mp_correlator *c, struct mp_profile *p, struct mp_phase *ph);
void corr_peak_parts_settle(const struct mp_correlator *c, struct mp_profile *p);

/* markers.c */
int corr_aggregate(struct mp_profile *p, const struct mp_invocation *r);
void corr_frame_close(struct mp_correlator *c, struct frame *f, uint64_t ts, uint32_t flags);
void corr_phase_leave(struct mp_correlator *c, uint64_t ts);
/* mappings.c: a heap event of a mapping (FN_POOL_MAP, U_MAP_FLAGS), as
 * mp_heap_cb; an invocation's begin and end, a phase's, a kernel's
 * aggregate, an RSS reading's anonymous bytes. */
uint64_t corr_map_event(struct mp_correlator *c, const struct mp_heap_event *ev);
void corr_maps_begin(const struct mp_correlator *c, struct mp_invocation *r);
void corr_maps_end(const struct mp_correlator *c, struct mp_invocation *r);
void corr_maps_phase_enter(const struct mp_correlator *c, struct mp_phase *ph);
void corr_maps_phase_leave(const struct mp_correlator *c, struct mp_phase *ph);
void corr_maps_aggregate(struct mp_kernel *k, const struct mp_invocation *r);
void corr_maps_rss(struct mp_correlator *c, uint64_t rss_anon);

/* pools.c, pool_slices.c */
int corr_pools_begin(struct mp_correlator *c, struct mp_invocation *r);
void corr_pools_end(struct mp_correlator *c, struct mp_invocation *r);
int corr_pool_buckets_merge(struct mp_pool_bucket **dst, uint32_t *n,
			    const struct mp_pool_bucket *src, uint32_t ns);
int corr_pool_tag_buckets_merge(struct mp_pool_tag_bucket **dst, uint32_t *n,
				const struct mp_pool_tag_bucket *src, uint32_t ns);
int corr_aggregate_open(struct mp_correlator *c, struct mp_profile *q, const struct frame *f,
			struct mp_invocation *tmp);
int corr_pool_record(struct mp_correlator *c, const struct mp_record *rec);
int corr_pools_phase_enter(struct mp_correlator *c, struct mp_phase *ph);
void corr_pools_phase_leave(struct mp_correlator *c, struct mp_phase *ph);
uint64_t corr_pool_heap_alloc(struct mp_correlator *c, const struct mp_heap_event *ev);
uint32_t corr_slice_find(const struct mp_correlator *c, uint32_t pool, uint64_t addr);
uint32_t corr_slice_insert(struct mp_correlator *c, uint32_t pool, uint64_t addr, uint64_t size);
void corr_slice_remove(struct mp_correlator *c, uint32_t i);

/*
 * Helpers of every section, several on the per-record path. Those that
 * are not marked inline leave the choice to the compiler as they did in
 * one file; not every section uses every one of them.
 */
#define CORR_HELPER static __attribute__((unused))

/* Small arrays whose capacity is implied by their length (powers of two):
 * the model keeps only the length. */
CORR_HELPER int corr_grow_implicit(void **arr, uint32_t n, size_t elsz)
{
	void *a;

	if (n >= 2 && (n & (n - 1)) != 0)
		return 0;
	if (n == 1)
		return 0; /* capacity 2 was allocated at n == 0 */
	a = reallocarray(*arr, n ? (size_t)n * 2 : 2, elsz);
	if (!a)
		return -ENOMEM;
	*arr = a;
	return 0;
}

/* Whether the element at @el begins with @key, one or two uint32_t (ids):
 * fixed-size copies the compiler turns into loads (a memcmp call per
 * bucket would double the cost of a pool event). */
static inline bool key_eq(const char *el, const void *key, size_t keysz)
{
	uint32_t a[2] = { 0, 0 }, b[2] = { 0, 0 };

	if (keysz == sizeof(uint32_t)) {
		memcpy(a, el, sizeof(uint32_t));
		memcpy(b, key, sizeof(uint32_t));
	} else {
		memcpy(a, el, sizeof(a));
		memcpy(b, key, sizeof(b));
	}
	return a[0] == b[0] && a[1] == b[1];
}

/* The element of *@v (*@n of @elsz bytes, each beginning with a key of
 * @keysz bytes: one or two uint32_t) whose key is @key; one is appended,
 * zeroed but for the key, when none is. NULL when out of memory. For the
 * breakdowns by id of profile.h, whose capacity is implied. */
static inline void *bucket_get(void *v, uint32_t *n, size_t elsz, const void *key, size_t keysz)
{
	char *a = *(char **)v;

	for (uint32_t i = 0; i < *n; i++)
		if (key_eq(a + (size_t)i * elsz, key, keysz))
			return a + (size_t)i * elsz;
	if (corr_grow_implicit(v, *n, elsz) < 0)
		return NULL;
	a = *(char **)v + (size_t)(*n)++ * elsz;
	memset(a, 0, elsz);
	memcpy(a, key, keysz);
	return a;
}

CORR_HELPER struct mp_invocation *inv_rec(struct mp_correlator *c, struct frame *f)
{
	return f->inv != MP_NONE ? &c->p->invocations[f->inv] : &f->scratch;
}

CORR_HELPER void start(struct mp_correlator *c, uint64_t ts)
{
	if (c->started)
		return;
	c->started = true;
	c->p->begin_ns = c->opts.begin_ns ? c->opts.begin_ns : ts;
}

/* The thread state of @tid, NULL when none: the last one found first. */
static inline struct thread *thread_find(struct mp_correlator *c, uint32_t tid)
{
	if (c->last_thr && c->last_thr->tid == tid)
		return c->last_thr;
	return corr_thread_find_slow(c, tid);
}

/* The attribution rule: @tid's innermost open kernel, else the process's
 * most recently begun open kernel (cross-thread), else none. */
CORR_HELPER struct frame *attribute(struct mp_correlator *c, uint32_t tid, struct thread **ret_thr,
				    bool *ret_cross)
{
	struct thread *t = thread_find(c, tid);

	*ret_thr = t;
	*ret_cross = false;
	if (t && t->top)
		return t->top;
	if (c->open_tail)
		*ret_cross = true;
	return c->open_tail;
}

/* The tag an allocation of thread @t is charged to: its innermost open one. */
CORR_HELPER uint32_t open_tag(const struct thread *t)
{
	return t && t->ntags ? t->tags[t->ntags - 1] : MP_TAG_NONE;
}

/* The traffic counters every kind of bucket has (profile.h), summed. */
#define ADD_COUNTS(d, s)                              \
	do {                                          \
		(d)->alloc_bytes += (s)->alloc_bytes; \
		(d)->alloc_count += (s)->alloc_count; \
		(d)->free_bytes += (s)->free_bytes;   \
		(d)->free_count += (s)->free_count;   \
	} while (0)

/* Heap events of probed pool functions, and frees of their blocks; and
 * those of anonymous mappings (FN_POOL_MAP, U_MAP_FLAGS), which share the
 * branch so that the heap's path tests nothing more. */
CORR_HELPER bool pool_heap_event(struct mp_correlator *c, const struct mp_heap_event *ev)
{
	if (ev->kind == MP_HEAP_FREE)
		return (ev->user & U_POOL_FLAG) != 0;
	return ev->fn < FN_POOL_MAX && c->fn_pool[ev->fn];
}

/* Signed figures are updated in unsigned arithmetic: a hostile size must
 * not make them overflow (undefined behaviour), only wrap. */
CORR_HELPER void add_signed(int64_t *v, uint64_t d)
{
	*v = (int64_t)((uint64_t)*v + d);
}

/* No Linux user address space reaches 2^56 bytes (x86-64 with 5-level
 * paging is the largest): no block, nor all live blocks together, can be
 * that large. */
#define CORR_SIZE_LIMIT (1ull << 56)

/* Heap event @ev (allocator arguments, or a ring record: the target's
 * claims) names a block that cannot exist: refused, counted, reaching no
 * figure. Only blocks handed out (addr set) are sized: a failed
 * malloc(2^62) is true. */
static inline __attribute__((always_inline)) bool corr_size_refused(struct mp_correlator *c,
								    const struct mp_raw_event *ev)
{
	if (__builtin_expect(!ev->addr || ev->size <= CORR_SIZE_LIMIT - c->live_bytes, 1))
		return false;
	c->p->rejected[MP_REJECT_SIZE]++;
	c->p->corruption |= MP_CORRUPT_RECORDS_REJECTED;
	return true;
}

static inline void sub_clamped(uint64_t *v, uint64_t d)
{
	*v = *v >= d ? *v - d : 0;
}

/* Sites at the peak (docs/PROFILE.md "Sites at the peak"), before @st's
 * live figures change: if they are still those of the current process
 * peak (nothing changed them since), they are kept as its figures there. */
static inline __attribute__((always_inline)) void site_keep_peak(const struct mp_correlator *c,
								 struct mp_site *st)
{
	if (st->peak_ver != c->peak_ver) {
		st->peak_ver = c->peak_ver;
		st->peak_objects = st->inuse_objects;
		st->peak_space = st->inuse_space;
	}
}

/* Who held the peak (docs/PROFILE.md "Who held the peak"), before the live
 * bytes of owner or tag @pl change: the bytes it holds, when nothing
 * changed them since the current process peak, or the current phase's,
 * are its bytes there. A new peak only bumps the epoch, so reaching one
 * costs nothing per owner, and a change costs one compare. */
static inline __attribute__((always_inline)) void pool_keep_peak(const struct mp_correlator *c,
								 struct mp_pool *pl)
{
	if (__builtin_expect(pl->epoch != c->epoch, 0)) {
		if (pl->epoch < c->peak_epoch)
			pl->peak_share = pl->live_bytes;
		if (pl->epoch < c->ph_epoch)
			pl->ph_share = pl->live_bytes;
		pl->epoch = c->epoch;
	}
}

/* A new process peak, reached with live_bytes as they are. */
static inline __attribute__((always_inline)) void process_new_peak(struct mp_correlator *c)
{
	c->peak_epoch = ++c->epoch;
}

/* A new peak of the current phase, reached with live_bytes as they are. */
static inline __attribute__((always_inline)) void phase_new_peak(struct mp_correlator *c)
{
	c->ph_epoch = ++c->epoch;
	c->ph_reached = true;
}

/* A new process peak, reached with a block of @size of site @site (MP_NONE:
 * none) live on top of its figures. */
static inline __attribute__((always_inline)) void site_new_peak(struct mp_correlator *c,
								uint32_t site, uint64_t size)
{
	c->peak_ver++;
	if (site != MP_NONE) {
		struct mp_site *st = &c->p->sites[site];

		st->peak_ver = c->peak_ver;
		st->peak_objects = st->inuse_objects + 1;
		st->peak_space = st->inuse_space + size;
	}
}

/* What tells sites apart: a heap site has pool 0, a pool slice's site the
 * pool + 1 (the hash ignores the pool, lookups compare it). */
struct site_key {
	uint64_t caller;
	uint32_t name, phase, owner, tid, stack, pool;
};

/* corr_site_new(), corr_site_of(): a site of pool @pool (0: the heap);
 * past the site table's bound the pool's "(other sites)" entry. */

CORR_HELPER uint64_t site_hash(const struct site_key *k)
{
	/* one final mix over odd multiples of the fields: 5 multiplies,
	 * where a mix per field took 12 */
	return mp_hash_u64(k->caller ^
			   ((uint64_t)k->name << 32 | k->phase) * 0x9e3779b97f4a7c15ull ^
			   ((uint64_t)k->owner << 32 | k->tid) * 0xc2b2ae3d27d4eb4full ^
			   (uint64_t)k->stack * 0x165667b19e3779f9ull);
}

CORR_HELPER bool site_eq(const void *ctx, uint32_t id, const void *key)
{
	const struct mp_site *st = &((const struct mp_profile *)ctx)->sites[id];
	const struct site_key *k = key;

	return st->caller == k->caller && st->name == k->name && st->phase == k->phase &&
	       st->owner == k->owner && st->tid == k->tid && st->stack == k->stack &&
	       st->pool == k->pool;
}

#endif /* MP_CORRELATOR_IMPL_H */
