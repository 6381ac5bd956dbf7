/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fnmatch.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "correlator.h"
#include "live_impl.h"
#include "sampling.h"

_Static_assert(MP_PROFILE_MAX_RANK == MP_MAX_RANK,
	       "the profile keeps every dimension a ring record carries");

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
#define OWNER_CACHE_SIZE 16384 /* power of two */
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
#define MAX_MEMPOOLS 256
#define MAX_SLICES (1u << 24)
#define FN_POOL_MAX 64 /* MP_LIVE_FN_MAX */

/* A live slice of a pool; indices are 1-based, 0 ends a list. */
struct slice {
	uint64_t addr, size;
	uint32_t pool;
	uint32_t site; /* index + 1, 0: none */
	uint32_t ptag; /* index into the pool's tags, MP_NONE: none */
	uint32_t hnext; /* hash chain */
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

/* A site allocated at lately, by thread and caller: the owner and the site
 * of the next allocation of the same caller on the same thread in the same
 * kernel name and phase, while the owner cache holds what it held then
 * (site_gen). */
struct site_hint {
	uint64_t caller;
	uint32_t tid, name, phase, gen, owner, site;
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

enum { RULE_DSO, RULE_FN, RULE_SRC };

struct owner_rule {
	char *glob, *name;
	int kind;
};

struct owner_slot {
	uint64_t caller; /* 0: empty */
	uint32_t owner;
};

struct mp_correlator {
	struct mp_correlator_opts opts;
	struct mp_profile *p;
	bool started, finished, finishing, oom;
	uint64_t live_bytes, live_count;
	/* Sampled mode (docs/PROFILE.md "Sampled figures"): estimated
	 * variance of live_bytes, its highest value, and the estimated
	 * number of allocations (every time live_bytes could peak). */
	double live_var, live_var_max, n_allocs_est;
	uint64_t live_scaled; /* live blocks whose size is an estimate */

	uint32_t names_cap, invs_cap, phases_cap, owners_cap, tags_cap, rss_cap;
	uint32_t *name_ht; /* id + 1, 0 empty */
	uint32_t name_ht_cap;

	struct thread **thr_ht;
	uint32_t thr_ht_cap, n_threads;
	struct thread *last_thr;

	struct frame *open_head, *open_tail, *free_frames;

	uint32_t cur_phase;
	uint64_t phase_entered;

	struct owner_rule *rules;
	uint32_t n_rules;
	struct owner_slot *owner_cache;
	bool frame_rules; /* some fn: or src: rule */
	uint32_t *stack_owner; /* per stack id: owner + 1, 0 unknown */
	uint32_t stack_owner_cap;
	uint32_t owner_cache_used;
	/* Bumped whenever owner_of() may answer differently for a caller
	 * (its cache emptied): the threads' site hints are stale then. */
	uint32_t site_gen;
	struct site_hint site_hint[SITE_HINTS];

	struct rss_cand last_rss;
	struct pending *pending;
	uint32_t n_pending;

	int64_t rss_member[MP_RSS_MEMBER_COUNT];
	bool rss_member_known[MP_RSS_MEMBER_COUNT];

	uint32_t sites_cap, site_vars_cap;
	uint32_t *site_ht; /* site index + 1, 0 empty */
	uint32_t site_ht_cap;

	/* pools */
	uint32_t mempools_cap;
	uint32_t *pool_head; /* per pool: first live slice */
	struct slice *slices; /* [0] unused */
	uint32_t slices_cap, slices_used, free_slices, n_live_slices;
	uint32_t *slice_ht;
	uint32_t slice_ht_cap;
	uint32_t fn_pool[FN_POOL_MAX]; /* pool + 1 of a probed function, 0: none */
	struct tag_sum *reset_sums; /* a reset's slices per tag of the pool */
	uint32_t reset_sums_cap;
	uint32_t apply_stack; /* mp_correlator_apply_heap(): its @stack */
};

static int grow(void **arr, uint32_t *cap, uint32_t need, size_t elsz)
{
	uint32_t ncap;
	void *n;

	if (need <= *cap)
		return 0;
	ncap = *cap ? *cap : 8;
	while (ncap < need)
		ncap *= 2;
	n = reallocarray(*arr, ncap, elsz);
	if (!n)
		return -ENOMEM;
	memset((char *)n + (size_t)*cap * elsz, 0, (size_t)(ncap - *cap) * elsz);
	*arr = n;
	*cap = ncap;
	return 0;
}

/* Small arrays whose capacity is implied by their length (powers of two):
 * the model keeps only the length. */
static int grow_implicit(void **arr, uint32_t n, size_t elsz)
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
	if (grow_implicit(v, *n, elsz) < 0)
		return NULL;
	a = *(char **)v + (size_t)(*n)++ * elsz;
	memset(a, 0, elsz);
	memcpy(a, key, keysz);
	return a;
}

static uint32_t hash_str(const char *s)
{
	uint32_t h = 2166136261u;

	for (; *s; s++)
		h = (h ^ (uint8_t)*s) * 16777619u;
	return h;
}

static uint32_t hash_u64(uint64_t v)
{
	v ^= v >> 33;
	v *= 0xff51afd7ed558ccdull;
	v ^= v >> 33;
	return (uint32_t)v;
}

static struct mp_invocation *inv_rec(struct mp_correlator *c, struct frame *f)
{
	return f->inv != MP_NONE ? &c->p->invocations[f->inv] : &f->scratch;
}

static int pool_add(struct mp_pool **v, uint32_t *n, uint32_t *cap, const char *name)
{
	char *d;

	if (grow((void **)v, cap, *n + 1, sizeof(**v)) < 0)
		return -ENOMEM;
	d = strndup(name, MAX_NAME_LEN);
	if (!d)
		return -ENOMEM;
	(*v)[*n] = (struct mp_pool){ .name = d };
	return (*n)++;
}

int mp_correlator_new(const struct mp_correlator_opts *opts, struct mp_correlator **ret)
{
	struct mp_correlator *c;

	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	if (opts)
		c->opts = *opts;
	if (!c->opts.max_invocations)
		c->opts.max_invocations = DEFAULT_INVOCATIONS;
	if (c->opts.max_invocations > MAX_INVOCATIONS)
		c->opts.max_invocations = MAX_INVOCATIONS;
	if (!c->opts.max_rss_points)
		c->opts.max_rss_points = DEFAULT_RSS_POINTS;
	if (c->opts.max_rss_points < 2)
		c->opts.max_rss_points = 2;
	if (!c->opts.max_sites)
		c->opts.max_sites = DEFAULT_SITES;
	if (c->opts.max_sites > MAX_SITES)
		c->opts.max_sites = MAX_SITES;
	c->cur_phase = MP_NONE;
	c->last_rss.val = MP_UNKNOWN;
	c->site_gen = 1; /* a zeroed hint never matches */
	c->p = mp_profile_new();
	/* owner_cache and pending come with the first allocation and the
	 * first kernel: an rss-mode target without markers needs neither
	 * (docs/SERVICE.md, "Memory per target"). */
	if (!c->p || pool_add(&c->p->owners, &c->p->n_owners, &c->owners_cap, "(unknown)") < 0 ||
	    pool_add(&c->p->tags, &c->p->n_tags, &c->tags_cap, "(untagged)") < 0) {
		mp_correlator_free(c);
		return -ENOMEM;
	}
	*ret = c;
	return 0;
}

static void frames_free(struct frame *f, bool scratch)
{
	while (f) {
		struct frame *n = f->next;

		if (scratch && f->inv == MP_NONE) {
			free(f->scratch.inputs);
			free(f->scratch.outputs);
			free(f->scratch.owners);
			free(f->scratch.tags);
			free(f->scratch.pools);
			free(f->scratch.pool_tags);
		}
		free(f);
		f = n;
	}
}

void mp_correlator_free(struct mp_correlator *c)
{
	if (!c)
		return;
	mp_profile_free(c->p);
	free(c->name_ht);
	for (uint32_t i = 0; i < c->thr_ht_cap; i++)
		free(c->thr_ht[i]);
	free(c->thr_ht);
	frames_free(c->open_head, true);
	frames_free(c->free_frames, false);
	for (uint32_t i = 0; i < c->n_rules; i++) {
		free(c->rules[i].glob);
		free(c->rules[i].name);
	}
	free(c->rules);
	free(c->owner_cache);
	free(c->stack_owner);
	free(c->pending);
	free(c->site_ht);
	free(c->pool_head);
	free(c->slices);
	free(c->slice_ht);
	free(c->reset_sums);
	free(c);
}

int mp_correlator_add_owner_rule(struct mp_correlator *c, const char *spec)
{
	const char *eq;
	struct owner_rule *r;
	int kind = RULE_DSO;

	if (spec && !strncmp(spec, "fn:", 3)) {
		kind = RULE_FN;
		spec += 3;
	} else if (spec && !strncmp(spec, "src:", 4)) {
		kind = RULE_SRC;
		spec += 4;
	} else if (spec && !strncmp(spec, "dso:", 4)) {
		spec += 4;
	}
	eq = spec ? strchr(spec, '=') : NULL;
	if (!eq || eq == spec || !eq[1])
		return -EINVAL;
	r = reallocarray(c->rules, c->n_rules + 1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	c->rules = r;
	r = &c->rules[c->n_rules];
	r->glob = strndup(spec, eq - spec);
	r->name = strdup(eq + 1);
	r->kind = kind;
	if (!r->glob || !r->name) {
		free(r->glob);
		free(r->name);
		return -ENOMEM;
	}
	c->n_rules++;
	c->frame_rules |= kind != RULE_DSO;
	/* Owners already cached were named without this rule. */
	if (c->owner_cache)
		memset(c->owner_cache, 0, OWNER_CACHE_SIZE * sizeof(*c->owner_cache));
	c->owner_cache_used = 0;
	c->site_gen++;
	return 0;
}

static void start(struct mp_correlator *c, uint64_t ts)
{
	if (c->started)
		return;
	c->started = true;
	c->p->begin_ns = c->opts.begin_ns ? c->opts.begin_ns : ts;
}

/* ---- names (one kernel aggregate per name, same index) ---- */

static int name_ht_insert(struct mp_correlator *c, uint32_t id)
{
	uint32_t mask = c->name_ht_cap - 1;
	uint32_t i = hash_str(c->p->names[id]) & mask;

	while (c->name_ht[i])
		i = (i + 1) & mask;
	c->name_ht[i] = id + 1;
	return 0;
}

static int name_intern(struct mp_correlator *c, const char *name, uint32_t *ret)
{
	struct mp_profile *p = c->p;
	char buf[MAX_NAME_LEN + 1];
	uint32_t mask, i, id;

	snprintf(buf, sizeof(buf), "%s", name);
	if (c->name_ht_cap) {
		mask = c->name_ht_cap - 1;
		for (i = hash_str(buf) & mask; c->name_ht[i]; i = (i + 1) & mask) {
			if (strcmp(p->names[c->name_ht[i] - 1], buf) == 0) {
				*ret = c->name_ht[i] - 1;
				return 0;
			}
		}
	}
	/* The last slot is kept for "(other)". */
	if (p->n_names >= MAX_NAMES || (p->n_names >= MAX_NAMES - 1 && strcmp(buf, "(other)") != 0))
		return -E2BIG;
	if ((p->n_names + 1) * 2 > c->name_ht_cap) {
		uint32_t ncap = c->name_ht_cap ? c->name_ht_cap * 2 : 64;
		uint32_t *ht = calloc(ncap, sizeof(*ht));

		if (!ht)
			return -ENOMEM;
		free(c->name_ht);
		c->name_ht = ht;
		c->name_ht_cap = ncap;
		for (id = 0; id < p->n_names; id++)
			name_ht_insert(c, id);
	}
	if (grow((void **)&p->names, &c->names_cap, p->n_names + 1, sizeof(*p->names)) < 0)
		return -ENOMEM;
	/* Kernel aggregates share the capacity of names. */
	if (c->names_cap > p->n_kernels) {
		struct mp_kernel *k = reallocarray(p->kernels, c->names_cap, sizeof(*k));

		if (!k)
			return -ENOMEM;
		p->kernels = k;
	}
	id = p->n_names;
	p->names[id] = strdup(buf);
	if (!p->names[id])
		return -ENOMEM;
	p->kernels[id] = (struct mp_kernel){ .name = id, .min_ns = UINT64_MAX };
	p->n_names++;
	p->n_kernels++;
	name_ht_insert(c, id);
	*ret = id;
	return 0;
}

/* ---- threads ---- */

static struct thread *thread_find_slow(struct mp_correlator *c, uint32_t tid)
{
	uint32_t mask, i;

	if (!c->thr_ht_cap)
		return NULL;
	mask = c->thr_ht_cap - 1;
	for (i = hash_u64(tid) & mask; c->thr_ht[i]; i = (i + 1) & mask) {
		if (c->thr_ht[i]->tid == tid) {
			c->last_thr = c->thr_ht[i];
			return c->thr_ht[i];
		}
	}
	return NULL;
}

/* The thread state of @tid, NULL when none: the last one found first. */
static inline struct thread *thread_find(struct mp_correlator *c, uint32_t tid)
{
	if (c->last_thr && c->last_thr->tid == tid)
		return c->last_thr;
	return thread_find_slow(c, tid);
}

static void thread_insert(struct thread **ht, uint32_t cap, struct thread *t)
{
	uint32_t mask = cap - 1, i;

	for (i = hash_u64(t->tid) & mask; ht[i]; i = (i + 1) & mask)
		;
	ht[i] = t;
}

static int thread_get(struct mp_correlator *c, uint32_t tid, struct thread **ret)
{
	struct thread *t = thread_find(c, tid);

	if (t) {
		*ret = t;
		return 0;
	}
	if (c->n_threads >= MAX_THREADS)
		return -E2BIG;
	if ((c->n_threads + 1) * 2 > c->thr_ht_cap) {
		uint32_t ncap = c->thr_ht_cap ? c->thr_ht_cap * 2 : 64;
		struct thread **ht = calloc(ncap, sizeof(*ht));

		if (!ht)
			return -ENOMEM;
		for (uint32_t i = 0; i < c->thr_ht_cap; i++)
			if (c->thr_ht[i])
				thread_insert(ht, ncap, c->thr_ht[i]);
		free(c->thr_ht);
		c->thr_ht = ht;
		c->thr_ht_cap = ncap;
	}
	t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->tid = tid;
	thread_insert(c->thr_ht, c->thr_ht_cap, t);
	c->n_threads++;
	c->last_thr = t;
	*ret = t;
	return 0;
}

/* The attribution rule: @tid's innermost open kernel, else the process's
 * most recently begun open kernel (cross-thread), else none. */
static struct frame *attribute(struct mp_correlator *c, uint32_t tid, struct thread **ret_thr,
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

/* ---- owners ---- */

static uint32_t owner_named(struct mp_correlator *c, const char *name);

static const char *base_name(const char *path)
{
	const char *base;

	if (!path || !*path)
		return NULL;
	base = strrchr(path, '/');
	base = base ? base + 1 : path;
	return *base ? base : NULL;
}

static uint32_t owner_for_path(struct mp_correlator *c, const char *path)
{
	const char *base = base_name(path), *name;

	if (!base)
		return MP_OWNER_UNKNOWN;
	name = base;
	for (uint32_t i = 0; i < c->n_rules; i++) {
		if (c->rules[i].kind == RULE_DSO && fnmatch(c->rules[i].glob, base, 0) == 0) {
			name = c->rules[i].name;
			break;
		}
	}
	return owner_named(c, name);
}

/* The name of the first rule matching at the frame returning to @addr. */
static const char *rule_at(struct mp_correlator *c, uint64_t addr)
{
	struct mp_src_frame sf[MAX_SRC_FRAMES];
	const char *base = base_name(
		c->opts.resolve_owner ? c->opts.resolve_owner(c->opts.resolve_ctx, addr) : NULL);
	int n = 0;

	if (c->frame_rules && c->opts.resolve_frames)
		n = c->opts.resolve_frames(c->opts.resolve_ctx, addr, sf, MAX_SRC_FRAMES);
	if (n < 0)
		n = 0;
	for (int j = 0; j < (n ? n : 1); j++) {
		for (uint32_t i = 0; i < c->n_rules; i++) {
			const struct owner_rule *r = &c->rules[i];
			const char *s = r->kind == RULE_DSO ? base :
					j >= n		    ? NULL :
					r->kind == RULE_FN  ? sf[j].function :
							      sf[j].file;

			if (s && fnmatch(r->glob, s, 0) == 0)
				return r->name;
		}
	}
	return NULL;
}

/* Owner by frames: the first rule matching, innermost frame first, else
 * the caller's object. Remembered per stack. */
static uint32_t owner_of_stack(struct mp_correlator *c, uint64_t caller, uint32_t stack)
{
	const uint64_t *frames = &caller;
	uint32_t n = 1, owner = MP_OWNER_UNKNOWN;
	const char *name = NULL;

	if (stack && stack < c->stack_owner_cap && c->stack_owner[stack])
		return c->stack_owner[stack] - 1;
	if (stack && c->opts.stack_frames) {
		n = c->opts.stack_frames(c->opts.resolve_ctx, stack, &frames);
		if (!n) {
			frames = &caller;
			n = 1;
		}
	}
	for (uint32_t i = 0; i < n && !name; i++)
		name = rule_at(c, frames[i]);
	owner = name ? owner_named(c, name) :
		       owner_for_path(c,
				      c->opts.resolve_owner ?
					      c->opts.resolve_owner(c->opts.resolve_ctx, caller) :
					      NULL);
	if (!stack)
		return owner; /* the caller's owner cache keeps it */
	if (stack >= c->stack_owner_cap && stack < (1u << 20)) {
		uint32_t ncap = c->stack_owner_cap ? c->stack_owner_cap : 1024;
		uint32_t *t;

		while (ncap <= stack)
			ncap *= 2;
		t = reallocarray(c->stack_owner, ncap, sizeof(*t));
		if (!t)
			return owner;
		memset(t + c->stack_owner_cap, 0, (ncap - c->stack_owner_cap) * sizeof(*t));
		c->stack_owner = t;
		c->stack_owner_cap = ncap;
	}
	if (stack < c->stack_owner_cap)
		c->stack_owner[stack] = owner + 1;
	return owner;
}

static uint32_t owner_named(struct mp_correlator *c, const char *name)
{
	int r;

	for (uint32_t i = 1; i < c->p->n_owners; i++)
		if (strncmp(c->p->owners[i].name, name, MAX_NAME_LEN) == 0)
			return i;
	if (c->p->n_owners >= MAX_POOLS)
		return MP_OWNER_UNKNOWN;
	r = pool_add(&c->p->owners, &c->p->n_owners, &c->owners_cap, name);
	if (r < 0) {
		c->oom = true;
		return MP_OWNER_UNKNOWN;
	}
	return r;
}

static uint32_t owner_of(struct mp_correlator *c, uint64_t caller)
{
	const uint32_t mask = OWNER_CACHE_SIZE - 1;
	uint32_t i, owner;

	if (!caller || !c->opts.resolve_owner)
		return MP_OWNER_UNKNOWN;
	if (!c->owner_cache)
		c->owner_cache = calloc(OWNER_CACHE_SIZE, sizeof(*c->owner_cache));
	if (!c->owner_cache)
		return owner_for_path(c, c->opts.resolve_owner(c->opts.resolve_ctx, caller));
	for (i = hash_u64(caller) & mask; c->owner_cache[i].caller; i = (i + 1) & mask)
		if (c->owner_cache[i].caller == caller)
			return c->owner_cache[i].owner;
	owner = c->frame_rules ?
			owner_of_stack(c, caller, 0) :
			owner_for_path(c, c->opts.resolve_owner(c->opts.resolve_ctx, caller));
	/* A process with very many call sites: start over rather than grow. */
	if (c->owner_cache_used >= OWNER_CACHE_SIZE / 2) {
		memset(c->owner_cache, 0, OWNER_CACHE_SIZE * sizeof(*c->owner_cache));
		c->owner_cache_used = 0;
		c->site_gen++;
		i = hash_u64(caller) & mask;
	}
	c->owner_cache[i] = (struct owner_slot){ .caller = caller, .owner = owner };
	c->owner_cache_used++;
	return owner;
}

/* ---- allocation sites ---- */

static uint32_t site_hash(uint64_t caller, uint32_t name, uint32_t phase, uint32_t owner,
			  uint32_t tid, uint32_t stack)
{
	/* one final mix over odd multiples of the fields: 4 multiplies,
	 * where a mix per field took 8 */
	return hash_u64(caller ^ ((uint64_t)name << 32 | phase) * 0x9e3779b97f4a7c15ull ^
			((uint64_t)owner << 32 | tid) * 0xc2b2ae3d27d4eb4full ^
			(uint64_t)stack * 0x165667b19e3779f9ull);
}

static void site_ht_insert(struct mp_correlator *c, uint32_t id)
{
	const struct mp_site *st = &c->p->sites[id];
	uint32_t mask = c->site_ht_cap - 1;
	uint32_t i =
		site_hash(st->caller, st->name, st->phase, st->owner, st->tid, st->stack) & mask;

	while (c->site_ht[i])
		i = (i + 1) & mask;
	c->site_ht[i] = id + 1;
}

/* A new site (MP_NONE beyond the cap, counted, or out of memory). */
static uint32_t site_new(struct mp_correlator *c, uint64_t caller, uint32_t name, uint32_t phase,
			 uint32_t owner, uint32_t tid, uint32_t stack)
{
	struct mp_profile *p = c->p;
	uint32_t id;

	if (p->n_sites >= c->opts.max_sites) {
		p->sites_dropped++;
		return MP_NONE;
	}
	if ((p->n_sites + 1) * 2 > c->site_ht_cap) {
		uint32_t ncap = c->site_ht_cap ? c->site_ht_cap * 2 : 64;
		uint32_t *ht = calloc(ncap, sizeof(*ht));

		if (!ht) {
			c->oom = true;
			return MP_NONE;
		}
		free(c->site_ht);
		c->site_ht = ht;
		c->site_ht_cap = ncap;
		for (id = 0; id < p->n_sites; id++)
			site_ht_insert(c, id);
	}
	if (grow((void **)&p->sites, &c->sites_cap, p->n_sites + 1, sizeof(*p->sites)) < 0) {
		c->oom = true;
		return MP_NONE;
	}
	if (c->opts.sample_bytes && grow((void **)&p->site_vars, &c->site_vars_cap, p->n_sites + 1,
					 sizeof(*p->site_vars)) < 0) {
		c->oom = true;
		return MP_NONE;
	}
	id = p->n_sites++;
	p->sites[id] = (struct mp_site){ .caller = caller,
					 .name = name,
					 .phase = phase,
					 .owner = owner,
					 .tid = tid,
					 .stack = stack };
	site_ht_insert(c, id);
	return id;
}

/* The site of an allocation, created if new; MP_NONE beyond the cap (the
 * allocation is counted in sites_dropped) or when out of memory. With call
 * stacks, allocations from one caller on different paths are different
 * sites. */
static uint32_t site_of(struct mp_correlator *c, uint64_t caller, uint32_t name, uint32_t phase,
			uint32_t owner, uint32_t tid, uint32_t stack)
{
	struct mp_profile *p = c->p;
	uint32_t mask, i;

	if (c->site_ht_cap) {
		mask = c->site_ht_cap - 1;
		for (i = site_hash(caller, name, phase, owner, tid, stack) & mask; c->site_ht[i];
		     i = (i + 1) & mask) {
			const struct mp_site *st = &p->sites[c->site_ht[i] - 1];

			if (st->caller == caller && st->name == name && st->phase == phase &&
			    st->owner == owner && st->tid == tid && st->stack == stack && !st->pool)
				return c->site_ht[i] - 1;
		}
	}
	return site_new(c, caller, name, phase, owner, tid, stack);
}

/* ---- heap accounting ---- */

/* Signed figures are updated in unsigned arithmetic: a hostile size must
 * not make them overflow (undefined behaviour), only wrap. */
static void add_signed(int64_t *v, uint64_t d)
{
	*v = (int64_t)((uint64_t)*v + d);
}

/* @var: the variance of @size as an estimate (0 when exact). */
static inline __attribute__((always_inline)) void mem_alloc(struct mp_mem_stats *m, uint64_t size,
							    double var)
{
	add_signed(&m->bytes_added, size);
	m->tensors_added++;
	m->alloc_bytes += size;
	m->alloc_count++;
	if (var) /* only sampled mode has any: keep precise mode's path */
		m->alloc_var += var;
}

static inline __attribute__((always_inline)) void mem_free(struct mp_mem_stats *m, uint64_t size,
							   double var)
{
	add_signed(&m->bytes_added, -size);
	m->tensors_added--;
	m->free_bytes += size;
	m->free_count++;
	if (var) /* only sampled mode has any: keep precise mode's path */
		m->free_var += var;
}

/* @hint: index + 1 of the bucket found last time (0: none), tried first
 * and updated. */
static inline int bucket_add(struct mp_bucket **v, uint32_t *n, uint32_t *hint, uint32_t id,
			     uint64_t size, bool alloc)
{
	struct mp_bucket *b = NULL;

	/* *hint 0 wraps to UINT32_MAX: no bucket */
	if (*hint - 1 < *n && (*v)[*hint - 1].id == id) {
		b = &(*v)[*hint - 1];
	} else {
		for (uint32_t i = 0; i < *n; i++) {
			if ((*v)[i].id == id) {
				b = &(*v)[i];
				break;
			}
		}
		if (!b) {
			if (grow_implicit((void **)v, *n, sizeof(**v)) < 0)
				return -ENOMEM;
			b = &(*v)[(*n)++];
			*b = (struct mp_bucket){ .id = id };
		}
		*hint = (uint32_t)(b - *v) + 1;
	}
	if (alloc) {
		b->alloc_bytes += size;
		b->alloc_count++;
	} else {
		b->free_bytes += size;
		b->free_count++;
	}
	return 0;
}

static inline __attribute__((always_inline)) void pool_alloc(struct mp_pool *pl, uint64_t size,
							     double var)
{
	mem_alloc(&pl->mem, size, var);
	pl->live_bytes += size;
	pl->live_count++;
	if (pl->live_bytes > pl->peak_bytes)
		pl->peak_bytes = pl->live_bytes;
}

static inline void sub_clamped(uint64_t *v, uint64_t d)
{
	*v = *v >= d ? *v - d : 0;
}

static inline __attribute__((always_inline)) void pool_free(struct mp_pool *pl, uint64_t size,
							    double var)
{
	mem_free(&pl->mem, size, var);
	sub_clamped(&pl->live_bytes, size);
	sub_clamped(&pl->live_count, 1);
}

/* Sampled mode, after pool_alloc()/pool_free() of a block of estimate
 * variance @var (0: sent exact): the variance of the owner's or tag's live
 * bytes, and at its peak (pool_alloc() just moved the peak here, or it was here
 * already). From sampled_tail(), off precise mode's per-record path. */
static void pool_sampled(struct mp_pool *pl, double var, bool alloc)
{
	if (!alloc) {
		/* no rounding residue once the last block is gone */
		pl->live_var = pl->live_count && pl->live_var > var ? pl->live_var - var : 0;
		return;
	}
	pl->live_var += var;
	if (pl->live_var > pl->live_var_max)
		pl->live_var_max = pl->live_var;
	if (pl->live_bytes == pl->peak_bytes)
		pl->peak_var = pl->live_var;
}

/* Charges one alloc/free to @f and every kernel enclosing it. */
static inline __attribute__((always_inline)) void charge(struct mp_correlator *c, struct frame *f,
							 uint64_t size, double var, bool alloc,
							 uint32_t owner, uint32_t tag)
{
	struct mp_invocation *r = inv_rec(c, f);

	if (alloc)
		mem_alloc(&r->excl, size, var);
	else
		mem_free(&r->excl, size, var);
	for (; f; f = f->up) {
		r = inv_rec(c, f);
		if (alloc) {
			mem_alloc(&r->incl, size, var);
			if (r->incl.bytes_added > 0 &&
			    (uint64_t)r->incl.bytes_added > r->peak_added)
				r->peak_added = r->incl.bytes_added;
		} else {
			mem_free(&r->incl, size, var);
		}
		if (bucket_add(&r->owners, &r->n_owners, &f->own_ix, owner, size, alloc) < 0 ||
		    bucket_add(&r->tags, &r->n_tags, &f->tag_ix, tag, size, alloc) < 0)
			c->oom = true;
	}
}

/* Sampled mode: the variance of incl.bytes_added of @f and the kernels
 * enclosing it, after charge() charged them a block of estimate variance
 * @var (docs/PROFILE.md "Per-kernel peaks"). An allocation adds @var. A
 * free subtracts it where the block was allocated (its estimate leaves
 * the sum) and adds it elsewhere (its negated estimate enters it): the
 * block was charged at its allocation to invocation @alloc_inv (MP_NONE:
 * none or beyond the record cap) and its enclosing ones. Both chains run
 * in decreasing record index (parents begin first), so one walk down the
 * allocation's chain decides it for every frame. Sampled mode only. */
static void sampled_charge(struct mp_correlator *c, struct frame *f, double var, bool alloc,
			   uint32_t alloc_inv)
{
	const struct mp_profile *p = c->p;
	uint32_t a = alloc_inv;

	for (; f; f = f->up) {
		struct mp_invocation *r = inv_rec(c, f);
		bool inside = false;

		if (!alloc && f->inv != MP_NONE) {
			while (a != MP_NONE && a < p->n_invocations && a > f->inv)
				a = p->invocations[a].parent;
			inside = a == f->inv;
		}
		if (inside) {
			r->added_var = r->added_var > var ? r->added_var - var : 0;
			continue;
		}
		r->added_var += var;
		if (r->added_var > r->added_var_max)
			r->added_var_max = r->added_var;
		/* charge() moved the peak to this level, or it was there */
		if (alloc && r->incl.bytes_added > 0 &&
		    (uint64_t)r->incl.bytes_added == r->peak_added)
			r->peak_added_var = r->added_var;
	}
}

/* Sampled mode, at the end of on_alloc()/on_free() of a block of estimate
 * variance @var (0: sent exact) charged to frame @f (or none), site @site (or
 * MP_NONE), @owner and @tag: the variances sampled mode keeps beside the
 * figures those updated (@alloc_inv: see sampled_charge()). */
static __attribute__((noinline)) void sampled_tail(struct mp_correlator *c, struct frame *f,
						   double var, bool alloc, uint32_t alloc_inv,
						   uint32_t site, uint32_t owner, uint32_t tag)
{
	struct mp_profile *p = c->p;

	pool_sampled(&p->owners[owner], var, alloc);
	pool_sampled(&p->tags[tag], var, alloc);
	if (site != MP_NONE) {
		struct mp_site_var *sv = &p->site_vars[site];

		if (alloc) {
			sv->alloc_space += var;
			sv->inuse_space += var;
		} else {
			sv->inuse_space = p->sites[site].inuse_objects && sv->inuse_space > var ?
						  sv->inuse_space - var :
						  0;
		}
	}
	if (f)
		sampled_charge(c, f, var, alloc, alloc_inv);
}

/* The tag an allocation of thread @t is charged to: its innermost open one. */
static uint32_t open_tag(const struct thread *t)
{
	return t && t->ntags ? t->tags[t->ntags - 1] : MP_TAG_NONE;
}

/* Sampled mode: the variance of this block's estimate, added to that of
 * the live bytes; 0 for a block the tracer sent exact. */
static double sampled_alloc(struct mp_correlator *c, const struct mp_heap_event *ev)
{
	double var, prob;

	if (!c->opts.sample_bytes)
		return 0;
	if (!(ev->flags & MP_HEAP_F_SCALED)) {
		c->n_allocs_est += 1;
		return 0;
	}
	prob = mp_sample_prob_cached(ev->size, c->opts.sample_bytes);
	var = (double)ev->size * (double)ev->size * (1.0 - prob);
	/* each sampled block stands for 1/p allocations */
	c->n_allocs_est += prob > 0 ? 1.0 / prob : (double)ev->size;
	c->live_var += var;
	c->live_scaled++;
	if (c->live_var > c->live_var_max)
		c->live_var_max = c->live_var;
	return var;
}

/* The whole-window figures of sampled mode that are not running sums. */
static void sampled_settle(const struct mp_correlator *c, struct mp_profile *p)
{
	if (!c->opts.sample_bytes)
		return;
	p->added_var = c->live_var;
	p->peak_bias_bound =
		mp_sample_peak_bias_bound(c->live_var_max, c->opts.sample_bytes, c->n_allocs_est);
	/* Every one of these peaks is a maximum over at most the process's
	 * allocations (the bound grows with n): docs/PROFILE.md "Per-kernel
	 * peaks". */
	for (uint32_t i = 0; i < p->n_invocations; i++)
		p->invocations[i].peak_added_bias_bound = mp_sample_peak_bias_bound(
			p->invocations[i].added_var_max, c->opts.sample_bytes, c->n_allocs_est);
	for (uint32_t i = 0; i < p->n_kernels; i++)
		p->kernels[i].peak_added_bias_bound = mp_sample_peak_bias_bound(
			p->kernels[i].added_var_max, c->opts.sample_bytes, c->n_allocs_est);
	for (uint32_t i = 0; i < p->n_owners; i++)
		p->owners[i].peak_bias_bound = mp_sample_peak_bias_bound(
			p->owners[i].live_var_max, c->opts.sample_bytes, c->n_allocs_est);
	for (uint32_t i = 0; i < p->n_tags; i++)
		p->tags[i].peak_bias_bound = mp_sample_peak_bias_bound(
			p->tags[i].live_var_max, c->opts.sample_bytes, c->n_allocs_est);
}

/* The hint slot for @ev's thread and caller; NULL when the site and owner
 * must be looked up each time: an allocation with a stack (its owner may
 * come from any frame), or no owner cache (owners resolved anew at each
 * call). */
static struct site_hint *site_hint_of(struct mp_correlator *c, const struct mp_heap_event *ev)
{
	if (ev->stack || !c->owner_cache)
		return NULL;
	return &c->site_hint[(ev->caller ^ ev->caller >> 9 ^ ev->tid * 0x9e3779b1u) &
			     (SITE_HINTS - 1)];
}

/* Where an allocation is charged: its kernel (frame, NULL: none), thread,
 * owner, tag, kernel name and site. */
struct alloc_at {
	struct frame *f;
	struct thread *t;
	bool cross;
	uint32_t owner, tag, name, site;
};

/* The first half of on_alloc_(): the attribution, the owner and the site
 * (found, or created and counted as on_alloc_() counts them). */
static inline __attribute__((always_inline)) void
alloc_at_(struct mp_correlator *c, const struct mp_heap_event *ev, struct alloc_at *a)
{
	struct site_hint *hint;

	a->f = attribute(c, ev->tid, &a->t, &a->cross);
	a->name = a->f ? a->f->name : MP_NONE;
	/* With a stack and rules, every frame can name the owner. */
	hint = site_hint_of(c, ev);
	if (hint && hint->caller == ev->caller && hint->tid == ev->tid && hint->name == a->name &&
	    hint->phase == c->cur_phase && hint->gen == c->site_gen) {
		a->owner = hint->owner;
		a->site = hint->site;
	} else {
		a->owner = ev->stack && c->n_rules ? owner_of_stack(c, ev->caller, ev->stack) :
						     owner_of(c, ev->caller);
		a->site =
			site_of(c, ev->caller, a->name, c->cur_phase, a->owner, ev->tid, ev->stack);
		/* a site beyond the cap is counted at each allocation */
		if (hint && a->site != MP_NONE)
			*hint = (struct site_hint){ .caller = ev->caller,
						    .tid = ev->tid,
						    .name = a->name,
						    .phase = c->cur_phase,
						    .gen = c->site_gen,
						    .owner = a->owner,
						    .site = a->site };
	}
	a->tag = open_tag(a->t);
}

/* The second half of on_alloc_(): the figures of an allocation charged at
 * @a. @sampled: c->opts.sample_bytes is set. Precise mode's copy (false)
 * has none of sampled mode's variance code: @var is 0 there. */
static inline __attribute__((always_inline)) uint64_t alloc_charge_(struct mp_correlator *c,
								    const struct mp_heap_event *ev,
								    const struct alloc_at *a,
								    const bool sampled)
{
	struct mp_profile *p = c->p;
	uint32_t owner = a->owner, tag = a->tag, name = a->name, inv = MP_NONE, site = a->site;
	struct frame *f = a->f;
	double var;

	var = sampled ? sampled_alloc(c, ev) : 0;

	c->live_bytes += ev->size;
	c->live_count++;
	mem_alloc(&p->mem, ev->size, var);
	if (c->live_bytes > p->peak_bytes) {
		p->peak_bytes = c->live_bytes;
		p->peak_var = c->live_var;
	}
	if (c->live_count > p->peak_tensors)
		p->peak_tensors = c->live_count;
	if (c->cur_phase != MP_NONE) {
		struct mp_phase *ph = &p->phases[c->cur_phase];

		mem_alloc(&ph->mem, ev->size, var);
		if (c->live_bytes > ph->peak_bytes) {
			ph->peak_bytes = c->live_bytes;
			ph->peak_var = c->live_var;
		}
	}
	pool_alloc(&p->owners[owner], ev->size, var);
	pool_alloc(&p->tags[tag], ev->size, var);

	if (f) {
		struct mp_invocation *r = inv_rec(c, f);

		inv = f->inv;
		r->retained_bytes += ev->size;
		r->retained_count++;
		p->kernels[name].retained_bytes += ev->size;
		p->kernels[name].retained_count++;
		if (a->cross) {
			r->cross_thread_allocs++;
			r->cross_thread_bytes += ev->size;
		}
		charge(c, f, ev->size, var, true, owner, tag);
	}
	/* Peaks of open invocations decrease in begin order (an earlier one
	 * has seen everything a later one has): update only the tail that
	 * is below the new level. */
	for (struct frame *g = c->open_tail; g; g = g->prev) {
		struct mp_invocation *r = inv_rec(c, g);

		if (r->peak_bytes >= c->live_bytes)
			break;
		r->peak_bytes = c->live_bytes;
		r->peak_var = c->live_var;
	}
	/* All of sampled mode's figures; an exact block (var 0) can move a
	 * peak there too. */
	if (sampled)
		sampled_tail(c, f, var, true, MP_NONE, site, owner, tag);
	if (site != MP_NONE) {
		struct mp_site *st = &p->sites[site];

		st->alloc_objects++;
		st->alloc_space += ev->size;
		st->inuse_objects++;
		st->inuse_space += ev->size;
		return U_SITE_FLAG | (uint64_t)(site & U_POOL_MASK) << U_OWNER_SHIFT |
		       (uint64_t)tag << U_TAG_SHIFT | (uint64_t)(site >> 12) << U_NAME_SHIFT |
		       (uint64_t)(inv + 1) << U_INV_SHIFT;
	}
	return (uint64_t)owner << U_OWNER_SHIFT | (uint64_t)tag << U_TAG_SHIFT |
	       (uint64_t)(name + 1) << U_NAME_SHIFT | (uint64_t)(inv + 1) << U_INV_SHIFT;
}

/* @sampled: as for alloc_charge_(). */
static inline __attribute__((always_inline)) uint64_t
on_alloc_(struct mp_correlator *c, const struct mp_heap_event *ev, const bool sampled)
{
	struct alloc_at a;

	alloc_at_(c, ev, &a);
	return alloc_charge_(c, ev, &a, sampled);
}

/* @sampled: as for on_alloc_(). */
static inline __attribute__((always_inline)) void
on_free_(struct mp_correlator *c, const struct mp_heap_event *ev, const bool sampled)
{
	struct mp_profile *p = c->p;
	uint32_t owner = (ev->user >> U_OWNER_SHIFT) & U_POOL_MASK;
	uint32_t tag = (ev->user >> U_TAG_SHIFT) & U_POOL_MASK;
	uint32_t name = (uint32_t)((ev->user >> U_NAME_SHIFT) & U_NAME_MASK) - 1;
	uint32_t inv = (uint32_t)((ev->user >> U_INV_SHIFT) & U_INV_MASK) - 1;
	struct mp_site *st = NULL;
	struct thread *t;
	struct frame *f;
	bool cross;
	double var = 0;

	if (ev->user & U_SITE_FLAG) {
		uint32_t site = owner | (uint32_t)((ev->user >> U_NAME_SHIFT) & U_NAME_MASK) << 12;

		owner = MP_OWNER_UNKNOWN;
		name = MP_NONE;
		if (site < p->n_sites) {
			st = &p->sites[site];
			owner = st->owner;
			name = st->name;
		}
	}

	if (owner >= p->n_owners)
		owner = MP_OWNER_UNKNOWN;
	if (tag >= p->n_tags)
		tag = MP_TAG_NONE;
	if (ev->size > c->live_bytes || !c->live_count) {
		/* The tracer paired a free we never saw allocated. */
		p->accounting_errors++;
		return;
	}
	c->live_bytes -= ev->size;
	c->live_count--;
	if (sampled && (ev->flags & MP_HEAP_F_SCALED)) {
		var = mp_sample_var(ev->size, c->opts.sample_bytes, 1);
		/* no rounding residue once the last one is gone */
		if (c->live_scaled)
			c->live_scaled--;
		c->live_var = c->live_scaled && c->live_var > var ? c->live_var - var : 0;
	}
	if (st) {
		sub_clamped(&st->inuse_space, ev->size);
		sub_clamped(&st->inuse_objects, 1);
	}
	mem_free(&p->mem, ev->size, var);
	if (c->cur_phase != MP_NONE)
		mem_free(&p->phases[c->cur_phase].mem, ev->size, var);
	pool_free(&p->owners[owner], ev->size, var);
	pool_free(&p->tags[tag], ev->size, var);
	if (name < p->n_kernels) {
		sub_clamped(&p->kernels[name].retained_bytes, ev->size);
		sub_clamped(&p->kernels[name].retained_count, 1);
	}
	if (inv < p->n_invocations) {
		sub_clamped(&p->invocations[inv].retained_bytes, ev->size);
		sub_clamped(&p->invocations[inv].retained_count, 1);
	}
	f = attribute(c, ev->tid, &t, &cross);
	if (f)
		charge(c, f, ev->size, var, false, owner, tag);
	if (sampled)
		sampled_tail(c, f, var, false, inv, st ? (uint32_t)(st - p->sites) : MP_NONE, owner,
			     tag);
}

/* Sampled mode's copies, out of line: only precise mode's are inlined
 * into every caller. */
static __attribute__((noinline)) uint64_t on_alloc_sampled(struct mp_correlator *c,
							   const struct mp_heap_event *ev)
{
	return on_alloc_(c, ev, true);
}

static __attribute__((noinline)) void on_free_sampled(struct mp_correlator *c,
						      const struct mp_heap_event *ev)
{
	on_free_(c, ev, true);
}

static inline __attribute__((always_inline)) uint64_t on_alloc(struct mp_correlator *c,
							       const struct mp_heap_event *ev)
{
	return c->opts.sample_bytes ? on_alloc_sampled(c, ev) : on_alloc_(c, ev, false);
}

static inline __attribute__((always_inline)) void on_free(struct mp_correlator *c,
							  const struct mp_heap_event *ev)
{
	if (c->opts.sample_bytes)
		on_free_sampled(c, ev);
	else
		on_free_(c, ev, false);
}

static bool pool_heap_event(struct mp_correlator *c, const struct mp_heap_event *ev);
static uint64_t pool_heap_alloc(struct mp_correlator *c, const struct mp_heap_event *ev);

/* mp_correlator_on_heap(), inlined into mp_correlator_apply_heap(). */
static inline __attribute__((always_inline)) uint64_t on_heap(struct mp_correlator *c,
							      const struct mp_heap_event *ev)
{
	if (c->finished)
		return 0;
	start(c, ev->ts_ns);
	if (pool_heap_event(c, ev)) {
		/* a copy: @ev itself stays out of memory on the heap's path */
		struct mp_heap_event copy = *ev;

		return pool_heap_alloc(c, &copy);
	}
	switch (ev->kind) {
	case MP_HEAP_ALLOC:
		return on_alloc(c, ev);
	case MP_HEAP_FREE:
		on_free(c, ev);
		break;
	case MP_HEAP_UNKNOWN_FREE:
		c->p->unknown_frees++;
		break;
	default:
		break;
	}
	return 0;
}

uint64_t mp_correlator_on_heap(void *ctx, const struct mp_heap_event *ev)
{
	return on_heap(ctx, ev);
}

/* mp_correlator_apply_heap()'s callback: the stack id of the event being
 * applied is in c->apply_stack (a pointer to a context on the stack would
 * keep the event out of registers). */
static inline __attribute__((always_inline)) uint64_t on_heap_stack(void *ctx,
								    const struct mp_heap_event *ev)
{
	struct mp_correlator *c = ctx;

	if (ev->kind == MP_HEAP_ALLOC && c->apply_stack) {
		struct mp_heap_event with = *ev;

		with.stack = c->apply_stack;
		return on_heap(c, &with);
	}
	return on_heap(c, ev);
}

int mp_correlator_apply_heap(struct mp_correlator *c, struct mp_live *l,
			     const struct mp_raw_event *ev, uint32_t stack)
{
	int r;

	c->apply_stack = stack;
	r = mp_live_apply_inline_(l, ev, on_heap_stack, c);
	c->apply_stack = 0;
	return r;
}

/* ---- temporary allocations ---- */

/* An allocation freed by the next event: its counts, not its level. */
static inline __attribute__((always_inline)) void mem_temp(struct mp_mem_stats *m, uint64_t size)
{
	m->alloc_bytes += size;
	m->alloc_count++;
	m->free_bytes += size;
	m->free_count++;
}

static inline __attribute__((always_inline)) void pool_temp(struct mp_pool *pl, uint64_t size)
{
	mem_temp(&pl->mem, size);
	if (pl->live_bytes + size > pl->peak_bytes)
		pl->peak_bytes = pl->live_bytes + size;
}

static inline void bucket_temp(struct mp_bucket **v, uint32_t *n, uint32_t *hint, uint32_t id,
			       uint64_t size, bool *oom)
{
	if (bucket_add(v, n, hint, id, size, true) < 0)
		*oom = true;
	else
		(*v)[*hint - 1].free_bytes += size, (*v)[*hint - 1].free_count++;
}

/* charge() of the allocation, then of its free. */
static inline __attribute__((always_inline)) void
charge_temp(struct mp_correlator *c, struct frame *f, uint64_t size, uint32_t owner, uint32_t tag)
{
	mem_temp(&inv_rec(c, f)->excl, size);
	for (; f; f = f->up) {
		struct mp_invocation *r = inv_rec(c, f);
		int64_t added = (int64_t)((uint64_t)r->incl.bytes_added + size);

		mem_temp(&r->incl, size);
		if (added > 0 && (uint64_t)added > r->peak_added)
			r->peak_added = (uint64_t)added;
		bucket_temp(&r->owners, &r->n_owners, &f->own_ix, owner, size, &c->oom);
		bucket_temp(&r->tags, &r->n_tags, &f->tag_ix, tag, size, &c->oom);
	}
}

/* Whether an allocation of @size charged at @a and freed right after
 * leaves every level it passes through where it was: on_free_() clamps
 * or rejects a free larger than a level, so a level that wrapped on the
 * way up would not come back (hostile sizes). */
static inline __attribute__((always_inline)) bool temp_fits(const struct mp_correlator *c,
							    const struct alloc_at *a, uint64_t size)
{
	const struct mp_profile *p = c->p;
	uint64_t top = c->live_bytes;

	if (p->owners[a->owner].live_bytes > top)
		top = p->owners[a->owner].live_bytes;
	if (p->tags[a->tag].live_bytes > top)
		top = p->tags[a->tag].live_bytes;
	if (a->f) {
		if (p->kernels[a->name].retained_bytes > top)
			top = p->kernels[a->name].retained_bytes;
		if (inv_rec((struct mp_correlator *)c, a->f)->retained_bytes > top)
			top = inv_rec((struct mp_correlator *)c, a->f)->retained_bytes;
	}
	if (a->site != MP_NONE && p->sites[a->site].inuse_space > top)
		top = p->sites[a->site].inuse_space;
	return top + size >= top;
}

/* alloc_charge_() then on_free_() of the same block by the same thread,
 * nothing in between (precise mode, temp_fits()): the cumulative figures
 * and the peaks the block's level reached, the running levels untouched. */
static inline __attribute__((always_inline)) void
temp_charge_(struct mp_correlator *c, uint64_t size, const struct alloc_at *a)
{
	struct mp_profile *p = c->p;
	uint64_t level = c->live_bytes + size;
	struct frame *f = a->f;

	mem_temp(&p->mem, size);
	if (level > p->peak_bytes) {
		p->peak_bytes = level;
		p->peak_var = c->live_var;
	}
	if (c->live_count + 1 > p->peak_tensors)
		p->peak_tensors = c->live_count + 1;
	if (c->cur_phase != MP_NONE) {
		struct mp_phase *ph = &p->phases[c->cur_phase];

		mem_temp(&ph->mem, size);
		if (level > ph->peak_bytes) {
			ph->peak_bytes = level;
			ph->peak_var = c->live_var;
		}
	}
	pool_temp(&p->owners[a->owner], size);
	pool_temp(&p->tags[a->tag], size);
	if (f) {
		struct mp_invocation *r = inv_rec(c, f);

		/* the free gives back the retained figures of a kept record
		 * only (on_free_(): inv < n_invocations), not a scratch one */
		if (f->inv == MP_NONE) {
			r->retained_bytes += size;
			r->retained_count++;
		}
		if (a->cross) {
			r->cross_thread_allocs++;
			r->cross_thread_bytes += size;
		}
		charge_temp(c, f, size, a->owner, a->tag);
	}
	for (struct frame *g = c->open_tail; g; g = g->prev) {
		struct mp_invocation *r = inv_rec(c, g);

		if (r->peak_bytes >= level)
			break;
		r->peak_bytes = level;
		r->peak_var = c->live_var;
	}
	if (a->site != MP_NONE) {
		struct mp_site *st = &p->sites[a->site];

		st->alloc_objects++;
		st->alloc_space += size;
	}
}

/* mp_live_do_alloc_()'s callback in the fallback of
 * mp_correlator_apply_temporary(): the block's value, charged already. */
static inline __attribute__((always_inline)) uint64_t temp_user(void *ctx,
								const struct mp_heap_event *ev)
{
	(void)ev;
	return *(const uint64_t *)ctx;
}

int mp_correlator_apply_temporary(struct mp_correlator *c, struct mp_live *l,
				  const struct mp_raw_event *al, uint32_t stack,
				  const struct mp_raw_event *fr)
{
	struct mp_heap_event he;
	struct alloc_at a;
	uint64_t user;
	int r;

	if (c->finished || c->opts.sample_bytes || al->type != MP_RAW_ALLOC || !al->addr ||
	    (al->fn & MP_LIVE_FN_SCALED) || (al->fn < FN_POOL_MAX && c->fn_pool[al->fn]) ||
	    fr->type != MP_RAW_FREE || fr->addr != al->addr || fr->tid != al->tid ||
	    fr->fn == MP_FN_MUNMAP || (fr->fn & MP_LIVE_FN_SCALED))
		goto two_steps;
	/* as the allocation's own step: the table grows at the same point */
	r = mp_live_reserve_(l);
	if (r < 0)
		return r;
	/* a block still live there: the allocation forgets it first */
	if (mp_live_find_(l, al->addr))
		goto two_steps;
	he = (struct mp_heap_event){ .kind = MP_HEAP_ALLOC,
				     .fn = al->fn,
				     .tid = al->tid,
				     .ts_ns = al->ts_ns,
				     .addr = al->addr,
				     .size = al->size,
				     .caller = al->caller,
				     .stack = stack };
	start(c, al->ts_ns);
	alloc_at_(c, &he, &a);
	if (__builtin_expect(!temp_fits(c, &a, al->size), 0)) {
		/* the two steps, the first one's attribution done */
		user = alloc_charge_(c, &he, &a, false);
		mp_live_do_alloc_(l, al, al->addr, temp_user, &user);
		return mp_correlator_apply_heap(c, l, fr, 0);
	}
	temp_charge_(c, al->size, &a);
	mp_live_temp_(l, al, fr);
	return 0;

two_steps:
	r = mp_correlator_apply_heap(c, l, al, stack);
	if (r < 0)
		return r;
	return mp_correlator_apply_heap(c, l, fr, 0);
}

/* ---- RSS from samples ---- */

/* RSS at begin is the last reading at or before the begin (the first one
 * after it only when there is none before); RSS at end is the first reading
 * at or after the end. The pair brackets the kernel, so growth inside it is
 * never missed because a reading came a little too early. */
static void cand_offer_begin(struct rss_cand *cand, uint64_t target, const struct rss_cand *s)
{
	if (cand->val == MP_UNKNOWN || (s->ts <= target && s->ts > cand->ts))
		*cand = *s;
}

static void cand_offer_end(struct rss_cand *cand, uint64_t target, const struct rss_cand *s)
{
	if (cand->val == MP_UNKNOWN || cand->ts < target)
		*cand = *s;
}

static void pending_apply(struct mp_profile *p, const struct pending *pe)
{
	struct mp_kernel *k = &p->kernels[pe->name];

	if (pe->inv != MP_NONE) {
		p->invocations[pe->inv].rss_begin = pe->b.val;
		p->invocations[pe->inv].rss_end = pe->e.val;
	}
	/* Calls shorter than the sampling interval share their readings:
	 * each interval between two samples counts once per kernel name, or
	 * a tight loop of short calls would multiply one RSS change by the
	 * number of calls. */
	if (!pe->lost && pe->b.val != MP_UNKNOWN && pe->e.val != MP_UNKNOWN &&
	    pe->b.ts >= k->rss_last_ns && pe->e.ts >= pe->b.ts) {
		add_signed(&k->rss_delta_sum, pe->e.val - pe->b.val);
		k->rss_calls++;
		k->rss_last_ns = pe->e.ts;
	}
}

static void pending_flush(struct mp_correlator *c)
{
	for (uint32_t i = 0; i < c->n_pending; i++)
		pending_apply(c->p, &c->pending[i]);
	c->n_pending = 0;
}

int mp_correlator_on_rss(struct mp_correlator *c, const struct mp_rss_sample *s)
{
	struct mp_profile *p = c->p;
	struct rss_cand cand = { .ts = s->ts_ns, .val = s->vm_rss };

	if (c->finished)
		return -EALREADY;
	start(c, s->ts_ns);
	if (p->rss_samples % p->rss_stride == 0) {
		if (p->n_rss == c->opts.max_rss_points) {
			/* Halve the resolution rather than grow. */
			for (uint32_t i = 0; i < p->n_rss / 2; i++)
				p->rss[i] = p->rss[2 * i];
			p->n_rss /= 2;
			p->rss_stride *= 2;
		}
		if (p->rss_samples % p->rss_stride == 0 &&
		    grow((void **)&p->rss, &c->rss_cap, p->n_rss + 1, sizeof(*p->rss)) < 0) {
			c->oom = true;
			return -ENOMEM;
		}
		if (p->rss_samples % p->rss_stride == 0)
			p->rss[p->n_rss++] = (struct mp_rss_point){
				.ts_ns = s->ts_ns,
				.vm_rss = s->vm_rss,
				.rss_anon = s->rss_anon,
				.rss_file = s->rss_file,
				.rss_shmem = s->rss_shmem,
				.vm_swap = s->vm_swap,
				.pss = s->pss,
				.heap_live = c->live_bytes,
			};
	}
	p->rss_samples++;
	if (s->vm_hwm != MP_UNKNOWN)
		p->vm_hwm = s->vm_hwm;
	if (s->vm_rss == MP_UNKNOWN)
		return 0;
	if (p->rss_peak == 0 || s->vm_rss > p->rss_peak)
		p->rss_peak = s->vm_rss;
	if (c->cur_phase != MP_NONE && s->vm_rss > p->phases[c->cur_phase].rss_peak)
		p->phases[c->cur_phase].rss_peak = s->vm_rss;

	for (struct frame *f = c->open_head; f; f = f->next) {
		if (!f->rss_b_pending)
			continue;
		cand_offer_begin(&f->rss_b, inv_rec(c, f)->begin_ns, &cand);
		f->rss_b_pending = false;
	}
	for (uint32_t i = 0; i < c->n_pending; i++) {
		struct pending *pe = &c->pending[i];

		if (pe->b_pending)
			cand_offer_begin(&pe->b, pe->begin_ns, &cand);
		cand_offer_end(&pe->e, pe->end_ns, &cand);
	}
	pending_flush(c);
	c->last_rss = cand;
	return 0;
}

/* ---- exact RSS (rss_stat) ---- */

int mp_correlator_on_rss_stat(struct mp_correlator *c, const struct mp_rss_stat_event *ev)
{
	struct thread *t;
	struct frame *f;
	int64_t delta;
	bool cross;

	if (c->finished)
		return -EALREADY;
	start(c, ev->ts_ns);
	/* Swap entries are not resident memory. */
	if (ev->member >= MP_RSS_MEMBER_COUNT || ev->member == MP_RSS_SWAPENTS)
		return 0;
	if (!c->rss_member_known[ev->member]) {
		/* The first reading only sets the baseline. */
		c->rss_member_known[ev->member] = true;
		c->rss_member[ev->member] = ev->value;
		return 0;
	}
	delta = (int64_t)((uint64_t)ev->value - (uint64_t)c->rss_member[ev->member]);
	c->rss_member[ev->member] = ev->value;
	f = ev->tid ? attribute(c, ev->tid, &t, &cross) : NULL;
	if (!f) {
		add_signed(&c->p->rss_exact_unattributed, (uint64_t)delta);
		return 0;
	}
	add_signed(&inv_rec(c, f)->rss_exact_excl, (uint64_t)delta);
	for (; f; f = f->up)
		add_signed(&inv_rec(c, f)->rss_exact_incl, (uint64_t)delta);
	return 0;
}

/* ---- pools (defined at the end) ---- */

static int pools_begin(struct mp_correlator *c, struct mp_invocation *r);
static void pools_end(struct mp_correlator *c, struct mp_invocation *r);
static int pool_buckets_merge(struct mp_pool_bucket **dst, uint32_t *n,
			      const struct mp_pool_bucket *src, uint32_t ns);
static int pool_tag_buckets_merge(struct mp_pool_tag_bucket **dst, uint32_t *n,
				  const struct mp_pool_tag_bucket *src, uint32_t ns);
static int aggregate_open(struct mp_correlator *c, struct mp_profile *q, const struct frame *f,
			  struct mp_invocation *tmp);
static int pool_record(struct mp_correlator *c, const struct mp_record *rec);
static int pools_phase_enter(struct mp_correlator *c, struct mp_phase *ph);
static void pools_phase_leave(struct mp_correlator *c, struct mp_phase *ph);

/* ---- markers ---- */

static int kernel_begin(struct mp_correlator *c, const struct mp_record *rec)
{
	struct mp_profile *p = c->p;
	struct mp_invocation *r;
	struct thread *t;
	struct frame *f;
	uint32_t name;
	int err;

	err = thread_get(c, rec->tid, &t);
	if (err == -ENOMEM)
		return err;
	if (err < 0 || t->depth >= MAX_DEPTH || t->overflow) {
		if (err == 0)
			t->overflow++;
		p->dropped_markers++;
		return 0;
	}
	err = name_intern(c, rec->name ? rec->name : "(null)", &name);
	if (err == -E2BIG)
		err = name_intern(c, "(other)", &name);
	if (err < 0) {
		if (err != -E2BIG)
			return err;
		t->overflow++;
		p->dropped_markers++;
		return 0;
	}
	f = c->free_frames;
	if (f)
		c->free_frames = f->next;
	else if (!(f = malloc(sizeof(*f))))
		return -ENOMEM;
	*f = (struct frame){ .inv = MP_NONE, .name = name, .thr = t };
	if (p->n_invocations < c->opts.max_invocations) {
		if (grow((void **)&p->invocations, &c->invs_cap, p->n_invocations + 1,
			 sizeof(*p->invocations)) < 0) {
			f->next = c->free_frames;
			c->free_frames = f;
			return -ENOMEM;
		}
		f->inv = p->n_invocations++;
	} else {
		p->invocations_dropped++;
	}
	r = inv_rec(c, f);
	*r = (struct mp_invocation){
		.name = name,
		.tid = rec->tid,
		.parent = t->top ? t->top->inv : MP_NONE,
		.depth = t->depth,
		.phase = c->cur_phase,
		.flags = (rec->flags & MP_REC_F_OPEN_AT_ATTACH) ? MP_INV_F_OPEN_AT_ATTACH : 0,
		.begin_ns = rec->ts_ns,
		.end_ns = rec->ts_ns,
		.peak_bytes = c->live_bytes,
		.peak_var = c->live_var,
		.rss_begin = MP_UNKNOWN,
		.rss_end = MP_UNKNOWN,
	};
	if (pools_begin(c, r) < 0)
		c->oom = true;
	f->rss_b = c->last_rss;
	f->rss_b_pending = true;
	f->up = t->top;
	t->top = f;
	t->depth++;
	f->prev = c->open_tail;
	if (c->open_tail)
		c->open_tail->next = f;
	else
		c->open_head = f;
	c->open_tail = f;
	return 0;
}

/* The traffic counters every kind of bucket has (profile.h), summed. */
#define ADD_COUNTS(d, s)                              \
	do {                                          \
		(d)->alloc_bytes += (s)->alloc_bytes; \
		(d)->alloc_count += (s)->alloc_count; \
		(d)->free_bytes += (s)->free_bytes;   \
		(d)->free_count += (s)->free_count;   \
	} while (0)

static int buckets_merge(struct mp_bucket **dst, uint32_t *n, const struct mp_bucket *src,
			 uint32_t ns)
{
	for (uint32_t i = 0; i < ns; i++) {
		struct mp_bucket *b =
			bucket_get(dst, n, sizeof(**dst), &src[i].id, sizeof(src[i].id));

		if (!b)
			return -ENOMEM;
		ADD_COUNTS(b, &src[i]);
	}
	return 0;
}

static void mem_add(struct mp_mem_stats *d, const struct mp_mem_stats *s)
{
	add_signed(&d->bytes_added, (uint64_t)s->bytes_added);
	add_signed(&d->tensors_added, (uint64_t)s->tensors_added);
	d->alloc_bytes += s->alloc_bytes;
	d->alloc_count += s->alloc_count;
	d->free_bytes += s->free_bytes;
	d->free_count += s->free_count;
	d->alloc_var += s->alloc_var;
	d->free_var += s->free_var;
}

static int aggregate(struct mp_profile *p, const struct mp_invocation *r)
{
	struct mp_kernel *k = &p->kernels[r->name];
	uint64_t dur = r->end_ns > r->begin_ns ? r->end_ns - r->begin_ns : 0;

	/* Its begin or end may be another invocation's: it would add time
	 * and memory that belong to no single call. */
	if (r->flags & MP_INV_F_MARKERS_LOST) {
		k->markers_lost++;
		return 0;
	}
	k->calls++;
	k->total_ns += dur;
	if (dur < k->min_ns)
		k->min_ns = dur;
	if (dur > k->max_ns)
		k->max_ns = dur;
	mem_add(&k->incl, &r->incl);
	mem_add(&k->excl, &r->excl);
	if (r->peak_bytes > k->peak_bytes) {
		k->peak_bytes = r->peak_bytes;
		k->peak_var = r->peak_var;
	}
	if (r->peak_added > k->peak_added) {
		k->peak_added = r->peak_added;
		k->peak_added_var = r->peak_added_var;
	}
	if (r->added_var_max > k->added_var_max)
		k->added_var_max = r->added_var_max;
	k->cross_thread_allocs += r->cross_thread_allocs;
	k->cross_thread_bytes += r->cross_thread_bytes;
	add_signed(&k->rss_exact_incl, (uint64_t)r->rss_exact_incl);
	add_signed(&k->rss_exact_excl, (uint64_t)r->rss_exact_excl);
	if (r->flags & MP_INV_F_OPEN_AT_ATTACH)
		k->open_at_attach++;
	if (r->flags & MP_INV_F_TRUNCATED)
		k->truncated++;
	if (buckets_merge(&k->owners, &k->n_owners, r->owners, r->n_owners) < 0 ||
	    buckets_merge(&k->tags, &k->n_tags, r->tags, r->n_tags) < 0 ||
	    pool_buckets_merge(&k->pools, &k->n_pools, r->pools, r->n_pools) < 0 ||
	    pool_tag_buckets_merge(&k->pool_tags, &k->n_pool_tags, r->pool_tags, r->n_pool_tags) <
		    0)
		return -ENOMEM;
	return 0;
}

static void frame_close(struct mp_correlator *c, struct frame *f, uint64_t ts, uint32_t flags)
{
	struct mp_invocation *r = inv_rec(c, f);
	struct pending pe = {
		.inv = f->inv,
		.name = f->name,
		.begin_ns = r->begin_ns,
		.end_ns = ts,
		.b = f->rss_b,
		.e = c->last_rss,
		.b_pending = f->rss_b_pending,
		.lost = !!(flags & MP_INV_F_MARKERS_LOST),
	};

	r->end_ns = ts;
	r->flags |= flags;
	r->total_bytes_snapshot = c->live_bytes;
	r->total_tensors_snapshot = c->live_count;
	pools_end(c, r);
	if (aggregate(c->p, r) < 0)
		c->oom = true;

	f->thr->top = f->up;
	f->thr->depth--;
	if (f->prev)
		f->prev->next = f->next;
	else
		c->open_head = f->next;
	if (f->next)
		f->next->prev = f->prev;
	else
		c->open_tail = f->prev;

	if (c->finishing) {
		pending_apply(c->p, &pe);
	} else {
		if (c->n_pending == MAX_PENDING || !c->pending)
			pending_flush(c);
		if (!c->pending)
			c->pending = calloc(MAX_PENDING, sizeof(*c->pending));
		if (c->pending)
			c->pending[c->n_pending++] = pe;
		else
			c->oom = true;
	}
	if (f->inv == MP_NONE) {
		free(r->inputs);
		free(r->outputs);
		free(r->owners);
		free(r->tags);
		free(r->pools);
		free(r->pool_tags);
	}
	f->next = c->free_frames;
	c->free_frames = f;
}

static void kernel_end(struct mp_correlator *c, const struct mp_record *rec)
{
	struct thread *t = thread_find(c, rec->tid);

	if (t && t->overflow) {
		t->overflow--;
		return;
	}
	if (!t || !t->top) {
		c->p->unmatched_ends++;
		return;
	}
	frame_close(c, t->top, rec->ts_ns, 0);
}

static int shape(struct mp_correlator *c, const struct mp_record *rec, bool input)
{
	struct thread *t = thread_find(c, rec->tid);
	struct mp_invocation *r;
	struct mp_shape **v;
	uint32_t *n;

	if (t && t->overflow) {
		c->p->dropped_markers++;
		return 0;
	}
	if (!t || !t->top) {
		c->p->orphan_shapes++;
		return 0;
	}
	r = inv_rec(c, t->top);
	v = input ? &r->inputs : &r->outputs;
	n = input ? &r->n_inputs : &r->n_outputs;
	if (rec->rank > MP_MAX_RANK || *n >= MAX_SHAPES) {
		c->p->dropped_markers++;
		return 0;
	}
	if (grow_implicit((void **)v, *n, sizeof(**v)) < 0)
		return -ENOMEM;
	(*v)[*n] = (struct mp_shape){ .rank = rec->rank };
	memcpy((*v)[*n].dims, rec->dims, rec->rank * sizeof(rec->dims[0]));
	(*n)++;
	return 0;
}

static void phase_leave(struct mp_correlator *c, uint64_t ts)
{
	struct mp_phase *ph;

	if (c->cur_phase == MP_NONE)
		return;
	ph = &c->p->phases[c->cur_phase];
	if (ts > c->phase_entered)
		ph->duration_ns += ts - c->phase_entered;
	pools_phase_leave(c, ph);
}

static int phase(struct mp_correlator *c, const struct mp_record *rec)
{
	struct mp_profile *p = c->p;
	const char *name = rec->name ? rec->name : "(null)";
	struct mp_phase *ph;
	uint32_t i;

	for (i = 0; i < p->n_phases; i++)
		if (strncmp(p->phases[i].name, name, MAX_NAME_LEN) == 0)
			break;
	if (i == p->n_phases) {
		char *d;

		if (p->n_phases >= MAX_PHASES) {
			p->dropped_markers++;
			return 0;
		}
		if (grow((void **)&p->phases, &c->phases_cap, p->n_phases + 1, sizeof(*p->phases)) <
		    0)
			return -ENOMEM;
		d = strndup(name, MAX_NAME_LEN);
		if (!d)
			return -ENOMEM;
		p->phases[i] =
			(struct mp_phase){ .name = d, .first_ns = rec->ts_ns, .rss_peak = 0 };
		p->n_phases++;
	}
	phase_leave(c, rec->ts_ns);
	c->cur_phase = i;
	c->phase_entered = rec->ts_ns;
	ph = &p->phases[i];
	ph->entries++;
	/* What is live when the phase starts is live during it. */
	if (c->live_bytes > ph->peak_bytes) {
		ph->peak_bytes = c->live_bytes;
		ph->peak_var = c->live_var;
	}
	if (c->last_rss.val != MP_UNKNOWN && c->last_rss.val > ph->rss_peak)
		ph->rss_peak = c->last_rss.val;
	return pools_phase_enter(c, ph);
}

static int tag_begin(struct mp_correlator *c, const struct mp_record *rec)
{
	struct mp_profile *p = c->p;
	const char *name = rec->name ? rec->name : "(null)";
	uint32_t id = MP_TAG_NONE;
	struct thread *t;
	int r;

	r = thread_get(c, rec->tid, &t);
	if (r == -ENOMEM)
		return r;
	if (r < 0) {
		p->dropped_markers++;
		return 0;
	}
	for (uint32_t i = 1; i < p->n_tags; i++) {
		if (strncmp(p->tags[i].name, name, MAX_NAME_LEN) == 0) {
			id = i;
			break;
		}
	}
	if (id == MP_TAG_NONE) {
		if (p->n_tags < MAX_POOLS) {
			r = pool_add(&p->tags, &p->n_tags, &c->tags_cap, name);
			if (r < 0)
				return r;
			id = r;
		} else {
			p->dropped_markers++;
		}
	}
	if (t->ntags < MAX_TAG_DEPTH && !t->tag_overflow) {
		t->tags[t->ntags++] = id;
	} else {
		t->tag_overflow++;
		p->dropped_markers++;
	}
	return 0;
}

static void tag_end(struct mp_correlator *c, const struct mp_record *rec)
{
	struct thread *t = thread_find(c, rec->tid);

	if (t && t->tag_overflow)
		t->tag_overflow--;
	else if (t && t->ntags)
		t->ntags--;
	else
		c->p->unmatched_tag_ends++;
}

/* Records of @t were lost (the ring was full, or the thread slot was
 * reused): whatever it has open may have ended, and what comes next may end
 * something that never began. Its open kernels are closed where its last
 * record was and flagged; its tags, whose ends may be lost too, are
 * dropped. */
static void markers_lost(struct mp_correlator *c, struct thread *t)
{
	c->p->marker_gaps++;
	while (t->top)
		frame_close(c, t->top, t->last_ts, MP_INV_F_MARKERS_LOST);
	t->overflow = 0;
	t->ntags = 0;
	t->tag_overflow = 0;
}

int mp_correlator_on_exec(struct mp_correlator *c, uint64_t ts_ns, uint32_t tid, const char *path)
{
	struct mp_profile *p = c->p;
	uint32_t closed = 0;

	if (c->finished)
		return -EALREADY;
	start(c, ts_ns);
	/* Innermost first, so each closes as the top of its thread. */
	while (c->open_tail) {
		frame_close(c, c->open_tail, ts_ns, MP_INV_F_TRUNCATED | MP_INV_F_EXEC);
		closed++;
	}
	/* The old image's threads are gone; the new one numbers its
	 * records afresh. */
	for (uint32_t i = 0; i < c->thr_ht_cap; i++) {
		struct thread *t = c->thr_ht[i];

		if (!t)
			continue;
		t->overflow = 0;
		t->ntags = 0;
		t->tag_overflow = 0;
		t->seq_known = false;
	}
	phase_leave(c, ts_ns);
	c->cur_phase = MP_NONE;
	p->exec_count++;
	if (p->n_execs < MP_PROFILE_MAX_EXECS) {
		struct mp_exec *e = reallocarray(p->execs, p->n_execs + 1, sizeof(*e));

		if (!e) {
			c->oom = true;
			return -ENOMEM;
		}
		p->execs = e;
		e = &p->execs[p->n_execs];
		*e = (struct mp_exec){ .ts_ns = ts_ns, .tid = tid, .kernels_closed = closed };
		if (path && !(e->path = strndup(path, 4096))) {
			c->oom = true;
			return -ENOMEM;
		}
		p->n_execs++;
	}
	return 0;
}

int mp_correlator_on_record(struct mp_correlator *c, const struct mp_record *rec)
{
	struct thread *t;
	int r = 0;

	if (c->finished)
		return -EALREADY;
	start(c, rec->ts_ns);
	t = thread_find(c, rec->tid);
	/* Open-at-attach records all carry the attach snapshot's number. */
	if (t && t->seq_known && !(rec->flags & MP_REC_F_OPEN_AT_ATTACH) &&
	    rec->seq != t->last_seq + 1)
		markers_lost(c, t);
	switch (rec->type) {
	case MP_REC_KERNEL_BEGIN:
		r = kernel_begin(c, rec);
		break;
	case MP_REC_KERNEL_END:
		kernel_end(c, rec);
		break;
	case MP_REC_INPUT_SHAPE:
		r = shape(c, rec, true);
		break;
	case MP_REC_OUTPUT_SHAPE:
		r = shape(c, rec, false);
		break;
	case MP_REC_PHASE:
		r = phase(c, rec);
		break;
	case MP_REC_TAG_BEGIN:
		r = tag_begin(c, rec);
		break;
	case MP_REC_TAG_END:
		tag_end(c, rec);
		break;
	case MP_REC_POOL_ALLOC:
	case MP_REC_POOL_FREE:
	case MP_REC_POOL_RESET:
	case MP_REC_POOL_DECLARE:
		r = pool_record(c, rec);
		break;
	default:
		c->p->dropped_markers++;
		break;
	}
	t = thread_find(c, rec->tid);
	if (t) {
		t->seq_known = true;
		t->last_seq = rec->seq;
		t->last_ts = rec->ts_ns;
	}
	if (r == -ENOMEM)
		c->oom = true;
	return r;
}

int mp_correlator_finish(struct mp_correlator *c, uint64_t end_ns, struct mp_profile **ret)
{
	struct mp_profile *p = c->p;

	if (c->finished)
		return -EALREADY;
	c->finished = true;
	start(c, end_ns);
	c->finishing = true;
	pending_flush(c);
	while (c->open_tail) {
		/* Innermost first, so each closes as the top of its thread. */
		frame_close(c, c->open_tail, end_ns, MP_INV_F_TRUNCATED);
		p->truncated = true;
	}
	phase_leave(c, end_ns);
	p->end_ns = end_ns;
	sampled_settle(c, p);
	if (c->oom)
		return -ENOMEM;
	c->p = NULL;
	*ret = p;
	return 0;
}

int mp_correlator_snapshot(struct mp_correlator *c, uint64_t now_ns, struct mp_profile **ret)
{
	struct mp_profile *q;
	int r;

	if (c->finished)
		return -EALREADY;
	if (c->oom)
		return -ENOMEM;
	r = mp_profile_clone(c->p, &q);
	if (r < 0)
		return r;
	/* not in the file: the copy goes on from where the original is */
	for (uint32_t i = 0; i < q->n_kernels && i < c->p->n_kernels; i++)
		q->kernels[i].rss_last_ns = c->p->kernels[i].rss_last_ns;
	for (uint32_t i = 0; i < c->n_pending; i++)
		pending_apply(q, &c->pending[i]);
	/* Close the open kernels at @now_ns in the copy only, as finish would. */
	for (struct frame *f = c->open_tail; f; f = f->prev) {
		struct mp_invocation tmp = *inv_rec(c, f);
		struct pending pe = {
			.inv = f->inv, .name = f->name, .b = f->rss_b, .e = c->last_rss
		};

		tmp.end_ns = now_ns;
		tmp.flags |= MP_INV_F_TRUNCATED;
		tmp.total_bytes_snapshot = c->live_bytes;
		tmp.total_tensors_snapshot = c->live_count;
		if (f->inv != MP_NONE) {
			struct mp_invocation *qi = &q->invocations[f->inv];

			qi->end_ns = tmp.end_ns;
			qi->flags = tmp.flags;
			qi->total_bytes_snapshot = tmp.total_bytes_snapshot;
			qi->total_tensors_snapshot = tmp.total_tensors_snapshot;
		}
		if (aggregate_open(c, q, f, &tmp) < 0) {
			mp_profile_free(q);
			return -ENOMEM;
		}
		pending_apply(q, &pe);
		q->truncated = true;
	}
	/* after the open kernels joined their aggregates */
	sampled_settle(c, q);
	if (c->cur_phase != MP_NONE && now_ns > c->phase_entered)
		q->phases[c->cur_phase].duration_ns += now_ns - c->phase_entered;
	if (c->cur_phase != MP_NONE)
		pools_phase_leave(c, &q->phases[c->cur_phase]);
	if (!c->started)
		q->begin_ns = c->opts.begin_ns ? c->opts.begin_ns : now_ns;
	q->end_ns = now_ns;
	*ret = q;
	return 0;
}

/* ---- pools ----
 *
 * Slices of pools (memprof_pool_* records, and blocks of --alloc functions
 * with pool=) are accounted here, apart from the heap: they never change a
 * heap figure. Each invocation gets one bucket per pool, so per-kernel pool
 * peaks are exact like the heap's. */

int mp_correlator_pool_declare(struct mp_correlator *c, const char *name, uint32_t kind,
			       uint32_t source, uint32_t *ret)
{
	struct mp_profile *p = c->p;
	struct mp_mempool *mp;
	char *d;
	uint32_t i;

	if (!name || kind > MP_POOL_KIND_DEVICE)
		return -EINVAL;
	for (i = 0; i < p->n_mempools; i++) {
		if (p->mempools[i].kind == kind &&
		    strncmp(p->mempools[i].name, name, MAX_NAME_LEN) == 0) {
			*ret = i;
			return 0;
		}
	}
	if (p->n_mempools >= MAX_MEMPOOLS)
		return -E2BIG;
	if (grow((void **)&p->mempools, &c->mempools_cap, p->n_mempools + 1, sizeof(*p->mempools)) <
	    0)
		return -ENOMEM;
	/* pool_head has mempools_cap entries, zeroed as they are added */
	if (p->n_mempools == 0 || (p->n_mempools & (p->n_mempools - 1)) == 0) {
		uint32_t *h = reallocarray(c->pool_head, c->mempools_cap, sizeof(*h));

		if (!h)
			return -ENOMEM;
		c->pool_head = h;
	}
	d = strndup(name, MAX_NAME_LEN);
	if (!d)
		return -ENOMEM;
	mp = &p->mempools[p->n_mempools];
	*mp = (struct mp_mempool){ .name = d, .kind = kind, .source = source };
	c->pool_head[p->n_mempools] = 0;
	*ret = p->n_mempools++;
	return 0;
}

int mp_correlator_set_fn_pool(struct mp_correlator *c, uint32_t fn, const char *name, uint32_t kind)
{
	uint32_t pool;
	int r;

	if (fn >= FN_POOL_MAX)
		return -EINVAL;
	r = mp_correlator_pool_declare(c, name, kind, MP_POOL_SRC_PROBE, &pool);
	if (r < 0)
		return r;
	c->fn_pool[fn] = pool + 1;
	return 0;
}

static uint32_t slice_hash(const struct mp_correlator *c, uint32_t pool, uint64_t addr)
{
	return hash_u64(addr ^ (uint64_t)pool << 48) & (c->slice_ht_cap - 1);
}

static uint32_t slice_find(const struct mp_correlator *c, uint32_t pool, uint64_t addr)
{
	if (!c->slice_ht_cap)
		return 0;
	for (uint32_t i = c->slice_ht[slice_hash(c, pool, addr)]; i; i = c->slices[i].hnext)
		if (c->slices[i].addr == addr && c->slices[i].pool == pool)
			return i;
	return 0;
}

static int slice_rehash(struct mp_correlator *c)
{
	uint32_t ncap = c->slice_ht_cap ? c->slice_ht_cap * 2 : 1024;
	uint32_t *ht = calloc(ncap, sizeof(*ht));

	if (!ht)
		return -ENOMEM;
	free(c->slice_ht);
	c->slice_ht = ht;
	c->slice_ht_cap = ncap;
	for (uint32_t pl = 0; pl < c->p->n_mempools; pl++) {
		for (uint32_t i = c->pool_head[pl]; i; i = c->slices[i].pnext) {
			uint32_t h = slice_hash(c, pl, c->slices[i].addr);

			c->slices[i].hnext = ht[h];
			ht[h] = i;
		}
	}
	return 0;
}

/* A new live slice; 0 when out of memory or beyond MAX_SLICES. */
static uint32_t slice_insert(struct mp_correlator *c, uint32_t pool, uint64_t addr, uint64_t size)
{
	struct slice *sl;
	uint32_t i, h;

	if (c->n_live_slices >= MAX_SLICES)
		return 0;
	if (c->n_live_slices + 1 > c->slice_ht_cap && slice_rehash(c) < 0)
		return 0;
	if (c->free_slices) {
		i = c->free_slices;
		c->free_slices = c->slices[i].hnext;
	} else {
		if (grow((void **)&c->slices, &c->slices_cap, c->slices_used + 2,
			 sizeof(*c->slices)) < 0)
			return 0;
		i = ++c->slices_used;
	}
	sl = &c->slices[i];
	h = slice_hash(c, pool, addr);
	*sl = (struct slice){ .addr = addr, .size = size, .pool = pool };
	sl->hnext = c->slice_ht[h];
	c->slice_ht[h] = i;
	sl->pnext = c->pool_head[pool];
	if (sl->pnext)
		c->slices[sl->pnext].pprev = i;
	c->pool_head[pool] = i;
	c->n_live_slices++;
	return i;
}

static void slice_remove(struct mp_correlator *c, uint32_t i)
{
	struct slice *sl = &c->slices[i];
	uint32_t *pp = &c->slice_ht[slice_hash(c, sl->pool, sl->addr)];

	while (*pp != i)
		pp = &c->slices[*pp].hnext;
	*pp = sl->hnext;
	if (sl->pprev)
		c->slices[sl->pprev].pnext = sl->pnext;
	else
		c->pool_head[sl->pool] = sl->pnext;
	if (sl->pnext)
		c->slices[sl->pnext].pprev = sl->pprev;
	sl->hnext = c->free_slices;
	c->free_slices = i;
	c->n_live_slices--;
}

static struct mp_pool_bucket *bucket_in(struct mp_pool_bucket **v, uint32_t *n, uint32_t pool)
{
	return bucket_get(v, n, sizeof(**v), &pool, sizeof(pool));
}

/* An invocation's bucket of @pool's slices charged to @tag. */
static struct mp_pool_tag_bucket *pool_tag_bucket(struct mp_invocation *r, uint32_t pool,
						  uint32_t tag)
{
	struct mp_pool_tag_bucket key = { .pool = pool, .tag = tag };

	return bucket_get(&r->pool_tags, &r->n_pool_tags, sizeof(key), &key,
			  offsetof(struct mp_pool_tag_bucket, alloc_bytes));
}

/* The index of @tag in @pool's tags, added on first sight; MP_NONE when out
 * of memory. */
static uint32_t pool_tag_of(struct mp_correlator *c, uint32_t pool, uint32_t tag)
{
	struct mp_mempool *mp = &c->p->mempools[pool];
	struct mp_pool_tag *pt = bucket_get(&mp->tags, &mp->n_tags, sizeof(*pt), &tag, sizeof(tag));

	if (!pt) {
		c->oom = true;
		return MP_NONE;
	}
	return (uint32_t)(pt - mp->tags);
}

static struct mp_pool_bucket *pool_bucket(struct mp_invocation *r, uint32_t pool)
{
	return bucket_in(&r->pools, &r->n_pools, pool);
}

/* What is live in a pool when a phase is entered is live during it. */
static int pools_phase_enter(struct mp_correlator *c, struct mp_phase *ph)
{
	for (uint32_t i = 0; i < c->p->n_mempools; i++) {
		struct mp_pool_bucket *b = bucket_in(&ph->pools, &ph->n_pools, i);

		if (!b)
			return -ENOMEM;
		if (c->p->mempools[i].live_bytes > b->peak_bytes)
			b->peak_bytes = c->p->mempools[i].live_bytes;
	}
	return 0;
}

static void pools_phase_leave(struct mp_correlator *c, struct mp_phase *ph)
{
	for (uint32_t i = 0; i < ph->n_pools; i++) {
		if (ph->pools[i].id < c->p->n_mempools) {
			ph->pools[i].live_end = c->p->mempools[ph->pools[i].id].live_bytes;
			ph->pools[i].live_count_end = c->p->mempools[ph->pools[i].id].live_count;
		}
	}
}

/* The current phase's bucket of @pool: traffic and peaks while current. */
static void pool_charge_phase(struct mp_correlator *c, uint32_t pool, uint64_t bytes,
			      uint64_t count, bool alloc)
{
	struct mp_pool_bucket *b;

	if (c->cur_phase == MP_NONE)
		return;
	b = bucket_in(&c->p->phases[c->cur_phase].pools, &c->p->phases[c->cur_phase].n_pools, pool);
	if (!b) {
		c->oom = true;
		return;
	}
	if (alloc) {
		b->alloc_bytes += bytes;
		b->alloc_count += count;
		if (b->alloc_bytes > b->free_bytes &&
		    b->alloc_bytes - b->free_bytes > b->peak_added)
			b->peak_added = b->alloc_bytes - b->free_bytes;
		if (c->p->mempools[pool].live_bytes > b->peak_bytes)
			b->peak_bytes = c->p->mempools[pool].live_bytes;
	} else {
		b->free_bytes += bytes;
		b->free_count += count;
	}
}

/* What is live in a pool when a kernel begins is live during it. */
static int pools_begin(struct mp_correlator *c, struct mp_invocation *r)
{
	r->n_pools = 0;
	r->pools = NULL;
	for (uint32_t i = 0; i < c->p->n_mempools; i++) {
		struct mp_pool_bucket *b = pool_bucket(r, i);

		if (!b)
			return -ENOMEM;
		b->peak_bytes = b->live_end = c->p->mempools[i].live_bytes;
		b->live_count_end = c->p->mempools[i].live_count;
	}
	return 0;
}

static void pools_end(struct mp_correlator *c, struct mp_invocation *r)
{
	for (uint32_t i = 0; i < r->n_pools; i++)
		if (r->pools[i].id < c->p->n_mempools) {
			r->pools[i].live_end = c->p->mempools[r->pools[i].id].live_bytes;
			r->pools[i].live_count_end = c->p->mempools[r->pools[i].id].live_count;
		}
}

static int pool_buckets_merge(struct mp_pool_bucket **dst, uint32_t *n,
			      const struct mp_pool_bucket *src, uint32_t ns)
{
	for (uint32_t i = 0; i < ns; i++) {
		struct mp_pool_bucket *b = bucket_in(dst, n, src[i].id);

		if (!b)
			return -ENOMEM;
		ADD_COUNTS(b, &src[i]);
		if (src[i].peak_added > b->peak_added)
			b->peak_added = src[i].peak_added;
		if (src[i].peak_bytes > b->peak_bytes)
			b->peak_bytes = src[i].peak_bytes;
		b->live_end = src[i].live_end;
		b->live_count_end = src[i].live_count_end;
	}
	return 0;
}

static int pool_tag_buckets_merge(struct mp_pool_tag_bucket **dst, uint32_t *n,
				  const struct mp_pool_tag_bucket *src, uint32_t ns)
{
	for (uint32_t i = 0; i < ns; i++) {
		struct mp_pool_tag_bucket *b =
			bucket_get(dst, n, sizeof(**dst), &src[i],
				   offsetof(struct mp_pool_tag_bucket, alloc_bytes));

		if (!b)
			return -ENOMEM;
		ADD_COUNTS(b, &src[i]);
	}
	return 0;
}

/* Aggregates @tmp, a copy of open invocation @f, into snapshot @q with its
 * pools' live figures as they are now (what frame_close would record), in
 * @q only. */
static int aggregate_open(struct mp_correlator *c, struct mp_profile *q, const struct frame *f,
			  struct mp_invocation *tmp)
{
	struct mp_pool_bucket *scratch = NULL;
	int r;

	if (f->inv != MP_NONE) {
		tmp->pools = q->invocations[f->inv].pools;
	} else if (tmp->n_pools) {
		scratch = malloc(tmp->n_pools * sizeof(*scratch));
		if (!scratch)
			return -ENOMEM;
		memcpy(scratch, tmp->pools, tmp->n_pools * sizeof(*scratch));
		tmp->pools = scratch;
	}
	pools_end(c, tmp);
	r = aggregate(q, tmp);
	free(scratch);
	return r;
}

/* @count slices (or blocks) of @bytes in all, allocated or freed, in
 * figures with a live total and its peak: a pool's, a pool's tag's. */
static void live_charge(struct mp_mem_stats *m, uint64_t *live, uint64_t *live_count,
			uint64_t *peak, uint64_t bytes, uint64_t count, bool alloc)
{
	if (alloc) {
		add_signed(&m->bytes_added, bytes);
		add_signed(&m->tensors_added, count);
		m->alloc_bytes += bytes;
		m->alloc_count += count;
		*live += bytes;
		*live_count += count;
		if (*live > *peak)
			*peak = *live;
	} else {
		add_signed(&m->bytes_added, -bytes);
		add_signed(&m->tensors_added, -count);
		m->free_bytes += bytes;
		m->free_count += count;
		sub_clamped(live, bytes);
		sub_clamped(live_count, count);
	}
}

/* Charges @count slices of @bytes in all, of tag @ptag of the pool (index
 * into its tags), to the invocation of @tid (the attribution rule of the
 * heap) and every kernel enclosing it. */
static void pool_charge(struct mp_correlator *c, uint32_t tid, uint32_t pool, uint32_t ptag,
			uint64_t bytes, uint64_t count, bool alloc)
{
	struct mp_mempool *mp = &c->p->mempools[pool];
	uint32_t tag = MP_TAG_NONE;
	struct thread *t;
	struct frame *f;
	bool cross;

	live_charge(&mp->mem, &mp->live_bytes, &mp->live_count, &mp->peak_bytes, bytes, count,
		    alloc);
	if (ptag < mp->n_tags) {
		struct mp_pool_tag *pt = &mp->tags[ptag];

		tag = pt->tag;
		live_charge(&pt->mem, &pt->live_bytes, &pt->live_count, &pt->peak_bytes, bytes,
			    count, alloc);
	}
	pool_charge_phase(c, pool, bytes, count, alloc);
	for (f = attribute(c, tid, &t, &cross); f; f = f->up) {
		struct mp_pool_bucket *b = pool_bucket(inv_rec(c, f), pool);
		struct mp_pool_tag_bucket *tb = pool_tag_bucket(inv_rec(c, f), pool, tag);
		uint64_t net;

		if (!b || !tb) {
			c->oom = true;
			return;
		}
		if (alloc) {
			b->alloc_bytes += bytes;
			b->alloc_count += count;
			tb->alloc_bytes += bytes;
			tb->alloc_count += count;
		} else {
			b->free_bytes += bytes;
			b->free_count += count;
			tb->free_bytes += bytes;
			tb->free_count += count;
		}
		net = b->alloc_bytes - b->free_bytes;
		if (b->alloc_bytes > b->free_bytes && net > b->peak_added)
			b->peak_added = net;
	}
	if (!alloc)
		return;
	for (f = c->open_tail; f; f = f->prev) {
		struct mp_pool_bucket *b = pool_bucket(inv_rec(c, f), pool);

		if (!b) {
			c->oom = true;
			return;
		}
		if (mp->live_bytes > b->peak_bytes)
			b->peak_bytes = mp->live_bytes;
	}
}

/* The site of a pool slice: sites of the heap's kind with the pool set, in
 * the same table (the hash ignores the pool, lookups compare it). */
static uint32_t pool_site_of(struct mp_correlator *c, uint32_t pool, uint32_t tid, uint64_t caller)
{
	struct mp_profile *p = c->p;
	uint32_t owner = owner_of(c, caller), name = MP_NONE, mask, i, id;
	struct thread *t;
	struct frame *f = attribute(c, tid, &t, &(bool){ false });

	if (f)
		name = f->name;
	if (c->site_ht_cap) {
		mask = c->site_ht_cap - 1;
		for (i = site_hash(caller, name, c->cur_phase, owner, tid, 0) & mask; c->site_ht[i];
		     i = (i + 1) & mask) {
			const struct mp_site *st = &p->sites[c->site_ht[i] - 1];

			if (st->caller == caller && st->name == name && st->phase == c->cur_phase &&
			    st->owner == owner && st->tid == tid && st->pool == pool + 1)
				return c->site_ht[i] - 1;
		}
	}
	id = site_new(c, caller, name, c->cur_phase, owner, tid, 0);
	if (id != MP_NONE)
		p->sites[id].pool = pool + 1;
	return id;
}

static void pool_alloc_slice(struct mp_correlator *c, uint32_t pool, uint32_t tid, uint64_t addr,
			     uint64_t size, uint64_t caller)
{
	uint32_t old = slice_find(c, pool, addr), slice, site;
	struct slice *sl;

	if (old) {
		/* Handed out again without being given back: the old slice
		 * is gone. */
		c->p->accounting_errors++;
		pool_charge(c, tid, pool, c->slices[old].ptag, c->slices[old].size, 1, false);
		slice_remove(c, old);
	}
	slice = slice_insert(c, pool, addr, size);
	if (!slice) {
		if (c->n_live_slices < MAX_SLICES)
			c->oom = true;
		c->p->dropped_markers++;
		return;
	}
	/* The tag open on the allocating thread, as for a heap block; its
	 * free is charged to the same tag. */
	sl = &c->slices[slice];
	sl->ptag = pool_tag_of(c, pool, open_tag(thread_find(c, tid)));
	pool_charge(c, tid, pool, sl->ptag, size, 1, true);
	site = pool_site_of(c, pool, tid, caller);
	if (site != MP_NONE) {
		struct mp_site *st = &c->p->sites[site];

		st->alloc_objects++;
		st->alloc_space += size;
		st->inuse_objects++;
		st->inuse_space += size;
		c->slices[slice].site = site + 1;
	}
}

static void slice_site_free(struct mp_correlator *c, uint32_t i)
{
	struct mp_site *st;

	if (!c->slices[i].site || c->slices[i].site > c->p->n_sites)
		return;
	st = &c->p->sites[c->slices[i].site - 1];
	sub_clamped(&st->inuse_space, c->slices[i].size);
	sub_clamped(&st->inuse_objects, 1);
}

/* Frees slice @addr of @pool; with @any, of any probed pool if not there
 * (one free function for several pools: cudaFree of managed memory). */
static void pool_free_slice(struct mp_correlator *c, uint32_t pool, uint32_t tid, uint64_t addr,
			    bool any)
{
	uint32_t i = slice_find(c, pool, addr);

	for (uint32_t pl = 0; !i && any && pl < c->p->n_mempools; pl++)
		if (c->p->mempools[pl].source == MP_POOL_SRC_PROBE)
			i = slice_find(c, pl, addr);
	if (!i) {
		c->p->mempools[pool].unknown_frees++;
		return;
	}
	pool = c->slices[i].pool;
	pool_charge(c, tid, pool, c->slices[i].ptag, c->slices[i].size, 1, false);
	slice_site_free(c, i);
	slice_remove(c, i);
}

/* Frees every slice of @pool, charged per tag of the pool (the last sum
 * holds slices without one). */
static void pool_reset(struct mp_correlator *c, uint32_t pool, uint32_t tid)
{
	struct mp_mempool *mp = &c->p->mempools[pool];
	uint32_t nt = mp->n_tags;
	bool sums = grow((void **)&c->reset_sums, &c->reset_sums_cap, nt + 1,
			 sizeof(*c->reset_sums)) == 0;

	if (sums)
		memset(c->reset_sums, 0, (nt + 1) * sizeof(*c->reset_sums));
	else
		c->oom = true; /* the figures are lost anyway */
	while (c->pool_head[pool]) {
		uint32_t i = c->pool_head[pool];
		uint32_t k = c->slices[i].ptag < nt ? c->slices[i].ptag : nt;

		if (sums) {
			c->reset_sums[k].bytes += c->slices[i].size;
			c->reset_sums[k].count++;
		}
		slice_site_free(c, i);
		slice_remove(c, i);
	}
	mp->resets++;
	for (uint32_t k = 0; sums && k <= nt; k++)
		if (c->reset_sums[k].count)
			pool_charge(c, tid, pool, k, c->reset_sums[k].bytes, c->reset_sums[k].count,
				    false);
}

static int pool_record(struct mp_correlator *c, const struct mp_record *rec)
{
	uint32_t pool;
	int r;

	r = mp_correlator_pool_declare(c, rec->name ? rec->name : "(null)", rec->pool.kind,
				       MP_POOL_SRC_API, &pool);
	if (r == -E2BIG || r == -EINVAL) {
		c->p->dropped_markers++;
		return 0;
	}
	if (r < 0)
		return r;
	switch (rec->type) {
	case MP_REC_POOL_ALLOC:
		pool_alloc_slice(c, pool, rec->tid, rec->pool.addr, rec->pool.size,
				 rec->pool.caller);
		break;
	case MP_REC_POOL_FREE:
		pool_free_slice(c, pool, rec->tid, rec->pool.addr, false);
		break;
	case MP_REC_POOL_RESET:
		pool_reset(c, pool, rec->tid);
		break;
	}
	return c->oom ? -ENOMEM : 0;
}

/* Heap events of probed pool functions, and frees of their blocks. */
static bool pool_heap_event(struct mp_correlator *c, const struct mp_heap_event *ev)
{
	if (ev->kind == MP_HEAP_FREE)
		return (ev->user & U_POOL_FLAG) != 0;
	return ev->fn < FN_POOL_MAX && c->fn_pool[ev->fn];
}

static uint64_t pool_heap_alloc(struct mp_correlator *c, const struct mp_heap_event *ev)
{
	uint32_t pool;

	if (ev->kind == MP_HEAP_FREE) {
		pool = (uint32_t)(ev->user >> U_OWNER_SHIFT) & U_POOL_MASK;
		if (pool < c->p->n_mempools)
			pool_free_slice(c, pool, ev->tid, ev->addr, true);
		return 0;
	}
	pool = c->fn_pool[ev->fn] - 1;
	if (ev->kind == MP_HEAP_UNKNOWN_FREE) {
		c->p->mempools[pool].unknown_frees++;
		return 0;
	}
	pool_alloc_slice(c, pool, ev->tid, ev->addr, ev->size, ev->caller);
	return U_POOL_FLAG | (uint64_t)pool << U_OWNER_SHIFT;
}
