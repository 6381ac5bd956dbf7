/* SPDX-License-Identifier: MIT */
/* Owners by bytes (rank.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "rank.h"

struct ranked {
	const struct mp_pool *o;
	uint64_t key;
	uint32_t index;
};

static int cmp_ranked(const void *pa, const void *pb)
{
	const struct ranked *a = pa, *b = pb;
	int c;

	if (a->key != b->key)
		return a->key > b->key ? -1 : 1;
	if (a->o->name != b->o->name) {
		if (!a->o->name || !b->o->name)
			return a->o->name ? 1 : -1;
		c = strcmp(a->o->name, b->o->name);
		if (c)
			return c;
	}
	return a->index < b->index ? -1 : a->index > b->index;
}

int mp_rank_pools(const struct mp_pool *v, uint32_t n, enum mp_rank_by by, uint32_t **ret)
{
	struct ranked *r;
	uint32_t *idx;

	*ret = NULL;
	if (!n)
		return 0;
	r = calloc(n, sizeof(*r));
	idx = calloc(n, sizeof(*idx));
	if (!r || !idx) {
		free(r);
		free(idx);
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < n; i++)
		r[i] = (struct ranked){ &v[i],
					by == MP_RANK_MAPPED ? v[i].maps.alloc_bytes :
							       v[i].mem.alloc_bytes,
					i };
	qsort(r, n, sizeof(*r), cmp_ranked);
	for (uint32_t i = 0; i < n; i++)
		idx[i] = r[i].index;
	free(r);
	*ret = idx;
	return 0;
}
