// SPDX-License-Identifier: MIT
/*
 * The producer side of the in-process path, in this process (linked with
 * libmemprof, whose interposer is then this process's malloc): thread CPU
 * time of malloc(32)+free pairs dormant, precise and sampled (4096 bytes),
 * as ratios to the dormant pair of the same run and to the untraced pair
 * (libc's own malloc and free, called through pointers as a PLT call
 * would: what bench/run's untraced baseline runs). Each round writes at most
 * half a ring and is drained, untimed, before the next: the producer never
 * waits for the consumer, so this is the interposer's and the record
 * writer's own cost (the alloc loop of bench/run also waits for the
 * daemon). The clock of heap records is the library's choice
 * (MEMPROF_CLOCK=monotonic forces clock_gettime; docs/RING.md "Clocks").
 *
 * The last rows are bench/run's alloc loop as the target runs it: 200k
 * pairs in a new thread, whose ring slot has never been written (its first
 * lap: the pages the records land in are mapped as they are written), each
 * thread kept alive to the end so that the next one takes a fresh slot
 * too; the median and fastest of FRESH_THREADS threads per row, thread CPU
 * time, against libc's pair in a new thread.
 *
 *   bench-producer [ROUNDS [precise|sampled|fresh]]
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "memprof.h"
#include "consumer.h"
#include "ring_abi.h"
#include "ring_clock.h"
#include "util.h"

#define PAIRS 8000 /* 16000 records: half the default ring */
#define FRESH_PAIRS 200000 /* bench/run's alloc loop */
#define FRESH_THREADS 9

static void *volatile sink;

static uint64_t cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int drop(void *ctx, uint32_t ring, const struct mp_record *rec)
{
	(void)ctx;
	(void)ring;
	(void)rec;
	return 0;
}

static void drain(struct mp_consumer *c)
{
	while (mp_consumer_read_rings_at(c, 1u << 16, mp_now_ns(), drop, NULL) > 0)
		;
}

static void *(*libc_malloc)(size_t);
static void (*libc_free)(void *);

/* Fastest round of libc's pair, ns per pair (the interposer not called). */
static double untraced_ns(int rounds)
{
	double best = 1e30;

	for (int r = 0; r < rounds; r++) {
		uint64_t t0 = cpu_ns(), t;

		for (int i = 0; i < PAIRS; i++) {
			sink = libc_malloc(32);
			libc_free(sink);
		}
		t = cpu_ns() - t0;
		if (t / (double)PAIRS < best)
			best = t / (double)PAIRS;
	}
	return best;
}

/* Fastest round, ns per pair. */
static double pairs_ns(struct mp_consumer *c, uint32_t mode, int rounds)
{
	double best = 1e30;

	if (mp_consumer_set_alloc_mode(c, mode, mode == MP_ALLOC_SAMPLED ? 4096 : 0) < 0)
		exit(1);
	for (int r = 0; r < rounds; r++) {
		uint64_t t0 = cpu_ns(), t;

		for (int i = 0; i < PAIRS; i++) {
			sink = malloc(32);
			free(sink);
		}
		t = cpu_ns() - t0;
		drain(c);
		if (t / (double)PAIRS < best)
			best = t / (double)PAIRS;
	}
	return best;
}

/* One fresh thread's run: FRESH_PAIRS pairs, then it waits for the end of
 * the bench so that its ring slot stays taken. */
struct fresh {
	int untraced;
	int hold; /* read end of a pipe closed at the end */
	double ns; /* thread CPU time per pair */
	int done;
};

static void *fresh_run(void *arg)
{
	struct fresh *f = arg;
	uint64_t t0 = cpu_ns();
	char b;

	for (int i = 0; i < FRESH_PAIRS; i++) {
		if (f->untraced) {
			sink = libc_malloc(32);
			libc_free(sink);
		} else {
			sink = malloc(32);
			free(sink);
		}
	}
	f->ns = (cpu_ns() - t0) / (double)FRESH_PAIRS;
	__atomic_store_n(&f->done, 1, __ATOMIC_RELEASE);
	while (read(f->hold, &b, 1) < 0)
		;
	return NULL;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* Median and fastest ns per pair of FRESH_THREADS fresh threads, each on a
 * new ring slot (mode: MP_ALLOC_*; -1: libc's pair). Threads alternate
 * with the untraced ones in the caller. */
static int drain_along;

static void fresh_ns(struct mp_consumer *c, int mode, struct fresh *f, pthread_t *th, int hold)
{
	if (mode >= 0 &&
	    mp_consumer_set_alloc_mode(c, (uint32_t)mode, mode == MP_ALLOC_SAMPLED ? 4096 : 0) < 0)
		exit(1);
	f->untraced = mode < 0;
	f->hold = hold;
	if (pthread_create(th, NULL, fresh_run, f) != 0)
		exit(1);
	/* its pairs are done when its CPU time is set; its records fit in
	 * the ring, drained after it (BENCH_FRESH_DRAIN=1: as it writes, a
	 * consumer always caught up, whose reads of the slot the producer
	 * writes next cost the producer a cache miss per record) */
	while (!__atomic_load_n(&f->done, __ATOMIC_ACQUIRE))
		if (drain_along)
			drain(c);
	drain(c);
}

static void fresh_rows(struct mp_consumer *c, double untraced)
{
	static struct fresh f[2][FRESH_THREADS];
	pthread_t th[2][FRESH_THREADS];
	double v[2][FRESH_THREADS];
	int hold[2];

	drain_along = getenv("BENCH_FRESH_DRAIN") && atoi(getenv("BENCH_FRESH_DRAIN"));
	if (pipe(hold) < 0)
		exit(1);
	for (int i = 0; i < FRESH_THREADS; i++) {
		fresh_ns(c, -1, &f[0][i], &th[0][i], hold[0]);
		fresh_ns(c, MP_ALLOC_SAMPLED, &f[1][i], &th[1][i], hold[0]);
	}
	close(hold[1]);
	for (int k = 0; k < 2; k++)
		for (int i = 0; i < FRESH_THREADS; i++) {
			pthread_join(th[k][i], NULL);
			v[k][i] = f[k][i].ns;
		}
	close(hold[0]);
	for (int k = 0; k < 2; k++)
		qsort(v[k], FRESH_THREADS, sizeof(double), cmp_double);
	printf("%d pairs in a fresh thread (a new ring slot), median / fastest of %d threads, "
	       "drained %s:\n",
	       FRESH_PAIRS, FRESH_THREADS, drain_along ? "as it writes" : "after it");
	printf("%-40s %8.2f %8.2f   %.2fx / %.2fx the fresh untraced\n",
	       "untraced (libc's), fresh thread", v[0][FRESH_THREADS / 2], v[0][0],
	       v[0][FRESH_THREADS / 2] / untraced, v[0][0] / untraced);
	printf("%-40s %8.2f %8.2f   %.2fx / %.2fx   target <= 1.5x untraced (alloc loop)\n",
	       "sampled 4096, fresh thread", v[1][FRESH_THREADS / 2], v[1][0],
	       v[1][FRESH_THREADS / 2] / v[0][FRESH_THREADS / 2], v[1][0] / v[0][0]);
}

static double clock_ns(int rdtsc)
{
	uint64_t t0 = cpu_ns();
	volatile uint64_t s = 0;

	for (int i = 0; i < 1000000; i++) {
		if (rdtsc) {
			s += mp_rdtsc();
		} else {
			struct timespec ts;

			clock_gettime(CLOCK_MONOTONIC, &ts);
			s += (uint64_t)ts.tv_nsec;
		}
	}
	return (cpu_ns() - t0) / 1e6;
}

int main(int argc, char **argv)
{
	int rounds = argc > 1 ? atoi(argv[1]) : 200;
	/* one mode only (and dormant), for perf record */
	const char *only = argc > 2 ? argv[2] : NULL;
	const char *env = getenv("MEMPROF_CLOCK");
	double u, d, p, s, v;
	struct mp_consumer *c;
	void *libc = dlopen("libc.so.6", RTLD_LAZY | RTLD_NOLOAD);

	if (rounds < 1)
		rounds = 1;
	/* the first marker creates the ring */
	memprof_kernel_begin("bench");
	memprof_kernel_end();
	if (mp_consumer_open_pid(getpid(), &c) < 0) {
		fprintf(stderr, "bench-producer: cannot open this process's ring\n");
		return 1;
	}
	drain(c);
	libc_malloc = libc ? (void *(*)(size_t))dlsym(libc, "malloc") : NULL;
	libc_free = libc ? (void (*)(void *))dlsym(libc, "free") : NULL;
	if (!libc_malloc || !libc_free || (void *)libc_malloc == (void *)malloc) {
		fprintf(stderr, "bench-producer: cannot find libc's own malloc\n");
		return 1;
	}
	if (only && !strcmp(only, "fresh")) {
		fresh_rows(c, 1.0);
		mp_consumer_free(c);
		return 0;
	}
	/* interleaved: a load spike hits every row alike */
	u = d = p = s = 1e30;
	for (int k = 0; k < 5; k++) {
		v = untraced_ns(rounds / 5 + 1);
		u = v < u ? v : u;
		v = pairs_ns(c, MP_ALLOC_OFF, rounds / 5 + 1);
		d = v < d ? v : d;
		if (!only || !strcmp(only, "precise")) {
			v = pairs_ns(c, MP_ALLOC_PRECISE, rounds / 5 + 1);
			p = v < p ? v : p;
		}
		if (!only || !strcmp(only, "sampled")) {
			v = pairs_ns(c, MP_ALLOC_SAMPLED, rounds / 5 + 1);
			s = v < s ? v : s;
		}
	}
	printf("bench-producer: %d pairs per round, fastest of %d rounds, thread CPU time; "
	       "heap records stamped with %s\n",
	       PAIRS, rounds,
	       env && !strcmp(env, "monotonic") ? "clock_gettime (MEMPROF_CLOCK=monotonic)" :
	       mp_tsc_stamp_ok()		? "the TSC" :
						  "clock_gettime (TSC not trusted)");
	printf("%-40s %8s %10s %10s\n", "", "ns", "x dormant", "x untraced");
	v = clock_ns(0);
	printf("%-40s %8.2f %9.2fx\n", "clock_gettime(CLOCK_MONOTONIC)", v, v / d);
	v = clock_ns(1);
	printf("%-40s %8.2f %9.2fx\n", "rdtsc", v, v / d);
	printf("%-40s %8.2f %9.2fx %9.2fx\n", "malloc(32)+free, untraced (libc's)", u, u / d, 1.0);
	printf("%-40s %8.2f %9.2fx %9.2fx   dormant: %+.2f ns (target <= 2 ns)\n",
	       "malloc(32)+free, dormant", d, 1.0, d / u, d - u);
	printf("%-40s %8.2f %9.2fx %9.2fx   target <= 5x untraced (alloc loop)\n",
	       "malloc(32)+free, precise", p, p / d, p / u);
	printf("%-40s %8.2f %9.2fx %9.2fx   target <= 1.5x untraced (alloc loop)\n",
	       "malloc(32)+free, sampled 4096", s, s / d, s / u);
	fresh_rows(c, u);
	printf("drops: %llu\n", (unsigned long long)mp_consumer_alloc_drops(c));
	mp_consumer_free(c);
	return 0;
}
