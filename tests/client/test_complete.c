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
