// SPDX-License-Identifier: MIT
/* bench/wrappers: PAIRS bench_alloc(32)+free pairs; prints the loop's time
 * ("bench-wrap-loop: S s") so that start-up and attach are not counted. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

void *bench_alloc(size_t n);

static void *volatile sink;

int main(int argc, char **argv)
{
	long pairs = argc > 1 ? atol(argv[1]) : 200000;
	struct timespec a, b;

	clock_gettime(CLOCK_MONOTONIC, &a);
	for (long i = 0; i < pairs; i++) {
		sink = bench_alloc(32);
		free(sink);
	}
	clock_gettime(CLOCK_MONOTONIC, &b);
	fprintf(stderr, "bench-wrap-loop: %.6f s\n",
		(double)(b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9);
	return 0;
}
