// SPDX-License-Identifier: MIT
/*
 * Many distinct allocation sites: 200 kernels, each allocating through
 * call stacks of different depths (a block kept, one freed), for the
 * site table's bound (docs/PROFILE.md "Limits").
 */
#include <stdio.h>
#include <stdlib.h>

#include <memprof.h>

static void *keep[200];

static __attribute__((noinline)) void *deep(int d, size_t n)
{
	void *p;

	if (d == 0)
		return malloc(n);
	p = deep(d - 1, n);
	__asm__ volatile("" : : "r"(p) : "memory");
	return p;
}

int main(void)
{
	char name[16];

	for (int i = 0; i < 200; i++) {
		snprintf(name, sizeof(name), "k%d", i);
		memprof_kernel_begin(name);
		keep[i] = deep(i % 8, 1000 + (size_t)i);
		free(deep(i % 5, 500));
		memprof_kernel_end();
	}
	for (int i = 0; i < 200; i++)
		free(keep[i]);
	return 0;
}
