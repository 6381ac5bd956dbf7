// SPDX-License-Identifier: MIT
/*
 * For tests/client/test_inject.c: a program linked with libmemprof, whose
 * malloc is then the process's first; memprof__inject must change nothing.
 * Prints what it returned. With a fixture library's path (inject-deep),
 * it then dlopen()s it with RTLD_DEEPBIND, which binds the library's
 * malloc to libc's own, and prints 1 when the library calls the process's
 * malloc, libmemprof's, all the same (libmemprof's dlopen patched it).
 * With "other" after the path (run with another allocator preloaded ahead
 * of libmemprof), it does not call memprof__inject: the deep-bound load
 * must then patch nothing, and the allocator functions this program has
 * not called yet (lazy slots) must still reach that allocator (jemalloc:
 * its thread.allocated counter grows by their bytes). Prints 0 for the
 * library, then 1 when they did.
 */
#include <dlfcn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "inject.h"
#include "inject_fixture.h"

int main(int argc, char **argv)
{
	bool other = argc > 2 && !strcmp(argv[2], "other");
	void *p = malloc(10), *h, *q = NULL;
	fx_malloc_fn *fn;

	printf("%d\n", other ? 0 : memprof__inject());
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
	if (other) {
		int (*ctl)(const char *, void *, size_t *, void *, size_t) =
			(int (*)(const char *, void *, size_t *, void *, size_t))dlsym(RTLD_DEFAULT,
										       "mallctl");
		uint64_t before = 0, after = 0;
		size_t len = sizeof(before);

		if (!ctl || ctl("thread.allocated", &before, &len, NULL, 0))
			return 1;
		/* first calls through lazy slots */
		p = calloc(3, 100);
		p = realloc(p, 5000);
		if (posix_memalign(&q, 64, 300))
			return 1;
		free(p);
		free(q);
		len = sizeof(after);
		if (ctl("thread.allocated", &after, &len, NULL, 0))
			return 1;
		printf("%d\n", after - before >= 5000 + 300);
	}
	return 0;
}
