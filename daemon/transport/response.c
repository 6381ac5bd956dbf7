// SPDX-License-Identifier: MIT
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "response.h"
#include "util.h"
#include "otlp_profiles.pb-c.h"

void mp_http_resp_init(struct mp_http_resp *r)
{
	memset(r, 0, offsetof(struct mp_http_resp, body));
	r->retry_after_s = -1;
	r->body_len = 0;
	r->body_seen = 0;
	r->body_truncated = false;
	r->head_seen = 0;
	r->head_truncated = false;
}

bool mp_http_resp_head_bytes(struct mp_http_resp *r, size_t n)
{
	r->head_seen += n;
	if (r->head_seen > MP_HTTP_MAX_HEAD)
		r->head_truncated = true;
	return !r->head_truncated;
}

static void copy_trimmed(char *dst, size_t cap, const char *s)
{
	size_t n;

	while (*s == ' ' || *s == '\t')
		s++;
	n = strlen(s);
	while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r' || s[n - 1] == '\n'))
		n--;
	if (n >= cap)
		n = cap - 1;
	memcpy(dst, s, n);
	dst[n] = '\0';
}

/* Digits only, at most 2^50: a count of seconds. */
static int parse_num(const char *s, uint64_t *ret)
{
	uint64_t v = 0;

	while (*s == ' ' || *s == '\t')
		s++;
	if (!isdigit((unsigned char)*s))
		return -EBADMSG;
	for (; isdigit((unsigned char)*s); s++) {
		v = v * 10 + (uint64_t)(*s - '0');
		if (v > (1ull << 50))
			return -EBADMSG;
	}
	while (*s == ' ' || *s == '\t')
		s++;
	if (*s)
		return -EBADMSG;
	*ret = v;
	return 0;
}

const char *mp_http_reason(int status)
{
	static const struct {
		int status;
		const char *reason;
	} t[] = {
		{ 200, "OK" },
		{ 201, "Created" },
		{ 202, "Accepted" },
		{ 204, "No Content" },
		{ 400, "Bad Request" },
		{ 401, "Unauthorized" },
		{ 403, "Forbidden" },
		{ 404, "Not Found" },
		{ 405, "Method Not Allowed" },
		{ 408, "Request Timeout" },
		{ 409, "Conflict" },
		{ 413, "Content Too Large" },
		{ 415, "Unsupported Media Type" },
		{ 422, "Unprocessable Content" },
		{ 429, "Too Many Requests" },
		{ 500, "Internal Server Error" },
		{ 501, "Not Implemented" },
		{ 502, "Bad Gateway" },
		{ 503, "Service Unavailable" },
		{ 504, "Gateway Timeout" },
	};

	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++)
		if (t[i].status == status)
			return t[i].reason;
	return "";
}

void mp_http_resp_header(struct mp_http_resp *r, const char *name, const char *value)
{
	uint64_t n;

	if (!strcasecmp(name, "grpc-status")) {
		copy_trimmed(r->grpc_status, sizeof(r->grpc_status), value);
	} else if (!strcasecmp(name, "grpc-message")) {
		copy_trimmed(r->grpc_message, sizeof(r->grpc_message), value);
	} else if (!strcasecmp(name, "content-type")) {
		copy_trimmed(r->content_type, sizeof(r->content_type), value);
	} else if (!strcasecmp(name, "retry-after")) {
		/* Seconds; an HTTP-date falls back to backoff. */
		if (parse_num(value, &n) == 0)
			r->retry_after_s = (int64_t)n;
	}
}

bool mp_http_resp_body(struct mp_http_resp *r, const uint8_t *p, size_t n)
{
	size_t k = sizeof(r->body) - r->body_len;

	if (k > n)
		k = n;
	memcpy(r->body + r->body_len, p, k);
	r->body_len += k;
	if (k < n)
		r->body_truncated = true;
	r->body_seen += n;
	return !r->body_truncated;
}

/* --- verdicts --- */

static const char *const grpc_codes[] = {
	"ok",
	"canceled",
	"unknown",
	"invalid_argument",
	"deadline_exceeded",
	"not_found",
	"already_exists",
	"permission_denied",
	"resource_exhausted",
	"failed_precondition",
	"aborted",
	"out_of_range",
	"unimplemented",
	"internal",
	"unavailable",
	"data_loss",
	"unauthenticated",
};

/* Codes that may succeed when the same request is sent again later (the
 * server was overloaded, restarting or timed out); everything else (bad
 * data, auth, a wrong endpoint) would fail again. */
static bool code_retryable(const char *code)
{
	static const char *const retry[] = { "unavailable",	  "resource_exhausted",
					     "deadline_exceeded", "aborted",
					     "internal",	  "unknown" };

	for (size_t i = 0; i < ARRAY_SIZE(retry); i++)
		if (!strcmp(code, retry[i]))
			return true;
	return false;
}

/* OTLP/HTTP's list (429, 502, 503, 504), plus 408 and any other 5xx
 * for the protocols whose servers name no list. */
static bool status_retryable(enum mp_backend_proto proto, int status)
{
	if (status == 429 || status == 502 || status == 503 || status == 504)
		return true;
	if (proto == MP_BE_OTLP)
		return false;
	return status == 408 || (status >= 500 && status <= 599);
}

/* Printable text of at most @max bytes, quotes and controls replaced:
 * what a server says is hostile and goes to the log. */
static void sanitize(char *dst, size_t cap, const char *src, size_t len)
{
	size_t k = 0;

	for (size_t i = 0; i < len && src[i] && k + 1 < cap; i++) {
		unsigned char c = (unsigned char)src[i];

		dst[k++] = (c < 0x20 || c == 0x7f || c == '"' || c == '\\') ? '?' : (char)c;
	}
	dst[k] = '\0';
}

static bool type_is(const struct mp_http_resp *r, const char *type)
{
	size_t n = strlen(type);

	return !strncasecmp(r->content_type, type, n) &&
	       (r->content_type[n] == '\0' || r->content_type[n] == ';' ||
		r->content_type[n] == ' ');
}

/* Connect's unary error body: {"code": "...", "message": "..."}. */
static bool connect_error(const struct mp_http_resp *r, char *code, size_t code_cap, char *msg,
			  size_t msg_cap)
{
	struct json_tokener *tok;
	json_object *o, *v;
	bool ok = false;

	if (!type_is(r, "application/json") || r->body_truncated || !r->body_len)
		return false;
	tok = json_tokener_new_ex(16);
	if (!tok)
		return false;
	o = json_tokener_parse_ex(tok, (const char *)r->body, (int)r->body_len);
	if (o && json_tokener_get_error(tok) == json_tokener_success &&
	    json_object_is_type(o, json_type_object) && json_object_object_get_ex(o, "code", &v) &&
	    json_object_is_type(v, json_type_string)) {
		const char *c = json_object_get_string(v);

		for (size_t i = 1; i < ARRAY_SIZE(grpc_codes); i++)
			if (!strcmp(c, grpc_codes[i]))
				ok = true;
		if (ok) {
			snprintf(code, code_cap, "%s", c);
			msg[0] = '\0';
			if (json_object_object_get_ex(o, "message", &v) &&
			    json_object_is_type(v, json_type_string))
				sanitize(msg, msg_cap, json_object_get_string(v),
					 (size_t)json_object_get_string_len(v));
		}
	}
	json_object_put(o);
	json_tokener_free(tok);
	return ok;
}

static void verdict_connect(const struct mp_http_resp *r, struct mp_outcome *o)
{
	char code[32], msg[300];

	if (r->status == 200) {
		o->verdict = MP_V_SENT;
		return;
	}
	if (connect_error(r, code, sizeof(code), msg, sizeof(msg))) {
		o->verdict = code_retryable(code) ? MP_V_RETRY : MP_V_DROP;
		snprintf(o->why, sizeof(o->why), "HTTP %d, Connect code %s: \"%s\"", r->status,
			 code, msg);
		return;
	}
	o->verdict = status_retryable(MP_BE_PYROSCOPE, r->status) ? MP_V_RETRY : MP_V_DROP;
	snprintf(o->why, sizeof(o->why), "HTTP %d%s%s (no Connect error body)", r->status,
		 *mp_http_reason(r->status) ? " " : "", mp_http_reason(r->status));
}

static void verdict_otlp(const struct mp_http_resp *r, struct mp_outcome *o)
{
	bool proto = type_is(r, "application/x-protobuf") && !r->body_truncated;
	char msg[300] = "";

	if (r->status >= 200 && r->status <= 299) {
		Memprof__Otlp__ExportProfilesServiceResponse *resp =
			proto ? memprof__otlp__export_profiles_service_response__unpack(
					NULL, r->body_len, r->body) :
				NULL;

		o->verdict = MP_V_SENT;
		/* Partial success: must not be retried; what was rejected is
		 * lost, and said so. */
		if (resp && resp->partial_success && resp->partial_success->rejected_profiles > 0) {
			const char *m = resp->partial_success->error_message;

			sanitize(msg, sizeof(msg), m ? m : "", m ? strlen(m) : 0);
			o->verdict = MP_V_DROP;
			snprintf(o->why, sizeof(o->why),
				 "partial success, %lld profiles rejected: \"%s\"",
				 (long long)resp->partial_success->rejected_profiles, msg);
		}
		if (resp)
			memprof__otlp__export_profiles_service_response__free_unpacked(resp, NULL);
		return;
	}
	if (proto && r->body_len) {
		Memprof__Otlp__Status *st =
			memprof__otlp__status__unpack(NULL, r->body_len, r->body);

		if (st) {
			sanitize(msg, sizeof(msg), st->message ? st->message : "",
				 st->message ? strlen(st->message) : 0);
			memprof__otlp__status__free_unpacked(st, NULL);
		}
	}
	o->verdict = status_retryable(MP_BE_OTLP, r->status) ? MP_V_RETRY : MP_V_DROP;
	snprintf(o->why, sizeof(o->why), "HTTP %d%s%s: \"%s\"", r->status,
		 *mp_http_reason(r->status) ? " " : "", mp_http_reason(r->status), msg);
}

static void percent_decode_lossy(char *s)
{
	char *w = s;

	for (char *p = s; *p; p++) {
		int hi, lo;

		if (*p == '%' && (hi = isxdigit((unsigned char)p[1]) ? 1 : 0) &&
		    isxdigit((unsigned char)p[2])) {
			hi = isdigit((unsigned char)p[1]) ? p[1] - '0' : tolower(p[1]) - 'a' + 10;
			lo = isdigit((unsigned char)p[2]) ? p[2] - '0' : tolower(p[2]) - 'a' + 10;
			*w++ = (char)(hi << 4 | lo);
			p += 2;
		} else {
			*w++ = *p;
		}
	}
	*w = '\0';
}

/* gRPC-Web: the status is in the trailer frame (flag 0x80) of the body,
 * or in the headers of a trailers-only response. */
static void grpc_web_status(const struct mp_http_resp *r, char *status, size_t scap, char *msg,
			    size_t mcap)
{
	snprintf(status, scap, "%s", r->grpc_status);
	snprintf(msg, mcap, "%s", r->grpc_message);
	for (size_t off = 0; off + 5 <= r->body_len;) {
		uint8_t flag = r->body[off];
		uint32_t len = (uint32_t)r->body[off + 1] << 24 | (uint32_t)r->body[off + 2] << 16 |
			       (uint32_t)r->body[off + 3] << 8 | r->body[off + 4];

		off += 5;
		if (len > r->body_len - off)
			break;
		if (flag & 0x80) {
			char t[1024];
			size_t n = len < sizeof(t) - 1 ? len : sizeof(t) - 1;
			char *save = NULL;

			memcpy(t, r->body + off, n);
			t[n] = '\0';
			for (char *l = strtok_r(t, "\r\n", &save); l;
			     l = strtok_r(NULL, "\r\n", &save)) {
				char *c = strchr(l, ':');

				if (!c)
					continue;
				*c = '\0';
				if (!strcasecmp(l, "grpc-status"))
					copy_trimmed(status, scap, c + 1);
				else if (!strcasecmp(l, "grpc-message"))
					copy_trimmed(msg, mcap, c + 1);
			}
		}
		off += len;
	}
	percent_decode_lossy(msg);
}

static void verdict_grpc_web(const struct mp_http_resp *r, struct mp_outcome *o)
{
	char status[16], raw[256], msg[300];
	uint64_t code;

	if (r->status != 200) {
		o->verdict = status_retryable(MP_BE_PARCA, r->status) ? MP_V_RETRY : MP_V_DROP;
		snprintf(o->why, sizeof(o->why), "HTTP %d%s%s", r->status,
			 *mp_http_reason(r->status) ? " " : "", mp_http_reason(r->status));
		return;
	}
	grpc_web_status(r, status, sizeof(status), raw, sizeof(raw));
	sanitize(msg, sizeof(msg), raw, strlen(raw));
	if (parse_num(status, &code) < 0 || code > 16) {
		/* No status: the response was cut or is not gRPC-Web. */
		o->verdict = MP_V_RETRY;
		snprintf(o->why, sizeof(o->why), "HTTP 200 without a valid grpc-status (\"%s\")",
			 status);
		return;
	}
	if (code == 0) {
		o->verdict = MP_V_SENT;
		return;
	}
	o->verdict = code_retryable(grpc_codes[code]) ? MP_V_RETRY : MP_V_DROP;
	snprintf(o->why, sizeof(o->why), "grpc-status %d (%s): \"%s\"", (int)code, grpc_codes[code],
		 msg);
}

void mp_http_verdict(enum mp_backend_proto proto, const struct mp_http_resp *r,
		     struct mp_outcome *o)
{
	o->verdict = MP_V_DROP;
	o->cause = MP_DROP_REFUSED;
	o->why[0] = '\0';
	o->retry_after_ns = 0;
	if (r->head_truncated) {
		o->cause = MP_DROP_OVERSIZED;
		snprintf(o->why, sizeof(o->why),
			 "HTTP %d with headers longer than %d KiB (cut there)", r->status,
			 MP_HTTP_MAX_HEAD / 1024);
		return;
	}
	if (r->body_truncated) {
		/* Not an answer of any of these protocols; whether the chunk
		 * was stored is unknown, so it is not sent again. */
		o->cause = MP_DROP_OVERSIZED;
		snprintf(o->why, sizeof(o->why),
			 "HTTP %d with a body longer than %d KiB (cut there)", r->status,
			 MP_HTTP_MAX_BODY / 1024);
		return;
	}
	switch (proto) {
	case MP_BE_PYROSCOPE:
		verdict_connect(r, o);
		break;
	case MP_BE_OTLP:
		verdict_otlp(r, o);
		break;
	case MP_BE_PARCA:
		verdict_grpc_web(r, o);
		break;
	case MP_BE_INGEST:
		if (r->status >= 200 && r->status <= 299) {
			o->verdict = MP_V_SENT;
		} else {
			o->verdict =
				status_retryable(MP_BE_INGEST, r->status) ? MP_V_RETRY : MP_V_DROP;
			snprintf(o->why, sizeof(o->why), "HTTP %d%s%s", r->status,
				 *mp_http_reason(r->status) ? " " : "", mp_http_reason(r->status));
		}
		break;
	}
	if (o->verdict == MP_V_RETRY && r->retry_after_s >= 0)
		o->retry_after_ns =
			(uint64_t)(r->retry_after_s > 300 ? 300 : r->retry_after_s) * 1000000000ull;
}

/* --- header files --- */

static bool token_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       strchr("!#$%&'*+-.^_`|~", c);
}

int mp_http_headers_load(const char *path, char *out, size_t cap, int *ret_line)
{
	static const char *const ours[] = { "host",
					    "content-length",
					    "content-type",
					    "connection",
					    "transfer-encoding",
					    "te",
					    "connect-protocol-version",
					    "x-grpc-web",
					    "user-agent",
					    "expect" };
	char buf[MP_HTTP_MAX_HEADER_FILE + 1];
	size_t len = 0, k = 0;
	int fd, line = 0;
	ssize_t n;

	*ret_line = 0;
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0)
		return -errno;
	while (len < sizeof(buf) && (n = read(fd, buf + len, sizeof(buf) - len)) > 0)
		len += (size_t)n;
	close(fd);
	if (len > MP_HTTP_MAX_HEADER_FILE)
		return -EFBIG;
	buf[len] = '\0';
	if (memchr(buf, '\0', len))
		return -EINVAL;
	for (char *l = buf, *next; l && *l; l = next) {
		char *nl = strchr(l, '\n'), *colon, *v;
		size_t nl_len, vl;

		next = nl ? nl + 1 : NULL;
		if (nl)
			*nl = '\0';
		line++;
		nl_len = strlen(l);
		if (nl_len && l[nl_len - 1] == '\r')
			l[--nl_len] = '\0';
		if (!nl_len || l[0] == '#')
			continue;
		colon = strchr(l, ':');
		*ret_line = line;
		if (!colon || colon == l)
			return -EINVAL;
		for (char *p = l; p < colon; p++)
			if (!token_char(*p))
				return -EINVAL;
		*colon = '\0';
		for (size_t i = 0; i < ARRAY_SIZE(ours); i++)
			if (!strcasecmp(l, ours[i]))
				return -EINVAL;
		v = colon + 1;
		while (*v == ' ' || *v == '\t')
			v++;
		vl = strlen(v);
		for (size_t i = 0; i < vl; i++)
			if (((unsigned char)v[i] < 0x20 && v[i] != '\t') || v[i] == 0x7f)
				return -EINVAL;
		if (k + strlen(l) + vl + 5 > cap)
			return -E2BIG;
		k += (size_t)sprintf(out + k, "%s: %s\r\n", l, v);
	}
	*ret_line = 0;
	out[k] = '\0';
	return (int)k;
}
