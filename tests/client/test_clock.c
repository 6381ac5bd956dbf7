/* SPDX-License-Identifier: MIT */
/*
 * Heap records stamped with the TSC (docs/RING.md "Clocks"): the consumer's
 * conversion to CLOCK_MONOTONIC ns, with a forged calibration and with its
 * own; records of a forged clock are corrupt, never misread.
 */
#include <errno.h>
#include <stdlib.h>
#include <time.h>

#include "ring_clock.h"
#include "ring_image.h"
#include "ring_test.h"

/* enum mp_alloc_fn (bpf/memprof_events.h, not on this test's path) */
enum { FN_MALLOC = 0, FN_FREE = 4 };

static struct img m;

static void setup(void)
{
	img_init(&m, 8, 2, 16, 256);
	img_str(&m, 0, 0, "?");
	img_str(&m, 1, 2, "conv");
}

static void teardown(void)
{
	free(m.mem);
}

TestSuite(clock, .init = setup, .fini = teardown);

struct seen {
	struct mp_record rec[8];
	int n;
};

static int seen_cb(void *ctx, uint32_t ring, const struct mp_record *rec)
{
	struct seen *s = ctx;

	(void)ring;
	cr_assert_lt(s->n, 8);
	s->rec[s->n++] = *rec;
	return 0;
}

static struct mp_slot *put_heap(uint64_t pos, uint8_t type, uint8_t clock, uint64_t ts)
{
	struct mp_slot *s =
		img_put(&m, pos, type, 7, 1, 0, type == MP_REC_FREE ? FN_FREE : FN_MALLOC);

	s->clock = clock;
	s->ts_ns = ts;
	s->dims[0] = 0x1000;
	s->dims[1] = type == MP_REC_FREE ? 0 : 32;
	return s;
}

static void sleep_ms(long ms)
{
	struct timespec t = { .tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L };

	nanosleep(&t, NULL);
}

Test(clock, conversion_with_a_forged_calibration)
{
	/* 0.5 ns per tick (a 2 GHz TSC) */
	struct mp_tsc_cal cal = { .tsc = 1000000, .ns = 5000000000ull, .mult = 1ull << 31 };
	struct mp_tsc_cal fast = { .tsc = 0, .ns = 0, .mult = 1ull << 40 };

	cr_assert_eq(mp_tsc_to_ns(&cal, 1000000), 5000000000ull);
	cr_assert_eq(mp_tsc_to_ns(&cal, 1002000), 5000001000ull, "after the pair");
	cr_assert_eq(mp_tsc_to_ns(&cal, 998000), 4999999000ull, "before the pair");
	cr_assert_eq(mp_tsc_to_ns(&cal, 1000000 + 2000000000ull), 6000000000ull, "1 s later");
	/* 3 GHz: 1/3 ns per tick, rounded down in 32.32 */
	cal.mult = (1ull << 32) / 3;
	cr_assert_eq(mp_tsc_to_ns(&cal, 1000000 + 3000000000ull), 5999999999ull);
	/* hostile stamps saturate, never wrap */
	cal.mult = 1ull << 31;
	cr_assert_eq(mp_tsc_to_ns(&cal, 0), 5000000000ull - 500000);
	cal.ns = 10;
	cr_assert_eq(mp_tsc_to_ns(&cal, 0), 0, "before CLOCK_MONOTONIC's zero");
	cr_assert_eq(mp_tsc_to_ns(&fast, 1ull << 62), UINT64_MAX);
	cr_assert_eq(mp_tsc_to_ns(&fast, UINT64_MAX), 0, "2^64 - 1 is one tick before 0");
}

/* TSC records are converted record by record and in a read of several, a
 * thread's TSC records never go back in time when the calibration moves
 * between two reads, and CLOCK_MONOTONIC records beside them are left as
 * they are. */
Test(clock, tsc_records_converted_across_reads)
{
	struct mp_tsc_cal cal = { .tsc = 1000, .ns = 1000000, .mult = 1ull << 32 };
	struct seen s = { 0 };
	struct mp_consumer *c;
	struct mp_record r;

	put_heap(0, MP_REC_ALLOC, MP_TS_TSC, 3000);
	put_heap(1, MP_REC_FREE, MP_TS_MONOTONIC, 777);
	img_put(&m, 2, MP_REC_KERNEL_BEGIN, 7, 2, 0, 1)->clock = 0xee; /* ignored */
	cr_assert_eq(mp_consumer_open_mem(m.mem, m.len, &c), 0);
	mp_consumer_set_tsc_cal(c, &cal);
	cr_assert_eq(read_one(c, &r), 1);
	cr_assert_eq(r.type, MP_REC_ALLOC);
	cr_assert_eq(r.ts_ns, 1002000);
	cr_assert_eq(read_one(c, &r), 1);
	cr_assert_eq(r.ts_ns, 777, "a CLOCK_MONOTONIC record is not converted");
	cr_assert_eq(read_one(c, &r), 1);
	cr_assert_eq(r.type, MP_REC_KERNEL_BEGIN);
	cr_assert_str_eq(r.name, "conv");

	/* the calibration moves 500 ns back: the next record, one tick
	 * later, is not put before the one read already */
	put_heap(3, MP_REC_ALLOC, MP_TS_TSC, 3001);
	put_heap(4, MP_REC_ALLOC, MP_TS_TSC, 5000);
	cal.ns -= 500;
	mp_consumer_set_tsc_cal(c, &cal);
	cr_assert_eq(mp_consumer_read_rings_at(c, 8, test_now_ns(), seen_cb, &s), 2);
	cr_assert_eq(s.rec[0].ts_ns, 1002000, "clamped to its predecessor");
	cr_assert_eq(s.rec[1].ts_ns, 1003500);
	mp_consumer_free(c);
}

/* A clock byte the ABI does not define, or TSC records where the consumer
 * does not believe the TSC: corrupt, sticky, after the good records. */
Test(clock, forged_clock_is_corrupt)
{
	struct mp_consumer *c;
	struct mp_record r;

	put_heap(0, MP_REC_ALLOC, MP_TS_MONOTONIC, 100);
	put_heap(1, MP_REC_FREE, 2, 200);
	cr_assert_eq(mp_consumer_open_mem(m.mem, m.len, &c), 0);
	cr_assert_eq(read_one(c, &r), 1);
	cr_assert_eq(r.ts_ns, 100);
	cr_assert_eq(read_one(c, &r), -EBADMSG);
	cr_assert(mp_consumer_corruption(c) & MP_CONSUMER_CORRUPT_RECORDS);
	mp_consumer_free(c);

	teardown();
	setup();
	put_heap(0, MP_REC_ALLOC, MP_TS_MONOTONIC, 100);
	put_heap(1, MP_REC_FREE, MP_TS_TSC, 200);
	cr_assert_eq(mp_consumer_open_mem(m.mem, m.len, &c), 0);
	mp_consumer_set_tsc_cal(c, NULL);
	cr_assert_eq(read_one(c, &r), 1);
	cr_assert_eq(read_one(c, &r), -EBADMSG, "TSC record while the TSC is not trusted");
	cr_assert_eq(read_one(c, &r), -EBADMSG, "sticky");
	mp_consumer_free(c);
}

/*
 * The consumer's own calibration: a TSC stamp taken between two
 * CLOCK_MONOTONIC reads 20 ms apart converts to a time between them (a
 * conversion off by a rate or an offset lands far outside). Where this
 * machine does not trust its TSC, the same record is corrupt instead.
 */
Test(clock, own_calibration_orders_against_clock_monotonic)
{
	struct mp_consumer *c;
	uint64_t t0, t1, tsc;
	struct mp_record r;

	cr_assert_eq(mp_consumer_open_mem(m.mem, m.len, &c), 0);
	t0 = test_now_ns();
	sleep_ms(20);
	tsc = mp_rdtsc();
	put_heap(0, MP_REC_ALLOC, MP_TS_TSC, tsc);
	sleep_ms(20);
	t1 = test_now_ns();
	if (!mp_tsc_trusted()) {
		cr_assert_eq(read_one(c, &r), -EBADMSG);
		mp_consumer_free(c);
		return;
	}
	cr_assert_eq(read_one(c, &r), 1);
	cr_assert(r.ts_ns > t0 && r.ts_ns < t1, "converted %llu not in (%llu, %llu)",
		  (unsigned long long)r.ts_ns, (unsigned long long)t0, (unsigned long long)t1);
	/* a second record 20 ms later, after a recalibration */
	sleep_ms(20);
	t0 = test_now_ns();
	sleep_ms(20);
	put_heap(1, MP_REC_FREE, MP_TS_TSC, mp_rdtsc());
	sleep_ms(20);
	t1 = test_now_ns();
	cr_assert_eq(read_one(c, &r), 1);
	cr_assert(r.ts_ns > t0 && r.ts_ns < t1, "converted %llu not in (%llu, %llu)",
		  (unsigned long long)r.ts_ns, (unsigned long long)t0, (unsigned long long)t1);
	mp_consumer_free(c);
}

/* The clocksource file as the kernel writes it, and nothing else. */
Test(clock, clocksource_names)
{
	cr_assert_eq(mp_tsc_source_parse("tsc\n", 4), MP_TSC_SRC_TSC);
	cr_assert_eq(mp_tsc_source_parse("kvm-clock\n", 10), MP_TSC_SRC_KVM);
	cr_assert_eq(mp_tsc_source_parse("tsc", 3), MP_TSC_SRC_OTHER);
	cr_assert_eq(mp_tsc_source_parse("tsc\nx", 5), MP_TSC_SRC_OTHER);
	cr_assert_eq(mp_tsc_source_parse("kvm-clock", 9), MP_TSC_SRC_OTHER);
	cr_assert_eq(mp_tsc_source_parse("hpet\n", 5), MP_TSC_SRC_OTHER);
	cr_assert_eq(mp_tsc_source_parse("xen\n", 4), MP_TSC_SRC_OTHER);
	cr_assert_eq(mp_tsc_source_parse("", 0), MP_TSC_SRC_OTHER);
	cr_assert_eq(mp_tsc_source_parse("", -1), MP_TSC_SRC_OTHER);
}

/*
 * The writer's rule: never without an invariant TSC; always under "tsc";
 * under kvm-clock only when the vDSO read CLOCK_MONOTONIC without the
 * kernel (at least twice as fast as the syscall); never elsewhere.
 */
Test(clock, writer_decision)
{
	cr_assert(mp_tsc_stamp_decide(true, MP_TSC_SRC_TSC, 0, 0));
	cr_assert_not(mp_tsc_stamp_decide(false, MP_TSC_SRC_TSC, 0, 0));
	cr_assert(mp_tsc_stamp_decide(true, MP_TSC_SRC_KVM, 28, 400));
	cr_assert(mp_tsc_stamp_decide(true, MP_TSC_SRC_KVM, 49, 100));
	cr_assert_not(mp_tsc_stamp_decide(true, MP_TSC_SRC_KVM, 50, 100));
	/* a vDSO that falls back to the syscall costs it and more */
	cr_assert_not(mp_tsc_stamp_decide(true, MP_TSC_SRC_KVM, 420, 400));
	cr_assert_not(mp_tsc_stamp_decide(true, MP_TSC_SRC_KVM, 0, 400));
	cr_assert_not(mp_tsc_stamp_decide(true, MP_TSC_SRC_KVM, 28, 0));
	cr_assert_not(mp_tsc_stamp_decide(false, MP_TSC_SRC_KVM, 28, 400));
	cr_assert_not(mp_tsc_stamp_decide(true, MP_TSC_SRC_OTHER, 28, 400));
}

/*
 * On this machine: whatever the writer decides, the consumer converts what
 * it writes (a writer's TSC record the consumer refused would end the
 * profile as corrupt), and the probe measured something.
 */
Test(clock, consumer_converts_what_the_writer_writes)
{
	bool w = mp_tsc_stamp_ok();
	enum mp_tsc_source src = mp_tsc_source();

	cr_log_info("clocksource %d, invariant TSC %d, writer stamps with the TSC: %d", (int)src,
		    (int)mp_tsc_invariant(), (int)w);
	if (w)
		cr_assert(mp_tsc_trusted());
	if (src == MP_TSC_SRC_KVM) {
		cr_assert_gt(mp_clock_call_ns(false), 0);
		cr_assert_gt(mp_clock_call_ns(true), 0);
	}
}
