/* SPDX-License-Identifier: MIT */
/*
 * What a collector answered, and what it means. libcurl speaks HTTP; this
 * keeps the few parts of a response a verdict reads (status, from
 * CURLINFO_RESPONSE_CODE; Content-Type, Retry-After, grpc-status/-message, the start of the
 * body) and judges it per protocol: sent, retry with backoff, or drop and
 * count. Responses are hostile input: every length is bounded, and
 * fuzz/fuzz_http.c feeds the verdicts anything.
 */
#ifndef MP_STREAM_RESPONSE_H
#define MP_STREAM_RESPONSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "url.h"

/* Read of a body at most: an answer of these protocols is a few hundred
 * bytes; a longer one is cut there (the transfer ends) and the chunk
 * dropped and counted. */
#define MP_HTTP_MAX_BODY (16 * 1024)
/* Header bytes of a response read at most (status lines and headers,
 * interim responses included): past it, cut the same way. */
#define MP_HTTP_MAX_HEAD (16 * 1024)
#define MP_HTTP_MAX_LINE 2048
#define MP_HTTP_MAX_HEADER_FILE 8192

struct mp_http_resp {
	int status; /* 100..599: libcurl's CURLINFO_RESPONSE_CODE */
	char content_type[96];
	char grpc_status[16], grpc_message[256]; /* trailers-only gRPC-Web */
	int64_t retry_after_s; /* -1 if absent or a date */
	uint8_t body[MP_HTTP_MAX_BODY];
	size_t body_len; /* kept */
	uint64_t body_seen; /* received, kept or not */
	bool body_truncated; /* longer than MP_HTTP_MAX_BODY: cut */
	uint64_t head_seen; /* header bytes received */
	bool head_truncated; /* more than MP_HTTP_MAX_HEAD: cut */
};

void mp_http_resp_init(struct mp_http_resp *r);
/* The standard reason phrase of @status ("Service Unavailable"), or ""
 * for a code without one: messages name the status, the collector's own
 * phrase is not read. */
const char *mp_http_reason(int status);
/* @n more header bytes came (libcurl's header callback): false once more
 * than MP_HTTP_MAX_HEAD did: stop reading. */
bool mp_http_resp_head_bytes(struct mp_http_resp *r, size_t n);
/* A header libcurl parsed; those a verdict reads are kept. */
void mp_http_resp_header(struct mp_http_resp *r, const char *name, const char *value);
/* Body bytes: the first MP_HTTP_MAX_BODY are kept. False once more than
 * that came: stop reading (the response is then cut, and its verdict a
 * drop). */
bool mp_http_resp_body(struct mp_http_resp *r, const uint8_t *p, size_t n);

enum mp_verdict {
	MP_V_SENT, /* accepted */
	MP_V_RETRY, /* keep the chunk, back off, send it again */
	MP_V_DROP, /* refused for good: drop and count */
};

/* Why a chunk was dropped: the collector refused it, or its answer broke
 * a bound of ours (malformed, longer than MP_HTTP_MAX_BODY, not complete
 * by the request's deadline). */
enum mp_drop_cause {
	MP_DROP_REFUSED,
	MP_DROP_MALFORMED,
	MP_DROP_OVERSIZED,
	MP_DROP_DEADLINE,
};

struct mp_outcome {
	enum mp_verdict verdict;
	enum mp_drop_cause cause; /* of MP_V_DROP */
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

#endif /* MP_STREAM_RESPONSE_H */
