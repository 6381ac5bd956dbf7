// SPDX-License-Identifier: MIT
/* An allocator wrapper of its own (tests/e2e "wrappers"): my_alloc() calls
 * malloc, and is not a tail call, so malloc's caller is my_alloc. */
#include <stdlib.h>

void *my_alloc(size_t n);

volatile unsigned long my_alloc_calls;

void *my_alloc(size_t n)
{
	void *p = malloc(n);

	my_alloc_calls++;
	return p;
}
