/* SPDX-License-Identifier: MIT */
/*
 * The statistics of sampled mode (docs/PROFILE.md "Sampled figures"): the
 * variance of a sampled block's size estimate, and the bound on the upward
 * bias of a peak taken over the estimated live bytes. Pure maths.
 */
#ifndef MP_SAMPLING_H
#define MP_SAMPLING_H

#include <stdint.h>

/* Size estimate of a block of @size bytes that the byte-weighted Poisson
 * scheme of mean interval @interval sampled: @size / p with
 * p = 1 - exp(-size / interval) below the interval, @size from it up
 * (such blocks are always sampled). */
double mp_sample_weight(uint64_t size, uint64_t interval);

/* For a block whose estimate is @est (the figure the tracer delivers,
 * mp_tracer_sample_estimate()), the probability p it had of being
 * sampled (1 for a block sent exact), found by inverting the estimate. */
double mp_sample_prob(uint64_t est, uint64_t interval, int scaled);

/* mp_sample_prob(@est, @interval, 1), bit for bit, from a per-thread
 * direct-mapped cache of the last 256 (estimate, interval) pairs: the
 * Newton inversion costs a few exp() calls, and a program allocates few
 * distinct sizes, each one estimate. For the correlator, once per
 * sampled block. */
double mp_sample_prob_cached(uint64_t est, uint64_t interval);

/* Unbiased (Horvitz-Thompson) estimate of the variance a sampled block of
 * estimate @est adds to any sum of estimates it is part of: est^2 (1 - p),
 * i.e. w^2 (1 - p) / p^2. 0 for a block sent exact. p comes from
 * mp_sample_prob_cached(). */
double mp_sample_var(uint64_t est, uint64_t interval, int scaled);

/* Upper bound on E[peak estimate] - true peak, for a peak taken over
 * @n_events allocation events (every time the live estimate can reach a
 * maximum), when the estimated variance of the live estimate never
 * exceeded @var_max: sqrt(2 var_max ln n) + (b / 3) ln n, with
 * b = interval / (1 - 1/e) the largest deviation one block can make
 * (Bernstein: the live estimate's error is sub-gamma). 0 when n <= 1. */
double mp_sample_peak_bias_bound(double var_max, uint64_t interval, double n_events);

#endif /* MP_SAMPLING_H */
