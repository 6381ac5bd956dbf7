// SPDX-License-Identifier: MIT
/*
 * bench/soak's target: forever (until SIGTERM) a kernel "step" after
 * another, each allocating a few blocks of varied sizes and freeing most
 * of the previous step's, so that the heap holds a steady few MiB.
 */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <memprof.h>

#define KEEP 256

static volatile sig_atomic_t stop;

static void on_term(int sig)
{
	(void)sig;
	stop = 1;
}

int main(void)
{
	static void *keep[KEEP];
	struct timespec nap = { .tv_nsec = 20 * 1000 * 1000 };
	unsigned seed = 1;
	size_t i = 0;

	signal(SIGTERM, on_term);
	while (!stop) {
		memprof_kernel_begin("step");
		for (int k = 0; k < 16; k++, i++) {
			size_t size = 16u << (rand_r(&seed) % 12);

			free(keep[i % KEEP]);
			keep[i % KEEP] = malloc(size);
			if (keep[i % KEEP])
				memset(keep[i % KEEP], 1, size < 64 ? size : 64);
		}
		memprof_kernel_end();
		nanosleep(&nap, NULL);
	}
	for (i = 0; i < KEEP; i++)
		free(keep[i]);
	return 0;
}
