// SPDX-License-Identifier: MIT
#include <stdalign.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "arena.h"

#define BLOCK_BYTES (64u << 10)

struct mp_arena_block {
	struct mp_arena_block *next;
	size_t used, cap;
	alignas(max_align_t) unsigned char data[];
};

void *mp_arena_alloc(struct mp_arena *a, size_t n, size_t size)
{
	const size_t align = alignof(max_align_t);
	struct mp_arena_block *b = a->head;
	size_t bytes, at;

	if (size && n > (SIZE_MAX - align) / size)
		return NULL;
	bytes = n * size;
	if (!bytes)
		bytes = 1;
	if (b) {
		at = (b->used + align - 1) & ~(align - 1);
		if (at <= b->cap && bytes <= b->cap - at) {
			b->used = at + bytes;
			return memset(b->data + at, 0, bytes);
		}
	}
	/* A block of its own for a large request, else a fresh standard one. */
	size_t cap = bytes > BLOCK_BYTES / 4 ? bytes : BLOCK_BYTES;

	if (cap > SIZE_MAX - sizeof(*b))
		return NULL;
	b = malloc(sizeof(*b) + cap);
	if (!b)
		return NULL;
	b->cap = cap;
	b->used = bytes;
	if (cap == bytes && a->head) {
		/* Keep filling the current block. */
		b->next = a->head->next;
		a->head->next = b;
	} else {
		b->next = a->head;
		a->head = b;
	}
	return memset(b->data, 0, bytes);
}

void mp_arena_free(struct mp_arena *a)
{
	while (a->head) {
		struct mp_arena_block *b = a->head;

		a->head = b->next;
		free(b);
	}
}
