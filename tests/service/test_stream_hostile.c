// SPDX-License-Identifier: MIT
/*
 * Collectors that misbehave (tests/transport/receiver.py --hostile): one
 * that never answers, answers 1 GB, streams an endless chunked 503, sends
 * garbage, closes mid-request, or (tcp://) never reads or sends without
 * end. The streamer, driven directly, drops each chunk at the bound it
 * broke and counts it by reason; a real memprofd --pid (sanitized in a sanitizer build)
 * streaming a real target to each ends within its bound after SIGTERM or
 * its duration, and its profile and log say what was lost. Needs root
 * for the memprofd runs.
 */
#include <dirent.h>
#include <inttypes.h>

#include "helpers.h"
#include "stream.h"

struct hostile {
	pid_t pid;
	int port;
	char dir[512];
};

static void hostile_start(struct hostile *h, const char *mode)
{
	const char *src = getenv("MEMPROF_SOURCE_ROOT");
	char script[2048], line[64];
	int pipefd[2];
	FILE *f;

	cr_assert_not_null(src, "MEMPROF_SOURCE_ROOT is not set (run through meson test)");
	snprintf(script, sizeof(script), "%s/tests/transport/receiver.py", src);
	snprintf(h->dir, sizeof(h->dir), "%s", tmp_of(mode));
	cr_assert_eq(mkdir(h->dir, 0700), 0);
	char *argv[] = { "/usr/bin/env", "python3",   script,	    h->dir,
			 "/dev/null",	 "--hostile", (char *)mode, NULL };
	cr_assert_eq(pipe2(pipefd, O_CLOEXEC), 0);
	h->pid = spawn(argv, pipefd[1], -1);
	close(pipefd[1]);
	f = fdopen(pipefd[0], "r");
	cr_assert_not_null(fgets(line, sizeof(line), f), "the hostile collector did not start");
	cr_assert_eq(sscanf(line, "listening %d", &h->port), 1, "%s", line);
	fclose(f);
}

/* Connections the collector has had (those with their request read). */
static int hostile_count(const struct hostile *h, const char *suffix)
{
	char path[700];
	int n = 0;

	for (;; n++) {
		snprintf(path, sizeof(path), "%s/%d.%s", h->dir, n, suffix);
		if (access(path, F_OK) != 0)
			return n;
	}
}

/* The most bytes the collector got out on one connection. */
static unsigned long long hostile_max_sent(const struct hostile *h)
{
	unsigned long long most = 0, v;
	int n = hostile_count(h, "sent");

	for (int i = 0; i < n; i++) {
		char path[700];
		FILE *f;

		snprintf(path, sizeof(path), "%s/%d.sent", h->dir, i);
		f = fopen(path, "r");
		cr_assert_not_null(f, "%s", path);
		if (fscanf(f, "%llu", &v) == 1 && v > most)
			most = v;
		fclose(f);
	}
	return most;
}

static void push(struct mp_streamer *s, struct mp_profile *p, uint64_t seq, const char *url)
{
	struct mp_chunk_meta m = { .target_id = 1,
				   .pid = 42,
				   .exe = "/bin/fixture",
				   .sequence = seq,
				   .window_begin_ns = 1,
				   .window_end_ns = 2 };
	char *extra[] = { (char *)url };

	cr_assert_eq(mp_streamer_push(s, &m, p, extra, 1), 0);
}

static void describe_line(void *ctx, const char *text)
{
	snprintf(ctx, 1024, "%s", text);
}

/*
 * Three chunks to a collector in @mode, each request with a 2 s deadline:
 * every chunk is tried once, then dropped and counted for its target with
 * @reason in the collector's status line; the queue empties, nothing is
 * sent again.
 */
static void direct(const char *mode, const char *reason)
{
	struct mp_profile *p = small_profile();
	struct mp_streamer *s;
	struct hostile h;
	char url[128], line[1024], want[256];

	mp_test_tmpdir(tmpdir, sizeof(tmpdir), "hostile");
	hostile_start(&h, mode);
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/ingest", h.port);
	cr_assert_eq(mp_streamer_new(1 << 20, &s), 0);
	mp_streamer_set_http_deadline(s, 2000);
	cr_assert_eq(mp_streamer_acquire(s, url, 0), 0);
	for (uint64_t seq = 0; seq < 3; seq++)
		push(s, p, seq, url);
	cr_assert(MP_TEST_WAIT_FOR(mp_streamer_target_lost(s, 1, false) == 3, 120000),
		  "lost %" PRIu64 " of 3 chunks", mp_streamer_target_lost(s, 1, false));
	cr_assert_eq(mp_streamer_flush(s, 10000000000ull), 0, "the queue did not empty");
	mp_streamer_describe(s, describe_line, line);
	snprintf(want, sizeof(want), " sent=0 lost=3 refused=0 targets=1 lost_by=%s:3", reason);
	cr_assert(strstr(line, want), "want '%s' in: %s", want, line);
	/* One request per chunk: a dropped chunk is not sent again. */
	cr_assert_eq(hostile_count(&h, "head"), 3);
	/* The daemon reads 16 KiB of an answer; the rest stays in socket
	 * buffers (a few MiB at most on loopback) or is never sent. */
	cr_assert(MP_TEST_WAIT_FOR(hostile_count(&h, "sent") == 3, 30000));
	cr_assert_lt(hostile_max_sent(&h), 32ull << 20, "the daemon read on");
	mp_streamer_release(s, url, 0);
	mp_streamer_free(s);
	mp_profile_free(p);
}

Test(stream_hostile, never_answering_collector_meets_the_request_deadline, .timeout = 180,
     .fini = cleanup)
{
	direct("silent", "deadline");
}

Test(stream_hostile, gigabyte_answer_is_cut_at_the_cap, .timeout = 180, .fini = cleanup)
{
	direct("huge", "oversized");
}

Test(stream_hostile, endless_chunked_answer_is_cut_at_the_cap, .timeout = 180, .fini = cleanup)
{
	direct("endless", "oversized");
}

Test(stream_hostile, endless_headers_are_cut_at_the_cap, .timeout = 180, .fini = cleanup)
{
	direct("headers", "oversized");
}

Test(stream_hostile, garbage_answer_is_dropped_as_malformed, .timeout = 180, .fini = cleanup)
{
	direct("garbage", "malformed");
}

/* A tcp:// collector that sends no hello (so it is taken for one without
 * acknowledgements), then bytes without end: the connection is closed
 * after 64 KiB of them, not read for ever. */
Test(stream_hostile, endless_bytes_from_a_tcp_collector_end_its_connection, .timeout = 180,
     .fini = cleanup)
{
	struct mp_profile *p = small_profile();
	struct mp_streamer *s;
	struct hostile h;
	char url[128];

	mp_test_tmpdir(tmpdir, sizeof(tmpdir), "hostile");
	hostile_start(&h, "babble");
	snprintf(url, sizeof(url), "tcp://127.0.0.1:%d", h.port);
	cr_assert_eq(mp_streamer_new(1 << 20, &s), 0);
	cr_assert_eq(mp_streamer_acquire(s, url, 0), 0);
	push(s, p, 0, url);
	cr_assert(MP_TEST_WAIT_FOR(hostile_count(&h, "sent") >= 1, 60000),
		  "the daemon kept reading the endless sender");
	cr_assert_lt(hostile_max_sent(&h), 32ull << 20, "the daemon read on");
	mp_streamer_release(s, url, 0);
	mp_streamer_free(s);
	mp_profile_free(p);
}

static char *read_log(const char *path)
{
	static char text[1 << 20];
	FILE *f = fopen(path, "r");
	size_t n;

	cr_assert_not_null(f, "%s", path);
	n = fread(text, 1, sizeof(text) - 1, f);
	text[n] = '\0';
	fclose(f);
	return text;
}

/* "N chunks (B bytes) never delivered (shutdown)" of @log, 0 without. */
static unsigned long long never_delivered(const char *log)
{
	const char *hit = strstr(log, " never delivered (shutdown)");
	unsigned long long n = 0;

	if (!hit)
		return 0;
	while (hit > log && hit[-1] != ':')
		hit--;
	cr_assert_eq(sscanf(hit, " %llu chunks", &n), 1, "%s", log);
	return n;
}

/*
 * memprofd --pid streams fixture-attach to a collector in @mode through
 * @scheme 127.0.0.1:PORT @path until it has had @connections connections
 * (SIGTERM then, or --duration 2 when @duration): it ends within 30 s
 * (its final flush waits 5 s at most), exit 0, and its profile counts
 * at least @min_lost chunks lost, and every one the log says was never
 * delivered; @say is in its log.
 */
static void run(const char *mode, const char *scheme, const char *path, int connections,
		bool duration, uint64_t min_lost, const char *say)
{
	char url[128], ps[32], out[512], logpath[512], *log;
	struct mp_profile *p;
	struct hostile h;
	int logfd, st = 0;
	pid_t f, d;

	need_root();
	hostile_start(&h, mode);
	snprintf(url, sizeof(url), "%s127.0.0.1:%d%s", scheme, h.port, path);
	snprintf(out, sizeof(out), "%s", tmp_of("out.memprof"));
	snprintf(logpath, sizeof(logpath), "%s", tmp_of("memprofd.log"));
	logfd = open(logpath, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	cr_assert_geq(logfd, 0);
	f = fixture_start(NULL);
	snprintf(ps, sizeof(ps), "%d", (int)f);
	char *argv[] = { path_of("cli/memprofd"),
			 "--pid",
			 ps,
			 "--stream",
			 url,
			 "--stream-interval",
			 "0.05",
			 "--print",
			 "none",
			 "-o",
			 out,
			 duration ? "--duration" : NULL,
			 "2",
			 NULL };
	d = spawn(argv, logfd, logfd);
	close(logfd);
	cr_assert(MP_TEST_WAIT_FOR(hostile_count(&h, "head") >= connections ||
					   waitpid(d, &st, WNOHANG) == d,
				   120000),
		  "%d connections to the collector within 120 s, see %s", connections, logpath);
	cr_assert_geq(hostile_count(&h, "head"), connections, "memprofd ended early, see %s",
		      logpath);
	if (!duration)
		kill(d, SIGTERM);
	cr_assert(MP_TEST_WAIT_FOR(waitpid(d, &st, WNOHANG) == d, 30000),
		  "memprofd still running 30 s after its end, see %s", logpath);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "memprofd status %d, see %s", st, logpath);
	log = read_log(logpath);
	cr_assert(strstr(log, say), "no '%s' in the log:\n%s", say, log);
	p = load(out);
	cr_assert_geq(p->stream_chunks_lost, min_lost, "profile: %" PRIu64 " lost\n%s",
		      p->stream_chunks_lost, log);
	cr_assert_geq(p->stream_chunks_lost, never_delivered(log));
	mp_profile_free(p);
	fixture_finish(f);
	/* The collector's connections end with the daemon (but one whose
	 * window is closed: the daemon's FIN waits behind its unread data),
	 * having sent what the daemon read and what socket buffers held. */
	if (strcmp(mode, "noread")) {
		cr_assert(MP_TEST_WAIT_FOR(hostile_count(&h, "sent") == hostile_count(&h, "head"),
					   30000));
		cr_assert_lt(hostile_max_sent(&h), 32ull << 20, "the daemon read on");
	}
}

Test(stream_hostile, memprofd_to_a_never_answering_collector, .timeout = 240, .fini = cleanup)
{
	run("silent", "pyroscope://", "", 1, false, 2, " never delivered (shutdown)");
}

Test(stream_hostile, memprofd_to_a_gigabyte_answer, .timeout = 240, .fini = cleanup)
{
	run("huge", "pyroscope://", "", 3, false, 3, "with a body longer than 16 KiB");
}

Test(stream_hostile, memprofd_to_an_endless_chunked_503, .timeout = 240, .fini = cleanup)
{
	run("endless", "otlp://", "", 3, false, 3, "HTTP 503 with a body longer than 16 KiB");
}

Test(stream_hostile, memprofd_to_a_garbage_answer, .timeout = 240, .fini = cleanup)
{
	run("garbage", "parca://", "", 3, false, 3, "malformed HTTP response");
}

Test(stream_hostile, memprofd_to_a_collector_closing_mid_request, .timeout = 240, .fini = cleanup)
{
	run("close", "http://", "/ingest", 3, false, 1, "keeping the chunk, retrying with backoff");
}

/* A tcp:// collector that accepts and never reads (nor says hello): the
 * session's natural end (--duration) is not held beyond the final
 * flush. */
Test(stream_hostile, memprofd_to_a_tcp_collector_that_never_reads, .timeout = 240, .fini = cleanup)
{
	run("noread", "tcp://", "", 1, true, 0, "collector tcp://127.0.0.1:");
}

/* The service, with an endless chunked 503 as its configured collector:
 * `memprof status` says the chunks were lost and why, and the target's
 * profile counts them; the service stays up and serves. */
Test(stream_hostile, service_status_and_profile_say_what_was_lost, .timeout = 240, .fini = cleanup)
{
	char config[256], out[65536], ps[32], file[512];
	struct mp_profile *p;
	struct hostile h;
	struct daemon d;
	pid_t f;

	need_root();
	hostile_start(&h, "endless");
	snprintf(config, sizeof(config),
		 "mode = rss\nrss_hz = 0\nstream_interval = 0.2\n"
		 "collector = http://127.0.0.1:%d/ingest\n",
		 h.port);
	snprintf(file, sizeof(file), "%s", tmp_of("target.memprof"));
	daemon_start(&d, config, NULL);
	f = fixture_start(NULL);
	snprintf(ps, sizeof(ps), "%d", (int)f);
	cr_assert_eq(client(out, sizeof(out), &d, "attach", ps, "-o", file, NULL), 0, "%s", out);
	cr_assert(MP_TEST_WAIT_FOR(hostile_count(&h, "head") >= 3, 120000),
		  "3 requests within 120 s, see %s", d.log);
	cr_assert_eq(client(out, sizeof(out), &d, "status", NULL), 0, "%s", out);
	cr_assert(strstr(out, " sent=0 ") && strstr(out, " lost_by=oversized:"), "%s", out);
	cr_assert_eq(client(out, sizeof(out), &d, "detach", ps, NULL), 0, "%s", out);
	p = load(file);
	cr_assert_geq(p->stream_chunks_lost, 3, "profile: %" PRIu64, p->stream_chunks_lost);
	mp_profile_free(p);
	cr_assert(log_has(&d, "HTTP 503 with a body longer than 16 KiB (cut there); the chunk is "
			      "dropped and counted lost"),
		  "see %s", d.log);
	cr_assert_eq(daemon_stop(&d), 0);
	fixture_finish(f);
	cr_assert(MP_TEST_WAIT_FOR(hostile_count(&h, "sent") == hostile_count(&h, "head"), 30000));
	cr_assert_lt(hostile_max_sent(&h), 32ull << 20, "the daemon read on");
}
