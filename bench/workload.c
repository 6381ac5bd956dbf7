// SPDX-License-Identifier: MIT
/*
 * Workloads for bench/run, timed by the script from outside:
 *   bench-workload alloc PAIRS THREADS   malloc(32)+free pairs per thread
 *   bench-workload compute ITERS         arithmetic, a handful of allocations
 *   bench-workload toy STEPS PAIRS       toyinfer-like: PAIRS malloc+free pairs
 *                                        in STEPS steps, mixed sizes, up to 8
 *                                        blocks live at a time
 * With BENCH_WAIT=1 in the environment it blocks SIGUSR1, prints "ready PID"
 * on stdout, and waits for SIGUSR1 before the timed part (a profiler can
 * attach to it by pid first; bench/run's injection rows).
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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

/* One step of a toy model: layers of a few live blocks of mixed sizes,
 * freed in reverse order, @pairs allocations in all. */
static void toy_step(long pairs)
{
	static const size_t sizes[] = { 32, 256, 48, 4096, 96, 1024, 16, 512, 64, 2048, 128, 24 };
	void *live[8];
	unsigned k = 0;

	while (pairs > 0) {
		int m = pairs < 8 ? (int)pairs : 8;

		for (int i = 0; i < m; i++) {
			live[i] = malloc(sizes[k++ % (sizeof(sizes) / sizeof(sizes[0]))]);
			sink = live[i];
		}
		for (int i = m - 1; i >= 0; i--)
			free(live[i]);
		pairs -= m;
	}
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
	const char *w = getenv("BENCH_WAIT");
	double t0;
	int r;

	if (w && w[0] == '1') {
		sigset_t set;
		int sig;

		sigemptyset(&set);
		sigaddset(&set, SIGUSR1);
		sigprocmask(SIG_BLOCK, &set, NULL);
		printf("ready %d\n", (int)getpid());
		fflush(stdout);
		sigwait(&set, &sig);
	}
	t0 = now_s();
	r = run(argc, argv);

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
	if (argc >= 4 && !strcmp(argv[1], "toy")) {
		long steps = atol(argv[2]), pairs = atol(argv[3]);

		if (steps < 1 || pairs < steps)
			return 2;
		for (long s = 0; s < steps; s++)
			toy_step(pairs / steps + (s < pairs % steps));
		return 0;
	}
	fprintf(stderr,
		"usage: bench-workload alloc PAIRS THREADS | compute ITERS | toy STEPS PAIRS\n");
	return 2;
}
