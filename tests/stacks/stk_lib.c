// SPDX-License-Identifier: MIT
/* The shared library of the call-stack fixture (fixture_stacks.c): a
 * recursive function that allocates at the bottom. */
#include <stdlib.h>

#include "stk.h"

void *stk_sink;

/* noinline: one machine frame per level (gcc would otherwise inline the
 * recursion into itself and merge the levels' identical code). */
__attribute__((noinline)) void *lib_recurse(int n, size_t size)
{
	void *p;

	if (n == 0) {
		p = malloc(size);
		stk_sink = p; /* no tail call into malloc */
		return p;
	}
	p = lib_recurse(n - 1, size);
	stk_sink = p; /* no tail call, no loop */
	return p;
}
