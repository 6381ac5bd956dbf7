// SPDX-License-Identifier: MIT
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "backend_body.h"
#include "log.h"

/* A request as queued: a header of ours, the path and query, the header
 * lines ("Name: value\r\n"), then the body. */
struct req_head {
	uint32_t target_len, headers_len;
};

struct mp_backend {
	char url[MP_STREAM_MAX_URL];
	struct mp_backend_url u;
	/* The transfer in progress (streaming thread only). */
	CURL *easy;
	CURLM *multi; /* that the easy handle is in, or NULL */
	struct curl_slist *headers;
	struct mp_http_resp resp;
	char err[CURL_ERROR_SIZE];
	long deadline_ms; /* of the transfer in progress */
	/* What was last logged, so that a state is logged once. */
	enum mp_verdict last_verdict;
	char last_why[512];
	int header_err; /* last header-file error logged (atomic) */
};

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc;

static void curl_init(void)
{
	curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

int mp_backend_multi_new(CURLM **ret)
{
	int r = mp_curl_load();

	if (r < 0)
		return log_error_errno(r, "%s", mp_curl_error());
	pthread_once(&curl_once, curl_init);
	if (curl_init_rc != CURLE_OK)
		return -ENOMEM;
	*ret = curl_multi_init();
	return *ret ? 0 : -ENOMEM;
}

/* A CA file must hold a certificate: said now, not at each connection. */
static int check_ca(const char *url, const char *path)
{
	char buf[64 * 1024 + 1];
	ssize_t n;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);

	if (fd < 0)
		return log_error_errno(-errno, "collector %s: cannot read CA file %s: %m", url,
				       path);
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n < 0)
		return log_error_errno(-errno, "collector %s: cannot read CA file %s: %m", url,
				       path);
	buf[n] = '\0';
	if (!strstr(buf, "-----BEGIN CERTIFICATE-----"))
		return log_error_errno(-EINVAL, "collector %s: CA file %s holds no certificate",
				       url, path);
	return 0;
}

int mp_backend_new(const char *url, struct mp_backend **ret)
{
	struct mp_backend *b;
	int r = mp_curl_load();

	if (r < 0)
		return log_error_errno(r, "collector %s: %s", url, mp_curl_error());
	pthread_once(&curl_once, curl_init);
	if (curl_init_rc != CURLE_OK)
		return log_error_errno(-ENOMEM, "collector %s: libcurl: %s", url,
				       curl_easy_strerror(curl_init_rc));
	b = calloc(1, sizeof(*b));
	if (!b)
		return -ENOMEM;
	snprintf(b->url, sizeof(b->url), "%s", url);
	r = mp_backend_url_parse(url, &b->u);
	if (r < 0) {
		free(b);
		return log_error_errno(r, "invalid collector URL %s", url);
	}
	r = b->u.tls && b->u.ca[0] ? check_ca(url, b->u.ca) : 0;
	if (r < 0) {
		free(b);
		return r;
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
	if (b->easy)
		curl_easy_cleanup(b->easy);
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

/* What the bodies say of chunk @m, with @u's service name and labels. */
static void chunk_of(const struct mp_backend_url *u, const struct mp_chunk_meta *m,
		     struct mp_be_chunk *c)
{
	*c = (struct mp_be_chunk){
		.service = mp_be_service_name(u->service, m->exe),
		.n_labels = u->n_labels,
		.target_id = m->target_id,
		.sequence = m->sequence,
		.pid = m->pid,
		.exe = m->exe,
		.window_begin_ns = m->window_begin_ns,
		.window_end_ns = m->window_end_ns,
	};
	for (size_t i = 0; i < u->n_labels; i++) {
		c->label_key[i] = u->label_key[i];
		c->label_value[i] = u->label_value[i];
	}
}

/* The body of one chunk for @u's protocol, its Content-Type and the
 * protocol's own header lines. */
static int encode_body(const struct mp_backend_url *u, const struct mp_be_chunk *m,
		       const struct mp_profile *p, const uint8_t *pprof, size_t pprof_len,
		       uint8_t **body, size_t *body_len, const char **type, const char **extra)
{
	*type = "application/octet-stream";
	*extra = "";
	switch (u->proto) {
	case MP_BE_INGEST:
		/* The pprof is the body as it is. */
		*body = malloc(pprof_len ? pprof_len : 1);
		if (!*body)
			return -ENOMEM;
		memcpy(*body, pprof, pprof_len);
		*body_len = pprof_len;
		return 0;
	case MP_BE_PYROSCOPE:
		/* Connect unary with the binary codec. */
		*type = "application/proto";
		*extra = "Connect-Protocol-Version: 1\r\n";
		return mp_be_encode_pyroscope(m, pprof, pprof_len, body, body_len);
	case MP_BE_PARCA:
		*type = "application/grpc-web+proto";
		*extra = "X-Grpc-Web: 1\r\n";
		return mp_be_encode_parca(m, pprof, pprof_len, body, body_len);
	case MP_BE_OTLP:
		*type = "application/x-protobuf";
		return mp_be_encode_otlp(m, p, body, body_len);
	}
	return -EINVAL;
}

int mp_backend_request(struct mp_backend *b, const struct mp_chunk_meta *m,
		       const struct mp_profile *p, const uint8_t *pprof, size_t pprof_len,
		       uint8_t **ret, size_t *ret_len)
{
	const struct mp_backend_url *u = &b->u;
	char file[MP_HTTP_MAX_HEADER_FILE + 64] = "", query[2048] = "", target[2560];
	char headers[MP_HTTP_MAX_HEADER_FILE + 256];
	const char *type, *extra;
	struct mp_be_chunk c;
	struct req_head h;
	uint8_t *body = NULL, *out;
	size_t body_len = 0;
	int r, tl, hl, line;

	if (u->headers[0]) {
		r = mp_http_headers_load(u->headers, file, sizeof(file), &line);
		if (r < 0) {
			header_problem(b, r, line);
			return r;
		}
		__atomic_store_n(&b->header_err, 0, __ATOMIC_RELAXED);
	}
	chunk_of(u, m, &c);
	if (u->proto == MP_BE_INGEST && mp_be_ingest_query(&c, query, sizeof(query)) < 0)
		return -ENAMETOOLONG;
	r = encode_body(u, &c, p, pprof, pprof_len, &body, &body_len, &type, &extra);
	if (r < 0)
		return r;
	tl = snprintf(target, sizeof(target), "%s%s", u->path, query);
	/* "Expect:" keeps libcurl from waiting for a 100 Continue. */
	hl = snprintf(headers, sizeof(headers), "Content-Type: %s\r\n%s%sExpect:\r\n", type, extra,
		      file);
	if (tl < 0 || (size_t)tl >= sizeof(target) || hl < 0 || (size_t)hl >= sizeof(headers)) {
		free(body);
		return -ENAMETOOLONG;
	}
	h = (struct req_head){ .target_len = (uint32_t)tl, .headers_len = (uint32_t)hl };
	out = malloc(sizeof(h) + (size_t)tl + (size_t)hl + body_len);
	if (!out) {
		free(body);
		return -ENOMEM;
	}
	memcpy(out, &h, sizeof(h));
	memcpy(out + sizeof(h), target, (size_t)tl);
	memcpy(out + sizeof(h) + tl, headers, (size_t)hl);
	memcpy(out + sizeof(h) + tl + hl, body, body_len);
	free(body);
	*ret = out;
	*ret_len = sizeof(h) + (size_t)tl + (size_t)hl + body_len;
	return 0;
}

static size_t on_header(char *data, size_t size, size_t n, void *arg)
{
	struct mp_backend *b = arg;

	(void)data;
	/* Only counted: the status and the headers are read through
	 * CURLINFO_RESPONSE_CODE and curl_easy_header() once the response is
	 * whole. 0 ends headers longer than any answer of a collector. */
	return mp_http_resp_head_bytes(&b->resp, n) ? size * n : 0;
}

static size_t on_body(char *data, size_t size, size_t n, void *arg)
{
	struct mp_backend *b = arg;

	/* 0 ends a body longer than any answer of a collector. */
	return mp_http_resp_body(&b->resp, (const uint8_t *)data, n) ? size * n : 0;
}

/* The header lines of a queued request, as a curl_slist. */
static int header_list(struct mp_backend *b, const char *text, size_t len)
{
	char line[MP_HTTP_MAX_HEADER_FILE + 256];

	for (size_t off = 0; off < len;) {
		const char *end = memmem(text + off, len - off, "\r\n", 2);
		size_t n = end ? (size_t)(end - text - off) : len - off;
		struct curl_slist *l;

		if (n >= sizeof(line))
			return -E2BIG;
		memcpy(line, text + off, n);
		line[n] = '\0';
		l = curl_slist_append(b->headers, line);
		if (!l)
			return -ENOMEM;
		b->headers = l;
		off += n + 2;
	}
	return 0;
}

static int set_options(struct mp_backend *b, const char *target, const uint8_t *body,
		       size_t body_len, long deadline_ms, void *priv)
{
	const struct mp_backend_url *u = &b->u;
	bool v6 = strchr(u->host, ':') != NULL;
	char url[4096];
	CURL *e = b->easy;
	CURLcode rc = CURLE_OK;

	snprintf(url, sizeof(url), "%s://%s%s%s:%s%s", u->tls ? "https" : "http", v6 ? "[" : "",
		 u->host, v6 ? "]" : "", u->port, target);
	curl_easy_reset(e);
	rc |= curl_easy_setopt(e, CURLOPT_URL, url);
	rc |= curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
	/* The collector named and no other: no proxy from the environment,
	 * no redirect, one connection per request. */
	rc |= curl_easy_setopt(e, CURLOPT_PROXY, "");
	rc |= curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);
	rc |= curl_easy_setopt(e, CURLOPT_FORBID_REUSE, 1L);
	rc |= curl_easy_setopt(e, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
	rc |= curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
	rc |= curl_easy_setopt(e, CURLOPT_USERAGENT, "memprofd/" MP_BE_VERSION);
	rc |= curl_easy_setopt(e, CURLOPT_HTTPHEADER, b->headers);
	rc |= curl_easy_setopt(e, CURLOPT_POST, 1L);
	rc |= curl_easy_setopt(e, CURLOPT_POSTFIELDS, body);
	rc |= curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body_len);
	rc |= curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, MP_BACKEND_CONNECT_MS);
	rc |= curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, deadline_ms);
	/* Content-Length beyond the cap: refused before a byte of it. A
	 * chunked body is cut by on_body(). */
	rc |= curl_easy_setopt(e, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)MP_HTTP_MAX_BODY);
	rc |= curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, 1L);
	rc |= curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, 2L);
	/* ca= replaces the system store, it does not add to it. */
	if (u->ca[0]) {
		rc |= curl_easy_setopt(e, CURLOPT_CAINFO, u->ca);
		rc |= curl_easy_setopt(e, CURLOPT_CAPATH, NULL);
	}
	rc |= curl_easy_setopt(e, CURLOPT_ERRORBUFFER, b->err);
	rc |= curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
	rc |= curl_easy_setopt(e, CURLOPT_HEADERDATA, b);
	rc |= curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
	rc |= curl_easy_setopt(e, CURLOPT_WRITEDATA, b);
	rc |= curl_easy_setopt(e, CURLOPT_PRIVATE, priv);
	return rc == CURLE_OK ? 0 : -EINVAL;
}

int mp_backend_start(struct mp_backend *b, CURLM *multi, const uint8_t *req, size_t len,
		     long deadline_ms, void *priv)
{
	struct req_head h;
	char target[2560];
	int r;

	mp_backend_close(b);
	if (len < sizeof(h))
		return -EINVAL;
	memcpy(&h, req, sizeof(h));
	if (h.target_len >= sizeof(target) || h.headers_len > len - sizeof(h) - h.target_len)
		return -EINVAL;
	memcpy(target, req + sizeof(h), h.target_len);
	target[h.target_len] = '\0';
	if (!b->easy && !(b->easy = curl_easy_init()))
		return -ENOMEM;
	r = header_list(b, (const char *)req + sizeof(h) + h.target_len, h.headers_len);
	if (r == 0)
		r = set_options(b, target, req + sizeof(h) + h.target_len + h.headers_len,
				len - sizeof(h) - h.target_len - h.headers_len, deadline_ms, priv);
	if (r < 0)
		return r;
	mp_http_resp_init(&b->resp);
	b->err[0] = '\0';
	b->deadline_ms = deadline_ms;
	if (curl_multi_add_handle(multi, b->easy) != CURLM_OK)
		return -ENOMEM;
	b->multi = multi;
	return 0;
}

void mp_backend_close(struct mp_backend *b)
{
	if (b->multi)
		curl_multi_remove_handle(b->multi, b->easy);
	b->multi = NULL;
	curl_slist_free_all(b->headers);
	b->headers = NULL;
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
	else if (o->verdict == MP_V_DROP && o->cause == MP_DROP_REFUSED)
		log_warning("collector %s refused a chunk: %s; dropped and counted", b->url,
			    o->why);
	else if (o->verdict == MP_V_DROP)
		log_warning("collector %s: %s; the chunk is dropped and counted lost", b->url,
			    o->why);
	b->last_verdict = o->verdict;
	snprintf(b->last_why, sizeof(b->last_why), "%s", o->why);
}

/* The headers a verdict reads, from the final response. */
static void read_headers(struct mp_backend *b)
{
	static const char *const names[] = { "Content-Type", "Retry-After", "grpc-status",
					     "grpc-message" };
	long status = 0;

	curl_easy_getinfo(b->easy, CURLINFO_RESPONSE_CODE, &status);
	b->resp.status = (int)status;
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		struct curl_header *h;

		if (curl_easy_header(b->easy, names[i], 0, CURLH_HEADER | CURLH_TRAILER, -1, &h) ==
		    CURLHE_OK)
			mp_http_resp_header(&b->resp, names[i], h->value);
	}
}

/* Why a transfer that got no usable response failed, and what to do. */
static int failure(struct mp_backend *b, CURLcode rc, struct mp_outcome *o)
{
	const char *detail = b->err[0] ? b->err : curl_easy_strerror(rc);
	curl_off_t connected_us = 0;
	long os_errno = 0;

	o->verdict = MP_V_RETRY;
	o->cause = MP_DROP_REFUSED;
	switch (rc) {
	case CURLE_COULDNT_RESOLVE_HOST:
		return -EHOSTUNREACH;
	case CURLE_COULDNT_CONNECT:
		curl_easy_getinfo(b->easy, CURLINFO_OS_ERRNO, &os_errno);
		return os_errno > 0 ? (int)-os_errno : -ECONNREFUSED;
	case CURLE_OPERATION_TIMEDOUT:
		/* Never connected: unreachable, as a refused connection is. */
		curl_easy_getinfo(b->easy, CURLINFO_CONNECT_TIME_T, &connected_us);
		if (!connected_us)
			return -ETIMEDOUT;
		/* Past the request's deadline: a collector that never answers,
		 * or drips its answer, holds no chunk longer than that. */
		o->verdict = MP_V_DROP;
		o->cause = MP_DROP_DEADLINE;
		snprintf(o->why, sizeof(o->why),
			 "no complete answer within %ld ms, the request's "
			 "deadline",
			 b->deadline_ms);
		break;
	case CURLE_PEER_FAILED_VERIFICATION:
		snprintf(o->why, sizeof(o->why), "certificate of %.200s refused: %s", b->u.host,
			 detail);
		break;
	case CURLE_GOT_NOTHING:
		snprintf(o->why, sizeof(o->why), "closed without a response");
		break;
	case CURLE_SEND_ERROR:
		snprintf(o->why, sizeof(o->why), "connection lost while sending (%s)", detail);
		break;
	case CURLE_RECV_ERROR:
		snprintf(o->why, sizeof(o->why), "connection lost before the response (%s)",
			 detail);
		break;
	case CURLE_WEIRD_SERVER_REPLY:
	case CURLE_PARTIAL_FILE:
	case CURLE_BAD_CONTENT_ENCODING:
	case CURLE_UNSUPPORTED_PROTOCOL:
		/* Whether it stored the chunk is unknown: sending it again
		 * could store it twice. */
		o->verdict = MP_V_DROP;
		o->cause = MP_DROP_MALFORMED;
		snprintf(o->why, sizeof(o->why), "malformed HTTP response (%s)", detail);
		break;
	default:
		snprintf(o->why, sizeof(o->why), "%s", detail);
	}
	return 0;
}

int mp_backend_finish(struct mp_backend *b, CURLcode rc, struct mp_outcome *o)
{
	bool cut_by_us =
		(rc == CURLE_WRITE_ERROR && (b->resp.body_truncated || b->resp.head_truncated)) ||
		rc == CURLE_FILESIZE_EXCEEDED;
	int r = 0;

	/* A Content-Length beyond the cap ends the transfer before the
	 * body: the same verdict as a body cut there. */
	if (rc == CURLE_FILESIZE_EXCEEDED)
		b->resp.body_truncated = true;
	o->retry_after_ns = 0;
	o->why[0] = '\0';
	if (rc == CURLE_OK || cut_by_us) {
		read_headers(b);
		mp_http_verdict(b->u.proto, &b->resp, o);
	} else {
		r = failure(b, rc, o);
	}
	mp_backend_close(b);
	if (r == 0)
		report(b, o);
	return r;
}
