/* SPDX-License-Identifier: MIT */
/*
 * The collector URLs of the profile backends, one syntax for --stream and
 * the config's `collector =`:
 *
 *   pyroscope[+https]://HOST[:PORT][/PREFIX]   Pyroscope push API (4040)
 *   otlp[+https]://HOST[:PORT][/PREFIX]        OTLP/HTTP profiles (4318)
 *   parca[+https]://HOST[:PORT][/PREFIX]       Parca WriteRaw, gRPC-Web (7070)
 *   http[s]://HOST[:PORT]/PATH                 by PATH: .../push.v1.PusherService/Push,
 *                                              .../v1development/profiles,
 *                                              .../parca.profilestore.v1alpha1.
 *                                              ProfileStoreService/WriteRaw, else
 *                                              Pyroscope's legacy /ingest (the
 *                                              default path)
 *
 * followed by an optional query of settings, percent-encoded:
 *   service_name=NAME   (default: the target's executable name)
 *   label.KEY=VALUE     static label / resource attribute, repeatable
 *   headers=FILE        "Name: value" lines sent with every request
 *                       (auth tokens: never in argv or the logs)
 *   ca=FILE             PEM CA bundle for https instead of the system store
 *
 * Host, port and path go through libcurl's URL API (CURLU); the schemes
 * and the settings are ours. The URL itself is logged; the header file's
 * content never is.
 */
#ifndef MP_STREAM_URL_H
#define MP_STREAM_URL_H

#include <stdbool.h>
#include <stddef.h>

#include "backend_body.h"

enum mp_backend_proto {
	MP_BE_INGEST, /* Pyroscope legacy POST /ingest?name=..&format=pprof */
	MP_BE_PYROSCOPE, /* Pyroscope push API, Connect unary */
	MP_BE_OTLP, /* OTLP/HTTP profiles, v1development */
	MP_BE_PARCA, /* Parca ProfileStoreService/WriteRaw, gRPC-Web */
};

#define MP_BE_PYROSCOPE_PATH "/push.v1.PusherService/Push"
#define MP_BE_OTLP_PATH "/v1development/profiles"
#define MP_BE_PARCA_PATH "/parca.profilestore.v1alpha1.ProfileStoreService/WriteRaw"

struct mp_backend_url {
	enum mp_backend_proto proto;
	bool tls;
	char host[256], port[8], path[256];
	char service[MP_BE_MAX_TEXT]; /* "" = the target's executable name */
	size_t n_labels;
	char label_key[MP_BE_MAX_LABELS][64];
	char label_value[MP_BE_MAX_LABELS][MP_BE_MAX_TEXT];
	char headers[256], ca[256]; /* file paths, "" if none */
};

/* Whether @url has one of the schemes above (http, https, pyroscope...). */
bool mp_backend_url_is(const char *url);

/* Parses @url into @ret. Returns 0 or -EINVAL. Pure: opens no file. */
int mp_backend_url_parse(const char *url, struct mp_backend_url *ret);

/* The address of a tcp:// or unix: stream collector. */
struct mp_stream_addr {
	bool is_unix;
	char host[256], port[8]; /* tcp://HOST:PORT (IPv6 in brackets) */
	char path[256]; /* unix:/PATH */
};

/* Parses tcp://HOST:PORT or unix:/PATH into @ret: 0 or -EINVAL. */
int mp_stream_addr_parse(const char *url, struct mp_stream_addr *ret);

#endif /* MP_STREAM_URL_H */
