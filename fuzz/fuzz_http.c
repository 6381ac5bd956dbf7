// SPDX-License-Identifier: MIT
/*
 * What a collector sends back, as far as memprofd reads it itself, and
 * the collector URLs. libcurl parses HTTP; the bytes after the first are
 * split here the way its header callback and curl_easy_header() hand a
 * response over (status line, "Name: value" headers, body), and every
 * protocol's verdict is taken on the result (Connect error JSON, OTLP
 * Status and partial success, gRPC-Web trailer frames, Retry-After); a
 * body or headers past the 16 KiB caps must be cut there and always be a
 * drop. The
 * same bytes are also parsed as a collector URL (libcurl's URL API and
 * our settings). The first byte is kept for the corpus format.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "response.h"
#include "url.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void feed_head(struct mp_http_resp *r, const char *head, size_t len)
{
	const char *eol;

	for (const char *l = head; l < head + len; l = eol + 1) {
		char name[128], value[512];
		const char *colon;
		size_t n;

		eol = memchr(l, '\n', (size_t)(head + len - l));
		if (!eol)
			eol = head + len;
		n = (size_t)(eol - l);
		if (n >= 9 && !memcmp(l, "HTTP/", 5)) {
			/* what CURLINFO_RESPONSE_CODE gives */
			r->status = 0;
			for (size_t k = 9; k < n && k < 12 && l[k] >= '0' && l[k] <= '9'; k++)
				r->status = r->status * 10 + (l[k] - '0');
		}
		if (!mp_http_resp_head_bytes(r, n + 1))
			return; /* cut, as backend.c's header callback does */
		if (n >= 5 && !memcmp(l, "HTTP/", 5))
			continue;
		colon = memchr(l, ':', n);
		if (!colon || (size_t)(colon - l) >= sizeof(name) ||
		    n - (size_t)(colon - l) - 1 >= sizeof(value))
			continue;
		memcpy(name, l, (size_t)(colon - l));
		name[colon - l] = '\0';
		memcpy(value, colon + 1, n - (size_t)(colon - l) - 1);
		value[n - (size_t)(colon - l) - 1] = '\0';
		mp_http_resp_header(r, name, value);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct mp_http_resp r;
	struct mp_backend_url u;
	struct mp_outcome o;
	const char *text = (const char *)data + 1, *end;
	char url[1100];
	size_t len;

	if (!size)
		return 0;
	len = size - 1;
	mp_http_resp_init(&r);
	end = memmem(text, len, "\r\n\r\n", 4);
	feed_head(&r, text, end ? (size_t)(end - text) : len);
	if (end)
		mp_http_resp_body(&r, (const uint8_t *)end + 4, len - (size_t)(end + 4 - text));
	if (r.body_len > MP_HTTP_MAX_BODY)
		abort();
	for (int p = MP_BE_INGEST; p <= MP_BE_PARCA; p++) {
		mp_http_verdict((enum mp_backend_proto)p, &r, &o);
		/* Headers or a body past the cap are never an answer,
		 * whatever they say. */
		if ((r.head_truncated || r.body_seen > MP_HTTP_MAX_BODY) &&
		    (o.verdict != MP_V_DROP || o.cause != MP_DROP_OVERSIZED))
			abort();
	}
	if (len < sizeof(url)) {
		memcpy(url, text, len);
		url[len] = '\0';
		mp_backend_url_parse(url, &u);
	}
	return 0;
}
