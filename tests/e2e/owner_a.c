// SPDX-License-Identifier: MIT
#include <stdlib.h>

void *owner_a_alloc(size_t n);

void *owner_a_alloc(size_t n)
{
	return malloc(n);
}
