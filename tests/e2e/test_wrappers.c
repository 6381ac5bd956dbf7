// SPDX-License-Identifier: MIT
/*
 * Allocator wrappers (docs/PROFILE.md "Owners"), end to end on the path
 * the suite runs (MEMPROF_TEST_TRACER): an allocation's owner is the first
 * caller outside the wrappers, named by --wrapper (objects), --wrapper-fn
 * (symbols) or the default list (operator new), with and without --stacks;
 * the bytes never change.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/helpers.h"
#include "profile.h"
#include "profile_pb.h"
#include "../tracer_env.h"

#define path_of mp_test_build_path

/* `memprof run -o TMP --print none OPTS... -- FIXTURE`, its profile. */
static struct mp_profile *profile_of(const char *fixture, const char *const *opts)
{
	struct mp_profile *p = NULL;
	const char *why = NULL;
	char path[256], out[8192];
	char *argv[16];
	int n = 0, fd;

	mp_test_need_root("BPF and ptrace");
	snprintf(path, sizeof(path), "/tmp/memprof-wrap-%d-XXXXXX", (int)getpid());
	fd = mkstemp(path);
	cr_assert_geq(fd, 0);
	close(fd);
	argv[n++] = path_of("cli/memprof");
	argv[n++] = "run";
	argv[n++] = "-o";
	argv[n++] = path;
	argv[n++] = "--print";
	argv[n++] = "none";
	for (; opts && *opts && n < 12; opts++)
		argv[n++] = (char *)*opts;
	argv[n++] = "--";
	argv[n++] = path_of(fixture);
	argv[n] = NULL;
	cr_assert_eq(mp_test_run_capture(argv, out, sizeof(out)), 0, "%s", out);
	cr_assert_eq(mp_profile_load(path, &p, &why), 0, "loading %s: %s", path, why ? why : "");
	unlink(path);
	if (getenv("MEMPROF_TEST_TRACER"))
		cr_assert_str_eq(mp_tracer_path_name(p->tracer_path),
				 getenv("MEMPROF_TEST_TRACER"));
	return p;
}

static const struct mp_invocation *only_inv(const struct mp_profile *p, const char *name)
{
	cr_assert_eq(p->n_invocations, 1);
	cr_assert_str_eq(p->names[p->invocations[0].name], name);
	return &p->invocations[0];
}

/* The invocation's owners are exactly @n buckets, @names[i] having
 * allocated @bytes[i] in @count[i] blocks. */
static void assert_owners(const struct mp_profile *p, const struct mp_invocation *inv, uint32_t n,
			  const char *const *names, const uint64_t *bytes, const uint64_t *count)
{
	cr_assert_eq(inv->n_owners, n, "%u owners", inv->n_owners);
	for (uint32_t i = 0; i < n; i++) {
		const struct mp_bucket *b = NULL;

		for (uint32_t j = 0; j < inv->n_owners; j++)
			if (!strcmp(p->owners[inv->owners[j].id].name, names[i]))
				b = &inv->owners[j];
		cr_assert_not_null(b, "no owner %s", names[i]);
		cr_assert(b->alloc_bytes == bytes[i] && b->alloc_count == count[i],
			  "%s: %llu bytes in %llu", names[i], (unsigned long long)b->alloc_bytes,
			  (unsigned long long)b->alloc_count);
	}
}

static void wrapped_by(const char *const *opts, uint32_t functions, uint32_t objects)
{
	struct mp_profile *p = profile_of("tests/e2e/fixture-wrappers", opts);
	const struct mp_invocation *inv = only_inv(p, "wrapped");
	const char *names[] = { "libmycaller.so", "fixture-wrappers" };
	const uint64_t bytes[] = { 3700, 64 }, count[] = { 2, 1 };

	assert_owners(p, inv, 2, names, bytes, count);
	cr_assert_eq(inv->incl.alloc_bytes, 3764);
	cr_assert(p->wrappers.on);
	cr_assert(p->wrappers.default_list);
	/* the C fixture has no other wrapper than the one named */
	cr_assert_eq(p->wrappers.functions, functions);
	cr_assert_eq(p->wrappers.objects, objects);
	cr_assert_eq(p->wrappers.skipped, 2);
	cr_assert_eq(p->wrappers.fallbacks, 0);
	mp_profile_free(p);
}

Test(wrappers, wrapper_object_glob_charges_the_caller_object)
{
	const char *opts[] = { "--wrapper", "libmywrap*", NULL };

	wrapped_by(opts, 0, 1);
}

Test(wrappers, wrapper_fn_charges_the_caller_object)
{
	const char *opts[] = { "--wrapper-fn", "my_*", NULL };

	wrapped_by(opts, 1, 1);
}

Test(wrappers, with_stacks_the_first_frame_outside_the_wrappers)
{
	const char *opts[] = { "--stacks", "--wrapper-fn", "my_alloc", NULL };

	wrapped_by(opts, 1, 1);
}

/* Without the option the wrapper object is the owner: the same bytes. */
Test(wrappers, without_it_the_wrapper_is_the_owner)
{
	struct mp_profile *p = profile_of("tests/e2e/fixture-wrappers", NULL);
	const struct mp_invocation *inv = only_inv(p, "wrapped");
	const char *names[] = { "libmywrap.so", "fixture-wrappers" };
	const uint64_t bytes[] = { 3700, 64 }, count[] = { 2, 1 };

	assert_owners(p, inv, 2, names, bytes, count);
	cr_assert(p->wrappers.on);
	cr_assert_eq(p->wrappers.skipped, 0);
	cr_assert_eq(p->wrappers.fallbacks, 0);
	mp_profile_free(p);
}

/* C++: operator new is on the default list, so new lands in the program,
 * not in libstdc++ (100 + 24 + 40 bytes in kernel "cxx"). */
Test(wrappers, cxx_new_lands_in_the_program_by_default)
{
	struct mp_profile *p = profile_of("tests/e2e/fixture-wrap-cxx", NULL);
	const struct mp_invocation *inv = only_inv(p, "cxx");
	const char *names[] = { "fixture-wrap-cxx" };
	const uint64_t bytes[] = { 164 }, count[] = { 3 };

	assert_owners(p, inv, 1, names, bytes, count);
	cr_assert(p->wrappers.default_list);
	cr_assert_geq(p->wrappers.functions, 8); /* _Znwm, _Znam and variants */
	cr_assert_eq(p->wrappers.fallbacks, 0);
	mp_profile_free(p);
}

Test(wrappers, cxx_without_the_default_list_new_is_libstdcxx)
{
	const char *opts[] = { "--no-default-wrappers", NULL };
	struct mp_profile *p = profile_of("tests/e2e/fixture-wrap-cxx", opts);
	const struct mp_invocation *inv = only_inv(p, "cxx");

	cr_assert_eq(inv->n_owners, 1);
	cr_assert(!strncmp(p->owners[inv->owners[0].id].name, "libstdc++.so", 12), "%s",
		  p->owners[inv->owners[0].id].name);
	cr_assert_eq(inv->owners[0].alloc_bytes, 164);
	cr_assert(!p->wrappers.on);
	mp_profile_free(p);
}
