/* SPDX-License-Identifier: MIT */
/*
 * The HTTP/1.1 client side the profile backends share: a bounded,
 * incremental response parser (status line, headers, Content-Length,
 * chunked or close-delimited body), the verdict on a response per
 * protocol (sent, retry with backoff, or drop and count), and the header
 * file of a collector. Responses are hostile input: every length is
 * bounded and fuzz/fuzz_http.c feeds this parser anything.
 */
#ifndef MP_STREAM_HTTP_H
#define MP_STREAM_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "url.h"

#define MP_HTTP_MAX_BODY (16 * 1024) /* kept of a body; the rest is skipped */
#define MP_HTTP_MAX_LINE 2048
#define MP_HTTP_MAX_HEAD (32 * 1024)
#define MP_HTTP_MAX_HEADER_FILE 8192

struct mp_http_resp {
	int status; /* 100..599 */
	char reason[64];
	char content_type[96];
	char grpc_status[16], grpc_message[256]; /* trailers-only gRPC-Web */
	int64_t retry_after_s; /* -1 if absent or a date */
	uint8_t body[MP_HTTP_MAX_BODY];
	size_t body_len; /* kept */
	bool body_truncated;
	/* Parser state. */
	int state;
	bool chunked, have_length;
	uint64_t length, left; /* Content-Length; bytes left of body/chunk */
	size_t head_bytes, line_len;
	char line[MP_HTTP_MAX_LINE];
};

void mp_http_resp_init(struct mp_http_resp *r);
/* Feeds @n bytes. Returns 1 when the response is complete (bytes after
 * it are ignored), 0 when more are needed, -EBADMSG if malformed. */
int mp_http_resp_feed(struct mp_http_resp *r, const uint8_t *buf, size_t n);
/* The connection closed: 1 if that completes the response (a
 * close-delimited body), -EBADMSG if it was cut short. */
int mp_http_resp_eof(struct mp_http_resp *r);

enum mp_verdict {
	MP_V_SENT, /* accepted */
	MP_V_RETRY, /* keep the chunk, back off, send it again */
	MP_V_DROP, /* refused for good: drop and count */
};

struct mp_outcome {
	enum mp_verdict verdict;
	uint64_t retry_after_ns; /* from Retry-After, 0 = backoff */
	char why[512]; /* for the log; "" when plainly accepted */
};

/* What a complete response to a push of protocol @proto means. */
void mp_http_verdict(enum mp_backend_proto proto, const struct mp_http_resp *r,
		     struct mp_outcome *o);

/* Reads the header file @path (at most MP_HTTP_MAX_HEADER_FILE bytes of
 * "Name: value" lines; blank lines and lines starting with '#' skipped)
 * into @out as "Name: value\r\n" lines. Returns the length, or -errno;
 * -EINVAL (with the line number in *@ret_line) for a malformed line or a
 * header memprofd sets itself. Never logs the content. */
int mp_http_headers_load(const char *path, char *out, size_t cap, int *ret_line);

#endif /* MP_STREAM_HTTP_H */
