/* SPDX-License-Identifier: MIT */
/* Kernels on the stub HIP runtime; expected figures in test_pools_e2e.c. */
#include "memprof.h"
#include "stub_device.h"

int main(void)
{
	void *a = NULL, *b = NULL, *h = NULL, *x = NULL;

	memprof_phase("inference");
	for (int i = 0; i < 2; i++) {
		memprof_kernel_begin("attention");
		if (hipMalloc(&a, 4096) || hipHostMalloc(&h, 512, 0))
			return 1;
		hip_stub_fail_next();
		if (hipMalloc(&x, 100) != STUB_ERR_NOMEM)
			return 2;
		memprof_kernel_begin("softmax");
		if (hipMalloc(&b, 1024) || hipFree(b))
			return 3;
		memprof_kernel_end();
		if (hipFree(a) || hipHostFree(h))
			return 4;
		memprof_kernel_end();
	}
	(void)x;
	return 0;
}
