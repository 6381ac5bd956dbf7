// SPDX-License-Identifier: MIT
/*
 * The control socket against a hostile local user (issue 13, items 4 and
 * 7b): every malformed request is answered with an error line before the
 * connection closes, and a flood of idle connections from one user (or a
 * few) never locks root or another user out. A real memprofd on a
 * temporary socket; the flooding processes are forked children that drop
 * to other uids with setresuid. Needs root.
 */
#include <poll.h>
#include <sys/resource.h>

#include "control.h"
#include "helpers.h"

#define MP_TEST_MAX_REQ (MP_CTL_MAX_MSG + 8)
#define MP_TEST_MAX_FIELDS MP_CTL_MAX_FIELDS

/* @text framed as a request (4-byte length prefix). */
static size_t frame(const char *text, size_t len, char *buf)
{
	buf[0] = (char)(len & 0xff);
	buf[1] = (char)((len >> 8) & 0xff);
	buf[2] = (char)((len >> 16) & 0xff);
	buf[3] = (char)((len >> 24) & 0xff);
	memcpy(buf + 4, text, len);
	return len + 4;
}

static void assert_refused(const struct daemon *d, const char *text, size_t len, int err,
			   const char *message)
{
	static char buf[MP_TEST_MAX_REQ], reply[4096];
	char want[512];
	size_t n = frame(text, len, buf);

	cr_assert_gt(raw_request(d->control, buf, n, 0, reply, sizeof(reply)), 4,
		     "no reply to '%.40s'", text);
	snprintf(want, sizeof(want), "status=error\nerrno=%d\nmessage=%s\n", err, message);
	cr_assert_str_eq(reply + 4, want);
}

Test(control, malformed_requests_get_an_error_line_then_close, .timeout = 60, .fini = cleanup)
{
	static char many[MP_TEST_MAX_REQ], longline[MP_TEST_MAX_REQ];
	struct daemon d;
	size_t n = 0;

	need_root();
	daemon_start(&d, "", NULL);
	assert_refused(&d, "cmd=list", 8, EBADMSG,
		       "malformed request: the last line does not end with a newline");
	assert_refused(&d, "cmd=list\nfoo=1\n", 15, EBADMSG,
		       "malformed request: unknown key 'foo' for list");
	assert_refused(&d, "cmd=detach\npid=1\npid=2\n", 23, EBADMSG,
		       "malformed request: key 'pid' given twice");
	assert_refused(&d, "Cmd=list\n", 9, EBADMSG,
		       "malformed request: line 1: the key is not 1 to 64 of [a-z_]");
	assert_refused(&d, "pid=1\ncmd=list\n", 15, EBADMSG,
		       "malformed request: the first line is not cmd=...");
	assert_refused(&d, "cmd=list\0\n", 10, EBADMSG, "malformed request: NUL byte at offset 8");
	assert_refused(&d, "cmd=nope\n", 9, EOPNOTSUPP, "unknown command");
	for (unsigned i = 0; i <= MP_TEST_MAX_FIELDS; i++) {
		memcpy(many + n, i ? "a=\n" : "cmd=list\n", i ? 3 : 9);
		n += i ? 3 : 9;
	}
	assert_refused(&d, many, n, EBADMSG, "malformed request: more than 1024 lines");
	n = (size_t)snprintf(longline, sizeof(longline), "cmd=list\nstream=");
	memset(longline + n, 'x', 8192);
	n += 8192;
	longline[n++] = '\n';
	assert_refused(&d, longline, n, EBADMSG,
		       "malformed request: line 2 longer than 8192 bytes");

	/* A body shorter than its length prefix, the writer then silent. */
	char buf[64], reply[512];
	size_t len = frame("cmd=list\n", 9, buf);
	buf[0] = 20;
	cr_assert_gt(raw_request(d.control, buf, len, 0, reply, sizeof(reply)), 4);
	cr_assert_str_eq(reply + 4, "status=error\nerrno=74\nmessage=malformed request: truncated "
				    "message (the length prefix says 20 bytes)\n");
	/* Still serving. */
	len = frame("cmd=list\n", 9, buf);
	cr_assert_gt(raw_request(d.control, buf, len, 0, reply, sizeof(reply)), 4);
	cr_assert_str_eq(reply + 4, "status=ok\n");
	cr_assert_eq(daemon_stop(&d), 0);
}

/* A request dripped one byte every 0.5 s, each byte well inside the 5 s
 * I/O timeout, the whole far beyond it: refused at the whole request's
 * deadline, before its last byte (it used to be read to the end, the
 * timeout counting from each byte), and a normal request after it is
 * served. */
Test(control, drip_fed_request_is_refused_at_the_whole_request_deadline, .timeout = 120,
     .fini = cleanup)
{
	static const char text[] = "cmd=detach\npid=999999999\n";
	char buf[64], reply[512];
	size_t len = frame(text, strlen(text), buf), sent = 0;
	ssize_t n, total = 0;
	struct pollfd pf;
	struct daemon d;
	int s;

	need_root();
	daemon_start(&d, "", NULL);
	s = raw_connect(d.control);
	pf = (struct pollfd){ .fd = s, .events = POLLIN };
	/* 29 bytes: 14.5 s of dripping at least. */
	while (sent < len && poll(&pf, 1, 500) == 0)
		if (send(s, buf + sent, 1, MSG_NOSIGNAL) == 1)
			sent++;
	cr_assert_lt(sent, len, "the whole request went in: the deadline is per byte");
	cr_assert_eq(poll(&pf, 1, 60000), 1, "no answer to the dripped request");
	while ((n = read(s, reply + total, sizeof(reply) - 1 - (size_t)total)) > 0)
		total += n;
	reply[total] = '\0';
	close(s);
	cr_assert_gt(total, 4);
	cr_assert_str_eq(reply + 4, "status=error\nerrno=110\nmessage=malformed request: no "
				    "complete request within 5 s\n");
	len = frame("cmd=list\n", 9, buf);
	cr_assert_gt(raw_request(d.control, buf, len, 0, reply, sizeof(reply)), 4);
	cr_assert_str_eq(reply + 4, "status=ok\n");
	cr_assert_eq(daemon_stop(&d), 0);
}

/* The values of an attach request are checked against the option table
 * before anything else happens: the reply says what would be valid. */
Test(control, invalid_attach_values_say_what_is_valid, .timeout = 60, .fini = cleanup)
{
	static const struct {
		const char *text, *message;
	} cases[] = {
		{ "cmd=attach\npid=1\nsample_bytes=0\n",
		  "invalid sample_bytes (1 to 1099511627776, suffix K, M or G)" },
		{ "cmd=attach\npid=1\nsample_bytes=1099511627777\n",
		  "invalid sample_bytes (1 to 1099511627776, suffix K, M or G)" },
		{ "cmd=attach\npid=1\nstacks=yes\n", "invalid stacks (0 or 1)" },
		{ "cmd=attach\npid=1\nmode=fast\n", "invalid mode (precise, sampled or rss)" },
		{ "cmd=attach\npid=1\ntracer=ebpf\n",
		  "invalid tracer (auto, inject, inprocess or bpf)" },
		{ "cmd=attach\npid=1\nduration_ns=1.5\n",
		  "invalid duration_ns (nanoseconds, at most 1000000000000000000)" },
		/* repeatable rules: each one is checked */
		{ "cmd=attach\npid=1\nowner=libfoo*=foo\nowner=libbar\n",
		  "invalid owner 'libbar' (GLOB=NAME)" },
		{ "cmd=attach\npid=1\nwrapper=libfoo*\nwrapper=\n", "invalid wrapper '' (GLOB)" },
		{ "cmd=attach\npid=1\nwrapper_fn=\n", "invalid wrapper_fn '' (SYMBOL)" },
		{ "cmd=attach\npid=1\nno_default_wrappers=yes\n",
		  "invalid no_default_wrappers (0 or 1)" },
	};
	struct daemon d;

	need_root();
	daemon_start(&d, "", NULL);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		assert_refused(&d, cases[i].text, strlen(cases[i].text), EINVAL, cases[i].message);
	cr_assert_eq(daemon_stop(&d), 0);
}

/* A child running as @uid that opens @n connections and says nothing;
 * writes 'r' on @ready when they are open, then waits for a byte on @go
 * and reports (exit status) how many the service has not dropped. */
static pid_t flood(const struct daemon *d, uid_t uid, int n, int *ret_ready, int *ret_go)
{
	int rp[2], gp[2];
	pid_t pid;

	cr_assert_eq(pipe2(rp, O_CLOEXEC), 0);
	cr_assert_eq(pipe2(gp, O_CLOEXEC), 0);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		static int socks[1024];
		struct sockaddr_un sa = { .sun_family = AF_UNIX };
		struct rlimit rl = { 4096, 4096 };
		int alive = 0;
		char c;

		close(rp[0]);
		close(gp[1]);
		setrlimit(RLIMIT_NOFILE, &rl);
		if (setgroups(0, NULL) < 0 || setresgid(uid, uid, uid) < 0 ||
		    setresuid(uid, uid, uid) < 0)
			_exit(250);
		snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", d->control);
		for (int i = 0; i < n; i++) {
			socks[i] = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
			if (socks[i] < 0 ||
			    connect(socks[i], (struct sockaddr *)&sa, sizeof(sa)) < 0)
				_exit(251);
		}
		if (write(rp[1], "r", 1) != 1 || read(gp[0], &c, 1) < 0)
			_exit(252);
		/* Dropped connections were answered and closed: readable. */
		usleep(200000);
		for (int i = 0; i < n; i++) {
			struct pollfd pf = { .fd = socks[i], .events = POLLIN };

			alive += poll(&pf, 1, 0) == 0;
		}
		_exit(alive);
	}
	close(rp[1]);
	close(gp[0]);
	*ret_ready = rp[0];
	*ret_go = gp[1];
	if (n_spawned < 256)
		spawned[n_spawned++] = pid;
	return pid;
}

static void flood_wait_ready(int ready)
{
	char c;

	cr_assert_eq(read(ready, &c, 1), 1, "the flooding child failed");
	close(ready);
}

static int flood_finish(pid_t pid, int go)
{
	int st;

	cr_assert_eq(write(go, "g", 1), 1);
	close(go);
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) < 250, "flooding child status %d", st);
	return WEXITSTATUS(st);
}

/* "key: value" of memprof status. */
static unsigned long status_value(const char *out, const char *key)
{
	char k[64];
	const char *p;

	snprintf(k, sizeof(k), "\n%s: ", key);
	p = strstr(out, k);
	cr_assert_not_null(p, "no %s in %s", key, out);
	return strtoul(p + strlen(k), NULL, 10);
}

/* The case of the issue: 200 idle connections of a third uid. */
Test(control, idle_flood_of_one_user_locks_out_neither_root_nor_another_user, .timeout = 120,
     .fini = cleanup)
{
	struct daemon d;
	char out[8192], want[64];
	int ready, go, alive;
	uid_t uid;
	gid_t gid;
	pid_t f;

	need_root();
	test_user(&uid, &gid);
	daemon_start(&d, "", NULL);
	f = flood(&d, 65534, 200, &ready, &go);
	flood_wait_ready(ready);
	cr_assert_eq(client(out, sizeof(out), &d, "status", NULL), 0, "root: %s", out);
	snprintf(want, sizeof(want), "pid: %d\n", (int)d.pid);
	cr_assert(!strncmp(out, want, strlen(want)), "status: %s", out);
	cr_assert_eq(status_value(out, "max_connections"), 64);
	cr_assert_eq(status_value(out, "max_connections_per_uid"), 8);
	/* The flood holds its 8, root's own status is the 9th. */
	cr_assert_eq(status_value(out, "connections"), 9);
	cr_assert_eq(status_value(out, "connections_dropped"), 192);
	cr_assert_eq(client_as(as_user(uid, gid), out, sizeof(out), &d, "list", NULL), 0);
	cr_assert_str_eq(out, "no targets\n");
	cr_assert_eq(client_as(as_user(uid, gid), out, sizeof(out), &d, "status", NULL), 0);
	/* The flooding user itself is served too: its idlest goes. */
	cr_assert_eq(client_as(as_user(65534, 65534), out, sizeof(out), &d, "list", NULL), 0);
	cr_assert_str_eq(out, "no targets\n");
	alive = flood_finish(f, go);
	cr_assert_eq(alive, 7, "%d of the flood's connections still open", alive);
	cr_assert_eq(daemon_stop(&d), 0);
}

/* Several flooding uids fill max_connections: the idlest are dropped for
 * any newcomer, the last slot is root's. */
Test(control, idle_flood_of_several_users_respects_the_total_and_roots_slot, .timeout = 120,
     .fini = cleanup)
{
	struct daemon d;
	char out[8192];
	int ready[3], go[3], alive = 0;
	pid_t f[3];
	uid_t uid;
	gid_t gid;

	need_root();
	test_user(&uid, &gid);
	daemon_start(&d, "max_connections = 8\nmax_connections_per_uid = 4\n", NULL);
	for (int i = 0; i < 3; i++) {
		f[i] = flood(&d, 65534 - (uid_t)i, 30, &ready[i], &go[i]);
		flood_wait_ready(ready[i]);
	}
	/* 3 users x 4 > 8 - 1: the total bounds the flood to 7. */
	cr_assert_eq(client(out, sizeof(out), &d, "status", NULL), 0, "root: %s", out);
	cr_assert_eq(status_value(out, "connections"), 8);
	cr_assert_eq(status_value(out, "max_connections"), 8);
	cr_assert_eq(client_as(as_user(uid, gid), out, sizeof(out), &d, "list", NULL), 0);
	cr_assert_str_eq(out, "no targets\n");
	for (int i = 0; i < 3; i++)
		alive += flood_finish(f[i], go[i]);
	/* Root's status left 7 for the flood; the user's list took one. */
	cr_assert_eq(alive, 6, "%d of the flood's connections still open", alive);
	cr_assert_eq(daemon_stop(&d), 0);
}

Test(control, limits_that_leave_root_no_slot_are_refused, .timeout = 60, .fini = cleanup)
{
	char out[4096];
	char cfg[512];
	FILE *f;

	need_root();
	snprintf(cfg, sizeof(cfg), "%s", tmp_of("bad.conf"));
	f = fopen(cfg, "w");
	cr_assert_not_null(f);
	fputs("max_connections = 8\nmax_connections_per_uid = 8\n", f);
	fclose(f);
	char *argv[] = { path_of("cli/memprofd"), "--control", tmp_of("c"), "--config", cfg, NULL };
	int logfd = open(tmp_of("bad.log"), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
	pid_t pid = spawn(argv, logfd, logfd);
	int st;
	close(logfd);
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) != 0);
	FILE *l = fopen(tmp_of("bad.log"), "r");
	size_t n = fread(out, 1, sizeof(out) - 1, l);
	fclose(l);
	out[n] = '\0';
	cr_assert_not_null(strstr(out, "max_connections_per_uid = 8 leaves no connection for "
				       "root (max_connections = 8)"),
			   "%s", out);
}
