// SPDX-License-Identifier: MIT
/* bench/wrappers: an allocator wrapper in its own object (not a tail
 * call, so malloc's caller is bench_alloc). */
#include <stdlib.h>

void *bench_alloc(size_t n);

volatile unsigned long bench_alloc_calls;

void *bench_alloc(size_t n)
{
	void *p = malloc(n);

	bench_alloc_calls++;
	return p;
}
