/* SPDX-License-Identifier: MIT */
/*
 * Multi-producer stress: 8 threads x 1,000,000 begin/end pairs (scaled by
 * MEMPROF_STRESS_PAIRS) while one consumer drains concurrently.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "memprof.h"
#include "ring_test.h"

#define NTHREADS 8

struct stress {
	uint64_t pairs;
	uint64_t backlog;
	bool pace; /* producers wait for the consumer: no drop may happen */
	bool slow; /* consumer sleeps while producers run */
	uint64_t produced; /* records attempted, all threads */
	uint64_t consumed;
	int go;
	int done;
	uint32_t tids[NTHREADS];
};

struct per_thread {
	uint64_t received;
	uint64_t gaps;
	uint32_t last_seq;
	uint32_t last_type;
};

static uint64_t env_u64(const char *name, uint64_t def)
{
	const char *s = getenv(name);

	return s && *s ? strtoull(s, NULL, 0) : def;
}

static struct stress st;

static void pair(void)
{
	int r1 = memprof_kernel_begin("k");
	int r2 = memprof_kernel_end();

	/* a dropped record is reported, never anything else */
	if ((r1 && r1 != -ENOSPC) || (r2 && r2 != -ENOSPC))
		abort();
}

static void *producer(void *arg)
{
	int idx = (int)(intptr_t)arg;

	/* The first pair takes a thread slot before anyone can finish and
	 * give one back: every producer has a fresh slot, so its record
	 * numbers start at 2 (1 is the registration). */
	pair();
	__atomic_store_n(&st.tids[idx], (uint32_t)gettid(), __ATOMIC_RELEASE);
	while (!__atomic_load_n(&st.go, __ATOMIC_ACQUIRE))
		sched_yield();
	for (uint64_t i = 1; i < st.pairs; i++) {
		pair();
		if (st.pace && (i & 63) == 63) {
			uint64_t p = __atomic_add_fetch(&st.produced, 128, __ATOMIC_RELAXED);

			/* signed: the consumer may be ahead of this count */
			while ((int64_t)(p - __atomic_load_n(&st.consumed, __ATOMIC_RELAXED)) >
			       (int64_t)st.backlog)
				sched_yield();
		}
	}
	return NULL;
}

static int tid_index(uint32_t tid)
{
	for (int i = 0; i < NTHREADS; i++)
		if (st.tids[i] == tid)
			return i;
	return -1;
}

/* Checks one record against its thread's stream: same thread, alternating
 * begin "k"/end, record numbers strictly increasing; counts the gaps. */
static void check(struct per_thread *pt, const struct mp_record *r)
{
	int i = tid_index(r->tid);
	struct per_thread *p;
	uint32_t expect_seq;

	cr_assert(i >= 0, "record from unknown tid %u", r->tid);
	p = &pt[i];
	/* a thread's first marker gets record number 2 (1 is its
	 * registration) */
	expect_seq = p->received ? p->last_seq + 1 : 2;
	cr_assert((int32_t)(r->seq - expect_seq) >= 0, "thread %d: seq %u after %u (dup/reorder)",
		  i, r->seq, p->last_seq);
	p->gaps += r->seq - expect_seq;
	if (r->seq == expect_seq && p->received)
		cr_assert_neq(r->type, p->last_type, "thread %d: two %s in a row without a gap", i,
			      mp_record_type_name(r->type));
	if (r->type == MP_REC_KERNEL_BEGIN) {
		cr_assert_str_eq(r->name, "k");
		/* begins have even record numbers: 2, 4, ... */
		cr_assert_eq(r->seq & 1, 0, "thread %d: begin with seq %u (last %u %s)", i, r->seq,
			     p->last_seq, mp_record_type_name(p->last_type));
	} else {
		cr_assert_eq(r->type, MP_REC_KERNEL_END);
		cr_assert_null(r->name);
		cr_assert_eq(r->seq & 1, 1, "thread %d: end with seq %u (last %u %s)", i, r->seq,
			     p->last_seq, mp_record_type_name(p->last_type));
	}
	cr_assert_eq(r->flags, 0);
	cr_assert_eq(r->rank, 0);
	p->last_seq = r->seq;
	p->last_type = r->type;
	p->received++;
}

/* The consumer's side of run(): every record checked as it is read. */
struct reader {
	struct per_thread *pt;
	uint64_t total;
	bool finished; /* every producer is done */
};

static int on_record(void *ctx, uint32_t ring, const struct mp_record *rec)
{
	struct reader *rd = ctx;

	(void)ring;
	check(rd->pt, rec);
	rd->total++;
	if (st.pace && (rd->total & 63) == 0)
		__atomic_store_n(&st.consumed, rd->total, __ATOMIC_RELAXED);
	if (st.slow && (rd->total & 1023) == 0 && !rd->finished)
		usleep(2000);
	return 0;
}

/* @backlog: with @pace, producers wait while more records than that are
 * unread (all threads); it must stay well under one thread's ring (8192
 * slots by default; the ring is created when the library loads). */
static void run(uint64_t pairs, uint64_t backlog, bool pace, bool slow)
{
	pthread_t th[NTHREADS];
	struct per_thread pt[NTHREADS] = { 0 };
	struct reader rd = { .pt = pt };
	struct mp_consumer *c;
	struct mp_record rec;
	uint64_t total, gaps = 0, drops;
	int r, joined = 0;

	st.pairs = pairs;
	st.backlog = backlog;
	st.pace = pace;
	st.slow = slow;
	cr_assert_eq(memprof_phase("stress"), 0);
	cr_assert_eq(mp_consumer_open_pid(getpid(), &c), 0);
	cr_assert_eq(read_one(c, &rec), 1);
	cr_assert_eq(rec.type, MP_REC_PHASE);
	cr_assert_eq(rec.flags, MP_REC_F_OPEN_AT_ATTACH);

	for (int i = 0; i < NTHREADS; i++)
		cr_assert_eq(pthread_create(&th[i], NULL, producer, (void *)(intptr_t)i), 0);
	for (int i = 0; i < NTHREADS; i++)
		while (!__atomic_load_n(&st.tids[i], __ATOMIC_ACQUIRE))
			sched_yield();
	__atomic_store_n(&st.go, 1, __ATOMIC_RELEASE);

	for (;;) {
		rd.finished = __atomic_load_n(&st.done, __ATOMIC_ACQUIRE);
		r = mp_consumer_read_rings_at(c, 4096, test_now_ns(), on_record, &rd);
		cr_assert_geq(r, 0, "read: %s", strerror(-r));
		if (r > 0)
			continue;
		if (rd.finished)
			break;
		/* join without blocking the drain; one more pass after */
		while (joined < NTHREADS && pthread_tryjoin_np(th[joined], NULL) == 0)
			joined++;
		if (joined == NTHREADS)
			__atomic_store_n(&st.done, 1, __ATOMIC_RELEASE);
		sched_yield();
	}
	total = rd.total;
	drops = mp_consumer_drops(c);
	for (int i = 0; i < NTHREADS; i++) {
		/* records after the last received one are missing too */
		uint64_t tail = pt[i].received ? (2 + 2 * pairs - 1) - pt[i].last_seq : 2 * pairs;

		gaps += pt[i].gaps + tail;
	}
	cr_assert_eq(total + drops, NTHREADS * 2 * pairs,
		     "received %llu + dropped %llu != attempted %llu", (unsigned long long)total,
		     (unsigned long long)drops, (unsigned long long)(NTHREADS * 2 * pairs));
	cr_assert_eq(gaps, drops, "missing records %llu != drop counter %llu",
		     (unsigned long long)gaps, (unsigned long long)drops);
	cr_assert_eq(memprof_dropped(), drops);
	if (pace)
		cr_assert_eq(drops, 0);
	if (slow)
		cr_assert_gt(drops, 0, "the slow consumer should have caused drops");
	cr_log_info("received %llu, dropped %llu", (unsigned long long)total,
		    (unsigned long long)drops);
	mp_consumer_free(c);
}

Test(stress, eight_threads_exactly_once, .timeout = 220)
{
	/* at most 2048 + 8 x 128 records unread, in any one ring */
	run(env_u64("MEMPROF_STRESS_PAIRS", 1000000), 2048, true, false);
}

Test(stress, slow_consumer_drops_are_exact, .timeout = 220)
{
	run(env_u64("MEMPROF_STRESS_PAIRS", 1000000) / 10, 0, false, true);
}
