// SPDX-License-Identifier: MIT
/* A target whose live heap grows until its profiler gives up: prints
 * "ready", and from SIGUSR2 on keeps 16-byte blocks live, 10,000 every
 * 10 ms, up to 4 million (64 MiB); frees them and exits 0 on SIGUSR1. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define MAX_BLOCKS (4u << 20)
#define STEP 10000

int main(void)
{
	static void *blocks[MAX_BLOCKS];
	struct timespec tick = { .tv_nsec = 10 * 1000 * 1000 };
	sigset_t set;
	unsigned n = 0;
	int sig;

	sigemptyset(&set);
	sigaddset(&set, SIGUSR1);
	sigaddset(&set, SIGUSR2);
	sigprocmask(SIG_BLOCK, &set, NULL);
	puts("ready");
	fflush(stdout);
	sigwait(&set, &sig);
	if (sig == SIGUSR2) {
		sigdelset(&set, SIGUSR2);
		for (;;) {
			for (unsigned i = 0; i < STEP && n < MAX_BLOCKS; i++)
				if (!(blocks[n++] = malloc(16)))
					return 1;
			/* SIGUSR1 pending: stop */
			if (sigtimedwait(&set, NULL, &tick) == SIGUSR1)
				break;
		}
	}
	for (unsigned i = 0; i < n; i++)
		free(blocks[i]);
	return 0;
}
