// SPDX-License-Identifier: MIT
/* Allocator wrappers resolved from this process's own mappings: function
 * globs, object globs, the default list's absence in a C program, and the
 * target's coarse filter covering every wrapper. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "procmaps.h"
#include "wrappers.h"

static struct mp_wrappers *resolved(const struct mp_wrappers_opts *o)
{
	struct mp_procmaps *maps = NULL;
	struct mp_wrappers *w = NULL;

	cr_assert_eq(mp_procmaps_read(getpid(), &maps), 0);
	cr_assert_eq(mp_wrappers_new(0, o, &w), 0);
	cr_assert_eq(mp_wrappers_update(w, maps), mp_wrappers_any(w) ? 1 : 0);
	/* the same objects again: nothing new */
	cr_assert_eq(mp_wrappers_update(w, maps), 0);
	mp_procmaps_free(maps);
	return w;
}

Test(wrappers, function_glob_is_the_functions_range)
{
	/* libc's, in every build (no sanitizer intercepts it) */
	const char *fns[] = { "getppid" };
	const struct mp_wrappers_opts o = { .fn_globs = fns, .n_fn = 1, .no_default = true };
	struct mp_wrappers *w = resolved(&o);
	uint64_t m = (uint64_t)(uintptr_t)&getppid;
	uint32_t nf, no;

	cr_assert(mp_wrappers_has(w, m));
	cr_assert(mp_wrappers_has(w, m + 1));
	cr_assert_not(mp_wrappers_has(w, (uint64_t)(uintptr_t)&getpid));
	cr_assert_not(mp_wrappers_has(w, (uint64_t)(uintptr_t)&resolved));
	mp_wrappers_counts(w, &nf, &no);
	cr_assert_eq(no, 1, "getppid in libc only");
	cr_assert_eq(nf, 1);
	mp_wrappers_free(w);
}

Test(wrappers, object_glob_is_the_whole_object)
{
	const char *dsos[] = { "libc.so*" };
	const struct mp_wrappers_opts o = { .dso_globs = dsos, .n_dso = 1, .no_default = true };
	struct mp_wrappers *w = resolved(&o);
	uint32_t nf, no;

	cr_assert(mp_wrappers_has(w, (uint64_t)(uintptr_t)&getpid));
	cr_assert(mp_wrappers_has(w, (uint64_t)(uintptr_t)&getppid));
	cr_assert_not(mp_wrappers_has(w, (uint64_t)(uintptr_t)&resolved));
	mp_wrappers_counts(w, &nf, &no);
	cr_assert_eq(nf, 0);
	cr_assert_eq(no, 1);
	mp_wrappers_free(w);
}

/* The default list names no function of libc or of this program (a
 * sanitizer runtime may bring an operator new). */
Test(wrappers, default_list_leaves_libc_and_the_program)
{
	const struct mp_wrappers_opts o = { 0 };
	struct mp_wrappers *w = resolved(&o);

	cr_assert_not(mp_wrappers_has(w, (uint64_t)(uintptr_t)&getpid));
	cr_assert_not(mp_wrappers_has(w, (uint64_t)(uintptr_t)&resolved));
	mp_wrappers_free(w);
}

/* The target's filter: at most max ranges, sorted, covering every
 * wrapper function (many: libc's get* functions). */
Test(wrappers, coarse_filter_covers_every_wrapper)
{
	const char *fns[] = { "get*" };
	const struct mp_wrappers_opts o = { .fn_globs = fns, .n_fn = 1, .no_default = true };
	struct mp_wrappers *w = resolved(&o);
	struct mp_wrap_range c[4];
	/* libc's (no IFUNC, no sanitizer interceptor) */
	uint64_t probes[] = { (uintptr_t)&getpid, (uintptr_t)&getppid, (uintptr_t)&getuid,
			      (uintptr_t)&getgid, (uintptr_t)&geteuid };
	size_t n = mp_wrappers_coarse(w, c, 4);
	uint32_t nf, no;

	mp_wrappers_counts(w, &nf, &no);
	cr_assert_gt(nf, 8, "%u functions", nf);
	cr_assert_eq(n, 4);
	for (size_t i = 1; i < n; i++)
		cr_assert_gt(c[i].lo, c[i - 1].hi);
	for (size_t k = 0; k < sizeof(probes) / sizeof(*probes); k++) {
		bool in = false;

		cr_assert(mp_wrappers_has(w, probes[k]));
		for (size_t i = 0; i < n; i++)
			in |= probes[k] >= c[i].lo && probes[k] < c[i].hi;
		cr_assert(in, "probe %zu outside the filter", k);
	}
	mp_wrappers_free(w);
}
