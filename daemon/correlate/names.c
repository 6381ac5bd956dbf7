/* SPDX-License-Identifier: MIT */
/* Kernel names: one aggregate per name, at the same index. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "correlator_impl.h"

static uint32_t hash_str(const char *s)
{
	uint32_t h = 2166136261u;

	for (; *s; s++)
		h = (h ^ (uint8_t)*s) * 16777619u;
	return h;
}

static int name_ht_insert(struct mp_correlator *c, uint32_t id)
{
	uint32_t mask = c->name_ht_cap - 1;
	uint32_t i = hash_str(c->p->names[id]) & mask;

	while (c->name_ht[i])
		i = (i + 1) & mask;
	c->name_ht[i] = id + 1;
	return 0;
}

int corr_name_intern(struct mp_correlator *c, const char *name, uint32_t *ret)
{
	struct mp_profile *p = c->p;
	char buf[MAX_NAME_LEN + 1];
	uint32_t mask, i, id;

	snprintf(buf, sizeof(buf), "%s", name);
	if (c->name_ht_cap) {
		mask = c->name_ht_cap - 1;
		for (i = hash_str(buf) & mask; c->name_ht[i]; i = (i + 1) & mask) {
			if (strcmp(p->names[c->name_ht[i] - 1], buf) == 0) {
				*ret = c->name_ht[i] - 1;
				return 0;
			}
		}
	}
	/* The last slot is kept for "(other)". */
	if (p->n_names >= MAX_NAMES || (p->n_names >= MAX_NAMES - 1 && strcmp(buf, "(other)") != 0))
		return -E2BIG;
	if ((p->n_names + 1) * 2 > c->name_ht_cap) {
		uint32_t ncap = c->name_ht_cap ? c->name_ht_cap * 2 : 64;
		uint32_t *ht = calloc(ncap, sizeof(*ht));

		if (!ht)
			return -ENOMEM;
		free(c->name_ht);
		c->name_ht = ht;
		c->name_ht_cap = ncap;
		for (id = 0; id < p->n_names; id++)
			name_ht_insert(c, id);
	}
	if (corr_grow((void **)&p->names, &c->names_cap, p->n_names + 1, sizeof(*p->names)) < 0)
		return -ENOMEM;
	/* Kernel aggregates share the capacity of names. */
	if (c->names_cap > p->n_kernels) {
		struct mp_kernel *k = reallocarray(p->kernels, c->names_cap, sizeof(*k));

		if (!k)
			return -ENOMEM;
		p->kernels = k;
	}
	id = p->n_names;
	p->names[id] = strdup(buf);
	if (!p->names[id])
		return -ENOMEM;
	p->kernels[id] = (struct mp_kernel){ .name = id, .min_ns = UINT64_MAX };
	p->n_names++;
	p->n_kernels++;
	name_ht_insert(c, id);
	*ret = id;
	return 0;
}
