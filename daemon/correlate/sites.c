/* SPDX-License-Identifier: MIT */
/*
 * The site table past its bound (docs/PROFILE.md "Limits"): weighted
 * space-saving on allocated bytes (Metwally, Agrawal and El Abbadi,
 * "Efficient computation of frequent and top-k elements in data streams",
 * ICDT 2005). A site's key is the bytes it inherited when admitted
 * (error_space) plus those it allocated since (alloc_space). A new site
 * finding the table full takes the place of the site of smallest key:
 * that one's figures go to its pool's "(other sites)" entry, and the new
 * one starts from zero with that key as its error. A listed site's true
 * bytes lie in [alloc_space, alloc_space + error_space], and a site that
 * allocated more than (all bytes allocated) / max_sites is listed.
 *
 * Nothing here runs before the table is first full: the per-event path
 * only reads a site's flags beside its owner at a free (SITE_F_HOLE).
 */
#include "correlator_impl.h"
#include "live.h"

/* Holes (SITE_F_HOLE) at least allowed: each is a site's entry, 96 bytes. */
#define SS_MIN_SPARE 64u
/* And at least one for every SS_SLOTS_PER_HOLE slots of the live table,
 * so that its walk (ss_reclaim()) costs at most that many slots an
 * eviction: 112 bytes (an entry and its variances) for 64 slots of 48
 * bytes, at most 1/50 of the memory bound (half of which is the live
 * table's). */
#define SS_SLOTS_PER_HOLE 64u

static uint64_t ss_key(const struct mp_site *st)
{
	uint64_t k = st->error_space + st->alloc_space;

	return k < st->alloc_space ? UINT64_MAX : k;
}

static void ss_down(struct ss_node *h, uint32_t n, uint32_t i)
{
	struct ss_node x = h[i];

	for (;;) {
		uint32_t l = 2 * i + 1, m;

		if (l >= n)
			break;
		m = l + 1 < n && h[l + 1].key < h[l].key ? l + 1 : l;
		if (h[m].key >= x.key)
			break;
		h[i] = h[m];
		i = m;
	}
	h[i] = x;
}

/* @arr (of *@cap elements of @elsz) to exactly @need elements, the new
 * ones zeroed. */
static int grow_exact(void **arr, uint32_t *cap, uint32_t need, size_t elsz)
{
	void *n;

	if (need <= *cap)
		return 0;
	n = reallocarray(*arr, need, elsz);
	if (!n)
		return -ENOMEM;
	memset((char *)n + (size_t)*cap * elsz, 0, (size_t)(need - *cap) * elsz);
	*arr = n;
	*cap = need;
	return 0;
}

/* The table is full for the first time: the heap over its sites, and room
 * for every entry p->sites can have from now on (the sites, the pools'
 * "(other sites)" and the holes), so that it never moves again. */
static int ss_start(struct mp_correlator *c)
{
	struct mp_profile *p = c->p;
	uint32_t spare =
		c->opts.max_sites / 8 > SS_MIN_SPARE ? c->opts.max_sites / 8 : SS_MIN_SPARE;
	uint32_t cap = p->n_sites + MAX_MEMPOOLS + 1 + spare;

	if (grow_exact((void **)&p->sites, &c->sites_cap, cap, sizeof(*p->sites)) < 0 ||
	    (c->opts.sample_bytes &&
	     grow_exact((void **)&p->site_vars, &c->site_vars_cap, cap, sizeof(*p->site_vars)) < 0))
		return -ENOMEM;
	c->ss_heap = calloc(c->opts.max_sites, sizeof(*c->ss_heap));
	c->ss_free = calloc(spare, sizeof(*c->ss_free));
	if (!c->ss_heap || !c->ss_free) {
		free(c->ss_heap);
		free(c->ss_free);
		c->ss_heap = NULL;
		c->ss_free = NULL;
		return -ENOMEM;
	}
	c->ss_spare = spare;
	for (uint32_t i = 0; i < p->n_sites && c->ss_n < c->opts.max_sites; i++)
		if (!(p->sites[i].flags & MP_SITE_F_OTHER))
			c->ss_heap[c->ss_n++] = (struct ss_node){ ss_key(&p->sites[i]), i };
	for (uint32_t i = c->ss_n / 2; i-- > 0;)
		ss_down(c->ss_heap, c->ss_n, i);
	return 0;
}

/* The heap's top made current: a key only grows (the sites allocate), so
 * once the top's key is its site's key, no site has a smaller one. */
static void ss_settle_top(struct mp_correlator *c)
{
	for (;;) {
		struct ss_node *top = &c->ss_heap[0];
		uint64_t k = ss_key(&c->p->sites[top->site]);

		if (k == top->key)
			return;
		top->key = k;
		ss_down(c->ss_heap, c->ss_n, 0);
	}
}

/* A live block's value (heap.c) naming a retired entry: the same block
 * counted in "(other sites)", where its site's figures went. */
static uint64_t ss_rewrite(void *ctx, uint64_t user)
{
	const struct mp_correlator *c = ctx;
	const struct mp_site *st;
	uint32_t site;

	if ((user & (U_SITE_FLAG | U_POOL_FLAG)) != U_SITE_FLAG)
		return user;
	site = (uint32_t)(user >> U_OWNER_SHIFT & U_POOL_MASK) |
	       (uint32_t)(user >> U_NAME_SHIFT & U_NAME_MASK) << 12;
	if (site >= c->p->n_sites || !(c->p->sites[site].flags & SITE_F_RETIRED))
		return user;
	st = &c->p->sites[site];
	return U_OTHER_FLAG | (uint64_t)(st->owner & U_POOL_MASK) << U_OWNER_SHIFT |
	       (user & (uint64_t)U_POOL_MASK << U_TAG_SHIFT) |
	       (uint64_t)((st->name + 1) & U_NAME_MASK) << U_NAME_SHIFT |
	       (user & (uint64_t)U_INV_MASK << U_INV_SHIFT);
}

/* Every hole full of retired entries: what names them (the live table's
 * blocks, the pools' slices) is made to name "(other sites)" instead, and
 * they are all free. Not when blocks' values are held outside, where
 * they cannot be rewritten (mp_correlator_on_heap() without
 * mp_correlator_values_in()): entries are then freed only as their blocks
 * are. */
static void ss_reclaim(struct mp_correlator *c)
{
	struct mp_profile *p = c->p;

	if (c->users_outside)
		return;
	mp_live_map_user(c->values ? c->values : c->live, ss_rewrite, c);
	for (uint32_t i = 1; i <= c->slices_used; i++) {
		struct slice *sl = &c->slices[i];
		const struct mp_site *st;

		if (!sl->site || sl->site > p->n_sites)
			continue;
		st = &p->sites[sl->site - 1];
		if (st->flags & SITE_F_RETIRED)
			sl->site = c->other_site[st->pool <= MAX_MEMPOOLS ? st->pool : 0];
	}
	for (uint32_t i = 0; i < p->n_sites; i++) {
		if (p->sites[i].flags & SITE_F_RETIRED) {
			p->sites[i].flags = SITE_F_FREE;
			p->sites[i].inuse_objects = 0;
			c->ss_free[c->ss_n_free++] = i;
		}
	}
}

/* More holes allowed, as the live table grew (SS_SLOTS_PER_HOLE). */
static void ss_more_spare(struct mp_correlator *c)
{
	const struct mp_live *l = c->values ? c->values : c->live;
	uint64_t want = mp_live_bytes(l) / sizeof(struct mp_live_block) / SS_SLOTS_PER_HOLE;
	uint32_t cap, *f;

	if (want > MAX_SITES)
		want = MAX_SITES;
	if (c->users_outside || want <= c->ss_spare)
		return;
	cap = c->sites_cap + ((uint32_t)want - c->ss_spare);
	f = reallocarray(c->ss_free, want, sizeof(*f));
	if (!f)
		return;
	c->ss_free = f;
	if ((c->opts.sample_bytes && grow_exact((void **)&c->p->site_vars, &c->site_vars_cap, cap,
						sizeof(*c->p->site_vars)) < 0) ||
	    grow_exact((void **)&c->p->sites, &c->sites_cap, cap, sizeof(*c->p->sites)) < 0)
		return;
	c->ss_spare = (uint32_t)want;
}

/* An entry for a new site while the evicted one is retired: a free hole,
 * or a new entry while there are fewer holes than allowed. MP_NONE: none. */
static uint32_t ss_entry(struct mp_correlator *c)
{
	struct mp_profile *p = c->p;

	if (!c->ss_n_free && c->ss_holes >= c->ss_spare)
		ss_more_spare(c);
	if (!c->ss_n_free && c->ss_holes >= c->ss_spare)
		ss_reclaim(c);
	if (c->ss_n_free) {
		c->ss_holes--;
		return c->ss_free[--c->ss_n_free];
	}
	if (c->ss_holes >= c->ss_spare || p->n_sites >= c->sites_cap ||
	    (p->site_vars && p->n_sites >= c->site_vars_cap))
		return MP_NONE;
	p->sites[p->n_sites] = (struct mp_site){ 0 };
	return p->n_sites++;
}

/* The figures of site @v go to "(other sites)" entry @o, as if its
 * allocations had been counted there. */
static void ss_fold(struct mp_correlator *c, uint32_t v, uint32_t o)
{
	struct mp_profile *p = c->p;
	struct mp_site *vs = &p->sites[v], *os = &p->sites[o];

	/* both hold their figures at the current peak: then they add up */
	site_keep_peak(c, vs);
	site_keep_peak(c, os);
	os->alloc_objects += vs->alloc_objects;
	os->alloc_space += vs->alloc_space;
	os->inuse_objects += vs->inuse_objects;
	os->inuse_space += vs->inuse_space;
	os->peak_objects += vs->peak_objects;
	os->peak_space += vs->peak_space;
	p->sites_dropped += vs->alloc_objects;
	if (p->site_vars) {
		p->site_vars[o].alloc_space += p->site_vars[v].alloc_space;
		p->site_vars[o].inuse_space += p->site_vars[v].inuse_space;
		p->site_vars[v] = (struct mp_site_var){ 0 };
	}
}

uint32_t corr_site_evict(struct mp_correlator *c, const struct mp_site *st, uint64_t hash)
{
	struct mp_profile *p = c->p;
	struct mp_site *vs;
	struct site_key vk;
	uint32_t v, o, id;
	uint64_t key, live;

	if ((!c->ss_heap && ss_start(c) < 0) || !c->ss_n)
		return corr_site_dropped(c, st->pool);
	ss_settle_top(c);
	v = c->ss_heap[0].site;
	key = c->ss_heap[0].key;
	o = corr_site_other(c, p->sites[v].pool);
	if (o == MP_NONE)
		return MP_NONE;
	live = p->sites[v].inuse_objects;
	id = live ? ss_entry(c) : v;
	if (id == MP_NONE)
		return corr_site_dropped(c, st->pool);
	vs = &p->sites[v];
	vk = (struct site_key){ vs->caller, vs->name,  vs->phase, vs->owner,
				vs->tid,    vs->stack, vs->pool };
	corr_site_key_remove(c, &vk, site_hash(&vk), v);
	ss_fold(c, v, o);
	if (live) {
		/* its blocks' frees: owner and name are theirs (heap.c) */
		*vs = (struct mp_site){ .caller = vs->caller,
					.name = vs->name,
					.phase = vs->phase,
					.owner = vs->owner,
					.pool = vs->pool,
					.flags = SITE_F_RETIRED,
					.inuse_objects = live };
		c->ss_holes++;
	}
	p->sites[id] = *st;
	p->sites[id].peak_ver = c->peak_ver; /* none of it live at the peak */
	p->sites[id].error_space = key;
	if (p->site_vars)
		p->site_vars[id] = (struct mp_site_var){ 0 };
	/* one out, one in: the map has the room */
	if (corr_site_key_add(c,
			      &(struct site_key){ st->caller, st->name, st->phase, st->owner,
						  st->tid, st->stack, st->pool },
			      hash, id) < 0)
		c->oom = true;
	/* the key is the smallest: the top still */
	c->ss_heap[0].site = id;
	c->sites_evicted++;
	/* the threads' hints may name the evicted site; evictions can be
	 * many: a generation that wraps empties the hints */
	if (++c->site_gen == 0) {
		memset(c->site_hint, 0, sizeof(c->site_hint));
		c->site_gen = 1;
	}
	return id;
}

/* A free of a block whose site's entry @st is a hole: its figures are in
 * its pool's "(other sites)" entry, returned (NULL: none). */
struct mp_site *corr_site_retired_free(struct mp_correlator *c, struct mp_site *st)
{
	struct mp_profile *p = c->p;
	uint32_t o = c->other_site[st->pool <= MAX_MEMPOOLS ? st->pool : 0];

	if ((st->flags & SITE_F_RETIRED) && st->inuse_objects && !--st->inuse_objects) {
		st->flags = SITE_F_FREE;
		c->ss_free[c->ss_n_free++] = (uint32_t)(st - p->sites);
	}
	return o ? &p->sites[o - 1] : NULL;
}

/* The holes out of @p (c->p or a copy), for a profile handed out. */
void corr_sites_compact(const struct mp_correlator *c, struct mp_profile *p)
{
	uint32_t n = 0;

	if (!c->ss_holes)
		return;
	for (uint32_t i = 0; i < p->n_sites; i++) {
		if (p->sites[i].flags & SITE_F_HOLE)
			continue;
		p->sites[n] = p->sites[i];
		if (p->site_vars)
			p->site_vars[n] = p->site_vars[i];
		n++;
	}
	p->n_sites = n;
}

void corr_sites_free(struct mp_correlator *c)
{
	free(c->ss_heap);
	free(c->ss_free);
}
