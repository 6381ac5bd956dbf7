/* SPDX-License-Identifier: MIT */
/*
 * `memprof top PID` in a real terminal: tmux runs it in a detached
 * session (160 x 40), the test reads the screen with `capture-pane` and
 * types with `send-keys`. Directly as root (a session in the memprof
 * process) and through a private memprofd as an unprivileged user: the
 * kernels show, every sort key orders them its way, a long name ends in
 * an ellipsis at the width, and q (or SIGTERM) leaves the terminal as it
 * was, the target detached (no process holds its ring, its attached flag
 * is down, the service lists nothing) and no file behind.
 */
#include <dirent.h>
#include <sys/mman.h>

#include "helpers.h"
#include "ring_abi.h"

#define TMUX "/usr/bin/tmux"

static char tmux_sock[512];
static char pane_dir[512]; /* the pane's files, writable by its user */

/* tmux on the test's own server; its stdout in @out. */
static int tmux(char *out, size_t cap, const char *a0, const char *a1, const char *a2,
		const char *a3, const char *a4)
{
	char *argv[] = { TMUX,	     "-S",	 tmux_sock,  (char *)a0, (char *)a1,
			 (char *)a2, (char *)a3, (char *)a4, NULL };

	return run_capture(argv, out, cap);
}

static void top_cleanup(void)
{
	char out[256];

	if (tmux_sock[0])
		tmux(out, sizeof(out), "kill-server", NULL, NULL, NULL, NULL);
	tmux_sock[0] = '\0';
	cleanup();
}

static const char *screen(void)
{
	static char buf[65536];

	cr_assert_eq(tmux(buf, sizeof(buf), "capture-pane", "-p", "-t", "top", NULL), 0);
	return buf;
}

static char *pane_file(const char *name)
{
	static char buf[8][600];
	static int i;
	char *p = buf[i++ % 8];

	snprintf(p, 600, "%s/%s", pane_dir, name);
	return p;
}

/* Starts `[WRAPPER] memprof top PID ARGS` in the pane, through a script
 * that saves the terminal's settings before and after, the exit status,
 * and then keeps the pane open. Its TMPDIR is an empty directory. */
static void pane_start(char *const *wrapper, uid_t uid, pid_t pid, const char *a1, const char *a2)
{
	char *argv[24], pidtxt[16], out[1024];
	int n = 0;
	FILE *f;

	snprintf(tmux_sock, sizeof(tmux_sock), "%s", tmp_of("tmux.sock"));
	snprintf(pane_dir, sizeof(pane_dir), "%s", tmp_of("pane"));
	cr_assert_eq(mkdir(pane_dir, 0755), 0);
	cr_assert_eq(mkdir(pane_file("tmp"), 0755), 0);
	cr_assert_eq(chown(pane_dir, uid, (gid_t)-1), 0);
	cr_assert_eq(chown(pane_file("tmp"), uid, (gid_t)-1), 0);
	f = fopen(pane_file("run.sh"), "w");
	cr_assert_not_null(f);
	fprintf(f,
		"D='%s'\n"
		"stty -g > \"$D/stty.before\"\n"
		"TMPDIR=\"$D/tmp\" LC_ALL=C \"$@\" 2> \"$D/top.err\"\n"
		"echo $? > \"$D/rc.part\"\n"
		"stty -g > \"$D/stty.after\"\n"
		"mv \"$D/rc.part\" \"$D/rc\"\n"
		"exec cat\n",
		pane_dir);
	fclose(f);
	snprintf(pidtxt, sizeof(pidtxt), "%d", (int)pid);
	argv[n++] = TMUX;
	argv[n++] = "-S";
	argv[n++] = tmux_sock;
	argv[n++] = "new-session";
	argv[n++] = "-d";
	argv[n++] = "-x";
	argv[n++] = "160";
	argv[n++] = "-y";
	argv[n++] = "40";
	argv[n++] = "-s";
	argv[n++] = "top";
	for (; wrapper && *wrapper; wrapper++)
		argv[n++] = *wrapper;
	argv[n++] = "/bin/sh";
	argv[n++] = pane_file("run.sh");
	argv[n++] = path_of("cli/memprof");
	argv[n++] = "top";
	argv[n++] = pidtxt;
	if (a1)
		argv[n++] = (char *)a1;
	if (a2)
		argv[n++] = (char *)a2;
	argv[n] = NULL;
	cr_assert_eq(run_capture(argv, out, sizeof(out)), 0, "tmux new-session");
}

static void keys(const char *k)
{
	char out[256];

	cr_assert_eq(tmux(out, sizeof(out), "send-keys", "-t", "top", k, NULL), 0);
}

static const char *const names[] = { "  top_big_peak\n", "  top_keeps_blocks\n", "  top_long_",
				     "  top_many_calls\n" };
enum { BIG, KEEPS, LONG, MANY };

/* Whether the screen shows the kernels @want (indices of names[]) in
 * that order, each once. */
static bool in_order(const int *want, size_t n)
{
	const char *s = screen(), *last = s;

	for (size_t i = 0; i < n; i++) {
		const char *at = strstr(s, names[want[i]]);

		if (!at || at < last)
			return false;
		last = at;
	}
	return true;
}

static bool shows_all(void)
{
	const char *s = screen();

	for (size_t i = 0; i < 4; i++)
		if (!strstr(s, names[i]))
			return false;
	return true;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* The target's marker ring: its inode, and its header's attached flag. */
struct ring {
	dev_t dev;
	ino_t ino;
	uint32_t attached;
};

static bool ring_of(pid_t pid, struct ring *r)
{
	static const char want[] = "/memfd:" MP_RING_MEMFD_NAME " (deleted)";
	char dir[64], path[320], link[sizeof(want) + 1];
	struct dirent *de;
	bool found = false;
	DIR *d;

	snprintf(dir, sizeof(dir), "/proc/%d/fd", (int)pid);
	d = opendir(dir);
	cr_assert_not_null(d);
	while (!found && (de = readdir(d))) {
		struct mp_ring_hdr *h;
		struct stat st;
		ssize_t n;
		int fd;

		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		n = readlink(path, link, sizeof(link));
		if (n != (ssize_t)sizeof(want) - 1 || memcmp(link, want, (size_t)n))
			continue;
		fd = open(path, O_RDONLY | O_CLOEXEC);
		cr_assert_geq(fd, 0);
		cr_assert_eq(fstat(fd, &st), 0);
		h = mmap(NULL, sizeof(*h), PROT_READ, MAP_SHARED, fd, 0);
		cr_assert_neq(h, MAP_FAILED);
		r->dev = st.st_dev;
		r->ino = st.st_ino;
		r->attached = __atomic_load_n(&h->attached, __ATOMIC_ACQUIRE);
		munmap(h, sizeof(*h));
		close(fd);
		found = true;
	}
	closedir(d);
	return found;
}

/* Whether process @pid holds the ring as a descriptor or a mapping. */
static bool holds(const char *pid, const struct ring *r)
{
	char path[320], line[512];
	struct dirent *de;
	bool held = false;
	struct stat st;
	DIR *d;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%s/fd", pid);
	d = opendir(path);
	while (d && !held && (de = readdir(d))) {
		snprintf(path, sizeof(path), "/proc/%s/fd/%s", pid, de->d_name);
		held = stat(path, &st) == 0 && st.st_dev == r->dev && st.st_ino == r->ino;
	}
	if (d)
		closedir(d);
	snprintf(path, sizeof(path), "/proc/%s/maps", pid);
	f = fopen(path, "re");
	while (f && !held && fgets(line, sizeof(line), f)) {
		unsigned long long ino = 0;

		held = strstr(line, "memfd:" MP_RING_MEMFD_NAME) &&
		       sscanf(line, "%*s %*s %*s %*s %llu", &ino) == 1 && ino == r->ino;
	}
	if (f)
		fclose(f);
	return held;
}

/* Processes other than @target holding its ring. */
static int ring_holders(pid_t target, const struct ring *r)
{
	DIR *d = opendir("/proc");
	struct dirent *de;
	int n = 0;

	cr_assert_not_null(d);
	while ((de = readdir(d)))
		if (de->d_name[0] >= '1' && de->d_name[0] <= '9' && atoi(de->d_name) != target)
			n += holds(de->d_name, r);
	closedir(d);
	return n;
}

static bool detached(pid_t target)
{
	struct ring r;

	return ring_of(target, &r) && !r.attached && ring_holders(target, &r) == 0;
}

static bool file_exists(const char *path)
{
	return access(path, F_OK) == 0;
}

static void read_text(const char *path, char *buf, size_t cap)
{
	FILE *f = fopen(path, "r");
	size_t n;

	cr_assert_not_null(f, "%s", path);
	n = fread(buf, 1, cap - 1, f);
	buf[n] = '\0';
	fclose(f);
}

/* The screen up, the kernels in it within 5 s, the target attached. */
static void expect_kernels_show(pid_t target)
{
	double t0 = now_s(), t1;
	struct ring r;

	cr_assert(MP_TEST_WAIT_FOR(strstr(screen(), "memprof top: pid") ||
					   file_exists(pane_file("rc")),
				   60000),
		  "no screen:\n%s", screen());
	cr_assert(!file_exists(pane_file("rc")), "memprof top exited at once");
	t1 = now_s();
	cr_assert(MP_TEST_WAIT_FOR(shows_all(), 5000), "the kernels did not show in 5 s:\n%s",
		  screen());
	cr_log_info("screen after %.2f s, every kernel after %.2f s", t1 - t0, now_s() - t0);
	cr_assert(ring_of(target, &r));
	cr_expect_neq(r.attached, 0, "the ring is not attached while top runs");
	cr_expect_geq(ring_holders(target, &r), 1, "nobody holds the ring while top runs");
}

/* The width of the long name's line when it ends in the ellipsis, else
 * 0 (not on the screen, or cut by the terminal rather than by top). */
static long long_line_width(void)
{
	const char *s = screen(), *line = strstr(s, names[LONG]), *end;

	if (!line)
		return 0;
	while (line > s && line[-1] != '\n')
		line--;
	end = strchr(line, '\n');
	return end && end - line >= 3 && !strncmp(end - 3, "...", 3) ? end - line : 0;
}

/* Each key orders the rows its way (figures from the highest, ties by
 * name); the long name ends in "..." at the pane's width. */
static void expect_sorts(void)
{
	static const int by_live[] = { KEEPS, BIG, LONG, MANY },
			 by_peak[] = { BIG, KEEPS, LONG, MANY },
			 by_name[] = { BIG, KEEPS, LONG, MANY };
	const char *s, *line, *end;

	cr_expect(MP_TEST_WAIT_FOR(strstr(screen(), "sorted by live;") && in_order(by_live, 4),
				   10000),
		  "by live:\n%s", screen());
	keys("p");
	cr_expect(MP_TEST_WAIT_FOR(strstr(screen(), "sorted by peak;") && in_order(by_peak, 4),
				   10000),
		  "by peak:\n%s", screen());
	/* calls and alloc: the first row only (the others' figures are
	 * equal, or close, between two snapshots) */
	keys("c");
	cr_expect(MP_TEST_WAIT_FOR(strstr(screen(), "sorted by calls;") &&
					   in_order((const int[]){ MANY, BIG }, 2) &&
					   in_order((const int[]){ MANY, KEEPS }, 2) &&
					   in_order((const int[]){ MANY, LONG }, 2),
				   10000),
		  "by calls:\n%s", screen());
	keys("a");
	cr_expect(MP_TEST_WAIT_FOR(strstr(screen(), "sorted by alloc;") &&
					   in_order((const int[]){ BIG, KEEPS }, 2) &&
					   in_order((const int[]){ BIG, LONG }, 2) &&
					   in_order((const int[]){ BIG, MANY }, 2),
				   10000),
		  "by alloc:\n%s", screen());
	keys("n");
	cr_expect(MP_TEST_WAIT_FOR(strstr(screen(), "sorted by name;") && in_order(by_name, 4),
				   10000),
		  "by name:\n%s", screen());

	s = screen();
	line = strstr(s, names[LONG]);
	cr_assert_not_null(line);
	while (line > s && line[-1] != '\n')
		line--;
	end = strchr(line, '\n');
	cr_assert_not_null(end);
	cr_expect_eq(end - line, 160, "the long name's line is not the pane's width:\n%.*s",
		     (int)(end - line), line);
	cr_expect(!strncmp(end - 3, "...", 3), "no ellipsis:\n%.*s", (int)(end - line), line);
	cr_expect(!memmem(line, (size_t)(end - line), "_END", 4), "%.*s", (int)(end - line), line);
}

/* Waits for top's exit; checks its status, the terminal and the files. */
static void expect_clean_exit(pid_t target)
{
	char before[1024], after[1024], err[4096], out[256];
	DIR *d;
	struct dirent *de;
	int entries = 0;

	cr_assert(MP_TEST_WAIT_FOR(file_exists(pane_file("rc")), 30000),
		  "memprof top did not exit:\n%s", screen());
	read_text(pane_file("top.err"), err, sizeof(err));
	cr_log_info("memprof top's stderr: '%s'", err);
	read_text(pane_file("rc"), out, sizeof(out));
	cr_expect_str_eq(out, "0\n", "exit status %s, stderr: %s", out, err);
	read_text(pane_file("stty.before"), before, sizeof(before));
	read_text(pane_file("stty.after"), after, sizeof(after));
	cr_expect_str_eq(after, before, "the terminal's settings were not restored");
	cr_assert_eq(tmux(out, sizeof(out), "display-message", "-p", "-t", "top",
			  "#{alternate_on} #{cursor_flag}"),
		     0);
	cr_expect_str_eq(out, "0 1\n", "alternate screen, cursor shown: %s", out);
	cr_expect(!strstr(screen(), "memprof top: pid"), "the screen was left:\n%s", screen());
	cr_expect(MP_TEST_WAIT_FOR(detached(target), 10000),
		  "the target is still attached, or a process holds its ring");
	d = opendir(pane_file("tmp"));
	cr_assert_not_null(d);
	while ((de = readdir(d)))
		entries += strcmp(de->d_name, ".") && strcmp(de->d_name, "..");
	closedir(d);
	cr_expect_eq(entries, 0, "files left in TMPDIR");
}

Test(top, direct_as_root, .timeout = 180, .fini = top_cleanup)
{
	char out[256];
	pid_t f;

	need_root();
	f = fixture_start_of("tests/service/fixture-top", NULL);
	pane_start(NULL, 0, f, "--direct", NULL);
	expect_kernels_show(f);
	cr_expect(strstr(screen(), "(direct)"), "%s", screen());
	expect_sorts();
	/* a narrower terminal: the line follows its width */
	cr_assert_eq(tmux(out, sizeof(out), "resize-window", "-t", "top", "-x", "100"), 0);
	cr_expect(MP_TEST_WAIT_FOR(long_line_width() == 100, 10000), "after a resize to 100:\n%s",
		  screen());
	keys("q");
	expect_clean_exit(f);
	fixture_finish(f);
}

Test(top, through_the_service_as_a_user, .timeout = 180, .fini = top_cleanup)
{
	struct daemon d;
	char out[4096];
	uid_t uid;
	gid_t gid;
	pid_t f;

	need_root();
	test_user(&uid, &gid);
	daemon_start(&d, "", NULL);
	f = fixture_start_of("tests/service/fixture-top", as_user(uid, gid));
	pane_start(as_user(uid, gid), uid, f, "--control", d.control);
	expect_kernels_show(f);
	cr_expect(strstr(screen(), "(memprofd)"), "%s", screen());
	cr_assert_eq(client(out, sizeof(out), &d, "list", NULL), 0);
	cr_expect(strstr(out, "state=running"), "memprof list: %s", out);
	expect_sorts();
	keys("q");
	expect_clean_exit(f);
	cr_assert_eq(client(out, sizeof(out), &d, "list", NULL), 0);
	cr_expect_str_eq(out, "no targets\n");
	fixture_finish(f);
	cr_expect_eq(daemon_stop(&d), 0);
}

/* SIGTERM (and SIGINT, SIGHUP: the same path) quits as q does. */
Test(top, sigterm_restores_the_terminal_and_detaches, .timeout = 180, .fini = top_cleanup)
{
	char out[256], path[64];
	long sh, top = 0;
	pid_t f;

	need_root();
	f = fixture_start_of("tests/service/fixture-top", NULL);
	pane_start(NULL, 0, f, "--direct", NULL);
	expect_kernels_show(f);
	cr_assert_eq(tmux(out, sizeof(out), "display-message", "-p", "-t", "top", "#{pane_pid}"),
		     0);
	sh = atol(out);
	snprintf(path, sizeof(path), "/proc/%ld/task/%ld/children", sh, sh);
	read_text(path, out, sizeof(out));
	top = atol(out);
	cr_assert_gt(top, 0, "no child of the pane's shell: '%s'", out);
	cr_assert_eq(kill((pid_t)top, SIGTERM), 0);
	expect_clean_exit(f);
	fixture_finish(f);
}

/* A target attached before (memprof attach) is shown through dumps and
 * stays attached on q; top says so. */
Test(top, a_target_attached_before_stays_attached, .timeout = 180, .fini = top_cleanup)
{
	struct daemon d;
	char out[4096];
	pid_t f;

	need_root();
	daemon_start(&d, "", NULL);
	f = fixture_start_of("tests/service/fixture-top", NULL);
	snprintf(out, sizeof(out), "%d", (int)f);
	cr_assert_eq(client(out, sizeof(out), &d, "attach", out, NULL), 0, "%s", out);
	pane_start(NULL, 0, f, "--control", d.control);
	expect_kernels_show(f);
	cr_expect(strstr(screen(), "was attached before: q leaves it attached"), "%s", screen());
	keys("q");
	cr_assert(MP_TEST_WAIT_FOR(file_exists(pane_file("rc")), 30000), "%s", screen());
	read_text(pane_file("rc"), out, sizeof(out));
	cr_expect_str_eq(out, "0\n");
	snprintf(out, sizeof(out), "pid %d stays attached to memprofd (memprof detach %d ends it)",
		 (int)f, (int)f);
	cr_expect(strstr(screen(), out), "%s", screen());
	cr_assert_eq(client(out, sizeof(out), &d, "list", NULL), 0);
	cr_expect(strstr(out, "state=running"), "memprof list: %s", out);
	snprintf(out, sizeof(out), "%d", (int)f);
	cr_assert_eq(client(out, sizeof(out), &d, "detach", out, NULL), 0, "%s", out);
	cr_expect(MP_TEST_WAIT_FOR(detached(f), 10000));
	fixture_finish(f);
	cr_expect_eq(daemon_stop(&d), 0);
}

/* The target exits under a direct session: its last figures stay on the
 * screen with a note until q, which then exits 0. */
Test(top, target_exit_is_shown_until_q, .timeout = 180, .fini = top_cleanup)
{
	char out[256];
	pid_t f;

	need_root();
	f = fixture_start_of("tests/service/fixture-top", NULL);
	pane_start(NULL, 0, f, "--direct", NULL);
	expect_kernels_show(f);
	fixture_finish(f);
	snprintf(out, sizeof(out), "pid %d exited: its final profile is shown; q quits", (int)f);
	cr_expect(MP_TEST_WAIT_FOR(strstr(screen(), out), 10000), "%s", screen());
	cr_expect(shows_all(), "%s", screen());
	cr_expect(!file_exists(pane_file("rc")), "top did not wait for q");
	keys("q");
	cr_assert(MP_TEST_WAIT_FOR(file_exists(pane_file("rc")), 30000), "%s", screen());
	read_text(pane_file("rc"), out, sizeof(out));
	cr_expect_str_eq(out, "0\n");
}

/* Without a terminal: a clear refusal, before attaching to anything. */
Test(top, needs_a_terminal, .timeout = 60, .fini = cleanup)
{
	char *argv[] = { NULL, "top", "--direct", "1", NULL };
	char err[1024];
	int errp[2], devnull;
	pid_t pid;

	need_root();
	argv[0] = path_of("cli/memprof");
	cr_assert_eq(pipe2(errp, O_CLOEXEC), 0);
	devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
	cr_assert_geq(devnull, 0);
	pid = spawn(argv, devnull, errp[1]);
	close(errp[1]);
	close(devnull);
	cr_expect_eq(mp_test_collect(pid, errp[0], err, sizeof(err)), 2);
	cr_expect_str_eq(err, "memprof top: needs a terminal on standard input and output "
			      "(`memprof dump PID` prints one table)\n");
}

/* A user the policy refuses (root's target): the service's reason, exit
 * status 1, the terminal untouched (the screen never opened), nothing
 * attached. */
Test(top, a_refused_user_gets_the_reason, .timeout = 120, .fini = top_cleanup)
{
	char out[4096], before[1024], after[1024];
	struct daemon d;
	uid_t uid;
	gid_t gid;
	pid_t f;

	need_root();
	test_user(&uid, &gid);
	daemon_start(&d, "", NULL);
	f = fixture_start_of("tests/service/fixture-top", NULL);
	pane_start(as_user(uid, gid), uid, f, "--control", d.control);
	cr_assert(MP_TEST_WAIT_FOR(file_exists(pane_file("rc")), 30000), "%s", screen());
	read_text(pane_file("rc"), out, sizeof(out));
	cr_expect_str_eq(out, "1\n");
	read_text(pane_file("top.err"), out, sizeof(out));
	cr_expect(!strncmp(out, "memprof top: not permitted: process ", 36) &&
			  strstr(out, "(only root may profile other users' or set-id processes)\n"),
		  "%s", out);
	read_text(pane_file("stty.before"), before, sizeof(before));
	read_text(pane_file("stty.after"), after, sizeof(after));
	cr_expect_str_eq(after, before);
	cr_assert_eq(client(out, sizeof(out), &d, "list", NULL), 0);
	cr_expect_str_eq(out, "no targets\n");
	cr_expect(detached(f));
	fixture_finish(f);
	cr_expect_eq(daemon_stop(&d), 0);
}

/* A process started without memprof (tests/inject's fixture-toy, which
 * marks kernels once libmemprof is in it): top injects libmemprof and
 * shows its kernels on the in-process path. */
Test(top, a_plain_process_on_the_in_process_path, .timeout = 180, .fini = top_cleanup)
{
	char lib[4096], tl[4200], il[4200], *wrapper[] = { "/usr/bin/env",	   tl,	      il,
							   "MEMPROF_TOY_NOLOAD=1", "/bin/sh", "-c",
							   "exec \"$0\" 2 0 loop", NULL };
	int st;
	pid_t f;

	need_root();
	/* the libmemprof a plain process can load: tests/plain's in a
	 * sanitizer build */
	snprintf(lib, sizeof(lib), "%s", path_of("tests/plain/libmemprof.so.0"));
	if (access(lib, R_OK))
		snprintf(lib, sizeof(lib), "%s", path_of("libclient/libmemprof.so.0"));
	snprintf(tl, sizeof(tl), "MEMPROF_TOY_LIB=%s", lib);
	snprintf(il, sizeof(il), "MEMPROF_INJECT_LIB=%s", lib);
	cr_assert_eq(setenv("MEMPROF_INJECT_LIB", lib, 1), 0);
	f = fixture_start_of("tests/inject/fixture-toy", wrapper);
	pane_start(NULL, 0, f, "--direct", NULL);
	cr_assert(
		MP_TEST_WAIT_FOR(strstr(screen(), "in-process path") && strstr(screen(), " conv\n"),
				 60000),
		"no kernel on the in-process path:\n%s", screen());
	keys("q");
	expect_clean_exit(f);
	/* it ran on: its "done" line meets the closed pipe of its "ready" */
	kill(f, SIGTERM);
	cr_assert_eq(waitpid(f, &st, 0), f);
	cr_assert((WIFEXITED(st) && WEXITSTATUS(st) == 0) ||
			  (WIFSIGNALED(st) && WTERMSIG(st) == SIGPIPE),
		  "fixture status %d", st);
}
