// SPDX-License-Identifier: MIT
/*
 * Sampled mode on real processes (docs/PROFILE.md "Sampled figures"):
 * the estimates and their standard errors against a program whose exact
 * figures are known, and the in-process path's own memory kept out of the
 * profile. Registered once per path (MEMPROF_TEST_TRACER,
 * tests/tracer_env.h).
 */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <math.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "profile.h"
#include "profile_pb.h"
#include "window.h"
#include "../tracer_env.h"

extern char **environ;

static char *path_of(const char *rel)
{
	static char bufs[4][4096];
	static int i;
	const char *r = getenv("MEMPROF_BUILD_ROOT");
	char *p = bufs[i++ % 4];

	cr_assert_not_null(r, "MEMPROF_BUILD_ROOT not set");
	snprintf(p, 4096, "%s/%s", r, rel);
	return p;
}

/* `memprof run --mode sampled --sample-bytes @bytes -o TMP --
 * fixture-inproc @a1 @a2` (--mode precise when @bytes is 0) on the suite's
 * path. */
static struct mp_profile *run(uint64_t bytes, const char *a1, const char *a2)
{
	char path[] = "/tmp/mp-sampled-XXXXXX", sb[32];
	char *argv[16];
	struct mp_profile *p = NULL;
	const char *why = NULL;
	int n = 0, fd = mkstemp(path), st;
	pid_t pid;

	cr_assert_eq(geteuid(), 0, "sampled-mode tests load BPF: run as root");
	cr_assert_geq(fd, 0);
	close(fd);
	snprintf(sb, sizeof(sb), "%" PRIu64, bytes);
	argv[n++] = path_of("cli/memprof");
	argv[n++] = "run";
	argv[n++] = "--mode";
	if (bytes) {
		argv[n++] = "sampled";
		argv[n++] = "--sample-bytes";
		argv[n++] = sb;
	} else {
		argv[n++] = "precise";
	}
	argv[n++] = "-o";
	argv[n++] = path;
	argv[n++] = "--print";
	argv[n++] = "none";
	argv[n++] = "--";
	argv[n++] = path_of("tests/e2e/fixture-inproc");
	argv[n++] = (char *)a1;
	argv[n++] = (char *)a2;
	argv[n] = NULL;
	cr_assert_eq(posix_spawn(&pid, argv[0], NULL, NULL, mp_test_argv(argv), environ), 0);
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "memprof run %s %s failed", a1,
		  a2 ? a2 : "");
	cr_assert_eq(mp_profile_load(path, &p, &why), 0, "loading %s: %s", path, why ? why : "");
	unlink(path);
	return p;
}

/* A one-byte interval samples every block of at least a byte exactly; the
 * matrix kernel's bytes are then exact, and nothing the fixture did not
 * allocate shows up (the interposer's own sampled-block set, 2 MiB + 64 KiB
 * mapped at the first sample, once did: as an anonymous mapping of the
 * process). */
Test(sampled, one_byte_interval_is_exact_and_has_no_phantom_block, .timeout = 120)
{
	struct mp_profile *p = run(1, "matrix", NULL);
	const struct mp_kernel *k = mp_profile_kernel(p, "matrix");

	cr_assert_not_null(k);
	cr_assert_eq(k->incl.alloc_bytes, 100 + 200 + 50 + 30 + 80 + 100 + 64 + 128 + 48 + 10 + 10);
	cr_assert_eq(k->incl.free_bytes, 100 + 200 + 30 + 50 + 100 + 64 + 128 + 48 + 10 + 10,
		     "freed %" PRIu64, k->incl.free_bytes);
	for (uint32_t i = 0; i < p->n_sites; i++)
		cr_assert_lt(p->sites[i].alloc_space, 2u << 20,
			     "site %" PRIu32 " (caller %#" PRIx64 "): %" PRIu64
			     " B that the fixture never allocated",
			     i, p->sites[i].caller, p->sites[i].alloc_space);
	cr_assert_lt(p->mem.alloc_bytes, 2u << 20, "process allocated %" PRIu64 " B",
		     p->mem.alloc_bytes);
	cr_assert_lt(p->peak_bytes, 2u << 20, "peak %" PRIu64 " B", p->peak_bytes);
	mp_profile_free(p);
}
