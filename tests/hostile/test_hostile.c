// SPDX-License-Identifier: MIT
/*
 * Hostile targets: a real process corrupts its own marker ring in each way
 * the consumer guards against, before and after the daemon attaches, under
 * the real memprof/memprofd (sanitized in the sanitizer build). The daemon
 * must finish normally, flag the corruption in the profile, and the profile
 * must hold no kernel or phase name the target did not write honestly.
 * This covers the consumer, the merge and the correlator together.
 */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../common/helpers.h"
#include "profile.h"
#include "profile_pb.h"

/* Profiles go to a fresh directory, removed after each test. */
static char tmpdir[256];

static void need_root(void)
{
	mp_test_need_root("BPF and ptrace");
	mp_test_tmpdir(tmpdir, sizeof(tmpdir), "hostile");
}

static void cleanup(void)
{
	mp_test_rmtree(tmpdir);
	tmpdir[0] = '\0';
}

static char *path_of(const char *rel)
{
	return mp_test_build_path(rel);
}

static void tmp_profile(char *path, size_t len)
{
	cr_assert_lt((size_t)snprintf(path, len, "%s/profile.mpf", tmpdir), len);
}

static struct mp_profile *load(const char *path)
{
	struct mp_profile *p = NULL;
	const char *why = NULL;

	cr_assert_eq(mp_profile_load(path, &p, &why), 0, "loading %s: %s", path, why ? why : "");
	unlink(path);
	return p;
}

static void wait_ok(pid_t pid, const char *what)
{
	int status;

	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status), "%s died by signal %d", what, WTERMSIG(status));
	cr_assert_eq(WEXITSTATUS(status), 0, "%s exited with %d", what, WEXITSTATUS(status));
}

/* `memprof run` on a target that corrupts its ring after the attach. */
static struct mp_profile *run_after(const char *how)
{
	char path[256];
	char *argv[] = { path_of("cli/memprof"),
			 "run",
			 "-o",
			 path,
			 "--print",
			 "none",
			 "--",
			 path_of("tests/hostile/fixture-hostile"),
			 (char *)how,
			 "after",
			 NULL };
	pid_t pid;

	tmp_profile(path, sizeof(path));
	pid = mp_test_spawn(argv, -1, -1);
	wait_ok(pid, "memprof run");
	return load(path);
}

/* `memprofd --pid` attaching to a target that corrupted its ring before. */
static struct mp_profile *attach_before(const char *how)
{
	char path[256], line[256], pidbuf[32];
	int in_pipe[2], out_pipe[2];
	posix_spawn_file_actions_t fa;
	pid_t fix, prof;
	FILE *f;

	tmp_profile(path, sizeof(path));
	cr_assert_eq(pipe2(in_pipe, O_CLOEXEC), 0);
	cr_assert_eq(pipe2(out_pipe, O_CLOEXEC), 0);
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, in_pipe[0], 0);
	posix_spawn_file_actions_adddup2(&fa, out_pipe[1], 1);
	char *fargv[] = { path_of("tests/hostile/fixture-hostile"), (char *)how, "before", NULL };
	cr_assert_eq(posix_spawn(&fix, fargv[0], &fa, NULL, fargv, environ), 0);
	posix_spawn_file_actions_destroy(&fa);
	close(in_pipe[0]);
	close(out_pipe[1]);
	f = fdopen(out_pipe[0], "r");
	cr_assert_not_null(fgets(line, sizeof(line), f), "the target ended before corrupting");
	cr_assert_str_eq(line, "ready\n");
	fclose(f);

	snprintf(pidbuf, sizeof(pidbuf), "%d", (int)fix);
	char *pargv[] = {
		path_of("cli/memprofd"), "--pid", pidbuf, "-o", path, "--print", "none", "-v", NULL
	};
	f = mp_test_spawn_stderr(pargv, environ, &prof);
	for (;;) {
		cr_assert_not_null(fgets(line, sizeof(line), f), "memprofd ended before attaching");
		fputs(line, stderr);
		if (strstr(line, "attached to pid"))
			break;
	}
	cr_assert_eq(write(in_pipe[1], "\n", 1), 1);
	close(in_pipe[1]);
	wait_ok(fix, "the target");
	while (fgets(line, sizeof(line), f))
		fputs(line, stderr);
	fclose(f);
	wait_ok(prof, "memprofd");
	return load(path);
}

/* No name the target did not write honestly. */
static void assert_honest_names(const struct mp_profile *p)
{
	for (uint32_t i = 0; i < p->n_names; i++) {
		const char *n = p->names[i];

		cr_assert(!strncmp(n, "good", 4) && n[4] >= '0' && n[4] <= '9' && !n[5],
			  "kernel name \"%s\" was never written by the target", n);
	}
	for (uint32_t i = 0; i < p->n_phases; i++)
		cr_assert_str_eq(p->phases[i].name, "hostile");
	cr_assert_leq(p->n_tags, 1, "tags the target never opened");
}

static void check(struct mp_profile *p, uint32_t want_flags, bool want_kernels)
{
	cr_assert_eq(p->corruption & want_flags, want_flags, "corruption 0x%x, want 0x%x",
		     p->corruption, want_flags);
	assert_honest_names(p);
	if (want_kernels)
		/* the records read before the corruption reached the profile
		 * (they sat in the merge when the ring was given up) */
		cr_assert_gt(p->n_invocations, 0);
	/* drops are bounded by what the target could have written */
	cr_assert_lt(p->drops_ring, 1000000ull, "drops %llu", (unsigned long long)p->drops_ring);
	mp_profile_free(p);
}

Test(hostile, sequence_ahead_after_attach, .fini = cleanup)
{
	need_root();
	check(run_after("seq"), MP_CORRUPT_RING_RECORDS, true);
}

Test(hostile, random_slot_after_attach, .fini = cleanup)
{
	need_root();
	check(run_after("slot"), MP_CORRUPT_RING_RECORDS, true);
}

Test(hostile, bad_name_after_attach, .fini = cleanup)
{
	need_root();
	check(run_after("name"), MP_CORRUPT_RING_RECORDS, true);
}

Test(hostile, bad_length_after_attach, .fini = cleanup)
{
	need_root();
	check(run_after("len"), MP_CORRUPT_RING_RECORDS, true);
}

Test(hostile, header_counters_after_attach, .fini = cleanup)
{
	need_root();
	struct mp_profile *p = run_after("header");

	cr_assert_eq(p->corruption, MP_CORRUPT_RING_HEADER);
	check(p, MP_CORRUPT_RING_HEADER, true);
}

Test(hostile, sequence_ahead_before_attach, .fini = cleanup)
{
	need_root();
	check(attach_before("seq"), MP_CORRUPT_RING_RECORDS, false);
}

Test(hostile, random_slots_before_attach, .fini = cleanup)
{
	need_root();
	check(attach_before("slot"), MP_CORRUPT_RING_RECORDS, false);
}

Test(hostile, bad_names_before_attach, .fini = cleanup)
{
	need_root();
	check(attach_before("name"), MP_CORRUPT_RING_RECORDS, false);
}

Test(hostile, bad_lengths_before_attach, .fini = cleanup)
{
	need_root();
	check(attach_before("len"), MP_CORRUPT_RING_RECORDS, false);
}

Test(hostile, header_sizes_before_attach, .fini = cleanup)
{
	need_root();
	struct mp_profile *p = attach_before("static");

	cr_assert_eq(p->n_invocations, 0);
	check(p, MP_CORRUPT_RING_OPEN, false);
}
