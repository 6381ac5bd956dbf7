// SPDX-License-Identifier: MIT
/*
 * The correlator's heap path where the heap keeps reaching new peaks (docs/
 * PROFILE.md "Who held the peak"): events/s through mp_correlator_apply_heap()
 * on one core, inside a phase, with allocations of 8 owners (libraries) and
 * 2 tags. Three workloads, each PASSES passes of EVENTS events:
 *
 *   climb    live bytes climb all the time (a block freed after one
 *            allocation in 4): most allocations a new process and phase
 *            peak
 *   plateau  4096 blocks live, each allocation freeing the oldest first
 *            (new peaks now and then, as a steady service has)
 *   phases   climb, with the phase switched every 64 events (a breakdown
 *            written at every phase left after a new peak of it)
 *
 *   bench-peaks [EVENTS [PASSES]]   (default 2000000, 5)
 *
 * Built as build/bench/bench-peaks (bench/meson.build).
 *
 * Times are the thread's CPU time, the fastest pass of each; the machine
 * may be shared. Reports ns/event and M events/s.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "correlator.h"

#define LIVE 4096u

static const char *owner_of(void *ctx, uint64_t addr)
{
	static const char *libs[8] = { "/usr/lib/libtorch_cpu.so.1", "/usr/lib/libXNNPACK.so.0",
				       "/usr/lib/libc10.so.1",	     "/usr/bin/python3.11",
				       "/usr/lib/libdnnl.so.2",	     "/usr/lib/libstdc++.so.6",
				       "/usr/lib/libgomp.so.1",	     "/usr/lib/libblas.so.3" };

	(void)ctx;
	return libs[(addr >> 4) & 7];
}

static double cpu_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
	return t.tv_sec * 1e9 + t.tv_nsec;
}

static uint64_t rnd(uint64_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return *x;
}

static void record(struct mp_correlator *c, uint32_t type, const char *name, uint64_t ts,
		   uint32_t *seq)
{
	struct mp_record r = { .type = type, .tid = 1, .ts_ns = ts, .name = name, .seq = ++*seq };

	if (mp_correlator_on_record(c, &r) < 0) {
		fprintf(stderr, "bench-peaks: record refused\n");
		exit(1);
	}
}

/* One pass of @events allocations of @kind (0 climb, 1 plateau, 2 phases)
 * and the frees between them; the CPU ns it took, the heap events in
 * *@ret_n. */
static double pass(int kind, uint32_t events, uint64_t *ret_n)
{
	struct mp_correlator_opts o = { .begin_ns = 1, .resolve_owner = owner_of };
	static const char *phases[2] = { "load", "inference" };
	uint64_t *ring = calloc(LIVE, sizeof(*ring)), x = 88172645463325252ull, ts = 1;
	uint64_t next = 0x100000, head = 0, tail = 0;
	struct mp_correlator *c;
	struct mp_profile *p = NULL;
	uint32_t seq = 0;
	double t0, t;

	if (!ring || mp_correlator_new(&o, &c) < 0) {
		fprintf(stderr, "bench-peaks: out of memory\n");
		exit(1);
	}
	if (mp_correlator_add_owner_rule(c, "libtorch*=framework") < 0 ||
	    mp_correlator_add_owner_rule(c, "libc10*=framework") < 0 ||
	    mp_correlator_add_owner_rule(c, "libXNNPACK*=delegate:xnnpack") < 0)
		exit(1);
	record(c, MP_REC_PHASE, phases[1], ts++, &seq);
	t0 = cpu_ns();
	for (uint32_t i = 0; i < events; i++) {
		uint64_t r = rnd(&x);
		struct mp_raw_event ev = { .pid = 1, .tid = 1, .ts_ns = ts++ };
		bool free_one = kind == 1 ? head - tail == LIVE : (r & 3) == 0 && head != tail;

		if (kind == 2 && (i & 63) == 63)
			record(c, MP_REC_PHASE, phases[(i >> 6) & 1], ts++, &seq);
		if (i % 512 == 0)
			record(c, MP_REC_TAG_BEGIN, (i & 1024) ? "activations" : "weights", ts++,
			       &seq);
		else if (i % 512 == 511)
			record(c, MP_REC_TAG_END, NULL, ts++, &seq);
		if (free_one) {
			ev.type = MP_RAW_FREE;
			ev.fn = MP_FN_FREE;
			ev.addr = ring[tail++ % LIVE];
			if (mp_correlator_apply_heap(c, &ev, 0) < 0)
				exit(1);
			ev.ts_ns = ts++;
			(*ret_n)++;
		}
		if (head - tail == LIVE)
			continue;
		ev.type = MP_RAW_ALLOC;
		ev.fn = MP_FN_MALLOC;
		ev.addr = next;
		ev.size = 16 + (r >> 20) % 4096;
		ev.caller = 0x400000 + ((r >> 8) & 0x70);
		next += 0x1000;
		ring[head++ % LIVE] = ev.addr;
		if (mp_correlator_apply_heap(c, &ev, 0) < 0)
			exit(1);
		(*ret_n)++;
	}
	t = cpu_ns() - t0;
	if (mp_correlator_finish(c, ts, &p) < 0)
		exit(1);
	mp_profile_free(p);
	mp_correlator_free(c);
	free(ring);
	return t;
}

int main(int argc, char **argv)
{
	static const char *names[3] = { "climb", "plateau", "phases" };
	uint32_t events = argc > 1 ? (uint32_t)strtoul(argv[1], NULL, 10) : 2000000;
	int passes = argc > 2 ? atoi(argv[2]) : 5;

	printf("bench-peaks: %u events a pass, fastest of %d passes (thread CPU time)\n", events,
	       passes);
	printf("%-10s %12s %12s\n", "workload", "ns/event", "M events/s");
	for (int k = 0; k < 3; k++) {
		double best = 0;
		uint64_t n = 0;

		for (int i = 0; i < passes; i++) {
			double t;

			n = 0;
			t = pass(k, events, &n);
			if (!i || t < best)
				best = t;
		}
		printf("%-10s %12.2f %12.1f\n", names[k], best / n, n / best * 1e3);
	}
	return 0;
}
