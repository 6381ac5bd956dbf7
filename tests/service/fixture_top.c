// SPDX-License-Identifier: MIT
/*
 * A target for `memprof top` whose kernels come in a different order
 * under every sort key, every 10 ms:
 *   top_keeps_blocks  1 call keeping 4096 B (up to 1024 blocks): LIVE
 *   top_many_calls    200 calls of 16 B, freed: CALLS
 *   top_big_peak      1 call of 1 MiB, freed: PEAK and ALLOC
 *   top_long_...      1 call of 32 B, freed, a 200-character name
 * Prints "ready" once its marker ring exists, runs until SIGUSR1.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <memprof.h>

static volatile sig_atomic_t stop;
/* The compiler may not drop a malloc whose pointer escapes here. */
static void *volatile sink;

static void on_usr1(int sig)
{
	(void)sig;
	stop = 1;
}

static void churn(const char *kernel, size_t size)
{
	memprof_kernel_begin(kernel);
	sink = malloc(size);
	free(sink);
	memprof_kernel_end();
}

int main(void)
{
	struct timespec nap = { .tv_nsec = 10 * 1000 * 1000 };
	static void *kept[1024];
	char longname[201];
	size_t n_kept = 0;

	/* top_long_0123456789012...: 200 characters, ending in "_END" */
	strcpy(longname, "top_long_");
	for (size_t i = strlen(longname); i < 196; i++)
		longname[i] = (char)('0' + i % 10);
	strcpy(longname + 196, "_END");
	signal(SIGUSR1, on_usr1);
	puts("ready");
	fflush(stdout);
	while (!stop) {
		memprof_kernel_begin("top_keeps_blocks");
		if (n_kept < 1024)
			kept[n_kept++] = malloc(4096);
		memprof_kernel_end();
		for (int i = 0; i < 200; i++)
			churn("top_many_calls", 16);
		churn("top_big_peak", 1 << 20);
		churn(longname, 32);
		nanosleep(&nap, NULL);
	}
	for (size_t i = 0; i < n_kept; i++)
		free(kept[i]);
	return 0;
}
