// SPDX-License-Identifier: MIT
/* A library that calls glibc's allocator by its own names, past any
 * interposer: the in-process path cannot see it and says so. */
#include <stddef.h>

void *__libc_malloc(size_t n);
void __libc_free(void *p);
void *direct_alloc(size_t n);
void direct_free(void *p);

void *direct_alloc(size_t n)
{
	return __libc_malloc(n);
}

void direct_free(void *p)
{
	__libc_free(p);
}
