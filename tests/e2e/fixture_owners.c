// SPDX-License-Identifier: MIT
/*
 * Two shared libraries allocate inside one kernel "mixed": libowner_a
 * 1000 + 500 bytes, libowner_b 2500 bytes, the executable itself 64 bytes.
 */
#include <stdlib.h>

#include <memprof.h>

void *owner_a_alloc(size_t n);
void *owner_b_alloc(size_t n);

int main(void)
{
	void *p[4];

	memprof_kernel_begin("mixed");
	p[0] = owner_a_alloc(1000);
	p[1] = owner_b_alloc(2500);
	p[2] = owner_a_alloc(500);
	p[3] = malloc(64);
	memprof_kernel_end();
	for (int i = 0; i < 4; i++)
		free(p[i]);
	return 0;
}
