/* SPDX-License-Identifier: MIT */
/*
 * The stubs' "device memory": a static array handed out by a bump pointer,
 * with a small table of live blocks so that a free of an unknown pointer
 * fails as the real runtimes do. Never reused, so addresses stay unique.
 * Single-threaded fixtures only.
 */
#ifndef STUB_MEM_H
#define STUB_MEM_H

#include <stddef.h>
#include <stdint.h>

#define STUB_MEM_BYTES (32u << 20)
#define STUB_MEM_BLOCKS 4096

struct stub_mem {
	unsigned char *base;
	size_t used;
	uintptr_t live[STUB_MEM_BLOCKS];
};

/* @fail_next: the library's "fail the next allocation" flag, consumed. */
static inline void *stub_mem_alloc(struct stub_mem *m, size_t size, int *fail_next)
{
	size_t n = (size + 255) & ~(size_t)255;

	if (*fail_next) {
		*fail_next = 0;
		return NULL;
	}
	if (!size || n > STUB_MEM_BYTES - m->used)
		return NULL;
	for (int i = 0; i < STUB_MEM_BLOCKS; i++) {
		if (!m->live[i]) {
			void *p = m->base + m->used;

			m->used += n;
			m->live[i] = (uintptr_t)p;
			return p;
		}
	}
	return NULL;
}

static inline int stub_mem_free(struct stub_mem *m, const void *p)
{
	for (int i = 0; i < STUB_MEM_BLOCKS; i++) {
		if (p && m->live[i] == (uintptr_t)p) {
			m->live[i] = 0;
			return 0;
		}
	}
	return -1;
}

#endif /* STUB_MEM_H */
