// SPDX-License-Identifier: MIT
/*
 * A target whose profile grows fast: kernel "step" after kernel "step",
 * each allocating and freeing a block, a short nap every 256 of them, so
 * that a session of a second records thousands of invocations. Prints
 * "ready" once its marker ring exists, runs until SIGUSR1.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <memprof.h>

static volatile sig_atomic_t stop;

static void on_usr1(int sig)
{
	(void)sig;
	stop = 1;
}

int main(void)
{
	struct timespec nap = { .tv_nsec = 1000 * 1000 };
	unsigned long n = 0;

	signal(SIGUSR1, on_usr1);
	memprof_phase("run");
	puts("ready");
	fflush(stdout);
	while (!stop) {
		memprof_kernel_begin("step");
		free(malloc(64 + (n & 1023)));
		memprof_kernel_end();
		if (!(++n & 255))
			nanosleep(&nap, NULL);
	}
	return 0;
}
