/* SPDX-License-Identifier: MIT */
/* Late attach: kernels open before the consumer attaches are seen once. */
#include <errno.h>
#include <linux/membarrier.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "memprof.h"
#include "ring_test.h"

Test(attach, open_kernels_seen_once)
{
	struct mp_record recs[32];
	struct mp_consumer *c;
	uint32_t tid = (uint32_t)gettid();
	uint64_t t_phase, t_attach, t_end;
	size_t n;

	t_phase = test_now_ns();
	cr_assert_eq(memprof_phase("inference"), 0);
	cr_assert_eq(memprof_kernel_begin("outer"), 0);
	cr_assert_eq(memprof_tag_begin("activations"), 0);
	cr_assert_eq(memprof_kernel_begin("inner"), 0);
	/* a kernel that ended before attach must not appear */
	cr_assert_eq(memprof_kernel_begin("gone"), 0);
	cr_assert_eq(memprof_kernel_end(), 0);

	t_attach = test_now_ns();
	cr_assert_eq(mp_consumer_open_pid(getpid(), &c), 0);
	cr_assert_eq(memprof_kernel_end(), 0);
	cr_assert_eq(memprof_tag_end(), 0);
	cr_assert_eq(memprof_kernel_end(), 0);
	t_end = test_now_ns();

	n = drain(c, recs, 32);
	const struct exp_rec exp[] = {
		REC(MP_REC_PHASE, MP_REC_F_OPEN_AT_ATTACH, "inference"),
		REC(MP_REC_KERNEL_BEGIN, MP_REC_F_OPEN_AT_ATTACH | MP_REC_F_TS_UNKNOWN, "outer"),
		REC(MP_REC_KERNEL_BEGIN, MP_REC_F_OPEN_AT_ATTACH | MP_REC_F_TS_UNKNOWN, "inner"),
		REC(MP_REC_TAG_BEGIN, MP_REC_F_OPEN_AT_ATTACH | MP_REC_F_TS_UNKNOWN, "activations"),
		REC(MP_REC_KERNEL_END, 0, NULL),
		REC(MP_REC_TAG_END, 0, NULL),
		REC(MP_REC_KERNEL_END, 0, NULL),
	};
	cr_assert_eq(n, 7, "got %zu records", n);
	for (size_t i = 0; i < n; i++)
		assert_rec(&recs[i], &exp[i], tid, i);
	/* phases are always timestamped; detached kernels get the attach time */
	cr_assert(recs[0].ts_ns >= t_phase && recs[0].ts_ns <= t_attach);
	for (size_t i = 1; i < 4; i++)
		cr_assert(recs[i].ts_ns >= t_attach && recs[i].ts_ns <= recs[4].ts_ns);
	cr_assert(recs[6].ts_ns <= t_end);
	/* the snapshot is at one record number; the ring continues from it */
	for (size_t i = 1; i < 4; i++)
		cr_assert_eq(recs[i].seq, recs[0].seq);
	cr_assert_eq(recs[4].seq, recs[0].seq + 1);
	cr_assert_eq(recs[6].seq, recs[0].seq + 3);
	mp_consumer_free(c);
}

/* A second consumer sees the real begin time of a kernel begun while the
 * first was attached, and not the first's unread ring copy of it. */
Test(attach, reattach_no_duplicates)
{
	struct mp_record recs[32];
	struct mp_consumer *c1, *c2;
	uint32_t tid = (uint32_t)gettid();
	uint64_t t0;
	size_t n;

	cr_assert_eq(memprof_kernel_begin("before"), 0);
	cr_assert_eq(mp_consumer_open_pid(getpid(), &c1), 0);
	t0 = test_now_ns();
	cr_assert_eq(memprof_kernel_begin("timed"), 0);
	mp_consumer_free(c1); /* leaves "timed" unread in the ring */
	cr_assert_eq(memprof_kernel_begin("untimed"), 0);
	cr_assert_eq(mp_consumer_open_pid(getpid(), &c2), 0);
	cr_assert_eq(memprof_kernel_end(), 0);
	n = drain(c2, recs, 32);
	const struct exp_rec exp[] = {
		REC(MP_REC_KERNEL_BEGIN, MP_REC_F_OPEN_AT_ATTACH | MP_REC_F_TS_UNKNOWN, "before"),
		REC(MP_REC_KERNEL_BEGIN, MP_REC_F_OPEN_AT_ATTACH, "timed"),
		REC(MP_REC_KERNEL_BEGIN, MP_REC_F_OPEN_AT_ATTACH | MP_REC_F_TS_UNKNOWN, "untimed"),
		REC(MP_REC_KERNEL_END, 0, NULL),
	};
	cr_assert_eq(n, 4, "got %zu records", n);
	for (size_t i = 0; i < n; i++)
		assert_rec(&recs[i], &exp[i], tid, i);
	cr_assert(recs[1].ts_ns >= t0 && recs[1].ts_ns < recs[3].ts_ns);
	cr_assert_eq(mp_consumer_drops(c2), 0);
	mp_consumer_free(c2);
}

#define HOT_THREADS 3
#define SESSIONS 4

static int hot_ready, hot_stop;
static uint32_t hot_tids[HOT_THREADS];

static void *hot(void *arg)
{
	int idx = (int)(intptr_t)arg;

	hot_tids[idx] = (uint32_t)gettid();
	memprof_kernel_begin("session");
	__atomic_add_fetch(&hot_ready, 1, __ATOMIC_RELEASE);
	while (!__atomic_load_n(&hot_stop, __ATOMIC_ACQUIRE)) {
		memprof_kernel_begin("op");
		memprof_tag_begin("t");
		memprof_tag_end();
		memprof_kernel_end();
		/* 20 us per round: attaching (membarrier) takes 10-15 ms
		 * and the thread's 8192-slot ring must not overflow
		 * meanwhile (4 records per round), or records would be
		 * dropped (counted). The markers of a round run back to
		 * back. */
		for (uint64_t t0 = test_now_ns(); test_now_ns() - t0 < 20000;)
			;
	}
	memprof_kernel_end();
	return NULL;
}

struct hot_state {
	int open[2]; /* kernels, tags */
	uint32_t last_seq;
	bool seen_session, live;
};

struct hot_session {
	struct hot_state hs[HOT_THREADS];
	uint64_t n; /* records of the busy threads */
};

/* Checks one record of a session against its thread's stream. */
static int on_session_record(void *ctx, uint32_t ring, const struct mp_record *rec)
{
	struct hot_session *s = ctx;
	struct hot_state *h = NULL;

	(void)ring;
	for (int i = 0; i < HOT_THREADS; i++)
		if (rec->tid == hot_tids[i])
			h = &s->hs[i];
	if (!h)
		return 0;
	if (rec->flags & MP_REC_F_OPEN_AT_ATTACH) {
		cr_assert_not(h->live, "open-at-attach record after live records");
		if (!h->seen_session)
			cr_assert_str_eq(rec->name, "session");
		h->seen_session = true;
		h->last_seq = rec->seq;
	} else {
		cr_assert(h->seen_session, "live record before the open-at-attach ones");
		h->live = true;
		cr_assert_eq(rec->seq, h->last_seq + 1, "seq %u after %u", rec->seq, h->last_seq);
		h->last_seq = rec->seq;
	}
	switch (rec->type) {
	case MP_REC_KERNEL_BEGIN:
		h->open[0]++;
		break;
	case MP_REC_KERNEL_END:
		cr_assert_gt(h->open[0], 1, "end without begin (session never ends here)");
		h->open[0]--;
		break;
	case MP_REC_TAG_BEGIN:
		h->open[1]++;
		break;
	case MP_REC_TAG_END:
		cr_assert_gt(h->open[1], 0, "tag end without begin");
		h->open[1]--;
		break;
	default:
		cr_assert_fail("unexpected %s", mp_record_type_name(rec->type));
	}
	cr_assert_leq(h->open[0], 2);
	cr_assert_leq(h->open[1], 1);
	s->n++;
	return 0;
}

/* One consumer session: the stream of every busy thread must start with its
 * open-at-attach records ("session" first), then continue with record
 * numbers without a gap and a consistent nesting. */
static void session(void)
{
	struct hot_session s = { 0 };
	struct mp_consumer *c;
	int r;

	cr_assert_eq(mp_consumer_open_pid(getpid(), &c), 0);
	while (s.n < 60000) {
		r = mp_consumer_read_rings_at(c, 4096, test_now_ns(), on_session_record, &s);
		cr_assert_geq(r, 0);
		if (!r)
			sched_yield();
	}
	for (int i = 0; i < HOT_THREADS; i++)
		cr_assert(s.hs[i].live, "thread %d: no live record", i);
	cr_assert_eq(mp_consumer_drops(c), 0);
	/* leaves unread records behind for the next session to skip */
	mp_consumer_free(c);
}

/* Attach (several times) while threads run markers flat out. */
Test(attach, concurrent_with_busy_threads)
{
	pthread_t th[HOT_THREADS];

	memprof_phase("x");
	for (int i = 0; i < HOT_THREADS; i++)
		cr_assert_eq(pthread_create(&th[i], NULL, hot, (void *)(intptr_t)i), 0);
	while (__atomic_load_n(&hot_ready, __ATOMIC_ACQUIRE) < HOT_THREADS)
		sched_yield();
	for (int s = 0; s < SESSIONS; s++) {
		usleep(5000);
		session();
	}
	__atomic_store_n(&hot_stop, 1, __ATOMIC_RELEASE);
	for (int i = 0; i < HOT_THREADS; i++)
		pthread_join(th[i], NULL);
}

/* The attach's barrier: this process's ring says its creator registered
 * for the expedited membarrier wherever the kernel has it (no seccomp
 * here), and the consumer then uses it, in microseconds, instead of the
 * global one's grace period; elsewhere the global one. */
Test(attach, expedited_barrier_where_registered)
{
	int cmds = (int)syscall(SYS_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
	bool expedited = cmds > 0 && (cmds & MEMBARRIER_CMD_GLOBAL_EXPEDITED) &&
			 (cmds & MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED);
	struct mp_consumer *c;
	uint64_t t0, t1;

	cr_assert_eq(memprof_kernel_begin("k"), 0); /* the ring exists */
	cr_assert_eq(memprof_kernel_end(), 0);
	t0 = test_now_ns();
	cr_assert_eq(mp_consumer_open_pid(getpid(), &c), 0);
	t1 = test_now_ns();
	cr_log_info("membarrier commands %#x: attach barrier %d, attach %.3f ms", (unsigned)cmds,
		    (int)mp_consumer_attach_barrier(c), (double)(t1 - t0) / 1e6);
	cr_assert_eq(mp_consumer_attach_barrier(c), expedited ? MP_ATTACH_BARRIER_EXPEDITED :
						    cmds > 0  ? MP_ATTACH_BARRIER_GLOBAL :
								MP_ATTACH_BARRIER_SLEEP);
	mp_consumer_free(c);
}
