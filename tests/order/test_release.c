/* SPDX-License-Identifier: MIT */
/*
 * The release watermark (mp_order_watermark(), daemon/order/order.h): the lag
 * floor lifts the BPF ring buffer's bound, never the marker rings' (a ring
 * the daemon has not read yet holds everything back however far behind
 * the daemon is; only a ring stuck at a record is passed, by the consumer).
 */
#include <criterion/criterion.h>
#include <stdint.h>

#include "order.h"

#define MS (1000 * 1000ull)

Test(release, the_rings_bound_has_no_floor)
{
	const uint64_t t0 = 10000 * MS, lag = 10 * MS;

	/* The daemon 500 ms behind a ring (it was off the CPU, the drain
	 * stopped at its batch limit): nothing past that ring's last record
	 * read. The floor of ten lags (t0 - 100 ms) released the BPF events
	 * of the kernels still unread, into the wrong kernel. */
	cr_assert_eq(mp_order_watermark(t0, lag, t0, t0 - 500 * MS),
		     t0 - 500 * MS - MP_RELEASE_MARGIN_NS);
	cr_assert_eq(mp_order_watermark(t0, lag, t0, t0 - 5000 * MS),
		     t0 - 5000 * MS - MP_RELEASE_MARGIN_NS);
	cr_assert_eq(mp_order_watermark(t0, lag, t0, 10), 0, "nothing read: nothing");
	cr_assert_eq(mp_order_watermark(t0, lag, t0, 0), 0, "rings not looked at yet");
	/* every ring caught up */
	cr_assert_eq(mp_order_watermark(t0, lag, t0, t0), t0 - MP_RELEASE_MARGIN_NS);
	cr_assert_eq(mp_order_watermark(t0, lag, t0, UINT64_MAX), t0 - MP_RELEASE_MARGIN_NS,
		     "no ring");
}

Test(release, the_bpf_bound_keeps_the_lag_floor)
{
	const uint64_t t0 = 10000 * MS, lag = 10 * MS;

	/* an event in flight longer than the lag is taken to be later */
	cr_assert_eq(mp_order_watermark(t0, lag, t0 - 50 * MS, t0), t0 - lag);
	cr_assert_eq(mp_order_watermark(t0, lag, 0, UINT64_MAX), t0 - lag, "never drained");
	cr_assert_eq(mp_order_watermark(t0, lag, t0 - 5 * MS, t0),
		     t0 - 5 * MS - MP_RELEASE_MARGIN_NS);
	/* both behind: the rings' bound wins below the floor */
	cr_assert_eq(mp_order_watermark(t0, lag, t0 - 50 * MS, t0 - 30 * MS),
		     t0 - 30 * MS - MP_RELEASE_MARGIN_NS);
}
