// SPDX-License-Identifier: MIT
#include "sampling.h"

#include <math.h>

double mp_sample_weight(uint64_t size, uint64_t interval)
{
	if (!interval || size >= interval || !size)
		return (double)size;
	return (double)size / -expm1(-(double)size / (double)interval);
}

double mp_sample_prob(uint64_t est, uint64_t interval, int scaled)
{
	double y, x;

	if (!scaled || !interval || !est)
		return 1.0;
	/* est = w / (1 - e^-x) with x = w / interval < 1, so y = est /
	 * interval is in [1, 1/(1 - 1/e)): solve x = y (1 - e^-x) by Newton.
	 * h(x) = x - y (1 - e^-x) is convex and 2 (y - 1) lies right of the
	 * root (y = 1 + x/2 + x^2/12 - ...), so the iterates fall
	 * monotonically onto it. */
	y = (double)est / (double)interval;
	if (y <= 1.0)
		return 0.0; /* a block of ~0 bytes */
	x = 2.0 * (y - 1.0);
	if (x > 1.0)
		x = 1.0;
	for (int i = 0; i < 50; i++) {
		double e = exp(-x), h = x - y * (1.0 - e), d = 1.0 - y * e, nx;

		if (d <= 0)
			break;
		nx = x - h / d;
		if (fabs(nx - x) < 1e-15)
			break;
		x = nx;
	}
	if (x >= 1.0)
		x = 1.0;
	return -expm1(-x);
}

#define PROB_CACHE_BITS 8

/* An empty entry has interval 0, which never looks up. */
struct prob_ent {
	uint64_t est, interval;
	double p;
};
static __thread struct prob_ent prob_cache[1u << PROB_CACHE_BITS];

double mp_sample_prob_cached(uint64_t est, uint64_t interval)
{
	struct prob_ent *e;

	if (!interval || !est)
		return 1.0; /* mp_sample_prob()'s answer, without the cache */
	e = &prob_cache[(est * 0x9e3779b97f4a7c15ull) >> (64 - PROB_CACHE_BITS)];
	if (e->est != est || e->interval != interval) {
		e->p = mp_sample_prob(est, interval, 1);
		e->est = est;
		e->interval = interval;
	}
	return e->p;
}

double mp_sample_var(uint64_t est, uint64_t interval, int scaled)
{
	/* per sampled free in the correlator: the cached inverse */
	double p = scaled ? mp_sample_prob_cached(est, interval) : 1.0;

	return (double)est * (double)est * (1.0 - p);
}

double mp_sample_peak_bias_bound(double var_max, uint64_t interval, double n_events)
{
	double l;

	if (n_events <= 1.0 || !interval)
		return 0;
	l = log(n_events);
	return sqrt(2.0 * (var_max > 0 ? var_max : 0) * l) +
	       (double)interval / (3.0 * -expm1(-1.0)) * l;
}
