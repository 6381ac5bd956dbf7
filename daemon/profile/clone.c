// SPDX-License-Identifier: MIT
/* mp_profile_clone(): a deep copy of the model, for snapshots of a
 * profile still being built. The small arrays (shapes, buckets) keep
 * their implied capacity (profile.h), so the copy can be extended like
 * the original. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "profile.h"

/* A copy of @n elements in an array of room for @cap (>= n); NULL when
 * @cap is 0. */
static int dup_array(const void *src, size_t n, size_t cap, size_t elsz, void **ret)
{
	void *a;

	*ret = NULL;
	if (!cap)
		return 0;
	a = calloc(cap, elsz);
	if (!a)
		return -ENOMEM;
	if (n)
		memcpy(a, src, n * elsz);
	*ret = a;
	return 0;
}

static size_t implicit_cap(size_t n)
{
	size_t c = 2;

	if (!n)
		return 0;
	while (c < n)
		c *= 2;
	return c;
}

static int dup_small(const void *src, uint32_t n, size_t elsz, void **ret)
{
	return dup_array(src, n, implicit_cap(n), elsz, ret);
}

static int dup_exact(const void *src, uint32_t n, size_t elsz, void **ret)
{
	return dup_array(src, n, n, elsz, ret);
}

static int dup_str(const char *s, char **ret)
{
	*ret = NULL;
	if (!s)
		return 0;
	*ret = strdup(s);
	return *ret ? 0 : -ENOMEM;
}

/* The struct copies below share the source's pointers until they are
 * replaced; on failure the rest are cleared, so mp_profile_free() of the
 * partial copy frees only what the copy owns. */

static int clone_invocations(const struct mp_profile *p, struct mp_profile *q)
{
	if (dup_exact(p->invocations, p->n_invocations, sizeof(*p->invocations),
		      (void **)&q->invocations) < 0)
		return -ENOMEM;
	for (uint32_t i = 0; i < p->n_invocations; i++) {
		struct mp_invocation *d = &q->invocations[i];

		d->inputs = d->outputs = NULL;
		d->owners = d->tags = NULL;
		d->pools = NULL;
		d->pool_tags = NULL;
	}
	for (uint32_t i = 0; i < p->n_invocations; i++) {
		const struct mp_invocation *s = &p->invocations[i];
		struct mp_invocation *d = &q->invocations[i];

		if (dup_small(s->inputs, s->n_inputs, sizeof(*s->inputs), (void **)&d->inputs) <
			    0 ||
		    dup_small(s->outputs, s->n_outputs, sizeof(*s->outputs), (void **)&d->outputs) <
			    0 ||
		    dup_small(s->owners, s->n_owners, sizeof(*s->owners), (void **)&d->owners) <
			    0 ||
		    dup_small(s->tags, s->n_tags, sizeof(*s->tags), (void **)&d->tags) < 0 ||
		    dup_small(s->pools, s->n_pools, sizeof(*s->pools), (void **)&d->pools) < 0 ||
		    dup_small(s->pool_tags, s->n_pool_tags, sizeof(*s->pool_tags),
			      (void **)&d->pool_tags) < 0)
			return -ENOMEM;
	}
	return 0;
}

static int clone_kernels(const struct mp_profile *p, struct mp_profile *q)
{
	if (dup_exact(p->kernels, p->n_kernels, sizeof(*p->kernels), (void **)&q->kernels) < 0)
		return -ENOMEM;
	for (uint32_t i = 0; i < p->n_kernels; i++) {
		q->kernels[i].owners = q->kernels[i].tags = NULL;
		q->kernels[i].pools = NULL;
		q->kernels[i].pool_tags = NULL;
	}
	for (uint32_t i = 0; i < p->n_kernels; i++) {
		const struct mp_kernel *s = &p->kernels[i];
		struct mp_kernel *d = &q->kernels[i];

		if (dup_small(s->owners, s->n_owners, sizeof(*s->owners), (void **)&d->owners) <
			    0 ||
		    dup_small(s->tags, s->n_tags, sizeof(*s->tags), (void **)&d->tags) < 0 ||
		    dup_small(s->pools, s->n_pools, sizeof(*s->pools), (void **)&d->pools) < 0 ||
		    dup_small(s->pool_tags, s->n_pool_tags, sizeof(*s->pool_tags),
			      (void **)&d->pool_tags) < 0)
			return -ENOMEM;
	}
	return 0;
}

static int clone_names(const struct mp_profile *p, struct mp_profile *q)
{
	if (!p->n_names)
		return 0;
	q->names = calloc(p->n_names, sizeof(*q->names));
	if (!q->names)
		return -ENOMEM;
	for (uint32_t i = 0; i < p->n_names; i++)
		if (dup_str(p->names[i], &q->names[i]) < 0)
			return -ENOMEM;
	return 0;
}

static int clone_phases_pools(const struct mp_profile *p, struct mp_profile *q)
{
	if (dup_exact(p->phases, p->n_phases, sizeof(*p->phases), (void **)&q->phases) < 0 ||
	    dup_exact(p->owners, p->n_owners, sizeof(*p->owners), (void **)&q->owners) < 0 ||
	    dup_exact(p->tags, p->n_tags, sizeof(*p->tags), (void **)&q->tags) < 0)
		return -ENOMEM;
	for (uint32_t i = 0; i < p->n_phases; i++) {
		q->phases[i].name = NULL;
		q->phases[i].pools = NULL;
		q->phases[i].peak_owners = q->phases[i].peak_tags = NULL;
	}
	for (uint32_t i = 0; i < p->n_owners; i++)
		q->owners[i].name = NULL;
	for (uint32_t i = 0; i < p->n_tags; i++)
		q->tags[i].name = NULL;
	for (uint32_t i = 0; i < p->n_phases; i++)
		if (dup_str(p->phases[i].name, &q->phases[i].name) < 0 ||
		    dup_small(p->phases[i].pools, p->phases[i].n_pools, sizeof(*p->phases[i].pools),
			      (void **)&q->phases[i].pools) < 0 ||
		    dup_exact(p->phases[i].peak_owners, p->phases[i].n_peak_owners,
			      sizeof(struct mp_peak_part),
			      (void **)&q->phases[i].peak_owners) < 0 ||
		    dup_exact(p->phases[i].peak_tags, p->phases[i].n_peak_tags,
			      sizeof(struct mp_peak_part), (void **)&q->phases[i].peak_tags) < 0)
			return -ENOMEM;
	for (uint32_t i = 0; i < p->n_owners; i++)
		if (dup_str(p->owners[i].name, &q->owners[i].name) < 0)
			return -ENOMEM;
	for (uint32_t i = 0; i < p->n_tags; i++)
		if (dup_str(p->tags[i].name, &q->tags[i].name) < 0)
			return -ENOMEM;
	return 0;
}

/* The inlined functions of a location; @d has none yet. */
static int clone_inlined(const struct mp_location *s, struct mp_location *d)
{
	if (!s->n_inlined)
		return 0;
	if (dup_exact(s->inlined, s->n_inlined, sizeof(*s->inlined), (void **)&d->inlined) < 0)
		return -ENOMEM;
	d->n_inlined = s->n_inlined;
	for (uint32_t j = 0; j < s->n_inlined; j++)
		d->inlined[j].function = d->inlined[j].file = NULL;
	for (uint32_t j = 0; j < s->n_inlined; j++)
		if (dup_str(s->inlined[j].function, &d->inlined[j].function) < 0 ||
		    dup_str(s->inlined[j].file, &d->inlined[j].file) < 0)
			return -ENOMEM;
	return 0;
}

static int clone_symbols(const struct mp_profile *p, struct mp_profile *q)
{
	if (dup_exact(p->objects, p->n_objects, sizeof(*p->objects), (void **)&q->objects) < 0 ||
	    dup_exact(p->locations, p->n_locations, sizeof(*p->locations), (void **)&q->locations) <
		    0)
		return -ENOMEM;
	for (uint32_t i = 0; i < p->n_objects; i++)
		q->objects[i].path = q->objects[i].build_id = NULL;
	for (uint32_t i = 0; i < p->n_locations; i++) {
		q->locations[i].function = q->locations[i].file = NULL;
		q->locations[i].inlined = NULL;
		q->locations[i].n_inlined = 0;
	}
	for (uint32_t i = 0; i < p->n_objects; i++)
		if (dup_str(p->objects[i].path, &q->objects[i].path) < 0 ||
		    dup_str(p->objects[i].build_id, &q->objects[i].build_id) < 0)
			return -ENOMEM;
	for (uint32_t i = 0; i < p->n_locations; i++)
		if (dup_str(p->locations[i].function, &q->locations[i].function) < 0 ||
		    dup_str(p->locations[i].file, &q->locations[i].file) < 0 ||
		    clone_inlined(&p->locations[i], &q->locations[i]) < 0)
			return -ENOMEM;
	return 0;
}

/* A prefix tree of stacks (mp_stack_table_export()), with its stacks. */
static int clone_stack_tree(const struct mp_profile *p, struct mp_profile *q)
{
	const struct mp_stack_tree *t = p->stack_tree;
	struct mp_stack_tree *u = calloc(1, sizeof(*u));

	q->stack_tree = u;
	if (!u || dup_exact(p->stacks, p->n_stacks, sizeof(*p->stacks), (void **)&q->stacks) < 0 ||
	    dup_exact(t->frame, t->n_nodes, sizeof(*t->frame), (void **)&u->frame) < 0 ||
	    dup_exact(t->parent, t->n_nodes, sizeof(*t->parent), (void **)&u->parent) < 0 ||
	    dup_exact(t->leaf, p->n_stacks, sizeof(*t->leaf), (void **)&u->leaf) < 0)
		return -ENOMEM;
	u->n_nodes = t->n_nodes;
	return 0;
}

/* Call stacks, their frames in one array (or their tree). */
static int clone_stacks(const struct mp_profile *p, struct mp_profile *q)
{
	uint64_t total = 0, off = 0;

	q->stacks = NULL;
	q->stack_frames = NULL;
	q->stack_tree = NULL;
	if (!p->n_stacks)
		return 0;
	if (p->stack_tree)
		return clone_stack_tree(p, q);
	for (uint32_t i = 0; i < p->n_stacks; i++)
		total += p->stacks[i].n_frames;
	if (mp_profile_stacks_alloc(q, p->n_stacks, total) < 0)
		return -ENOMEM;
	for (uint32_t i = 0; i < p->n_stacks; i++) {
		q->stacks[i] = p->stacks[i];
		q->stacks[i].frames = q->stack_frames + off;
		if (p->stacks[i].n_frames)
			memcpy(q->stacks[i].frames, p->stacks[i].frames,
			       p->stacks[i].n_frames * sizeof(uint64_t));
		off += p->stacks[i].n_frames;
	}
	return 0;
}

/* Pools (mp_mempool) and exec events, each with its own string. */
static int clone_mempools_execs(const struct mp_profile *p, struct mp_profile *q)
{
	if (dup_exact(p->mempools, p->n_mempools, sizeof(*p->mempools), (void **)&q->mempools) <
		    0 ||
	    dup_exact(p->execs, p->n_execs, sizeof(*p->execs), (void **)&q->execs) < 0)
		return -ENOMEM;
	for (uint32_t i = 0; i < p->n_mempools; i++) {
		q->mempools[i].name = NULL;
		q->mempools[i].tags = NULL;
	}
	for (uint32_t i = 0; i < p->n_execs; i++)
		q->execs[i].path = NULL;
	for (uint32_t i = 0; i < p->n_mempools; i++)
		if (dup_str(p->mempools[i].name, &q->mempools[i].name) < 0 ||
		    dup_small(p->mempools[i].tags, p->mempools[i].n_tags,
			      sizeof(*p->mempools[i].tags), (void **)&q->mempools[i].tags) < 0)
			return -ENOMEM;
	for (uint32_t i = 0; i < p->n_execs; i++)
		if (dup_str(p->execs[i].path, &q->execs[i].path) < 0)
			return -ENOMEM;
	return 0;
}

/* Every pointer of the shallow copy cleared, and the counts they go
 * with kept: each clone_* phase fills in its own. */
static void clear_pointers(struct mp_profile *q)
{
	q->exe = q->build_id = q->cmdline = NULL;
	q->names = NULL;
	q->invocations = NULL;
	q->kernels = NULL;
	q->phases = NULL;
	q->owners = q->tags = NULL;
	q->rss = NULL;
	q->sites = NULL;
	q->site_vars = NULL;
	q->objects = NULL;
	q->locations = NULL;
	q->python_tids = NULL;
	q->mempools = NULL;
	q->execs = NULL;
	q->stacks = NULL;
	q->stack_frames = NULL;
	q->stack_tree = NULL;
}

/* Counts of arrays a failed phase left unallocated, so that freeing the
 * partial copy never walks a NULL array. */
static void clear_counts(struct mp_profile *q)
{
	if (!q->names)
		q->n_names = 0;
	if (!q->invocations)
		q->n_invocations = 0;
	if (!q->kernels)
		q->n_kernels = 0;
	if (!q->phases)
		q->n_phases = 0;
	if (!q->owners)
		q->n_owners = 0;
	if (!q->tags)
		q->n_tags = 0;
	if (!q->objects)
		q->n_objects = 0;
	if (!q->locations)
		q->n_locations = 0;
	if (!q->python_tids)
		q->n_python_tids = 0;
	if (!q->mempools)
		q->n_mempools = 0;
	if (!q->execs)
		q->n_execs = 0;
	if (!q->stacks)
		q->n_stacks = 0;
}

int mp_profile_clone(const struct mp_profile *p, struct mp_profile **ret)
{
	struct mp_profile *q;

	if (!p || !ret)
		return -EINVAL;
	q = malloc(sizeof(*q));
	if (!q)
		return -ENOMEM;
	*q = *p;
	clear_pointers(q);
	if (dup_str(p->exe, &q->exe) < 0 || dup_str(p->build_id, &q->build_id) < 0 ||
	    dup_str(p->cmdline, &q->cmdline) < 0 || clone_names(p, q) < 0 ||
	    clone_invocations(p, q) < 0 || clone_kernels(p, q) < 0 ||
	    clone_phases_pools(p, q) < 0 ||
	    dup_exact(p->rss, p->n_rss, sizeof(*p->rss), (void **)&q->rss) < 0 ||
	    dup_exact(p->sites, p->n_sites, sizeof(*p->sites), (void **)&q->sites) < 0 ||
	    (p->site_vars && dup_exact(p->site_vars, p->n_sites, sizeof(*p->site_vars),
				       (void **)&q->site_vars) < 0) ||
	    clone_symbols(p, q) < 0 || clone_mempools_execs(p, q) < 0 || clone_stacks(p, q) < 0 ||
	    dup_exact(p->python_tids, p->n_python_tids, sizeof(*p->python_tids),
		      (void **)&q->python_tids) < 0) {
		clear_counts(q);
		mp_profile_free(q);
		return -ENOMEM;
	}
	*ret = q;
	return 0;
}
