// SPDX-License-Identifier: MIT
/*
 * mp_tsc_to_ns() (docs/RING.md "Clocks"): ns = cal.ns + (tsc - cal.tsc) *
 * cal.mult / 2^32, rounded down, saturated to [0, UINT64_MAX], for every
 * calibration and stamp a hostile ring or a test can give. The consumer
 * takes a 64-bit shortcut near the pair; it must agree with the 128-bit
 * arithmetic everywhere, at the edges of the shortcut's range above all.
 */
#include <criterion/criterion.h>
#include <stdint.h>

#include "consumer.h"

static uint64_t reference(const struct mp_tsc_cal *cal, uint64_t tsc)
{
	__int128 d = (__int128)(int64_t)(tsc - cal->tsc) * (__int128)cal->mult;
	__int128 ns = (__int128)cal->ns + (d >> 32);

	return ns < 0 ? 0 : ns > (__int128)UINT64_MAX ? UINT64_MAX : (uint64_t)ns;
}

static uint64_t rnd(uint64_t *s)
{
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return *s * 0x2545f4914f6cdd1dull;
}

static void check(const struct mp_tsc_cal *cal, uint64_t tsc)
{
	uint64_t got = mp_tsc_to_ns(cal, tsc), want = reference(cal, tsc);

	cr_assert_eq(got, want, "cal {tsc %llu ns %llu mult %llu} tsc %llu: got %llu, want %llu",
		     (unsigned long long)cal->tsc, (unsigned long long)cal->ns,
		     (unsigned long long)cal->mult, (unsigned long long)tsc,
		     (unsigned long long)got, (unsigned long long)want);
}

Test(tsc_convert, agrees_with_128_bit_arithmetic_at_the_edges)
{
	static const uint64_t mults[] = { 0,
					  1,
					  (1ull << 32) / 3,
					  1ull << 31,
					  (1ull << 32) - 1,
					  1ull << 32,
					  (1ull << 32) + 1,
					  1ull << 40,
					  UINT64_MAX };
	static const uint64_t nss[] = { 0, 1, 499, 5000000000ull, UINT64_MAX - 1000, UINT64_MAX };
	static const int64_t dts[] = { 0,
				       1,
				       -1,
				       2,
				       -2,
				       1000,
				       -1000,
				       (1ll << 31) - 1,
				       -(1ll << 31),
				       1ll << 31,
				       -(1ll << 31) - 1,
				       1ll << 32,
				       -(1ll << 32),
				       INT64_MAX,
				       INT64_MIN };

	for (size_t m = 0; m < sizeof(mults) / sizeof(mults[0]); m++)
		for (size_t n = 0; n < sizeof(nss) / sizeof(nss[0]); n++)
			for (size_t d = 0; d < sizeof(dts) / sizeof(dts[0]); d++) {
				struct mp_tsc_cal cal = { .tsc = 123456789,
							  .ns = nss[n],
							  .mult = mults[m] };

				check(&cal, cal.tsc + (uint64_t)dts[d]);
				cal.tsc = UINT64_MAX - 5;
				check(&cal, cal.tsc + (uint64_t)dts[d]);
			}
}

Test(tsc_convert, agrees_with_128_bit_arithmetic_on_random_values)
{
	uint64_t s = 0x9e3779b97f4a7c15ull;

	for (int i = 0; i < 2000000; i++) {
		uint64_t x = rnd(&s), y = rnd(&s);
		struct mp_tsc_cal cal = {
			.tsc = rnd(&s),
			.ns = x & 1 ? rnd(&s) : rnd(&s) >> (y % 64),
			.mult = x & 2 ? rnd(&s) >> (x >> 58) : (1ull << 32) >> (y >> 60),
		};
		/* mostly near the pair, as a read's records are */
		int64_t dt = x & 4 ? (int64_t)rnd(&s) :
				     (int64_t)(rnd(&s) >> (y >> 58 & 31)) * (x & 8 ? -1 : 1);

		check(&cal, cal.tsc + (uint64_t)dt);
	}
}
