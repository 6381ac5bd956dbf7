/* SPDX-License-Identifier: MIT */
/* Stub CUDA runtime API (libcudart.so.12), built on the driver API as the
 * real one is: cudaMalloc calls cuMemAlloc_v2. See stub_device.h. */
#include <stdint.h>

#include "stub_device.h"

cudaError_t cudaMalloc(void **devPtr, size_t size)
{
	CUdeviceptr d;
	CUresult r;

	if (!devPtr)
		return STUB_ERR_INVALID;
	r = cuMemAlloc_v2(&d, size);
	if (r)
		return r;
	*devPtr = (void *)(uintptr_t)d;
	return 0;
}

cudaError_t cudaMallocManaged(void **devPtr, size_t size, unsigned int flags)
{
	CUdeviceptr d;
	CUresult r;

	if (!devPtr)
		return STUB_ERR_INVALID;
	r = cuMemAllocManaged(&d, size, flags);
	if (r)
		return r;
	*devPtr = (void *)(uintptr_t)d;
	return 0;
}

cudaError_t cudaMallocAsync(void **devPtr, size_t size, cudaStream_t s)
{
	CUdeviceptr d;
	CUresult r;

	if (!devPtr)
		return STUB_ERR_INVALID;
	r = cuMemAllocAsync(&d, size, s);
	if (r)
		return r;
	*devPtr = (void *)(uintptr_t)d;
	return 0;
}

cudaError_t cudaMallocHost(void **ptr, size_t size)
{
	return cuMemAllocHost_v2(ptr, size);
}

cudaError_t cudaFree(void *devPtr)
{
	/* cudaFree(NULL) succeeds and frees nothing */
	return devPtr ? cuMemFree_v2((CUdeviceptr)(uintptr_t)devPtr) : 0;
}

cudaError_t cudaFreeAsync(void *devPtr, cudaStream_t s)
{
	return cuMemFreeAsync((CUdeviceptr)(uintptr_t)devPtr, s);
}

cudaError_t cudaFreeHost(void *ptr)
{
	return cuMemFreeHost(ptr);
}
