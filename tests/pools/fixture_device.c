/* SPDX-License-Identifier: MIT */
/*
 * An inference-shaped program on the stub CUDA runtime: weights in device
 * memory and a pinned staging buffer at load, then three inferences whose
 * kernels allocate and free device buffers, with one injected allocation
 * failure and one failed free per inference (both must record nothing).
 * The weights are under tag "weights", the rest untagged.
 * No host allocation anywhere: every kernel's heap figures are zero.
 * test_pools_e2e.c holds the exact expected figures.
 */
#include <stdint.h>

#include "memprof.h"
#include "stub_device.h"

int main(void)
{
	void *w = NULL, *pinned = NULL, *a = NULL, *tmp = NULL, *b = NULL, *x = NULL;
	CUdeviceptr d = 0;
	int bad = 0;

	memprof_phase("load");
	memprof_kernel_begin("load_weights");
	memprof_tag_begin("weights");
	if (cudaMalloc(&w, 1 << 20))
		return 1;
	memprof_tag_end();
	if (cudaMallocHost(&pinned, 4096))
		return 1;
	memprof_kernel_end();

	memprof_phase("inference");
	for (int i = 0; i < 3; i++) {
		memprof_kernel_begin("conv");
		if (cudaMalloc(&a, 65536) || cudaMalloc(&tmp, 16384) || cudaFree(tmp))
			return 2;
		memprof_kernel_end();

		memprof_kernel_begin("relu");
		cu_stub_fail_next();
		if (cudaMalloc(&x, 999) != STUB_ERR_NOMEM)
			return 3;
		if (cudaFree(&bad) != STUB_ERR_INVALID)
			return 4;
		if (cudaMalloc(&b, 32768) || cudaFree(a))
			return 5;
		memprof_kernel_end();

		/* the driver API directly */
		memprof_kernel_begin("matmul");
		if (cuMemAlloc_v2(&d, 8192) || cuMemFree_v2(d) || cudaFree(b))
			return 6;
		memprof_kernel_end();
	}
	(void)x;
	return 0;
}
