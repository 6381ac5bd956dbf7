// SPDX-License-Identifier: MIT
/* Exits with status 3 in the middle of kernel "doomed" after allocating
 * 1000 bytes: the profile must be flushed and marked truncated. */
#include <stdlib.h>
#include <unistd.h>

#include <memprof.h>

int main(void)
{
	memprof_kernel_begin("doomed");
	if (!malloc(1000))
		return 1;
	_exit(3);
}
