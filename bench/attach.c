// SPDX-License-Identifier: MIT
/*
 * Attach latency: from mp_tracer_new() (the attach request) to the first
 * allocation event delivered, on a child that allocates continuously; and
 * the detach time (mp_tracer_free()). Median of RUNS runs. Needs root.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tracer.h"

#define RUNS 7

static void *volatile sink;

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static int on_raw(void *ctx, const struct mp_raw_event *ev)
{
	uint64_t *first = ctx;

	if (ev->type == MP_RAW_ALLOC && !*first)
		*first = now_ns();
	return 0;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* bench-attach [perf]: "perf" uses one perf-event uprobe per function
 * (the pre-6.6 way) for comparison. */
int main(int argc, char **argv)
{
	double att[RUNS], first[RUNS], det[RUNS];
	int perf = 0;

	for (int run = 0; run < RUNS; run++) {
		pid_t pid = fork();
		struct mp_tracer_opts o = { 0 };
		struct mp_tracer *t;
		uint64_t t0, t1, f = 0, t2, t3;

		if (pid == 0) {
			for (;;) {
				sink = malloc(64);
				free(sink);
			}
		}
		usleep(50000);
		o.pid = pid;
		o.perf_uprobes = argc > 1 && !strcmp(argv[1], "perf");
		t0 = now_ns();
		if (mp_tracer_new(&o, &t) < 0) {
			fprintf(stderr, "bench-attach: attach failed\n");
			kill(pid, SIGKILL);
			return 1;
		}
		t1 = now_ns();
		while (!f && now_ns() - t0 < 5000000000ULL) {
			struct epoll_event ee;

			epoll_wait(mp_tracer_fd(t), &ee, 1, 1);
			mp_tracer_consume(t, on_raw, &f);
		}
		perf = !mp_tracer_multi_uprobes(t);
		t2 = now_ns();
		mp_tracer_free(t);
		t3 = now_ns();
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		att[run] = (double)(t1 - t0) / 1e6;
		first[run] = f ? (double)(f - t0) / 1e6 : -1;
		det[run] = (double)(t3 - t2) / 1e6;
	}
	qsort(att, RUNS, sizeof(double), cmp);
	qsort(first, RUNS, sizeof(double), cmp);
	qsort(det, RUNS, sizeof(double), cmp);
	printf("uprobes: %s; median of %d runs\n", perf ? "perf events" : "multi-uprobe links",
	       RUNS);
	printf("attach request -> attached:       %8.1f ms\n", att[RUNS / 2]);
	printf("attach request -> first event:    %8.1f ms   (target < 200 ms)\n", first[RUNS / 2]);
	printf("detach (all probes and programs): %8.1f ms\n", det[RUNS / 2]);
	return 0;
}
