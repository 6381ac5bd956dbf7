// SPDX-License-Identifier: MIT
#include <stdlib.h>

void *owner_b_alloc(size_t n);

void *owner_b_alloc(size_t n)
{
	return malloc(n);
}
