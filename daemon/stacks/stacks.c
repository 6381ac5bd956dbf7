// SPDX-License-Identifier: MIT
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "hashmap.h"
#include "stacks.h"

/* Entries live in chunks that never move: the table grows one chunk at a
 * time, never by copying what it holds. */
#define CHUNK_BITS 12
#define CHUNK (1u << CHUNK_BITS)

/* A node of the prefix tree: @frame called from node @parent (0: the
 * outermost frame), @depth frames from the outermost one; @stack: the ids
 * of the stacks whose innermost frame it is, untruncated and truncated
 * (0: none yet). A stack is found by its path, without an index of its
 * own: one cache miss less per stack interned. */
struct node {
	uint64_t frame;
	uint32_t parent;
	uint32_t depth;
	uint32_t stack[2];
};

/* A node found by (parent, frame) lately: the node index's front. */
struct near {
	uint64_t frame;
	uint32_t parent;
	uint32_t id1; /* node id; 0: empty */
};

/* Entries of the front: 256 KiB, mostly in the daemon's caches, where a
 * probe of the index and the read of the node it names miss twice (on
 * the PyTorch --stacks script the intern's CPU fell by a fifth; 1 MiB did
 * no better). */
#define NEAR_BITS 14

struct mp_stack_table {
	struct node **nodes; /* chunks; node id i (>= 1) at [(i-1) / CHUNK] */
	uint32_t n_nodes, node_chunks, node_dir;
	uint32_t **stacks; /* chunks; per stack its leaf node << 1 | truncated */
	uint32_t n, stack_chunks, stack_dir;
	struct mp_hashmap node_ids; /* (parent, frame) -> node id - 1 */
	struct near *near; /* NULL until the first node */
	uint32_t root_stack[2]; /* the ids of the stacks without frames */
	uint64_t frames_total; /* sum of the stacks' depths */
	uint64_t dropped;
	/* a stack was dropped after some of its nodes were added: they may
	 * be on no stack's path */
	bool orphans;
	uint32_t last_new; /* frames of the last stack interned that had no node */
	uint32_t max_stacks; /* bounds (mp_stack_table_set_max()) */
	uint64_t max_frames; /* on frames_total */
	uint32_t max_nodes; /* max_frames / MP_STACKS_FRAMES_PER_NODE */
	uint64_t bytes; /* chunks and chunk directories */
	struct mp_stack scratch; /* mp_stack_table_get(): stack scratch_id */
	uint32_t scratch_id;
	uint64_t scratch_frames[MP_STACKS_MAX_DEPTH];
	/* The path of the last stack interned, from the outermost frame:
	 * its frames and their nodes, as far as they exist (path_n). The
	 * next stack shares its outer callers more often than not: those
	 * nodes are known without a lookup. */
	uint64_t path_frames[MP_STACKS_MAX_DEPTH];
	uint32_t path_nodes[MP_STACKS_MAX_DEPTH];
	uint32_t path_n;
	/* The index's hash of each node of the path (node_hash()); past
	 * path_n, of the frames of the stack being interned. */
	uint64_t path_hash[MP_STACKS_MAX_DEPTH];
};

int mp_stack_table_new(struct mp_stack_table **ret)
{
	struct mp_stack_table *t = calloc(1, sizeof(*t));

	if (!t)
		return -ENOMEM;
	mp_stack_table_set_max(t, 0, 0);
	*ret = t;
	return 0;
}

void mp_stack_table_set_max(struct mp_stack_table *t, uint32_t max_stacks, uint64_t max_frames)
{
	/* before the first stack: the maps have allocated nothing yet */
	if (t->n || t->n_nodes)
		return;
	t->max_frames = !max_frames			  ? MP_STACKS_DEFAULT_FRAMES :
			max_frames < MP_STACKS_MAX_FRAMES ? max_frames :
							    MP_STACKS_MAX_FRAMES;
	if (!max_stacks)
		max_stacks = (uint32_t)(t->max_frames / MP_STACKS_FRAMES_PER_STACK);
	t->max_stacks = !max_stacks ? 1 : max_stacks < MP_STACKS_MAX ? max_stacks : MP_STACKS_MAX;
	t->max_nodes = (uint32_t)(t->max_frames / MP_STACKS_FRAMES_PER_NODE);
	if (!t->max_nodes)
		t->max_nodes = 1;
	mp_hashmap_init(&t->node_ids, t->max_nodes);
}

void mp_stack_table_free(struct mp_stack_table *t)
{
	if (!t)
		return;
	for (uint32_t i = 0; i < t->node_chunks; i++)
		free(t->nodes[i]);
	free(t->nodes);
	for (uint32_t i = 0; i < t->stack_chunks; i++)
		free(t->stacks[i]);
	free(t->stacks);
	mp_hashmap_free(&t->node_ids);
	free(t->near);
	free(t);
}

static inline const struct node *node_at(const struct mp_stack_table *t, uint32_t id)
{
	return &t->nodes[(id - 1) >> CHUNK_BITS][(id - 1) & (CHUNK - 1)];
}

static inline uint32_t stack_at(const struct mp_stack_table *t, uint32_t id)
{
	return t->stacks[(id - 1) >> CHUNK_BITS][(id - 1) & (CHUNK - 1)];
}

/* Room for entry @n (0-based) of a chunked array: a new chunk when @n
 * starts one, a larger directory when that is full. 0 or -ENOMEM. */
static int chunk_room(struct mp_stack_table *t, void ***dir, uint32_t *n_chunks, uint32_t *dir_cap,
		      uint32_t n, size_t size)
{
	void *c;

	if (n & (CHUNK - 1) || n >> CHUNK_BITS < *n_chunks)
		return 0;
	if (*n_chunks == *dir_cap) {
		uint32_t ncap = *dir_cap ? *dir_cap * 2 : 16;
		void **nd = realloc(*dir, ncap * sizeof(*nd));

		if (!nd)
			return -ENOMEM;
		t->bytes += (uint64_t)(ncap - *dir_cap) * sizeof(*nd);
		*dir = nd;
		*dir_cap = ncap;
	}
	c = malloc(CHUNK * size);
	if (!c)
		return -ENOMEM;
	t->bytes += CHUNK * size;
	(*dir)[(*n_chunks)++] = c;
	return 0;
}

struct node_key {
	uint32_t parent;
	uint64_t frame;
};

/* The index's hash of the node of @frame below the node whose hash is @h
 * (below the root: PATH_SEED). A hash of the frames from the outermost
 * one, which is the parent's identity: a stack's hashes are all known
 * before any of its nodes is found, so their slots are fetched at once
 * instead of one cache miss after the other. */
#define PATH_SEED 0x6a09e667f3bcc909ull
/* Slots fetched ahead of the lookups: a stack's frames past the last
 * stack's path are a few; a new path's are not looked up past its first
 * missing node. */
#define PATH_PREFETCH 16

static inline uint64_t node_hash(uint64_t h, uint64_t frame)
{
	return mp_hash_combine(h, frame);
}

/* The hashes of the nodes of @frames[0..n) from depth @d on (below the
 * path's node at @d - 1) into t->path_hash, their slots (and fronts)
 * fetched. */
static void path_hashes(struct mp_stack_table *t, const uint64_t *frames, uint32_t n, uint32_t d)
{
	uint64_t h = d ? t->path_hash[d - 1] : PATH_SEED;

	for (uint32_t e = d; e < n; e++) {
		h = node_hash(h, frames[n - 1 - e]);
		t->path_hash[e] = h;
		if (e - d < PATH_PREFETCH) {
			mp_hashmap_prefetch(&t->node_ids, h);
			if (t->near)
				__builtin_prefetch(&t->near[h >> (64 - NEAR_BITS)]);
		}
	}
}

static bool same_node(const void *ctx, uint32_t id, const void *key)
{
	const struct node *n = node_at(ctx, id + 1);
	const struct node_key *k = key;

	return n->frame == k->frame && n->parent == k->parent;
}

/* The nodes of @frames[0..n) that exist, from the outermost frame, into
 * t->path_*: those shared with the last stack's path as they are, the
 * rest looked up. How many exist (n: the whole path). */
static uint32_t find_path(struct mp_stack_table *t, const uint64_t *frames, uint32_t n)
{
	uint32_t d = 0, parent, id;

	while (d < n && d < t->path_n && t->path_frames[d] == frames[n - 1 - d])
		d++;
	path_hashes(t, frames, n, d);
	parent = d ? t->path_nodes[d - 1] : 0;
	for (; d < n; d++) {
		struct node_key k = { .parent = parent, .frame = frames[n - 1 - d] };
		uint64_t h = t->path_hash[d];
		struct near *e = t->near ? &t->near[h >> (64 - NEAR_BITS)] : NULL;

		if (e && e->id1 && e->frame == k.frame && e->parent == parent) {
			id = e->id1 - 1;
		} else {
			if (mp_hashmap_find(&t->node_ids, h, same_node, t, &k, &id) < 0)
				break;
			if (e)
				*e = (struct near){ .frame = k.frame,
						    .parent = parent,
						    .id1 = id + 1 };
		}
		parent = id + 1;
		t->path_frames[d] = k.frame;
		t->path_nodes[d] = parent;
	}
	t->path_n = d;
	return d;
}

/* Adds the nodes of @frames[0..n) past the @d that exist (root first, so
 * that a parent's id is below its children's). false when out of
 * memory, the nodes added so far kept (and in t->path_*). */
static bool add_path(struct mp_stack_table *t, const uint64_t *frames, uint32_t n, uint32_t d)
{
	uint32_t parent = d ? t->path_nodes[d - 1] : 0;

	if (!t->near) {
		t->near = calloc(1u << NEAR_BITS, sizeof(*t->near));
		if (!t->near)
			return false;
		t->bytes += (1u << NEAR_BITS) * sizeof(*t->near);
	}
	for (; d < n; d++) {
		uint64_t frame = frames[n - 1 - d], h = t->path_hash[d];
		struct node *nd;

		if (chunk_room(t, (void ***)&t->nodes, &t->node_chunks, &t->node_dir, t->n_nodes,
			       sizeof(struct node)) < 0 ||
		    mp_hashmap_insert(&t->node_ids, h, t->n_nodes) < 0)
			return false;
		t->near[h >> (64 - NEAR_BITS)] =
			(struct near){ .frame = frame, .parent = parent, .id1 = t->n_nodes + 1 };
		nd = &t->nodes[t->n_nodes >> CHUNK_BITS][t->n_nodes & (CHUNK - 1)];
		*nd = (struct node){
			.frame = frame, .parent = parent, .depth = d + 1, .stack = { 0, 0 }
		};
		parent = ++t->n_nodes;
		t->path_frames[d] = frame;
		t->path_nodes[d] = parent;
		t->path_n = d + 1;
	}
	return true;
}

/* Where the id of the stack ending at node @leaf (0: no frames) with
 * truncation flag @trunc is kept. */
static inline uint32_t *stack_slot(struct mp_stack_table *t, uint32_t leaf, uint32_t trunc)
{
	return leaf ? &t->nodes[(leaf - 1) >> CHUNK_BITS][(leaf - 1) & (CHUNK - 1)].stack[trunc] :
		      &t->root_stack[trunc];
}

uint32_t mp_stack_table_intern(struct mp_stack_table *t, const uint64_t *frames, uint32_t n,
			       uint32_t flags)
{
	uint32_t d, leaf, trunc = flags & 1, *slot;

	t->last_new = 0;
	if (n > MP_STACKS_MAX_DEPTH)
		goto drop;
	d = find_path(t, frames, n);
	if (d == n) {
		slot = stack_slot(t, n ? t->path_nodes[n - 1] : 0, trunc);
		if (*slot)
			return *slot;
	}
	/* a stack not seen before; a small allocation's only while the
	 * table is below the reserve of each bound */
	if (!(flags & MP_STACKS_F_LARGE) &&
	    (t->n >= t->max_stacks - t->max_stacks / MP_STACKS_RESERVE ||
	     t->frames_total + n > t->max_frames - t->max_frames / MP_STACKS_RESERVE ||
	     t->n_nodes + (uint64_t)(n - d) > t->max_nodes - t->max_nodes / MP_STACKS_RESERVE))
		goto drop;
	if (t->n >= t->max_stacks || t->frames_total + n > t->max_frames ||
	    t->n_nodes + (uint64_t)(n - d) > t->max_nodes)
		goto drop;
	t->last_new = n - d;
	if (!add_path(t, frames, n, d))
		goto orphaned;
	leaf = n ? t->path_nodes[n - 1] : 0;
	if (chunk_room(t, (void ***)&t->stacks, &t->stack_chunks, &t->stack_dir, t->n,
		       sizeof(uint32_t)) < 0)
		goto orphaned;
	t->stacks[t->n >> CHUNK_BITS][t->n & (CHUNK - 1)] = leaf << 1 | trunc;
	t->frames_total += n;
	*stack_slot(t, leaf, trunc) = ++t->n;
	return t->n;
orphaned:
	t->orphans |= n > d;
drop:
	t->dropped++;
	return 0;
}

uint32_t mp_stack_table_last_new(const struct mp_stack_table *t)
{
	return t->last_new;
}

uint32_t mp_stack_table_count(const struct mp_stack_table *t)
{
	return t->n;
}

uint64_t mp_stack_table_bytes(const struct mp_stack_table *t)
{
	return t->bytes + (t->node_ids.slots ? (uint64_t)t->node_ids.mask + 1 : 0) *
				  sizeof(struct mp_hashmap_slot);
}

/* The frames of stack @id into @out (room for its depth); its depth. */
static uint32_t frames_of(const struct mp_stack_table *t, uint32_t id, uint64_t *out,
			  uint32_t *ret_flags)
{
	uint32_t v = stack_at(t, id), leaf = v >> 1, n = 0;

	*ret_flags = v & 1 ? MP_STACK_F_TRUNCATED : 0;
	for (; leaf; n++) {
		const struct node *nd = node_at(t, leaf);

		out[n] = nd->frame;
		leaf = nd->parent;
	}
	return n;
}

const struct mp_stack *mp_stack_table_get(struct mp_stack_table *t, uint32_t id)
{
	if (!id || id > t->n)
		return NULL;
	/* stacks never change: the one asked for last is still laid out */
	if (id == t->scratch_id)
		return &t->scratch;
	t->scratch_id = id;
	t->scratch.frames = t->scratch_frames;
	t->scratch.n_frames = frames_of(t, id, t->scratch_frames, &t->scratch.flags);
	return &t->scratch;
}

int mp_stack_table_export(const struct mp_stack_table *t, struct mp_profile *p)
{
	struct mp_stack_tree *tr = calloc(1, sizeof(*tr));
	uint32_t nn = t->n_nodes;
	struct mp_stack *st = calloc(t->n ? t->n : 1, sizeof(*st));
	uint32_t *depth;

	if (tr) {
		tr->frame = malloc((nn ? nn : 1) * sizeof(*tr->frame));
		tr->parent = malloc((nn ? nn : 1) * sizeof(*tr->parent));
		tr->leaf = malloc((t->n ? t->n : 1) * sizeof(*tr->leaf));
	}
	if (!tr || !st || !tr->frame || !tr->parent || !tr->leaf) {
		mp_stack_tree_free(tr);
		free(st);
		return -ENOMEM;
	}
	tr->n_nodes = nn;
	tr->complete = !t->orphans;
	/* the nodes' depths laid out as they are read: a stack's depth is
	 * then a read of 4 bytes, not of its leaf's node, a cache miss each
	 * (~600,000 stacks on PyTorch) */
	depth = malloc((nn ? nn : 1) * sizeof(*depth));
	for (uint32_t c = 0; c < t->node_chunks; c++) {
		uint32_t lo = c << CHUNK_BITS, k = nn - lo < CHUNK ? nn - lo : CHUNK;

		for (uint32_t i = 0; i < k; i++) {
			tr->frame[lo + i] = t->nodes[c][i].frame;
			tr->parent[lo + i] = t->nodes[c][i].parent;
			if (depth)
				depth[lo + i] = t->nodes[c][i].depth;
		}
	}
	for (uint32_t i = 0; i < t->n; i++) {
		uint32_t v = stack_at(t, i + 1), leaf = v >> 1;

		tr->leaf[i] = leaf;
		st[i] = (struct mp_stack){ .n_frames = !leaf ? 0 :
						       depth ? depth[leaf - 1] :
							       node_at(t, leaf)->depth,
					   .flags = v & 1 ? MP_STACK_F_TRUNCATED : 0 };
	}
	free(depth);
	mp_profile_stacks_free(p);
	p->stacks = st;
	p->stack_tree = tr;
	p->n_stacks = t->n;
	if (t->n && p->format_version < MP_PROFILE_FORMAT_STACK_TREE)
		p->format_version = MP_PROFILE_FORMAT_STACK_TREE;
	p->stacks_dropped = t->dropped;
	p->limits.stacks = t->max_stacks;
	p->limits.stack_frames = t->max_frames;
	if (t->dropped)
		p->limits.reached |= MP_LIMIT_STACKS;
	return 0;
}
