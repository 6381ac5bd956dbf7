// SPDX-License-Identifier: MIT
/*
 * Limits (docs/PROFILE.md "Limits"): a target floods the daemon with
 * forged, well-formed ALLOC records of blocks that never existed
 * (fixture-flood), under `memprof run` and `memprofd --pid` (sanitized in
 * the sanitizer build). With --max-memory 16M the daemon stays up, its
 * memory stays within the bound (its peak RSS, read while the target
 * waits after the flood, is far below what the flood's blocks would
 * take), and the profile's limits name the bound reached, in the file,
 * the table and the JSON; the blocks allocated before the flood are
 * still there.
 */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <inttypes.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../common/helpers.h"
#include "profile.h"
#include "profile_pb.h"

/* 2 M forged blocks would take a live table of 4 Mi slots (192 MiB);
 * the bound of 16 MiB gives it 8 MiB: 98,304 blocks. */
#define FLOOD "2000000"
#define FLOOD_N 2000000ull
#define BOUND_BLOCKS 98304ull
/* The daemon's peak RSS after the flood, at most (its baseline, BPF ring
 * mapped twice and sanitizer included, is well below). */
#define MAX_HWM_KIB (192ull << 10)

static char tmpdir[256];

static void setup(void)
{
	mp_test_need_root("BPF and ptrace");
	mp_test_tmpdir(tmpdir, sizeof(tmpdir), "flood");
}

static void cleanup(void)
{
	mp_test_rmtree(tmpdir);
	tmpdir[0] = '\0';
}

static uint64_t status_kib(pid_t pid, const char *key)
{
	char path[64], line[256];
	uint64_t v = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "re");
	cr_assert_not_null(f, "%s", path);
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, key, strlen(key)))
			v = strtoull(line + strlen(key) + 1, NULL, 10);
	fclose(f);
	return v;
}

/* Spawns @argv with stdin from *@ret_in and stdout to *@ret_out (pipes). */
static pid_t spawn_piped(char *const argv[], int *ret_in, FILE **ret_out)
{
	posix_spawn_file_actions_t fa;
	int in[2], out[2];
	pid_t pid;

	cr_assert_eq(pipe2(in, O_CLOEXEC), 0);
	cr_assert_eq(pipe2(out, O_CLOEXEC), 0);
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, in[0], 0);
	posix_spawn_file_actions_adddup2(&fa, out[1], 1);
	cr_assert_eq(posix_spawn(&pid, argv[0], &fa, NULL, argv, environ), 0, "%s", argv[0]);
	posix_spawn_file_actions_destroy(&fa);
	close(in[0]);
	close(out[1]);
	*ret_in = in[1];
	*ret_out = fdopen(out[0], "r");
	return pid;
}

static void wait_ok(pid_t pid, const char *what)
{
	int status;

	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status), "%s died by signal %d", what, WTERMSIG(status));
	cr_assert_eq(WEXITSTATUS(status), 0, "%s exited with %d", what, WEXITSTATUS(status));
}

/* Once the target says it flooded: the daemon @d's peak RSS, then the
 * target may end. */
static uint64_t measure_then_release(FILE *out, int in, pid_t d)
{
	char line[64];
	uint64_t hwm;

	cr_assert_not_null(fgets(line, sizeof(line), out), "the target ended before flooding");
	cr_assert_str_eq(line, "flooded\n");
	hwm = status_kib(d, "VmHWM:");
	cr_assert_eq(write(in, "\n", 1), 1);
	close(in);
	fclose(out);
	return hwm;
}

static void check(const char *path, uint64_t hwm_kib)
{
	char *rargv[] = { mp_test_build_path("cli/memprof"), "report", (char *)path, NULL };
	char *jargv[] = {
		mp_test_build_path("cli/memprof"), "report", (char *)path, "--format", "json", NULL
	};
	static char text[1 << 20];
	struct mp_profile *p = NULL;
	const char *why = NULL;

	fprintf(stderr, "daemon peak RSS %" PRIu64 " KiB\n", hwm_kib);
	cr_assert_lt(hwm_kib, MAX_HWM_KIB, "the daemon's peak RSS %" PRIu64 " KiB", hwm_kib);
	cr_assert_eq(mp_profile_load(path, &p, &why), 0, "%s", why ? why : "");
	cr_assert(p->limits.reached & MP_LIMIT_LIVE, "limits.reached 0x%x", p->limits.reached);
	cr_assert_eq(p->limits.memory, 16ull << 20);
	cr_assert_eq(p->limits.live_blocks, BOUND_BLOCKS);
	cr_assert_geq(p->limits.untracked_allocs, FLOOD_N - BOUND_BLOCKS);
	cr_assert_leq(p->limits.untracked_allocs, FLOOD_N);
	cr_assert_geq(p->limits.untracked_bytes, 16 * (FLOOD_N - BOUND_BLOCKS));
	/* the honest blocks allocated before the flood are live in the profile */
	cr_assert_geq(p->mem.bytes_added, 100 * 1000);
	cr_assert_leq((uint64_t)p->mem.tensors_added, BOUND_BLOCKS);
	mp_profile_free(p);

	cr_assert_eq(mp_test_run_capture(rargv, text, sizeof(text)), 0);
	cr_assert_not_null(
		strstr(text, "limit reached: live table (98304 blocks, max_memory 16 MiB)"),
		"%.2000s", text);
	cr_assert_not_null(strstr(text, "heap figures are lower bounds"), "%.2000s", text);
	cr_assert_eq(mp_test_run_capture(jargv, text, sizeof(text)), 0);
	cr_assert_not_null(strstr(text, "\"limits\": {"), "%.4000s", text);
	cr_assert_not_null(strstr(text, "\"reached\": ["), "%.4000s", text);
	cr_assert_not_null(strstr(strstr(text, "\"reached\": ["), "\"live\""), "%.4000s", text);
	cr_assert_not_null(strstr(text, "\"heapLowerBounds\": true"), "%.4000s", text);
}

Test(flood, memprof_run_stays_within_its_bound, .init = setup, .fini = cleanup, .timeout = 240)
{
	char path[300];
	int in;
	FILE *out;
	pid_t pid;
	uint64_t hwm;

	snprintf(path, sizeof(path), "%s/run.mpf", tmpdir);
	char *argv[] = { mp_test_build_path("cli/memprof"),
			 "run",
			 "--max-memory",
			 "16M",
			 "-o",
			 path,
			 "--print",
			 "none",
			 "--",
			 mp_test_build_path("tests/hostile/fixture-flood"),
			 FLOOD,
			 NULL };
	pid = spawn_piped(argv, &in, &out);
	hwm = measure_then_release(out, in, pid);
	wait_ok(pid, "memprof run");
	check(path, hwm);
}

Test(flood, memprofd_pid_stays_within_its_bound, .init = setup, .fini = cleanup, .timeout = 240)
{
	char path[300], pidbuf[32], line[512];
	int in;
	FILE *out, *err;
	pid_t fix, d;
	uint64_t hwm;

	snprintf(path, sizeof(path), "%s/pid.mpf", tmpdir);
	char *fargv[] = { mp_test_build_path("tests/hostile/fixture-flood"), FLOOD, NULL };
	fix = spawn_piped(fargv, &in, &out);
	snprintf(pidbuf, sizeof(pidbuf), "%d", (int)fix);
	char *dargv[] = { mp_test_build_path("cli/memprofd"),
			  "--pid",
			  pidbuf,
			  "--max-memory",
			  "16M",
			  "-o",
			  path,
			  "--print",
			  "none",
			  NULL };
	err = mp_test_spawn_stderr(dargv, environ, &d);
	hwm = measure_then_release(out, in, d);
	wait_ok(fix, "the target");
	while (fgets(line, sizeof(line), err))
		fputs(line, stderr);
	fclose(err);
	wait_ok(d, "memprofd");
	check(path, hwm);
}
