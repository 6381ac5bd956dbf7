// SPDX-License-Identifier: MIT
/*
 * memprofd --pid streams a real target (fixture_kernels.c, traced with
 * real BPF) to test receivers (receiver.py) that answer as each server
 * documents: Pyroscope's push API (Connect unary), OTLP/HTTP profiles,
 * Parca's WriteRaw over gRPC-Web. What arrives is decoded with tools that
 * are not ours: `protoc --decode` against the .proto subsets of proto/
 * for the envelopes, `go tool pprof` for every embedded pprof (exact
 * bytes per kernel). Also: retry and drop on each protocol's errors, TLS
 * against a throw-away CA (accepted with --ca, refused without), and a
 * token header file (sent, never logged). Needs root.
 */
#include "../common/helpers.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char build_root[2048], source_root[2048], tmpdir[128];
static pid_t spawned[16];
static int n_spawned;

static void setup(void)
{
	const char *b = getenv("MEMPROF_BUILD_ROOT"), *s = getenv("MEMPROF_SOURCE_ROOT");

	mp_test_need_root("BPF and ptrace");
	cr_assert(b && s, "MEMPROF_BUILD_ROOT/MEMPROF_SOURCE_ROOT not set (run through meson)");
	snprintf(build_root, sizeof(build_root), "%s", b);
	snprintf(source_root, sizeof(source_root), "%s", s);
	mp_test_tmpdir(tmpdir, sizeof(tmpdir), "backends");
	/* go tool needs a writable home and build cache. */
	setenv("HOME", tmpdir, 1);
	setenv("GOCACHE", tmpdir, 1);
}

static void teardown(void)
{
	for (int i = 0; i < n_spawned; i++) {
		if (spawned[i] > 0 && kill(spawned[i], SIGKILL) == 0)
			waitpid(spawned[i], NULL, 0);
	}
	n_spawned = 0;
	if (mp_test_rmtree(tmpdir) < 0)
		fprintf(stderr, "cannot remove %s\n", tmpdir);
}

TestSuite(backends, .init = setup, .fini = teardown, .timeout = 180);

static char *pathf(const char *fmt, ...)
{
	static char buf[16][4096];
	static int i;
	char *p = buf[i++ % 16];
	va_list ap;

	va_start(ap, fmt);
	cr_assert_lt(vsnprintf(p, 4096, fmt, ap), 4096);
	va_end(ap);
	return p;
}

static void forget(pid_t pid)
{
	for (int i = 0; i < n_spawned; i++)
		if (spawned[i] == pid)
			spawned[i] = 0;
}

/* mp_test_spawn(), remembered for the teardown. */
static pid_t spawn(char *const argv[], int out_fd, int err_fd)
{
	pid_t pid = mp_test_spawn(argv, out_fd, err_fd);

	cr_assert_lt(n_spawned, 16);
	spawned[n_spawned++] = pid;
	return pid;
}

/* Runs a shell command; its stdout in a new string, its status in *@st. */
static char *sh(int *st, const char *fmt, ...)
{
	char cmd[8192], *out = malloc(1 << 20);
	size_t n = 0, k;
	va_list ap;
	FILE *f;

	va_start(ap, fmt);
	cr_assert_lt(vsnprintf(cmd, sizeof(cmd), fmt, ap), (int)sizeof(cmd));
	va_end(ap);
	f = popen(cmd, "r");
	cr_assert_not_null(f);
	while ((k = fread(out + n, 1, (1 << 20) - 1 - n, f)) > 0)
		n += k;
	out[n] = '\0';
	*st = pclose(f);
	return out;
}

static char *slurp(const char *path, size_t *ret_len)
{
	FILE *f = fopen(path, "rb");
	char *buf;
	long n;

	cr_assert_not_null(f, "%s", path);
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	fseek(f, 0, SEEK_SET);
	buf = malloc((size_t)n + 1);
	cr_assert_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
	buf[n] = '\0';
	fclose(f);
	if (ret_len)
		*ret_len = (size_t)n;
	return buf;
}

static void spit(const char *path, const void *buf, size_t len)
{
	FILE *f = fopen(path, "wb");

	cr_assert_not_null(f, "%s", path);
	cr_assert_eq(fwrite(buf, 1, len, f), len);
	fclose(f);
}

static void msleep(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

	nanosleep(&ts, NULL);
}

struct rx {
	pid_t pid;
	int port;
	char dir[256];
};

/* Starts receiver.py answering with the JSON list @responses. */
static void rx_start(struct rx *r, const char *name, const char *responses, bool tls)
{
	char *resp = pathf("%s/%s.json", tmpdir, name), line[64];
	char *argv[] = { "/usr/bin/env",
			 "python3",
			 pathf("%s/tests/transport/receiver.py", source_root),
			 r->dir,
			 resp,
			 tls ? "--tls" : NULL,
			 pathf("%s/server.pem", tmpdir),
			 pathf("%s/server.key", tmpdir),
			 NULL };
	int pipefd[2];
	FILE *f;

	snprintf(r->dir, sizeof(r->dir), "%s/%s", tmpdir, name);
	cr_assert_eq(mkdir(r->dir, 0700), 0);
	spit(resp, responses, strlen(responses));
	cr_assert_eq(pipe2(pipefd, O_CLOEXEC), 0);
	r->pid = spawn(argv, pipefd[1], -1);
	close(pipefd[1]);
	f = fdopen(pipefd[0], "r");
	cr_assert_not_null(fgets(line, sizeof(line), f), "receiver did not start");
	cr_assert_eq(sscanf(line, "listening %d", &r->port), 1, "%s", line);
	fclose(f);
}

static int rx_count(const struct rx *r)
{
	int n = 0;

	while (access(pathf("%s/%d.head", r->dir, n), F_OK) == 0)
		n++;
	return n;
}

static bool has(const char *text, const char *needle)
{
	return strstr(text, needle) != NULL;
}

/*
 * fixture-kernels under memprofd --pid streaming to @url (with @ca for
 * --ca): waits for @wait_requests requests (0: a refused certificate in
 * the log), lets the
 * fixture allocate and exit, and waits for memprofd to end. Returns its
 * stderr (the log).
 */
static char *run_target(const struct rx *r, const char *url, const char *ca, int wait_requests,
			pid_t *ret_fixture)
{
	char log[512], ps[16], line[64];
	char *fx = pathf("%s/tests/transport/fixture-kernels", build_root);
	char *fargv[] = { fx, NULL };
	char *argv[16] = { pathf("%s/cli/memprofd", build_root),
			   "--pid",
			   ps,
			   "--stream",
			   (char *)url,
			   "--stream-interval",
			   "0.2",
			   "--print",
			   "none" };
	int n = 9, pipefd[2], lfd, st;
	pid_t f, d;
	FILE *in;

	/* Not pathf's: its buffers are reused below. */
	snprintf(log, sizeof(log), "%s/memprofd-%d.log", tmpdir, r->port);
	cr_assert_eq(pipe2(pipefd, O_CLOEXEC), 0);
	f = spawn(fargv, pipefd[1], -1);
	close(pipefd[1]);
	in = fdopen(pipefd[0], "r");
	cr_assert_not_null(fgets(line, sizeof(line), in), "fixture said nothing");
	cr_assert_str_eq(line, "ready\n");
	fclose(in);
	snprintf(ps, sizeof(ps), "%d", (int)f);
	if (ca) {
		argv[n++] = "--ca";
		argv[n++] = (char *)ca;
	}
	argv[n] = NULL;
	lfd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	cr_assert_geq(lfd, 0);
	d = spawn(argv, -1, lfd);
	close(lfd);
	if (wait_requests) {
		for (int i = 0; i < 3000 && rx_count(r) < wait_requests; i++)
			msleep(10);
		cr_assert_geq(rx_count(r), wait_requests, "no request within 30 s");
	} else {
		/* Nothing will arrive: the refusal in the log says that memprofd
		 * is attached and streaming. */
		bool refused = false;

		for (int i = 0; i < 3000 && !refused; i++) {
			char *text = slurp(log, NULL);

			refused = has(text, " refused: ");
			free(text);
			if (!refused)
				msleep(10);
		}
		cr_assert(refused, "no refusal logged within 30 s");
	}
	kill(f, SIGUSR1);
	cr_assert_eq(waitpid(f, &st, 0), f);
	forget(f);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "fixture status %d", st);
	/* memprofd ends with its target, after a final chunk. */
	for (int i = 0; i < 3000 && waitpid(d, &st, WNOHANG) == 0; i++)
		msleep(10);
	cr_assert_eq(kill(d, 0), -1, "memprofd did not end with its target");
	forget(d);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "memprofd status %d", st);
	if (ret_fixture)
		*ret_fixture = f;
	return slurp(log, NULL);
}

/* protoc's text escapes (octal, \n, \", ...) back to bytes. */
static size_t unescape(const char *s, uint8_t *out)
{
	size_t n = 0;

	while (*s && *s != '"') {
		if (*s != '\\') {
			out[n++] = (uint8_t)*s++;
			continue;
		}
		s++;
		if (*s >= '0' && *s <= '7') {
			int v = 0;

			for (int k = 0; k < 3 && *s >= '0' && *s <= '7'; k++)
				v = v * 8 + (*s++ - '0');
			out[n++] = (uint8_t)v;
			continue;
		}
		switch (*s) {
		case 'n':
			out[n++] = '\n';
			break;
		case 'r':
			out[n++] = '\r';
			break;
		case 't':
			out[n++] = '\t';
			break;
		default:
			out[n++] = (uint8_t)*s;
		}
		s++;
	}
	return n;
}

/* protoc --decode=@type of @body_path; exits 0 or fails the test. */
static char *decode(const char *proto, const char *type, const char *body_path)
{
	int st;
	char *out = sh(&st, "protoc -I '%s/proto' --decode=%s '%s/proto/%s' < '%s' 2>&1",
		       source_root, type, source_root, proto, body_path);

	cr_assert_eq(st, 0, "protoc --decode=%s failed: %s", type, out);
	return out;
}

/* The value of the first `@field: "..."` of protoc's output, unescaped. */
static uint8_t *field_bytes(const char *text, const char *field, size_t *ret_len)
{
	char key[64];
	const char *p;
	uint8_t *out;

	snprintf(key, sizeof(key), "%s: \"", field);
	p = strstr(text, key);
	cr_assert_not_null(p, "no %s in %s", field, text);
	out = malloc(strlen(p) + 1);
	*ret_len = unescape(p + strlen(key), out);
	return out;
}

static void expect_line(const char *out, const char *want, const char *what)
{
	char norm[1 << 16], *w;
	const char *p;
	bool space = false;

	/* Columns collapse to single spaces. */
	for (p = out, w = norm; *p && w < norm + sizeof(norm) - 1; p++) {
		if (*p == ' ' || *p == '\t') {
			space = true;
			continue;
		}
		if (space && w > norm && w[-1] != '\n' && *p != '\n')
			*w++ = ' ';
		space = false;
		*w++ = *p;
	}
	*w = '\0';
	cr_assert(has(norm, want), "%s: no line '%s' in:\n%s", what, want, norm);
}

/* The embedded pprof, read by go tool pprof: exact bytes per kernel. */
static void check_pprof(const uint8_t *pp, size_t len, const char *name)
{
	char *f = pathf("%s/%s.pb.gz", tmpdir, name), *out;
	int st;

	cr_assert(len > 2 && pp[0] == 0x1f && pp[1] == 0x8b, "%s: not a gzipped pprof", name);
	spit(f, pp, len);
	out = sh(&st, "go tool pprof -raw '%s' 2>&1", f);
	cr_assert_eq(st, 0, "go tool pprof failed: %s", out);
	expect_line(out, "PeriodType: space bytes", name);
	expect_line(out,
		    "alloc_objects/count alloc_space/bytes inuse_objects/count inuse_space/bytes",
		    name);
	free(out);
	out = sh(&st, "go tool pprof -tags -unit=B -sample_index=alloc_space '%s' 2>&1", f);
	cr_assert_eq(st, 0, "%s", out);
	expect_line(out, "kernel: Total 6200.0B", name);
	expect_line(out, "5000.0B (80.65%): matmul", name);
	expect_line(out, "1200.0B (19.35%): relu", name);
	expect_line(out, "6200.0B ( 100%): inference", name);
	free(out);
	out = sh(&st, "go tool pprof -tags -unit=B -sample_index=inuse_space '%s' 2>&1", f);
	cr_assert_eq(st, 0, "%s", out);
	expect_line(out, "kernel: Total 1200.0B", name);
	expect_line(out, "1000.0B (83.33%): matmul", name);
	expect_line(out, "200.0B (16.67%): relu", name);
	free(out);
	out = sh(&st, "go tool pprof -tags -sample_index=alloc_objects '%s' 2>&1", f);
	cr_assert_eq(st, 0, "%s", out);
	expect_line(out, "kernel: Total 6.0", name);
	expect_line(out, "3.0 (50.00%): matmul", name);
	expect_line(out, "3.0 (50.00%): relu", name);
	free(out);
}

/* Labels memprofd puts on a Pyroscope or Parca series. */
static void check_labels(const char *text, const char *service)
{
	char want[256];

	cr_assert(has(text, "name: \"__name__\"\n") && has(text, "value: \"memory\"\n"), "%s",
		  text);
	snprintf(want, sizeof(want), "name: \"service_name\"\n");
	cr_assert(has(text, want), "%s", text);
	snprintf(want, sizeof(want), "value: \"%s\"\n", service);
	cr_assert(has(text, want), "%s", text);
	cr_assert(has(text, "name: \"__delta__\"\n") && has(text, "value: \"false\"\n"), "%s",
		  text);
}

static const char pyroscope_ok[] =
	"{\"status\": 200, \"headers\": {\"Content-Type\": \"application/proto\"}}";

/*
 * The push API with a token file: a 503 "unavailable" is retried (the
 * same chunk again), a 400 "invalid_argument" drops the chunk; the token
 * goes out as a header and never into the log; the final chunk's pprof
 * holds the exact bytes of each kernel.
 */
Test(backends, pyroscope_push_errors_token)
{
	const char *token = "Bearer tok-5c1e7a9d0b";
	char *tokfile = pathf("%s/token.hdr", tmpdir), *url, *log, want[1024], resp[1024];
	char *text[3];
	struct rx r;
	int n;

	snprintf(resp, sizeof(resp),
		 "[{\"status\": 503, \"headers\": {\"Content-Type\": \"application/json\"}, "
		 "\"body\": \"{\\\"code\\\":\\\"unavailable\\\",\\\"message\\\":\\\"ingester "
		 "restarting\\\"}\"}, "
		 "{\"status\": 400, \"headers\": {\"Content-Type\": \"application/json\"}, "
		 "\"body\": \"{\\\"code\\\":\\\"invalid_argument\\\",\\\"message\\\":\\\"bad "
		 "profile\\\"}\"}, %s]",
		 pyroscope_ok);
	rx_start(&r, "pyro", resp, false);
	snprintf(want, sizeof(want), "# the tenant's token\nAuthorization: %s\nX-Scope-OrgID: t1\n",
		 token);
	spit(tokfile, want, strlen(want));
	url = strdup(
		pathf("pyroscope://127.0.0.1:%d?label.host=test-host&headers=%s", r.port, tokfile));
	log = run_target(&r, url, NULL, 4, NULL);
	n = rx_count(&r);
	cr_assert_geq(n, 4);

	for (int i = 0; i < n; i++) {
		char *head = slurp(pathf("%s/%d.head", r.dir, i), NULL);

		cr_assert(has(head, "POST /push.v1.PusherService/Push HTTP/1.1\r\n"), "%s", head);
		cr_assert(has(head, "Content-Type: application/proto\n"), "%s", head);
		cr_assert(has(head, "Connect-Protocol-Version: 1\n"), "%s", head);
		snprintf(want, sizeof(want), "Authorization: %s\n", token);
		cr_assert(has(head, want), "%s", head);
		cr_assert(has(head, "X-Scope-OrgID: t1\n"), "%s", head);
		free(head);
	}
	/* Retried whole after 503; the one refused with 400 is not sent again. */
	for (int i = 0; i < 3; i++)
		text[i] = decode("pyroscope_push.proto", "push.v1.PushRequest",
				 pathf("%s/%d.body", r.dir, i));
	{
		size_t l0, l1, l2;
		uint8_t *id0 = field_bytes(text[0], "ID", &l0),
			*id1 = field_bytes(text[1], "ID", &l1),
			*id2 = field_bytes(text[2], "ID", &l2);

		cr_assert(l0 == l1 && !memcmp(id0, id1, l0), "503 not retried with the same chunk");
		cr_assert(l1 != l2 || memcmp(id1, id2, l1), "400 chunk sent again");
		free(id0);
		free(id1);
		free(id2);
	}
	snprintf(want, sizeof(want),
		 "memprofd: collector %s: HTTP 503, Connect code unavailable: \"ingester "
		 "restarting\"; keeping the chunk, retrying with backoff\n",
		 url);
	cr_assert(has(log, want), "log:\n%s", log);
	snprintf(want, sizeof(want),
		 "memprofd: collector %s refused a chunk: HTTP 400, Connect code invalid_argument: "
		 "\"bad profile\"; dropped and counted\n",
		 url);
	cr_assert(has(log, want), "log:\n%s", log);
	cr_assert(!has(log, "tok-5c1e7a9d0b"), "the token is in the log:\n%s", log);

	/* The final chunk, whole. */
	{
		char *last = decode("pyroscope_push.proto", "push.v1.PushRequest",
				    pathf("%s/%d.body", r.dir, n - 1));
		size_t len;
		uint8_t *pp;

		check_labels(last, "fixture-kernels");
		cr_assert(has(last, "name: \"host\"\n") && has(last, "value: \"test-host\"\n"),
			  "%s", last);
		pp = field_bytes(last, "raw_profile", &len);
		check_pprof(pp, len, "pyroscope");
		free(pp);
		free(last);
	}
	for (int i = 0; i < 3; i++)
		free(text[i]);
	free(log);
	free(url);
}

/*
 * OTLP/HTTP: a 503 is retried, a 400 (google.rpc.Status body) dropped;
 * the final request's dictionary, resource and per-kernel sums read back
 * through protoc.
 */
Test(backends, otlp_profiles)
{
	/* Status{code: 3, message: "bad"} */
	static const char resp[] =
		"[{\"status\": 503, \"headers\": {\"Content-Type\": \"application/x-protobuf\"}}, "
		"{\"status\": 400, \"headers\": {\"Content-Type\": \"application/x-protobuf\"}, "
		"\"body_hex\": \"0803120462616421\"}, "
		"{\"status\": 200, \"headers\": {\"Content-Type\": \"application/x-protobuf\"}}]";
	char *url, *log, *out, want[PATH_MAX + 1024], host[256] = "", exe[PATH_MAX];
	char *b0, *b1, *b2;
	size_t l0, l1, l2;
	struct rx r;
	pid_t f;
	int n, st;

	rx_start(&r, "otlp", resp, false);
	url = strdup(pathf(
		"otlp://127.0.0.1:%d?service_name=llm-server&label.deployment.environment=test",
		r.port));
	log = run_target(&r, url, NULL, 4, &f);
	n = rx_count(&r);
	cr_assert_geq(n, 4);
	for (int i = 0; i < n; i++) {
		char *head = slurp(pathf("%s/%d.head", r.dir, i), NULL);

		cr_assert(has(head, "POST /v1development/profiles HTTP/1.1\r\n"), "%s", head);
		cr_assert(has(head, "Content-Type: application/x-protobuf\n"), "%s", head);
		free(head);
	}
	b0 = slurp(pathf("%s/0.body", r.dir), &l0);
	b1 = slurp(pathf("%s/1.body", r.dir), &l1);
	b2 = slurp(pathf("%s/2.body", r.dir), &l2);
	cr_assert(l0 == l1 && !memcmp(b0, b1, l0), "503 not retried with the same request");
	cr_assert(l1 != l2 || memcmp(b1, b2, l1), "400 request sent again");
	snprintf(want, sizeof(want),
		 "memprofd: collector %s refused a chunk: HTTP 400 Bad Request: \"bad!\"; dropped "
		 "and counted\n",
		 url);
	cr_assert(has(log, want), "log:\n%s", log);

	out = sh(&st, "python3 '%s/tests/transport/otlp_summary.py' '%s/proto' '%s/%d.body' 2>&1",
		 source_root, source_root, r.dir, n - 1);
	cr_assert_eq(st, 0, "%s", out);
	cr_assert(!has(out, "error "), "%s", out);
	gethostname(host, sizeof(host) - 1);
	cr_assert_not_null(realpath(pathf("%s/tests/transport/fixture-kernels", build_root), exe));
	expect_line(out, "resource service.name=llm-server\n", "otlp");
	snprintf(want, sizeof(want), "resource process.pid=%d\n", (int)f);
	expect_line(out, want, "otlp");
	expect_line(out, "resource process.executable.name=fixture-kernels\n", "otlp");
	snprintf(want, sizeof(want), "resource process.executable.path=%s\n", exe);
	expect_line(out, want, "otlp");
	snprintf(want, sizeof(want), "resource host.name=%s\n", host);
	expect_line(out, want, "otlp");
	expect_line(out, "resource deployment.environment=test\n", "otlp");
	/* One profile per sample type, in Go's heap-profile order. */
	cr_assert(strstr(out, "profile alloc_objects/count") <
				  strstr(out, "profile alloc_space/bytes") &&
			  strstr(out, "profile alloc_space/bytes") <
				  strstr(out, "profile inuse_objects/count") &&
			  strstr(out, "profile inuse_objects/count") <
				  strstr(out, "profile inuse_space/bytes") &&
			  strstr(out, "profile alloc_objects/count"),
		  "%s", out);
	expect_line(out, "sum alloc_objects memprof.kernel=matmul 3\n", "otlp");
	expect_line(out, "sum alloc_objects memprof.kernel=relu 3\n", "otlp");
	expect_line(out, "sum alloc_space memprof.kernel=matmul 5000\n", "otlp");
	expect_line(out, "sum alloc_space memprof.kernel=relu 1200\n", "otlp");
	expect_line(out, "sum alloc_space memprof.phase=inference 6200\n", "otlp");
	expect_line(out, "sum inuse_objects memprof.kernel=matmul 1\n", "otlp");
	expect_line(out, "sum inuse_space memprof.kernel=matmul 1000\n", "otlp");
	expect_line(out, "sum inuse_space memprof.kernel=relu 200\n", "otlp");
	/* The executable's mapping with its GNU build ID (readelf's). */
	{
		char *bid =
			sh(&st, "readelf -n '%s' | sed -n 's/.*Build ID: \\([0-9a-f]*\\).*/\\1/p'",
			   exe);

		cr_assert(st == 0 && strlen(bid) > 8, "no build ID from readelf: %s", bid);
		bid[strcspn(bid, "\n")] = '\0';
		snprintf(want, sizeof(want), "mapping %s build_id=%s\n", exe, bid);
		expect_line(out, want, "otlp");
		free(bid);
	}
	free(out);
	free(b0);
	free(b1);
	free(b2);
	free(log);
	free(url);
}

/* gRPC-Web: trailer frame grpc-status 14 is retried, 3 dropped; the
 * request is one 5-byte-framed WriteRawRequest. */
Test(backends, parca_grpc_web)
{
	/* frame(0, empty) + trailer frame(0x80, "grpc-status:N\r\n...") */
	static const char resp[] =
		"[{\"status\": 200, \"headers\": {\"Content-Type\": \"application/grpc-web+proto\"}, "
		"\"body_hex\": \"8000000010677270632d7374617475733a31340d0a\"}, "
		"{\"status\": 200, \"headers\": {\"Content-Type\": \"application/grpc-web+proto\"}, "
		"\"body_hex\": \"8000000029677270632d7374617475733a330d0a677270632d6d657373616765"
		"3a6261642532307070726f660d0a\"}, "
		"{\"status\": 200, \"headers\": {\"Content-Type\": \"application/grpc-web+proto\"}, "
		"\"body_hex\": \"0000000000800000000f677270632d7374617475733a300d0a\"}]";
	char *url, *log, *text, want[1024];
	uint8_t *body, *pp;
	size_t len, plen;
	struct rx r;
	int n;

	rx_start(&r, "parca", resp, false);
	url = strdup(pathf("parca://127.0.0.1:%d?label.cluster=c1", r.port));
	log = run_target(&r, url, NULL, 4, NULL);
	n = rx_count(&r);
	cr_assert_geq(n, 4);
	for (int i = 0; i < n; i++) {
		char *head = slurp(pathf("%s/%d.head", r.dir, i), NULL);

		cr_assert(has(head,
			      "POST /parca.profilestore.v1alpha1.ProfileStoreService/WriteRaw "
			      "HTTP/1.1\r\n"),
			  "%s", head);
		cr_assert(has(head, "Content-Type: application/grpc-web+proto\n"), "%s", head);
		cr_assert(has(head, "X-Grpc-Web: 1\n"), "%s", head);
		free(head);
	}
	{
		size_t l0, l1, l2;
		char *b0 = slurp(pathf("%s/0.body", r.dir), &l0),
		     *b1 = slurp(pathf("%s/1.body", r.dir), &l1),
		     *b2 = slurp(pathf("%s/2.body", r.dir), &l2);

		cr_assert(l0 == l1 && !memcmp(b0, b1, l0), "grpc-status 14 not retried");
		cr_assert(l1 != l2 || memcmp(b1, b2, l1), "grpc-status 3 request sent again");
		free(b0);
		free(b1);
		free(b2);
	}
	snprintf(want, sizeof(want),
		 "memprofd: collector %s: grpc-status 14 (unavailable): \"\"; keeping the chunk, "
		 "retrying with backoff\n",
		 url);
	cr_assert(has(log, want), "log:\n%s", log);
	snprintf(want, sizeof(want),
		 "memprofd: collector %s refused a chunk: grpc-status 3 (invalid_argument): \"bad "
		 "pprof\"; dropped and counted\n",
		 url);
	cr_assert(has(log, want), "log:\n%s", log);

	/* The last request: one uncompressed frame holding the message. */
	body = (uint8_t *)slurp(pathf("%s/%d.body", r.dir, n - 1), &len);
	cr_assert_gt(len, 5);
	cr_assert_eq(body[0], 0);
	cr_assert_eq((size_t)body[1] << 24 | (size_t)body[2] << 16 | (size_t)body[3] << 8 | body[4],
		     len - 5);
	spit(pathf("%s/parca.msg", tmpdir), body + 5, len - 5);
	text = decode("parca_profilestore.proto", "parca.profilestore.v1alpha1.WriteRawRequest",
		      pathf("%s/parca.msg", tmpdir));
	check_labels(text, "fixture-kernels");
	cr_assert(has(text, "name: \"cluster\"\n") && has(text, "value: \"c1\"\n"), "%s", text);
	pp = field_bytes(text, "raw_profile", &plen);
	check_pprof(pp, plen, "parca");
	free(pp);
	free(text);
	free(body);
	free(log);
	free(url);
}

static void make_certs(void)
{
	int st;
	char *out = sh(&st, "sh '%s/tests/transport/make_certs.sh' '%s' 2>&1", source_root, tmpdir);

	cr_assert_eq(st, 0, "make_certs.sh: %s", out);
	free(out);
}

/* https with a throw-away CA: accepted with --ca, the whole request
 * decodes. */
Test(backends, tls_with_ca_accepted)
{
	char *url, *log, *text;
	uint8_t *pp;
	size_t len;
	struct rx r;
	int n;

	make_certs();
	rx_start(&r, "tls",
		 "[{\"status\": 200, \"headers\": {\"Content-Type\": \"application/proto\"}}]",
		 true);
	url = strdup(pathf("pyroscope+https://127.0.0.1:%d", r.port));
	log = run_target(&r, url, pathf("%s/ca.pem", tmpdir), 1, NULL);
	n = rx_count(&r);
	cr_assert_geq(n, 1);
	cr_assert(!has(log, "refused"), "log:\n%s", log);
	text = decode("pyroscope_push.proto", "push.v1.PushRequest",
		      pathf("%s/%d.body", r.dir, n - 1));
	check_labels(text, "fixture-kernels");
	pp = field_bytes(text, "raw_profile", &len);
	check_pprof(pp, len, "tls");
	free(pp);
	free(text);
	free(log);
	free(url);
}

/* Without --ca (the system store) or with another CA's file, the
 * certificate is refused: nothing reaches the server, and the log says
 * why. */
Test(backends, tls_without_ca_refused)
{
	const char *cas[] = { NULL, "other" };

	make_certs();
	for (int i = 0; i < 2; i++) {
		char name[16], *url, *log, want[512];
		struct rx r;

		snprintf(name, sizeof(name), "refuse%d", i);
		rx_start(&r, name, "[{\"status\": 200}]", true);
		url = strdup(cas[i] ? pathf("pyroscope+https://127.0.0.1:%d?ca=%s/other-ca.pem",
					    r.port, tmpdir) :
				      pathf("pyroscope+https://127.0.0.1:%d", r.port));
		log = run_target(&r, url, NULL, 0, NULL);
		cr_assert_eq(rx_count(&r), 0, "a request got through an unverified TLS session");
		snprintf(want, sizeof(want),
			 "memprofd: collector %s: certificate of 127.0.0.1 refused: server "
			 "certificate verification failed.",
			 url);
		cr_assert(has(log, want), "log:\n%s", log);
		free(log);
		free(url);
	}
}
