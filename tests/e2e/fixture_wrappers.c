// SPDX-License-Identifier: MIT
/*
 * Allocator wrappers: inside kernel "wrapped", libmycaller allocates 3000
 * and 700 bytes through libmywrap's my_alloc(), and the executable 64
 * bytes with malloc.
 */
#include <stdlib.h>

#include <memprof.h>

void *mycaller_alloc(size_t n);

int main(void)
{
	void *p[3];

	memprof_kernel_begin("wrapped");
	p[0] = mycaller_alloc(3000);
	p[1] = mycaller_alloc(700);
	p[2] = malloc(64);
	memprof_kernel_end();
	for (int i = 0; i < 3; i++)
		free(p[i]);
	return 0;
}
