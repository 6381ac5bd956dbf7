/* SPDX-License-Identifier: MIT */
/* The correlator's lifecycle: new, finish, snapshot, free. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "correlator_impl.h"

_Static_assert(MP_PROFILE_MAX_RANK == MP_MAX_RANK,
	       "the profile keeps every dimension a ring record carries");

int corr_grow(void **arr, uint32_t *cap, uint32_t need, size_t elsz)
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

int corr_pool_add(struct mp_pool **v, uint32_t *n, uint32_t *cap, const char *name)
{
	char *d;

	if (corr_grow((void **)v, cap, *n + 1, sizeof(**v)) < 0)
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
	mp_hashmap_init(&c->names, MAX_NAMES);
	mp_hashmap_init(&c->slice_map, MAX_SLICES);
	mp_hashmap_init(&c->site_map, c->opts.max_sites);
	mp_hashmap_init(&c->owner_map, OWNER_CACHE_SIZE);
	c->cur_phase = MP_NONE;
	c->last_rss.val = MP_UNKNOWN;
	c->site_gen = 1; /* a zeroed hint never matches */
	c->p = mp_profile_new();
	if (!c->p || mp_live_new(&c->live) < 0) {
		mp_correlator_free(c);
		return -ENOMEM;
	}
	c->p->maps_recorded = true;
	mp_live_set_max_bytes(c->live, c->opts.max_live_bytes);
	/* anonymous mappings: a view apart from the heap (mappings.c) */
	c->fn_pool[MP_FN_MMAP] = FN_POOL_MAP;
	c->fn_pool[MP_FN_MREMAP] = FN_POOL_MAP;
	c->fn_pool[MP_FN_MUNMAP] = FN_POOL_MAP; /* what a partial munmap leaves */
	/* owner_cache and pending come with the first allocation and the
	 * first kernel: an rss-mode target without markers needs neither
	 * (docs/SERVICE.md, "Memory per target"). */
	if (corr_pool_add(&c->p->owners, &c->p->n_owners, &c->owners_cap, "(unknown)") < 0 ||
	    corr_pool_add(&c->p->tags, &c->p->n_tags, &c->tags_cap, "(untagged)") < 0) {
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
	mp_live_free(c->live);
	mp_hashmap_free(&c->names);
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
	mp_hashmap_free(&c->owner_map);
	free(c->stack_owner);
	free(c->pending);
	mp_hashmap_free(&c->site_map);
	free(c->stack_site);
	corr_sites_free(c);
	free(c->pool_head);
	free(c->slices);
	mp_hashmap_free(&c->slice_map);
	free(c->reset_sums);
	free(c);
}

int mp_correlator_finish(struct mp_correlator *c, uint64_t end_ns, struct mp_profile **ret)
{
	struct mp_profile *p = c->p;

	if (c->finished)
		return -EALREADY;
	c->finished = true;
	start(c, end_ns);
	c->finishing = true;
	corr_pending_flush(c);
	while (c->open_tail) {
		/* Innermost first, so each closes as the top of its thread. */
		corr_frame_close(c, c->open_tail, end_ns, MP_INV_F_TRUNCATED);
		p->truncated = true;
	}
	corr_phase_leave(c, end_ns);
	p->end_ns = end_ns;
	corr_sampled_settle(c, p);
	corr_limits_fill(c, p);
	corr_sites_compact(c, p);
	corr_sites_settle(c, p);
	corr_peak_parts_settle(c, p);
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
		corr_pending_apply(q, &c->pending[i]);
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
		corr_maps_end(c, &tmp);
		if (f->inv != MP_NONE) {
			struct mp_invocation *qi = &q->invocations[f->inv];

			qi->end_ns = tmp.end_ns;
			qi->flags = tmp.flags;
			qi->total_bytes_snapshot = tmp.total_bytes_snapshot;
			qi->total_tensors_snapshot = tmp.total_tensors_snapshot;
			qi->maps.live_bytes = tmp.maps.live_bytes;
		}
		if (corr_aggregate_open(c, q, f, &tmp) < 0) {
			mp_profile_free(q);
			return -ENOMEM;
		}
		corr_pending_apply(q, &pe);
		q->truncated = true;
	}
	/* after the open kernels joined their aggregates */
	corr_sampled_settle(c, q);
	corr_sites_compact(c, q);
	corr_sites_settle(c, q);
	if (c->cur_phase != MP_NONE && now_ns > c->phase_entered)
		q->phases[c->cur_phase].duration_ns += now_ns - c->phase_entered;
	if (c->cur_phase != MP_NONE) {
		corr_pools_phase_leave(c, &q->phases[c->cur_phase]);
		corr_maps_phase_leave(c, &q->phases[c->cur_phase]);
		if (corr_peak_parts_phase(c, q, &q->phases[c->cur_phase]) < 0) {
			mp_profile_free(q);
			return -ENOMEM;
		}
	}
	corr_peak_parts_settle(c, q);
	if (!c->started)
		q->begin_ns = c->opts.begin_ns ? c->opts.begin_ns : now_ns;
	q->end_ns = now_ns;
	corr_limits_fill(c, q);
	*ret = q;
	return 0;
}
