// SPDX-License-Identifier: MIT
/*
 * A non-PIE program that takes malloc's and free's addresses, as Debian's
 * /usr/bin/python3 does (tests/inject): the linker then defines both as the
 * executable's own PLT entries ("canonical PLT"), which dlsym(RTLD_DEFAULT)
 * returns and which jump through the GOT slots the injector patches.
 * Allocates 500 bytes, prints "ready", waits for SIGUSR1, then allocates
 * 700 bytes through the pointer and 300 directly, frees all three (the
 * 500-byte block was allocated before the attach: an unknown free) and
 * exits.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

void *(*volatile pm)(size_t) = NULL;
void (*volatile pf)(void *) = NULL;

int main(void)
{
	sigset_t set;
	void *old, *a, *b;
	int sig;

	pm = malloc;
	pf = free;
	sigemptyset(&set);
	sigaddset(&set, SIGUSR1);
	sigprocmask(SIG_BLOCK, &set, NULL);
	old = pm(500);
	puts("ready");
	fflush(stdout);
	sigwait(&set, &sig);
	a = pm(700);
	b = malloc(300);
	pf(a);
	free(b);
	free(old);
	return 0;
}
