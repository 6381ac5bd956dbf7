// SPDX-License-Identifier: MIT
/*
 * Fixture for the pprof and symbolization tests: two allocating functions
 * called inside kernels "matmul" and "relu" with known sizes.
 *
 *            alloc_a            alloc_b
 *   matmul   2 x 1000 bytes     1 x 3000 (freed)
 *   relu     1 x 200            2 x 500 (freed)
 *
 * After the kernels one alloc_a block of matmul is freed: in use at the
 * end are 1000 (matmul) + 200 (relu) bytes of alloc_a. The tests know the
 * line of each malloc call: keep ALLOC_A_LINE / ALLOC_B_LINE in sync.
 */
#include <stdlib.h>

#include <memprof.h>

__attribute__((noinline)) void *alloc_a(size_t n);
__attribute__((noinline)) void *alloc_b(size_t n);

void *alloc_a(size_t n)
{
	return malloc(n); /* line 23: ALLOC_A_LINE */
}

void *alloc_b(size_t n)
{
	return malloc(n); /* line 28: ALLOC_B_LINE */
}

int main(void)
{
	void *keep[3], *t;

	memprof_phase("inference");
	memprof_kernel_begin("matmul");
	keep[0] = alloc_a(1000);
	keep[1] = alloc_a(1000);
	t = alloc_b(3000);
	free(t);
	memprof_kernel_end();

	memprof_kernel_begin("relu");
	keep[2] = alloc_a(200);
	for (int i = 0; i < 2; i++) {
		t = alloc_b(500);
		free(t);
	}
	memprof_kernel_end();

	free(keep[0]);
	/* The rest stays live to the end: the in-use figures. */
	return keep[1] && keep[2] ? 0 : 1;
}
