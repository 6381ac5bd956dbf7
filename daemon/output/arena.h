/* SPDX-License-Identifier: MIT */
/*
 * A bump allocator for an encoder's scratch tables: everything one
 * encoding allocates comes from one arena and goes with one
 * mp_arena_free(), whatever path the encoding took.
 */
#ifndef MP_OUTPUT_ARENA_H
#define MP_OUTPUT_ARENA_H

#include <stddef.h>

struct mp_arena_block;

struct mp_arena {
	struct mp_arena_block *head;
};

/* @n zeroed elements of @size bytes (aligned for any type), or NULL when
 * out of memory or when n * size overflows. */
void *mp_arena_alloc(struct mp_arena *a, size_t n, size_t size);
/* Frees every block; the arena can be used again. */
void mp_arena_free(struct mp_arena *a);

#endif /* MP_OUTPUT_ARENA_H */
