// SPDX-License-Identifier: MIT
/*
 * --alloc/--free function specs and the --device presets: pure parsing of
 * command-line text, apart from the tracer so that fuzz/fuzz_spec.c can
 * cover it without BPF.
 */
#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "tracer.h"

/* "argN", N in 0..5. */
static int parse_argn(const char *v, size_t len, uint32_t *ret)
{
	if (len != 4 || strncmp(v, "arg", 3) || v[3] < '0' || v[3] > '5')
		return -EINVAL;
	*ret = (uint32_t)(v[3] - '0');
	return 0;
}

static bool is_val(const char *v, size_t len, const char *want)
{
	return len == strlen(want) && !strncmp(v, want, len);
}

/* One KEY=VALUE of a function spec; @seen has a bit per key. */
static int parse_func_kv(struct mp_tracer_func *f, const char *kv, size_t len, unsigned *seen)
{
	static const char *const keys[] = { "size", "ptr", "ok", "pool", "kind" };
	const char *eq = memchr(kv, '=', len), *v;
	size_t klen, vlen, k;

	if (!eq)
		return -EINVAL;
	klen = (size_t)(eq - kv);
	v = eq + 1;
	vlen = len - klen - 1;
	for (k = 0; k < sizeof(keys) / sizeof(keys[0]); k++)
		if (is_val(kv, klen, keys[k]))
			break;
	if (k == sizeof(keys) / sizeof(keys[0]) || (*seen & (1u << k)) || !vlen)
		return -EINVAL;
	*seen |= 1u << k;
	switch (k) {
	case 0: /* size */
		return f->is_free ? -EINVAL : parse_argn(v, vlen, &f->arg);
	case 1: /* ptr */
		if (f->is_free)
			return parse_argn(v, vlen, &f->arg);
		if (is_val(v, vlen, "ret")) {
			f->ptr = MP_FUNC_PTR_RET;
			return 0;
		}
		f->ptr = MP_FUNC_PTR_OUT;
		return v[0] == '*' ? parse_argn(v + 1, vlen - 1, &f->ptr_arg) : -EINVAL;
	case 2: /* ok */
		if (is_val(v, vlen, "ret==0"))
			f->ok = MP_FUNC_OK_ZERO;
		else if (is_val(v, vlen, "ret!=0"))
			f->ok = MP_FUNC_OK_NONZERO;
		else
			return -EINVAL;
		return 0;
	case 3: /* pool */
		if (vlen >= sizeof(f->pool))
			return -EINVAL;
		for (size_t i = 0; i < vlen; i++)
			if (!((v[i] >= 'a' && v[i] <= 'z') || (v[i] >= 'A' && v[i] <= 'Z') ||
			      (v[i] >= '0' && v[i] <= '9') || v[i] == '_' || v[i] == '-' ||
			      v[i] == '.'))
				return -EINVAL;
		memcpy(f->pool, v, vlen);
		f->pool[vlen] = '\0';
		return 0;
	default: /* kind */
		if (is_val(v, vlen, "host"))
			f->pool_kind = MP_POOL_KIND_HOST;
		else if (is_val(v, vlen, "device"))
			f->pool_kind = MP_POOL_KIND_DEVICE;
		else
			return -EINVAL;
		return 0;
	}
}

int mp_tracer_parse_func(const char *spec, bool is_free, struct mp_tracer_func *ret)
{
	struct mp_tracer_func f = { .is_free = is_free };
	const char *colon, *at, *kv;
	unsigned seen = 0;
	size_t nlen;

	if (!spec)
		return -EINVAL;
	colon = strrchr(spec, ':');
	if (!colon)
		return -EINVAL;
	for (kv = colon + 1;;) {
		const char *end = strchr(kv, ',');
		size_t len = end ? (size_t)(end - kv) : strlen(kv);

		if (parse_func_kv(&f, kv, len, &seen) < 0)
			return -EINVAL;
		if (!end)
			break;
		kv = end + 1;
	}
	/* seen: 1 size, 2 ptr, 4 ok, 8 pool, 16 kind */
	if (is_free ? !(seen & 2) : !(seen & 1))
		return -EINVAL;
	if (f.pool[0] && !(seen & 16))
		f.pool_kind = MP_POOL_KIND_DEVICE;
	if (!f.pool[0]) {
		/* The heap path knows plain functions and posix_memalign's
		 * shape only. */
		if ((seen & 16) || (is_free && (seen & 4)))
			return -EINVAL;
		if (!is_free && f.ptr == MP_FUNC_PTR_OUT ? f.ok != MP_FUNC_OK_ZERO : f.ok != 0)
			return -EINVAL;
	}
	at = memchr(spec, '@', (size_t)(colon - spec));
	nlen = (size_t)((at ? at : colon) - spec);
	if (!nlen || nlen >= sizeof(f.name))
		return -EINVAL;
	memcpy(f.name, spec, nlen);
	if (at) {
		size_t olen = (size_t)(colon - at - 1);

		if (!olen || olen >= sizeof(f.object))
			return -EINVAL;
		memcpy(f.object, at + 1, olen);
	}
	*ret = f;
	return 0;
}

/* Signatures (CUDA 12 runtime and driver API, HIP 6):
 *   cudaError_t cudaMalloc(void **devPtr, size_t size)
 *   cudaError_t cudaMallocManaged(void **devPtr, size_t size, unsigned flags)
 *   cudaError_t cudaMallocAsync(void **devPtr, size_t size, cudaStream_t s)
 *   cudaError_t cudaMallocHost(void **ptr, size_t size)
 *   cudaError_t cudaFree(void *devPtr), cudaFreeAsync(void *devPtr, cudaStream_t s),
 *               cudaFreeHost(void *ptr)
 *   CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
 *   CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned flags)
 *   CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream s)
 *   CUresult cuMemAllocHost_v2(void **pp, size_t bytesize)
 *   CUresult cuMemFree_v2(CUdeviceptr dptr), cuMemFreeAsync(CUdeviceptr, CUstream),
 *            cuMemFreeHost(void *p)
 *   hipError_t hipMalloc(void **ptr, size_t size)
 *   hipError_t hipMallocManaged(void **ptr, size_t size, unsigned flags)
 *   hipError_t hipMallocAsync(void **ptr, size_t size, hipStream_t s)
 *   hipError_t hipHostMalloc(void **ptr, size_t size, unsigned flags)
 *   hipError_t hipFree(void *ptr), hipFreeAsync(void *ptr, hipStream_t s),
 *              hipHostFree(void *ptr)
 * Every success is 0. CUdeviceptr is 64 bits on 64-bit hosts. */
#define DEV_ALLOC(sym, obj, pl, k)                                                          \
	{                                                                                   \
		.name = sym, .object = obj, .arg = 1, .ptr = MP_FUNC_PTR_OUT, .ptr_arg = 0, \
		.ok = MP_FUNC_OK_ZERO, .pool = pl, .pool_kind = k, .optional = true         \
	}
#define DEV_FREE(sym, obj, pl, k)                                                             \
	{                                                                                     \
		.name = sym, .object = obj, .is_free = true, .arg = 0, .ok = MP_FUNC_OK_ZERO, \
		.pool = pl, .pool_kind = k, .optional = true                                  \
	}
#define D MP_POOL_KIND_DEVICE
#define H MP_POOL_KIND_HOST

static const struct mp_tracer_func preset_cuda[] = {
	DEV_ALLOC("cudaMalloc", "libcudart.so*", "cuda", D),
	DEV_ALLOC("cudaMallocAsync", "libcudart.so*", "cuda", D),
	DEV_ALLOC("cudaMallocManaged", "libcudart.so*", "cuda-managed", D),
	DEV_ALLOC("cudaMallocHost", "libcudart.so*", "cuda-host", H),
	DEV_FREE("cudaFree", "libcudart.so*", "cuda", D),
	DEV_FREE("cudaFreeAsync", "libcudart.so*", "cuda", D),
	DEV_FREE("cudaFreeHost", "libcudart.so*", "cuda-host", H),
	DEV_ALLOC("cuMemAlloc_v2", "libcuda.so*", "cuda", D),
	DEV_ALLOC("cuMemAllocAsync", "libcuda.so*", "cuda", D),
	DEV_ALLOC("cuMemAllocManaged", "libcuda.so*", "cuda-managed", D),
	DEV_ALLOC("cuMemAllocHost_v2", "libcuda.so*", "cuda-host", H),
	DEV_FREE("cuMemFree_v2", "libcuda.so*", "cuda", D),
	DEV_FREE("cuMemFreeAsync", "libcuda.so*", "cuda", D),
	DEV_FREE("cuMemFreeHost", "libcuda.so*", "cuda-host", H),
};

static const struct mp_tracer_func preset_hip[] = {
	DEV_ALLOC("hipMalloc", "libamdhip64.so*", "hip", D),
	DEV_ALLOC("hipMallocAsync", "libamdhip64.so*", "hip", D),
	DEV_ALLOC("hipMallocManaged", "libamdhip64.so*", "hip-managed", D),
	DEV_ALLOC("hipHostMalloc", "libamdhip64.so*", "hip-host", H),
	DEV_FREE("hipFree", "libamdhip64.so*", "hip", D),
	DEV_FREE("hipFreeAsync", "libamdhip64.so*", "hip", D),
	DEV_FREE("hipHostFree", "libamdhip64.so*", "hip-host", H),
};

int mp_tracer_device_preset(const char *name, const struct mp_tracer_func **ret_funcs,
			    size_t *ret_n)
{
	if (name && !strcmp(name, "cuda")) {
		*ret_funcs = preset_cuda;
		*ret_n = sizeof(preset_cuda) / sizeof(preset_cuda[0]);
		return 0;
	}
	if (name && !strcmp(name, "hip")) {
		*ret_funcs = preset_hip;
		*ret_n = sizeof(preset_hip) / sizeof(preset_hip[0]);
		return 0;
	}
	return -EINVAL;
}
