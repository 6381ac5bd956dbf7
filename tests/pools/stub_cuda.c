/* SPDX-License-Identifier: MIT */
/* Stub CUDA driver API (libcuda.so.1): see stub_device.h. */
#include "stub_device.h"
#include "stub_mem.h"

static unsigned char device[STUB_MEM_BYTES] __attribute__((aligned(256)));
static unsigned char pinned[1u << 20] __attribute__((aligned(4096)));
static struct stub_mem dev = { .base = device };
static struct stub_mem host = { .base = pinned };
static int fail_next;

void cu_stub_fail_next(void)
{
	fail_next = 1;
}

static CUresult dev_alloc(CUdeviceptr *dptr, size_t bytesize)
{
	void *p;

	if (!dptr)
		return STUB_ERR_INVALID;
	p = stub_mem_alloc(&dev, bytesize, &fail_next);
	if (!p)
		return STUB_ERR_NOMEM;
	*dptr = (CUdeviceptr)(uintptr_t)p;
	return 0;
}

CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
	return dev_alloc(dptr, bytesize);
}

CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
	(void)flags;
	return dev_alloc(dptr, bytesize);
}

CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream s)
{
	(void)s;
	return dev_alloc(dptr, bytesize);
}

CUresult cuMemAllocHost_v2(void **pp, size_t bytesize)
{
	void *p;

	if (!pp)
		return STUB_ERR_INVALID;
	p = stub_mem_alloc(&host, bytesize, &fail_next);
	if (!p)
		return STUB_ERR_NOMEM;
	*pp = p;
	return 0;
}

CUresult cuMemFree_v2(CUdeviceptr dptr)
{
	return stub_mem_free(&dev, (void *)(uintptr_t)dptr) ? STUB_ERR_INVALID : 0;
}

CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream s)
{
	(void)s;
	return cuMemFree_v2(dptr);
}

CUresult cuMemFreeHost(void *p)
{
	return stub_mem_free(&host, p) ? STUB_ERR_INVALID : 0;
}
