/* SPDX-License-Identifier: MIT */
/*
 * A collector that speaks HTTP (the Pyroscope push API and legacy
 * /ingest, OTLP profiles, Parca over gRPC-Web), with TLS for https and a
 * header file for auth. The streamer (stream.c) owns the queue, the TCP
 * connection and the backoff; this module builds each request and runs
 * one request/response exchange on a connected socket:
 *
 *   mp_backend_request()  on the pushing thread: the whole HTTP request
 *   mp_backend_step()     on the streaming thread, whenever the socket is
 *                         ready: TLS handshake, send, read the response,
 *                         and the verdict (sent, retry, drop)
 *   mp_backend_close()    the connection ended (either way)
 */
#ifndef MP_STREAM_BACKEND_H
#define MP_STREAM_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "http.h"
#include "profile.h"
#include "stream.h"
#include "url.h"

struct mp_backend;

/* Parses @url (see url.h) and, for https, loads the trust store or its
 * CA file. Returns 0 or a negative errno, logged with the URL. */
int mp_backend_new(const char *url, struct mp_backend **ret);
void mp_backend_free(struct mp_backend *b);

/* What mp_backend_new() would say about @url, without keeping anything:
 * 0, or a negative errno logged with the reason (a CA file that holds no
 * certificate, an empty trust store). */
int mp_backend_check(const char *url);

const struct mp_backend_url *mp_backend_url(const struct mp_backend *b);
/* Whether requests embed the gzipped pprof (all but OTLP). */
bool mp_backend_wants_pprof(const struct mp_backend *b);

/* The whole HTTP request for one chunk: @pprof is the gzipped pprof of
 * @p when mp_backend_wants_pprof(). Reads the header file (its problems
 * are logged once, without its content). Thread-safe against the
 * streaming thread. */
int mp_backend_request(struct mp_backend *b, const struct mp_chunk_meta *m,
		       const struct mp_profile *p, const uint8_t *pprof, size_t pprof_len,
		       uint8_t **ret, size_t *ret_len);

enum mp_step {
	MP_STEP_AGAIN, /* wait for *ret_events on the socket */
	MP_STEP_DONE, /* the exchange ended: see the outcome */
};

/* Advances the exchange of request @req on the connected socket @fd.
 * MP_STEP_DONE fills @o: MP_V_SENT, MP_V_DROP (refused for good), or
 * MP_V_RETRY (@o->why says why; connection errors included). The verdict
 * is logged here, at most once per change of state. */
enum mp_step mp_backend_step(struct mp_backend *b, int fd, const uint8_t *req, size_t len,
			     short *ret_events, struct mp_outcome *o);
void mp_backend_close(struct mp_backend *b);

#endif /* MP_STREAM_BACKEND_H */
