// SPDX-License-Identifier: MIT
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "ack.h"
#include "collect.h"
#include "log.h"
#include "memprof.pb-c.h"
#include "outfile.h"
#include "profile_pb.h"
#include "stream.h"

#define MAX_CONNS 64
#define MAX_TARGETS 65536

struct conn {
	int fd;
	uint8_t *buf;
	size_t len, cap;
};

struct seen {
	uint64_t target_id;
	int32_t pid;
	uint64_t next_seq;
};

struct collector {
	const char *dir;
	FILE *report;
	struct seen *seen;
	size_t n_seen;
};

static int listen_on(const char *url, int *ret)
{
	int fd, one = 1, r;

	if (!strncmp(url, "unix:", 5)) {
		struct sockaddr_un sa = { .sun_family = AF_UNIX };

		if (strlen(url + 5) >= sizeof(sa.sun_path) || !url[5])
			return -EINVAL;
		strcpy(sa.sun_path, url + 5);
		unlink(sa.sun_path);
		fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0)
			return -errno;
		if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
			goto err;
	} else if (!strncmp(url, "tcp://", 6)) {
		struct addrinfo hints = { .ai_socktype = SOCK_STREAM,
					  .ai_flags = AI_PASSIVE | AI_NUMERICSERV };
		struct addrinfo *ai;
		char host[256];
		const char *hp = url + 6, *colon = strrchr(hp, ':');
		size_t hl;

		if (!colon || (size_t)(colon - hp) >= sizeof(host))
			return -EINVAL;
		hl = (size_t)(colon - hp);
		if (hl >= 2 && hp[0] == '[' && hp[hl - 1] == ']') {
			hp++;
			hl -= 2;
		}
		memcpy(host, hp, hl);
		host[hl] = '\0';
		if (getaddrinfo(hl ? host : NULL, colon + 1, &hints, &ai))
			return -EINVAL;
		fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, ai->ai_protocol);
		if (fd < 0) {
			freeaddrinfo(ai);
			return -errno;
		}
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		r = bind(fd, ai->ai_addr, ai->ai_addrlen);
		freeaddrinfo(ai);
		if (r < 0)
			goto err;
	} else {
		return -EINVAL;
	}
	if (listen(fd, 16) < 0)
		goto err;
	*ret = fd;
	return 0;
err:
	r = -errno;
	close(fd);
	return r;
}

static struct seen *seen_of(struct collector *c, uint64_t target_id, int32_t pid, bool *fresh)
{
	struct seen *s;

	*fresh = false;
	for (size_t i = 0; i < c->n_seen; i++)
		if (c->seen[i].target_id == target_id && c->seen[i].pid == pid)
			return &c->seen[i];
	if (c->n_seen >= MAX_TARGETS)
		return NULL;
	s = realloc(c->seen, (c->n_seen + 1) * sizeof(*s));
	if (!s)
		return NULL;
	c->seen = s;
	s[c->n_seen] = (struct seen){ .target_id = target_id, .pid = pid };
	*fresh = true;
	return &s[c->n_seen++];
}

/* The hello and the acks back to the daemon: a few bytes on a socket
 * whose peer reads them at once, so a full socket means a peer that does
 * not, and ends the connection. */
static int conn_send(struct conn *k, const uint8_t *buf, size_t len)
{
	ssize_t n = send(k->fd, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT);

	if (n < 0)
		return -errno;
	return (size_t)n == len ? 0 : -EAGAIN;
}

static int ack(struct conn *k, const Memprof__Chunk *ch)
{
	uint8_t frame[MP_ACK_MAX_FRAME];

	return conn_send(k, frame, mp_ack_encode(ch->target_id, ch->sequence, frame));
}

/* One chunk, acknowledged once it is on disk; a malformed one is reported
 * and skipped (returns 0; acknowledged when it names its chunk, as sending
 * it again would not mend it), only a local failure to store it (not
 * acknowledged: the daemon keeps it) or to acknowledge it is an error. */
static int on_chunk(struct collector *c, struct conn *k, const uint8_t *buf, size_t len)
{
	Memprof__Chunk *ch = memprof__chunk__unpack(NULL, len, buf);
	struct mp_profile *p = NULL;
	const char *why = NULL;
	char path[PATH_MAX];
	struct seen *s;
	bool fresh;
	int r;

	if (!ch) {
		log_error("undecodable chunk of %zu bytes skipped", len);
		return 0;
	}
	r = mp_profile_decode(ch->profile.data, ch->profile.len, &p, &why);
	if (r < 0) {
		log_error("chunk %" PRIu64 " of pid %d: bad profile (%s), skipped", ch->sequence,
			  (int)ch->pid, why ? why : strerror(-r));
		r = ack(k, ch);
		memprof__chunk__free_unpacked(ch, NULL);
		return r;
	}
	s = seen_of(c, ch->target_id, ch->pid, &fresh);
	if (s && fresh && ch->sequence) {
		/* A target already streaming when this collector started:
		 * nothing to compare with yet. */
		fprintf(c->report,
			"join pid=%d target=%" PRIu64 " seq=%" PRIu64 " reported_lost=%" PRIu64
			"\n",
			(int)ch->pid, ch->target_id, ch->sequence, ch->lost_chunks);
	} else if (s && ch->sequence < s->next_seq) {
		/* Stored before, but its ack never reached the daemon (the
		 * connection ended first): the same chunk again. */
		fprintf(c->report,
			"resent pid=%d target=%" PRIu64 " seq=%" PRIu64 " expected=%" PRIu64 "\n",
			(int)ch->pid, ch->target_id, ch->sequence, s->next_seq);
	} else if (s && ch->sequence != s->next_seq) {
		uint64_t missing = ch->sequence - s->next_seq;

		fprintf(c->report,
			"gap pid=%d target=%" PRIu64 " expected=%" PRIu64 " got=%" PRIu64
			" missing=%" PRIu64 " reported_lost=%" PRIu64 "\n",
			(int)ch->pid, ch->target_id, s->next_seq, ch->sequence, missing,
			ch->lost_chunks);
		log_error("pid %d target %" PRIu64 ": gap, expected chunk %" PRIu64 ", got %" PRIu64
			  " (%" PRIu64 " missing, daemon reports %" PRIu64 " lost)",
			  (int)ch->pid, ch->target_id, s->next_seq, ch->sequence, missing,
			  ch->lost_chunks);
	}
	if (s && ch->sequence >= s->next_seq)
		s->next_seq = ch->sequence + 1;
	snprintf(path, sizeof(path), "%s/%d-%" PRIu64, c->dir, (int)ch->pid, ch->target_id);
	if (mkdir(path, 0755) < 0 && errno != EEXIST) {
		r = -errno;
		log_error_errno(-errno, "%s: %m", path);
		goto out;
	}
	snprintf(path + strlen(path), sizeof(path) - strlen(path), "/%08" PRIu64 ".memprof",
		 ch->sequence);
	r = mp_profile_save(p, path);
	if (r < 0) {
		log_error_errno(r, "%s: %s", path, mp_output_strerror(r));
		goto out;
	}
	/* Acknowledged once on disk, before it is reported: a chunk this
	 * collector reported is never sent to it again. */
	r = ack(k, ch);
	if (r < 0)
		goto out;
	fprintf(c->report,
		"chunk pid=%d target=%" PRIu64 " seq=%" PRIu64 " lost=%" PRIu64
		" final=%d window_ns=%" PRIu64 " bytes=%zu file=%s\n",
		(int)ch->pid, ch->target_id, ch->sequence, ch->lost_chunks, ch->final ? 1 : 0,
		ch->window_end_ns - ch->window_begin_ns, len, path);
	fflush(c->report);
out:
	mp_profile_free(p);
	memprof__chunk__free_unpacked(ch, NULL);
	return r;
}

/* Consumes complete chunks from @k's buffer; -EBADMSG ends the connection. */
static int drain(struct collector *c, struct conn *k)
{
	size_t off = 0;
	int r = 0;

	while (off < k->len) {
		uint64_t n;
		int h = mp_varint_decode(k->buf + off, k->len - off, &n);

		if (h < 0 || (h > 0 && n > MP_COLLECT_MAX_CHUNK)) {
			r = -EBADMSG;
			break;
		}
		if (h == 0 || k->len - off - (size_t)h < n)
			break;
		r = on_chunk(c, k, k->buf + off + h, (size_t)n);
		if (r < 0)
			break;
		off += (size_t)h + (size_t)n;
	}
	memmove(k->buf, k->buf + off, k->len - off);
	k->len -= off;
	return r;
}

static int conn_read(struct collector *c, struct conn *k)
{
	for (;;) {
		ssize_t n;

		if (k->cap - k->len < 65536) {
			size_t cap = k->cap ? k->cap * 2 : 1 << 20;
			uint8_t *b;

			if (cap > MP_COLLECT_MAX_CHUNK + 16)
				cap = MP_COLLECT_MAX_CHUNK + 16;
			if (cap <= k->len)
				return -EBADMSG;
			b = realloc(k->buf, cap);
			if (!b)
				return -ENOMEM;
			k->buf = b;
			k->cap = cap;
		}
		n = recv(k->fd, k->buf + k->len, k->cap - k->len, MSG_DONTWAIT);
		if (n == 0)
			return -ECONNRESET;
		if (n < 0)
			return errno == EAGAIN || errno == EINTR ? 0 : -errno;
		k->len += (size_t)n;
		int r = drain(c, k);

		if (r < 0)
			return r;
	}
}

int mp_collect_run(const char *listen_url, const char *out_dir, FILE *report)
{
	struct collector c = { .dir = out_dir, .report = report };
	struct conn conns[MAX_CONNS];
	struct pollfd pf[MAX_CONNS + 2];
	size_t nc = 0;
	sigset_t mask;
	int lfd = -1, sfd, r = 0;
	bool running = true;

	if (mkdir(out_dir, 0755) < 0 && errno != EEXIST) {
		log_error_errno(-errno, "%s: %m", out_dir);
		return -errno;
	}
	sigemptyset(&mask);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGTERM);
	sigprocmask(SIG_BLOCK, &mask, NULL);
	signal(SIGPIPE, SIG_IGN);
	sfd = signalfd(-1, &mask, SFD_CLOEXEC);
	r = listen_on(listen_url, &lfd);
	if (r < 0 || sfd < 0) {
		log_error_errno(r < 0 ? r : -errno, "cannot listen on %s: %m", listen_url);
		if (sfd >= 0)
			close(sfd);
		return r < 0 ? r : -errno;
	}
	fprintf(report, "listening %s\n", listen_url);
	fflush(report);
	while (running) {
		pf[0] = (struct pollfd){ .fd = sfd, .events = POLLIN };
		pf[1] = (struct pollfd){ .fd = lfd, .events = nc < MAX_CONNS ? POLLIN : 0 };
		for (size_t i = 0; i < nc; i++)
			pf[i + 2] = (struct pollfd){ .fd = conns[i].fd, .events = POLLIN };
		if (poll(pf, nc + 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			r = -errno;
			break;
		}
		if (pf[0].revents & POLLIN)
			running = false;
		if (pf[1].revents & POLLIN) {
			int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
			uint8_t hello[MP_ACK_MAX_FRAME];

			/* First the hello: this collector acknowledges chunks. */
			if (fd >= 0) {
				conns[nc] = (struct conn){ .fd = fd };
				if (conn_send(&conns[nc], hello, mp_ack_encode_hello(hello)) == 0)
					nc++;
				else
					close(fd);
			}
		}
		for (size_t i = 0; i < nc;) {
			int e = 0;

			if (pf[i + 2].fd == conns[i].fd && pf[i + 2].revents)
				e = conn_read(&c, &conns[i]);
			if (e == -EBADMSG)
				log_error("malformed stream, connection closed");
			if (e == -ENOMEM || e == -ENOSPC || e == -EACCES || e == -EROFS) {
				r = e;
				running = false;
			}
			if (e < 0) {
				close(conns[i].fd);
				free(conns[i].buf);
				conns[i] = conns[--nc];
				pf[i + 2] = pf[nc + 2];
				continue;
			}
			i++;
		}
	}
	for (size_t i = 0; i < nc; i++) {
		/* What is already here is complete chunks or a torn one. */
		close(conns[i].fd);
		free(conns[i].buf);
	}
	close(lfd);
	close(sfd);
	if (!strncmp(listen_url, "unix:", 5))
		unlink(listen_url + 5);
	free(c.seen);
	return r;
}
