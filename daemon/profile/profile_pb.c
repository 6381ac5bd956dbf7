/* SPDX-License-Identifier: MIT */
/* memprof.proto -> the profile model (validated: the file is hostile input),
 * and the profile file format around the message. The encoder is
 * profile_enc.c. */
#include <errno.h>
#include <math.h>
#include <fcntl.h>
#include <pthread.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "memprof.pb-c.h"
#include "pb_copy.h"
#include "profile_pb.h"
#include "util.h"

/* ---- decoding: validate everything the model relies on ---- */

#define BAD(why)                  \
	do {                      \
		*ret_why = (why); \
		return -EBADMSG;  \
	} while (0)

/* A variance from the file: anything but a finite non-negative number
 * (hostile or broken) reads as 0, the figure then shown as exact. */
static double variance(double v)
{
	return isfinite(v) && v > 0 ? v : 0;
}

static void dec_maps(struct mp_map_stats *m, const Memprof__AnonMaps *o)
{
	*m = (struct mp_map_stats){ 0 };
	if (!o)
		return;
	m->alloc_bytes = o->alloc_bytes;
	m->alloc_count = o->alloc_count;
	m->free_bytes = o->free_bytes;
	m->free_count = o->free_count;
	m->live_bytes = o->live_bytes;
	m->peak_bytes = o->peak_bytes;
}

static void dec_mem(struct mp_mem_stats *m, const Memprof__MemStats *o)
{
	if (!o) {
		*m = (struct mp_mem_stats){ 0 };
		return;
	}
	m->bytes_added = o->bytes_added;
	m->tensors_added = o->tensors_added;
	m->alloc_bytes = o->alloc_bytes;
	m->alloc_count = o->alloc_count;
	m->free_bytes = o->free_bytes;
	m->free_count = o->free_count;
	m->alloc_var = variance(o->alloc_var);
	m->free_var = variance(o->free_var);
}

static int dup_str(const char *s, char **ret)
{
	*ret = strdup(s ? s : "");
	return *ret ? 0 : -ENOMEM;
}

/* "" on the wire is how an absent optional string travels. */
static int dup_opt_str(const char *s, char **ret)
{
	if (!s || !*s) {
		*ret = NULL;
		return 0;
	}
	return dup_str(s, ret);
}

/* The model's small arrays (shapes, buckets) have an implied capacity (see
 * profile.h): a decoded profile keeps it, so it can be extended. */
static size_t implicit_cap(size_t n)
{
	size_t c = 2;

	while (c < n)
		c *= 2;
	return c;
}

static int dec_buckets(Memprof__Bucket **in, size_t n, uint32_t n_ids, struct mp_bucket **ret,
		       uint32_t *ret_n, const char **ret_why)
{
	struct mp_bucket *b;

	if (n > n_ids)
		BAD("more owner/tag buckets than owners/tags");
	*ret_n = 0;
	*ret = NULL;
	if (!n)
		return 0;
	b = calloc(implicit_cap(n), sizeof(*b));
	if (!b)
		return -ENOMEM;
	*ret = b;
	for (size_t i = 0; i < n; i++) {
		if (!in[i] || in[i]->id >= n_ids)
			BAD("owner/tag bucket refers to no owner/tag");
		b[i].id = in[i]->id;
		COPY_COUNTS(b[i], *in[i]);
	}
	*ret_n = n;
	return 0;
}

static int dec_pool_buckets(Memprof__PoolBucket **in, size_t n, uint32_t n_ids,
			    struct mp_pool_bucket **ret, uint32_t *ret_n, const char **ret_why)
{
	struct mp_pool_bucket *b;

	if (n > n_ids)
		BAD("more pool buckets than pools");
	*ret_n = 0;
	*ret = NULL;
	if (!n)
		return 0;
	b = calloc(implicit_cap(n), sizeof(*b));
	if (!b)
		return -ENOMEM;
	*ret = b;
	for (size_t i = 0; i < n; i++) {
		if (!in[i] || in[i]->id >= n_ids)
			BAD("pool bucket refers to no pool");
		b[i] = (struct mp_pool_bucket){
			.id = in[i]->id,
			.peak_added = in[i]->peak_added,
			.peak_bytes = in[i]->peak_bytes,
			.live_end = in[i]->live_bytes_end,
			.live_count_end = in[i]->live_count_end,
		};
		COPY_COUNTS(b[i], *in[i]);
	}
	*ret_n = n;
	return 0;
}

/* A zeroed array for @n decoded elements in *@ret (NULL when @n is 0),
 * with the implied capacity of the model's small arrays; *@ret_n is 0
 * until they are decoded. */
static int dec_small(size_t n, size_t elsz, void *ret, uint32_t *ret_n)
{
	void *a = NULL;

	*ret_n = 0;
	if (n && !(a = calloc(implicit_cap(n), elsz)))
		return -ENOMEM;
	*(void **)ret = a;
	return 0;
}

/* Buckets of (pool, tag) pairs: no more than there are pairs. */
static int dec_pool_tag_buckets(Memprof__PoolTagBucket **in, size_t n, const struct mp_profile *p,
				struct mp_pool_tag_bucket **ret, uint32_t *ret_n,
				const char **ret_why)
{
	struct mp_pool_tag_bucket *b;
	int r;

	if (n > (size_t)p->n_mempools * p->n_tags)
		BAD("more pool tag buckets than pools and tags");
	r = dec_small(n, sizeof(*b), ret, ret_n);
	if (r < 0)
		return r;
	b = *ret;
	for (size_t i = 0; i < n; i++) {
		if (!in[i] || in[i]->pool >= p->n_mempools || in[i]->tag >= p->n_tags)
			BAD("pool tag bucket refers to no pool or tag");
		b[i].pool = in[i]->pool;
		b[i].tag = in[i]->tag;
		COPY_COUNTS(b[i], *in[i]);
	}
	*ret_n = n;
	return 0;
}

static int dec_mempool_tags(const Memprof__MemPool *in, uint32_t n_tags, struct mp_mempool *v,
			    const char **ret_why)
{
	if (in->n_tags > n_tags)
		BAD("more pool tags than tags");
	if (!in->n_tags)
		return 0;
	v->tags = calloc(implicit_cap(in->n_tags), sizeof(*v->tags));
	if (!v->tags)
		return -ENOMEM;
	for (size_t i = 0; i < in->n_tags; i++) {
		const Memprof__MemPoolTag *t = in->tags[i];

		if (!t || t->tag >= n_tags)
			BAD("pool tag refers to no tag");
		v->tags[i].tag = t->tag;
		dec_mem(&v->tags[i].mem, t->slices);
		COPY_LIVE(v->tags[i], *t);
		v->n_tags = i + 1;
	}
	return 0;
}

static int dec_mempools(const Memprof__Profile *o, struct mp_profile *p, const char **ret_why)
{
	int r;

	if (o->n_mem_pools > 256)
		BAD("more pools than memprofd keeps");
	if (!o->n_mem_pools)
		return 0;
	p->mempools = calloc(o->n_mem_pools, sizeof(*p->mempools));
	if (!p->mempools)
		return -ENOMEM;
	for (size_t i = 0; i < o->n_mem_pools; i++) {
		const Memprof__MemPool *in = o->mem_pools[i];
		struct mp_mempool *v = &p->mempools[i];

		if (!in)
			BAD("empty pool");
		if (dup_str(in->name, &v->name) < 0)
			return -ENOMEM;
		p->n_mempools = i + 1;
		v->kind = in->kind == MEMPROF__POOL_KIND__POOL_KIND_DEVICE ? MP_POOL_KIND_DEVICE :
									     MP_POOL_KIND_HOST;
		v->source = in->source == MEMPROF__POOL_SOURCE__POOL_SOURCE_PROBE ?
				    MP_POOL_SRC_PROBE :
				    MP_POOL_SRC_API;
		dec_mem(&v->mem, in->slices);
		COPY_LIVE(*v, *in);
		v->resets = in->resets;
		v->unknown_frees = in->unknown_frees;
		r = dec_mempool_tags(in, p->n_tags, v, ret_why);
		if (r < 0)
			return r;
	}
	return 0;
}

static int dec_shapes(Memprof__Shape **in, size_t n, struct mp_shape **ret, uint32_t *ret_n,
		      const char **ret_why)
{
	struct mp_shape *s;

	*ret = NULL;
	*ret_n = 0;
	if (n > 64)
		BAD("too many shapes in one invocation");
	if (!n)
		return 0;
	s = calloc(implicit_cap(n), sizeof(*s));
	if (!s)
		return -ENOMEM;
	*ret = s;
	for (size_t i = 0; i < n; i++) {
		if (!in[i] || in[i]->n_dims > MP_PROFILE_MAX_RANK)
			BAD("shape rank above the maximum");
		s[i].rank = in[i]->n_dims;
		if (in[i]->n_dims)
			memcpy(s[i].dims, in[i]->dims, in[i]->n_dims * sizeof(int64_t));
	}
	*ret_n = n;
	return 0;
}

static int dec_invocation(const Memprof__Invocation *o, uint32_t idx, const struct mp_profile *p,
			  struct mp_invocation *v, const char **ret_why)
{
	int r;

	if (!o)
		BAD("empty invocation");
	if (o->name >= p->n_names)
		BAD("invocation names no kernel");
	if (o->parent != MP_NONE && o->parent >= idx)
		BAD("invocation parent is not an earlier invocation");
	if (o->phase != MP_NONE && o->phase >= p->n_phases)
		BAD("invocation phase out of range");
	v->name = o->name;
	v->tid = o->tid;
	v->parent = o->parent;
	v->depth = o->depth;
	v->phase = o->phase;
	v->flags = (o->open_at_attach ? MP_INV_F_OPEN_AT_ATTACH : 0) |
		   (o->truncated ? MP_INV_F_TRUNCATED : 0) |
		   (o->markers_lost ? MP_INV_F_MARKERS_LOST : 0) |
		   (o->closed_at_exec ? MP_INV_F_EXEC : 0);
	v->begin_ns = o->begin_ns;
	v->end_ns = o->end_ns;
	dec_mem(&v->incl, o->inclusive);
	dec_mem(&v->excl, o->exclusive);
	v->total_bytes_snapshot = o->total_bytes_snapshot;
	v->total_tensors_snapshot = o->total_tensors_snapshot;
	v->peak_bytes = o->peak_bytes;
	v->peak_added = o->peak_added;
	v->peak_var = variance(o->peak_bytes_var);
	v->added_var = variance(o->bytes_added_var);
	v->peak_added_var = variance(o->peak_added_var);
	v->peak_added_bias_bound = variance(o->peak_added_bias_bound);
	v->retained_bytes = o->retained_bytes;
	v->retained_count = o->retained_count;
	v->cross_thread_allocs = o->cross_thread_allocs;
	v->cross_thread_bytes = o->cross_thread_bytes;
	v->rss_begin = o->rss_begin;
	v->rss_end = o->rss_end;
	v->rss_exact_incl = o->rss_exact_inclusive;
	v->rss_exact_excl = o->rss_exact_exclusive;
	dec_maps(&v->maps, o->anon_maps);
	r = dec_shapes(o->input_shapes, o->n_input_shapes, &v->inputs, &v->n_inputs, ret_why);
	if (r < 0)
		return r;
	r = dec_shapes(o->output_shapes, o->n_output_shapes, &v->outputs, &v->n_outputs, ret_why);
	if (r < 0)
		return r;
	r = dec_buckets(o->owners, o->n_owners, p->n_owners, &v->owners, &v->n_owners, ret_why);
	if (r < 0)
		return r;
	r = dec_buckets(o->tags, o->n_tags, p->n_tags, &v->tags, &v->n_tags, ret_why);
	if (r < 0)
		return r;
	r = dec_pool_buckets(o->pools, o->n_pools, p->n_mempools, &v->pools, &v->n_pools, ret_why);
	if (r < 0)
		return r;
	return dec_pool_tag_buckets(o->pool_tags, o->n_pool_tags, p, &v->pool_tags, &v->n_pool_tags,
				    ret_why);
}

static int dec_kernel(const Memprof__Kernel *o, const struct mp_profile *p, struct mp_kernel *k,
		      const char **ret_why)
{
	int r;

	if (!o)
		BAD("empty kernel");
	if (o->name >= p->n_names)
		BAD("kernel aggregate names no kernel");
	k->name = o->name;
	k->calls = o->calls;
	k->total_ns = o->total_ns;
	k->min_ns = o->min_ns;
	k->max_ns = o->max_ns;
	dec_mem(&k->incl, o->inclusive);
	dec_mem(&k->excl, o->exclusive);
	k->peak_bytes = o->peak_bytes;
	k->peak_added = o->peak_added;
	k->peak_var = variance(o->peak_bytes_var);
	k->peak_added_var = variance(o->peak_added_var);
	k->peak_added_bias_bound = variance(o->peak_added_bias_bound);
	k->retained_bytes = o->retained_bytes;
	k->retained_count = o->retained_count;
	k->cross_thread_allocs = o->cross_thread_allocs;
	k->cross_thread_bytes = o->cross_thread_bytes;
	k->rss_delta_sum = o->rss_delta_sum;
	k->rss_calls = o->rss_calls;
	k->rss_exact_incl = o->rss_exact_inclusive;
	k->rss_exact_excl = o->rss_exact_exclusive;
	k->open_at_attach = o->open_at_attach;
	k->truncated = o->truncated;
	k->markers_lost = o->markers_lost;
	dec_maps(&k->maps, o->anon_maps);
	r = dec_buckets(o->owners, o->n_owners, p->n_owners, &k->owners, &k->n_owners, ret_why);
	if (r < 0)
		return r;
	r = dec_buckets(o->tags, o->n_tags, p->n_tags, &k->tags, &k->n_tags, ret_why);
	if (r < 0)
		return r;
	r = dec_pool_buckets(o->pools, o->n_pools, p->n_mempools, &k->pools, &k->n_pools, ret_why);
	if (r < 0)
		return r;
	return dec_pool_tag_buckets(o->pool_tags, o->n_pool_tags, p, &k->pool_tags, &k->n_pool_tags,
				    ret_why);
}

static int dec_pools(Memprof__Pool **in, size_t n, struct mp_pool **ret, uint32_t *ret_n,
		     const char **ret_why)
{
	struct mp_pool *v;

	*ret = NULL;
	*ret_n = 0;
	if (n > 4095)
		BAD("too many owners or tags");
	if (!n)
		return 0;
	v = calloc(n, sizeof(*v));
	if (!v)
		return -ENOMEM;
	*ret = v;
	for (size_t i = 0; i < n; i++) {
		if (!in[i])
			BAD("empty owner/tag");
		if (dup_str(in[i]->name, &v[i].name) < 0)
			return -ENOMEM;
		*ret_n = i + 1;
		dec_mem(&v[i].mem, in[i]->heap);
		COPY_LIVE(v[i], *in[i]);
		v[i].live_var = variance(in[i]->live_bytes_var);
		v[i].peak_var = variance(in[i]->peak_bytes_var);
		v[i].peak_bias_bound = variance(in[i]->peak_bias_bound);
		dec_maps(&v[i].maps, in[i]->anon_maps);
		v[i].peak_share = in[i]->peak_share;
	}
	return 0;
}

/* Who held a peak of @peak bytes: parts of distinct owners or tags (@n_ids)
 * in index order, none empty, summing to no more than the peak (the daemon
 * writes exactly the peak). */
static int dec_peak_parts(Memprof__PeakPart **in, size_t n, uint32_t n_ids, uint64_t peak,
			  struct mp_peak_part **ret, uint32_t *ret_n, const char **ret_why)
{
	struct mp_peak_part *v;
	uint64_t sum = 0;

	*ret = NULL;
	*ret_n = 0;
	if (n > n_ids)
		BAD("more parts of a peak than owners/tags");
	if (!n)
		return 0;
	v = calloc(n, sizeof(*v));
	if (!v)
		return -ENOMEM;
	*ret = v;
	for (size_t i = 0; i < n; i++) {
		if (!in[i] || in[i]->id >= n_ids || (i && in[i]->id <= v[i - 1].id))
			BAD("part of a peak refers to no owner/tag, or out of order");
		if (!in[i]->bytes || in[i]->bytes > peak - sum)
			BAD("parts of a peak empty or above the peak");
		sum += in[i]->bytes;
		v[i] = (struct mp_peak_part){ .id = in[i]->id, .bytes = in[i]->bytes };
		*ret_n = i + 1;
	}
	return 0;
}

/* The owners' (tags') bytes at the process peak sum to no more than it. */
static int check_peak_shares(const struct mp_pool *v, uint32_t n, uint64_t peak,
			     const char **ret_why)
{
	uint64_t sum = 0;

	for (uint32_t i = 0; i < n; i++) {
		if (v[i].peak_share > peak - sum)
			BAD("owners' or tags' bytes at the peak above the peak");
		sum += v[i].peak_share;
	}
	return 0;
}

/* Who held the peaks: the process's and each phase's, after the owners
 * and tags they refer to. */
static int dec_peak_parts_all(const Memprof__Profile *o, struct mp_profile *p, const char **ret_why)
{
	int r;

	p->peak_parts = o->peak_parts;
	r = check_peak_shares(p->owners, p->n_owners, p->peak_bytes, ret_why);
	if (r < 0)
		return r;
	r = check_peak_shares(p->tags, p->n_tags, p->peak_bytes, ret_why);
	if (r < 0)
		return r;
	for (size_t i = 0; i < o->n_phases; i++) {
		const Memprof__Phase *ph = o->phases[i];
		struct mp_phase *q = &p->phases[i];

		r = dec_peak_parts(ph->peak_owners, ph->n_peak_owners, p->n_owners, q->peak_bytes,
				   &q->peak_owners, &q->n_peak_owners, ret_why);
		if (r < 0)
			return r;
		r = dec_peak_parts(ph->peak_tags, ph->n_peak_tags, p->n_tags, q->peak_bytes,
				   &q->peak_tags, &q->n_peak_tags, ret_why);
		if (r < 0)
			return r;
	}
	return 0;
}

/* Stacks written as a list (format version 2): bounded as the daemon
 * bounds them (MP_PROFILE_MAX_STACKS stacks, MP_PROFILE_MAX_DEPTH frames
 * each, MP_PROFILE_MAX_STACK_FRAMES in all); sites refer to them. */
static int dec_stack_list(const Memprof__Profile *o, struct mp_profile *p, uint64_t *ret_frames,
			  const char **ret_why)
{
	uint64_t total = 0, off = 0;

	for (size_t i = 0; i < o->n_stacks; i++) {
		const Memprof__Stack *sk = o->stacks[i];

		if (!sk || !sk->n_frames || sk->n_frames > MP_PROFILE_MAX_DEPTH)
			BAD("empty stack or one deeper than memprofd writes");
		total += sk->n_frames;
	}
	if (total > MP_PROFILE_MAX_STACK_FRAMES)
		BAD("more stack frames than memprofd writes");
	if (mp_profile_stacks_alloc(p, (uint32_t)o->n_stacks, total) < 0)
		return -ENOMEM;
	p->n_stacks = (uint32_t)o->n_stacks;
	for (size_t i = 0; i < o->n_stacks; i++) {
		const Memprof__Stack *sk = o->stacks[i];

		p->stacks[i].frames = p->stack_frames + off;
		memcpy(p->stacks[i].frames, sk->frames, sk->n_frames * sizeof(uint64_t));
		p->stacks[i].n_frames = (uint32_t)sk->n_frames;
		p->stacks[i].flags = sk->truncated ? MP_STACK_F_TRUNCATED : 0;
		off += sk->n_frames;
	}
	*ret_frames = total;
	return 0;
}

/* The tree's nodes: each parent before its child (so no cycle), an
 * address that exists, depth within MP_PROFILE_MAX_DEPTH. Their depths in
 * @depth. */
static int dec_tree_nodes(const Memprof__Profile *o, uint16_t *depth, const char **ret_why)
{
	for (size_t i = 0; i < o->n_stack_node_up; i++) {
		uint32_t up = o->stack_node_up[i];
		size_t parent = i + 1 - up;

		if (!up || up > i + 1)
			BAD("stack node whose parent does not come before it");
		if (o->stack_node_addrs[i] >= o->n_stack_addrs)
			BAD("stack node refers to no address");
		depth[i] = parent ? depth[parent - 1] + 1 : 1;
		if (depth[i] > MP_PROFILE_MAX_DEPTH)
			BAD("stack deeper than memprofd writes");
	}
	return 0;
}

/* The frames of the tree's stacks, laid out one after the other. */
static int dec_tree_frames(const Memprof__Profile *o, struct mp_profile *p, const uint16_t *depth,
			   uint64_t *ret_frames, const char **ret_why)
{
	uint64_t total = 0, off = 0, *addrs;

	for (size_t i = 0; i < o->n_stack_leaves; i++) {
		uint32_t leaf = o->stack_leaves[i] >> 1;

		if (!leaf || leaf > o->n_stack_node_up)
			BAD("empty stack or one that refers to no node");
		total += depth[leaf - 1];
	}
	if (total > MP_PROFILE_MAX_STACK_FRAMES)
		BAD("more stack frames than memprofd writes");
	addrs = malloc((o->n_stack_addrs ? o->n_stack_addrs : 1) * sizeof(*addrs));
	if (!addrs || mp_profile_stacks_alloc(p, (uint32_t)o->n_stack_leaves, total) < 0) {
		free(addrs);
		return -ENOMEM;
	}
	for (size_t i = 0; i < o->n_stack_addrs; i++)
		addrs[i] = o->stack_addrs[i] + (i ? addrs[i - 1] : 0);
	p->n_stacks = (uint32_t)o->n_stack_leaves;
	for (size_t i = 0; i < o->n_stack_leaves; i++) {
		struct mp_stack *s = &p->stacks[i];
		size_t node = o->stack_leaves[i] >> 1;

		s->frames = p->stack_frames + off;
		s->flags = o->stack_leaves[i] & 1 ? MP_STACK_F_TRUNCATED : 0;
		for (; node; node -= o->stack_node_up[node - 1])
			s->frames[s->n_frames++] = addrs[o->stack_node_addrs[node - 1]];
		off += s->n_frames;
	}
	free(addrs);
	*ret_frames = total;
	return 0;
}

/* Stacks written as a prefix tree (format version 3). */
static int dec_stack_tree(const Memprof__Profile *o, struct mp_profile *p, uint64_t *ret_frames,
			  const char **ret_why)
{
	uint16_t *depth;
	int r;

	if (o->n_stacks)
		BAD("stacks both as a list and as a tree");
	if (o->n_stack_node_up != o->n_stack_node_addrs ||
	    o->n_stack_node_up > MP_PROFILE_MAX_STACK_NODES)
		BAD("stack nodes without an address or a parent, or more than memprofd writes");
	depth = malloc((o->n_stack_node_up ? o->n_stack_node_up : 1) * sizeof(*depth));
	if (!depth)
		return -ENOMEM;
	r = dec_tree_nodes(o, depth, ret_why);
	if (r == 0)
		r = dec_tree_frames(o, p, depth, ret_frames, ret_why);
	free(depth);
	return r;
}

static int dec_stacks(const Memprof__Profile *o, struct mp_profile *p, uint64_t *ret_frames,
		      const char **ret_why)
{
	int r = 0;

	*ret_frames = 0;
	if (o->n_stacks > MP_PROFILE_MAX_STACKS || o->n_stack_leaves > MP_PROFILE_MAX_STACKS ||
	    o->stack_depth > MP_PROFILE_MAX_DEPTH)
		BAD("more stacks or a deeper limit than memprofd writes");
	if (o->n_stack_leaves || o->n_stack_node_up || o->n_stack_node_addrs)
		r = dec_stack_tree(o, p, ret_frames, ret_why);
	else if (o->n_stacks)
		r = dec_stack_list(o, p, ret_frames, ret_why);
	p->stack_depth = o->stack_depth;
	p->stacks_dropped = o->stacks_dropped;
	p->stacks_unwound = o->stacks_unwound;
	p->stacks_copied = o->stacks_copied;
	if (r == 0 && o->n_python_tids) {
		if (o->n_python_tids > MP_PROFILE_MAX_PY_TIDS)
			BAD("more Python threads than memprofd writes");
		for (size_t i = 1; i < o->n_python_tids; i++)
			if (o->python_tids[i] <= o->python_tids[i - 1])
				BAD("Python threads not ascending");
		p->python_tids = malloc(o->n_python_tids * sizeof(*p->python_tids));
		if (!p->python_tids)
			return -ENOMEM;
		memcpy(p->python_tids, o->python_tids, o->n_python_tids * sizeof(*p->python_tids));
		p->n_python_tids = (uint32_t)o->n_python_tids;
	}
	return r;
}

static int dec_site_list(const Memprof__Profile *o, struct mp_profile *p, const char **ret_why)
{
	if (o->n_sites) {
		p->sites = calloc(o->n_sites, sizeof(*p->sites));
		if (!p->sites)
			return -ENOMEM;
	}
	for (size_t i = 0; i < o->n_sites; i++) {
		const Memprof__Site *st = o->sites[i];

		if (!st)
			BAD("empty site");
		if ((st->kernel != MP_NONE && st->kernel >= p->n_names) ||
		    (st->phase != MP_NONE && st->phase >= p->n_phases) || st->owner >= p->n_owners)
			BAD("site refers to no kernel, phase or owner");
		if (st->pool > p->n_mempools)
			BAD("site refers to no pool");
		if (st->stack > p->n_stacks)
			BAD("site refers to no stack");
		if (st->peak_recorded &&
		    (st->peak_space > st->alloc_space || st->peak_objects > st->alloc_objects))
			BAD("site has more live at the peak than it allocated");
		p->sites[i] = (struct mp_site){
			.caller = st->caller,
			.name = st->kernel,
			.phase = st->phase,
			.owner = st->owner,
			.tid = st->tid,
			.alloc_objects = st->alloc_objects,
			.alloc_space = st->alloc_space,
			.inuse_objects = st->inuse_objects,
			.inuse_space = st->inuse_space,
			.pool = st->pool,
			.stack = st->stack,
			.flags = st->other ? MP_SITE_F_OTHER : 0, /* limits */
			.peak_objects = st->peak_recorded ? st->peak_objects : MP_UNKNOWN,
			.peak_space = st->peak_recorded ? st->peak_space : MP_UNKNOWN,
			.error_space = st->error_space, /* limits */
		};
		p->n_sites = i + 1;
		if (!p->site_vars && (st->alloc_space_var != 0 || st->inuse_space_var != 0)) {
			p->site_vars = calloc(o->n_sites, sizeof(*p->site_vars));
			if (!p->site_vars)
				return -ENOMEM;
		}
		if (p->site_vars) {
			p->site_vars[i].alloc_space = variance(st->alloc_space_var);
			p->site_vars[i].inuse_space = variance(st->inuse_space_var);
		}
	}
	return 0;
}

static int dec_mappings(const Memprof__Profile *o, struct mp_profile *p, const char **ret_why)
{
	if (o->n_mappings) {
		p->objects = calloc(o->n_mappings, sizeof(*p->objects));
		if (!p->objects)
			return -ENOMEM;
	}
	for (size_t i = 0; i < o->n_mappings; i++) {
		const Memprof__ObjectMapping *m = o->mappings[i];
		struct mp_object *ob = &p->objects[i];

		if (!m)
			BAD("empty mapping");
		p->n_objects = i + 1;
		if (dup_str(m->path, &ob->path) < 0 || dup_opt_str(m->build_id, &ob->build_id) < 0)
			return -ENOMEM;
		ob->start = m->start;
		ob->limit = m->limit;
		ob->file_offset = m->file_offset;
		ob->flags = (m->has_functions ? MP_OBJ_F_FUNCTIONS : 0) |
			    (m->has_lines ? MP_OBJ_F_LINES : 0);
	}
	return 0;
}

/* Locations refer to mappings: decoded after them. */
static int dec_locations(const Memprof__Profile *o, struct mp_profile *p, const char **ret_why)
{
	if (o->n_locations) {
		p->locations = calloc(o->n_locations, sizeof(*p->locations));
		if (!p->locations)
			return -ENOMEM;
	}
	for (size_t i = 0; i < o->n_locations; i++) {
		const Memprof__Location *l = o->locations[i];
		struct mp_location *lc = &p->locations[i];

		if (!l)
			BAD("empty location");
		if (i && l->address <= p->locations[i - 1].addr)
			BAD("locations not sorted by address");
		if (l->mapping != MP_NONE && l->mapping >= p->n_objects)
			BAD("location refers to no mapping");
		p->n_locations = i + 1;
		if (dup_opt_str(l->function, &lc->function) < 0 ||
		    dup_opt_str(l->file, &lc->file) < 0)
			return -ENOMEM;
		lc->addr = l->address;
		lc->object = l->mapping;
		lc->rel_addr = l->rel_address;
		lc->line = l->line;
		lc->python = l->python;
		if (l->python && l->mapping != MP_NONE)
			BAD("a Python frame in a mapping");
		if (l->n_inlined > MP_PROFILE_MAX_INLINE)
			BAD("more inlined frames than memprofd writes");
		if (l->n_inlined) {
			lc->inlined = calloc(l->n_inlined, sizeof(*lc->inlined));
			if (!lc->inlined)
				return -ENOMEM;
		}
		for (size_t j = 0; j < l->n_inlined; j++) {
			if (!l->inlined[j])
				BAD("empty inlined frame");
			lc->n_inlined = j + 1;
			if (dup_opt_str(l->inlined[j]->function, &lc->inlined[j].function) < 0 ||
			    dup_opt_str(l->inlined[j]->file, &lc->inlined[j].file) < 0)
				return -ENOMEM;
			lc->inlined[j].line = l->inlined[j]->line;
		}
	}
	return 0;
}

/* Sites refer to names, phases, owners and stacks: decoded after them. */
static int dec_sites(const Memprof__Profile *o, struct mp_profile *p, const char **ret_why)
{
	uint64_t frames = 0;
	int r;

	r = dec_stacks(o, p, &frames, ret_why);
	if (r < 0)
		return r;
	if (o->n_sites > (1u << 24) || o->n_locations > o->n_sites + frames ||
	    o->n_mappings > o->n_locations)
		BAD("more sites, locations or mappings than memprofd writes");
	r = dec_site_list(o, p, ret_why);
	if (r < 0)
		return r;
	r = dec_mappings(o, p, ret_why);
	if (r < 0)
		return r;
	return dec_locations(o, p, ret_why);
}

/* The renderers word the figures after the mode: it must be one they know
 * and its parameters must be the ones the daemon can write. */
static int dec_mode(const Memprof__Sampling *o, struct mp_profile *p, const char **ret_why)
{
	switch ((int)o->trace_mode) {
	case MEMPROF__TRACE_MODE__TRACE_MODE_PRECISE:
	case MEMPROF__TRACE_MODE__TRACE_MODE_RSS:
		if (o->sample_bytes)
			BAD("sampling interval set outside sampled mode");
		break;
	case MEMPROF__TRACE_MODE__TRACE_MODE_SAMPLED:
		if (!o->sample_bytes)
			BAD("sampled mode without a sampling interval");
		break;
	default:
		BAD("unknown tracing mode (written by a newer memprofd?)");
	}
	if (o->duty_period_ns) {
		if (!o->duty_on_ns || o->duty_on_ns >= o->duty_period_ns)
			BAD("duty cycle ON not within (0, PERIOD)");
		if (o->trace_mode == MEMPROF__TRACE_MODE__TRACE_MODE_RSS)
			BAD("duty cycle in rss mode (no allocator probes to cycle)");
	} else if (o->duty_on_ns || o->duty_active_ns) {
		BAD("duty cycle ON or active time without a PERIOD");
	}
	p->trace_mode = (uint32_t)o->trace_mode;
	p->sample_bytes = o->sample_bytes;
	p->duty_on_ns = o->duty_on_ns;
	p->duty_period_ns = o->duty_period_ns;
	p->duty_active_ns = o->duty_active_ns;
	if ((uint32_t)o->tracer_path > MP_PATH_INPROCESS)
		BAD("unknown tracer path (written by a newer memprofd?)");
	p->tracer_path = (uint32_t)o->tracer_path;
	p->heap_waits = o->heap_waits;
	if (o->tracer_path_reason)
		snprintf(p->tracer_path_reason, sizeof(p->tracer_path_reason), "%s",
			 o->tracer_path_reason);
	p->injected = o->injected;
	if (p->injected && p->tracer_path != MP_PATH_INPROCESS)
		BAD("injected without the in-process path");
	return 0;
}

static int dec_hardening(const Memprof__Profile *o, struct mp_profile *p, const char **ret_why)
{
	if (o->anomalies)
		p->marker_gaps = o->anomalies->marker_gaps;
	p->corruption = o->corruption;
	if (o->rejected) {
		const Memprof__Rejected *rj = o->rejected;

		p->rejected[MP_REJECT_SIZE] = rj->size;
		p->rejected[MP_REJECT_TIME] = rj->time;
		p->rejected[MP_REJECT_THREAD] = rj->thread;
		p->rejected[MP_REJECT_FREE] = rj->free;
		p->rejected[MP_REJECT_STACK] = rj->stack;
		p->rejected[MP_REJECT_MODE] = rj->mode;
		p->rejected[MP_REJECT_FREE_MISALIGNED] = rj->free_misaligned;
		p->rejected[MP_REJECT_FREE_UNMAPPED] = rj->free_unmapped;
		p->stuck_rings = rj->stuck_rings;
	}
	p->exec_count = o->exec_count;
	if (o->n_execs > MP_PROFILE_MAX_EXECS || o->n_execs > o->exec_count)
		BAD("more exec events than memprofd writes");
	if (!o->n_execs)
		return 0;
	p->execs = calloc(o->n_execs, sizeof(*p->execs));
	if (!p->execs)
		return -ENOMEM;
	for (size_t i = 0; i < o->n_execs; i++) {
		const Memprof__ExecEvent *e = o->execs[i];

		if (!e)
			BAD("empty exec event");
		p->execs[i] = (struct mp_exec){ .ts_ns = e->ts_ns,
						.tid = e->tid,
						.kernels_closed = e->kernels_closed,
						.released_bytes = e->released_bytes,
						.released_blocks = e->released_blocks };
		p->n_execs = i + 1;
		if (dup_opt_str(e->path, &p->execs[i].path) < 0)
			return -ENOMEM;
	}
	return 0;
}

/* The header: format version, process, settings, whole-window figures. */
static int dec_header(const Memprof__Profile *o, struct mp_profile *p, const char **ret_why)
{
	int r;

	if (o->format_version == 0)
		BAD("no format version: not a memprof profile");
	if (o->format_version > MP_PROFILE_FORMAT_STACK_TREE) {
		*ret_why = "profile written by a newer, incompatible memprofd";
		return -EPROTONOSUPPORT;
	}
	if (o->n_kernel_names > 65535 || o->n_invocations > (1u << 21) ||
	    o->n_kernels > o->n_kernel_names || o->n_phases > 256)
		BAD("more names, invocations, kernels or phases than memprofd writes");
	p->format_version = o->format_version;
	if (o->process) {
		p->pid = o->process->pid;
		if (dup_opt_str(o->process->exe, &p->exe) < 0 ||
		    dup_opt_str(o->process->build_id, &p->build_id) < 0 ||
		    dup_opt_str(o->process->cmdline, &p->cmdline) < 0)
			return -ENOMEM;
	}
	p->clock = o->clock == MEMPROF__CLOCK__CLOCK_MONOTONIC ? MP_CLOCK_MONOTONIC : 0;
	if (o->sampling) {
		p->rss_interval_ns = o->sampling->rss_interval_ns;
		p->pss_interval_ns = o->sampling->pss_interval_ns;
		p->rss_exact = o->sampling->rss_exact;
		r = dec_mode(o->sampling, p, ret_why);
		if (r < 0)
			return r;
	}
	p->begin_ns = o->begin_ns;
	p->end_ns = o->end_ns;
	dec_mem(&p->mem, o->heap);
	p->peak_bytes = o->peak_bytes;
	p->added_var = variance(o->new_bytes_var);
	p->peak_var = variance(o->peak_var);
	p->peak_bias_bound = variance(o->peak_bias_bound);
	p->peak_tensors = o->peak_tensors;
	dec_maps(&p->maps, o->anon_maps);
	p->maps_recorded = o->anon_maps_recorded;
	p->maps_resident_peak = o->anon_maps_recorded ? o->anon_maps_resident_peak : MP_UNKNOWN;
	p->unknown_frees = o->unknown_frees;
	if (o->drops) {
		p->drops_ring = o->drops->ring;
		p->drops_bpf = o->drops->bpf;
		p->drops_bpf_allocs = o->drops->bpf_allocs;
		p->drops_bpf_frees = o->drops->bpf_frees;
		p->drops_bpf_reallocs = o->drops->bpf_reallocs;
		p->drops_bpf_others = o->drops->bpf_others;
		p->invocations_dropped = o->drops->invocations;
		p->dropped_markers = o->drops->markers;
		p->sites_dropped = o->drops->sites;
		p->drops_heap = o->drops->heap;
		p->stream_chunks_lost = o->drops->stream_chunks;
	}
	if (o->anomalies) {
		p->unmatched_ends = o->anomalies->unmatched_ends;
		p->unmatched_tag_ends = o->anomalies->unmatched_tag_ends;
		p->orphan_shapes = o->anomalies->orphan_shapes;
		p->accounting_errors = o->anomalies->accounting_errors;
		p->probe_hits_unmatched = o->anomalies->probe_hits_unmatched;
		p->internal_frees = o->anomalies->allocator_internal_frees;
		p->unseen_objects = o->anomalies->unseen_objects;
		for (size_t i = 0; i < o->anomalies->n_unseen_object_names &&
				   p->n_unseen_names < MP_PROFILE_MAX_UNSEEN;
		     i++)
			snprintf(p->unseen_names[p->n_unseen_names++], MP_PROFILE_UNSEEN_LEN, "%s",
				 o->anomalies->unseen_object_names[i] ?
					 o->anomalies->unseen_object_names[i] :
					 "");
	}
	p->truncated = o->truncated;
	r = dec_hardening(o, p, ret_why);
	if (r < 0)
		return r;

	return 0;
}

/* Kernel names and phases (invocations refer to them). */
static int dec_names_phases(const Memprof__Profile *o, struct mp_profile *p, const char **ret_why)
{
	if (o->n_kernel_names) {
		p->names = calloc(o->n_kernel_names, sizeof(*p->names));
		if (!p->names)
			return -ENOMEM;
	}
	for (size_t i = 0; i < o->n_kernel_names; i++) {
		if (dup_str(o->kernel_names[i], &p->names[i]) < 0)
			return -ENOMEM;
		p->n_names = i + 1;
	}
	if (o->n_phases) {
		p->phases = calloc(o->n_phases, sizeof(*p->phases));
		if (!p->phases)
			return -ENOMEM;
	}
	for (size_t i = 0; i < o->n_phases; i++) {
		const Memprof__Phase *ph = o->phases[i];

		if (!ph)
			BAD("empty phase");
		if (dup_str(ph->name, &p->phases[i].name) < 0)
			return -ENOMEM;
		p->n_phases = i + 1;
		p->phases[i].first_ns = ph->first_ns;
		p->phases[i].duration_ns = ph->duration_ns;
		p->phases[i].entries = ph->entries;
		dec_mem(&p->phases[i].mem, ph->heap);
		p->phases[i].peak_bytes = ph->peak_bytes;
		p->phases[i].peak_var = variance(ph->peak_bytes_var);
		p->phases[i].rss_peak = ph->rss_peak;
		dec_maps(&p->phases[i].maps, ph->anon_maps);
	}
	return 0;
}

/* Owners, tags, invocations and kernel aggregates. */
static int dec_pools_invocations(const Memprof__Profile *o, struct mp_profile *p,
				 const char **ret_why)
{
	int r;

	r = dec_pools(o->owners, o->n_owners, &p->owners, &p->n_owners, ret_why);
	if (r < 0)
		return r;
	r = dec_pools(o->tags, o->n_tags, &p->tags, &p->n_tags, ret_why);
	if (r < 0)
		return r;
	r = dec_mempools(o, p, ret_why);
	if (r < 0)
		return r;
	/* phases' pool buckets refer to the pools */
	for (size_t i = 0; i < o->n_phases; i++) {
		r = dec_pool_buckets(o->phases[i]->pools, o->phases[i]->n_pools, p->n_mempools,
				     &p->phases[i].pools, &p->phases[i].n_pools, ret_why);
		if (r < 0)
			return r;
	}
	r = dec_peak_parts_all(o, p, ret_why);
	if (r < 0)
		return r;
	if (o->n_invocations) {
		p->invocations = calloc(o->n_invocations, sizeof(*p->invocations));
		if (!p->invocations)
			return -ENOMEM;
	}
	for (size_t i = 0; i < o->n_invocations; i++) {
		/* Counted first so a failure part-way frees what was built. */
		p->n_invocations = i + 1;
		r = dec_invocation(o->invocations[i], i, p, &p->invocations[i], ret_why);
		if (r < 0)
			return r;
	}
	if (o->n_kernels) {
		p->kernels = calloc(o->n_kernels, sizeof(*p->kernels));
		if (!p->kernels)
			return -ENOMEM;
	}
	for (size_t i = 0; i < o->n_kernels; i++) {
		p->n_kernels = i + 1;
		r = dec_kernel(o->kernels[i], p, &p->kernels[i], ret_why);
		if (r < 0)
			return r;
	}
	return 0;
}

static int dec_rss(const Memprof__Rss *rs, struct mp_profile *p, const char **ret_why)
{
	if (rs->n_timeline > (1u << 20))
		BAD("RSS timeline longer than memprofd writes");
	if (rs->n_timeline) {
		p->rss = calloc(rs->n_timeline, sizeof(*p->rss));
		if (!p->rss)
			return -ENOMEM;
	}
	for (size_t i = 0; i < rs->n_timeline; i++) {
		const Memprof__RssPoint *pt = rs->timeline[i];

		if (!pt)
			BAD("empty RSS point");
		p->rss[i] = (struct mp_rss_point){
			.ts_ns = pt->ts_ns,
			.vm_rss = pt->vm_rss,
			.rss_anon = pt->rss_anon,
			.rss_file = pt->rss_file,
			.rss_shmem = pt->rss_shmem,
			.vm_swap = pt->vm_swap,
			.pss = pt->pss,
			.heap_live = rs->heap_live_recorded ? pt->heap_live : MP_UNKNOWN,
			/* unknown unless Profile.anon_maps_recorded (below) */
			.maps_live = pt->anon_maps_live,
		};
	}
	p->n_rss = rs->n_timeline;
	p->rss_stride = rs->stride ? rs->stride : 1;
	p->rss_samples = rs->samples;
	p->rss_peak = rs->peak;
	p->vm_hwm = rs->vm_hwm;
	p->rss_exact_unattributed = rs->exact_unattributed;
	return 0;
}

/* Limits (docs/PROFILE.md "Limits"): figures only, no index to check. */
static void dec_limits(const Memprof__Limits *o, struct mp_profile *p)
{
	if (!o)
		return;
	p->limits = (struct mp_limits){ .reached = o->reached,
					.memory = o->memory,
					.live_blocks = o->live_blocks,
					.untracked_allocs = o->untracked_allocs,
					.untracked_bytes = o->untracked_bytes,
					.sites = o->sites,
					.stacks = o->stacks,
					.stack_frames = o->stack_frames,
					.sites_evicted = o->sites_evicted,
					.site_error_bytes = o->site_error_bytes };
}

static int dec_profile(const Memprof__Profile *o, struct mp_profile *p, const char **ret_why)
{
	int r;

	r = dec_header(o, p, ret_why);
	if (r == 0)
		r = dec_names_phases(o, p, ret_why);
	/* Owners and tags before invocations: invocations refer to them. */
	if (r == 0)
		r = dec_pools_invocations(o, p, ret_why);
	if (r == 0 && o->rss)
		r = dec_rss(o->rss, p, ret_why);
	if (r < 0)
		return r;
	for (uint32_t i = 0; !o->anon_maps_recorded && i < p->n_rss; i++)
		p->rss[i].maps_live = MP_UNKNOWN;
	dec_limits(o->limits, p);
	if (o->wrappers)
		p->wrappers = (struct mp_wrappers_info){ .on = true,
							 .default_list = o->wrappers->default_list,
							 .functions = o->wrappers->functions,
							 .objects = o->wrappers->objects,
							 .skipped = o->wrappers->skipped,
							 .fallbacks = o->wrappers->fallbacks };
	return dec_sites(o, p, ret_why);
}

int mp_profile_decode(const void *buf, size_t len, struct mp_profile **ret, const char **ret_why)
{
	const char *why_dummy;
	Memprof__Profile *o;
	struct mp_profile *p;
	int r;

	if (!ret_why)
		ret_why = &why_dummy;
	*ret_why = NULL;
	o = memprof__profile__unpack(NULL, len, buf);
	if (!o) {
		*ret_why = "corrupted or truncated protobuf data";
		return -EBADMSG;
	}
	p = mp_profile_new();
	if (!p) {
		memprof__profile__free_unpacked(o, NULL);
		return -ENOMEM;
	}
	r = dec_profile(o, p, ret_why);
	memprof__profile__free_unpacked(o, NULL);
	if (r < 0) {
		if (r == -ENOMEM)
			*ret_why = "out of memory";
		mp_profile_free(p);
		return r;
	}
	*ret = p;
	return 0;
}

static void put_le(uint8_t *d, uint64_t v, int n)
{
	for (int i = 0; i < n; i++)
		d[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_le(const uint8_t *d, int n)
{
	uint64_t v = 0;

	for (int i = 0; i < n; i++)
		v |= (uint64_t)d[i] << (8 * i);
	return v;
}

/* zlib's crc32() takes a uInt length. */
static uLong crc_run(const uint8_t *buf, size_t len)
{
	uLong crc = crc32(0, Z_NULL, 0);

	while (len) {
		uInt n = len > (1u << 30) ? (1u << 30) : (uInt)len;

		crc = crc32(crc, buf, n);
		buf += n;
		len -= n;
	}
	return crc;
}

/* Profiles from this size on are checksummed in two halves on two
 * threads (~20 ms for the 43 MB of a PyTorch profile with stacks, after
 * the target is gone and the other CPU is free). */
#define CRC_SPLIT (8u << 20)

struct crc_half {
	const uint8_t *buf;
	size_t len;
	uLong crc;
};

static void *crc_thread(void *arg)
{
	struct crc_half *h = arg;

	h->crc = crc_run(h->buf, h->len);
	return NULL;
}

static uint32_t crc_of(const uint8_t *buf, size_t len)
{
	struct crc_half h = { .buf = buf + len / 2, .len = len - len / 2 };
	pthread_t th;
	uLong first;

	if (len < CRC_SPLIT || pthread_create(&th, NULL, crc_thread, &h) != 0)
		return (uint32_t)crc_run(buf, len);
	first = crc_run(buf, len / 2);
	pthread_join(th, NULL);
	return (uint32_t)crc32_combine(first, h.crc, (z_off_t)h.len);
}

void mp_profile_file_header(const uint8_t *msg, size_t len, uint8_t *hdr)
{
	memcpy(hdr, MP_PROFILE_FILE_MAGIC, 8);
	put_le(hdr + 8, MP_PROFILE_FILE_VERSION, 4);
	put_le(hdr + 12, crc_of(msg, len), 4);
	put_le(hdr + 16, len, 8);
}

int mp_profile_file_encode(const struct mp_profile *p, uint8_t **ret_buf, size_t *ret_len)
{
	uint8_t *buf;
	size_t len;
	int r;

	r = mp_profile_encode_room(p, MP_PROFILE_FILE_HEADER, &buf, &len);
	if (r < 0)
		return r;
	mp_profile_file_header(buf + MP_PROFILE_FILE_HEADER, len, buf);
	*ret_buf = buf;
	*ret_len = MP_PROFILE_FILE_HEADER + len;
	return 0;
}

int mp_profile_file_decode(const void *data, size_t len, struct mp_profile **ret,
			   const char **ret_why)
{
	const uint8_t *buf = data;
	const char *why_dummy;
	uint64_t mlen;

	if (!ret_why)
		ret_why = &why_dummy;
	*ret_why = NULL;
	if (len < MP_PROFILE_FILE_HEADER || memcmp(buf, MP_PROFILE_FILE_MAGIC, 8) != 0) {
		*ret_why = "not a memprof profile (bad magic)";
		return -EBADMSG;
	}
	if (get_le(buf + 8, 4) != MP_PROFILE_FILE_VERSION) {
		*ret_why = "unsupported profile container version";
		return -EPROTONOSUPPORT;
	}
	mlen = get_le(buf + 16, 8);
	if (mlen > len - MP_PROFILE_FILE_HEADER) {
		*ret_why = "truncated profile (shorter than its header says)";
		return -EBADMSG;
	}
	if (mlen < len - MP_PROFILE_FILE_HEADER) {
		*ret_why = "trailing bytes after the profile";
		return -EBADMSG;
	}
	if (crc_of(buf + MP_PROFILE_FILE_HEADER, mlen) != get_le(buf + 12, 4)) {
		*ret_why = "corrupted profile (checksum mismatch)";
		return -EBADMSG;
	}
	return mp_profile_decode(buf + MP_PROFILE_FILE_HEADER, mlen, ret, ret_why);
}

int mp_profile_load(const char *path, struct mp_profile **ret, const char **ret_why)
{
	const char *why_dummy;
	struct stat st;
	uint8_t *buf;
	size_t off = 0;
	int fd, r;

	if (!ret_why)
		ret_why = &why_dummy;
	*ret_why = NULL;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0) {
		r = -errno;
		close(fd);
		return r;
	}
	if (!S_ISREG(st.st_mode) || st.st_size > MP_PROFILE_MAX_FILE) {
		close(fd);
		*ret_why = "not a regular file of at most 1 GiB";
		return -EBADMSG;
	}
	buf = malloc(st.st_size ? st.st_size : 1);
	if (!buf) {
		close(fd);
		return -ENOMEM;
	}
	while (off < (size_t)st.st_size) {
		ssize_t n = read(fd, buf + off, st.st_size - off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			r = -errno;
			close(fd);
			free(buf);
			return r;
		}
		if (n == 0)
			break; /* shrank under us: decode what is there */
		off += n;
	}
	close(fd);
	r = mp_profile_file_decode(buf, off, ret, ret_why);
	free(buf);
	return r;
}
