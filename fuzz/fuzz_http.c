// SPDX-License-Identifier: MIT
/*
 * What a collector sends back, and the collector URLs: the bytes are fed
 * to the HTTP response parser whole and in pieces (the first byte picks
 * the split), every protocol's verdict is taken on what parses (Connect
 * error JSON, OTLP Status and partial success, gRPC-Web trailers), and
 * the bytes are also parsed as a collector URL.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "http.h"
#include "url.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct mp_http_resp r;
	struct mp_backend_url u;
	struct mp_outcome o;
	char url[1100];
	size_t step;
	int k = 0;

	if (!size)
		return 0;
	step = 1 + data[0] % 97;
	mp_http_resp_init(&r);
	for (size_t off = 1; off < size && k == 0; off += step)
		k = mp_http_resp_feed(&r, data + off, size - off < step ? size - off : step);
	if (k == 0)
		k = mp_http_resp_eof(&r);
	if (k == 1) {
		for (int p = MP_BE_INGEST; p <= MP_BE_PARCA; p++)
			mp_http_verdict((enum mp_backend_proto)p, &r, &o);
	}
	if (size - 1 < sizeof(url)) {
		memcpy(url, data + 1, size - 1);
		url[size - 1] = '\0';
		mp_backend_url_parse(url, &u);
	}
	return 0;
}
