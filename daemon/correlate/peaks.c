/* SPDX-License-Identifier: MIT */
/* Who held the peaks: each owner's and each tag's live bytes when the
 * process heap, and each phase's, first reached its peak (docs/PROFILE.md
 * "Who held the peak"), written out from pool_keep_peak()'s state. */
#include "correlator_impl.h"

/* @pl's live bytes at the current peak of the current phase (@phase) or
 * of the process. */
static uint64_t share_at(const struct mp_correlator *c, const struct mp_pool *pl, bool phase)
{
	if (phase)
		return pl->epoch < c->ph_epoch ? pl->live_bytes : pl->ph_share;
	return pl->epoch < c->peak_epoch ? pl->live_bytes : pl->peak_share;
}

/* @b bytes of a part, capped so that the parts so far (*@sum) never pass
 * @peak. Every block is one owner's and one tag's, so they sum to the peak
 * exactly; only a free charged elsewhere than its allocation (a stored
 * value the live table did not give, or a free larger than what its owner
 * holds: clamped there) could make them pass it, and a file must never
 * claim more than its peak. */
static uint64_t capped(uint64_t b, uint64_t peak, uint64_t *sum)
{
	if (b > peak - *sum)
		b = peak - *sum;
	*sum += b;
	return b;
}

/* *@parts (*@n of them) := the pools of @v (@nv) with bytes at the current
 * phase's peak @peak, in index order. */
static int parts_write(const struct mp_correlator *c, const struct mp_pool *v, uint32_t nv,
		       uint64_t peak, struct mp_peak_part **parts, uint32_t *n)
{
	struct mp_peak_part *a = *parts;
	uint64_t sum = 0;
	uint32_t k = 0;

	for (uint32_t i = 0; i < nv; i++)
		k += share_at(c, &v[i], true) != 0;
	if (k > *n) {
		a = reallocarray(*parts, k, sizeof(*a));
		if (!a)
			return -ENOMEM;
		*parts = a;
	}
	*n = 0;
	for (uint32_t i = 0; i < nv; i++) {
		uint64_t b = capped(share_at(c, &v[i], true), peak, &sum);

		if (b)
			a[(*n)++] = (struct mp_peak_part){ .id = i, .bytes = b };
	}
	return 0;
}

/* The breakdown of the current phase's peak into @ph (of @p: c->p, or a
 * copy of it with the same owners and tags), when the phase reached a new
 * peak since it was entered; an earlier entry's stays otherwise. */
int corr_peak_parts_phase(const struct mp_correlator *c, struct mp_profile *p, struct mp_phase *ph)
{
	if (!c->ph_reached)
		return 0;
	if (parts_write(c, p->owners, p->n_owners, ph->peak_bytes, &ph->peak_owners,
			&ph->n_peak_owners) < 0 ||
	    parts_write(c, p->tags, p->n_tags, ph->peak_bytes, &ph->peak_tags, &ph->n_peak_tags) <
		    0)
		return -ENOMEM;
	return 0;
}

/* The owners' and tags' bytes at the process peak in @p (c->p, or a copy
 * of it), and the correlator's state out of them. */
void corr_peak_parts_settle(const struct mp_correlator *c, struct mp_profile *p)
{
	struct mp_pool *v[2] = { p->owners, p->tags };
	uint32_t n[2] = { p->n_owners, p->n_tags };

	for (int k = 0; k < 2; k++) {
		uint64_t sum = 0;

		for (uint32_t i = 0; i < n[k]; i++) {
			struct mp_pool *pl = &v[k][i];

			pl->peak_share = capped(share_at(c, pl, false), p->peak_bytes, &sum);
			pl->epoch = pl->ph_share = 0;
		}
	}
	p->peak_parts = true;
}
