// SPDX-License-Identifier: MIT
/*
 * Call-stack fixture with known chains, built at -O2 -fomit-frame-pointer
 * (and stripped, without debug info, statically linked):
 *
 *   100 B  make_buf (inlined) <- run_a <- main
 *   200 B  lib_recurse x4 (shared library, or linked in) <- run_b <- main
 *   600 B  leaf_c <- run_c <- main   (two calls of 300 B)
 *
 * Blocks stay live. Keep tests/stacks/test_stacks.c in sync.
 */
#include <stdlib.h>

#include "stk.h"

void *keep[8];
int nkeep;

static inline __attribute__((always_inline)) void *make_buf(size_t n)
{
	void *p = malloc(n);

	keep[nkeep++] = p;
	return p;
}

__attribute__((noinline)) void run_a(void)
{
	make_buf(100);
	__asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void run_b(void)
{
	keep[nkeep++] = lib_recurse(3, 200);
}

__attribute__((noinline)) void *leaf_c(size_t size)
{
	void *p = malloc(size);

	keep[nkeep++] = p;
	return p;
}

__attribute__((noinline)) void run_c(void)
{
	leaf_c(300);
	leaf_c(300);
	__asm__ volatile("" ::: "memory");
}

int main(void)
{
	run_a();
	run_b();
	run_c();
	return nkeep == 4 ? 0 : 1;
}
