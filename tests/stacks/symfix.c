// SPDX-License-Identifier: MIT
/* Object file for the symbolizer's tests: two named functions at known
 * symbols. Built as a non-PIE executable (ET_EXEC) and as a PIE. */
#include <stdlib.h>

__attribute__((noinline)) void *symfix_alpha(size_t n)
{
	void *p = malloc(n);

	__asm__ volatile("" : : "r"(p) : "memory");
	return p;
}

__attribute__((noinline)) void *symfix_beta(size_t n)
{
	void *p = symfix_alpha(n + 1);

	__asm__ volatile("" : : "r"(p) : "memory");
	return p;
}

int main(int argc, char **argv)
{
	(void)argv;
	free(symfix_beta((size_t)argc));
	return 0;
}
