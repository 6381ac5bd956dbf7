// SPDX-License-Identifier: MIT
/*
 * The pure parts of the HTTP backends: the URL syntax, what is kept of a
 * response libcurl received, every verdict (what each server's documented
 * answers mean: sent, retried with backoff, dropped and counted), the
 * header file, the OTLP encoder and its arena.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "arena.h"
#include "backend_body.h"
#include "response.h"
#include "stream.h"
#include "url.h"

Test(url, schemes_ports_paths)
{
	struct mp_backend_url u;

	cr_assert_eq(mp_backend_url_parse("pyroscope://127.0.0.1", &u), 0);
	cr_assert_eq(u.proto, MP_BE_PYROSCOPE);
	cr_assert(!u.tls);
	cr_assert_str_eq(u.port, "4040");
	cr_assert_str_eq(u.path, "/push.v1.PusherService/Push");
	cr_assert_eq(mp_backend_url_parse("pyroscope+https://pyro.example:443/proxy/", &u), 0);
	cr_assert(u.tls);
	cr_assert_str_eq(u.host, "pyro.example");
	cr_assert_str_eq(u.port, "443");
	cr_assert_str_eq(u.path, "/proxy/push.v1.PusherService/Push");
	cr_assert_eq(mp_backend_url_parse("otlp://[::1]", &u), 0);
	cr_assert_eq(u.proto, MP_BE_OTLP);
	cr_assert_str_eq(u.host, "::1");
	cr_assert_str_eq(u.port, "4318");
	cr_assert_str_eq(u.path, "/v1development/profiles");
	cr_assert_eq(mp_backend_url_parse("parca+https://p:7443", &u), 0);
	cr_assert_eq(u.proto, MP_BE_PARCA);
	cr_assert_str_eq(u.path, "/parca.profilestore.v1alpha1.ProfileStoreService/WriteRaw");
	/* http(s): the path names the protocol; none is the legacy /ingest. */
	cr_assert_eq(mp_backend_url_parse("http://h:4040", &u), 0);
	cr_assert_eq(u.proto, MP_BE_INGEST);
	cr_assert_str_eq(u.path, "/ingest");
	cr_assert_eq(mp_backend_url_parse("https://h/push.v1.PusherService/Push", &u), 0);
	cr_assert_eq(u.proto, MP_BE_PYROSCOPE);
	cr_assert_str_eq(u.port, "443");
	cr_assert_eq(mp_backend_url_parse("http://h:4318/v1development/profiles", &u), 0);
	cr_assert_eq(u.proto, MP_BE_OTLP);
	cr_assert_eq(
		mp_backend_url_parse(
			"http://h:1/parca.profilestore.v1alpha1.ProfileStoreService/WriteRaw", &u),
		0);
	cr_assert_eq(u.proto, MP_BE_PARCA);
	/* Every form passes the streamer's check; tcp/unix are not ours. */
	cr_assert_eq(mp_stream_url_check("otlp+https://collector.example"), 0);
	/* For https, the CA file must hold a certificate. */
	cr_assert_lt(mp_stream_url_check("otlp+https://collector.example?ca=/nonexistent.pem"), 0);
	cr_assert_lt(mp_stream_url_check("pyroscope+https://h?ca=/dev/null"), 0);
	cr_assert(!mp_backend_url_is("tcp://h:1"));
}

Test(url, settings)
{
	struct mp_backend_url u;

	cr_assert_eq(mp_backend_url_parse("pyroscope://h:1?service_name=llm%20server&label.host="
					  "web-1&label.container=c9&headers=/etc/memprofd/"
					  "t.hdr&ca=/etc/ssl/ca.pem",
					  &u),
		     0);
	cr_assert_str_eq(u.service, "llm server");
	cr_assert_eq(u.n_labels, 2);
	cr_assert_str_eq(u.label_key[0], "host");
	cr_assert_str_eq(u.label_value[0], "web-1");
	cr_assert_str_eq(u.label_key[1], "container");
	cr_assert_str_eq(u.label_value[1], "c9");
	cr_assert_str_eq(u.headers, "/etc/memprofd/t.hdr");
	cr_assert_str_eq(u.ca, "/etc/ssl/ca.pem");
}

Test(url, refused)
{
	static const char *const bad[] = {
		"pyroscope://",
		"pyroscope://h:0",
		"pyroscope://h:65536",
		"pyroscope://h:12a",
		"pyroscope://h?nope=1",
		"pyroscope://h?service_name=",
		"pyroscope://h?label.__name__=x",
		"pyroscope://h?label.service_name=x",
		"pyroscope://h?label.9x=1",
		"pyroscope://h?label.a=1&label.a=2",
		"pyroscope://h?headers=relative",
		"pyroscope://h?label.a=%0d%0aX-Evil:1",
		"pyroscope://h?label.a=%zz",
		"pyroscope://h?label.a=1&",
		"http://h:1/in gest",
		"http://h:1/a#frag",
		"http://us@er:1/",
		"otlp://[::1",
		"ftp://h:1",
	};

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct mp_backend_url u;

		cr_assert_eq(mp_backend_url_parse(bad[i], &u), -EINVAL, "%s", bad[i]);
		cr_assert_eq(mp_stream_url_check(bad[i]), -EINVAL, "%s", bad[i]);
	}
}

/* A response as libcurl hands it over: the status code (as
 * CURLINFO_RESPONSE_CODE gives it), the headers (split here as libcurl's
 * own parser would), the body. */
static void feed(struct mp_http_resp *r, const char *text, size_t len)
{
	const char *end = memmem(text, len, "\r\n\r\n", 4), *eol;

	cr_assert_not_null(end, "%s", text);
	mp_http_resp_init(r);
	for (const char *l = text; l && l < end + 2; l = eol + 2) {
		char name[128], value[512];
		const char *colon;

		eol = memmem(l, (size_t)(end + 2 - l), "\r\n", 2);
		if (!eol) {
			cr_assert_fail("a header line without its end: %s", text);
			return;
		}
		if (!strncmp(l, "HTTP/", 5)) {
			cr_assert_eq(sscanf(l, "HTTP/%*s %d", &r->status), 1, "%s", l);
			continue;
		}
		colon = memchr(l, ':', (size_t)(eol - l));
		cr_assert_not_null(colon);
		snprintf(name, sizeof(name), "%.*s", (int)(colon - l), l);
		snprintf(value, sizeof(value), "%.*s", (int)(eol - colon - 1), colon + 1);
		mp_http_resp_header(r, name, value);
	}
	cr_assert(mp_http_resp_body(r, (const uint8_t *)end + 4, len - (size_t)(end + 4 - text)));
}

Test(response, status_headers_body)
{
	static struct mp_http_resp r;
	static const char ok[] = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\nhello";

	feed(&r, ok, strlen(ok));
	cr_assert_eq(r.status, 200);
	cr_assert_str_eq(r.content_type, "application/json");
	cr_assert_eq(r.body_len, 5);
	cr_assert_eq(memcmp(r.body, "hello", 5), 0);
	cr_assert_eq(r.retry_after_s, -1);

	mp_http_resp_init(&r);
	mp_http_resp_header(&r, "Retry-After", " 7 ");
	mp_http_resp_header(&r, "grpc-status", "14\r\n");
	cr_assert_eq(r.retry_after_s, 7);
	cr_assert_str_eq(r.grpc_status, "14");
	/* An HTTP-date is not a count of seconds: backoff. */
	mp_http_resp_init(&r);
	mp_http_resp_header(&r, "Retry-After", "Wed, 21 Oct 2026 07:28:00 GMT");
	cr_assert_eq(r.retry_after_s, -1);
}

/* Messages name the status by its standard phrase; the collector's own
 * phrase is never read. */
Test(response, reason_phrases)
{
	cr_assert_str_eq(mp_http_reason(503), "Service Unavailable");
	cr_assert_str_eq(mp_http_reason(400), "Bad Request");
	cr_assert_str_eq(mp_http_reason(599), "");
	cr_assert_str_eq(mp_http_reason(-1), "");
}

Test(response, long_body_kept_bounded)
{
	static struct mp_http_resp r;
	size_t n = MP_HTTP_MAX_BODY * 3;
	uint8_t *body = malloc(n);

	memset(body, 'x', n);
	mp_http_resp_init(&r);
	/* Up to the cap, in pieces: read on. */
	cr_assert(mp_http_resp_body(&r, body, MP_HTTP_MAX_BODY - 1));
	cr_assert(mp_http_resp_body(&r, body, 1));
	cr_assert_not(r.body_truncated);
	/* One byte more: reading stops there. */
	cr_assert_not(mp_http_resp_body(&r, body, n));
	cr_assert_eq(r.body_len, MP_HTTP_MAX_BODY);
	cr_assert(r.body_truncated);
	free(body);
}

/* Header bytes count across interim responses; past the cap reading
 * stops and the verdict is a drop, counted as oversized. */
Test(response, long_head_is_cut_at_the_cap)
{
	static struct mp_http_resp r;
	static const char interim[] = "HTTP/1.1 100 Continue\r\n";
	static const char final[] = "HTTP/1.1 200 OK\r\n";
	struct mp_outcome o;

	mp_http_resp_init(&r);
	cr_assert(mp_http_resp_head_bytes(&r, MP_HTTP_MAX_HEAD - 100));
	cr_assert(mp_http_resp_head_bytes(&r, strlen(interim)));
	cr_assert_not(mp_http_resp_head_bytes(&r, 100), "an interim response reset the count");
	r.status = 200;
	(void) final;
	mp_http_verdict(MP_BE_PYROSCOPE, &r, &o);
	cr_assert_eq(o.verdict, MP_V_DROP);
	cr_assert_eq(o.cause, MP_DROP_OVERSIZED);
	cr_assert_str_eq(o.why, "HTTP 200 with headers longer than 16 KiB (cut there)");
}

/* A body cut at the cap is no answer of any protocol, whatever its
 * status: the chunk is dropped, counted as oversized, never retried (it
 * may have been stored). */
Test(response, oversized_answer_is_dropped_as_oversized)
{
	static struct mp_http_resp r;
	static uint8_t body[MP_HTTP_MAX_BODY + 1];
	static const int statuses[] = { 200, 503 };
	struct mp_outcome o;

	for (size_t i = 0; i < 2; i++)
		for (int p = MP_BE_INGEST; p <= MP_BE_PARCA; p++) {
			mp_http_resp_init(&r);
			r.status = statuses[i];
			cr_assert_not(mp_http_resp_body(&r, body, sizeof(body)));
			mp_http_verdict((enum mp_backend_proto)p, &r, &o);
			cr_assert_eq(o.verdict, MP_V_DROP, "protocol %d status %d", p, statuses[i]);
			cr_assert_eq(o.cause, MP_DROP_OVERSIZED);
			cr_assert(strstr(o.why, "longer than 16 KiB"), "%s", o.why);
		}
}

/* The verdict on a whole response @text for @proto. */
static void verdict(enum mp_backend_proto proto, const char *text, size_t len, struct mp_outcome *o)
{
	static struct mp_http_resp r;

	feed(&r, text, len);
	mp_http_verdict(proto, &r, o);
}

static void expect(enum mp_backend_proto proto, const char *text, enum mp_verdict v,
		   const char *why)
{
	struct mp_outcome o;

	verdict(proto, text, strlen(text), &o);
	cr_assert_eq(o.verdict, v, "%s -> %d (%s)", text, o.verdict, o.why);
	cr_assert_str_eq(o.why, why, "%s", text);
}

/* A response with a JSON body (Content-Length computed). */
static const char *json_err(const char *status, const char *body)
{
	static char buf[1024];

	snprintf(buf, sizeof(buf),
		 "HTTP/1.1 %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
		 status, strlen(body), body);
	return buf;
}

Test(verdict, pyroscope_connect)
{
	struct mp_outcome o;

	expect(MP_BE_PYROSCOPE,
	       "HTTP/1.1 200 OK\r\nContent-Type: application/proto\r\nContent-Length: 0\r\n\r\n",
	       MP_V_SENT, "");
	expect(MP_BE_PYROSCOPE,
	       json_err("503 Service Unavailable",
			"{\"code\":\"unavailable\",\"message\":\"ingester down\"}"),
	       MP_V_RETRY, "HTTP 503, Connect code unavailable: \"ingester down\"");
	expect(MP_BE_PYROSCOPE,
	       json_err("400 Bad Request",
			"{\"code\": \"invalid_argument\", \"message\": \"bad \\\"pprof\\\"\\n\", "
			"\"details\": [{\"type\": \"x\"}]}"),
	       MP_V_DROP, "HTTP 400, Connect code invalid_argument: \"bad ?pprof??\"");
	expect(MP_BE_PYROSCOPE,
	       json_err("401 Unauthorized",
			"{\"code\":\"unauthenticated\",\"message\":\"no token\"}"),
	       MP_V_DROP, "HTTP 401, Connect code unauthenticated: \"no token\"");
	expect(MP_BE_PYROSCOPE,
	       json_err("429 Too Many Requests", "{\"code\":\"resource_exhausted\"}    "),
	       MP_V_RETRY, "HTTP 429, Connect code resource_exhausted: \"\"");
	/* The code decides over the status; without one, the status does. */
	expect(MP_BE_PYROSCOPE,
	       "HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/html\r\nContent-Length: 3\r\n\r\n<p>",
	       MP_V_RETRY, "HTTP 502 Bad Gateway (no Connect error body)");
	expect(MP_BE_PYROSCOPE, json_err("500 Internal Server Error", "{\"code\":42}\n"),
	       MP_V_RETRY, "HTTP 500 Internal Server Error (no Connect error body)");
	expect(MP_BE_PYROSCOPE, json_err("404 Not Found", "{\"code\":\"nope\"}"), MP_V_DROP,
	       "HTTP 404 Not Found (no Connect error body)");
	expect(MP_BE_PYROSCOPE, json_err("400 Bad Request", "{\"code\":\""), MP_V_DROP,
	       "HTTP 400 Bad Request (no Connect error body)");
	/* Retry-After (seconds) is honoured, capped at 5 minutes. */
	verdict(MP_BE_PYROSCOPE, "HTTP/1.1 503 X\r\nRetry-After: 3\r\nContent-Length: 0\r\n\r\n",
		strlen("HTTP/1.1 503 X\r\nRetry-After: 3\r\nContent-Length: 0\r\n\r\n"), &o);
	cr_assert_eq(o.verdict, MP_V_RETRY);
	cr_assert_eq(o.retry_after_ns, 3000000000ull);
	verdict(MP_BE_PYROSCOPE, "HTTP/1.1 503 X\r\nRetry-After: 9999\r\nContent-Length: 0\r\n\r\n",
		strlen("HTTP/1.1 503 X\r\nRetry-After: 9999\r\nContent-Length: 0\r\n\r\n"), &o);
	cr_assert_eq(o.retry_after_ns, 300000000000ull);
}

Test(verdict, otlp_http)
{
	/* google.rpc.Status{code: 3, message: "bad dictionary"} */
	static const char bad[] = "HTTP/1.1 400 Bad Request\r\nContent-Type: application/x-protobuf"
				  "\r\nContent-Length: 18\r\n\r\n\x08\x03\x12\x0e"
				  "bad dictionary";
	/* ExportProfilesServiceResponse{partial_success{rejected 2, "too old"}} */
	static const char partial[] = "HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\n"
				      "Content-Length: 13\r\n\r\n\x0a\x0b\x08\x02\x12\x07too old";
	struct mp_outcome o;

	expect(MP_BE_OTLP,
	       "HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\nContent-Length: 0\r\n\r\n",
	       MP_V_SENT, "");
	verdict(MP_BE_OTLP, bad, sizeof(bad) - 1, &o);
	cr_assert_eq(o.verdict, MP_V_DROP);
	cr_assert_str_eq(o.why, "HTTP 400 Bad Request: \"bad dictionary\"");
	verdict(MP_BE_OTLP, partial, sizeof(partial) - 1, &o);
	cr_assert_eq(o.verdict, MP_V_DROP);
	cr_assert_str_eq(o.why, "partial success, 2 profiles rejected: \"too old\"");
	/* Retryable: exactly 429, 502, 503, 504. */
	expect(MP_BE_OTLP, "HTTP/1.1 429 Slow Down\r\nContent-Length: 0\r\n\r\n", MP_V_RETRY,
	       "HTTP 429 Too Many Requests: \"\"");
	expect(MP_BE_OTLP, "HTTP/1.1 504 GW\r\nContent-Length: 0\r\n\r\n", MP_V_RETRY,
	       "HTTP 504 Gateway Timeout: \"\"");
	expect(MP_BE_OTLP, "HTTP/1.1 500 Oops\r\nContent-Length: 0\r\n\r\n", MP_V_DROP,
	       "HTTP 500 Internal Server Error: \"\"");
}

Test(verdict, parca_grpc_web)
{
	/* A data frame with an empty WriteRawResponse, then the trailers. */
	static const char ok[] = "HTTP/1.1 200 OK\r\nContent-Type: application/grpc-web+proto\r\n"
				 "Content-Length: 35\r\n\r\n\x00\x00\x00\x00\x00"
				 "\x80\x00\x00\x00\x19grpc-status:0\r\ngrpc-message:\r\n";
	static const char unavailable[] =
		"HTTP/1.1 200 OK\r\nContent-Type: application/grpc-web+proto\r\n"
		"Content-Length: 48\r\n\r\n\x80\x00\x00\x00\x2bgrpc-status: 14\r\ngrpc-message: no%20"
		"store\r\n";
	struct mp_outcome o;

	verdict(MP_BE_PARCA, ok, sizeof(ok) - 1, &o);
	cr_assert_eq(o.verdict, MP_V_SENT, "%s", o.why);
	verdict(MP_BE_PARCA, unavailable, sizeof(unavailable) - 1, &o);
	cr_assert_eq(o.verdict, MP_V_RETRY);
	cr_assert_str_eq(o.why, "grpc-status 14 (unavailable): \"no store\"");
	/* Trailers-only: the status in the headers. */
	expect(MP_BE_PARCA,
	       "HTTP/1.1 200 OK\r\ngrpc-status: 3\r\ngrpc-message: bad%20pprof\r\n"
	       "Content-Length: 0\r\n\r\n",
	       MP_V_DROP, "grpc-status 3 (invalid_argument): \"bad pprof\"");
	expect(MP_BE_PARCA, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", MP_V_RETRY,
	       "HTTP 200 without a valid grpc-status (\"\")");
	expect(MP_BE_PARCA, "HTTP/1.1 503 Unavailable\r\nContent-Length: 0\r\n\r\n", MP_V_RETRY,
	       "HTTP 503 Service Unavailable");
	expect(MP_BE_PARCA, "HTTP/1.1 415 Unsupported\r\nContent-Length: 0\r\n\r\n", MP_V_DROP,
	       "HTTP 415 Unsupported Media Type");
}

Test(verdict, legacy_ingest)
{
	expect(MP_BE_INGEST, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", MP_V_SENT, "");
	expect(MP_BE_INGEST, "HTTP/1.1 500 Err\r\nContent-Length: 0\r\n\r\n", MP_V_RETRY,
	       "HTTP 500 Internal Server Error");
	expect(MP_BE_INGEST, "HTTP/1.1 422 No\r\nContent-Length: 0\r\n\r\n", MP_V_DROP,
	       "HTTP 422 Unprocessable Content");
}

static const char *write_tmp(const char *text)
{
	static char path[64];
	int fd;

	snprintf(path, sizeof(path), "/tmp/memprof-hdr-XXXXXX");
	fd = mkstemp(path);
	cr_assert_geq(fd, 0);
	cr_assert_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
	return path;
}

Test(headers, file_loaded_and_checked)
{
	char out[MP_HTTP_MAX_HEADER_FILE + 64];
	const char *p;
	int line;

	p = write_tmp("# tokens\nAuthorization: Bearer s3cr3t\r\n\nX-Scope-OrgID:\ttenant-1  \n");
	cr_assert_eq(mp_http_headers_load(p, out, sizeof(out), &line),
		     (int)strlen("Authorization: Bearer s3cr3t\r\nX-Scope-OrgID: tenant-1  \r\n"));
	cr_assert_str_eq(out, "Authorization: Bearer s3cr3t\r\nX-Scope-OrgID: tenant-1  \r\n");
	unlink(p);
	p = write_tmp("Authorization: ok\nno colon here\n");
	cr_assert_eq(mp_http_headers_load(p, out, sizeof(out), &line), -EINVAL);
	cr_assert_eq(line, 2);
	unlink(p);
	p = write_tmp("Content-Length: 0\n");
	cr_assert_eq(mp_http_headers_load(p, out, sizeof(out), &line), -EINVAL);
	unlink(p);
	p = write_tmp("Bad Name: x\n");
	cr_assert_eq(mp_http_headers_load(p, out, sizeof(out), &line), -EINVAL);
	unlink(p);
	p = write_tmp("X-A: a\x01b\n");
	cr_assert_eq(mp_http_headers_load(p, out, sizeof(out), &line), -EINVAL);
	unlink(p);
	cr_assert_eq(mp_http_headers_load("/nonexistent/x", out, sizeof(out), &line), -ENOENT);
}

/* The encoders' arena: zeroed, aligned, large requests apart, overflow
 * refused, everything gone with one free. */
Test(arena, alloc_and_free_once)
{
	struct mp_arena a = { 0 };
	uint8_t *small[100], *big;

	for (int i = 0; i < 100; i++) {
		small[i] = mp_arena_alloc(&a, 3, 1000);
		cr_assert_not_null(small[i]);
		cr_assert_eq((uintptr_t)small[i] % _Alignof(max_align_t), 0);
		for (int k = 0; k < 3000; k++)
			cr_assert_eq(small[i][k], 0);
		memset(small[i], i, 3000);
	}
	big = mp_arena_alloc(&a, 1 << 20, 1);
	cr_assert_not_null(big);
	cr_assert_eq(big[(1 << 20) - 1], 0);
	for (int i = 0; i < 100; i++)
		cr_assert_eq(small[i][2999], (uint8_t)i);
	cr_assert_null(mp_arena_alloc(&a, SIZE_MAX / 2, 4));
	cr_assert_not_null(mp_arena_alloc(&a, 0, 8));
	mp_arena_free(&a);
	cr_assert_null(a.head);
	mp_arena_free(&a);
}

/*
 * The OTLP encoder on a hand-made profile: two kernels, sites inside and
 * outside them, a symbolized and an unsymbolized caller, a mapping with a
 * build ID. protoc decodes it (tests/transport/otlp_summary.py reads protoc's
 * text): every table starts with its zero value, each sample type is its
 * own profile, and the per-kernel sums are exact.
 */
Test(otlp, encoder_read_back_by_protoc)
{
	static char *names[] = { "matmul", "relu" };
	static struct mp_phase phases[] = { { .name = "inference" } };
	static struct mp_pool owners[] = { { .name = "(unknown)" }, { .name = "libxnnpack.so" } };
	static struct mp_object objects[] = {
		{ .start = 0x400000,
		  .limit = 0x500000,
		  .path = "/usr/bin/app",
		  .build_id = "abcd1234" },
	};
	static struct mp_location locations[] = {
		{ .addr = 0x401000, .object = 0, .function = "alloc_a", .file = "a.c", .line = 23 },
		{ .addr = 0x402000, .object = 0, .function = "alloc_a", .file = "a.c", .line = 23 },
	};
	static struct mp_site sites[] = {
		{ 0x401000, 0, 0, 1, 7, 2, 2000, 1, 1000, 0, 0, 0, 0, 0, 0, 0 },
		{ 0x402000, 0, 0, 1, 7, 1, 3000, 0, 0, 0, 0, 0, 0, 0, 0, 0 },
		{ 0x401000, 1, 0, 0, 8, 3, 1200, 1, 200, 0, 0, 0, 0, 0, 0, 0 },
		{ 0x403000, MP_NONE, MP_NONE, 0, 9, 1, 64, 1, 64, 0, 0, 0, 0, 0, 0, 0 },
	};
	struct mp_profile p = { 0 };
	struct mp_backend_url u;
	struct mp_be_chunk c = { .target_id = 1, .pid = 4242, .exe = "/usr/bin/app" };
	const char *src = getenv("MEMPROF_SOURCE_ROOT");
	char path[] = "/tmp/memprof-otlp-XXXXXX", cmd[1024], out[8192];
	uint8_t *buf;
	size_t len, n;
	FILE *f;
	int fd;

	cr_assert_not_null(src, "MEMPROF_SOURCE_ROOT not set (run through meson)");
	p.n_names = 2;
	p.names = names;
	p.n_phases = 1;
	p.phases = phases;
	p.n_owners = 2;
	p.owners = owners;
	p.n_objects = 1;
	p.objects = objects;
	p.n_locations = 2;
	p.locations = locations;
	p.n_sites = 4;
	p.sites = sites;
	p.begin_ns = 1;
	p.end_ns = 1000000001;
	cr_assert_eq(mp_backend_url_parse("otlp://h?label.region=eu", &u), 0);
	c.service = mp_be_service_name(u.service, c.exe);
	c.n_labels = u.n_labels;
	c.label_key[0] = u.label_key[0];
	c.label_value[0] = u.label_value[0];
	cr_assert_eq(mp_be_encode_otlp(&c, &p, &buf, &len), 0);
	fd = mkstemp(path);
	cr_assert_geq(fd, 0);
	cr_assert_eq(write(fd, buf, len), (ssize_t)len);
	close(fd);
	free(buf);
	snprintf(cmd, sizeof(cmd),
		 "python3 '%s/tests/transport/otlp_summary.py' '%s/proto' '%s' 2>&1", src, src,
		 path);
	f = popen(cmd, "r");
	cr_assert_not_null(f);
	n = fread(out, 1, sizeof(out) - 1, f);
	out[n] = '\0';
	cr_assert_eq(pclose(f), 0, "%s", out);
	unlink(path);
	cr_assert_null(strstr(out, "error "), "%s", out);
	static const char *const want[] = {
		"mapping /usr/bin/app build_id=abcd1234\n",
		"resource service.name=app\n",
		"resource process.pid=4242\n",
		"resource process.executable.name=app\n",
		"resource process.executable.path=/usr/bin/app\n",
		"resource region=eu\n",
		"profile alloc_objects/count samples=4\n",
		"sum alloc_objects memprof.kernel=matmul 3\n",
		"sum alloc_objects memprof.kernel=relu 3\n",
		"profile alloc_space/bytes samples=4\n",
		"sum alloc_space memprof.kernel=matmul 5000\n",
		"sum alloc_space memprof.kernel=relu 1200\n",
		"sum alloc_space memprof.owner=libxnnpack.so 5000\n",
		"sum alloc_space memprof.owner=(unknown) 1264\n",
		"sum alloc_space memprof.phase=inference 6200\n",
		/* Zero values are left out: two sites hold nothing in use. */
		"profile inuse_objects/count samples=3\n",
		"profile inuse_space/bytes samples=3\n",
		"sum inuse_space memprof.kernel=matmul 1000\n",
		"sum inuse_space memprof.kernel=relu 200\n",
	};
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
		cr_assert_not_null(strstr(out, want[i]), "no '%s' in:\n%s", want[i], out);
}
