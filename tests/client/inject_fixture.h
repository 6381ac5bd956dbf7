/* SPDX-License-Identifier: MIT */
/* The blocks an inject_fixture.c object allocates. */
#ifndef INJECT_FIXTURE_H
#define INJECT_FIXTURE_H

#include <stddef.h>

struct fx_blocks {
	void *m; /* malloc(base + 1) */
	void *c; /* calloc(3, base + 2) */
	void *r0; /* malloc(base + 3), then */
	void *r; /* realloc(r0, base + 4) */
	void *pm; /* posix_memalign(64, base + 5) */
	void *aa; /* aligned_alloc(64, base + 64) */
};

typedef void fx_exercise_fn(struct fx_blocks *b, size_t base);
typedef void fx_release_fn(struct fx_blocks *b);
typedef void *fx_malloc_t(size_t n);
typedef fx_malloc_t *fx_malloc_fn(void);

fx_exercise_fn needed_exercise, relro_exercise;
fx_release_fn needed_release, relro_release;

#endif
