/* SPDX-License-Identifier: MIT */
/*
 * bench-marker: cost of a memprof_kernel_begin + memprof_kernel_end pair
 *   - with no consumer attached (1 and 2 producer threads),
 *   - attached, ring never full (producer cost alone),
 *   - attached with a consumer draining the ring in another thread,
 * the same for a memprof_pool_alloc + memprof_pool_free pair (one slice of
 * an arena), and the consumer's cost per record. The baseline is one
 * clock_gettime(CLOCK_MONOTONIC), measured in the same run. Every figure is
 * the best of ROUNDS runs, so that preemption by other load does not count.
 * Ring sizes are the defaults (8192 slots per thread; MEMPROF_RING_* are
 * read when libmemprof loads). "Attached, not full" writes bursts that fit
 * the ring and drains it between bursts; the rings' pages are touched before
 * (a fresh tmpfs page faults once, on first write).
 * Usage: bench-marker [pairs per thread per round, default 250000]
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "memprof.h"
#include "consumer.h"

#define ROUNDS 7
/* attached, ring not full: short bursts that fit the default 8192-slot ring,
 * drained between bursts */
#define BURST_PAIRS 3000
#define BURST_ROUNDS 50

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static long pairs;
static int pool_mode, pool_id; /* measure pool alloc+free pairs instead */
static char slice_buf[64];
static pthread_barrier_t start;
static volatile int draining;
static struct mp_consumer *cons;
static uint64_t drained;

static void *producer(void *arg)
{
	double *ret = arg;
	uint64_t t0;

	memprof_kernel_begin("warm");
	memprof_kernel_end();
	pthread_barrier_wait(&start);
	t0 = now_ns();
	if (pool_mode) {
		for (long i = 0; i < pairs; i++) {
			memprof_pool_alloc(pool_id, slice_buf, sizeof(slice_buf));
			memprof_pool_free(pool_id, slice_buf);
		}
	} else {
		for (long i = 0; i < pairs; i++) {
			memprof_kernel_begin("matmul");
			memprof_kernel_end();
		}
	}
	*ret = (double)(now_ns() - t0) / (double)pairs;
	return NULL;
}

static int count(void *ctx, uint32_t ring, const struct mp_record *rec)
{
	(void)ring;
	(void)rec;
	(*(uint64_t *)ctx)++;
	return 0;
}

static void *consumer(void *arg)
{
	(void)arg;
	while (draining) {
		int r = mp_consumer_read_rings_at(cons, 4096, now_ns(), count, &drained);

		if (r < 0)
			break;
		/* Like the daemon: poll, do not spin on the slot a producer
		 * is about to write (that line would bounce between cores on
		 * every record). */
		if (r == 0)
			usleep(50);
	}
	return NULL;
}

static uint64_t drain_all(void)
{
	uint64_t n = 0;

	while (mp_consumer_read_rings_at(cons, 4096, now_ns(), count, &n) > 0)
		;
	return n;
}

/* ns per pair (mean of the @n threads), best of @rounds */
static double run(int n, bool with_consumer, int rounds)
{
	double best = 1e30;

	for (int round = 0; round < rounds; round++) {
		pthread_t th[2], ct;
		double ns[2], sum = 0;

		pthread_barrier_init(&start, NULL, (unsigned)n);
		if (with_consumer) {
			draining = 1;
			pthread_create(&ct, NULL, consumer, NULL);
		}
		for (int i = 0; i < n; i++)
			pthread_create(&th[i], NULL, producer, &ns[i]);
		for (int i = 0; i < n; i++) {
			pthread_join(th[i], NULL);
			sum += ns[i];
		}
		if (with_consumer) {
			draining = 0;
			pthread_join(ct, NULL);
		}
		if (cons)
			drain_all();
		pthread_barrier_destroy(&start);
		if (sum / n < best)
			best = sum / n;
	}
	return best;
}

static double clock_cost(void)
{
	double best = 1e30;

	for (int round = 0; round < ROUNDS; round++) {
		struct timespec ts;
		long n = pairs * 2;
		uint64_t t0 = now_ns();
		double v;

		for (long i = 0; i < n; i++)
			clock_gettime(CLOCK_MONOTONIC, &ts);
		v = (double)(now_ns() - t0) / (double)n;
		if (v < best)
			best = v;
	}
	return best;
}

/* ns per record read, best of ROUNDS (ring filled first, then drained) */
static double consumer_cost(void)
{
	double best = 1e30;

	for (int round = 0; round < ROUNDS; round++) {
		uint64_t t0, n;

		for (long i = 0; i < pairs / 2; i++) {
			memprof_kernel_begin("matmul");
			memprof_kernel_end();
		}
		t0 = now_ns();
		n = drain_all();
		if (n && (double)(now_ns() - t0) / (double)n < best)
			best = (double)(now_ns() - t0) / (double)n;
	}
	return best;
}

static void row(const char *what, double ns, double clk, const char *target)
{
	printf("%-40s %8.2f %9.2fx %10s\n", what, ns, ns / clk, target);
}

int main(int argc, char **argv)
{
	double clk, det1, det2, att1, att2, dr1, dr2, rec, pdet, patt;
	uint64_t drops0, drops;
	int r;

	pairs = argc > 1 ? atol(argv[1]) : 250000;
	if (pairs <= 0 || pairs > (1l << 20))
		return 1;
	memprof_phase("bench");
	clk = clock_cost();
	det1 = run(1, false, ROUNDS);
	det2 = run(2, false, ROUNDS);
	pool_id = memprof_pool_declare("bench", MEMPROF_POOL_HOST);
	pool_mode = 1;
	pdet = run(1, false, ROUNDS);
	pool_mode = 0;

	r = mp_consumer_open_pid(getpid(), &cons);
	if (r < 0) {
		fprintf(stderr, "bench-marker: cannot attach to own ring: %d\n", r);
		return 1;
	}
	/* unmeasured: fault in the pages of the rings the producer threads
	 * will use */
	{
		long saved = pairs;

		pairs = BURST_PAIRS;
		run(2, false, 4);
		pairs = saved;
	}
	drops0 = mp_consumer_drops(cons);
	{
		long saved = pairs;

		pairs = BURST_PAIRS;
		att1 = run(1, false, BURST_ROUNDS);
		att2 = run(2, false, BURST_ROUNDS);
		pool_mode = 1;
		patt = run(1, false, BURST_ROUNDS);
		pool_mode = 0;
		pairs = saved;
	}
	drops = mp_consumer_drops(cons) - drops0;
	dr1 = run(1, true, ROUNDS);
	dr2 = run(2, true, ROUNDS);
	rec = consumer_cost();

	printf("bench-marker: %ld pairs per thread and round, best of %d rounds (attached, not "
	       "full: %d pairs, best of %d), %ld CPUs online\n",
	       pairs, ROUNDS, BURST_PAIRS, BURST_ROUNDS, sysconf(_SC_NPROCESSORS_ONLN));
	printf("%-40s %8s %10s %10s\n", "", "ns", "x clock", "target");
	row("clock_gettime(CLOCK_MONOTONIC)", clk, clk, "baseline");
	row("pair, no consumer, 1 thread", det1, clk, "<= 10 ns");
	row("pair, no consumer, 2 threads", det2, clk, "<= 10 ns");
	row("pair, attached, ring not full, 1 thr", att1, clk, "<= 2.5x");
	row("pair, attached, ring not full, 2 thr", att2, clk, "<= 2.5x");
	row("pair, consumer draining, 1 thread", dr1, clk, "<= 2.5x");
	row("pair, consumer draining, 2 threads", dr2, clk, "<= 2.5x");
	row("pool alloc+free, no consumer, 1 thr", pdet, clk, "<= 10 ns");
	row("pool alloc+free, attached, 1 thr", patt, clk, "<= 2.5x");
	row("consumer, per record read", rec, clk, "");
	printf("drops while attached and not full: %llu (must be 0); while draining %llu\n",
	       (unsigned long long)drops, (unsigned long long)(mp_consumer_drops(cons) - drops0));
	mp_consumer_free(cons);
	return 0;
}
