/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "profile.h"

struct mp_profile *mp_profile_new(void)
{
	struct mp_profile *p = calloc(1, sizeof(*p));

	if (!p)
		return NULL;
	p->format_version = MP_PROFILE_FORMAT_VERSION;
	p->clock = MP_CLOCK_MONOTONIC;
	p->rss_stride = 1;
	p->vm_hwm = MP_UNKNOWN;
	p->maps_resident_peak = MP_UNKNOWN;
	return p;
}

static void invocation_release(struct mp_invocation *inv)
{
	free(inv->inputs);
	free(inv->outputs);
	free(inv->owners);
	free(inv->tags);
	free(inv->pools);
	free(inv->pool_tags);
}

int mp_profile_stacks_alloc(struct mp_profile *p, uint32_t n, uint64_t n_frames)
{
	p->stacks = calloc(n ? n : 1, sizeof(*p->stacks));
	p->stack_frames = n_frames <= SIZE_MAX / sizeof(uint64_t) ?
				  malloc((n_frames ? n_frames : 1) * sizeof(uint64_t)) :
				  NULL;
	if (!p->stacks || !p->stack_frames) {
		free(p->stacks);
		free(p->stack_frames);
		p->stacks = NULL;
		p->stack_frames = NULL;
		return -ENOMEM;
	}
	return 0;
}

void mp_stack_tree_free(struct mp_stack_tree *t)
{
	if (!t)
		return;
	free(t->frame);
	free(t->parent);
	free(t->leaf);
	free(t);
}

void mp_profile_stacks_free(struct mp_profile *p)
{
	if (p->stack_frames)
		free(p->stack_frames);
	else
		for (uint32_t i = 0; p->stacks && i < p->n_stacks; i++)
			free(p->stacks[i].frames);
	mp_stack_tree_free(p->stack_tree);
	free(p->stacks);
	p->stacks = NULL;
	p->stack_frames = NULL;
	p->stack_tree = NULL;
	p->n_stacks = 0;
}

/*
 * A stack no site names (its site evicted from a full site table,
 * docs/PROFILE.md "Limits") would be symbolized, written and read for
 * nothing: on PyTorch's import, 40% of the stacks. Nodes keep their order
 * (a parent's id below its children's), so the tree is rewritten in place.
 */
int mp_profile_stacks_prune(struct mp_profile *p)
{
	struct mp_stack_tree *t = p->stack_tree;
	uint32_t *id, *node, n = 0, nn = 0, old_n, old_nodes;

	if (!t || !p->n_stacks)
		return 0;
	old_n = p->n_stacks;
	old_nodes = t->n_nodes;
	id = calloc(old_n, sizeof(*id));
	if (!id)
		return -ENOMEM;
	for (uint32_t i = 0; i < p->n_sites; i++)
		if (p->sites[i].stack && p->sites[i].stack <= old_n && !id[p->sites[i].stack - 1]) {
			id[p->sites[i].stack - 1] = 1;
			n++;
		}
	/* every stack named and every node on a stack's path (with --stacks
	 * the site table holds as many sites as stacks): nothing to prune */
	if (n == old_n && t->complete) {
		free(id);
		return 0;
	}
	n = 0;
	node = calloc((size_t)old_nodes + 1, sizeof(*node));
	if (!node) {
		free(id);
		return -ENOMEM;
	}
	/* the kept stacks' paths, up to the first node already on one */
	for (uint32_t k = 0; k < old_n; k++)
		if (id[k]) {
			id[k] = ++n;
			for (uint32_t v = t->leaf[k]; v && v <= old_nodes && !node[v];
			     v = t->parent[v - 1])
				node[v] = 1;
		}
	/* new ids in the old order; a node's slot is read before it is
	 * written (new id <= old id) */
	for (uint32_t v = 1; v <= old_nodes; v++)
		if (node[v]) {
			uint32_t w = node[v] = ++nn, up = t->parent[v - 1];

			t->frame[w - 1] = t->frame[v - 1];
			t->parent[w - 1] = up && up < v ? node[up] : 0;
		}
	t->n_nodes = nn;
	for (uint32_t k = 0; k < old_n; k++)
		if (id[k]) {
			uint32_t leaf = t->leaf[k];

			p->stacks[id[k] - 1] = p->stacks[k];
			t->leaf[id[k] - 1] = leaf && leaf <= old_nodes ? node[leaf] : 0;
		}
	p->n_stacks = n;
	for (uint32_t i = 0; i < p->n_sites; i++)
		p->sites[i].stack = p->sites[i].stack && p->sites[i].stack <= old_n ?
					    id[p->sites[i].stack - 1] :
					    0;
	free(id);
	free(node);
	if (!n)
		mp_profile_stacks_free(p);
	return 0;
}

const uint64_t *mp_profile_stack_frames(const struct mp_profile *p, uint32_t i,
					uint64_t buf[MP_PROFILE_MAX_DEPTH])
{
	const struct mp_stack_tree *t = p->stack_tree;
	uint32_t node, n = 0;

	if (!t || p->stacks[i].frames)
		return p->stacks[i].frames;
	for (node = t->leaf[i];
	     node && node <= t->n_nodes && n < p->stacks[i].n_frames && n < MP_PROFILE_MAX_DEPTH;
	     node = t->parent[node - 1])
		buf[n++] = t->frame[node - 1];
	while (n < p->stacks[i].n_frames && n < MP_PROFILE_MAX_DEPTH)
		buf[n++] = 0;
	return buf;
}

void mp_profile_free(struct mp_profile *p)
{
	if (!p)
		return;
	free(p->exe);
	free(p->build_id);
	free(p->cmdline);
	for (uint32_t i = 0; i < p->n_names; i++)
		free(p->names[i]);
	free(p->names);
	for (uint32_t i = 0; i < p->n_invocations; i++)
		invocation_release(&p->invocations[i]);
	free(p->invocations);
	for (uint32_t i = 0; i < p->n_kernels; i++) {
		free(p->kernels[i].owners);
		free(p->kernels[i].tags);
		free(p->kernels[i].pools);
		free(p->kernels[i].pool_tags);
	}
	free(p->kernels);
	for (uint32_t i = 0; i < p->n_phases; i++) {
		free(p->phases[i].name);
		free(p->phases[i].pools);
		free(p->phases[i].peak_owners);
		free(p->phases[i].peak_tags);
	}
	free(p->phases);
	for (uint32_t i = 0; i < p->n_owners; i++)
		free(p->owners[i].name);
	free(p->owners);
	for (uint32_t i = 0; i < p->n_tags; i++)
		free(p->tags[i].name);
	free(p->tags);
	free(p->rss);
	free(p->sites);
	free(p->site_vars);
	for (uint32_t i = 0; i < p->n_objects; i++) {
		free(p->objects[i].path);
		free(p->objects[i].build_id);
	}
	free(p->objects);
	for (uint32_t i = 0; i < p->n_locations; i++) {
		free(p->locations[i].function);
		free(p->locations[i].file);
		for (uint32_t j = 0; j < p->locations[i].n_inlined; j++) {
			free(p->locations[i].inlined[j].function);
			free(p->locations[i].inlined[j].file);
		}
		free(p->locations[i].inlined);
	}
	free(p->locations);
	free(p->python_tids);
	mp_profile_stacks_free(p);
	for (uint32_t i = 0; i < p->n_mempools; i++) {
		free(p->mempools[i].name);
		free(p->mempools[i].tags);
	}
	free(p->mempools);
	for (uint32_t i = 0; i < p->n_execs; i++)
		free(p->execs[i].path);
	free(p->execs);
	free(p);
}

const struct mp_mempool *mp_profile_mempool(const struct mp_profile *p, const char *name)
{
	for (uint32_t i = 0; i < p->n_mempools; i++)
		if (!strcmp(p->mempools[i].name, name))
			return &p->mempools[i];
	return NULL;
}

const char *mp_pool_kind_name(uint32_t kind)
{
	return kind == MP_POOL_KIND_DEVICE ? "device" : "host";
}

const struct mp_pool_bucket *mp_pool_bucket_find(const struct mp_pool_bucket *b, uint32_t n,
						 uint32_t id)
{
	for (uint32_t i = 0; i < n; i++)
		if (b[i].id == id)
			return &b[i];
	return NULL;
}

bool mp_mempool_used(const struct mp_mempool *mp)
{
	return mp->mem.alloc_count || mp->mem.free_count || mp->resets || mp->unknown_frees;
}

const struct mp_pool_tag *mp_pool_tag_find(const struct mp_mempool *mp, uint32_t tag)
{
	for (uint32_t i = 0; i < mp->n_tags; i++)
		if (mp->tags[i].tag == tag)
			return &mp->tags[i];
	return NULL;
}

const struct mp_pool_tag_bucket *mp_pool_tag_bucket_find(const struct mp_pool_tag_bucket *b,
							 uint32_t n, uint32_t pool, uint32_t tag)
{
	for (uint32_t i = 0; i < n; i++)
		if (b[i].pool == pool && b[i].tag == tag)
			return &b[i];
	return NULL;
}

static int dup_opt(const char *s, char **ret)
{
	char *d = NULL;

	if (s) {
		d = strdup(s);
		if (!d)
			return -ENOMEM;
	}
	free(*ret);
	*ret = d;
	return 0;
}

int mp_profile_set_process(struct mp_profile *p, int32_t pid, const char *exe, const char *build_id,
			   const char *cmdline)
{
	int r;

	p->pid = pid;
	r = dup_opt(exe, &p->exe);
	if (r < 0)
		return r;
	r = dup_opt(build_id, &p->build_id);
	if (r < 0)
		return r;
	return dup_opt(cmdline, &p->cmdline);
}

const struct mp_kernel *mp_profile_kernel(const struct mp_profile *p, const char *name)
{
	for (uint32_t i = 0; i < p->n_kernels; i++)
		if (p->kernels[i].name < p->n_names &&
		    strcmp(p->names[p->kernels[i].name], name) == 0)
			return &p->kernels[i];
	return NULL;
}

static int part_cmp(const void *a, const void *b)
{
	const struct mp_peak_part *x = a, *y = b;

	if (x->bytes != y->bytes)
		return x->bytes > y->bytes ? -1 : 1;
	return x->id < y->id ? -1 : x->id > y->id;
}

int mp_profile_peak_parts(const struct mp_profile *p, uint32_t phase, bool tags,
			  struct mp_peak_part **ret, uint32_t *ret_n, uint64_t *ret_peak)
{
	const struct mp_pool *v = tags ? p->tags : p->owners;
	uint32_t nv = tags ? p->n_tags : p->n_owners, n = 0;
	struct mp_peak_part *a;

	*ret = NULL;
	*ret_n = 0;
	if (!p->peak_parts || (phase != MP_NONE && phase >= p->n_phases))
		return -ENOENT;
	if (phase != MP_NONE) {
		const struct mp_phase *ph = &p->phases[phase];
		const struct mp_peak_part *src = tags ? ph->peak_tags : ph->peak_owners;

		n = tags ? ph->n_peak_tags : ph->n_peak_owners;
		*ret_peak = ph->peak_bytes;
		if (!n)
			return 0;
		a = malloc(n * sizeof(*a));
		if (!a)
			return -ENOMEM;
		memcpy(a, src, n * sizeof(*a));
	} else {
		*ret_peak = p->peak_bytes;
		a = nv ? malloc(nv * sizeof(*a)) : NULL;
		if (nv && !a)
			return -ENOMEM;
		for (uint32_t i = 0; i < nv; i++)
			if (v[i].peak_share)
				a[n++] = (struct mp_peak_part){ .id = i, .bytes = v[i].peak_share };
		if (!n) {
			free(a);
			return 0;
		}
	}
	qsort(a, n, sizeof(*a), part_cmp);
	*ret = a;
	*ret_n = n;
	return 0;
}

const struct mp_phase *mp_profile_phase(const struct mp_profile *p, const char *name)
{
	for (uint32_t i = 0; i < p->n_phases; i++)
		if (strcmp(p->phases[i].name, name) == 0)
			return &p->phases[i];
	return NULL;
}

static const struct mp_pool *pool_find(const struct mp_pool *v, uint32_t n, const char *name)
{
	for (uint32_t i = 0; i < n; i++)
		if (strcmp(v[i].name, name) == 0)
			return &v[i];
	return NULL;
}

const struct mp_pool *mp_profile_tag(const struct mp_profile *p, const char *name)
{
	return pool_find(p->tags, p->n_tags, name);
}

const struct mp_pool *mp_profile_owner(const struct mp_profile *p, const char *name)
{
	return pool_find(p->owners, p->n_owners, name);
}

const struct mp_location *mp_profile_location(const struct mp_profile *p, uint64_t addr)
{
	uint32_t lo = 0, hi = p->n_locations;

	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;

		if (p->locations[mid].addr < addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < p->n_locations && p->locations[lo].addr == addr ? &p->locations[lo] : NULL;
}

const struct mp_bucket *mp_bucket_find(const struct mp_bucket *b, uint32_t n, uint32_t id)
{
	for (uint32_t i = 0; i < n; i++)
		if (b[i].id == id)
			return &b[i];
	return NULL;
}

static int find_invocation(const struct mp_profile *p, const char *name, unsigned long nth,
			   struct mp_region *ret)
{
	unsigned long seen = 0;

	for (uint32_t i = 0; i < p->n_invocations; i++) {
		uint32_t n = p->invocations[i].name;

		if (n >= p->n_names || strcmp(p->names[n], name) != 0)
			continue;
		if (++seen == nth) {
			*ret = (struct mp_region){ .whole = false, .inv = i };
			return 0;
		}
	}
	return -ENOENT;
}

int mp_profile_region(const struct mp_profile *p, const char *spec, struct mp_region *ret)
{
	const char *hash;
	char *name, *end;
	unsigned long nth;
	int r;

	if (!spec || !*spec) {
		*ret = (struct mp_region){ .whole = true, .inv = MP_NONE };
		return 0;
	}
	/* A kernel may itself be named "a#2": the exact name wins. */
	if (find_invocation(p, spec, 1, ret) == 0)
		return 0;
	hash = strrchr(spec, '#');
	if (!hash || hash == spec || !hash[1])
		return -ENOENT;
	errno = 0;
	nth = strtoul(hash + 1, &end, 10);
	if (errno || *end || nth == 0)
		return -ENOENT;
	name = strndup(spec, hash - spec);
	if (!name)
		return -ENOMEM;
	r = find_invocation(p, name, nth, ret);
	free(name);
	return r;
}

bool mp_profile_inv_within(const struct mp_profile *p, uint32_t i, uint32_t anc)
{
	/* Depth bounds the walk even if a hostile file made parents cyclic. */
	for (uint32_t steps = 0; i < p->n_invocations && steps <= p->n_invocations; steps++) {
		if (i == anc)
			return true;
		i = p->invocations[i].parent;
	}
	return false;
}

static const char *const trace_mode_names[] = {
	[MP_TRACE_PRECISE] = "precise",
	[MP_TRACE_SAMPLED] = "sampled",
	[MP_TRACE_RSS] = "rss",
};

int mp_trace_mode_parse(const char *s, uint32_t *ret)
{
	for (uint32_t m = 0; m < sizeof(trace_mode_names) / sizeof(trace_mode_names[0]); m++)
		if (!strcmp(s, trace_mode_names[m])) {
			*ret = m;
			return 0;
		}
	return -EINVAL;
}

const char *mp_trace_mode_name(uint32_t mode)
{
	return mode < sizeof(trace_mode_names) / sizeof(trace_mode_names[0]) ?
		       trace_mode_names[mode] :
		       "?";
}

static const char *const tracer_path_names[] = { "unknown", "bpf", "inprocess" };

int mp_tracer_path_parse(const char *s, uint32_t *ret)
{
	for (uint32_t i = 1; i < sizeof(tracer_path_names) / sizeof(tracer_path_names[0]); i++)
		if (!strcmp(s, tracer_path_names[i])) {
			*ret = i;
			return 0;
		}
	return -EINVAL;
}

int mp_tracer_choice_parse(const char *s, uint32_t *ret)
{
	if (!strcmp(s, "auto")) {
		*ret = 0;
		return 0;
	}
	if (!strcmp(s, "inject")) {
		*ret = MP_TRACER_INJECT;
		return 0;
	}
	return mp_tracer_path_parse(s, ret);
}

enum mp_heap_bound mp_profile_heap_bound(const struct mp_profile *p)
{
	bool lower = p->drops_bpf_allocs, upper = p->drops_bpf_frees;
	uint64_t known = p->drops_bpf_allocs + p->drops_bpf_frees + p->drops_bpf_reallocs +
			 p->drops_bpf_others;

	if (p->drops_heap || p->drops_bpf_reallocs || (lower && upper) || p->drops_bpf > known)
		return MP_BOUND_NONE;
	return lower ? MP_BOUND_LOWER : upper ? MP_BOUND_UPPER : MP_BOUND_EXACT;
}

const char *mp_profile_heap_bound_text(const struct mp_profile *p)
{
	switch (mp_profile_heap_bound(p)) {
	case MP_BOUND_LOWER:
		return "new, live, leaked and peak heap figures are lower bounds (allocations "
		       "lost)";
	case MP_BOUND_UPPER:
		return "new, live, leaked and peak heap figures are upper bounds (frees lost: "
		       "their blocks stay live)";
	case MP_BOUND_NONE:
		return "new, live, leaked and peak heap figures are neither upper nor lower "
		       "bounds (allocations and frees lost)";
	default:
		return "the heap figures are whole (only mapping, pool or exec events)";
	}
}

const char *mp_heap_bound_name(enum mp_heap_bound b)
{
	static const char *const names[] = { "exact", "lower", "upper", "none" };

	return (unsigned)b < sizeof(names) / sizeof(names[0]) ? names[b] : "none";
}

const char *mp_tracer_path_name(uint32_t path)
{
	return path < sizeof(tracer_path_names) / sizeof(tracer_path_names[0]) ?
		       tracer_path_names[path] :
		       "unknown";
}
