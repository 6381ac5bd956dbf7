/* SPDX-License-Identifier: MIT */
/* Kernel names: one aggregate per name, at the same index. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "correlator_impl.h"

static bool name_eq(const void *ctx, uint32_t id, const void *key)
{
	const struct mp_profile *p = ctx;

	return strcmp(p->names[id], key) == 0;
}

int corr_name_intern(struct mp_correlator *c, const char *name, uint32_t *ret)
{
	struct mp_profile *p = c->p;
	char buf[MAX_NAME_LEN + 1];
	uint32_t id;
	uint64_t h;
	int r;

	snprintf(buf, sizeof(buf), "%s", name);
	h = mp_hash_str(buf);
	if (mp_hashmap_find(&c->names, h, name_eq, p, buf, ret) == 0)
		return 0;
	/* The last slot is kept for "(other)". */
	if (p->n_names >= MAX_NAMES ||
	    (p->n_names >= MAX_NAMES - 1 && strcmp(buf, "(other)") != 0)) {
		p->limits.reached |= MP_LIMIT_NAMES;
		return -E2BIG;
	}
	/* the insert below cannot fail then */
	r = mp_hashmap_reserve(&c->names, p->n_names + 1);
	if (r < 0)
		return r;
	if (corr_grow((void **)&p->names, &c->names_cap, p->n_names + 1, sizeof(*p->names)) < 0)
		return -ENOMEM;
	/* Kernel aggregates share the capacity of names: they grow with it
	 * (not at every name, which copies the array each time where
	 * realloc moves the block, as under ASan). */
	if (c->names_cap > c->kernels_cap) {
		struct mp_kernel *k = reallocarray(p->kernels, c->names_cap, sizeof(*k));

		if (!k)
			return -ENOMEM;
		p->kernels = k;
		c->kernels_cap = c->names_cap;
	}
	id = p->n_names;
	p->names[id] = strdup(buf);
	if (!p->names[id])
		return -ENOMEM;
	p->kernels[id] = (struct mp_kernel){ .name = id, .min_ns = UINT64_MAX };
	p->n_names++;
	p->n_kernels++;
	mp_hashmap_insert(&c->names, h, id);
	*ret = id;
	return 0;
}
