// SPDX-License-Identifier: MIT
/*
 * Fixture for the backend streaming tests: prints "ready", waits for
 * SIGUSR1 (memprofd is attached by then), then allocates in kernels
 * "matmul" and "relu" of phase "inference" and exits:
 *
 *   matmul   1000 + 1000 + 3000 (freed) = 5000 bytes, 3 blocks
 *   relu     200 + 500 (freed) + 500 (freed) = 1200 bytes, 3 blocks
 *
 * In use at the end: 1000 (matmul) + 200 (relu).
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

#include <memprof.h>

int main(void)
{
	void *keep[3], *t;
	sigset_t set;
	int sig;

	sigemptyset(&set);
	sigaddset(&set, SIGUSR1);
	sigprocmask(SIG_BLOCK, &set, NULL);
	puts("ready");
	fflush(stdout);
	sigwait(&set, &sig);

	memprof_phase("inference");
	memprof_kernel_begin("matmul");
	keep[0] = malloc(1000);
	keep[1] = malloc(1000);
	t = malloc(3000);
	free(t);
	memprof_kernel_end();
	memprof_kernel_begin("relu");
	keep[2] = malloc(200);
	for (int i = 0; i < 2; i++) {
		t = malloc(500);
		free(t);
	}
	memprof_kernel_end();
	free(keep[0]);
	return keep[1] && keep[2] ? 0 : 1;
}
