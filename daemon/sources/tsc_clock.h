/* SPDX-License-Identifier: MIT */
/*
 * The ring reader's TSC clock (docs/RING.md "Clocks"): heap records stamped
 * with the TSC are converted to CLOCK_MONOTONIC ns, against a calibration
 * the reader keeps from (rdtsc, clock_gettime) pairs it takes itself, or
 * one it is given (mp_consumer_set_tsc_cal()).
 */
#ifndef MP_SOURCES_TSC_CLOCK_H
#define MP_SOURCES_TSC_CLOCK_H

#include <stdbool.h>
#include <stdint.h>

#include "consumer.h"

/* One (rdtsc, CLOCK_MONOTONIC) pair: tsc is the middle of the two reads
 * that bracket clock_gettime. */
struct mp_tsc_pair {
	uint64_t tsc, ns;
};

/* How the consumer converts TSC records (docs/RING.md "Clocks"). */
enum mp_tsc_mode {
	MP_TSC_REJECT = 0, /* this machine's TSC is not trusted: corrupt */
	MP_TSC_LIVE, /* own calibration, refreshed at every read */
	MP_TSC_FIXED, /* mp_consumer_set_tsc_cal() */
};

struct mp_tsc_clock {
	enum mp_tsc_mode mode;
	bool ready; /* cal holds a rate (LIVE: after the first TSC record) */
	bool seen; /* a TSC record was read: keep refreshing */
	/* mode is not MP_TSC_REJECT, ready and seen: a TSC record is just
	 * converted (heap_ts()) */
	bool fast;
	struct mp_tsc_cal cal;
	/* LIVE: the rate is taken from pair a (at least TSC_MIN_BASE_NS old,
	 * once there is such a pair, at most about 2 s) to the newest pair;
	 * b becomes a when it is TSC_BASE_NS old. */
	struct mp_tsc_pair a, b;
};

/* MP_TSC_LIVE with a first pair where this machine's TSC is trusted
 * (mp_tsc_trusted() of ring_clock.h), else MP_TSC_REJECT. */
void mp_tsc_clock_init(struct mp_tsc_clock *k);
/* A new pair, the base of the conversion from now on; the rate from pair
 * a to it. False when the TSC does not advance against CLOCK_MONOTONIC
 * (never where the kernel uses it as its clocksource): the clock then
 * rejects TSC records. */
bool mp_tsc_clock_refresh(struct mp_tsc_clock *k);

/* @tsc in CLOCK_MONOTONIC ns by @cal, saturated (mp_tsc_to_ns()); inlined
 * into the read of every heap record. */
static inline __attribute__((always_inline)) uint64_t
mp_tsc_clock_to_ns(const struct mp_tsc_cal *cal, uint64_t tsc)
{
	int64_t dt = (int64_t)(tsc - cal->tsc);
	__int128 d, ns;

	/* Within 2^31 ticks of the pair (~1 s) at up to 1 ns a tick (the
	 * records of a read: the pair is taken at its start), the product
	 * fits 64 bits: the same value as below, in a third of the
	 * instructions. */
	if (__builtin_expect(
		    (uint64_t)dt + (1ull << 31) < (1ull << 32) && cal->mult <= (1ull << 32), 1)) {
		int64_t q = (dt * (int64_t)cal->mult) >> 32;

		if (q < 0)
			return (uint64_t)-q > cal->ns ? 0 : cal->ns - (uint64_t)-q;
		return cal->ns + (uint64_t)q < cal->ns ? UINT64_MAX : cal->ns + (uint64_t)q;
	}
	d = (__int128)dt * cal->mult;
	ns = (__int128)cal->ns + (d >> 32);

	if (__builtin_expect(ns < 0, 0))
		return 0;
	if (__builtin_expect(ns > (__int128)UINT64_MAX, 0))
		return UINT64_MAX;
	return (uint64_t)ns;
}

#endif /* MP_SOURCES_TSC_CLOCK_H */
