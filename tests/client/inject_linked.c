// SPDX-License-Identifier: MIT
/*
 * For tests/client/test_inject.c: a program linked with libmemprof, whose
 * malloc is then the process's first; memprof__inject must change nothing.
 * Prints what it returned. With a fixture library's path (inject-deep),
 * it then dlopen()s it with RTLD_DEEPBIND, which binds the library's
 * malloc to libc's own, and prints 1 when the library calls the process's
 * malloc, libmemprof's, all the same (libmemprof's dlopen patched it).
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#include "inject.h"
#include "inject_fixture.h"

int main(int argc, char **argv)
{
	void *p = malloc(10), *h;
	fx_malloc_fn *fn;

	printf("%d\n", memprof__inject());
	free(p);
	if (argc < 2)
		return 0;
	h = dlopen(argv[1], RTLD_NOW | RTLD_DEEPBIND);
	fn = h ? (fx_malloc_fn *)dlsym(h, "deep_malloc") : NULL;
	if (!fn) {
		fprintf(stderr, "%s: %s\n", argv[1], dlerror());
		return 1;
	}
	printf("%d\n", fn() == (fx_malloc_t *)dlsym(RTLD_DEFAULT, "malloc"));
	return 0;
}
