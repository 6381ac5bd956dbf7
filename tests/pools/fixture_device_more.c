/* SPDX-License-Identifier: MIT */
/*
 * The rest of the CUDA preset on the stub runtime: managed memory freed by
 * cudaFree (one free function for two pools), stream-ordered allocation
 * and free, pinned host memory through the driver API, and cudaMallocHost /
 * cudaFreeHost. Expected figures in test_pools_e2e.c.
 */
#include "memprof.h"
#include "stub_device.h"

int main(void)
{
	void *m = NULL, *a = NULL, *h = NULL, *g = NULL;

	memprof_kernel_begin("managed");
	if (cudaMallocManaged(&m, 8192, 1) || cudaFree(m))
		return 1;
	memprof_kernel_end();
	memprof_kernel_begin("async");
	if (cudaMallocAsync(&a, 2048, 0) || cudaFreeAsync(a, 0))
		return 2;
	memprof_kernel_end();
	memprof_kernel_begin("pinned");
	if (cuMemAllocHost_v2(&h, 1024) || cudaMallocHost(&g, 512) || cuMemFreeHost(h) ||
	    cudaFreeHost(g))
		return 3;
	memprof_kernel_end();
	return 0;
}
