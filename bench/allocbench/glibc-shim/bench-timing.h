// SPDX-License-Identifier: MIT
/*
 * The timing names of glibc's benchtests (bench-malloc-simple.c,
 * bench-malloc-thread.c) for a build outside glibc's tree: glibc's own
 * bench-timing.h reads its internal hp-timing.h; this one reads
 * CLOCK_MONOTONIC. Times are in nanoseconds.
 */
#ifndef ALLOCBENCH_BENCH_TIMING_H
#define ALLOCBENCH_BENCH_TIMING_H

#include <stdint.h>
#include <stdio.h>
#include <time.h>

typedef uint64_t timing_t;

#define TIMING_TYPE "clock_gettime"

static inline timing_t allocbench_timing_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

#define TIMING_NOW(var) ((var) = allocbench_timing_now())
#define TIMING_DIFF(diff, start, end) ((diff) = (end) - (start))
#define TIMING_ACCUM(sum, diff) ((sum) += (diff))
#define TIMING_PRINT_MEAN(d_total_s, d_iters) printf("\t%g", (d_total_s) / (d_iters))

#endif
