// SPDX-License-Identifier: MIT
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "backend.h"
#include "encode.h"
#include "log.h"
#include "tls.h"

enum { P_START, P_HANDSHAKE, P_SEND, P_RECV };

struct mp_backend {
	char url[MP_STREAM_MAX_URL];
	struct mp_backend_url u;
	struct mp_tls_ctx *tls_ctx;
	/* The exchange in progress (streaming thread only). */
	struct mp_tls *tls;
	int phase;
	size_t off;
	struct mp_http_resp resp;
	/* What was last logged, so that a state is logged once. */
	enum mp_verdict last_verdict;
	char last_why[512];
	int header_err; /* last header-file error logged (atomic) */
};

int mp_backend_new(const char *url, struct mp_backend **ret)
{
	struct mp_backend *b = calloc(1, sizeof(*b));
	char why[600];
	int r;

	if (!b)
		return -ENOMEM;
	snprintf(b->url, sizeof(b->url), "%s", url);
	r = mp_backend_url_parse(url, &b->u);
	if (r < 0) {
		free(b);
		return log_error_errno(r, "invalid collector URL %s", url);
	}
	if (b->u.tls) {
		r = mp_tls_ctx_new(b->u.ca, &b->tls_ctx, why, sizeof(why));
		if (r < 0) {
			free(b);
			return log_error_errno(r, "collector %s: %s", url, why);
		}
	}
	b->last_verdict = MP_V_SENT;
	*ret = b;
	return 0;
}

int mp_backend_check(const char *url)
{
	struct mp_backend *b;
	int r = mp_backend_new(url, &b);

	mp_backend_free(r == 0 ? b : NULL);
	return r;
}

void mp_backend_free(struct mp_backend *b)
{
	if (!b)
		return;
	mp_backend_close(b);
	mp_tls_ctx_free(b->tls_ctx);
	free(b);
}

const struct mp_backend_url *mp_backend_url(const struct mp_backend *b)
{
	return &b->u;
}

bool mp_backend_wants_pprof(const struct mp_backend *b)
{
	return b->u.proto != MP_BE_OTLP;
}

/* Logs a header file problem once per distinct error. */
static void header_problem(struct mp_backend *b, int err, int line)
{
	int code = err * 100000 - line;

	if (__atomic_exchange_n(&b->header_err, code, __ATOMIC_RELAXED) == code)
		return;
	if (err == -EINVAL)
		log_error("collector %s: header file %s, line %d: not a \"Name: value\" header "
			  "memprofd may send; chunks are dropped until it is fixed",
			  b->url, b->u.headers, line);
	else
		log_error_errno(err,
				"collector %s: cannot read header file %s: %m; chunks are dropped "
				"until it is fixed",
				b->url, b->u.headers);
}

int mp_backend_request(struct mp_backend *b, const struct mp_chunk_meta *m,
		       const struct mp_profile *p, const uint8_t *pprof, size_t pprof_len,
		       uint8_t **ret, size_t *ret_len)
{
	const struct mp_backend_url *u = &b->u;
	char headers[MP_HTTP_MAX_HEADER_FILE + 64] = "", query[2048] = "", head[12288];
	const char *type = "application/octet-stream", *extra = "";
	uint8_t *body = NULL, *out;
	size_t body_len = 0;
	bool v6 = strchr(u->host, ':') != NULL;
	int r, hl, line;

	if (u->headers[0]) {
		r = mp_http_headers_load(u->headers, headers, sizeof(headers), &line);
		if (r < 0) {
			header_problem(b, r, line);
			return r;
		}
		__atomic_store_n(&b->header_err, 0, __ATOMIC_RELAXED);
	}
	switch (u->proto) {
	case MP_BE_INGEST:
		r = mp_be_ingest_query(m, query, sizeof(query));
		if (r >= 0) {
			/* The pprof is the body as it is. */
			body = malloc(pprof_len ? pprof_len : 1);
			r = body ? 0 : -ENOMEM;
			if (body)
				memcpy(body, pprof, pprof_len);
			body_len = pprof_len;
		}
		break;
	case MP_BE_PYROSCOPE:
		/* Connect unary with the binary codec. */
		type = "application/proto";
		extra = "Connect-Protocol-Version: 1\r\n";
		r = mp_be_encode_pyroscope(u, m, pprof, pprof_len, &body, &body_len);
		break;
	case MP_BE_PARCA:
		type = "application/grpc-web+proto";
		extra = "X-Grpc-Web: 1\r\n";
		r = mp_be_encode_parca(u, m, pprof, pprof_len, &body, &body_len);
		break;
	case MP_BE_OTLP:
		type = "application/x-protobuf";
		r = mp_be_encode_otlp(u, m, p, &body, &body_len);
		break;
	default:
		r = -EINVAL;
	}
	if (r < 0)
		return r;
	hl = snprintf(head, sizeof(head),
		      "POST %s%s HTTP/1.1\r\n"
		      "Host: %s%s%s:%s\r\n"
		      "User-Agent: memprofd/" MP_BE_VERSION "\r\n"
		      "Content-Type: %s\r\n"
		      "%s"
		      "Content-Length: %zu\r\n"
		      "%s"
		      "Connection: close\r\n\r\n",
		      u->path, query, v6 ? "[" : "", u->host, v6 ? "]" : "", u->port, type, extra,
		      body_len, headers);
	if (hl < 0 || (size_t)hl >= sizeof(head)) {
		free(body);
		return -ENAMETOOLONG;
	}
	out = malloc((size_t)hl + body_len);
	if (!out) {
		free(body);
		return -ENOMEM;
	}
	memcpy(out, head, (size_t)hl);
	memcpy(out + hl, body, body_len);
	free(body);
	*ret = out;
	*ret_len = (size_t)hl + body_len;
	return 0;
}

void mp_backend_close(struct mp_backend *b)
{
	mp_tls_free(b->tls);
	b->tls = NULL;
	b->phase = P_START;
	b->off = 0;
}

/* One log line per change: accepted again, retrying because of X,
 * refusing because of X. */
static void report(struct mp_backend *b, const struct mp_outcome *o)
{
	if (o->verdict == b->last_verdict && !strcmp(o->why, b->last_why))
		return;
	if (o->verdict == MP_V_SENT && b->last_verdict != MP_V_SENT && !o->why[0])
		log_notice("collector %s accepts chunks again", b->url);
	else if (o->verdict == MP_V_RETRY)
		log_warning("collector %s: %s; keeping the chunk, retrying with backoff", b->url,
			    o->why);
	else if (o->verdict == MP_V_DROP)
		log_warning("collector %s refused a chunk: %s; dropped and counted", b->url,
			    o->why);
	b->last_verdict = o->verdict;
	snprintf(b->last_why, sizeof(b->last_why), "%s", o->why);
}

static enum mp_step done(struct mp_backend *b, struct mp_outcome *o, enum mp_verdict v,
			 const char *why)
{
	if (why) {
		o->verdict = v;
		o->retry_after_ns = 0;
		snprintf(o->why, sizeof(o->why), "%s", why);
	}
	report(b, o);
	return MP_STEP_DONE;
}

static enum mp_step receive(struct mp_backend *b, int fd, short *ret_events, struct mp_outcome *o)
{
	uint8_t buf[4096];
	char why[480];

	for (;;) {
		ssize_t n;
		int r;

		if (b->tls) {
			n = mp_tls_recv(b->tls, buf, sizeof(buf), ret_events);
		} else {
			n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
			if (n < 0)
				n = errno == EAGAIN || errno == EINTR ? -EAGAIN : -errno;
			*ret_events = POLLIN;
		}
		if (n == -EAGAIN)
			return MP_STEP_AGAIN;
		if (n < 0) {
			snprintf(why, sizeof(why), "connection lost before the response (%s)",
				 b->tls ? mp_tls_error(b->tls) : strerror((int)-n));
			return done(b, o, MP_V_RETRY, why);
		}
		if (n == 0) {
			/* Closed: complete only if the body runs to the close. */
			if (b->resp.state == 0 && !b->resp.line_len)
				return done(b, o, MP_V_RETRY, "closed without a response");
			r = mp_http_resp_eof(&b->resp);
		} else {
			r = mp_http_resp_feed(&b->resp, buf, (size_t)n);
		}
		if (r < 0)
			/* Whether it stored the chunk is unknown: sending it
			 * again could store it twice. */
			return done(b, o, MP_V_DROP, "malformed HTTP response");
		if (r == 1) {
			mp_http_verdict(b->u.proto, &b->resp, o);
			return done(b, o, o->verdict, NULL);
		}
	}
}

enum mp_step mp_backend_step(struct mp_backend *b, int fd, const uint8_t *req, size_t len,
			     short *ret_events, struct mp_outcome *o)
{
	int r;

	if (b->phase == P_START) {
		mp_http_resp_init(&b->resp);
		b->off = 0;
		b->phase = P_SEND;
		if (b->u.tls) {
			r = mp_tls_new(b->tls_ctx, fd, b->u.host, &b->tls);
			if (r < 0)
				return done(b, o, MP_V_RETRY, "out of memory for TLS");
			b->phase = P_HANDSHAKE;
		}
	}
	if (b->phase == P_HANDSHAKE) {
		r = mp_tls_handshake(b->tls, ret_events);
		if (r == -EAGAIN)
			return MP_STEP_AGAIN;
		if (r < 0)
			return done(b, o, MP_V_RETRY, mp_tls_error(b->tls));
		b->phase = P_SEND;
	}
	while (b->phase == P_SEND) {
		ssize_t n;

		if (b->off == len) {
			b->phase = P_RECV;
			break;
		}
		if (b->tls) {
			n = mp_tls_send(b->tls, req + b->off, len - b->off, ret_events);
		} else {
			n = send(fd, req + b->off, len - b->off, MSG_NOSIGNAL | MSG_DONTWAIT);
			if (n < 0)
				n = errno == EAGAIN || errno == EINTR ? -EAGAIN : -errno;
			*ret_events = POLLOUT;
		}
		if (n == -EAGAIN)
			return MP_STEP_AGAIN;
		if (n < 0) {
			char why[480];

			snprintf(why, sizeof(why), "connection lost while sending (%s)",
				 b->tls ? mp_tls_error(b->tls) : strerror((int)-n));
			return done(b, o, MP_V_RETRY, why);
		}
		b->off += (size_t)n;
	}
	return receive(b, fd, ret_events, o);
}
