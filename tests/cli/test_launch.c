// SPDX-License-Identifier: MIT
/* mp_launch: the child is stopped at its entry point, libraries mapped, main
 * not yet run; every failure leaves no child behind. */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "launch.h"

#ifndef LAUNCH_DIR
#error "LAUNCH_DIR must name the build directory of the helper programs"
#endif

static char tmpdir[] = "/tmp/mp-launch-XXXXXX";
static char marker[256];
/* a launched child not yet reaped: killed by teardown if a test aborts */
static pid_t launched;

static void setup(void)
{
	cr_assert_not_null(mkdtemp(tmpdir));
	snprintf(marker, sizeof(marker), "%s/main-ran", tmpdir);
}

static void teardown(void)
{
	char path[300];

	if (launched > 0)
		mp_launch_kill(launched);
	unlink(marker);
	snprintf(path, sizeof(path), "%s/script", tmpdir);
	unlink(path);
	rmdir(tmpdir);
}

TestSuite(launch, .init = setup, .fini = teardown);

static size_t slurp(const char *path, char *buf, size_t size)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	size_t len = 0;
	ssize_t n;

	cr_assert(ge(int, fd, 0), "open %s: %s", path, strerror(errno));
	while (len + 1 < size && (n = read(fd, buf + len, size - 1 - len)) > 0)
		len += (size_t)n;
	close(fd);
	buf[len] = '\0';
	return len;
}

static uint64_t at_entry(pid_t pid)
{
	Elf64_auxv_t aux[128];
	char path[64];
	size_t len;

	snprintf(path, sizeof(path), "/proc/%d/auxv", pid);
	len = slurp(path, (char *)aux, sizeof(aux));
	for (size_t i = 0; i < len / sizeof(aux[0]); i++)
		if (aux[i].a_type == AT_ENTRY)
			return aux[i].a_un.a_val;
	cr_fatal("no AT_ENTRY for %d", pid);
	return 0;
}

struct observed {
	char state; /* from /proc/PID/stat */
	bool at_entry; /* user pc == AT_ENTRY */
	bool libc_mapped; /* libc.so.6 in /proc/PID/maps */
	bool main_ran; /* the marker file exists */
};

static struct observed observe(pid_t pid)
{
	static char buf[1 << 16];
	struct observed o = { 0 };
	unsigned long long pc = 0;
	char path[64], *p;

	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	slurp(path, buf, sizeof(buf));
	p = strrchr(buf, ')');
	cr_assert_not_null(p);
	o.state = p[2];
	/* "NR ARGS... SP PC", or "-1 SP PC" outside a syscall: the user pc is
	 * last (a static executable still shows execve's number) */
	snprintf(path, sizeof(path), "/proc/%d/syscall", pid);
	slurp(path, buf, sizeof(buf));
	p = strrchr(buf, ' ');
	cr_assert_not_null(p, "syscall: %s", buf);
	cr_assert(eq(int, sscanf(p, " %llx", &pc), 1), "syscall: %s", buf);
	o.at_entry = pc == at_entry(pid);
	snprintf(path, sizeof(path), "/proc/%d/maps", pid);
	slurp(path, buf, sizeof(buf));
	o.libc_mapped = strstr(buf, "/libc.so.6\n") != NULL;
	o.main_ran = access(marker, F_OK) == 0;
	return o;
}

static void expect_observed(struct observed got, struct observed want)
{
	cr_expect(eq(chr, got.state, want.state));
	cr_expect(eq(int, got.at_entry, want.at_entry));
	cr_expect(eq(int, got.libc_mapped, want.libc_mapped));
	cr_expect(eq(int, got.main_ran, want.main_ran));
}

static void expect_no_child(void)
{
	errno = 0;
	cr_expect(eq(int, waitpid(-1, NULL, WNOHANG | __WALL), -1), "a child was left behind");
	cr_expect(eq(int, errno, ECHILD));
}

/* Launch, check the stopped state, resume, check the exit. */
static void run_case(char *const argv[], bool libc, int want_code)
{
	pid_t pid = 0;
	int status = -1;

	cr_assert(eq(int, mp_launch(argv, &pid), 0), "launch %s", argv[0]);
	cr_assert(gt(int, pid, 0));
	launched = pid;
	expect_observed(observe(pid), (struct observed){ 'T', true, libc, false });
	/* stays stopped until told otherwise */
	usleep(50 * 1000);
	expect_observed(observe(pid), (struct observed){ 'T', true, libc, false });
	cr_assert(eq(int, mp_launch_resume(pid), 0));
	cr_assert(eq(int, mp_launch_wait(pid, &status), 0));
	launched = 0;
	cr_expect(eq(int, mp_launch_exit_code(status), want_code));
	cr_expect(eq(int, access(marker, F_OK), 0), "main did not run after resume");
	expect_no_child();
}

Test(launch, dynamic_pie)
{
	char *argv[] = { LAUNCH_DIR "/launch-target", marker, "7", NULL };

	run_case(argv, true, 7);
}

Test(launch, dynamic_no_pie)
{
	char *argv[] = { LAUNCH_DIR "/launch-target-nopie", marker, "8", NULL };

	run_case(argv, true, 8);
}

Test(launch, static_exe)
{
	char *argv[] = { LAUNCH_DIR "/launch-target-static", marker, "9", NULL };

	run_case(argv, false, 9);
}

Test(launch, script_runs_interpreter)
{
	char script[300];
	FILE *f;

	snprintf(script, sizeof(script), "%s/script", tmpdir);
	f = fopen(script, "w");
	cr_assert_not_null(f);
	fputs("#!/bin/sh\n: > \"$1\"\nexit 5\n", f);
	fclose(f);
	cr_assert(eq(int, chmod(script, 0755), 0));
	char *argv[] = { script, marker, NULL };

	run_case(argv, true, 5);
}

Test(launch, path_lookup_and_death_by_signal)
{
	pid_t pid = 0;
	int status;
	char *argv[] = { "sh", "-c", "kill -9 $$", NULL };

	cr_assert(eq(int, mp_launch(argv, &pid), 0));
	launched = pid;
	expect_observed(observe(pid), (struct observed){ 'T', true, true, false });
	cr_assert(eq(int, mp_launch_resume(pid), 0));
	cr_assert(eq(int, mp_launch_wait(pid, &status), 0));
	launched = 0;
	cr_expect(eq(int, mp_launch_exit_code(status), 128 + SIGKILL));
	expect_no_child();
}

/* The daemon's blocked and ignored signals are not inherited. */
Test(launch, clean_signal_state)
{
	char *argv[] = { LAUNCH_DIR "/launch-target-static", marker, "0", NULL };
	char path[64], buf[4096];
	sigset_t block, old;
	struct sigaction ign = { .sa_handler = SIG_IGN }, old_pipe, old_usr2;
	pid_t pid = 0;
	int status;

	sigemptyset(&block);
	sigaddset(&block, SIGTERM);
	sigaddset(&block, SIGCHLD);
	sigprocmask(SIG_BLOCK, &block, &old);
	sigaction(SIGPIPE, &ign, &old_pipe);
	sigaction(SIGUSR2, &ign, &old_usr2);
	cr_assert(eq(int, mp_launch(argv, &pid), 0));
	launched = pid;
	sigprocmask(SIG_SETMASK, &old, NULL);
	sigaction(SIGPIPE, &old_pipe, NULL);
	sigaction(SIGUSR2, &old_usr2, NULL);

	snprintf(path, sizeof(path), "/proc/%d/status", pid);
	slurp(path, buf, sizeof(buf));
	cr_expect_not_null(strstr(buf, "\nSigBlk:\t0000000000000000\n"), "%s", buf);
	cr_expect_not_null(strstr(buf, "\nSigIgn:\t0000000000000000\n"), "%s", buf);
	cr_expect_not_null(strstr(buf, "\nTracerPid:\t0\n"), "still traced: %s", buf);
	cr_assert(eq(int, mp_launch_resume(pid), 0));
	cr_assert(eq(int, mp_launch_wait(pid, &status), 0));
	launched = 0;
	cr_expect(eq(int, status, 0));
}

Test(launch, kill_a_stopped_child)
{
	char *argv[] = { LAUNCH_DIR "/launch-target", marker, "0", NULL };
	pid_t pid = 0;

	cr_assert(eq(int, mp_launch(argv, &pid), 0));
	cr_expect(eq(int, mp_launch_kill(pid), 0));
	cr_expect(eq(int, access(marker, F_OK), -1));
	expect_no_child();
}

/* mp_launch must fail with @want; a child it wrongly left running is killed
 * so that a failing run leaks nothing either. */
static void expect_launch_error(char *const argv[], int want)
{
	pid_t pid = 1234;
	int r = mp_launch(argv, &pid);

	if (r == 0)
		mp_launch_kill(pid);
	cr_expect(eq(int, r, want), "launch %s", argv[0] ? argv[0] : "(null)");
	if (r < 0)
		cr_expect(eq(int, pid, 1234), "output touched on error");
	expect_no_child();
}

Test(launch, errors_leave_no_child)
{
	char notexec[300];
	int fd;

	char *missing[] = { "memprof-no-such-command-for-sure", NULL };
	expect_launch_error(missing, -ENOENT);
	char *missing_path[] = { "/nonexistent/dir/prog", NULL };
	expect_launch_error(missing_path, -ENOENT);

	snprintf(notexec, sizeof(notexec), "%s/script", tmpdir);
	fd = open(notexec, O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
	cr_assert(ge(int, fd, 0));
	cr_assert(eq(int, (int)write(fd, "#!/bin/sh\n", 10), 10));
	close(fd);
	char *noexec_argv[] = { notexec, NULL };
	expect_launch_error(noexec_argv, -EACCES);
	char *dir_argv[] = { "/", NULL };
	expect_launch_error(dir_argv, -EACCES);

	/* a DT_NEEDED library's constructor exits before the entry point */
	char *early[] = { LAUNCH_DIR "/launch-dies-early", NULL };
	expect_launch_error(early, -ECHILD);

	char *empty[] = { NULL };
	expect_launch_error(empty, -EINVAL);
}
