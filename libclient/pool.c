/* SPDX-License-Identifier: MIT */
/*
 * libmemprof pools: slices of memory the program manages itself, recorded
 * in the calling thread's ring like markers (docs/RING.md, "Pool records").
 * A pool id is the ring string id of its name with the kind above it, so
 * neither side needs a pool table and a late consumer knows every pool.
 */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>

#include "memprof.h"
#include "ring_abi.h"
#include "ring_writer.h"

#define POOL_KIND_SHIFT 24
#define POOL_NAME_MASK ((1u << POOL_KIND_SHIFT) - 1)

_Static_assert(MP_RING_MAX_STRINGS <= (1u << POOL_KIND_SHIFT), "pool ids hold a string id");
_Static_assert(MEMPROF_POOL_HOST == MP_POOL_KIND_HOST && MEMPROF_POOL_DEVICE == MP_POOL_KIND_DEVICE,
	       "kinds are the ring's");

#define CALLER() ((int64_t)(uintptr_t)__builtin_extract_return_addr(__builtin_return_address(0)))

/* Splits a pool id; false when it cannot be one memprof_pool_declare()
 * returned. */
static inline int pool_split(int pool, uint32_t *ret_name, int64_t *ret_kind)
{
	uint32_t id = (uint32_t)pool;

	if (pool <= 0 || (id >> POOL_KIND_SHIFT) > MP_POOL_KIND_DEVICE || !(id & POOL_NAME_MASK))
		return -EINVAL;
	*ret_name = id & POOL_NAME_MASK;
	*ret_kind = id >> POOL_KIND_SHIFT;
	return 0;
}

MEMPROF_API int memprof_pool_declare(const char *name, int kind)
{
	uint32_t id;
	int64_t w;
	int r;

	if (!name || (kind != MEMPROF_POOL_HOST && kind != MEMPROF_POOL_DEVICE))
		return -EINVAL;
	r = mp__intern(name, &id);
	if (r < 0)
		return r;
	if (!id)
		return -ENOSPC;
	w = kind;
	/* A consumer attached now learns of the pool even if it stays empty. */
	r = mp__ring_record(MP_REC_POOL_DECLARE, id, &w, 1);
	if (r < 0 && r != -ENOSPC)
		return r;
	return (int)(id | (uint32_t)kind << POOL_KIND_SHIFT);
}

MEMPROF_API int memprof_pool_alloc(int pool, const void *ptr, uint64_t size)
{
	int64_t w[4];
	uint32_t id;

	if (pool_split(pool, &id, &w[0]) < 0 || !ptr)
		return -EINVAL;
	w[1] = (int64_t)(uintptr_t)ptr;
	w[2] = (int64_t)size;
	w[3] = CALLER();
	return mp__ring_record(MP_REC_POOL_ALLOC, id, w, 4);
}

MEMPROF_API int memprof_pool_free(int pool, const void *ptr)
{
	int64_t w[3];
	uint32_t id;

	if (pool_split(pool, &id, &w[0]) < 0)
		return -EINVAL;
	if (!ptr)
		return 0;
	w[1] = (int64_t)(uintptr_t)ptr;
	w[2] = CALLER();
	return mp__ring_record(MP_REC_POOL_FREE, id, w, 3);
}

MEMPROF_API int memprof_pool_reset(int pool)
{
	int64_t w[2];
	uint32_t id;

	if (pool_split(pool, &id, &w[0]) < 0)
		return -EINVAL;
	w[1] = CALLER();
	return mp__ring_record(MP_REC_POOL_RESET, id, w, 2);
}
