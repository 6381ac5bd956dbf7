// SPDX-License-Identifier: MIT
#include <criterion/criterion.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "merge.h"

static struct mp_merge *m;

static void setup(void)
{
	cr_assert_eq(mp_merge_new(2, &m), 0);
}

static void teardown(void)
{
	mp_merge_free(m);
}

TestSuite(merge, .init = setup, .fini = teardown);

static void push(uint32_t kind, uint64_t ts, uint32_t v)
{
	cr_assert_eq(mp_merge_push(m, kind, ts, &v, sizeof(v)), 0);
}

/* Pops everything up to @wm into (kind, ts, value) triples. */
static size_t drain(uint64_t wm, uint64_t out[][3], size_t max)
{
	const struct mp_merge_item *it;
	size_t n = 0;

	while (n < max && mp_merge_pop(m, wm, &it) == 1) {
		uint32_t v;
		cr_assert_eq(it->len, sizeof(v));
		memcpy(&v, it->payload.bytes, sizeof(v));
		out[n][0] = it->kind;
		out[n][1] = it->ts;
		out[n][2] = v;
		n++;
	}
	return n;
}

Test(merge, orders_two_streams_and_holds_back_past_watermark)
{
	uint64_t got[16][3];
	/* stream 1 out of order across CPUs, stream 2 in order */
	push(1, 100, 10);
	push(1, 90, 11);
	push(2, 95, 20);
	push(2, 120, 21);
	push(1, 130, 12);

	size_t n = drain(120, got, 16);
	uint64_t want[][3] = { { 1, 90, 11 }, { 2, 95, 20 }, { 1, 100, 10 }, { 2, 120, 21 } };
	cr_assert_eq(n, 4);
	cr_assert_arr_eq(got, want, sizeof(want));
	cr_assert_eq(mp_merge_pending(m), 1);

	n = drain(UINT64_MAX, got, 16);
	uint64_t want2[][3] = { { 1, 130, 12 } };
	cr_assert_eq(n, 1);
	cr_assert_arr_eq(got, want2, sizeof(want2));
	cr_assert_eq(mp_merge_late(m), 0);
}

Test(merge, equal_timestamps_keep_arrival_order)
{
	uint64_t got[8][3];
	push(2, 50, 1);
	push(1, 50, 2);
	push(2, 50, 3);
	size_t n = drain(50, got, 8);
	uint64_t want[][3] = { { 2, 50, 1 }, { 1, 50, 2 }, { 2, 50, 3 } };
	cr_assert_eq(n, 3);
	cr_assert_arr_eq(got, want, sizeof(want));
}

Test(merge, late_item_is_released_next_and_counted)
{
	uint64_t got[8][3];
	push(1, 100, 1);
	cr_assert_eq(drain(100, got, 8), 1);
	push(2, 80, 2); /* older than what was already released */
	push(1, 200, 3);
	size_t n = drain(150, got, 8);
	uint64_t want[][3] = { { 2, 80, 2 } };
	cr_assert_eq(n, 1);
	cr_assert_arr_eq(got, want, sizeof(want));
	cr_assert_eq(mp_merge_late(m), 1);
}

Test(merge, grows_and_sorts_many_items)
{
	enum { N = 100000 };
	uint64_t prev = 0;
	size_t n = 0;
	const struct mp_merge_item *it;

	srand(7);
	for (uint32_t i = 0; i < N; i++)
		push(i & 1, (uint64_t)(rand() % 1000000), i);
	while (mp_merge_pop(m, UINT64_MAX, &it) == 1) {
		cr_assert_geq(it->ts, prev);
		prev = it->ts;
		n++;
	}
	cr_assert_eq(n, N);
	cr_assert_eq(mp_merge_pending(m), 0);
}

Test(merge, rejects_oversized_payload)
{
	char big[MP_MERGE_PAYLOAD_MAX + 1] = { 0 };
	cr_assert_eq(mp_merge_push(m, 1, 1, big, sizeof(big)), -E2BIG);
	cr_assert_eq(mp_merge_pending(m), 0);
}
