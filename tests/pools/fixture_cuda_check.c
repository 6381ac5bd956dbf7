/* SPDX-License-Identifier: MIT */
/*
 * docs/TRACER.md's cuda_check.c ("How to check on a machine with a GPU"),
 * on the stub runtime: the test checks that memprof prints on it what the
 * document says a real GPU machine should print.
 */
#include "memprof.h"
#include "stub_device.h"

int main(void)
{
	void *p = NULL;

	cudaFree(0); /* initialise the runtime and the context */
	memprof_kernel_begin("alloc");
	cudaMalloc(&p, 1 << 20);
	memprof_kernel_end();
	memprof_kernel_begin("release");
	cudaFree(p);
	memprof_kernel_end();
	return 0;
}
