/* SPDX-License-Identifier: MIT */
/*
 * What fixture-lease publishes in the file the test gives it (mapped
 * shared by both). The fixture alternates the same malloc+free loop
 * through the interposer (malloc, free) and past it (glibc's own
 * __libc_malloc, __libc_free), and counts the pairs and the CPU time of
 * each: the test measures the interposed loop's rate as a share of the
 * other's, in the same thread over the same time, which the load of a
 * shared machine changes alike (measured here: the bare loop's rate per
 * CPU second moved between 69 and 137 M pairs from one quarter second to
 * the next).
 */
#ifndef TESTS_SERVICE_LEASE_STATS_H
#define TESTS_SERVICE_LEASE_STATS_H

#include <stdint.h>

/* malloc(LEASE_BLOCK) + free pairs per kernel "batch", and batches of
 * each loop in one step. */
#define LEASE_BLOCK 64
#define LEASE_PAIRS 256
#define LEASE_BATCHES 16

enum { LEASE_MP = 0, LEASE_LIBC = 1 };

struct lease_stats {
	uint64_t seq; /* odd while the fixture updates what follows */
	uint64_t pairs[2]; /* malloc+free pairs done, by loop */
	uint64_t cpu_ns[2]; /* the thread's CPU time in each loop */
	/* the longest wall time of a step (LEASE_BATCHES batches of each
	 * loop) since the test last set it to 0 */
	uint64_t max_step_ns;
	uint64_t stop; /* set by the test: exit 0 */
	/* set by the test: the interposed loop marks no kernels (its
	 * markers would fill the ring as soon as nobody reads it) */
	uint64_t quiet;
};

#endif /* TESTS_SERVICE_LEASE_STATS_H */
