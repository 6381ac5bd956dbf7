// SPDX-License-Identifier: MIT
/*
 * Overruns its marker ring: one thread runs an empty kernel "tiny" in a
 * tight loop until the library has dropped 200000 records (or 20 s have
 * passed), allocating and freeing 64 bytes in every 4096th call. Prints
 * "calls=N" (kernels begun).
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <memprof.h>

int main(void)
{
	struct timespec t0, t;
	unsigned long calls = 0;

	/* creates the ring; the daemon attaches to it */
	memprof_phase("run");
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		memprof_kernel_begin("tiny");
		if (!(calls & 4095))
			free(malloc(64));
		memprof_kernel_end();
		calls++;
		if (!(calls & 65535)) {
			if (memprof_dropped() >= 200000)
				break;
			clock_gettime(CLOCK_MONOTONIC, &t);
			if (t.tv_sec - t0.tv_sec > 20)
				break;
		}
	}
	printf("calls=%lu dropped=%llu\n", calls, (unsigned long long)memprof_dropped());
	return 0;
}
