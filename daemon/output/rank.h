/* SPDX-License-Identifier: MIT */
/*
 * The order in which every view lists owners: by bytes allocated (in the
 * mapping tables: bytes mapped), the highest first, equal ones by name
 * (docs/OUTPUT.md). The model keeps them in the order they first
 * allocated, which buries the largest.
 */
#ifndef MP_RANK_H
#define MP_RANK_H

#include <stdint.h>

#include "profile.h"

enum mp_rank_by {
	MP_RANK_ALLOC, /* heap bytes allocated (mem.alloc_bytes) */
	MP_RANK_MAPPED, /* bytes of anonymous mappings made (maps.alloc_bytes) */
};

/* The indexes of @v[0..@n) by the bytes @by names, descending, then name
 * (bytewise; a NULL name first), then index, in *@ret (free() it; NULL
 * when @n is 0). 0 or -ENOMEM. */
int mp_rank_pools(const struct mp_pool *v, uint32_t n, enum mp_rank_by by, uint32_t **ret);

#endif /* MP_RANK_H */
