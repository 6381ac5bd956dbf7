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
 *   bench-producer [ROUNDS [precise|sampled]]
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "memprof.h"
#include "memprof_consumer.h"
#include "ring_abi.h"
#include "ring_clock.h"

#define PAIRS 8000 /* 16000 records: half the default ring */

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
	while (mp_consumer_read_rings(c, 1u << 16, drop, NULL) > 0)
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
	       mp_tsc_trusted()			? "the TSC" :
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
	printf("drops: %llu\n", (unsigned long long)mp_consumer_alloc_drops(c));
	mp_consumer_free(c);
	return 0;
}
