// SPDX-License-Identifier: MIT
/* A process that made itself non-dumpable (as set-id programs and some
 * daemons do): prints "ready", waits for SIGUSR1. */
#include <signal.h>
#include <stdio.h>
#include <sys/prctl.h>

int main(void)
{
	sigset_t set;
	int sig;

	sigemptyset(&set);
	sigaddset(&set, SIGUSR1);
	sigprocmask(SIG_BLOCK, &set, NULL);
	if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0)
		return 1;
	puts("ready");
	fflush(stdout);
	sigwait(&set, &sig);
	return 0;
}
