// SPDX-License-Identifier: MIT
/*
 * Workloads for bench/run, timed by the script from outside:
 *   bench-workload alloc PAIRS THREADS   malloc(32)+free pairs per thread
 *   bench-workload compute ITERS         arithmetic, a handful of allocations
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static long n;
static int run(int argc, char **argv);
static void *volatile sink;

static void *alloc_loop(void *arg)
{
	(void)arg;
	for (long i = 0; i < n; i++) {
		void *p = malloc(32);

		sink = p;
		free(p);
	}
	return NULL;
}

static double compute(long iters)
{
	double *v = malloc(4096 * sizeof(*v)), acc = 0;

	for (int i = 0; i < 4096; i++)
		v[i] = i * 0.5;
	for (long k = 0; k < iters; k++)
		for (int i = 0; i < 4096; i++)
			acc += v[i] * v[(i * 7 + k) & 4095];
	free(v);
	return acc;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The run's own time goes to stderr, so tool startup and teardown are not
 * part of it. */
int main(int argc, char **argv)
{
	double t0 = now_s();
	int r = run(argc, argv);

	fprintf(stderr, "bench-workload: %.6f s\n", now_s() - t0);
	return r;
}

static int run(int argc, char **argv)
{
	if (argc >= 4 && !strcmp(argv[1], "alloc")) {
		int threads = atoi(argv[3]);
		pthread_t th[64];

		n = atol(argv[2]);
		if (threads < 1 || threads > 64)
			return 2;
		for (int i = 0; i < threads; i++)
			pthread_create(&th[i], NULL, alloc_loop, NULL);
		for (int i = 0; i < threads; i++)
			pthread_join(th[i], NULL);
		return 0;
	}
	if (argc >= 3 && !strcmp(argv[1], "compute")) {
		printf("%g\n", compute(atol(argv[2])));
		return 0;
	}
	fprintf(stderr, "usage: bench-workload alloc PAIRS THREADS | compute ITERS\n");
	return 2;
}
