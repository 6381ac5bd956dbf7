// SPDX-License-Identifier: MIT
/*
 * A target without libmemprof (so the service traces it on the eBPF path):
 * allocates 500 bytes, prints "ready", waits for SIGUSR1, then allocates
 * 700 bytes, frees the 500-byte block (allocated before attach: an unknown
 * free) and the 700-byte one, and exits.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

int main(void)
{
	sigset_t set;
	void *old, *fresh;
	int sig;

	sigemptyset(&set);
	sigaddset(&set, SIGUSR1);
	sigprocmask(SIG_BLOCK, &set, NULL);

	old = malloc(500);
	puts("ready");
	fflush(stdout);
	sigwait(&set, &sig);
	fresh = malloc(700);
	free(old);
	free(fresh);
	return 0;
}
