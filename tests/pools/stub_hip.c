/* SPDX-License-Identifier: MIT */
/* Stub HIP runtime (libamdhip64.so): see stub_device.h. */
#include "stub_device.h"
#include "stub_mem.h"

static unsigned char device[STUB_MEM_BYTES] __attribute__((aligned(256)));
static unsigned char pinned[1u << 20] __attribute__((aligned(4096)));
static struct stub_mem dev = { .base = device };
static struct stub_mem host = { .base = pinned };
static int fail_next;

void hip_stub_fail_next(void)
{
	fail_next = 1;
}

static hipError_t out(struct stub_mem *m, void **ptr, size_t size)
{
	void *p;

	if (!ptr)
		return STUB_ERR_INVALID;
	p = stub_mem_alloc(m, size, &fail_next);
	if (!p)
		return STUB_ERR_NOMEM;
	*ptr = p;
	return 0;
}

hipError_t hipMalloc(void **ptr, size_t size)
{
	return out(&dev, ptr, size);
}

hipError_t hipMallocManaged(void **ptr, size_t size, unsigned int flags)
{
	(void)flags;
	return out(&dev, ptr, size);
}

hipError_t hipMallocAsync(void **ptr, size_t size, hipStream_t s)
{
	(void)s;
	return out(&dev, ptr, size);
}

hipError_t hipHostMalloc(void **ptr, size_t size, unsigned int flags)
{
	(void)flags;
	return out(&host, ptr, size);
}

hipError_t hipFree(void *ptr)
{
	return ptr && stub_mem_free(&dev, ptr) ? STUB_ERR_INVALID : 0;
}

hipError_t hipFreeAsync(void *ptr, hipStream_t s)
{
	(void)s;
	return hipFree(ptr);
}

hipError_t hipHostFree(void *ptr)
{
	return ptr && stub_mem_free(&host, ptr) ? STUB_ERR_INVALID : 0;
}
