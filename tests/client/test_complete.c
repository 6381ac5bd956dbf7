/* SPDX-License-Identifier: MIT */
/*
 * How far the rings have been read (mp_consumer_complete_ns(), docs/RING.md
 * "Consumer: how far the rings have been read"): the time the daemon may
 * release ring records up to. A ring found empty by a read told T counts
 * as read up to T; a ring left with records, up to the last record handed
 * over; the answer is the earliest over every thread slot, idle ones
 * included.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>

#include "ring_image.h"
#include "ring_test.h"

/* enum mp_alloc_fn (bpf/memprof_events.h, not on this test's path) */
enum { FN_MALLOC = 0 };

static struct img m;

static void setup(void)
{
	img_init(&m, 8, 3, 16, 256);
	img_str(&m, 0, 0, "?");
}

static void teardown(void)
{
	free(m.mem);
}

TestSuite(complete, .init = setup, .fini = teardown);

static int count_cb(void *ctx, uint32_t ring, const struct mp_record *rec)
{
	(void)ring;
	(void)rec;
	(*(int *)ctx)++;
	return 0;
}

static void put_alloc(uint32_t ring, uint64_t pos, uint64_t ts)
{
	struct mp_slot *s = img_put(&m, pos, MP_REC_ALLOC, 7 + ring, 1, ring, FN_MALLOC);

	s->ts_ns = ts;
	s->dims[0] = 0x1000 + pos;
	s->dims[1] = 32;
}

/* A consumer of the image that found every ring empty in a read told @t;
 * the records it hands over later count in @n. */
static struct mp_consumer *read_empty_at(uint64_t t, int *n)
{
	struct mp_consumer *c;

	cr_assert_eq(mp_consumer_open_mem(m.mem, m.len, &c), 0);
	cr_assert_eq(mp_consumer_read_rings_at(c, 64, t, count_cb, n), 0);
	return c;
}

Test(complete, unknown_until_read_then_the_time_of_the_read)
{
	struct mp_consumer *c;
	int n = 0;

	cr_assert_eq(mp_consumer_complete_ns(NULL), UINT64_MAX, "no ring: no bound");
	cr_assert_eq(mp_consumer_open_mem(m.mem, m.len, &c), 0);
	cr_assert_eq(mp_consumer_complete_ns(c), 0, "nothing looked at yet");
	cr_assert_eq(mp_consumer_read_rings_at(c, 64, 5000, count_cb, &n), 0);
	cr_assert_eq(mp_consumer_complete_ns(c), 5000, "every ring empty at 5000");
	put_alloc(1, 0, 6000);
	put_alloc(1, 1, 6100);
	cr_assert_eq(mp_consumer_read_rings_at(c, 64, 7000, count_cb, &n), 2);
	cr_assert_eq(mp_consumer_complete_ns(c), 7000, "caught up with ring 1 at 7000");
	mp_consumer_free(c);
}

/* A read that stops with records left (its budget): that ring counts up
 * to its last record handed over, every other one up to the read, even
 * while the ring is being read (the caller may release as it reads). */
static struct mp_consumer *cc;
static uint64_t during[8];
static int nduring;

static int during_cb(void *ctx, uint32_t ring, const struct mp_record *rec)
{
	(void)ctx;
	(void)ring;
	(void)rec;
	during[nduring++] = mp_consumer_complete_ns(cc);
	return 0;
}

Test(complete, a_ring_left_with_records_holds_back_at_its_last_record)
{
	int n = 0;
	struct mp_consumer *c = read_empty_at(100, &n);

	for (uint64_t i = 0; i < 5; i++)
		put_alloc(0, i, 1000 + 10 * i);
	/* rings 1 and 2 found empty at 2000 (every ring is looked at before
	 * any is read), ring 0 stopped after the record stamped 1020 */
	cr_assert_eq(mp_consumer_read_rings_at(c, 3, 2000, count_cb, &n), 3);
	cr_assert_eq(mp_consumer_complete_ns(c), 1020);
	/* rings 1 and 2 empty at 3000, ring 0 one more (1030): the earliest
	 * counts */
	cr_assert_eq(mp_consumer_read_rings_at(c, 1, 3000, count_cb, &n), 1);
	cr_assert_eq(mp_consumer_complete_ns(c), 1030);
	cr_assert_eq(mp_consumer_read_rings_at(c, 64, 4000, count_cb, &n), 1);
	cr_assert_eq(n, 5);
	cr_assert_eq(mp_consumer_complete_ns(c), 4000, "all caught up at 4000");
	mp_consumer_free(c);
}

/* A record published after a read told T is not behind T: a later read
 * hands it over and moves the bound only then. */
Test(complete, never_past_a_ring_not_read_again)
{
	int n = 0;
	struct mp_consumer *c = read_empty_at(500, &n);

	put_alloc(2, 0, 400); /* stamped before the read, published after it */
	cr_assert_eq(mp_consumer_complete_ns(c), 500);
	cr_assert_eq(mp_consumer_read_rings_at(c, 64, 900, count_cb, &n), 1);
	cr_assert_eq(mp_consumer_complete_ns(c), 900);
	mp_consumer_free(c);
}

/* A ring a lap ahead is corrupt: it never counts as read. */
Test(complete, a_corrupt_ring_never_counts_as_read)
{
	int n = 0;
	struct mp_consumer *c = read_empty_at(100, &n);

	put_alloc(1, 0, 200);
	m.slots[1 * 8 + 0].seq = 9 + 1; /* position 8's record in slot 0 */
	cr_assert_eq(mp_consumer_read_rings_at(c, 64, 300, count_cb, &n), -EBADMSG);
	cr_assert_lt(mp_consumer_complete_ns(c), 300);
	mp_consumer_free(c);
}

/* While ring 0 is being read, the others already count as read up to the
 * call's time and ring 0 up to the record being handed over. */
Test(complete, progress_while_a_ring_is_read)
{
	cr_assert_eq(mp_consumer_open_mem(m.mem, m.len, &cc), 0);
	for (uint64_t i = 0; i < 3; i++)
		put_alloc(0, i, 1000 + 10 * i);
	cr_assert_eq(mp_consumer_read_rings_at(cc, 64, 5000, during_cb, NULL), 3);
	cr_assert_eq(nduring, 3);
	cr_assert_eq(during[0], 1000);
	cr_assert_eq(during[1], 1010);
	cr_assert_eq(during[2], 1020);
	cr_assert_eq(mp_consumer_complete_ns(cc), 5000);
	mp_consumer_free(cc);
}

/* A ring read a whole ring's worth of records past where a read told T
 * found it counts as read up to T, whatever its stamps say: its writer
 * could not publish those records before that read freed the slots a lap
 * behind them. A hostile writer that floods records stamped in the past
 * holds the bound back one lap's read at most, never for ever. */
Test(complete, a_lap_read_past_a_read_counts_as_read_up_to_it)
{
	int n = 0;
	struct mp_consumer *c = read_empty_at(100, &n);

	for (uint64_t i = 0; i < 8; i++)
		put_alloc(0, i, 10); /* stamped in the past, a full ring */
	cr_assert_eq(mp_consumer_read_rings_at(c, 5, 1000, count_cb, &n), 5);
	cr_assert_eq(mp_consumer_complete_ns(c), 100, "found empty at 100 (its stamps say 10)");
	/* the writer goes on into the freed slots, stamps still at 10 */
	for (uint64_t i = 8; i < 13; i++)
		put_alloc(0, i, 10);
	cr_assert_eq(mp_consumer_read_rings_at(c, 2, 2000, count_cb, &n), 2);
	cr_assert_eq(mp_consumer_complete_ns(c), 100, "position 7: not a lap past 0 yet");
	cr_assert_eq(mp_consumer_read_rings_at(c, 1, 3000, count_cb, &n), 1);
	cr_assert_eq(mp_consumer_complete_ns(c), 1000, "position 8: a lap past the read at 1000");
	/* the next mark: the read at 4000 finds it at position 8 */
	for (uint64_t i = 13; i < 16; i++)
		put_alloc(0, i, 10);
	cr_assert_eq(mp_consumer_read_rings_at(c, 7, 4000, count_cb, &n), 7);
	cr_assert_eq(mp_consumer_complete_ns(c), 1000, "position 15");
	cr_assert_eq(mp_consumer_read_rings_at(c, 1, 5000, count_cb, &n), 1);
	cr_assert_eq(mp_consumer_complete_ns(c), 5000, "caught up");
	cr_assert_eq(n, 16);
	mp_consumer_free(c);
}

/* A ring stuck at a record it cannot take (a STACK record whose heap record
 * never comes: only a hostile writer) counts as read up to the stall time
 * before each read once it has been stuck that long; a ring that moves
 * never does, however far behind it is. */
Test(complete, a_stuck_ring_is_passed_after_the_stall_time_only)
{
	struct mp_consumer_opts o = { .stall_ns = 1000 };
	struct mp_consumer *c;
	struct mp_slot *s;
	int n = 0;

	cr_assert_eq(mp_consumer_open_mem_opts(m.mem, m.len, &o, &c), 0);
	cr_assert_eq(mp_consumer_read_rings_at(c, 64, 100, count_cb, &n), 0);
	put_alloc(1, 0, 150);
	s = img_put(&m, 1, MP_REC_STACK, 8, 1, 1, 0); /* its ALLOC at 2 never comes */
	s->ts_ns = 160;
	put_alloc(2, 0, 50); /* ring 2 far behind, and moving */
	put_alloc(2, 1, 60);
	cr_assert_eq(mp_consumer_read_rings_at(c, 2, 200, count_cb, &n), 2);
	cr_assert_eq(mp_consumer_complete_ns(c), 100,
		     "ring 2 found empty at 100, its records published after");
	cr_assert_eq(mp_consumer_read_rings_at(c, 64, 900, count_cb, &n), 1);
	cr_assert_eq(mp_consumer_complete_ns(c), 150, "ring 1 stuck since 200, not for 1000 yet");
	cr_assert_eq(mp_consumer_read_rings_at(c, 64, 1100, count_cb, &n), 0);
	cr_assert_eq(mp_consumer_complete_ns(c), 150, "stuck for 900");
	cr_assert_eq(mp_consumer_read_rings_at(c, 64, 1300, count_cb, &n), 0);
	cr_assert_eq(mp_consumer_complete_ns(c), 300, "stuck for 1100: up to 1300 - 1000");
	cr_assert_eq(mp_consumer_read_rings_at(c, 64, 5000, count_cb, &n), 0);
	cr_assert_eq(mp_consumer_complete_ns(c), 4000);
	/* the unit completes: taken, and caught up */
	put_alloc(1, 2, 170);
	cr_assert_eq(mp_consumer_read_rings_at(c, 64, 6000, count_cb, &n), 1);
	cr_assert_eq(mp_consumer_complete_ns(c), 6000);
	cr_assert_eq(n, 4);
	mp_consumer_free(c);
}

/* Reads cut by their limit serve the rings with records in turn: a ring
 * is never left unread (its bound held back) while another one keeps the
 * budget. Before, the next read started one thread slot further, so with
 * many slots the second of two busy rings came first once in that many
 * reads. */
Test(complete, rings_cut_by_the_limit_are_served_in_turn)
{
	struct img big;
	struct mp_consumer *c;
	uint64_t pos[2] = { 0, 0 };
	int n = 0;

	(void)n;

	img_init(&big, 8, 64, 16, 256);
	img_str(&big, 0, 0, "?");
	cr_assert_eq(mp_consumer_open_mem(big.mem, big.len, &c), 0);
	for (int read = 0; read < 8; read++) {
		/* both rings kept full */
		for (uint32_t ring = 0; ring < 2; ring++)
			for (; pos[ring] < big.thr[ring].tail + 8; pos[ring]++) {
				struct mp_slot *s = img_put(&big, pos[ring], MP_REC_ALLOC, 7 + ring,
							    1, ring, FN_MALLOC);

				s->ts_ns = 1000 + pos[ring];
			}
		cr_assert_eq(mp_consumer_read_rings_at(c, 4, 10000 + (uint64_t)read, count_cb, &n),
			     4);
	}
	for (uint32_t ring = 0; ring < 2; ring++)
		cr_assert_geq(big.thr[ring].tail, 12, "ring %u read up to %" PRIu64 " in 8 reads",
			      ring, (uint64_t)big.thr[ring].tail);
	mp_consumer_free(c);
	free(big.mem);
}
