// SPDX-License-Identifier: MIT
/*
 * Streaming from the service to the reference collector (`memprof
 * collect`) over TCP and a Unix socket, with the collector killed and
 * restarted mid-stream. Needs root; says why it skips otherwise.
 */
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>

#include "ack.h"
#include "helpers.h"
#include "memprof.pb-c.h"
#include "stream.h"

struct coll {
	pid_t pid;
	int out; /* its stdout */
	char buf[65536];
	size_t len;
};

static void coll_start(struct coll *c, const char *listen, const char *dir)
{
	char *argv[] = { path_of("cli/memprof"),
			 "collect",
			 "--listen",
			 (char *)listen,
			 "--out",
			 (char *)dir,
			 NULL };
	int pipefd[2];

	cr_assert_eq(pipe2(pipefd, O_CLOEXEC), 0);
	c->pid = spawn(argv, pipefd[1], -1);
	close(pipefd[1]);
	c->out = pipefd[0];
	c->len = 0;
}

static bool coll_line(struct coll *c, char *line, size_t cap, int ms);

static void coll_wait_listening(struct coll *c)
{
	char line[512];

	cr_assert(coll_line(c, line, sizeof(line), 10000), "collector did not start");
	cr_assert(!strncmp(line, "listening ", 10), "collector said %s", line);
}

/* Next stdout line of the collector, waiting at most @ms. */
static bool coll_line(struct coll *c, char *line, size_t cap, int ms)
{
	for (;;) {
		char *nl = memchr(c->buf, '\n', c->len);
		struct pollfd pf = { .fd = c->out, .events = POLLIN };
		ssize_t n;

		if (nl) {
			size_t k = (size_t)(nl - c->buf);

			cr_assert_lt(k, cap);
			memcpy(line, c->buf, k);
			line[k] = '\0';
			memmove(c->buf, nl + 1, c->len - k - 1);
			c->len -= k + 1;
			return true;
		}
		if (poll(&pf, 1, ms) != 1)
			return false;
		n = read(c->out, c->buf + c->len, sizeof(c->buf) - c->len);
		if (n <= 0)
			return false;
		c->len += (size_t)n;
	}
}

static void coll_kill(struct coll *c, int sig)
{
	int st;

	kill(c->pid, sig);
	cr_assert_eq(waitpid(c->pid, &st, 0), c->pid);
	close(c->out);
}

struct chunk {
	int pid;
	uint64_t target, seq, lost;
	int final;
	char file[1024];
};

/* Reads lines until a chunk line, for at most @ms between two lines
 * (false when none came); a "gap" line before it goes to @gap (NULL: none
 * may come). */
static bool chunk_within(struct coll *c, struct chunk *ch, char *gap, size_t gap_cap, int ms)
{
	char line[2048];
	uint64_t win, bytes;

	if (gap)
		gap[0] = '\0';
	for (;;) {
		if (!coll_line(c, line, sizeof(line), ms))
			return false;
		if (!strncmp(line, "join ", 5))
			continue;
		if (!strncmp(line, "gap ", 4) && gap) {
			snprintf(gap, gap_cap, "%.500s", line);
			continue;
		}
		cr_assert(strncmp(line, "gap ", 4), "unexpected %s", line);
		if (!strncmp(line, "listening ", 10))
			continue;
		cr_assert_eq(sscanf(line,
				    "chunk pid=%d target=%" SCNu64 " seq=%" SCNu64 " lost=%" SCNu64
				    " final=%d window_ns=%" SCNu64 " bytes=%" SCNu64 " file=",
				    &ch->pid, &ch->target, &ch->seq, &ch->lost, &ch->final, &win,
				    &bytes),
			     7, "line: %s", line);
		snprintf(ch->file, sizeof(ch->file), "%s", strstr(line, "file=") + 5);
		return true;
	}
}

static void next_chunk(struct coll *c, struct chunk *ch, char *gap, size_t gap_cap)
{
	cr_assert(chunk_within(c, ch, gap, gap_cap, 20000), "no chunk within 20 s");
}

static int free_port(void)
{
	struct sockaddr_in sa = { .sin_family = AF_INET,
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(sa);
	int s = socket(AF_INET, SOCK_STREAM, 0);

	cr_assert_eq(bind(s, (struct sockaddr *)&sa, sizeof(sa)), 0);
	cr_assert_eq(getsockname(s, (struct sockaddr *)&sa, &len), 0);
	close(s);
	return ntohs(sa.sin_port);
}

static void assert_chunk_profile(const struct chunk *ch, pid_t pid)
{
	struct mp_profile *p = load(ch->file);

	cr_assert_eq(p->pid, pid);
	cr_assert_eq(p->n_invocations, 1);
	cr_assert_str_eq(p->names[p->invocations[0].name], "outer");
	mp_profile_free(p);
}

/* The chunks of one target in the order the collector reported them: the
 * sequence number due next, and added up, the numbers that never came
 * (missing) and the losses the chunks reported (lost). */
struct tally {
	uint64_t next, missing, lost;
};

/* Counts @ch in @t: it comes after the chunks counted before it. */
static void tally_chunk(struct tally *t, const struct chunk *ch)
{
	cr_assert_geq(ch->seq, t->next, "seq %" PRIu64 ", want %" PRIu64 " or later", ch->seq,
		      t->next);
	t->missing += ch->seq - t->next;
	t->lost += ch->lost;
	t->next = ch->seq + 1;
}

/* Counts @ch in @t, which holds every chunk of the target before it: the
 * numbers it skipped are exactly those it reports lost. */
static void tally_exact(struct tally *t, const struct chunk *ch)
{
	cr_assert_eq(ch->seq, t->next + ch->lost,
		     "seq %" PRIu64 " after %" PRIu64 " with lost_chunks %" PRIu64, ch->seq,
		     t->next - 1, ch->lost);
	tally_chunk(t, ch);
}

/* Detaches the target @f, reads its chunks up to the final one into @t
 * (exactly, with @exact: see tally_exact()), a gap report before one to
 * @gap (NULL: none may come), then stops the daemon, the collector and the
 * target. With @final_may_drop, the daemon may instead say it dropped the
 * final chunk (its buffer full: chunks are dropped, and counted, while
 * the collector is up); what came before it is in @t all the same. */
static void detach_to_final(struct daemon *d, struct coll *c, pid_t f, char *gap, size_t gap_cap,
			    struct tally *t, bool exact, bool final_may_drop)
{
	char out[4096], ps[32], dropped[128];
	struct chunk ch = { 0 };
	int waited_ms = 0;

	snprintf(ps, sizeof(ps), "%d", (int)f);
	/* the daemon's only target, its first: target 1 */
	snprintf(dropped, sizeof(dropped), "final chunk of target 1 (pid %d) dropped", (int)f);
	cr_assert_eq(client(out, sizeof(out), d, "detach", ps, NULL), 0);
	while (!ch.final) {
		if (!final_may_drop) {
			next_chunk(c, &ch, gap, gap_cap);
		} else if (!chunk_within(c, &ch, gap, gap_cap, 100)) {
			if (log_has(d, dropped))
				break;
			waited_ms += 100;
			cr_assert_lt(waited_ms, 20000, "no chunk within 20 s");
			continue;
		}
		waited_ms = 0;
		cr_assert_eq(ch.pid, f);
		if (exact)
			tally_exact(t, &ch);
		else
			tally_chunk(t, &ch);
	}
	if (ch.final)
		assert_chunk_profile(&ch, f);
	cr_assert_eq(daemon_stop(d), 0);
	coll_kill(c, SIGTERM);
	fixture_finish(f);
}

/* Kills the collector @c of target @f and counts in @t the chunks it
 * stored, acknowledged and reported that the test had not read yet: they
 * reached the collector, so the daemon neither resends nor counts them
 * lost. A gap report goes to @gap, as in chunk_within(). (It reports a
 * chunk right after acknowledging it: only a kill in between those two
 * steps, microseconds, would leave one uncounted.) */
static void coll_kill_counting(struct coll *c, pid_t f, char *gap, size_t gap_cap, struct tally *t)
{
	struct chunk ch;
	int st;

	kill(c->pid, SIGKILL);
	cr_assert_eq(waitpid(c->pid, &st, 0), c->pid);
	/* dead: its stdout ends after what it wrote */
	while (chunk_within(c, &ch, gap, gap_cap, 1000)) {
		cr_assert_eq(ch.pid, f);
		tally_chunk(t, &ch);
	}
	close(c->out);
}

/*
 * One target streamed to @url every 0.2 s; the collector is killed right
 * after it reported its third chunk, stays down ~1.2 s (about 6
 * intervals), and is restarted; the target is detached after six more
 * chunks. Returns in @ret_down the sequence numbers missing from those
 * six chunks and the losses they reported, in @ret_all those of every
 * chunk of the target, up to the final one.
 *
 * Unless @drops_counted, the chunks before the kill come one after the
 * other with no loss, and no gap is reported while the collector is up.
 * With it, chunks may also be dropped, and counted, while the collector
 * is up: a collector that is slow to store and acknowledge chunks (more
 * than about two intervals) makes the daemon drop them with a 1-byte
 * buffer; only @ret_all can then account for every chunk, since a chunk
 * dropped in one phase is reported by the next one to arrive, in the next
 * phase. The final chunk may be dropped too (the daemon says so in its
 * log): @ret_all then holds the chunks up to the last one that came.
 */
static void kill_restart(const char *config, const char *url, const char *stream_opt,
			 bool drops_counted, struct tally *ret_down, struct tally *ret_all)
{
	struct daemon d;
	struct coll c;
	struct chunk ch;
	char out[4096], ps[32], gap[512], dir[512];
	char *up_gap = drops_counted ? gap : NULL;
	struct tally all = { 0 }, down;
	pid_t f;

	snprintf(dir, sizeof(dir), "%s", tmp_of("chunks"));
	coll_start(&c, url, dir);
	coll_wait_listening(&c);
	daemon_start(&d, config, NULL);
	f = fixture_start(NULL);
	snprintf(ps, sizeof(ps), "%d", (int)f);
	if (stream_opt)
		cr_assert_eq(
			client(out, sizeof(out), &d, "attach", ps, "--stream", stream_opt, NULL),
			0);
	else
		cr_assert_eq(client(out, sizeof(out), &d, "attach", ps, NULL), 0);

	/* Contiguous from 0 while the collector is up. */
	for (int i = 0; i < 3; i++) {
		next_chunk(&c, &ch, up_gap, sizeof(gap));
		cr_assert_eq(ch.pid, f);
		cr_assert_eq(ch.target, 1);
		if (!drops_counted) {
			cr_assert_eq(ch.seq, all.next, "seq %" PRIu64 ", want %" PRIu64, ch.seq,
				     all.next);
			cr_assert_eq(ch.lost, 0);
		}
		cr_assert_eq(ch.final, 0);
		assert_chunk_profile(&ch, f);
		tally_chunk(&all, &ch);
	}
	coll_kill_counting(&c, f, up_gap, sizeof(gap), &all);
	msleep(1200);
	coll_start(&c, url, dir);
	coll_wait_listening(&c);
	/* The restarted collector "joins" the target: compare with what we
	 * saw before the kill. Whatever was buffered comes first, then the
	 * chunks made while it was down, or the report of their loss. */
	down = (struct tally){ .next = all.next };
	for (int i = 0; i < 6; i++) {
		next_chunk(&c, &ch, gap, sizeof(gap));
		cr_assert_eq(ch.pid, f);
		tally_chunk(&down, &ch);
		tally_chunk(&all, &ch);
	}
	detach_to_final(&d, &c, f, up_gap, sizeof(gap), &all, false, drops_counted);
	*ret_down = down;
	*ret_all = all;
}

Test(stream, tcp_collector_restart_loses_nothing_when_the_buffer_suffices, .timeout = 120,
     .fini = cleanup)
{
	char url[64], config[256];
	struct tally down, all;

	need_root();
	snprintf(url, sizeof(url), "tcp://127.0.0.1:%d", free_port());
	snprintf(config, sizeof(config), "stream_interval = 0.2\ncollector = %s\n", url);
	kill_restart(config, url, NULL, false, &down, &all);
	cr_assert_eq(all.missing, 0);
	cr_assert_eq(all.lost, 0);
}

Test(stream, unix_collector_per_target_stream, .timeout = 120, .fini = cleanup)
{
	char url[600];
	struct tally down, all;

	need_root();
	snprintf(url, sizeof(url), "unix:%s", tmp_of("collector.sock"));
	kill_restart("stream_interval = 0.2\n", url, url, false, &down, &all);
	cr_assert_eq(all.missing, 0);
	cr_assert_eq(all.lost, 0);
}

Test(stream, overflow_is_counted_and_reported_as_the_gap, .timeout = 120, .fini = cleanup)
{
	char url[64], config[256];
	struct tally down, all;

	need_root();
	snprintf(url, sizeof(url), "tcp://127.0.0.1:%d", free_port());
	/* A 1-byte buffer holds one chunk (one always fits): the rest of the
	 * chunks made while the collector is down overflow. */
	snprintf(config, sizeof(config), "stream_interval = 0.2\nbuffer_size = 1\ncollector = %s\n",
		 url);
	kill_restart(config, url, NULL, true, &down, &all);
	cr_assert_gt(down.missing, 0, "no chunk was dropped while the collector was down");
	/* Every chunk arrived or was counted lost, whichever phase it was
	 * dropped in and whichever chunk reported it. */
	cr_assert_eq(all.lost, all.missing, "%" PRIu64 " chunks missing, %" PRIu64 " counted lost",
		     all.missing, all.lost);
}

/*
 * A collector of the acknowledging protocol that stores nothing, in a
 * process of its own: it says hello, acknowledges the chunks before
 * @ack_below and then either reads on without acknowledging (@read_on) or
 * reads one more chunk and stops reading. It writes the sequence of each
 * chunk it read to @report_fd, and runs until it is killed.
 */
static pid_t raw_collector(int lfd, uint64_t ack_below, bool read_on, int report_fd)
{
	static uint8_t buf[16 << 20];
	uint8_t frame[MP_ACK_MAX_FRAME];
	size_t len = 0;
	pid_t pid = fork();
	int fd;

	cr_assert_geq(pid, 0);
	if (pid)
		return pid;
	fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
	if (fd < 0 || send(fd, frame, mp_ack_encode_hello(frame), MSG_NOSIGNAL) < 0)
		_exit(1);
	for (;;) {
		ssize_t n = recv(fd, buf + len, sizeof(buf) - len, 0);

		if (n <= 0)
			_exit(1);
		len += (size_t)n;
		for (;;) {
			Memprof__Chunk *ch;
			uint64_t l, seq;
			int h = mp_varint_decode(buf, len, &l);

			if (h <= 0 || len - (size_t)h < l)
				break;
			ch = memprof__chunk__unpack(NULL, (size_t)l, buf + h);
			if (!ch)
				_exit(1);
			seq = ch->sequence;
			if (seq < ack_below &&
			    send(fd, frame, mp_ack_encode(ch->target_id, seq, frame),
				 MSG_NOSIGNAL) < 0)
				_exit(1);
			memprof__chunk__free_unpacked(ch, NULL);
			if (write(report_fd, &seq, sizeof(seq)) != sizeof(seq))
				_exit(1);
			memmove(buf, buf + h + l, len - (size_t)h - l);
			len -= (size_t)h + l;
			while (seq >= ack_below && !read_on)
				pause();
		}
	}
}

static uint64_t raw_next_seq(int fd)
{
	struct pollfd pf = { .fd = fd, .events = POLLIN };
	uint64_t seq;

	cr_assert_eq(poll(&pf, 1, 20000), 1, "the raw collector read no chunk within 20 s");
	cr_assert_eq(read(fd, &seq, sizeof(seq)), sizeof(seq));
	return seq;
}

/*
 * The defect of a collector SIGKILLed with chunks it had not handled (in
 * its socket, or read and not stored): a collector that acknowledges
 * chunks 0-2, reads @unacked more (or stops reading after the first of
 * them) and is killed ~1 s later. The next collector must get the first
 * chunk not acknowledged (3) again, and then every sequence number either
 * as a chunk or counted in lost_chunks, exactly, up to the final chunk.
 * Returns the total of lost_chunks it saw.
 */
static uint64_t unacked_then_killed(const char *config_extra, bool read_on, int unacked)
{
	struct sockaddr_in sa = { .sin_family = AF_INET,
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t salen = sizeof(sa);
	char url[64], config[256], out[4096], ps[32], gap[512], dir[512];
	int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), rep[2], st, one = 1;
	struct tally t = { 0 };
	struct daemon d;
	struct chunk ch;
	struct coll c;
	pid_t f, raw;

	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	cr_assert_eq(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	cr_assert_eq(getsockname(lfd, (struct sockaddr *)&sa, &salen), 0);
	cr_assert_eq(listen(lfd, 4), 0);
	snprintf(url, sizeof(url), "tcp://127.0.0.1:%d", ntohs(sa.sin_port));
	snprintf(config, sizeof(config), "stream_interval = 0.2\n%scollector = %s\n", config_extra,
		 url);
	cr_assert_eq(pipe2(rep, O_CLOEXEC), 0);
	raw = raw_collector(lfd, 3, read_on, rep[1]);
	close(rep[1]);
	close(lfd);
	daemon_start(&d, config, NULL);
	f = fixture_start(NULL);
	snprintf(ps, sizeof(ps), "%d", (int)f);
	cr_assert_eq(client(out, sizeof(out), &d, "attach", ps, NULL), 0);
	for (uint64_t want = 0; want < 3 + (uint64_t)unacked; want++)
		cr_assert_eq(raw_next_seq(rep[0]), want);
	msleep(1000);
	kill(raw, SIGKILL);
	cr_assert_eq(waitpid(raw, &st, 0), raw);
	close(rep[0]);

	snprintf(dir, sizeof(dir), "%s", tmp_of("chunks"));
	coll_start(&c, url, dir);
	coll_wait_listening(&c);
	next_chunk(&c, &ch, gap, sizeof(gap));
	cr_assert_eq(ch.pid, f);
	cr_assert_eq(ch.seq, 3, "the first chunk not acknowledged is sent again, got %" PRIu64,
		     ch.seq);
	cr_assert_eq(ch.lost, 0);
	assert_chunk_profile(&ch, f);
	t.next = ch.seq + 1;
	for (int i = 0; i < 5; i++) {
		next_chunk(&c, &ch, gap, sizeof(gap));
		tally_exact(&t, &ch);
	}
	detach_to_final(&d, &c, f, gap, sizeof(gap), &t, true, false);
	return t.lost;
}

/* Two chunks read and not acknowledged when the collector is killed: both
 * come again, and with the default buffer nothing is lost. */
Test(stream, killed_collector_unacked_chunks_are_sent_again, .timeout = 120, .fini = cleanup)
{
	need_root();
	cr_assert_eq(unacked_then_killed("", true, 2), 0);
}

/* The collector stops reading: what the kernel holds for it is not
 * delivered either. */
Test(stream, killed_collector_unread_chunks_are_sent_again, .timeout = 120, .fini = cleanup)
{
	need_root();
	cr_assert_eq(unacked_then_killed("", false, 1), 0);
}

/* A 1-byte buffer holds one chunk awaiting its ack and one to send: the
 * chunks made meanwhile overflow, and are counted, exactly. */
Test(stream, killed_collector_overflow_while_unacked_is_counted, .timeout = 120, .fini = cleanup)
{
	need_root();
	cr_assert_gt(unacked_then_killed("buffer_size = 1\n", true, 1), 0);
}

Test(stream, sighup_reloads_the_configuration, .timeout = 120, .fini = cleanup)
{
	struct daemon d;
	struct coll c;
	struct chunk ch;
	char out[8192], url[64], text[256], ps[32];
	pid_t f;
	FILE *cf;

	need_root();
	snprintf(url, sizeof(url), "tcp://127.0.0.1:%d", free_port());
	coll_start(&c, url, tmp_of("chunks"));
	coll_wait_listening(&c);
	daemon_start(&d, "stream_interval = 60\n", NULL);
	cr_assert_eq(client(out, sizeof(out), &d, "status", NULL), 0);
	cr_assert_not_null(strstr(out, "stream_interval_s: 60.000\n"), "%s", out);

	snprintf(text, sizeof(text), "stream_interval = 0.2\ncollector = %s\n", url);
	cf = fopen(tmp_of("memprofd.conf"), "w");
	fputs(text, cf);
	fclose(cf);
	kill(d.pid, SIGHUP);
	for (int i = 0; i < 500 && !log_has(&d, "configuration reloaded"); i++)
		msleep(10);
	cr_assert(log_has(&d, "SIGHUP: reloading"));
	cr_assert_eq(client(out, sizeof(out), &d, "status", NULL), 0);
	cr_assert_not_null(strstr(out, "stream_interval_s: 0.200\n"), "%s", out);
	snprintf(text, sizeof(text), "collector: %s global state=idle", url);
	cr_assert_not_null(strstr(out, text), "%s", out);

	/* New targets stream with the new settings. */
	f = fixture_start(NULL);
	snprintf(ps, sizeof(ps), "%d", (int)f);
	cr_assert_eq(client(out, sizeof(out), &d, "attach", ps, NULL), 0);
	next_chunk(&c, &ch, NULL, 0);
	cr_assert_eq(ch.pid, f);
	cr_assert_eq(ch.seq, 0);

	/* A broken file keeps the running configuration. */
	cf = fopen(tmp_of("memprofd.conf"), "w");
	fputs("stream_interval = soon\n", cf);
	fclose(cf);
	kill(d.pid, SIGHUP);
	for (int i = 0; i < 500 && !log_has(&d, "keeping the previous configuration"); i++)
		msleep(10);
	cr_assert(log_has(&d, "1: invalid value 'soon' for stream_interval (keeping the previous "
			      "configuration)"));
	cr_assert_eq(client(out, sizeof(out), &d, "status", NULL), 0);
	cr_assert_not_null(strstr(out, "stream_interval_s: 0.200\n"), "%s", out);
	cr_assert_eq(daemon_stop(&d), 0);
	coll_kill(&c, SIGTERM);
	fixture_finish(f);
}

/* A minimal HTTP server: answers 200 to each request and keeps the last
 * request line and body. */
struct http_rx {
	int lfd;
	char request_line[1024];
	uint8_t body[1 << 20];
	size_t body_len;
	int requests;
};

static void *http_main(void *arg)
{
	struct http_rx *h = arg;

	for (;;) {
		char head[8192];
		size_t n = 0, clen = 0;
		char *end = NULL, *cl;
		int s = accept(h->lfd, NULL, NULL);

		if (s < 0)
			return NULL;
		while (n < sizeof(head) - 1 && !end) {
			ssize_t k = read(s, head + n, sizeof(head) - 1 - n);

			if (k <= 0)
				break;
			n += (size_t)k;
			head[n] = '\0';
			end = strstr(head, "\r\n\r\n");
		}
		if (!end) {
			close(s);
			continue;
		}
		cl = strcasestr(head, "\r\nContent-Length: ");
		if (cl)
			clen = strtoul(cl + 18, NULL, 10);
		size_t have = n - (size_t)(end + 4 - head);
		h->body_len = 0;
		if (clen <= sizeof(h->body)) {
			memcpy(h->body, end + 4, have);
			h->body_len = have;
			while (h->body_len < clen) {
				ssize_t k = read(s, h->body + h->body_len, clen - h->body_len);

				if (k <= 0)
					break;
				h->body_len += (size_t)k;
			}
		}
		*strstr(head, "\r\n") = '\0';
		snprintf(h->request_line, sizeof(h->request_line), "%.1000s", head);
		__atomic_add_fetch(&h->requests, 1, __ATOMIC_SEQ_CST);
		static const char ok[] =
			"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
		if (write(s, ok, sizeof(ok) - 1) < 0) {
			/* The daemon retries. */
		}
		close(s);
	}
}

static void pprof_reads(const uint8_t *body, size_t len)
{
	char dir[] = "/tmp/memprof-http-XXXXXX", cmd[512], line[512];
	bool types = false, period = false;
	FILE *f;

	cr_assert_not_null(mkdtemp(dir));
	snprintf(cmd, sizeof(cmd), "%s/body.pb.gz", dir);
	f = fopen(cmd, "w");
	cr_assert_not_null(f);
	cr_assert_eq(fwrite(body, 1, len, f), len);
	fclose(f);
	snprintf(cmd, sizeof(cmd),
		 "HOME=%s GOCACHE=%s/cache go tool pprof -raw %s/body.pb.gz 2>&1; echo exit=$?",
		 dir, dir, dir);
	f = popen(cmd, "r");
	cr_assert_not_null(f);
	while (fgets(line, sizeof(line), f)) {
		if (!strcmp(line, "PeriodType: space bytes\n"))
			period = true;
		if (strstr(line, "alloc_objects/count alloc_space/bytes inuse_objects/count "
				 "inuse_space/bytes"))
			types = true;
		if (!strncmp(line, "exit=", 5))
			cr_assert_str_eq(line, "exit=0\n", "go tool pprof failed");
	}
	pclose(f);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	cr_assert_eq(system(cmd), 0);
	cr_assert(period, "no 'PeriodType: space bytes' from go tool pprof -raw");
	cr_assert(types, "no heap sample types from go tool pprof -raw");
}

Test(stream, http_push_query_parameters, .timeout = 120, .fini = cleanup)
{
	static struct http_rx h;
	struct sockaddr_in sa = { .sin_family = AF_INET,
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(sa);
	struct daemon d;
	char out[4096], url[64], ps[32], want[256];
	pthread_t th;
	pid_t f;

	need_root();
	h.lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	cr_assert_eq(bind(h.lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	cr_assert_eq(getsockname(h.lfd, (struct sockaddr *)&sa, &len), 0);
	cr_assert_eq(listen(h.lfd, 8), 0);
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/ingest", ntohs(sa.sin_port));
	cr_assert_eq(pthread_create(&th, NULL, http_main, &h), 0);
	daemon_start(&d, "stream_interval = 0.3\n", NULL);
	f = fixture_start(NULL);
	snprintf(ps, sizeof(ps), "%d", (int)f);
	cr_assert_eq(mp_stream_url_check(url), 0);
	{
		cr_assert_eq(client(out, sizeof(out), &d, "attach", ps, "--stream", url, NULL), 0);
		for (int i = 0; i < 1000 && __atomic_load_n(&h.requests, __ATOMIC_SEQ_CST) < 2; i++)
			msleep(10);
		cr_assert_geq(h.requests, 2);
		unsigned long from, until;
		char name[256], tail[64];
		cr_assert_eq(sscanf(h.request_line,
				    "POST /ingest?name=%255[^&]&from=%lu&until=%lu&format=%63s",
				    name, &from, &until, tail),
			     4, "%s", h.request_line);
		snprintf(want, sizeof(want), "memprofd.fixture-attach%%7Bpid%%3D%d%%7D", (int)f);
		cr_assert_str_eq(name, want);
		cr_assert_str_eq(tail, "pprof");
		cr_assert(!strcmp(h.request_line + strlen(h.request_line) - 9, " HTTP/1.1"));
		time_t now = time(NULL);
		cr_assert(from <= until && until <= (unsigned long)now + 1 &&
				  from + 60 >= (unsigned long)now,
			  "from %lu until %lu now %ld", from, until, (long)now);
		/* A gzipped pprof that go tool pprof (an independent reader)
		 * decodes, with the heap sample types in Go's order. */
		cr_assert_gt(h.body_len, 2);
		cr_assert(h.body[0] == 0x1f && h.body[1] == 0x8b);
		pprof_reads(h.body, h.body_len);
		cr_assert_eq(client(out, sizeof(out), &d, "detach", ps, NULL), 0);
	}
	cr_assert_eq(daemon_stop(&d), 0);
	fixture_finish(f);
	shutdown(h.lfd, SHUT_RDWR);
	close(h.lfd);
	pthread_join(th, NULL);
}

/* memprofd --pid in the foreground streams too: chunks every interval with
 * contiguous sequence numbers, and a final one when SIGTERM ends it. */
Test(stream, foreground_memprofd_stream, .timeout = 120, .fini = cleanup)
{
	char url[64], dir[256], ps[32];
	struct chunk ch;
	struct coll c;
	pid_t f, d;
	int st;

	need_root();
	snprintf(url, sizeof(url), "tcp://127.0.0.1:%d", free_port());
	snprintf(dir, sizeof(dir), "%s", tmp_of("fg"));
	coll_start(&c, url, dir);
	coll_wait_listening(&c);
	f = fixture_start(NULL);
	snprintf(ps, sizeof(ps), "%d", (int)f);
	char *argv[] = { path_of("cli/memprofd"), "--pid", ps,	      "--stream", url,
			 "--stream-interval",	  "0.2",   "--print", "none",	  NULL };
	d = spawn(argv, -1, -1);
	for (uint64_t want = 0; want < 3; want++) {
		next_chunk(&c, &ch, NULL, 0);
		cr_assert_eq(ch.seq, want);
		cr_assert_eq(ch.pid, f);
		cr_assert_eq(ch.final, 0);
		cr_assert_eq(ch.lost, 0);
		assert_chunk_profile(&ch, f);
	}
	kill(d, SIGTERM);
	do {
		uint64_t prev = ch.seq;

		next_chunk(&c, &ch, NULL, 0);
		cr_assert_eq(ch.seq, prev + 1);
	} while (!ch.final);
	assert_chunk_profile(&ch, f);
	cr_assert_eq(waitpid(d, &st, 0), d);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "memprofd status %d", st);
	fixture_finish(f);
	coll_kill(&c, SIGTERM);
}
