// SPDX-License-Identifier: MIT
/*
 * A target that allocates without pause, in steps: LEASE_BATCHES kernels
 * "batch" (none while the test sets quiet) of LEASE_PAIRS
 * malloc(LEASE_BLOCK) + free pairs through the interposer, then as many pairs through glibc's own entry points, which
 * the interposer never sees (lease_stats.h). Publishes its counts, CPU
 * times and longest step in the file named by argv[1]. Prints "ready"
 * once running; exits when the test sets stop.
 */
#include <fcntl.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <memprof.h>

#include "lease_stats.h"

/* glibc's malloc and free under their own names: past any interposer */
extern void *__libc_malloc(size_t n);
extern void __libc_free(void *p);

static uint64_t ns_of(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int main(int argc, char **argv)
{
	uint64_t pairs[2] = { 0, 0 }, cpu[2] = { 0, 0 }, last, c0, c1, c2;
	struct lease_stats *st;
	void *volatile p;
	int fd;

	if (argc < 2)
		return 2;
	fd = open(argv[1], O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return 3;
	st = mmap(NULL, sizeof(*st), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (st == MAP_FAILED)
		return 4;
	close(fd);
	puts("ready");
	fflush(stdout);
	last = ns_of(CLOCK_MONOTONIC);
	while (!__atomic_load_n(&st->stop, __ATOMIC_RELAXED)) {
		uint64_t now, step;

		bool quiet = __atomic_load_n(&st->quiet, __ATOMIC_RELAXED);

		c0 = ns_of(CLOCK_THREAD_CPUTIME_ID);
		for (int b = 0; b < LEASE_BATCHES; b++) {
			if (!quiet)
				memprof_kernel_begin("batch");
			for (int i = 0; i < LEASE_PAIRS; i++) {
				p = malloc(LEASE_BLOCK);
				free(p);
			}
			if (!quiet)
				memprof_kernel_end();
		}
		c1 = ns_of(CLOCK_THREAD_CPUTIME_ID);
		for (int b = 0; b < LEASE_BATCHES; b++)
			for (int i = 0; i < LEASE_PAIRS; i++) {
				p = __libc_malloc(LEASE_BLOCK);
				__libc_free(p);
			}
		c2 = ns_of(CLOCK_THREAD_CPUTIME_ID);
		pairs[LEASE_MP] += LEASE_BATCHES * LEASE_PAIRS;
		pairs[LEASE_LIBC] += LEASE_BATCHES * LEASE_PAIRS;
		cpu[LEASE_MP] += c1 - c0;
		cpu[LEASE_LIBC] += c2 - c1;
		now = ns_of(CLOCK_MONOTONIC);
		step = now - last;
		last = now;
		/* a seqlock: the test reads the four counts of one step */
		__atomic_store_n(&st->seq, st->seq + 1, __ATOMIC_RELAXED);
		__atomic_thread_fence(__ATOMIC_RELEASE);
		for (int i = 0; i < 2; i++) {
			__atomic_store_n(&st->pairs[i], pairs[i], __ATOMIC_RELAXED);
			__atomic_store_n(&st->cpu_ns[i], cpu[i], __ATOMIC_RELAXED);
		}
		if (step > __atomic_load_n(&st->max_step_ns, __ATOMIC_RELAXED))
			__atomic_store_n(&st->max_step_ns, step, __ATOMIC_RELAXED);
		__atomic_store_n(&st->seq, st->seq + 1, __ATOMIC_RELEASE);
	}
	return 0;
}
