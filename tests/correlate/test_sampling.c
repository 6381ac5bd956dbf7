// SPDX-License-Identifier: MIT
/*
 * The statistics of sampled mode (daemon/correlate/sampling.h,
 * docs/PROFILE.md "Sampled figures") on seeded simulations of the
 * byte-weighted Poisson scheme, fed through the live table and the
 * correlator as the daemon feeds them: the estimates are unbiased, their
 * standard errors calibrated, a peak's upward bias real and within the
 * reported bound, and exact mode carries no variance at all.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "correlator.h"
#include "live.h"
#include "sampling.h"

/* xorshift64*, as the interposer draws */
static uint64_t rnd(uint64_t *s)
{
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return *s * 0x2545f4914f6cdd1dull;
}

static double unif(uint64_t *s)
{
	return ((double)(rnd(s) >> 11) + 1.0) / 9007199254740992.0;
}

/* libclient/interpose.c sample(): a per-thread exponential countdown, so
 * sample points form a Poisson process over the bytes allocated. */
struct sampler {
	uint64_t rng, mean;
	double countdown;
};

static bool sampled(struct sampler *s, uint64_t size)
{
	if (size >= s->mean)
		return true;
	s->countdown -= (double)size;
	if (s->countdown > 0)
		return false;
	while (s->countdown <= 0)
		s->countdown += -log(unif(&s->rng)) * (double)s->mean;
	return true;
}

/* The tracer's estimate (mp_tracer_sample_estimate()), rounded as it is. */
static uint64_t estimate(uint64_t size, uint64_t mean)
{
	return (uint64_t)llround(mp_sample_weight(size, mean));
}

Test(sampling, inverse_of_the_estimate_gives_the_variance)
{
	const uint64_t mean = 4096;

	for (uint64_t w = 1; w < mean; w++) {
		uint64_t est = estimate(w, mean);
		double p = -expm1(-(double)w / (double)mean);
		double want = (double)w * (double)w * (1 - p) / (p * p);
		double got = mp_sample_var(est, mean, 1);

		cr_assert(fabs(got - want) <= 1e-3 * want, "w %lu: variance %g, want %g",
			  (unsigned long)w, got, want);
	}
	/* blocks sent exact add nothing */
	cr_assert_eq(mp_sample_var(8192, mean, 0), 0);
	cr_assert_eq(mp_sample_var(300, mean, 0), 0);
	cr_assert_eq(mp_sample_prob(5000, mean, 0), 1.0);
	cr_assert_eq(mp_sample_peak_bias_bound(1e9, mean, 1), 0);
}

static bool same_bits(double a, double b)
{
	return memcmp(&a, &b, sizeof(a)) == 0;
}

/* The correlator's per-block probability comes from a cache: it must be
 * mp_sample_prob() bit for bit, whatever came before it (every size below
 * the interval, hits and evictions, the same estimate under another
 * interval, forged estimates, the no-sampling cases). */
Test(sampling, cached_probability_is_bit_identical)
{
	static const uint64_t means[] = { 1, 2, 7, 100, 4096, 4097, 65536, 1u << 20 };
	uint64_t rng = 0x5eed;

	for (int pass = 0; pass < 2; pass++)
		for (size_t m = 0; m < sizeof(means) / sizeof(means[0]); m++) {
			uint64_t mean = means[m], step = mean > 8192 ? mean / 4096 : 1;

			for (uint64_t w = 1; w < mean; w += step) {
				uint64_t est = estimate(w, mean);

				double want = mp_sample_prob(est, mean, 1);

				/* the correlator's free path: mp_sample_var() */
				cr_assert(same_bits(mp_sample_var(est, mean, 1),
						    (double)est * (double)est * (1.0 - want)));
				cr_assert(same_bits(mp_sample_prob_cached(est, mean), want),
					  "mean %lu size %lu est %lu", (unsigned long)mean,
					  (unsigned long)w, (unsigned long)est);
				/* the same estimate under the next interval */
				cr_assert(same_bits(mp_sample_prob_cached(est, mean + 1),
						    mp_sample_prob(est, mean + 1, 1)));
			}
		}
	for (int i = 0; i < 200000; i++) {
		uint64_t mean = 1 + rnd(&rng) % 8192, est = rnd(&rng) >> (rnd(&rng) % 64);

		if (i % 3 == 0)
			est = estimate(1 + rnd(&rng) % mean, mean);
		cr_assert(same_bits(mp_sample_prob_cached(est, mean), mp_sample_prob(est, mean, 1)),
			  "mean %lu est %lu", (unsigned long)mean, (unsigned long)est);
	}
	cr_assert(same_bits(mp_sample_prob_cached(0, 4096), 1.0));
	cr_assert(same_bits(mp_sample_prob_cached(300, 0), 1.0));
	cr_assert(same_bits(mp_sample_prob_cached(4096, 4096), 0.0)); /* y <= 1 */
}

/* One simulated run: a sliding window of @live blocks of 16..63 B, @steps
 * times the oldest freed and a new one allocated, then all freed; the
 * sampled blocks go through the live table into the correlator. */
struct sim {
	uint64_t alloc_true, peak_true;
	double alloc_var_true;
	struct mp_profile *p;
};

static uint64_t corr_cb(void *ctx, const struct mp_heap_event *ev)
{
	return mp_correlator_on_heap(ctx, ev);
}

static void simulate(uint64_t seed, uint64_t mean, int live, int steps, struct sim *ret)
{
	struct mp_correlator_opts o = { .begin_ns = 1, .sample_bytes = mean };
	struct sampler smp = { .rng = seed * 0x9e3779b97f4a7c15ull + 1, .mean = mean };
	uint64_t *sz = calloc((size_t)live, sizeof(*sz)), cur = 0, ts = 1, rng = seed | 1;
	struct mp_correlator *c;
	struct mp_live *l;

	cr_assert_not_null(sz);
	cr_assert_eq(mp_correlator_new(&o, &c), 0);
	cr_assert_eq(mp_live_new(&l), 0);
	*ret = (struct sim){ 0 };
	smp.countdown = -log(unif(&smp.rng)) * (double)mean;
	for (int i = 0; i < live + steps + live; i++) {
		int k = i % live;
		uint64_t addr = 0x10000 + (uint64_t)k * 64;
		struct mp_raw_event ev = { .pid = 1, .tid = 1, .addr = addr };

		if (sz[k]) {
			cur -= sz[k];
			sz[k] = 0;
			ev.type = MP_RAW_FREE;
			ev.fn = MP_FN_FREE;
			ev.ts_ns = ++ts;
			/* a block not in the table is an unknown free: the
			 * interposer sends only sampled blocks' frees, and the
			 * table ignores the rest the same way */
			cr_assert_eq(mp_live_apply(l, &ev, corr_cb, c), 0);
		}
		if (i >= live + steps)
			continue;
		sz[k] = 16 + rnd(&rng) % 48;
		cur += sz[k];
		ret->alloc_true += sz[k];
		{
			double p = -expm1(-(double)sz[k] / (double)mean);

			ret->alloc_var_true += (double)sz[k] * (double)sz[k] * (1 - p) / p;
		}
		if (cur > ret->peak_true)
			ret->peak_true = cur;
		if (!sampled(&smp, sz[k]))
			continue;
		ev.type = MP_RAW_ALLOC;
		ev.fn = MP_FN_MALLOC | MP_LIVE_FN_SCALED;
		ev.size = estimate(sz[k], mean);
		ev.ts_ns = ++ts;
		cr_assert_eq(mp_live_apply(l, &ev, corr_cb, c), 0);
	}
	cr_assert_eq(mp_correlator_finish(c, ++ts, &ret->p), 0);
	mp_correlator_free(c);
	mp_live_free(l);
	free(sz);
}

/* 2,000 runs of 256 live blocks at a 1 KiB interval (about 130 samples a
 * run): allocated bytes unbiased and their standard error calibrated. */
Test(sampling, allocated_bytes_unbiased_and_standard_error_calibrated, .timeout = 120)
{
	const int trials = 2000;
	double z_sum = 0, ratio_sum = 0;
	int covered = 0;

	for (int t = 0; t < trials; t++) {
		struct sim s;
		double se;

		simulate((uint64_t)t + 1, 1024, 256, 3000, &s);
		se = sqrt(s.p->mem.alloc_var);
		cr_assert_gt(se, 0);
		z_sum += ((double)s.p->mem.alloc_bytes - (double)s.alloc_true) /
			 sqrt(s.alloc_var_true);
		ratio_sum += s.p->mem.alloc_var / s.alloc_var_true;
		covered += fabs((double)s.p->mem.alloc_bytes - (double)s.alloc_true) <= 2 * se;
		/* the frees are the same blocks: the same estimate */
		cr_assert_eq(s.p->mem.free_bytes, s.p->mem.alloc_bytes);
		cr_assert_eq(s.p->mem.free_var, s.p->mem.alloc_var);
		cr_assert_eq(s.p->added_var, 0, "nothing live at the end");
		mp_profile_free(s.p);
	}
	cr_log_info("allocated: mean z %.4f, mean estimated/true variance %.4f, coverage %.4f",
		    z_sum / trials, ratio_sum / trials, (double)covered / trials);
	/* the mean z has standard deviation 1/sqrt(trials) when unbiased */
	cr_assert(fabs(z_sum / trials) < 6 / sqrt(trials), "mean z %.4f", z_sum / trials);
	/* the variance estimate is unbiased: its mean over runs is close */
	cr_assert(fabs(ratio_sum / trials - 1) < 0.05, "mean estimated/true variance %.4f",
		  ratio_sum / trials);
	/* +-2 standard errors cover about 95% of runs */
	cr_assert(covered > 0.93 * trials && covered < 0.97 * trials, "coverage %.4f",
		  (double)covered / trials);
}

/* The peak of the estimated live bytes is biased up (the issue's +12%),
 * never far below the truth, and its bias is within the reported bound. */
Test(sampling, peak_bias_is_real_and_within_the_bound, .timeout = 120)
{
	const int trials = 1000;
	double bias = 0, bound = 0, z_low = 0;

	for (int t = 0; t < trials; t++) {
		struct sim s;
		double se, d;

		simulate((uint64_t)t + 100000, 1024, 256, 3000, &s);
		se = sqrt(s.p->peak_var);
		cr_assert_gt(se, 0);
		cr_assert_gt(s.p->peak_bias_bound, 0);
		d = (double)s.p->peak_bytes - (double)s.peak_true;
		if (-d / se > z_low)
			z_low = -d / se;
		bias += d;
		bound += s.p->peak_bias_bound;
		mp_profile_free(s.p);
	}
	bias /= trials;
	bound /= trials;
	cr_assert_gt(bias, 0, "mean peak error %.0f B: no upward bias?", bias);
	cr_assert_lt(bias, bound, "mean bias %.0f B above the bound %.0f B", bias, bound);
	/* a bound, but not a vacuous one */
	cr_assert_lt(bound, 6 * bias, "bound %.0f B for a bias of %.0f B", bound, bias);
	cr_assert_lt(z_low, 6, "a peak %.1f standard errors below the truth", z_low);
	cr_log_info("peak: mean bias %.0f B, mean bound %.0f B", bias, bound);
}

/* Exact mode (no interval): no variance anywhere, even for flagged events. */
Test(sampling, exact_mode_has_no_variance)
{
	struct mp_correlator_opts o = { .begin_ns = 1 };
	struct mp_heap_event ev = { .kind = MP_HEAP_ALLOC,
				    .fn = MP_FN_MALLOC,
				    .tid = 1,
				    .ts_ns = 2,
				    .addr = 0x1000,
				    .size = 4200,
				    .flags = MP_HEAP_F_SCALED };
	struct mp_correlator *c;
	struct mp_profile *p;

	cr_assert_eq(mp_correlator_new(&o, &c), 0);
	mp_correlator_on_heap(c, &ev);
	cr_assert_eq(mp_correlator_finish(c, 3, &p), 0);
	cr_assert_eq(p->mem.alloc_var, 0);
	cr_assert_eq(p->peak_var, 0);
	cr_assert_eq(p->peak_bias_bound, 0);
	mp_profile_free(p);
	mp_correlator_free(c);
}
