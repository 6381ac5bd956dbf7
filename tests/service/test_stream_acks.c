// SPDX-License-Identifier: MIT
/*
 * The acknowledgements of tcp:// and unix: streams, with the streamer driven
 * directly and the test as the collector, byte by byte: a chunk is held
 * until acknowledged and sent again on the next connection; a peer that
 * never said hello and closes has the chunks it was written counted lost
 * (and reported by the next chunk of their target); an acknowledgement of
 * a chunk not in flight or an oversized reply ends the connection; what
 * awaits an ack stays within the buffer; a collector without hello is
 * served as before acknowledgements existed. And for an HTTP backend, a
 * request whose response never came is sent again, not counted delivered.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "ack.h"
#include "helpers.h"
#include "memprof.pb-c.h"
#include "profile.h"
#include "stream.h"

static char dir[256], url[600];

/* What a test streams, its streamer and the listening socket of the
 * collector it plays: made by start(), freed by teardown(). */
static struct mp_profile *p;
static struct mp_streamer *s;
static int lfd = -1;

static void setup(void)
{
	mp_test_tmpdir(dir, sizeof(dir), "acks");
	snprintf(url, sizeof(url), "unix:%s/c.sock", dir);
}

static void teardown(void)
{
	if (s)
		mp_streamer_free(s);
	s = NULL;
	if (p)
		mp_profile_free(p);
	p = NULL;
	if (lfd >= 0)
		close(lfd);
	lfd = -1;
	mp_test_rmtree(dir);
}

/* Chunk @seq of target 7. */
static void push(uint64_t seq)
{
	struct mp_chunk_meta m = { .target_id = 7,
				   .pid = 42,
				   .exe = "/bin/fixture",
				   .sequence = seq,
				   .window_begin_ns = 1,
				   .window_end_ns = 2 + seq };

	cr_assert_eq(mp_streamer_push(s, &m, p, NULL, 0), 0);
}

static int listen_unix(void)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	cr_assert_lt(strlen(url + 5), sizeof(sa.sun_path));
	memcpy(sa.sun_path, url + 5, strlen(url + 5) + 1);
	cr_assert_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	cr_assert_eq(listen(fd, 4), 0);
	return fd;
}

static void send_all(int fd, const uint8_t *buf, size_t len)
{
	cr_assert_eq(send(fd, buf, len, MSG_NOSIGNAL), (ssize_t)len);
}

static void hello(int fd)
{
	uint8_t f[MP_ACK_MAX_FRAME];

	send_all(fd, f, mp_ack_encode_hello(f));
}

static void ack(int fd, uint64_t target, uint64_t seq)
{
	uint8_t f[MP_ACK_MAX_FRAME];

	send_all(fd, f, mp_ack_encode(target, seq, f));
}

static void read_exact(int fd, uint8_t *buf, size_t len)
{
	for (size_t off = 0; off < len;) {
		struct pollfd pf = { .fd = fd, .events = POLLIN };
		ssize_t n;

		cr_assert_eq(poll(&pf, 1, 10000), 1, "no chunk within 10 s");
		n = recv(fd, buf + off, len - off, 0);
		cr_assert_gt(n, 0, "connection closed inside a chunk");
		off += (size_t)n;
	}
}

/* The next chunk on @fd: its sequence and lost_chunks. */
static void read_chunk(int fd, uint64_t *ret_seq, uint64_t *ret_lost)
{
	uint8_t hdr[10], *body;
	uint64_t len = 0;
	size_t h = 0;
	int r = 0;
	Memprof__Chunk *ch;

	while (r == 0) {
		cr_assert_lt(h, sizeof(hdr));
		read_exact(fd, hdr + h, 1);
		r = mp_varint_decode(hdr, ++h, &len);
	}
	cr_assert_gt(r, 0);
	cr_assert_lt(len, 1 << 20);
	body = malloc(len);
	read_exact(fd, body, len);
	ch = memprof__chunk__unpack(NULL, len, body);
	cr_assert_not_null(ch);
	cr_assert_eq(ch->target_id, 7);
	*ret_seq = ch->sequence;
	*ret_lost = ch->lost_chunks;
	memprof__chunk__free_unpacked(ch, NULL);
	free(body);
}

static void expect_chunk(int fd, uint64_t seq, uint64_t lost)
{
	uint64_t got_seq, got_lost;

	read_chunk(fd, &got_seq, &got_lost);
	cr_assert_eq(got_seq, seq, "chunk %" PRIu64 ", want %" PRIu64, got_seq, seq);
	cr_assert_eq(got_lost, lost, "chunk %" PRIu64 " lost_chunks %" PRIu64 ", want %" PRIu64,
		     got_seq, got_lost, lost);
}

/* The streamer closed the connection (nothing more than EOF comes). */
static void expect_closed(int fd)
{
	struct pollfd pf = { .fd = fd, .events = POLLIN };
	uint8_t b;

	cr_assert_eq(poll(&pf, 1, 10000), 1, "the streamer kept the connection");
	cr_assert_eq(recv(fd, &b, 1, 0), 0);
	close(fd);
}

static struct mp_streamer *streamer(uint64_t buffer)
{
	struct mp_streamer *ret;

	cr_assert_eq(mp_streamer_new(buffer, &ret), 0);
	cr_assert_eq(mp_streamer_set_global(ret, (char *[]){ url }, 1), 0);
	return ret;
}

/* A small profile, a streamer of @buffer bytes to @url, then the
 * collector listening there. */
static void start(uint64_t buffer)
{
	p = small_profile();
	s = streamer(buffer);
	lfd = listen_unix();
}

/* The streamer's next connection to the collector at @url, which
 * acknowledges (@say_hello) or not. */
static int next_connection(bool say_hello)
{
	struct pollfd pf = { .fd = lfd, .events = POLLIN };
	int fd;

	cr_assert_eq(poll(&pf, 1, 10000), 1, "the streamer did not connect");
	fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
	if (say_hello)
		hello(fd);
	return fd;
}

/* Chunks stay held until acknowledged; those not acknowledged when the
 * connection ends come again, first, on the next one. */
Test(stream_acks, unacknowledged_chunks_are_sent_again, .init = setup, .fini = teardown,
     .timeout = 60)
{
	int fd;

	start(1 << 20);
	for (uint64_t seq = 0; seq < 4; seq++)
		push(seq);
	fd = next_connection(true);
	for (uint64_t seq = 0; seq < 4; seq++)
		expect_chunk(fd, seq, 0);
	ack(fd, 7, 1); /* 0 and 1 */
	/* Wait until the streamer took the ack: two chunks still held. */
	for (int i = 0; i < 1000 && mp_streamer_target_lost(s, 7, true) != 2; i++)
		usleep(10000);
	cr_assert_eq(mp_streamer_target_lost(s, 7, true), 2);
	close(fd);
	fd = next_connection(true);
	expect_chunk(fd, 2, 0);
	expect_chunk(fd, 3, 0);
	ack(fd, 7, 3);
	cr_assert_eq(mp_streamer_flush(s, 10000000000ull), 0);
	cr_assert_eq(mp_streamer_target_lost(s, 7, true), 0);
	close(fd);
}

/* A peer that closes without a hello may or may not have the chunks it
 * was written: they are counted lost, and the next chunk of the target
 * reports them, also one queued behind them before they were lost. */
Test(stream_acks, closed_before_hello_counts_written_chunks_lost, .init = setup, .fini = teardown,
     .timeout = 60)
{
	int fd;

	/* One chunk written and one waiting: the second waits for the first
	 * to be acknowledged, so it is still queued when the first is lost. */
	start(1);
	push(0);
	fd = next_connection(false);
	expect_chunk(fd, 0, 0);
	push(1);
	close(fd);
	fd = next_connection(false);
	expect_chunk(fd, 1, 1);
	cr_assert_eq(mp_streamer_target_lost(s, 7, false), 1);
	close(fd);
	/* Nothing queued behind: the count waits for the next chunk. */
	for (int i = 0; i < 1000 && mp_streamer_target_lost(s, 7, false) != 2; i++)
		usleep(10000);
	cr_assert_eq(mp_streamer_target_lost(s, 7, false), 2);
	push(2);
	fd = next_connection(true);
	/* Chunk 1 reported chunk 0, and is lost too: 2. */
	expect_chunk(fd, 2, 2);
	ack(fd, 7, 2);
	cr_assert_eq(mp_streamer_flush(s, 10000000000ull), 0);
	close(fd);
}

/* A collector's replies are hostile input: an acknowledgement of a chunk
 * that is not in flight, a reply longer than any message: each ends the
 * connection, and the chunk comes again. A hello of version 0 is no hello:
 * the chunk written counts lost. */
Test(stream_acks, bad_replies_end_the_connection, .init = setup, .fini = teardown, .timeout = 60)
{
	static const uint8_t oversized[] = { 0x80, 0x08 }; /* a 1024-byte message */
	static const uint8_t version0[] = { 0x02, 0x08, 0x00 };
	int fd;

	start(1 << 20);
	push(0);
	for (int bad = 0; bad < 3; bad++) {
		fd = next_connection(true);
		expect_chunk(fd, 0, 0);
		if (bad == 0)
			ack(fd, 7, 1);
		else if (bad == 1)
			ack(fd, 8, 0);
		else
			send_all(fd, oversized, sizeof(oversized));
		expect_closed(fd);
		cr_assert_eq(mp_streamer_target_lost(s, 7, false), 0);
	}
	fd = next_connection(true);
	expect_chunk(fd, 0, 0);
	ack(fd, 7, 0);
	cr_assert_eq(mp_streamer_flush(s, 10000000000ull), 0);
	cr_assert_eq(mp_streamer_target_lost(s, 7, true), 0);
	close(fd);
	push(1);
	fd = next_connection(false);
	expect_chunk(fd, 1, 0);
	send_all(fd, version0, sizeof(version0));
	expect_closed(fd);
	cr_assert_eq(mp_streamer_target_lost(s, 7, true), 1);
}

/* What awaits an ack counts in the buffer: with a 1-byte buffer one chunk
 * is written, one waits, the next is dropped and counted, and reported
 * once the collector acknowledges. */
Test(stream_acks, unacknowledged_chunks_stay_within_the_buffer, .init = setup, .fini = teardown,
     .timeout = 60)
{
	int fd;
	uint64_t one;

	start(1);
	push(0);
	fd = next_connection(true);
	expect_chunk(fd, 0, 0);
	one = mp_streamer_queued_total(s);
	cr_assert_gt(one, 0);
	push(1);
	push(2);
	cr_assert_eq(mp_streamer_target_lost(s, 7, false), 1);
	cr_assert_leq(mp_streamer_queued_total(s), 2 * one + 16);
	ack(fd, 7, 0);
	expect_chunk(fd, 1, 0);
	ack(fd, 7, 1);
	cr_assert_eq(mp_streamer_flush(s, 10000000000ull), 0);
	push(3);
	expect_chunk(fd, 3, 1);
	ack(fd, 7, 3);
	cr_assert_eq(mp_streamer_flush(s, 10000000000ull), 0);
	cr_assert_eq(mp_streamer_queued_total(s), 0);
	close(fd);
}

/* A collector that never says hello (the protocol before
 * acknowledgements) is served as then, after a few seconds: what it was
 * written counts as delivered. */
Test(stream_acks, collector_without_hello_is_served_as_before, .init = setup, .fini = teardown,
     .timeout = 60)
{
	int fd;

	start(1 << 20);
	push(0);
	fd = next_connection(false);
	expect_chunk(fd, 0, 0);
	cr_assert_eq(mp_streamer_flush(s, 20000000000ull), 0);
	push(1);
	expect_chunk(fd, 1, 0);
	cr_assert_eq(mp_streamer_flush(s, 10000000000ull), 0);
	cr_assert_eq(mp_streamer_target_lost(s, 7, true), 0);
	close(fd);
}

/* --- an HTTP backend whose first response never comes --- */

struct http_srv {
	int lfd;
	uint8_t body[2][1 << 16];
	size_t body_len[2];
	int requests;
};

/* Reads one request; its body goes to @body. */
static bool read_request(int fd, uint8_t *body, size_t cap, size_t *ret_len)
{
	char head[8192], *end = NULL, *cl;
	size_t n = 0, clen, have;

	while (!end && n < sizeof(head) - 1) {
		ssize_t k = read(fd, head + n, sizeof(head) - 1 - n);

		if (k <= 0)
			return false;
		n += (size_t)k;
		head[n] = '\0';
		end = strstr(head, "\r\n\r\n");
	}
	cl = end ? strcasestr(head, "\r\nContent-Length: ") : NULL;
	if (!cl)
		return false;
	clen = strtoul(cl + 18, NULL, 10);
	have = n - (size_t)(end + 4 - head);
	if (clen > cap || have > clen)
		return false;
	memcpy(body, end + 4, have);
	while (have < clen) {
		ssize_t k = read(fd, body + have, clen - have);

		if (k <= 0)
			return false;
		have += (size_t)k;
	}
	*ret_len = have;
	return true;
}

static void *http_main(void *arg)
{
	static const char ok[] =
		"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
	struct http_srv *h = arg;

	for (int i = 0; i < 2; i++) {
		int fd = accept4(h->lfd, NULL, NULL, SOCK_CLOEXEC);

		if (fd < 0)
			return NULL;
		if (!read_request(fd, h->body[i], sizeof(h->body[i]), &h->body_len[i])) {
			close(fd);
			return NULL;
		}
		/* The first request is taken, and never answered. */
		if (i == 1 && write(fd, ok, sizeof(ok) - 1) < 0) {
			/* The streamer would retry. */
		}
		__atomic_add_fetch(&h->requests, 1, __ATOMIC_SEQ_CST);
		close(fd);
	}
	return NULL;
}

static void describe_line(void *ctx, const char *text)
{
	snprintf(ctx, 1024, "%s", text);
}

Test(stream_acks, http_request_without_response_is_sent_again, .init = setup, .fini = teardown,
     .timeout = 60)
{
	static struct http_srv h;
	struct sockaddr_in sa = { .sin_family = AF_INET,
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(sa);
	char line[1024], want[1024];
	pthread_t th;

	h.lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	cr_assert_eq(bind(h.lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	cr_assert_eq(getsockname(h.lfd, (struct sockaddr *)&sa, &len), 0);
	cr_assert_eq(listen(h.lfd, 4), 0);
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/ingest", ntohs(sa.sin_port));
	cr_assert_eq(mp_stream_url_check(url), 0);
	cr_assert_eq(pthread_create(&th, NULL, http_main, &h), 0);
	p = small_profile();
	s = streamer(1 << 20);
	push(0);
	cr_assert_eq(mp_streamer_flush(s, 20000000000ull), 0);
	pthread_join(th, NULL);
	cr_assert_eq(h.requests, 2);
	cr_assert_gt(h.body_len[0], 0);
	cr_assert_eq(h.body_len[0], h.body_len[1]);
	cr_assert_eq(memcmp(h.body[0], h.body[1], h.body_len[0]), 0, "not the same chunk again");
	mp_streamer_describe(s, describe_line, line);
	snprintf(want, sizeof(want),
		 "%s global state=idle queued_chunks=0 queued_bytes=0 sent=1 lost=0 refused=0 ",
		 url);
	cr_assert_eq(strncmp(line, want, strlen(want)), 0, "%s", line);
	cr_assert_eq(mp_streamer_target_lost(s, 7, true), 0);
	close(h.lfd);
}
