// SPDX-License-Identifier: MIT
/*
 * The processes that release a one-shot profiler's uprobe links after it
 * exits (daemon/sources/release.c), with pipes in place of links: a pipe's
 * read end sees EOF once every copy of its write end is closed, so it
 * shows who still holds one. No privileges needed. This process is a
 * subreaper, so the holder (a grandchild) comes back to it and can be
 * found, looked at and reaped. tests/sources/test_tracer.c
 * (release_in_child_leaves_nothing) checks the same with real links.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../common/wait.h"
#include "release.h"

/* This process's children (its threads' children lists), at most @max. */
static size_t children(pid_t *out, size_t max)
{
	char path[300];
	struct dirent *e;
	size_t n = 0;
	DIR *d = opendir("/proc/self/task");

	if (!d)
		return 0;
	while ((e = readdir(d))) {
		FILE *f;
		int pid;

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/self/task/%s/children", e->d_name);
		f = fopen(path, "r");
		if (!f)
			continue;
		while (n < max && fscanf(f, "%d", &pid) == 1)
			out[n++] = pid;
		fclose(f);
	}
	closedir(d);
	return n;
}

/* The number of fds process @pid has open. */
static int fd_count(pid_t pid)
{
	char path[64];
	struct dirent *e;
	int n = 0;
	DIR *d;

	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	d = opendir(path);
	if (!d)
		return -1;
	while ((e = readdir(d)))
		n += e->d_name[0] != '.';
	closedir(d);
	return n;
}

/* Whether @fd (a pipe's read end) is at EOF within @ms. */
static bool eof_within(int fd, int ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	char c;

	return poll(&p, 1, ms) == 1 && read(fd, &c, 1) == 0;
}

static bool reaped(void *ctx)
{
	pid_t want = *(const pid_t *)ctx;

	return waitpid(want, NULL, WNOHANG) == want;
}

/* The one child the holder's start leaves: the holder. */
static pid_t holder_pid(void)
{
	pid_t kids[4];
	size_t n = children(kids, 4);

	cr_assert_eq(n, 1, "%zu children after the holder's start, not 1", n);
	return kids[0];
}

/*
 * Started before the pipes exist, the holder holds nothing of this
 * process's but its socket (not even its working directory), in a
 * session of its own; handed a pipe's write end, it keeps it (held in
 * flight while it is stopped) until the socket is closed, so that the
 * caller's copy is never the last one; then it exits and the pipe sees
 * EOF. A holder is used once.
 */
Test(release, holder_holds_what_it_is_handed_and_exits)
{
	char cwd[64], link[PATH_MAX] = { 0 };
	int early[2], p[2], sock;
	bool handed;
	pid_t h;

	cr_assert_eq(prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), 0);
	cr_assert_eq(pipe2(early, O_CLOEXEC), 0);
	cr_assert_eq(mp_release_holder_start(), 0);
	cr_assert_eq(mp_release_holder_start(), 0, "a second start keeps the first holder");
	h = holder_pid();
	cr_assert_eq(fd_count(h), 1, "the holder has %d fds open, not its socket alone",
		     fd_count(h));
	cr_assert_neq(getsid(h), getsid(0), "the holder is in this process's session");
	snprintf(cwd, sizeof(cwd), "/proc/%d/cwd", (int)h);
	cr_assert_eq(readlink(cwd, link, sizeof(link) - 1), 1, "the holder keeps a directory");
	cr_assert_eq(link[0], '/');
	close(early[1]);
	cr_assert(eof_within(early[0], 1000), "the holder holds a pipe made before it");
	close(early[0]);

	/* stopped, it cannot read them: what keeps the pipe open is then
	 * the message in flight */
	cr_assert_eq(kill(h, SIGSTOP), 0);
	cr_assert_eq(pipe2(p, O_CLOEXEC), 0);
	sock = mp_release_to_holder(&p[1], 1);
	close(p[1]);
	handed = sock >= 0 && !eof_within(p[0], 200);
	/* continued before any verdict: a failure leaves no stopped holder
	 * behind (it exits at the socket's EOF when this process does) */
	cr_assert_eq(kill(h, SIGCONT), 0);
	cr_assert(handed, "the write end was not handed");
	/* running, it holds the write end until this closes the socket:
	 * its copy outlives this process's */
	cr_assert_not(eof_within(p[0], 200), "the holder let go before the socket was closed");
	close(sock);
	cr_assert(eof_within(p[0], 10000), "the handed write end is still held 10 s later");
	cr_assert(mp_test_wait_until(reaped, &h, 10000), "the holder did not exit");
	close(p[0]);
	cr_assert_eq(mp_release_to_holder(&p[0], 1), -1, "a holder is used once");
}

/* More fds than one message carries: every one of them reaches it. */
Test(release, holder_takes_many)
{
	enum { N = 300 };
	static int r[N], w[N];
	int sock;
	pid_t h;

	cr_assert_eq(prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), 0);
	cr_assert_eq(mp_release_holder_start(), 0);
	h = holder_pid();
	for (int i = 0; i < N; i++) {
		int p[2];

		cr_assert_eq(pipe2(p, O_CLOEXEC), 0);
		r[i] = p[0];
		w[i] = p[1];
	}
	sock = mp_release_to_holder(w, N);
	cr_assert_geq(sock, 0);
	for (int i = 0; i < N; i++)
		close(w[i]);
	close(sock);
	for (int i = 0; i < N; i++) {
		cr_assert(eof_within(r[i], 10000), "pipe %d still held", i);
		close(r[i]);
	}
	cr_assert(mp_test_wait_until(reaped, &h, 10000), "the holder did not exit");
}

/* A holder that is gone (killed) takes nothing: the caller falls back. */
Test(release, dead_holder_refuses)
{
	int p[2];
	pid_t h;

	cr_assert_eq(prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), 0);
	cr_assert_eq(mp_release_holder_start(), 0);
	h = holder_pid();
	kill(h, SIGKILL);
	cr_assert(mp_test_wait_until(reaped, &h, 10000));
	cr_assert_eq(pipe2(p, O_CLOEXEC), 0);
	cr_assert_eq(mp_release_to_holder(&p[1], 1), -1);
	close(p[0]);
	close(p[1]);
}

/* Without a holder: nothing is handed. The grandchild forked at release
 * time keeps the fds until the returned fd is closed, and holds nothing
 * else of this process's. */
Test(release, in_child_holds_until_told)
{
	int other[2], p[2], go;
	pid_t kids[4];

	cr_assert_eq(prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), 0);
	cr_assert_eq(pipe2(p, O_CLOEXEC), 0);
	cr_assert_eq(pipe2(other, O_CLOEXEC), 0);
	cr_assert_eq(mp_release_to_holder(&p[1], 1), -1, "no holder was started");
	go = mp_release_in_child(&p[1], 1);
	cr_assert_geq(go, 0);
	close(p[1]);
	close(other[1]);
	cr_assert(eof_within(other[0], 1000), "the grandchild holds an fd it was not given");
	cr_assert_not(eof_within(p[0], 200), "the grandchild let go before it was told");
	cr_assert_eq(children(kids, 4), 1);
	close(go);
	cr_assert(eof_within(p[0], 10000), "the write end is still held 10 s after the go");
	cr_assert(mp_test_wait_until(reaped, &kids[0], 10000), "the grandchild did not exit");
	close(p[0]);
	close(other[0]);
}
