/* SPDX-License-Identifier: MIT */
/*
 * Stub device runtimes for the pool tests: libcuda.so.1 (driver API),
 * libcudart.so.12 (runtime API, built on the driver like the real one) and
 * libamdhip64.so export the real symbols with the real signatures, backed by
 * a static host array ("device memory") so that no host allocator sees
 * them. stub_fail_next() makes the next allocation of the library fail.
 */
#ifndef STUB_DEVICE_H
#define STUB_DEVICE_H

#include <stddef.h>

typedef unsigned long long CUdeviceptr; /* 64 bits, as on 64-bit hosts */
typedef int CUresult; /* CUDA_SUCCESS = 0 */
typedef int cudaError_t; /* cudaSuccess = 0 */
typedef int hipError_t; /* hipSuccess = 0 */
typedef void *CUstream;
typedef void *cudaStream_t;
typedef void *hipStream_t;

#define STUB_ERR_INVALID 1 /* cudaErrorInvalidValue, hipErrorInvalidValue */
#define STUB_ERR_NOMEM 2 /* cudaErrorMemoryAllocation, CUDA_ERROR_OUT_OF_MEMORY */

CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize);
CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags);
CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream s);
CUresult cuMemAllocHost_v2(void **pp, size_t bytesize);
CUresult cuMemFree_v2(CUdeviceptr dptr);
CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream s);
CUresult cuMemFreeHost(void *p);
void cu_stub_fail_next(void);

cudaError_t cudaMalloc(void **devPtr, size_t size);
cudaError_t cudaMallocManaged(void **devPtr, size_t size, unsigned int flags);
cudaError_t cudaMallocAsync(void **devPtr, size_t size, cudaStream_t s);
cudaError_t cudaMallocHost(void **ptr, size_t size);
cudaError_t cudaFree(void *devPtr);
cudaError_t cudaFreeAsync(void *devPtr, cudaStream_t s);
cudaError_t cudaFreeHost(void *ptr);

hipError_t hipMalloc(void **ptr, size_t size);
hipError_t hipMallocManaged(void **ptr, size_t size, unsigned int flags);
hipError_t hipMallocAsync(void **ptr, size_t size, hipStream_t s);
hipError_t hipHostMalloc(void **ptr, size_t size, unsigned int flags);
hipError_t hipFree(void *ptr);
hipError_t hipFreeAsync(void *ptr, hipStream_t s);
hipError_t hipHostFree(void *ptr);
void hip_stub_fail_next(void);

#endif /* STUB_DEVICE_H */
