/* SPDX-License-Identifier: MIT */
/* Shared by the service tests: a real memprofd in service mode, real
 * fixture processes, the real memprof client, and a small profile for the
 * tests that drive the streamer directly. Every helper is marked unused:
 * each test uses its own few. */
#ifndef TESTS_SERVICE_HELPERS_H
#define TESTS_SERVICE_HELPERS_H

#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <stdarg.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../common/helpers.h"
#include "profile.h"
#include "profile_pb.h"

extern char **environ;

static char build_root[2048];
static char tmpdir[256];

static __attribute__((unused)) void need_root(void)
{
	const char *b = getenv("MEMPROF_BUILD_ROOT");

	mp_test_need_root("BPF and ptrace");
	cr_assert_not_null(b, "MEMPROF_BUILD_ROOT is not set (run through meson test)");
	snprintf(build_root, sizeof(build_root), "%s", b);
	mp_test_tmpdir(tmpdir, sizeof(tmpdir), "svc");
	chmod(tmpdir, 0755);
}

static __attribute__((unused)) char *path_of(const char *rel)
{
	static char buf[16][4096];
	static int i;
	char *p = buf[i++ % 16];

	snprintf(p, 4096, "%s/%s", build_root, rel);
	return p;
}

static __attribute__((unused)) char *tmp_of(const char *name)
{
	static char buf[16][512];
	static int i;
	char *p = buf[i++ % 16];

	snprintf(p, 512, "%s/%s", tmpdir, name);
	return p;
}

static __attribute__((unused)) void msleep(long ms)
{
	struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L };

	nanosleep(&ts, NULL);
}

/* Everything a test spawned, killed by cleanup() when an assertion ends
 * the test early. */
static pid_t spawned[256];
static int n_spawned;

static __attribute__((unused)) void cleanup(void)
{
	for (int i = 0; i < n_spawned; i++)
		if (waitpid(spawned[i], NULL, WNOHANG) == 0) {
			kill(spawned[i], SIGKILL);
			waitpid(spawned[i], NULL, 0);
		}
	n_spawned = 0;
	mp_test_rmtree(tmpdir);
	tmpdir[0] = '\0';
}

/* Spawns argv with stdout/stderr to the given fds (-1: inherit). */
static __attribute__((unused)) pid_t spawn(char *const argv[], int out_fd, int err_fd)
{
	pid_t pid = mp_test_spawn(argv, out_fd, err_fd);

	if (n_spawned < 256)
		spawned[n_spawned++] = pid;
	return pid;
}

/* Runs argv to completion; its stdout in @out, its exit status returned. */
static __attribute__((unused)) int run_capture(char *const argv[], char *out, size_t cap)
{
	int pipefd[2];
	pid_t pid;

	cr_assert_eq(pipe2(pipefd, O_CLOEXEC), 0);
	pid = spawn(argv, pipefd[1], -1);
	close(pipefd[1]);
	return mp_test_collect(pid, pipefd[0], out, cap);
}

static __attribute__((unused)) bool can_connect(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	size_t n = strlen(path);
	int s;
	bool ok;

	if (n >= sizeof(sa.sun_path))
		return false;
	memcpy(sa.sun_path, path, n + 1);
	s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ok = connect(s, (struct sockaddr *)&sa, sizeof(sa)) == 0;
	close(s);
	return ok;
}

struct daemon {
	pid_t pid;
	char control[512];
	char log[512];
};

/* Tests assert exact heap figures, so their daemons trace in precise mode
 * unless a test sets this to see the service's own default. */
static bool daemon_default_mode;

/* memprofd in service mode with @config_text as its configuration; its
 * stderr goes to a log file in the temp dir. @wrapper (may be NULL) is
 * prepended (setpriv ...). */
static __attribute__((unused)) void daemon_start(struct daemon *d, const char *config_text,
						 char *const *wrapper)
{
	char *argv[32], cfg[512];
	int n = 0, logfd;
	FILE *f;

	snprintf(d->control, sizeof(d->control), "%s", tmp_of("control"));
	snprintf(d->log, sizeof(d->log), "%s", tmp_of("memprofd.log"));
	snprintf(cfg, sizeof(cfg), "%s", tmp_of("memprofd.conf"));
	f = fopen(cfg, "w");
	cr_assert_not_null(f);
	if (!daemon_default_mode)
		fputs("mode = precise\n", f);
	fputs(config_text, f);
	fclose(f);
	logfd = open(d->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	cr_assert_geq(logfd, 0);
	for (; wrapper && *wrapper; wrapper++)
		argv[n++] = *wrapper;
	argv[n++] = path_of("cli/memprofd");
	argv[n++] = "--control";
	argv[n++] = d->control;
	argv[n++] = "--config";
	argv[n++] = cfg;
	argv[n] = NULL;
	d->pid = spawn(argv, logfd, logfd);
	close(logfd);
	for (int i = 0; i < 500 && !can_connect(d->control); i++) {
		int st;

		cr_assert_eq(waitpid(d->pid, &st, WNOHANG), 0, "memprofd exited early, see %s",
			     d->log);
		msleep(10);
	}
	cr_assert(can_connect(d->control), "memprofd never listened, see %s", d->log);
}

/* SIGTERM, wait; returns the exit status. */
static __attribute__((unused)) int daemon_stop(struct daemon *d)
{
	int st;

	kill(d->pid, SIGTERM);
	cr_assert_eq(waitpid(d->pid, &st, 0), d->pid);
	cr_assert(WIFEXITED(st), "memprofd died by signal %d", WTERMSIG(st));
	return WEXITSTATUS(st);
}

static __attribute__((unused)) bool log_has(const struct daemon *d, const char *needle)
{
	char buf[65536];
	FILE *f = fopen(d->log, "r");
	size_t n;

	if (!f)
		return false;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	return strstr(buf, needle) != NULL;
}

/* A fixture-attach process: in kernel "outer" with 500 bytes, waiting for
 * SIGUSR1. @wrapper (NULL or setpriv ...) runs it as another user. */
static __attribute__((unused)) pid_t fixture_start_of(const char *rel, char *const *wrapper)
{
	char line[64], *argv[16];
	int pipefd[2], n = 0;
	pid_t pid;
	FILE *f;

	for (; wrapper && *wrapper; wrapper++)
		argv[n++] = *wrapper;
	argv[n++] = path_of(rel);
	argv[n] = NULL;
	cr_assert_eq(pipe2(pipefd, O_CLOEXEC), 0);
	pid = spawn(argv, pipefd[1], -1);
	close(pipefd[1]);
	f = fdopen(pipefd[0], "r");
	cr_assert_not_null(fgets(line, sizeof(line), f), "fixture said nothing");
	cr_assert_str_eq(line, "ready\n");
	fclose(f);
	return pid;
}

static __attribute__((unused)) pid_t fixture_start(char *const *wrapper)
{
	return fixture_start_of("tests/e2e/fixture-attach", wrapper);
}

static __attribute__((unused)) void fixture_finish(pid_t pid)
{
	int st;

	kill(pid, SIGUSR1);
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "fixture status %d", st);
}

static __attribute__((unused)) struct mp_profile *load(const char *path)
{
	struct mp_profile *p = NULL;
	const char *why = NULL;

	cr_assert_eq(mp_profile_load(path, &p, &why), 0, "loading %s: %s", path, why ? why : "");
	return p;
}

/* [WRAPPER...] memprof CMD --control CONTROL ARGS... (NULL-terminated);
 * stdout in @out. */
static __attribute__((unused)) int client_as(char *const *wrapper, char *out, size_t cap,
					     const struct daemon *d, const char *cmd, ...)
{
	char *argv[40];
	const char *a;
	va_list ap;
	int n = 0;

	for (; wrapper && *wrapper; wrapper++)
		argv[n++] = *wrapper;
	argv[n++] = path_of("cli/memprof");
	argv[n++] = (char *)cmd;
	argv[n++] = "--control";
	argv[n++] = (char *)d->control;
	va_start(ap, cmd);
	while ((a = va_arg(ap, const char *)) && n < 31)
		argv[n++] = (char *)a;
	va_end(ap);
	argv[n] = NULL;
	return run_capture(argv, out, cap);
}

#define client(out, cap, d, ...) client_as(NULL, out, cap, d, __VA_ARGS__)

/* A profile of pid 42 (/bin/fixture) over [1, 2] ns with nothing in it:
 * the content of the chunks of the tests that drive the streamer. */
static __attribute__((unused)) struct mp_profile *small_profile(void)
{
	struct mp_profile *p = mp_profile_new();

	cr_assert_not_null(p);
	cr_assert_eq(mp_profile_set_process(p, 42, "/bin/fixture", NULL, "fixture"), 0);
	p->begin_ns = 1;
	p->end_ns = 2;
	return p;
}

/* The test user, created if missing. */
static __attribute__((unused)) void test_user(uid_t *uid, gid_t *gid)
{
	struct passwd *pw = getpwnam("memproftest");

	if (!pw) {
		char out[256];
		char *argv[] = { "/usr/sbin/useradd",
				 "--system",
				 "--no-create-home",
				 "--shell",
				 "/usr/sbin/nologin",
				 "memproftest",
				 NULL };
		cr_assert_eq(run_capture(argv, out, sizeof(out)), 0, "useradd memproftest");
		pw = getpwnam("memproftest");
	}
	cr_assert_not_null(pw);
	*uid = pw->pw_uid;
	*gid = pw->pw_gid;
}

static __attribute__((unused)) char *const *as_user(uid_t uid, gid_t gid)
{
	static char u[32], g[32];
	static char *w[] = { "/usr/bin/setpriv", u, g, "--clear-groups", NULL };

	snprintf(u, sizeof(u), "--reuid=%u", (unsigned)uid);
	snprintf(g, sizeof(g), "--regid=%u", (unsigned)gid);
	return w;
}

static __attribute__((unused)) int raw_connect(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	cr_assert_eq(connect(s, (struct sockaddr *)&sa, sizeof(sa)), 0);
	return s;
}

/* Writes @len bytes with @nfds descriptors, returns what the daemon said
 * (0 bytes: it closed the connection). */
static __attribute__((unused)) ssize_t raw_request(const char *path, const void *buf, size_t len,
						   int nfds, char *reply, size_t cap)
{
	union {
		char b[CMSG_SPACE(4 * sizeof(int))];
		struct cmsghdr a;
	} cm;
	struct iovec iov = { .iov_base = (void *)buf, .iov_len = len };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	int s = raw_connect(path), fds[4];
	ssize_t n, total = 0;

	if (nfds) {
		struct cmsghdr *c;

		memset(&cm, 0, sizeof(cm));
		mh.msg_control = cm.b;
		mh.msg_controllen = CMSG_SPACE((size_t)nfds * sizeof(int));
		c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN((size_t)nfds * sizeof(int));
		for (int i = 0; i < nfds; i++)
			fds[i] = open("/dev/null", O_RDONLY | O_CLOEXEC);
		memcpy(CMSG_DATA(c), fds, (size_t)nfds * sizeof(int));
	}
	cr_assert_eq(sendmsg(s, &mh, MSG_NOSIGNAL), (ssize_t)len);
	for (int i = 0; i < nfds; i++)
		close(fds[i]);
	shutdown(s, SHUT_WR);
	while ((n = read(s, reply + total, cap - 1 - (size_t)total)) > 0)
		total += n;
	reply[total] = '\0';
	close(s);
	return total;
}

#endif
