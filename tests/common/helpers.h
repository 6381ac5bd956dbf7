/* SPDX-License-Identifier: MIT */
/* Shared by every test folder: the root check of the tests that load BPF
 * or read other processes, paths in the build tree, temp dirs, running a
 * program as a fixture, and bounded waits on a condition (wait.h). Header
 * only (each test is one criterion executable); include it as
 * "../common/helpers.h". */
#ifndef TESTS_COMMON_HELPERS_H
#define TESTS_COMMON_HELPERS_H

#include <criterion/criterion.h>
#include <fcntl.h>
#include <ftw.h>
#include <spawn.h>
#include <stdbool.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../tracer_env.h"
#include "wait.h"

extern char **environ;

static inline bool mp_test_is_root(void)
{
	return geteuid() == 0;
}

/* Skips the test, saying why, unless it runs as root (here it always
 * does: integration tests run, they never skip in CI). */
#define mp_test_need_root(why)                                                       \
	do {                                                                         \
		if (!mp_test_is_root())                                              \
			cr_skip_test("needs root for %s (running as uid %d)", (why), \
				     (int)geteuid());                                \
	} while (0)

/* @rel inside the build tree (MEMPROF_BUILD_ROOT, set by meson test); a
 * ring of buffers, so a few can be used in one expression. */
static __attribute__((unused)) char *mp_test_build_path(const char *rel)
{
	static char buf[16][4096];
	static int i;
	const char *b = getenv("MEMPROF_BUILD_ROOT");
	char *p = buf[i++ % 16];

	cr_assert_not_null(b, "MEMPROF_BUILD_ROOT is not set (run through meson test)");
	cr_assert_lt((size_t)snprintf(p, 4096, "%s/%s", b, rel), 4096, "path too long");
	return p;
}

/* A fresh directory /tmp/memprof-TAG-PID-XXXXXX in @buf. */
static __attribute__((unused)) void mp_test_tmpdir(char *buf, size_t size, const char *tag)
{
	cr_assert_lt((size_t)snprintf(buf, size, "/tmp/memprof-%s-%d-XXXXXX", tag, (int)getpid()),
		     size);
	cr_assert_not_null(mkdtemp(buf), "mkdtemp %s", buf);
}

static __attribute__((unused)) int mp_test_rm_one(const char *path, const struct stat *st, int flag,
						  struct FTW *ftw)
{
	(void)st;
	(void)ftw;
	return flag == FTW_DP ? rmdir(path) : unlink(path);
}

/* Removes @dir and everything in it; 0 or -1. An empty @dir is a no-op. */
static __attribute__((unused)) int mp_test_rmtree(const char *dir)
{
	if (!dir[0])
		return 0;
	return nftw(dir, mp_test_rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* Spawns argv[0] with stdout / stderr to the given fds (-1: inherited).
 * The child gets SIGKILL when the test process dies (a timeout, a crash, an
 * aborted assertion), so no daemon or fixture outlives its test; a set-id
 * wrapper (setpriv) clears that for what it runs. */
static __attribute__((unused)) pid_t mp_test_spawn(char *const argv[], int out_fd, int err_fd)
{
	char *const *targv = mp_test_argv(argv); /* before fork: static storage */
	pid_t parent = getpid();
	pid_t pid = fork();

	cr_assert_geq(pid, 0, "fork for %s", argv[0]);
	if (pid == 0) {
		/* Only async-signal-safe calls between fork and exec. */
		if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent)
			_exit(126);
		if ((out_fd >= 0 && dup2(out_fd, 1) < 0) || (err_fd >= 0 && dup2(err_fd, 2) < 0))
			_exit(126);
		execve(argv[0], targv, environ);
		_exit(127);
	}
	return pid;
}

/* Spawns argv[0] as it is (no `--tracer` of the suite: the caller's own
 * argv) with the environment @envp and its stderr to a pipe; the pipe's
 * read end as a stream, the child in *@ret_pid. For reading a daemon's
 * log (`-v`) while it runs. */
static __attribute__((unused)) FILE *mp_test_spawn_stderr(char *const argv[], char **envp,
							  pid_t *ret_pid)
{
	posix_spawn_file_actions_t fa;
	int err_pipe[2];
	FILE *f;

	cr_assert_eq(pipe2(err_pipe, O_CLOEXEC), 0);
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, err_pipe[1], 2);
	cr_assert_eq(posix_spawn(ret_pid, argv[0], &fa, NULL, argv, envp), 0, "spawn %s", argv[0]);
	posix_spawn_file_actions_destroy(&fa);
	close(err_pipe[1]);
	f = fdopen(err_pipe[0], "r");
	cr_assert_not_null(f);
	return f;
}

/* Reads @fd to its end into @out (at most @cap - 1 bytes, NUL-terminated),
 * then reaps @pid: its exit status (a death by signal fails the test). */
static __attribute__((unused)) int mp_test_collect(pid_t pid, int fd, char *out, size_t cap)
{
	size_t n = 0;
	ssize_t k;
	int status;

	while (n + 1 < cap && (k = read(fd, out + n, cap - 1 - n)) > 0)
		n += (size_t)k;
	out[n] = '\0';
	close(fd);
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status), "pid %d died by signal %d", (int)pid, WTERMSIG(status));
	return WEXITSTATUS(status);
}

/* Runs argv to completion; its stdout in @out, its exit status returned. */
static __attribute__((unused)) int mp_test_run_capture(char *const argv[], char *out, size_t cap)
{
	int pipefd[2];
	pid_t pid;

	cr_assert_eq(pipe2(pipefd, O_CLOEXEC), 0);
	pid = mp_test_spawn(argv, pipefd[1], -1);
	close(pipefd[1]);
	return mp_test_collect(pid, pipefd[0], out, cap);
}

#endif
