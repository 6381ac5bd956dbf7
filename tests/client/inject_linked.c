// SPDX-License-Identifier: MIT
/*
 * For tests/client/test_inject.c: a program linked with libmemprof, whose
 * malloc is then the process's first; memprof__inject must change nothing.
 * Prints what it returned.
 */
#include <stdio.h>
#include <stdlib.h>

#include "inject.h"

int main(void)
{
	void *p = malloc(10);

	printf("%d\n", memprof__inject());
	free(p);
	return 0;
}
