// SPDX-License-Identifier: MIT
/* The ring queue: per-ring FIFOs merged by timestamp under a watermark. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdlib.h>

#include "merge.h"
#include "order.h"
#include "ringq.h"

struct seen {
	uint64_t ts[64];
	uint32_t type[64];
	void *ref[64];
	int n, stop_at;
	bool order_only; /* count and check order, keep nothing */
	uint64_t last, count;
};

static int on_rec(void *ctx, const struct mp_ringq_rec *rec, const struct mp_record *marker,
		  void *ref)
{
	struct seen *s = ctx;

	if (s->order_only) {
		cr_assert_geq(rec->ts, s->last);
		s->last = rec->ts;
		s->count++;
		return 0;
	}
	cr_assert_lt(s->n, 64);
	cr_assert_eq(marker == NULL, rec->type >= MP_REC_ALLOC && rec->type <= MP_REC_REALLOC);
	if (marker)
		cr_assert_eq(marker->ts_ns, rec->ts);
	s->ts[s->n] = rec->ts;
	s->type[s->n] = rec->type;
	s->ref[s->n] = ref;
	s->n++;
	return s->stop_at && s->n == s->stop_at ? -EIO : 0;
}

static void push(struct mp_ringq *q, uint32_t ring, uint32_t type, uint64_t ts)
{
	struct mp_record r = { .type = type, .ts_ns = ts, .tid = ring + 1, .name = "k" };

	r.heap.addr = 0x1000 + ts;
	r.heap.size = ts;
	cr_assert_eq(mp_ringq_push(q, ring, &r, 0, (void *)(uintptr_t)(ts | 1)), 0);
}

Test(ringq, merges_rings_in_timestamp_order)
{
	struct mp_ringq *q;
	struct seen s = { 0 };

	cr_assert_eq(mp_ringq_new(1, &q), 0);
	/* three rings, each in order, interleaved; ring 5 grows the table */
	push(q, 0, MP_REC_ALLOC, 10);
	push(q, 0, MP_REC_FREE, 40);
	push(q, 5, MP_REC_KERNEL_BEGIN, 20);
	push(q, 5, MP_REC_ALLOC, 50);
	push(q, 2, MP_REC_REALLOC, 5);
	push(q, 2, MP_REC_ALLOC, 45);
	cr_assert_eq(mp_ringq_pending(q), 6);
	cr_assert_eq(mp_ringq_next_ts(q), 5);
	/* watermark 40, the other stream's next item at 45 */
	cr_assert_eq(mp_ringq_release(q, 40, 45, on_rec, &s), 4);
	cr_assert_eq(s.n, 4);
	cr_assert_eq(s.ts[0], 5);
	cr_assert_eq(s.ts[1], 10);
	cr_assert_eq(s.ts[2], 20);
	cr_assert_eq(s.type[2], MP_REC_KERNEL_BEGIN);
	cr_assert_eq(s.ref[2], (void *)(uintptr_t)21, "a marker comes with its ref");
	cr_assert_eq(s.ts[3], 40);
	cr_assert_eq(mp_ringq_released_ts(q), 40);
	/* the other stream's item at 45 goes first on a tie */
	cr_assert_eq(mp_ringq_release(q, 100, 45, on_rec, &s), 0);
	cr_assert_eq(mp_ringq_release(q, 100, 46, on_rec, &s), 1);
	cr_assert_eq(s.ts[4], 45);
	cr_assert_eq(mp_ringq_release(q, UINT64_MAX, UINT64_MAX, on_rec, &s), 1);
	cr_assert_eq(s.ts[5], 50);
	cr_assert_eq(mp_ringq_pending(q), 0);
	cr_assert_eq(mp_ringq_next_ts(q), UINT64_MAX);
	mp_ringq_free(q);
}

Test(ringq, many_records_grow_and_stay_ordered)
{
	struct mp_ringq *q;
	struct seen s = { .order_only = true };
	uint64_t want = 0;

	cr_assert_eq(mp_ringq_new(4, &q), 0);
	/* each ring in order, the rings overlapping in time */
	for (uint64_t i = 0; i < 20000; i++)
		push(q, (uint32_t)(i % 4), MP_REC_ALLOC, 100 + (i % 4) * 1000 + (i / 4) * 16);
	for (uint64_t i = 0; i < 20000; i++)
		want += 100 + (i % 4) * 1000 + (i / 4) * 16 <= 50000;
	cr_assert_eq(mp_ringq_release(q, 50000, UINT64_MAX, on_rec, &s), (int64_t)want);
	cr_assert_eq(s.count, want);
	cr_assert_leq(s.last, 50000);
	cr_assert_eq(mp_ringq_pending(q), 20000 - want);
	cr_assert_eq(mp_ringq_release(q, UINT64_MAX, UINT64_MAX, on_rec, &s),
		     (int64_t)(20000 - want));
	cr_assert_eq(s.count, 20000);
	mp_ringq_free(q);
}

Test(ringq, callback_error_stops_and_keeps_the_rest)
{
	struct mp_ringq *q;
	struct seen s = { .stop_at = 2 };

	cr_assert_eq(mp_ringq_new(2, &q), 0);
	for (uint64_t ts = 1; ts <= 6; ts++)
		push(q, (uint32_t)(ts % 2), ts == 3 ? MP_REC_TAG_BEGIN : MP_REC_FREE, ts);
	cr_assert_eq(mp_ringq_release(q, UINT64_MAX, UINT64_MAX, on_rec, &s), -EIO);
	cr_assert_eq(mp_ringq_pending(q), 4);
	s.stop_at = 0;
	cr_assert_eq(mp_ringq_release(q, UINT64_MAX, UINT64_MAX, on_rec, &s), 4);
	for (int i = 0; i < 6; i++)
		cr_assert_eq(s.ts[i], (uint64_t)i + 1);
	mp_ringq_free(q);
}

Test(ringq, ring_index_is_bounded)
{
	struct mp_ringq *q;
	struct mp_record r = { .type = MP_REC_ALLOC, .ts_ns = 1 };

	cr_assert_eq(mp_ringq_new(1, &q), 0);
	cr_assert_eq(mp_ringq_push(q, 4096, &r, 0, NULL), -E2BIG);
	cr_assert_eq(mp_ringq_push(q, 4095, &r, 0, NULL), 0);
	mp_ringq_free(q);
}

#define US 1000ull
#define MS (1000 * US)

/* The release rule: how far both streams were read, less the margin,
 * never past the clock reading, never behind the old lag but for the
 * rings' bound (tests/order/test_release.c). */
Test(ringq, watermark_is_the_earlier_stream_less_the_margin)
{
	const uint64_t t0 = 100 * MS, lag = 10 * MS;

	cr_assert_eq(mp_order_watermark(t0, lag, 0, t0), 90 * MS, "BPF never drained: the lag");
	cr_assert_eq(mp_order_watermark(t0, lag, t0, 0), 0, "rings not read: nothing");
	cr_assert_eq(mp_order_watermark(t0, lag, t0, t0), t0 - MP_RELEASE_MARGIN_NS);
	cr_assert_eq(mp_order_watermark(t0, lag, 95 * MS, t0), 95 * MS - MP_RELEASE_MARGIN_NS,
		     "the BPF ring still held a reservation at the last drain");
	cr_assert_eq(mp_order_watermark(t0, lag, t0, 97 * MS), 97 * MS - MP_RELEASE_MARGIN_NS,
		     "a ring left with records");
	cr_assert_eq(mp_order_watermark(t0, lag, t0, UINT64_MAX), t0 - MP_RELEASE_MARGIN_NS,
		     "no ring");
	cr_assert_eq(mp_order_watermark(t0, lag, UINT64_MAX, UINT64_MAX), t0,
		     "never past the clock");
	cr_assert_eq(mp_order_watermark(5 * MS, lag, 10, 10), 0, "early: nothing");
}

/* The ordering stage's sink: ring records into a struct seen, the other
 * items' timestamps after them. */
struct order_seen {
	struct seen s;
	uint64_t items[8];
	int n_items, idle;
};

static int order_ring(void *ctx, const struct mp_ringq_rec *rec, const struct mp_record *marker,
		      void *ref)
{
	return on_rec(&((struct order_seen *)ctx)->s, rec, marker, ref);
}

static int order_item(void *ctx, const struct mp_merge_item *it)
{
	struct order_seen *o = ctx;

	cr_assert_lt(o->n_items, 8);
	o->items[o->n_items++] = it->ts;
	return 0;
}

static int order_idle(void *ctx)
{
	((struct order_seen *)ctx)->idle++;
	return 0;
}

static void order_push_ring(struct mp_order *o, uint32_t ring, uint32_t type, uint64_t ts)
{
	struct mp_record r = { .type = type, .ts_ns = ts, .tid = ring + 1, .name = "k" };

	r.heap.addr = 0x1000 + ts;
	r.heap.size = ts;
	cr_assert_geq(mp_order_ring(o, NULL, ring, &r, 0, (void *)(uintptr_t)(ts | 1)), 0);
}

/*
 * The race the rule is for: the target munmaps a region (a BPF event,
 * stamped 500 us, reserved but not yet submitted when the daemon drains
 * the BPF ring at 600 us) and its allocator hands the region out again
 * (ring ALLOC, stamped 550 us, read at 600 us). The ALLOC must wait for the
 * munmap: released first, it would meet the mapping still live and the
 * munmap would then miss it.
 */
Test(ringq, ring_record_waits_for_a_bpf_event_in_flight)
{
	struct order_seen seen = { 0 };
	const struct mp_order_sink sink = {
		.ctx = &seen, .ring = order_ring, .item = order_item, .idle = order_idle
	};
	struct mp_order *o;
	const uint64_t lag = 10 * MS;
	uint64_t bpf_done = 400 * US, wm;

	cr_assert_eq(mp_order_new(&(struct mp_order_opts){ .lag_ns = lag, .fast_release = true },
				  &sink, &o),
		     0);
	/* cycle at t0 = 600 us: the BPF ring held the munmap's reservation,
	 * so it was not drained (bpf_done stays at the previous drain) */
	order_push_ring(o, 0, MP_REC_ALLOC, 550 * US);
	wm = mp_order_watermark(600 * US, lag, bpf_done, 600 * US);
	cr_assert_leq(wm, 400 * US);
	cr_assert_eq(mp_order_release_to(o, wm), 0);
	cr_assert_eq(seen.s.n, 0, "released before the munmap could arrive");
	cr_assert_eq(seen.idle, 1);
	/* cycle at t0 = 1100 us: the munmap is read, the ring emptied */
	cr_assert_eq(mp_order_push(o, 1, 500 * US, "munmap", 7), 0);
	bpf_done = 1100 * US;
	wm = mp_order_watermark(1100 * US, lag, bpf_done, 1100 * US);
	cr_assert_geq(wm, 550 * US);
	/* the munmap first, then the ALLOC */
	cr_assert_eq(mp_order_release_to(o, wm), 0);
	cr_assert_eq(seen.n_items, 1);
	cr_assert_eq(seen.items[0], 500 * US);
	cr_assert_eq(seen.s.n, 1, "the ALLOC came after the munmap");
	cr_assert_eq(seen.s.ts[0], 550 * US);
	cr_assert_eq(mp_order_held(o), 0);
	mp_order_free(o);
}

/* The one ring holding records, if only one does: its records can be
 * released against a watermark that ignores its own progress. */
Test(ringq, sole_ring)
{
	struct mp_ringq *q;
	struct seen s = { 0 };

	cr_assert_eq(mp_ringq_new(1, &q), 0);
	cr_assert_eq(mp_ringq_sole_ring(q), UINT32_MAX, "nothing held");
	push(q, 3, MP_REC_ALLOC, 10);
	push(q, 3, MP_REC_FREE, 20);
	cr_assert_eq(mp_ringq_sole_ring(q), 3);
	push(q, 1, MP_REC_ALLOC, 15);
	cr_assert_eq(mp_ringq_sole_ring(q), UINT32_MAX, "two rings");
	cr_assert_eq(mp_ringq_release(q, 15, UINT64_MAX, on_rec, &s), 2);
	cr_assert_eq(mp_ringq_sole_ring(q), 3);
	cr_assert_eq(mp_ringq_release(q, UINT64_MAX, UINT64_MAX, on_rec, &s), 1);
	cr_assert_eq(mp_ringq_sole_ring(q), UINT32_MAX);
	mp_ringq_free(q);
}

/* The attach snapshot's markers (stamped when their kernels began) go
 * through the heap and reach the sink as ring records, with their ref,
 * between the items around them; ring records first on a tie with
 * nothing, the heap's item first on a tie with a ring record. */
Test(ringq, snapshot_markers_come_back_as_ring_records_in_order)
{
	struct order_seen seen = { 0 };
	const struct mp_order_sink sink = {
		.ctx = &seen, .ring = order_ring, .item = order_item, .idle = order_idle
	};
	struct mp_record snap = { .type = MP_REC_KERNEL_BEGIN, .ts_ns = 5, .tid = 9, .name = "k" };
	struct mp_order *o;

	cr_assert_eq(mp_order_new(&(struct mp_order_opts){ .lag_ns = 10 }, &sink, &o), 0);
	cr_assert_eq(mp_order_push(o, UINT32_MAX, 1, "x", 1), -EINVAL, "the stage's own kind");
	order_push_ring(o, 0, MP_REC_ALLOC, 20);
	cr_assert_eq(mp_order_push(o, 2, 10, "rss", 4), 0);
	cr_assert_eq(mp_order_ring(o, NULL, MP_CONSUMER_RING_SYNTH, &snap, 0, (void *)0x77), 1,
		     "a held marker keeps its ref");
	/* the lag alone without a ring reader: 30 - 10 */
	cr_assert_eq(mp_order_release(o, 30, NULL), 0);
	cr_assert_eq(seen.s.n, 2);
	cr_assert_eq(seen.s.ts[0], 5);
	cr_assert_eq(seen.s.type[0], MP_REC_KERNEL_BEGIN);
	cr_assert_eq(seen.s.ref[0], (void *)0x77);
	cr_assert_eq(seen.n_items, 1);
	cr_assert_eq(seen.items[0], 10);
	cr_assert_eq(seen.s.ts[1], 20);
	cr_assert_eq(seen.idle, 1);
	mp_order_free(o);
}

/* The prefetch hook is shown each heap record eight before its release
 * (markers are not shown), never one already released. */
struct shown {
	uint64_t ts[64];
	int n;
	struct seen *released;
};

static void on_prefetch(void *ctx, const struct mp_ringq_rec *rec)
{
	struct shown *sh = ctx;

	cr_assert(rec->type >= MP_REC_ALLOC && rec->type <= MP_REC_REALLOC);
	cr_assert_lt(sh->n, 64);
	for (int i = 0; i < sh->released->n; i++)
		cr_assert_neq(sh->released->ts[i], rec->ts, "record %llu shown after its release",
			      (unsigned long long)rec->ts);
	sh->ts[sh->n++] = rec->ts;
}

Test(ringq, prefetch_shows_records_ahead)
{
	struct mp_ringq *q;
	struct seen s = { 0 };
	struct shown sh = { .released = &s };

	cr_assert_eq(mp_ringq_new(1, &q), 0);
	mp_ringq_set_prefetch(q, on_prefetch, &sh);
	for (uint64_t ts = 1; ts <= 30; ts++)
		push(q, 0, ts == 20 ? MP_REC_KERNEL_BEGIN : MP_REC_ALLOC, ts);
	cr_assert_eq(mp_ringq_release(q, UINT64_MAX, UINT64_MAX, on_rec, &s), 30);
	/* records 9..30 are shown as 1..22 go, but the marker at 20 */
	cr_assert_eq(sh.n, 21);
	for (int i = 0, ts = 9; i < sh.n; i++, ts++) {
		if (ts == 20)
			ts++;
		cr_assert_eq(sh.ts[i], (uint64_t)ts);
	}
	mp_ringq_free(q);
}
