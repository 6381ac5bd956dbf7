/* SPDX-License-Identifier: MIT */
/*
 * A collector that speaks HTTP (the Pyroscope push API and legacy
 * /ingest, OTLP profiles, Parca over gRPC-Web), with TLS for https and a
 * header file for auth. libcurl does HTTP and TLS (certificates always
 * verified, against the system store or the URL's CA file); the streamer
 * (stream.c) owns the queue, the backoff and the event loop that drives
 * libcurl's multi handle. This module builds each request and turns each
 * finished transfer into a verdict:
 *
 *   mp_backend_request()  on the pushing thread: the request for a chunk
 *   mp_backend_start()    on the streaming thread: the transfer, added to
 *                         the streamer's multi handle
 *   mp_backend_finish()   the transfer ended: sent, retry, drop, or the
 *                         collector was unreachable
 *   mp_backend_close()    the transfer is abandoned (either way)
 */
#ifndef MP_STREAM_BACKEND_H
#define MP_STREAM_BACKEND_H

#include "curl_dl.h"
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "profile.h"
#include "response.h"
#include "stream.h"
#include "url.h"

/* Bounds of one transfer: connecting (name resolution included), and
 * the whole exchange (the request's deadline: an answer not complete by
 * then drops the chunk, counted). */
#define MP_BACKEND_CONNECT_MS 5000L
#define MP_BACKEND_TRANSFER_MS 30000L

struct mp_backend;

/* The multi handle a streamer drives its HTTP collectors' transfers with
 * (libcurl initialised once). */
int mp_backend_multi_new(CURLM **ret);

/* Parses @url (see url.h); for https with a CA file, checks that it holds
 * a certificate. Returns 0 or a negative errno, logged with the URL. */
int mp_backend_new(const char *url, struct mp_backend **ret);
void mp_backend_free(struct mp_backend *b);

/* What mp_backend_new() would say about @url, without keeping anything:
 * 0, or a negative errno logged with the reason. */
int mp_backend_check(const char *url);

const struct mp_backend_url *mp_backend_url(const struct mp_backend *b);
/* Whether requests embed the gzipped pprof (all but OTLP). */
bool mp_backend_wants_pprof(const struct mp_backend *b);

/* The request for one chunk (its target, headers and body, in a buffer
 * of ours): @pprof is the gzipped pprof of @p when
 * mp_backend_wants_pprof(). Reads the header file (its problems are
 * logged once, without its content). Thread-safe against the streaming
 * thread. */
int mp_backend_request(struct mp_backend *b, const struct mp_chunk_meta *m,
		       const struct mp_profile *p, const uint8_t *pprof, size_t pprof_len,
		       uint8_t **ret, size_t *ret_len);

/* Starts sending @req (from mp_backend_request(), kept alive by the
 * caller until the transfer ends) on @multi, to be complete within
 * @deadline_ms (MP_BACKEND_TRANSFER_MS but in tests); @priv is the
 * transfer's CURLINFO_PRIVATE. */
int mp_backend_start(struct mp_backend *b, CURLM *multi, const uint8_t *req, size_t len,
		     long deadline_ms, void *priv);

/* The transfer ended with @rc. Returns 0 with the verdict in @o
 * (MP_V_SENT, MP_V_DROP, or MP_V_RETRY with the reason), logged here at
 * most once per change of state; or a negative errno when the collector
 * could not be reached at all (for the caller to log). */
int mp_backend_finish(struct mp_backend *b, CURLcode rc, struct mp_outcome *o);
void mp_backend_close(struct mp_backend *b);

#endif /* MP_STREAM_BACKEND_H */
