/* SPDX-License-Identifier: MIT */
/* Running the memprof binary: stdout and stderr captured whole. */
#ifndef MP_TEST_CHROME_RUN_H
#define MP_TEST_CHROME_RUN_H

#include <criterion/criterion.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../tracer_env.h"

extern char **environ;

struct run {
	int status; /* exit code */
	char *out, *err; /* whole stdout / stderr */
};

static __attribute__((unused)) char *read_whole(const char *path)
{
	FILE *f = fopen(path, "re");
	char *buf = NULL;
	size_t len = 0, n;
	FILE *m = open_memstream(&buf, &len);
	char chunk[65536];

	cr_assert_not_null(f, "open %s", path);
	cr_assert_not_null(m);
	while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
		fwrite(chunk, 1, n, m);
	fclose(f);
	cr_assert_eq(fclose(m), 0);
	return buf;
}

/* Runs @argv with stdout to a file (or to @stdout_path if not NULL, which
 * is then not read back). */
static __attribute__((unused)) struct run run_cmd(char *const argv[], const char *stdout_path)
{
	char out[] = "/tmp/memprof-conv-out-XXXXXX", err[] = "/tmp/memprof-conv-err-XXXXXX";
	int fo = mkstemp(out), fe = mkstemp(err), status;
	posix_spawn_file_actions_t fa;
	struct run r = { 0 };
	pid_t pid;

	cr_assert(fo >= 0 && fe >= 0);
	posix_spawn_file_actions_init(&fa);
	if (stdout_path)
		posix_spawn_file_actions_addopen(&fa, 1, stdout_path, O_RDWR | O_NOCTTY, 0);
	else
		posix_spawn_file_actions_adddup2(&fa, fo, 1);
	posix_spawn_file_actions_adddup2(&fa, fe, 2);
	cr_assert_eq(posix_spawn(&pid, argv[0], &fa, NULL, mp_test_argv(argv), environ), 0,
		     "spawn %s", argv[0]);
	posix_spawn_file_actions_destroy(&fa);
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status), "%s died by signal %d", argv[0], WTERMSIG(status));
	r.status = WEXITSTATUS(status);
	close(fo);
	close(fe);
	r.out = read_whole(out);
	r.err = read_whole(err);
	unlink(out);
	unlink(err);
	return r;
}

static __attribute__((unused)) void run_free(struct run *r)
{
	free(r->out);
	free(r->err);
}

static __attribute__((unused)) const char *memprof_bin(void)
{
	static char path[4096];
	const char *b = getenv("MEMPROF_BUILD_ROOT");

	cr_assert_not_null(b, "MEMPROF_BUILD_ROOT is not set (run through meson test)");
	snprintf(path, sizeof(path), "%s/cli/memprof", b);
	return path;
}

#endif /* MP_TEST_CHROME_RUN_H */
