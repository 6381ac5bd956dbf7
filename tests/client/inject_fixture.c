// SPDX-License-Identifier: MIT
/*
 * An object that allocates, for tests/client/test_inject.c: compiled into
 * the test program itself and into shared libraries (linked, full RELRO,
 * dlopen'ed, deep-bound), each with its own FX prefix. Sizes are offset by
 * @base so that each object's records are told apart.
 */
#include <stdlib.h>

#include "inject_fixture.h"

#define CAT2(a, b) a##_##b
#define CAT(a, b) CAT2(a, b)

fx_exercise_fn CAT(FX, exercise);
fx_release_fn CAT(FX, release);
fx_malloc_fn CAT(FX, malloc);

__attribute__((visibility("default"))) void CAT(FX, exercise)(struct fx_blocks *b, size_t base)
{
	b->m = malloc(base + 1);
	b->c = calloc(3, base + 2);
	b->r0 = malloc(base + 3);
	b->r = realloc(b->r0, base + 4);
	if (posix_memalign(&b->pm, 64, base + 5))
		b->pm = NULL;
	/* a multiple of the alignment: bases are multiples of 64 */
	b->aa = aligned_alloc(64, base + 64);
}

__attribute__((visibility("default"))) void CAT(FX, release)(struct fx_blocks *b)
{
	free(b->m);
	free(b->c);
	free(b->r);
	free(b->pm);
	free(b->aa);
	/* not a tail call: the record's caller is this object */
	__asm__ volatile("" ::: "memory");
}

/* The malloc this object calls (its GOT slot). */
__attribute__((visibility("default"))) fx_malloc_t *CAT(FX, malloc)(void)
{
	return malloc;
}
