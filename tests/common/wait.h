/* SPDX-License-Identifier: MIT */
/*
 * Waiting on a condition, not on the clock: a test that sleeps a fixed time
 * and then asserts fails on a machine slow enough (a loaded CI host, a
 * sanitizer build), so every wait polls what it waits for, with a bound
 * far above the normal time; only a failure waits the whole bound. The
 * caller then asserts the condition itself, so that the message says what
 * did not happen. No criterion here: tests that use criterion/new/assert.h
 * include this alone ("../common/wait.h"); helpers.h includes it too.
 */
#ifndef TESTS_COMMON_WAIT_H
#define TESTS_COMMON_WAIT_H

#include <stdbool.h>
#include <time.h>

struct mp_test_wait {
	struct timespec deadline;
	long nap_us;
};

static __attribute__((unused)) struct mp_test_wait mp_test_wait_start(long bound_ms)
{
	struct mp_test_wait w = { .nap_us = 1000 };

	clock_gettime(CLOCK_MONOTONIC, &w.deadline);
	w.deadline.tv_sec += bound_ms / 1000;
	w.deadline.tv_nsec += (bound_ms % 1000) * 1000000L;
	if (w.deadline.tv_nsec >= 1000000000L) {
		w.deadline.tv_sec++;
		w.deadline.tv_nsec -= 1000000000L;
	}
	return w;
}

/* False once the bound has passed; else naps (1 ms at first, doubling up
 * to 50 ms: a quick condition is seen quickly, a slow one costs little)
 * and returns true: look again. */
static __attribute__((unused)) bool mp_test_wait_more(struct mp_test_wait *w)
{
	struct timespec now, nap;

	clock_gettime(CLOCK_MONOTONIC, &now);
	if (now.tv_sec > w->deadline.tv_sec ||
	    (now.tv_sec == w->deadline.tv_sec && now.tv_nsec >= w->deadline.tv_nsec))
		return false;
	nap = (struct timespec){ .tv_nsec = w->nap_us * 1000L };
	nanosleep(&nap, NULL);
	if (w->nap_us < 50000)
		w->nap_us = w->nap_us * 2 > 50000 ? 50000 : w->nap_us * 2;
	return true;
}

/* Whether @cond(@ctx) came to hold within @bound_ms. */
static __attribute__((unused)) bool mp_test_wait_until(bool (*cond)(void *ctx), void *ctx,
						       long bound_ms)
{
	struct mp_test_wait w = mp_test_wait_start(bound_ms);
	bool ok;

	while (!(ok = cond(ctx)) && mp_test_wait_more(&w))
		;
	return ok;
}

/* The same for an expression of the caller's locals: whether @expr came
 * to hold within @bound_ms. */
#define MP_TEST_WAIT_FOR(expr, bound_ms)                                  \
	({                                                                \
		struct mp_test_wait mp_w_ = mp_test_wait_start(bound_ms); \
		bool mp_ok_;                                              \
		while (!(mp_ok_ = (expr)) && mp_test_wait_more(&mp_w_))   \
			;                                                 \
		mp_ok_;                                                   \
	})

#endif
