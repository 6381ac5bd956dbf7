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
 * outermost frame), @depth frames from the outermost one. */
struct node {
	uint64_t frame;
	uint32_t parent;
	uint32_t depth;
};

struct mp_stack_table {
	struct node **nodes; /* chunks; node id i (>= 1) at [(i-1) / CHUNK] */
	uint32_t n_nodes, node_chunks, node_dir;
	uint32_t **stacks; /* chunks; per stack its leaf node << 1 | truncated */
	uint32_t n, stack_chunks, stack_dir;
	struct mp_hashmap node_ids; /* (parent, frame) -> node id - 1 */
	struct mp_hashmap ids; /* frames and flags -> stack id - 1 */
	uint64_t frames_total; /* sum of the stacks' depths */
	uint64_t dropped;
	uint32_t max_stacks; /* bounds (mp_stack_table_set_max()) */
	uint64_t max_frames; /* on frames_total */
	uint32_t max_nodes; /* max_frames / MP_STACKS_FRAMES_PER_NODE */
	uint64_t bytes; /* chunks and chunk directories */
	struct mp_stack scratch; /* mp_stack_table_get(): stack scratch_id */
	uint32_t scratch_id;
	uint64_t scratch_frames[MP_STACKS_MAX_DEPTH];
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
	mp_hashmap_init(&t->ids, t->max_stacks);
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
	mp_hashmap_free(&t->ids);
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

static inline uint64_t node_hash(uint32_t parent, uint64_t frame)
{
	return mp_hash_combine(mp_hash_u64(frame), parent);
}

static bool same_node(const void *ctx, uint32_t id, const void *key)
{
	const struct node *n = node_at(ctx, id + 1);
	const struct node_key *k = key;

	return n->frame == k->frame && n->parent == k->parent;
}

struct stack_key {
	const uint64_t *frames;
	uint32_t n, flags;
};

/* Walks the stack's path from its leaf (frames[0]) to the outermost
 * frame: the nodes of a stack seen often stay in the cache. */
static bool same_stack(const void *ctx, uint32_t id, const void *key)
{
	const struct mp_stack_table *t = ctx;
	const struct stack_key *k = key;
	uint32_t v = stack_at(t, id + 1), leaf = v >> 1;

	if ((v & 1) != k->flags || (leaf ? node_at(t, leaf)->depth : 0) != k->n)
		return false;
	for (uint32_t i = 0; i < k->n; i++) {
		const struct node *n = node_at(t, leaf);

		if (n->frame != k->frames[i])
			return false;
		leaf = n->parent;
	}
	return true;
}

/* The leaf node of @frames[0..n), its missing nodes added (root first, so
 * that a parent's id is below its children's). 0 and no node added when
 * the bound in frames leaves no room for them. */
static uint32_t intern_path(struct mp_stack_table *t, const uint64_t *frames, uint32_t n)
{
	uint32_t parent = 0, i = n, id;

	for (; i > 0; i--) {
		struct node_key k = { .parent = parent, .frame = frames[i - 1] };

		if (mp_hashmap_find(&t->node_ids, node_hash(parent, k.frame), same_node, t, &k,
				    &id) < 0)
			break;
		parent = id + 1;
	}
	if (t->n_nodes + (uint64_t)i > t->max_nodes)
		return 0;
	for (; i > 0; i--) {
		struct node *nd;

		if (chunk_room(t, (void ***)&t->nodes, &t->node_chunks, &t->node_dir, t->n_nodes,
			       sizeof(struct node)) < 0 ||
		    mp_hashmap_insert(&t->node_ids, node_hash(parent, frames[i - 1]), t->n_nodes) <
			    0)
			return 0;
		nd = &t->nodes[t->n_nodes >> CHUNK_BITS][t->n_nodes & (CHUNK - 1)];
		*nd = (struct node){ .frame = frames[i - 1],
				     .parent = parent,
				     .depth = parent ? node_at(t, parent)->depth + 1 : 1 };
		parent = ++t->n_nodes;
	}
	return parent;
}

uint32_t mp_stack_table_intern(struct mp_stack_table *t, const uint64_t *frames, uint32_t n,
			       uint32_t flags)
{
	const struct stack_key k = { .frames = frames, .n = n, .flags = flags & 1 };
	uint64_t h = mp_hash_bytes(frames, n * sizeof(*frames), (uint64_t)n << 1 | k.flags);
	uint32_t id, leaf = 0;

	if (mp_hashmap_find(&t->ids, h, same_stack, t, &k, &id) == 0)
		return id + 1;
	if (t->n >= t->max_stacks || n > MP_STACKS_MAX_DEPTH || t->frames_total + n > t->max_frames)
		goto drop;
	if (n && !(leaf = intern_path(t, frames, n)))
		goto drop;
	if (chunk_room(t, (void ***)&t->stacks, &t->stack_chunks, &t->stack_dir, t->n,
		       sizeof(uint32_t)) < 0 ||
	    mp_hashmap_insert(&t->ids, h, t->n) < 0)
		goto drop;
	t->stacks[t->n >> CHUNK_BITS][t->n & (CHUNK - 1)] = leaf << 1 | k.flags;
	t->frames_total += n;
	return ++t->n;
drop:
	t->dropped++;
	return 0;
}

uint32_t mp_stack_table_count(const struct mp_stack_table *t)
{
	return t->n;
}

uint64_t mp_stack_table_bytes(const struct mp_stack_table *t)
{
	return t->bytes + ((t->node_ids.slots ? (uint64_t)t->node_ids.mask + 1 : 0) +
			   (t->ids.slots ? (uint64_t)t->ids.mask + 1 : 0)) *
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
	struct mp_profile q = { 0 };
	uint64_t off = 0;

	if (mp_profile_stacks_alloc(&q, t->n, t->frames_total) < 0)
		return -ENOMEM;
	for (uint32_t i = 0; i < t->n; i++) {
		struct mp_stack *s = &q.stacks[i];

		s->frames = q.stack_frames + off;
		s->n_frames = frames_of(t, i + 1, s->frames, &s->flags);
		off += s->n_frames;
	}
	mp_profile_stacks_free(p);
	p->stacks = q.stacks;
	p->stack_frames = q.stack_frames;
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
