/* SPDX-License-Identifier: MIT */
/* Owners (--owner rules, object files) and allocation sites. */
#include <errno.h>
#include <fnmatch.h>
#include <stdlib.h>
#include <string.h>

#include "correlator_impl.h"
#include "ring_abi.h"

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
	} else if (spec && !strncmp(spec, "py:", 3)) {
		kind = RULE_PY;
		spec += 3;
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
	c->native_frame_rules |= kind == RULE_FN || kind == RULE_SRC;
	/* Owners already cached were named without this rule. */
	mp_hashmap_reset(&c->owner_map);
	c->owner_cache_used = 0;
	c->site_gen++;
	return 0;
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

	/* py: rules alone look at Python frames only */
	if (c->frame_rules && c->opts.resolve_frames &&
	    (c->native_frame_rules || MP_PYFRAME_IS(addr)))
		n = c->opts.resolve_frames(c->opts.resolve_ctx, addr, sf, MAX_SRC_FRAMES);
	if (n < 0)
		n = 0;
	for (int j = 0; j < (n ? n : 1); j++) {
		for (uint32_t i = 0; i < c->n_rules; i++) {
			const struct owner_rule *r = &c->rules[i];
			const char *s = r->kind == RULE_DSO		    ? base :
					j >= n				    ? NULL :
					r->kind == RULE_FN		    ? sf[j].function :
					r->kind == RULE_PY && !sf[j].python ? NULL :
									      sf[j].file;

			if (s && fnmatch(r->glob, s, 0) == 0)
				return r->name;
		}
	}
	return NULL;
}

/* Owner by frames: the first rule matching, innermost frame first, else
 * the caller's object. Remembered per stack. */
uint32_t corr_owner_of_stack(struct mp_correlator *c, uint64_t caller, uint32_t stack)
{
	const uint64_t *frames = &caller;
	uint32_t n = 1, owner = MP_OWNER_UNKNOWN;
	const char *name = NULL;

	if (stack && stack < c->stack_owner_cap && c->stack_owner[stack])
		return c->stack_owner[stack] - 1;
	if (stack && c->opts.stack_frames) {
		n = c->opts.stack_frames(c->opts.resolve_ctx, stack, &frames);
		/* the caller may be past allocator wrappers: from its frame on */
		for (uint32_t i = 0; i < n; i++) {
			if (frames[i] == caller) {
				frames += i;
				n -= i;
				break;
			}
		}
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
	r = corr_pool_add(&c->p->owners, &c->p->n_owners, &c->owners_cap, name);
	if (r < 0) {
		c->oom = true;
		return MP_OWNER_UNKNOWN;
	}
	return r;
}

static bool owner_eq(const void *ctx, uint32_t id, const void *key)
{
	const struct mp_correlator *c = ctx;

	return c->owner_cache[id].caller == *(const uint64_t *)key;
}

/* The owner cache: its entries and its map's slots, allocated once. */
static bool owner_cache_alloc(struct mp_correlator *c)
{
	if (c->owner_cache)
		return true;
	c->owner_cache = calloc(OWNER_CACHE_SIZE, sizeof(*c->owner_cache));
	if (c->owner_cache && mp_hashmap_reserve(&c->owner_map, OWNER_CACHE_SIZE) < 0) {
		free(c->owner_cache);
		c->owner_cache = NULL;
	}
	return c->owner_cache != NULL;
}

uint32_t corr_owner_of(struct mp_correlator *c, uint64_t caller)
{
	uint64_t h = mp_hash_u64(caller);
	uint32_t id, owner;

	if (!caller || !c->opts.resolve_owner)
		return MP_OWNER_UNKNOWN;
	if (!owner_cache_alloc(c))
		return owner_for_path(c, c->opts.resolve_owner(c->opts.resolve_ctx, caller));
	if (mp_hashmap_find(&c->owner_map, h, owner_eq, c, &caller, &id) == 0)
		return c->owner_cache[id].owner;
	owner = c->frame_rules ?
			corr_owner_of_stack(c, caller, 0) :
			owner_for_path(c, c->opts.resolve_owner(c->opts.resolve_ctx, caller));
	/* A process with very many call sites: start over rather than grow. */
	if (c->owner_cache_used >= OWNER_CACHE_SIZE) {
		mp_hashmap_reset(&c->owner_map);
		c->owner_cache_used = 0;
		c->site_gen++;
	}
	if (mp_hashmap_insert(&c->owner_map, h, c->owner_cache_used) == 0)
		c->owner_cache[c->owner_cache_used++] =
			(struct owner_slot){ .caller = caller, .owner = owner };
	return owner;
}

/* ---- allocation sites ---- */

/* A new entry at the end of p->sites (MP_NONE when out of memory). */
uint32_t corr_site_append(struct mp_correlator *c, const struct mp_site *st)
{
	struct mp_profile *p = c->p;

	if (corr_grow((void **)&p->sites, &c->sites_cap, p->n_sites + 1, sizeof(*p->sites)) < 0 ||
	    (c->opts.sample_bytes && corr_grow((void **)&p->site_vars, &c->site_vars_cap,
					       p->n_sites + 1, sizeof(*p->site_vars)) < 0)) {
		c->oom = true;
		return MP_NONE;
	}
	p->sites[p->n_sites] = *st;
	/* none of it was live at the current peak */
	p->sites[p->n_sites].peak_ver = c->peak_ver;
	if (p->site_vars)
		p->site_vars[p->n_sites] = (struct mp_site_var){ 0 };
	return p->n_sites++;
}

/* Limits: the "(other sites)" entry of pool @pool (0: the heap), added
 * after the sites when the table is first full; never in the site map, so
 * no lookup finds it. MP_NONE when out of memory. */
uint32_t corr_site_other(struct mp_correlator *c, uint32_t pool)
{
	uint32_t *o = &c->other_site[pool <= MAX_MEMPOOLS ? pool : 0];

	c->p->limits.reached |= MP_LIMIT_SITES;
	if (!*o) {
		const struct mp_site st = { .name = MP_NONE,
					    .phase = MP_NONE,
					    .owner = MP_OWNER_UNKNOWN,
					    .pool = pool,
					    .flags = MP_SITE_F_OTHER };
		uint32_t id = corr_site_append(c, &st);

		if (id == MP_NONE)
			return MP_NONE;
		*o = id + 1;
	}
	return *o - 1;
}

/* An allocation no site of the table can take: counted in "(other
 * sites)" and in sites_dropped. */
uint32_t corr_site_dropped(struct mp_correlator *c, uint32_t pool)
{
	c->p->sites_dropped++;
	return corr_site_other(c, pool);
}

/*
 * Sites by stack. A heap site with a stack is most often the only site of
 * its stack: its stack id finds it, in c->stack_site, and the site map
 * holds it not (an allocation with a new stack, most of a PyTorch import's,
 * then misses in neither the map's lookup nor its insert: the new ids' end
 * of the array is in cache). The other sites of a stack (other threads,
 * kernels, phases or owners) go to the map, and the stack's entry says so.
 */
#define STACK_SITE_MORE 0x80000000u
#define STACK_SITE_MAX (1u << 25)

/* Stack @stack's entry in c->stack_site, grown to hold it when @grow;
 * NULL when out of memory or past STACK_SITE_MAX (its sites all in the
 * map). */
static uint32_t *stack_site_of(struct mp_correlator *c, uint32_t stack, bool grow)
{
	uint32_t cap, *t;

	if (stack < c->stack_site_cap)
		return &c->stack_site[stack];
	if (!grow || stack >= STACK_SITE_MAX)
		return NULL;
	for (cap = c->stack_site_cap ? c->stack_site_cap : 4096; cap <= stack;)
		cap *= 2;
	t = reallocarray(c->stack_site, cap, sizeof(*t));
	if (!t) {
		/* the stacks' sites go to the map: once the array grows
		 * again, a stack's entry no longer says where they are */
		c->stack_site_lost = true;
		return NULL;
	}
	memset(t + c->stack_site_cap, 0, (size_t)(cap - c->stack_site_cap) * sizeof(*t));
	c->stack_site = t;
	c->stack_site_cap = cap;
	return &c->stack_site[stack];
}

/* Site @id of key @k (@hash: site_hash()) made findable: by its stack
 * when it is the first of it, else in the map. 0, -ENOSPC (the map's
 * bound), -ENOMEM. */
int corr_site_key_add(struct mp_correlator *c, const struct site_key *k, uint64_t hash, uint32_t id)
{
	uint32_t *e = k->stack && !k->pool ? stack_site_of(c, k->stack, true) : NULL;
	int r;

	if (e && !(*e & ~STACK_SITE_MORE)) {
		*e |= id + 1;
		c->n_stack_sites++;
		return 0;
	}
	r = mp_hashmap_insert(&c->site_map, hash, id);
	if (r == 0 && e)
		*e |= STACK_SITE_MORE;
	return r;
}

/* Site @id of key @k no longer findable. */
void corr_site_key_remove(struct mp_correlator *c, const struct site_key *k, uint64_t hash,
			  uint32_t id)
{
	uint32_t *e = k->stack && !k->pool ? stack_site_of(c, k->stack, false) : NULL;

	if (e && (*e & ~STACK_SITE_MORE) == id + 1) {
		*e &= STACK_SITE_MORE;
		c->n_stack_sites--;
		return;
	}
	mp_hashmap_remove(&c->site_map, hash, id);
}

/* A new site of pool @pool (0: the heap); the table full, in place of the
 * site with the fewest bytes (sites.c), else the pool's "(other sites)"
 * entry; MP_NONE when out of memory. */
uint32_t corr_site_new(struct mp_correlator *c, uint64_t caller, uint32_t name, uint32_t phase,
		       uint32_t owner, uint32_t tid, uint32_t stack, uint32_t pool)
{
	const struct site_key k = { caller, name, phase, owner, tid, stack, pool };
	const struct mp_site st = { .caller = caller,
				    .name = name,
				    .phase = phase,
				    .owner = owner,
				    .tid = tid,
				    .stack = stack,
				    .pool = pool };
	struct mp_profile *p = c->p;
	uint64_t h = site_hash(&k);
	int r;

	if (mp_hashmap_count(&c->site_map) + c->n_stack_sites >= c->opts.max_sites)
		return corr_site_evict(c, &st, h);
	r = corr_site_key_add(c, &k, h, p->n_sites);
	if (r == -ENOSPC)
		return corr_site_dropped(c, pool);
	if (r < 0) {
		c->oom = true;
		return MP_NONE;
	}
	if (corr_site_append(c, &st) == MP_NONE) {
		corr_site_key_remove(c, &k, h, p->n_sites);
		return MP_NONE;
	}
	return p->n_sites - 1;
}

/* Limits: the live table's, sites' and names' part of p->limits (the
 * session adds the memory bound and the stack table's). */
void corr_limits_fill(const struct mp_correlator *c, struct mp_profile *p)
{
	struct mp_live_stats ls;
	uint64_t max = mp_live_max_blocks(c->live);

	mp_live_stats(c->live, &ls);
	p->limits.live_blocks = max == UINT64_MAX ? 0 : max;
	p->limits.untracked_allocs = ls.untracked;
	p->limits.untracked_bytes = ls.untracked_bytes;
	if (ls.untracked)
		p->limits.reached |= MP_LIMIT_LIVE;
	p->limits.sites = c->opts.max_sites;
	p->limits.sites_evicted = c->sites_evicted;
	p->limits.site_error_bytes = 0;
	for (uint32_t i = 0; c->sites_evicted && i < p->n_sites; i++)
		if (!(p->sites[i].flags & SITE_F_HOLE) &&
		    p->sites[i].error_space > p->limits.site_error_bytes)
			p->limits.site_error_bytes = p->sites[i].error_space;
}

/* The site of an allocation, created if new (the table full: see
 * corr_site_new()); MP_NONE when out of memory. With call
 * stacks, allocations from one caller on different paths are different
 * sites. */
uint32_t corr_site_of(struct mp_correlator *c, uint64_t caller, uint32_t name, uint32_t phase,
		      uint32_t owner, uint32_t tid, uint32_t stack)
{
	const struct site_key k = { caller, name, phase, owner, tid, stack, 0 };
	const uint32_t *e = stack ? stack_site_of(c, stack, false) : NULL;
	uint32_t id;

	if (e) {
		id = *e & ~STACK_SITE_MORE;
		if (id && site_eq(c->p, id - 1, &k))
			return id - 1;
		/* no other site of this stack */
		if (!(*e & STACK_SITE_MORE) && !c->stack_site_lost)
			return corr_site_new(c, caller, name, phase, owner, tid, stack, 0);
	}
	if (mp_hashmap_find(&c->site_map, site_hash(&k), site_eq, c->p, &k, &id) == 0)
		return id;
	return corr_site_new(c, caller, name, phase, owner, tid, stack, 0);
}

/* The sites' figures at the peak in @p (c->p, or a copy of it), from
 * site_keep_peak()'s state: a site not changed since the current peak
 * holds its figures at the peak now. */
void corr_sites_settle(const struct mp_correlator *c, struct mp_profile *p)
{
	for (uint32_t i = 0; i < p->n_sites; i++) {
		struct mp_site *st = &p->sites[i];

		if (st->peak_ver != c->peak_ver) {
			st->peak_objects = st->inuse_objects;
			st->peak_space = st->inuse_space;
		}
		st->peak_ver = 0;
		/* What was live at the peak was allocated: only sums that
		 * wrapped (a target's absurd pool slices) say otherwise, and
		 * the file format refuses that. */
		if (st->peak_objects > st->alloc_objects)
			st->peak_objects = st->alloc_objects;
		if (st->peak_space > st->alloc_space)
			st->peak_space = st->alloc_space;
	}
}
