// SPDX-License-Identifier: MIT
/*
 * Overruns its marker ring: one thread runs an empty kernel "tiny" in a
 * tight loop until the library has dropped 200000 records (or 20 s have
 * passed), allocating and freeing 64 bytes in every 4096th call. Then it
 * makes sure one gap begins inside an open "tiny" (whether the loop's gaps
 * began between kernels or inside one depends on how the daemon was
 * scheduled): it begins "tiny" once the library accepts the BEGIN and writes
 * input shapes until one is dropped. Prints "calls=N dropped=M" (kernels
 * begun, records the library dropped).
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

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
	/* Up to 20 s for the daemon to make room for a BEGIN; then drop
	 * inside the open kernel, and once there is room again write one more
	 * kernel, whose sequence number shows the daemon the gap. */
	int stage = 0;

	for (int tries = 0; tries < 2000 && stage < 2; tries++) {
		static const int64_t dims[1] = { 1 };
		uint64_t before = memprof_dropped();

		memprof_kernel_begin("tiny");
		calls++;
		if (stage == 0 && memprof_dropped() == before) {
			for (long n = 0; n < (1L << 28) && memprof_dropped() == before; n++)
				memprof_kernel_input_shape(dims, 1);
			stage = 1;
		} else if (stage == 1 && memprof_dropped() == before) {
			stage = 2;
		}
		memprof_kernel_end();
		usleep(10000);
	}
	printf("calls=%lu dropped=%llu\n", calls, (unsigned long long)memprof_dropped());
	return 0;
}
