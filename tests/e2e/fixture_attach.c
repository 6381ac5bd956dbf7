// SPDX-License-Identifier: MIT
/*
 * For attaching to a process that is already inside a kernel: opens kernel
 * "outer", allocates 500 bytes, prints "ready", waits for SIGUSR1, then
 * allocates 700 bytes, frees the 500-byte block (allocated before attach:
 * an unknown free), closes the kernel and exits.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

#include <memprof.h>

int main(void)
{
	sigset_t set;
	void *old, *fresh;
	int sig;

	sigemptyset(&set);
	sigaddset(&set, SIGUSR1);
	sigprocmask(SIG_BLOCK, &set, NULL);

	memprof_kernel_begin("outer");
	old = malloc(500);
	puts("ready");
	fflush(stdout);
	sigwait(&set, &sig);
	fresh = malloc(700);
	free(old);
	memprof_kernel_end();
	free(fresh);
	return 0;
}
