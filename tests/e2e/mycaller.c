// SPDX-License-Identifier: MIT
/* The code that allocates through libmywrap's my_alloc(): the owner once
 * my_alloc is a wrapper. */
#include <stddef.h>

void *my_alloc(size_t n);
void *mycaller_alloc(size_t n);

volatile unsigned long mycaller_calls;

void *mycaller_alloc(size_t n)
{
	void *p = my_alloc(n);

	mycaller_calls++;
	return p;
}
