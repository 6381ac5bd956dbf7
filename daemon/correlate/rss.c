/* SPDX-License-Identifier: MIT */
/* RSS: readings of /proc (samples) and exact changes (rss_stat). */
#include <errno.h>
#include <stdlib.h>

#include "correlator_impl.h"

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

void corr_pending_apply(struct mp_profile *p, const struct pending *pe)
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

void corr_pending_flush(struct mp_correlator *c)
{
	for (uint32_t i = 0; i < c->n_pending; i++)
		corr_pending_apply(c->p, &c->pending[i]);
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
		    corr_grow((void **)&p->rss, &c->rss_cap, p->n_rss + 1, sizeof(*p->rss)) < 0) {
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
				.maps_live = c->maps_live,
			};
	}
	p->rss_samples++;
	if (s->vm_hwm != MP_UNKNOWN)
		p->vm_hwm = s->vm_hwm;
	corr_maps_rss(c, s->rss_anon);
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
	corr_pending_flush(c);
	c->last_rss = cand;
	return 0;
}

/* Exact RSS (rss_stat) */

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
