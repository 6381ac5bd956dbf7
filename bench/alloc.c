// SPDX-License-Identifier: MIT
/*
 * Cost of tracing an allocation-heavy loop: malloc(32)+free pairs in 1 and
 * 2 threads of a worker process, untraced, traced with placed probes and
 * traced with every probe at the function entry (naive). Prints ns per pair
 * and the ratio to the untraced run of the same invocation; each figure is
 * the fastest of REPEAT runs. Needs root.
 *
 *   bench/alloc-bench [PAIRS_PER_THREAD]
 */
#include <errno.h>
#include <signal.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "live.h"
#include "tracer.h"

static __thread void *volatile sink; /* per thread: the pairs must not race */
static long pairs = 50000;

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static void *loop(void *arg)
{
	for (long i = 0; i < pairs; i++) {
		sink = malloc(32);
		free(sink);
	}
	return NULL;
}

/* Worker: for each command byte '1' or '2', run the loop in that many
 * threads and answer with the elapsed ns. */
static int worker(int in, int out)
{
	char c;

	while (read(in, &c, 1) == 1) {
		int n = c - '0';
		pthread_t th[2];
		uint64_t t0 = now_ns(), dt;

		for (int i = 0; i < n; i++)
			pthread_create(&th[i], NULL, loop, NULL);
		for (int i = 0; i < n; i++)
			pthread_join(th[i], NULL);
		dt = now_ns() - t0;
		if (write(out, &dt, sizeof(dt)) != sizeof(dt))
			return 1;
	}
	return 0;
}

struct consumer {
	struct mp_tracer *t;
	struct mp_live *live;
	atomic_bool stop;
	uint64_t events;
};

static int on_raw(void *ctx, const struct mp_raw_event *ev)
{
	struct consumer *c = ctx;

	c->events++;
	return mp_live_apply(c->live, ev, NULL, NULL);
}

static void *consume(void *arg)
{
	struct consumer *c = arg;

	while (!atomic_load(&c->stop)) {
		struct epoll_event ee;

		epoll_wait(mp_tracer_fd(c->t), &ee, 1, MP_TRACER_POLL_MS);
		if (mp_tracer_consume(c->t, on_raw, c) < 0)
			break;
	}
	mp_tracer_consume(c->t, on_raw, c);
	return NULL;
}

static uint64_t run_once(int to, int from, int threads)
{
	char c = (char)('0' + threads);
	uint64_t dt;

	if (write(to, &c, 1) != 1 || read(from, &dt, sizeof(dt)) != sizeof(dt)) {
		fprintf(stderr, "alloc-bench: worker died\n");
		exit(1);
	}
	return dt;
}

/* The machine is shared: the fastest of a few runs is the least disturbed
 * one. */
#define REPEAT 5

static uint64_t run(int to, int from, int threads)
{
	uint64_t best = UINT64_MAX;

	for (int i = 0; i < REPEAT; i++) {
		uint64_t dt = run_once(to, from, threads);

		if (dt < best)
			best = dt;
	}
	return best;
}

int main(int argc, char **argv)
{
	int cmd[2], res[2];
	pid_t pid;
	uint64_t base[3], traced[2][3];

	if (argc > 1)
		pairs = atol(argv[1]);
	if (pipe(cmd) || pipe(res))
		return 1;
	pid = fork();
	if (pid == 0) {
		close(cmd[1]);
		close(res[0]);
		return worker(cmd[0], res[1]);
	}
	close(cmd[0]);
	close(res[1]);
	run(cmd[1], res[0], 1); /* warm up: arenas, thread stacks */
	run(cmd[1], res[0], 2);
	for (int th = 1; th <= 2; th++)
		base[th] = run(cmd[1], res[0], th);
	for (int naive = 0; naive < 2; naive++) {
		struct mp_tracer_opts o = { .pid = pid, .naive_placement = naive };
		struct consumer c = { 0 };
		pthread_t ct;
		int r = mp_tracer_new(&o, &c.t);

		if (r < 0) {
			fprintf(stderr, "alloc-bench: attach: %s\n", strerror(-r));
			kill(pid, SIGKILL);
			return 1;
		}
		mp_live_new(&c.live);
		pthread_create(&ct, NULL, consume, &c);
		for (int th = 1; th <= 2; th++)
			traced[naive][th] = run(cmd[1], res[0], th);
		atomic_store(&c.stop, true);
		pthread_join(ct, NULL);
		printf("%s: %llu events, %llu drops\n", naive ? "naive" : "placed",
		       (unsigned long long)c.events, (unsigned long long)mp_tracer_drops(c.t));
		mp_tracer_free(c.t);
		mp_live_free(c.live);
	}
	close(cmd[1]);
	waitpid(pid, NULL, 0);
	printf("%-8s %8s %14s %14s %14s %8s %8s\n", "threads", "pairs", "untraced ns", "placed ns",
	       "naive ns", "placed", "naive");
	for (int th = 1; th <= 2; th++) {
		double n = (double)pairs * th;

		/* ns per pair: wall time over all pairs of all threads */
		printf("%-8d %8ld %14.1f %14.1f %14.1f %7.1fx %7.1fx\n", th, pairs,
		       (double)base[th] / n, (double)traced[0][th] / n, (double)traced[1][th] / n,
		       (double)traced[0][th] / (double)base[th],
		       (double)traced[1][th] / (double)base[th]);
	}
	return 0;
}
