/* SPDX-License-Identifier: MIT */
/* Sampled mode's variances and bias bounds (docs/PROFILE.md "Sampled
 * figures"), off precise mode's per-record path. */
#include "correlator_impl.h"
#include "heap_impl.h"
#include "sampling.h"

/* Sampled mode, after pool_alloc()/pool_free() of a block of estimate
 * variance @var (0: sent exact): the variance of the owner's or tag's live
 * bytes, and at its peak (pool_alloc() just moved the peak here, or it was here
 * already). From corr_sampled_tail(), off precise mode's per-record path. */
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
__attribute__((noinline)) void corr_sampled_tail(struct mp_correlator *c, struct frame *f,
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

/* Sampled mode: the variance of this block's estimate, added to that of
 * the live bytes; 0 for a block the tracer sent exact. */
double corr_sampled_alloc(struct mp_correlator *c, const struct mp_heap_event *ev)
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
void corr_sampled_settle(const struct mp_correlator *c, struct mp_profile *p)
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
