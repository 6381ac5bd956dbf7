/* SPDX-License-Identifier: MIT */
/* The profile model -> memprof.proto (mp_profile_encode()): protobuf-c
 * packs the profile, the sites are written by hand. The decoder and the
 * file format are profile_pb.c. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "hashmap.h"
#include "memprof.pb-c.h"
#include "pb_copy.h"
#include "profile_pb.h"

/* The file stores enum mp_trace_mode as is. */
_Static_assert((int)MEMPROF__TRACE_MODE__TRACE_MODE_PRECISE == (int)MP_TRACE_PRECISE &&
		       (int)MEMPROF__TRACE_MODE__TRACE_MODE_SAMPLED == (int)MP_TRACE_SAMPLED &&
		       (int)MEMPROF__TRACE_MODE__TRACE_MODE_RSS == (int)MP_TRACE_RSS,
	       "memprof.TraceMode and enum mp_trace_mode differ");

/* ---- encoding: the messages borrow the model's strings and live in an
 * arena freed after packing ---- */

struct arena {
	struct arena_chunk *head;
	bool failed;
};

struct arena_chunk {
	struct arena_chunk *next;
	max_align_t data[];
};

static void *arena_alloc(struct arena *a, size_t n, size_t sz)
{
	struct arena_chunk *c;

	if (a->failed)
		return NULL;
	if (n && sz > (SIZE_MAX - sizeof(*c)) / n) {
		a->failed = true;
		return NULL;
	}
	c = calloc(1, sizeof(*c) + n * sz);
	if (!c) {
		a->failed = true;
		return NULL;
	}
	c->next = a->head;
	a->head = c;
	return c->data;
}

static void arena_free(struct arena *a)
{
	while (a->head) {
		struct arena_chunk *n = a->head->next;

		free(a->head);
		a->head = n;
	}
}

/* protobuf-c keeps string pointers non-const. */
static char *str_or_empty(const char *s)
{
	return (char *)(s ? s : "");
}

static Memprof__MemStats *enc_mem(struct arena *a, const struct mp_mem_stats *m)
{
	Memprof__MemStats *o = arena_alloc(a, 1, sizeof(*o));

	if (!o)
		return NULL;
	memprof__mem_stats__init(o);
	o->bytes_added = m->bytes_added;
	o->tensors_added = m->tensors_added;
	o->alloc_bytes = m->alloc_bytes;
	o->alloc_count = m->alloc_count;
	o->free_bytes = m->free_bytes;
	o->free_count = m->free_count;
	o->alloc_var = m->alloc_var;
	o->free_var = m->free_var;
	return o;
}

/* NULL (the field left out) when every figure is 0. */
static Memprof__AnonMaps *enc_maps(struct arena *a, const struct mp_map_stats *m)
{
	Memprof__AnonMaps *o;

	if (!m->alloc_count && !m->free_count && !m->live_bytes && !m->peak_bytes)
		return NULL;
	o = arena_alloc(a, 1, sizeof(*o));
	if (!o)
		return NULL;
	memprof__anon_maps__init(o);
	o->alloc_bytes = m->alloc_bytes;
	o->alloc_count = m->alloc_count;
	o->free_bytes = m->free_bytes;
	o->free_count = m->free_count;
	o->live_bytes = m->live_bytes;
	o->peak_bytes = m->peak_bytes;
	return o;
}

/* Fields the model and the messages share by name, copied either way. */
/* @n messages of @sz bytes in *@ret_msgs and the pointers to them that a
 * repeated field holds; NULL when the arena failed. */
static void **enc_repeated(struct arena *a, uint32_t n, size_t sz, void *ret_msgs)
{
	void **v = arena_alloc(a, n, sizeof(*v));
	char *o = arena_alloc(a, n, sz);

	if (!v || !o)
		return NULL;
	for (uint32_t i = 0; i < n; i++)
		v[i] = o + (size_t)i * sz;
	*(char **)ret_msgs = o;
	return v;
}

static Memprof__Bucket **enc_buckets(struct arena *a, const struct mp_bucket *b, uint32_t n)
{
	Memprof__Bucket **v = arena_alloc(a, n, sizeof(*v));
	Memprof__Bucket *o = arena_alloc(a, n, sizeof(*o));

	if (!v || !o)
		return NULL;
	for (uint32_t i = 0; i < n; i++) {
		memprof__bucket__init(&o[i]);
		o[i].id = b[i].id;
		COPY_COUNTS(o[i], b[i]);
		v[i] = &o[i];
	}
	return v;
}

static Memprof__PoolBucket **enc_pool_buckets(struct arena *a, const struct mp_pool_bucket *b,
					      uint32_t n)
{
	Memprof__PoolBucket **v = arena_alloc(a, n, sizeof(*v));
	Memprof__PoolBucket *o = arena_alloc(a, n, sizeof(*o));

	if (!v || !o)
		return NULL;
	for (uint32_t i = 0; i < n; i++) {
		memprof__pool_bucket__init(&o[i]);
		o[i].id = b[i].id;
		COPY_COUNTS(o[i], b[i]);
		o[i].peak_added = b[i].peak_added;
		o[i].peak_bytes = b[i].peak_bytes;
		o[i].live_bytes_end = b[i].live_end;
		o[i].live_count_end = b[i].live_count_end;
		v[i] = &o[i];
	}
	return v;
}

static Memprof__PoolTagBucket **enc_pool_tag_buckets(struct arena *a,
						     const struct mp_pool_tag_bucket *b, uint32_t n)
{
	Memprof__PoolTagBucket *o;
	void **v = enc_repeated(a, n, sizeof(*o), &o);

	for (uint32_t i = 0; v && i < n; i++) {
		memprof__pool_tag_bucket__init(&o[i]);
		o[i].pool = b[i].pool;
		o[i].tag = b[i].tag;
		COPY_COUNTS(o[i], b[i]);
	}
	return (Memprof__PoolTagBucket **)v;
}

static Memprof__MemPoolTag **enc_mempool_tags(struct arena *a, const struct mp_pool_tag *t,
					      uint32_t n)
{
	Memprof__MemPoolTag *o;
	void **v = enc_repeated(a, n, sizeof(*o), &o);

	for (uint32_t i = 0; v && i < n; i++) {
		memprof__mem_pool_tag__init(&o[i]);
		o[i].tag = t[i].tag;
		o[i].slices = enc_mem(a, &t[i].mem);
		COPY_LIVE(o[i], t[i]);
	}
	return (Memprof__MemPoolTag **)v;
}

static Memprof__MemPool **enc_mempools(struct arena *a, const struct mp_mempool *v, uint32_t n)
{
	Memprof__MemPool **r = arena_alloc(a, n, sizeof(*r));
	Memprof__MemPool *o = arena_alloc(a, n, sizeof(*o));

	if (!r || !o)
		return NULL;
	for (uint32_t i = 0; i < n; i++) {
		memprof__mem_pool__init(&o[i]);
		o[i].name = str_or_empty(v[i].name);
		o[i].kind = v[i].kind == MP_POOL_KIND_DEVICE ?
				    MEMPROF__POOL_KIND__POOL_KIND_DEVICE :
				    MEMPROF__POOL_KIND__POOL_KIND_HOST;
		o[i].source = v[i].source == MP_POOL_SRC_PROBE ?
				      MEMPROF__POOL_SOURCE__POOL_SOURCE_PROBE :
				      MEMPROF__POOL_SOURCE__POOL_SOURCE_API;
		o[i].slices = enc_mem(a, &v[i].mem);
		COPY_LIVE(o[i], v[i]);
		o[i].resets = v[i].resets;
		o[i].unknown_frees = v[i].unknown_frees;
		o[i].n_tags = v[i].n_tags;
		o[i].tags = enc_mempool_tags(a, v[i].tags, v[i].n_tags);
		r[i] = &o[i];
	}
	return r;
}

static Memprof__Shape **enc_shapes(struct arena *a, const struct mp_shape *s, uint32_t n)
{
	Memprof__Shape **v = arena_alloc(a, n, sizeof(*v));
	Memprof__Shape *o = arena_alloc(a, n, sizeof(*o));

	if (!v || !o)
		return NULL;
	for (uint32_t i = 0; i < n; i++) {
		memprof__shape__init(&o[i]);
		o[i].n_dims = s[i].rank <= MP_PROFILE_MAX_RANK ? s[i].rank : MP_PROFILE_MAX_RANK;
		o[i].dims = (int64_t *)s[i].dims;
		v[i] = &o[i];
	}
	return v;
}

static Memprof__Invocation *enc_invocation(struct arena *a, const struct mp_invocation *v)
{
	Memprof__Invocation *o = arena_alloc(a, 1, sizeof(*o));

	if (!o)
		return NULL;
	memprof__invocation__init(o);
	o->name = v->name;
	o->tid = v->tid;
	o->parent = v->parent;
	o->depth = v->depth;
	o->phase = v->phase;
	o->open_at_attach = !!(v->flags & MP_INV_F_OPEN_AT_ATTACH);
	o->truncated = !!(v->flags & MP_INV_F_TRUNCATED);
	o->markers_lost = !!(v->flags & MP_INV_F_MARKERS_LOST);
	o->closed_at_exec = !!(v->flags & MP_INV_F_EXEC);
	o->begin_ns = v->begin_ns;
	o->end_ns = v->end_ns;
	o->inclusive = enc_mem(a, &v->incl);
	o->exclusive = enc_mem(a, &v->excl);
	o->total_bytes_snapshot = v->total_bytes_snapshot;
	o->total_tensors_snapshot = v->total_tensors_snapshot;
	o->peak_bytes = v->peak_bytes;
	o->peak_added = v->peak_added;
	o->peak_bytes_var = v->peak_var;
	o->bytes_added_var = v->added_var;
	o->peak_added_var = v->peak_added_var;
	o->peak_added_bias_bound = v->peak_added_bias_bound;
	o->retained_bytes = v->retained_bytes;
	o->retained_count = v->retained_count;
	o->cross_thread_allocs = v->cross_thread_allocs;
	o->cross_thread_bytes = v->cross_thread_bytes;
	o->rss_begin = v->rss_begin;
	o->rss_end = v->rss_end;
	o->rss_exact_inclusive = v->rss_exact_incl;
	o->rss_exact_exclusive = v->rss_exact_excl;
	o->n_input_shapes = v->n_inputs;
	o->input_shapes = enc_shapes(a, v->inputs, v->n_inputs);
	o->n_output_shapes = v->n_outputs;
	o->output_shapes = enc_shapes(a, v->outputs, v->n_outputs);
	o->n_owners = v->n_owners;
	o->owners = enc_buckets(a, v->owners, v->n_owners);
	o->n_tags = v->n_tags;
	o->tags = enc_buckets(a, v->tags, v->n_tags);
	o->n_pools = v->n_pools;
	o->pools = enc_pool_buckets(a, v->pools, v->n_pools);
	o->n_pool_tags = v->n_pool_tags;
	o->pool_tags = enc_pool_tag_buckets(a, v->pool_tags, v->n_pool_tags);
	o->anon_maps = enc_maps(a, &v->maps);
	return o;
}

static Memprof__Kernel *enc_kernel(struct arena *a, const struct mp_kernel *k)
{
	Memprof__Kernel *o = arena_alloc(a, 1, sizeof(*o));

	if (!o)
		return NULL;
	memprof__kernel__init(o);
	o->name = k->name;
	o->calls = k->calls;
	o->total_ns = k->total_ns;
	o->min_ns = k->min_ns;
	o->max_ns = k->max_ns;
	o->inclusive = enc_mem(a, &k->incl);
	o->exclusive = enc_mem(a, &k->excl);
	o->peak_bytes = k->peak_bytes;
	o->peak_added = k->peak_added;
	o->peak_bytes_var = k->peak_var;
	o->peak_added_var = k->peak_added_var;
	o->peak_added_bias_bound = k->peak_added_bias_bound;
	o->retained_bytes = k->retained_bytes;
	o->retained_count = k->retained_count;
	o->cross_thread_allocs = k->cross_thread_allocs;
	o->cross_thread_bytes = k->cross_thread_bytes;
	o->rss_delta_sum = k->rss_delta_sum;
	o->rss_calls = k->rss_calls;
	o->rss_exact_inclusive = k->rss_exact_incl;
	o->rss_exact_exclusive = k->rss_exact_excl;
	o->open_at_attach = k->open_at_attach;
	o->truncated = k->truncated;
	o->markers_lost = k->markers_lost;
	o->n_owners = k->n_owners;
	o->owners = enc_buckets(a, k->owners, k->n_owners);
	o->n_tags = k->n_tags;
	o->tags = enc_buckets(a, k->tags, k->n_tags);
	o->n_pools = k->n_pools;
	o->pools = enc_pool_buckets(a, k->pools, k->n_pools);
	o->n_pool_tags = k->n_pool_tags;
	o->pool_tags = enc_pool_tag_buckets(a, k->pool_tags, k->n_pool_tags);
	o->anon_maps = enc_maps(a, &k->maps);
	return o;
}

static Memprof__Pool **enc_pools(struct arena *a, const struct mp_pool *v, uint32_t n)
{
	Memprof__Pool **r = arena_alloc(a, n, sizeof(*r));
	Memprof__Pool *o = arena_alloc(a, n, sizeof(*o));

	if (!r || !o)
		return NULL;
	for (uint32_t i = 0; i < n; i++) {
		memprof__pool__init(&o[i]);
		o[i].name = str_or_empty(v[i].name);
		o[i].heap = enc_mem(a, &v[i].mem);
		COPY_LIVE(o[i], v[i]);
		o[i].live_bytes_var = v[i].live_var;
		o[i].peak_bytes_var = v[i].peak_var;
		o[i].peak_bias_bound = v[i].peak_bias_bound;
		o[i].anon_maps = enc_maps(a, &v[i].maps);
		o[i].peak_share = v[i].peak_share;
		r[i] = &o[i];
	}
	return r;
}

/* Who held a phase's peak: its owners or tags (@n of @v). */
static Memprof__PeakPart **enc_peak_parts(struct arena *a, const struct mp_peak_part *v, uint32_t n)
{
	Memprof__PeakPart **r = arena_alloc(a, n, sizeof(*r));
	Memprof__PeakPart *o = arena_alloc(a, n, sizeof(*o));

	if (!r || !o)
		return NULL;
	for (uint32_t i = 0; i < n; i++) {
		memprof__peak_part__init(&o[i]);
		o[i].id = v[i].id;
		o[i].bytes = v[i].bytes;
		r[i] = &o[i];
	}
	return r;
}

/* The stacks as a prefix tree (memprof.proto, Profile.stack_*): nodes in
 * order of creation, so that a parent comes before its children. */
struct tree {
	uint64_t *frame; /* per node */
	uint32_t *parent;
	uint32_t n, cap;
	struct mp_hashmap ids; /* (parent, frame) -> node id - 1 */
};

struct tree_key {
	uint64_t frame;
	uint32_t parent;
};

static bool same_node(const void *ctx, uint32_t id, const void *key)
{
	const struct tree *t = ctx;
	const struct tree_key *k = key;

	return t->frame[id] == k->frame && t->parent[id] == k->parent;
}

/* The id of node (@parent, @frame), added if new; 0 when out of memory. */
static uint32_t tree_node(struct tree *t, uint32_t parent, uint64_t frame)
{
	struct tree_key k = { .frame = frame, .parent = parent };
	uint64_t h = mp_hash_combine(mp_hash_u64(frame), parent);
	uint32_t id;

	if (mp_hashmap_find(&t->ids, h, same_node, t, &k, &id) == 0)
		return id + 1;
	if (t->n == t->cap) {
		uint32_t ncap = t->cap ? t->cap * 2 : 1024;
		uint64_t *nf = realloc(t->frame, ncap * sizeof(*nf));
		uint32_t *np;

		if (!nf)
			return 0;
		t->frame = nf;
		np = realloc(t->parent, ncap * sizeof(*np));
		if (!np)
			return 0;
		t->parent = np;
		t->cap = ncap;
	}
	if (mp_hashmap_insert(&t->ids, h, t->n) < 0)
		return 0;
	t->frame[t->n] = frame;
	t->parent[t->n] = parent;
	return ++t->n;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static bool same_addr(const void *ctx, uint32_t id, const void *key)
{
	return ((const uint64_t *)ctx)[id] == *(const uint64_t *)key;
}

/* The distinct addresses of @t's nodes, ascending (delta-coded into
 * o->stack_addrs), and each node's index among them. A program's stacks
 * have millions of nodes and some tens of thousands of addresses: the
 * addresses are told apart by a hash, and only the distinct ones sorted. */
static int enc_tree_addrs(struct arena *a, const struct tree *t, Memprof__Profile *o)
{
	struct mp_hashmap ids = { 0 };
	uint64_t *uniq = NULL, *sorted = NULL;
	uint32_t *rank = NULL, n = 0, cap = 0;
	int r = -ENOMEM;

	o->stack_node_addrs = arena_alloc(a, t->n, sizeof(uint32_t));
	if (!o->stack_node_addrs)
		return -ENOMEM;
	/* o->stack_node_addrs[i]: first the index in order of first sight */
	for (uint32_t i = 0; i < t->n; i++) {
		uint64_t f = t->frame[i];
		uint32_t id;
		int k;

		if (n == cap) {
			uint32_t ncap = cap ? cap * 2 : 4096;
			uint64_t *nu = realloc(uniq, ncap * sizeof(*nu));

			if (!nu)
				goto out;
			uniq = nu;
			cap = ncap;
		}
		k = mp_hashmap_intern(&ids, mp_hash_u64(f), same_addr, uniq, &f, n, &id);
		if (k < 0)
			goto out;
		if (k)
			uniq[n++] = f;
		o->stack_node_addrs[i] = id;
	}
	sorted = malloc((n ? n : 1) * sizeof(*sorted));
	rank = malloc((n ? n : 1) * sizeof(*rank));
	o->stack_addrs = arena_alloc(a, n, sizeof(uint64_t));
	if (!sorted || !rank || !o->stack_addrs)
		goto out;
	memcpy(sorted, uniq, n * sizeof(*sorted));
	qsort(sorted, n, sizeof(*sorted), cmp_u64);
	for (uint32_t i = 0; i < n; i++) {
		const uint64_t *f = bsearch(&uniq[i], sorted, n, sizeof(*sorted), cmp_u64);

		rank[i] = (uint32_t)(f - sorted);
	}
	for (uint32_t i = 0; i < t->n; i++)
		o->stack_node_addrs[i] = rank[o->stack_node_addrs[i]];
	for (uint32_t i = 0; i < n; i++)
		o->stack_addrs[i] = sorted[i] - (i ? sorted[i - 1] : 0);
	o->n_stack_addrs = n;
	o->n_stack_node_addrs = t->n;
	r = 0;
out:
	mp_hashmap_free(&ids);
	free(uniq);
	free(sorted);
	free(rank);
	return r;
}

/* Each stack's innermost node, its frames interned outermost first. */
static int enc_tree(struct arena *a, const struct mp_profile *p, struct tree *t,
		    Memprof__Profile *o)
{
	o->stack_leaves = arena_alloc(a, p->n_stacks, sizeof(uint32_t));
	if (!o->stack_leaves)
		return -ENOMEM;
	for (uint32_t i = 0; i < p->n_stacks; i++) {
		const struct mp_stack *s = &p->stacks[i];
		uint32_t node = 0;

		for (uint32_t j = s->n_frames; j > 0; j--)
			if (!(node = tree_node(t, node, s->frames[j - 1])))
				return -ENOMEM;
		o->stack_leaves[i] = node << 1 | !!(s->flags & MP_STACK_F_TRUNCATED);
	}
	o->n_stack_leaves = p->n_stacks;
	o->stack_node_up = arena_alloc(a, t->n, sizeof(uint32_t));
	if (!o->stack_node_up)
		return -ENOMEM;
	for (uint32_t i = 0; i < t->n; i++)
		o->stack_node_up[i] = i + 1 - t->parent[i];
	o->n_stack_node_up = t->n;
	return enc_tree_addrs(a, t, o);
}

/* The tree the profile holds (the daemon's stack table's), as it is. */
static int enc_given_tree(struct arena *a, const struct mp_profile *p, Memprof__Profile *o)
{
	const struct mp_stack_tree *g = p->stack_tree;
	struct tree t = { .frame = g->frame, .parent = g->parent, .n = g->n_nodes };

	o->stack_leaves = arena_alloc(a, p->n_stacks, sizeof(uint32_t));
	o->stack_node_up = arena_alloc(a, g->n_nodes, sizeof(uint32_t));
	if (!o->stack_leaves || !o->stack_node_up)
		return -ENOMEM;
	for (uint32_t i = 0; i < p->n_stacks; i++)
		o->stack_leaves[i] =
			g->leaf[i] << 1 | !!(p->stacks[i].flags & MP_STACK_F_TRUNCATED);
	o->n_stack_leaves = p->n_stacks;
	for (uint32_t i = 0; i < g->n_nodes; i++)
		o->stack_node_up[i] = i + 1 - g->parent[i];
	o->n_stack_node_up = g->n_nodes;
	return enc_tree_addrs(a, &t, o);
}

static void enc_stacks(struct arena *a, const struct mp_profile *p, Memprof__Profile *o)
{
	struct tree t = { 0 };

	o->stack_depth = p->stack_depth;
	o->stacks_dropped = p->stacks_dropped;
	o->stacks_unwound = p->stacks_unwound;
	o->stacks_copied = p->stacks_copied;
	o->n_python_tids = p->n_python_tids;
	o->python_tids = p->python_tids;
	if (!p->n_stacks)
		return;
	if (p->stack_tree) {
		if (enc_given_tree(a, p, o) < 0)
			a->failed = true;
		return;
	}
	if (enc_tree(a, p, &t, o) < 0)
		a->failed = true;
	free(t.frame);
	free(t.parent);
	mp_hashmap_free(&t.ids);
}

/* The symbols of the sites' callers and the stacks. The sites themselves
 * are written apart (put_sites()). */
static void enc_symbols(struct arena *a, const struct mp_profile *p, Memprof__Profile *o)
{
	Memprof__ObjectMapping *mo = arena_alloc(a, p->n_objects, sizeof(*mo));
	Memprof__Location *lo = arena_alloc(a, p->n_locations, sizeof(*lo));

	o->mappings = arena_alloc(a, p->n_objects, sizeof(*o->mappings));
	o->locations = arena_alloc(a, p->n_locations, sizeof(*o->locations));
	if (!mo || !lo || !o->mappings || !o->locations)
		return;
	for (uint32_t i = 0; i < p->n_objects; i++) {
		const struct mp_object *ob = &p->objects[i];

		memprof__object_mapping__init(&mo[i]);
		mo[i].start = ob->start;
		mo[i].limit = ob->limit;
		mo[i].file_offset = ob->file_offset;
		mo[i].path = str_or_empty(ob->path);
		mo[i].build_id = str_or_empty(ob->build_id);
		mo[i].has_functions = !!(ob->flags & MP_OBJ_F_FUNCTIONS);
		mo[i].has_lines = !!(ob->flags & MP_OBJ_F_LINES);
		o->mappings[i] = &mo[i];
	}
	o->n_mappings = p->n_objects;
	for (uint32_t i = 0; i < p->n_locations; i++) {
		const struct mp_location *l = &p->locations[i];

		memprof__location__init(&lo[i]);
		lo[i].address = l->addr;
		lo[i].mapping = l->object;
		lo[i].rel_address = l->rel_addr;
		lo[i].function = str_or_empty(l->function);
		lo[i].file = str_or_empty(l->file);
		lo[i].line = l->line;
		lo[i].python = l->python;
		if (l->n_inlined) {
			Memprof__InlineFrame *in = arena_alloc(a, l->n_inlined, sizeof(*in));

			lo[i].inlined = arena_alloc(a, l->n_inlined, sizeof(*lo[i].inlined));
			if (!in || !lo[i].inlined)
				return;
			for (uint32_t j = 0; j < l->n_inlined; j++) {
				memprof__inline_frame__init(&in[j]);
				in[j].function = str_or_empty(l->inlined[j].function);
				in[j].file = str_or_empty(l->inlined[j].file);
				in[j].line = l->inlined[j].line;
				lo[i].inlined[j] = &in[j];
			}
			lo[i].n_inlined = l->n_inlined;
		}
		o->locations[i] = &lo[i];
	}
	o->n_locations = p->n_locations;
	enc_stacks(a, p, o);
}

/* Records refused by reason, only when there are any. */
static void enc_rejected(struct arena *a, const struct mp_profile *p, Memprof__Profile *o)
{
	const uint64_t *n = p->rejected;
	Memprof__Rejected *rj;
	uint64_t any = p->stuck_rings;

	for (int i = 0; i < MP_REJECT_COUNT; i++)
		any |= n[i];
	if (!any || !(rj = arena_alloc(a, 1, sizeof(*rj))))
		return;
	memprof__rejected__init(rj);
	rj->size = n[MP_REJECT_SIZE];
	rj->time = n[MP_REJECT_TIME];
	rj->thread = n[MP_REJECT_THREAD];
	rj->free = n[MP_REJECT_FREE];
	rj->stack = n[MP_REJECT_STACK];
	rj->mode = n[MP_REJECT_MODE];
	rj->free_misaligned = n[MP_REJECT_FREE_MISALIGNED];
	rj->free_unmapped = n[MP_REJECT_FREE_UNMAPPED];
	rj->stuck_rings = p->stuck_rings;
	o->rejected = rj;
}

/* Lost markers, execs, ring corruption. */
/* Limits (docs/PROFILE.md "Limits"): written when the run had bounds. */
static void enc_limits(struct arena *a, const struct mp_profile *p, Memprof__Profile *o)
{
	const struct mp_limits *l = &p->limits;
	Memprof__Limits *lo;

	if (!l->reached && !l->memory && !l->live_blocks && !l->sites && !l->stacks)
		return;
	lo = arena_alloc(a, 1, sizeof(*lo));
	if (!lo)
		return;
	memprof__limits__init(lo);
	lo->reached = l->reached;
	lo->memory = l->memory;
	lo->live_blocks = l->live_blocks;
	lo->untracked_allocs = l->untracked_allocs;
	lo->untracked_bytes = l->untracked_bytes;
	lo->sites = l->sites;
	lo->stacks = l->stacks;
	lo->stack_frames = l->stack_frames;
	lo->sites_evicted = l->sites_evicted;
	lo->site_error_bytes = l->site_error_bytes;
	o->limits = lo;
}

/* Allocator wrappers: written when the run looked past them. */
static void enc_wrappers(struct arena *a, const struct mp_profile *p, Memprof__Profile *o)
{
	const struct mp_wrappers_info *w = &p->wrappers;
	Memprof__Wrappers *wo;

	if (!w->on)
		return;
	wo = arena_alloc(a, 1, sizeof(*wo));
	if (!wo)
		return;
	memprof__wrappers__init(wo);
	wo->default_list = w->default_list;
	wo->functions = w->functions;
	wo->objects = w->objects;
	wo->skipped = w->skipped;
	wo->fallbacks = w->fallbacks;
	o->wrappers = wo;
}

static void enc_hardening(struct arena *a, const struct mp_profile *p, Memprof__Profile *o)
{
	Memprof__ExecEvent *eo = arena_alloc(a, p->n_execs, sizeof(*eo));

	o->anomalies->marker_gaps = p->marker_gaps;
	o->corruption = p->corruption;
	enc_rejected(a, p, o);
	o->exec_count = p->exec_count;
	o->execs = arena_alloc(a, p->n_execs, sizeof(*o->execs));
	if (!eo || !o->execs)
		return;
	for (uint32_t i = 0; i < p->n_execs; i++) {
		memprof__exec_event__init(&eo[i]);
		eo[i].ts_ns = p->execs[i].ts_ns;
		eo[i].tid = p->execs[i].tid;
		eo[i].kernels_closed = p->execs[i].kernels_closed;
		eo[i].path = str_or_empty(p->execs[i].path);
		eo[i].released_bytes = p->execs[i].released_bytes;
		eo[i].released_blocks = p->execs[i].released_blocks;
		o->execs[i] = &eo[i];
	}
	o->n_execs = p->n_execs;
}

static Memprof__Profile *enc_profile(struct arena *a, const struct mp_profile *p)
{
	Memprof__Profile *o = arena_alloc(a, 1, sizeof(*o));
	Memprof__Process *proc = arena_alloc(a, 1, sizeof(*proc));
	Memprof__Sampling *smp = arena_alloc(a, 1, sizeof(*smp));
	Memprof__Drops *drops = arena_alloc(a, 1, sizeof(*drops));
	Memprof__Anomalies *an = arena_alloc(a, 1, sizeof(*an));
	Memprof__Rss *rss = arena_alloc(a, 1, sizeof(*rss));

	if (!o || !proc || !smp || !drops || !an || !rss)
		return NULL;
	memprof__profile__init(o);
	/* the stacks as a prefix tree (enc_stacks()) */
	o->format_version = p->n_stacks && p->format_version < MP_PROFILE_FORMAT_STACK_TREE ?
				    MP_PROFILE_FORMAT_STACK_TREE :
				    p->format_version;
	memprof__process__init(proc);
	proc->pid = p->pid;
	proc->exe = str_or_empty(p->exe);
	proc->build_id = str_or_empty(p->build_id);
	proc->cmdline = str_or_empty(p->cmdline);
	o->process = proc;
	o->clock = p->clock == MP_CLOCK_MONOTONIC ? MEMPROF__CLOCK__CLOCK_MONOTONIC :
						    MEMPROF__CLOCK__CLOCK_UNSPECIFIED;
	memprof__sampling__init(smp);
	smp->rss_interval_ns = p->rss_interval_ns;
	smp->pss_interval_ns = p->pss_interval_ns;
	smp->rss_exact = p->rss_exact;
	/* Written as is: the decoder rejects a value it does not know. */
	smp->trace_mode = (Memprof__TraceMode)p->trace_mode;
	smp->sample_bytes = p->sample_bytes;
	smp->duty_on_ns = p->duty_on_ns;
	smp->duty_period_ns = p->duty_period_ns;
	smp->duty_active_ns = p->duty_active_ns;
	smp->tracer_path = (Memprof__TracerPath)p->tracer_path;
	smp->heap_waits = p->heap_waits;
	smp->tracer_path_reason = str_or_empty(p->tracer_path_reason);
	smp->injected = p->injected;
	o->sampling = smp;
	o->begin_ns = p->begin_ns;
	o->end_ns = p->end_ns;
	o->heap = enc_mem(a, &p->mem);
	o->peak_bytes = p->peak_bytes;
	o->peak_tensors = p->peak_tensors;
	o->anon_maps = enc_maps(a, &p->maps);
	o->anon_maps_resident_peak = p->maps_resident_peak;
	o->anon_maps_recorded = true;
	o->new_bytes_var = p->added_var;
	o->peak_var = p->peak_var;
	o->peak_bias_bound = p->peak_bias_bound;
	o->unknown_frees = p->unknown_frees;
	memprof__drops__init(drops);
	drops->ring = p->drops_ring;
	drops->bpf = p->drops_bpf;
	drops->invocations = p->invocations_dropped;
	drops->markers = p->dropped_markers;
	drops->sites = p->sites_dropped;
	drops->heap = p->drops_heap;
	drops->stream_chunks = p->stream_chunks_lost;
	drops->bpf_allocs = p->drops_bpf_allocs;
	drops->bpf_frees = p->drops_bpf_frees;
	drops->bpf_reallocs = p->drops_bpf_reallocs;
	drops->bpf_others = p->drops_bpf_others;
	o->drops = drops;
	memprof__anomalies__init(an);
	an->unmatched_ends = p->unmatched_ends;
	an->unmatched_tag_ends = p->unmatched_tag_ends;
	an->orphan_shapes = p->orphan_shapes;
	an->accounting_errors = p->accounting_errors;
	an->probe_hits_unmatched = p->probe_hits_unmatched;
	an->allocator_internal_frees = p->internal_frees;
	an->unseen_objects = p->unseen_objects;
	an->n_unseen_object_names = p->n_unseen_names;
	an->unseen_object_names = arena_alloc(a, p->n_unseen_names, sizeof(char *));
	for (uint32_t i = 0; an->unseen_object_names && i < p->n_unseen_names; i++)
		an->unseen_object_names[i] = (char *)p->unseen_names[i];
	if (!an->unseen_object_names)
		an->n_unseen_object_names = 0;
	o->anomalies = an;
	o->truncated = p->truncated;

	o->n_kernel_names = p->n_names;
	o->kernel_names = arena_alloc(a, p->n_names, sizeof(char *));
	for (uint32_t i = 0; o->kernel_names && i < p->n_names; i++)
		o->kernel_names[i] = str_or_empty(p->names[i]);
	o->n_invocations = p->n_invocations;
	o->invocations = arena_alloc(a, p->n_invocations, sizeof(*o->invocations));
	for (uint32_t i = 0; o->invocations && i < p->n_invocations; i++)
		o->invocations[i] = enc_invocation(a, &p->invocations[i]);
	o->n_kernels = p->n_kernels;
	o->kernels = arena_alloc(a, p->n_kernels, sizeof(*o->kernels));
	for (uint32_t i = 0; o->kernels && i < p->n_kernels; i++)
		o->kernels[i] = enc_kernel(a, &p->kernels[i]);
	o->n_phases = p->n_phases;
	o->phases = arena_alloc(a, p->n_phases, sizeof(*o->phases));
	for (uint32_t i = 0; o->phases && i < p->n_phases; i++) {
		const struct mp_phase *ph = &p->phases[i];
		Memprof__Phase *po = arena_alloc(a, 1, sizeof(*po));

		if (!po)
			break;
		memprof__phase__init(po);
		po->name = str_or_empty(ph->name);
		po->first_ns = ph->first_ns;
		po->duration_ns = ph->duration_ns;
		po->entries = ph->entries;
		po->heap = enc_mem(a, &ph->mem);
		po->peak_bytes = ph->peak_bytes;
		po->peak_bytes_var = ph->peak_var;
		po->rss_peak = ph->rss_peak;
		po->anon_maps = enc_maps(a, &ph->maps);
		po->n_pools = ph->n_pools;
		po->pools = enc_pool_buckets(a, ph->pools, ph->n_pools);
		po->n_peak_owners = ph->n_peak_owners;
		po->peak_owners = enc_peak_parts(a, ph->peak_owners, ph->n_peak_owners);
		po->n_peak_tags = ph->n_peak_tags;
		po->peak_tags = enc_peak_parts(a, ph->peak_tags, ph->n_peak_tags);
		o->phases[i] = po;
	}
	o->peak_parts = p->peak_parts;
	o->n_owners = p->n_owners;
	o->owners = enc_pools(a, p->owners, p->n_owners);
	o->n_tags = p->n_tags;
	o->tags = enc_pools(a, p->tags, p->n_tags);
	o->n_mem_pools = p->n_mempools;
	o->mem_pools = enc_mempools(a, p->mempools, p->n_mempools);

	memprof__rss__init(rss);
	rss->n_timeline = p->n_rss;
	rss->timeline = arena_alloc(a, p->n_rss, sizeof(*rss->timeline));
	{
		Memprof__RssPoint *pts = arena_alloc(a, p->n_rss, sizeof(*pts));

		for (uint32_t i = 0; pts && rss->timeline && i < p->n_rss; i++) {
			memprof__rss_point__init(&pts[i]);
			pts[i].ts_ns = p->rss[i].ts_ns;
			pts[i].vm_rss = p->rss[i].vm_rss;
			pts[i].rss_anon = p->rss[i].rss_anon;
			pts[i].rss_file = p->rss[i].rss_file;
			pts[i].rss_shmem = p->rss[i].rss_shmem;
			pts[i].vm_swap = p->rss[i].vm_swap;
			pts[i].pss = p->rss[i].pss;
			pts[i].heap_live = p->rss[i].heap_live;
			pts[i].anon_maps_live = p->rss[i].maps_live;
			rss->timeline[i] = &pts[i];
		}
	}
	rss->stride = p->rss_stride;
	rss->samples = p->rss_samples;
	rss->peak = p->rss_peak;
	rss->vm_hwm = p->vm_hwm;
	rss->exact_unattributed = p->rss_exact_unattributed;
	rss->heap_live_recorded = true;
	o->rss = rss;
	enc_symbols(a, p, o);
	enc_hardening(a, p, o);
	enc_limits(a, p, o);
	enc_wrappers(a, p, o);
	return a->failed ? NULL : o;
}

/* ---- the sites, written by hand: a program's half million Site
 * messages cost protobuf-c a struct each and a walk of every field by
 * reflection, twice (size, then pack). The bytes are those protobuf-c
 * writes: its fields in ascending number, a proto3 scalar left out when it
 * is 0 (a double: when it compares equal to 0, -0.0 too), no presence. ---- */

enum { PB_VARINT = 0, PB_FIXED64 = 1, PB_LEN = 2, PB_FIXED32 = 5 };

#define PB_SITES 21 /* memprof.Profile.sites */
/* The bytes of the largest site: its key, its length and its fields. */
#define PB_SITE_MAX (2 + 2 + 150)

static uint8_t *put_varint(uint8_t *b, uint64_t v)
{
	while (v >= 0x80) {
		*b++ = (uint8_t)(v | 0x80);
		v >>= 7;
	}
	*b++ = (uint8_t)v;
	return b;
}

/* 7 bits a byte, without a branch: sizing half a million sites costs
 * what writing them does otherwise. */
static size_t varint_len(uint64_t v)
{
	return ((63 - __builtin_clzll(v | 1)) * 9 + 73) / 64;
}

static size_t uint_len(uint32_t field, uint64_t v)
{
	return v ? varint_len((uint64_t)field << 3 | PB_VARINT) + varint_len(v) : 0;
}

static uint8_t *put_uint(uint8_t *b, uint32_t field, uint64_t v)
{
	if (!v)
		return b;
	b = put_varint(b, (uint64_t)field << 3 | PB_VARINT);
	return put_varint(b, v);
}

static size_t double_len(uint32_t field, double v)
{
	return v != 0 ? varint_len((uint64_t)field << 3 | PB_FIXED64) + 8 : 0;
}

static uint8_t *put_double(uint8_t *b, uint32_t field, double v)
{
	uint64_t u;

	if (v == 0)
		return b;
	b = put_varint(b, (uint64_t)field << 3 | PB_FIXED64);
	memcpy(&u, &v, sizeof(u));
	for (int i = 0; i < 8; i++)
		*b++ = (uint8_t)(u >> 8 * i);
	return b;
}

/* The fields of site @st (@var: its variances, or NULL) as the protobuf-c
 * encoder before wrote them (peak_* only when known): site_len() bytes,
 * which put_site() writes, field for field (at most 150). */
static size_t site_len(const struct mp_site *st, const struct mp_site_var *var)
{
	bool peak = st->peak_space != MP_UNKNOWN;
	size_t n;

	n = uint_len(1, st->caller) + uint_len(2, st->name) + uint_len(3, st->phase) +
	    uint_len(4, st->owner) + uint_len(5, st->tid) + uint_len(6, st->alloc_objects) +
	    uint_len(7, st->alloc_space) + uint_len(8, st->inuse_objects) +
	    uint_len(9, st->inuse_space) + uint_len(10, peak ? st->peak_objects : 0) +
	    uint_len(11, peak ? st->peak_space : 0) + uint_len(12, peak);
	if (var)
		n += double_len(40, var->alloc_space) + double_len(41, var->inuse_space);
	return n + uint_len(50, st->pool) + uint_len(60, st->stack) +
	       uint_len(80, !!(st->flags & MP_SITE_F_OTHER)) + uint_len(81, st->error_space);
}

static uint8_t *put_site(uint8_t *b, const struct mp_site *st, const struct mp_site_var *var)
{
	bool peak = st->peak_space != MP_UNKNOWN;

	b = put_uint(b, 1, st->caller);
	b = put_uint(b, 2, st->name);
	b = put_uint(b, 3, st->phase);
	b = put_uint(b, 4, st->owner);
	b = put_uint(b, 5, st->tid);
	b = put_uint(b, 6, st->alloc_objects);
	b = put_uint(b, 7, st->alloc_space);
	b = put_uint(b, 8, st->inuse_objects);
	b = put_uint(b, 9, st->inuse_space);
	b = put_uint(b, 10, peak ? st->peak_objects : 0);
	b = put_uint(b, 11, peak ? st->peak_space : 0);
	b = put_uint(b, 12, peak);
	if (var) {
		b = put_double(b, 40, var->alloc_space);
		b = put_double(b, 41, var->inuse_space);
	}
	b = put_uint(b, 50, st->pool);
	b = put_uint(b, 60, st->stack);
	b = put_uint(b, 80, !!(st->flags & MP_SITE_F_OTHER)); /* limits */
	return put_uint(b, 81, st->error_space);
}

/* Profile.sites: each site a key, a length and its fields. */
static size_t sites_len(const struct mp_profile *p)
{
	size_t n = p->n_sites * varint_len(PB_SITES << 3 | PB_LEN);

	for (uint32_t i = 0; i < p->n_sites; i++) {
		size_t l = site_len(&p->sites[i], p->site_vars ? &p->site_vars[i] : NULL);

		n += varint_len(l) + l;
	}
	return n;
}

/* The sites_len() bytes of Profile.sites up to @end: each site's fields
 * written after a 1-byte length, moved up by one in the rare site of 128
 * bytes or more (sites_len() counted 2 bytes for its length). NULL (a bug:
 * site_len() and put_site() differ) past @end, at most PB_SITE_MAX bytes
 * past it. */
static uint8_t *put_sites(uint8_t *b, const uint8_t *end, const struct mp_profile *p)
{
	for (uint32_t i = 0; i < p->n_sites && b <= end; i++) {
		const struct mp_site_var *var = p->site_vars ? &p->site_vars[i] : NULL;
		size_t l;

		b = put_varint(b, PB_SITES << 3 | PB_LEN);
		l = put_site(b + 1, &p->sites[i], var) - (b + 1);
		if (l >= 0x80)
			memmove(b + 2, b + 1, l);
		b = put_varint(b, l) + l;
	}
	return b == end ? b : NULL;
}

static int get_varint(const uint8_t *m, size_t len, size_t *at, uint64_t *ret)
{
	uint64_t v = 0;

	for (unsigned s = 0; s < 64 && *at < len; s += 7) {
		uint8_t c = m[(*at)++];

		v |= (uint64_t)(c & 0x7f) << s;
		if (!(c & 0x80)) {
			*ret = v;
			return 0;
		}
	}
	return -EINVAL;
}

/* Where in the packed message @m protobuf-c, which writes fields in
 * ascending number, would have put field @field: the offset of the first
 * field numbered above it. -EINVAL (a bug) if @m is not a well-formed
 * message or already holds @field. */
static int field_offset(const uint8_t *m, size_t len, uint32_t field, size_t *ret)
{
	size_t at = 0;

	while (at < len) {
		size_t start = at;
		uint64_t key, v;

		if (get_varint(m, len, &at, &key) < 0 || key >> 3 == field)
			return -EINVAL;
		if (key >> 3 > field) {
			*ret = start;
			return 0;
		}
		switch (key & 7) {
		case PB_VARINT:
			if (get_varint(m, len, &at, &v) < 0)
				return -EINVAL;
			break;
		case PB_FIXED64:
		case PB_FIXED32:
			v = (key & 7) == PB_FIXED64 ? 8 : 4;
			if (v > len - at)
				return -EINVAL;
			at += v;
			break;
		case PB_LEN:
			if (get_varint(m, len, &at, &v) < 0 || v > len - at)
				return -EINVAL;
			at += v;
			break;
		default:
			return -EINVAL;
		}
	}
	*ret = len;
	return 0;
}

/* protobuf-c packs the profile without its sites at the end of the buffer;
 * the fields before the sites move down to make room for them. */
int mp_profile_encode_with(const struct mp_profile *p, size_t room, mp_profile_room_fn get,
			   void *ctx, uint8_t **ret_buf, size_t *ret_len)
{
	struct arena a = { 0 };
	Memprof__Profile *o;
	uint8_t *buf = NULL, *m;
	size_t len, sites, at;
	int r = -ENOMEM;

	*ret_buf = NULL;
	o = enc_profile(&a, p);
	if (!o)
		goto out;
	len = memprof__profile__get_packed_size(o);
	sites = sites_len(p);
	if (sites > SIZE_MAX - PB_SITE_MAX - room || len > SIZE_MAX - PB_SITE_MAX - room - sites)
		goto out;
	/* see put_sites() for the slack past the end */
	r = get(ctx, room + sites + len, PB_SITE_MAX, &buf);
	*ret_buf = buf;
	if (r < 0)
		goto out;
	m = buf + room;
	memprof__profile__pack(o, m + sites);
	r = field_offset(m + sites, len, PB_SITES, &at);
	if (r < 0)
		goto out;
	if (sites) {
		memmove(m, m + sites, at);
		if (!put_sites(m + at, m + at + sites, p)) {
			r = -EINVAL;
			goto out;
		}
	}
	*ret_len = sites + len;
out:
	arena_free(&a);
	return r;
}

static int room_malloc(void *ctx, size_t len, size_t slack, uint8_t **ret)
{
	(void)ctx;
	*ret = malloc(len + slack);
	return *ret ? 0 : -ENOMEM;
}

int mp_profile_encode_room(const struct mp_profile *p, size_t room, uint8_t **ret_buf,
			   size_t *ret_len)
{
	uint8_t *buf = NULL;
	int r = mp_profile_encode_with(p, room, room_malloc, NULL, &buf, ret_len);

	if (r < 0) {
		free(buf);
		return r;
	}
	*ret_buf = buf;
	return 0;
}

int mp_profile_encode(const struct mp_profile *p, uint8_t **ret_buf, size_t *ret_len)
{
	return mp_profile_encode_room(p, 0, ret_buf, ret_len);
}
