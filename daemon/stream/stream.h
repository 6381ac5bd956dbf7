/* SPDX-License-Identifier: MIT */
/*
 * Streaming of profile chunks to collectors, from a dedicated thread:
 *   tcp://HOST:PORT, unix:PATH   varint-length-delimited memprof.Chunk
 *                                messages (proto/memprof.proto)
 *   pyroscope://, otlp://, parca://, http(s)://...
 *                                the profile backends over HTTP(S), one
 *                                request per chunk (backend.h, url.h)
 * Each collector has its own bounded buffer, non-blocking socket and
 * reconnect backoff: a slow or dead collector never blocks the caller or
 * another collector. A chunk that does not fit in a collector's buffer is
 * dropped for that collector and counted; the count travels in the next
 * chunk of the same target that gets into the buffer (Chunk.lost_chunks).
 */
#ifndef MP_STREAM_H
#define MP_STREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "profile.h"

#define MP_STREAM_MAX_COLLECTORS 64
#define MP_STREAM_MAX_URL 512

/* 0 if @url is a collector URL this build can serve; -EINVAL if it is
 * malformed, -EPROTONOSUPPORT for an HTTP backend without the pprof
 * encoder; for https, the trust store or ca= file must load (logged). */
int mp_stream_url_check(const char *url);

struct mp_chunk_meta {
	uint64_t target_id; /* unique per attach in this daemon */
	int32_t pid;
	const char *exe;
	uint64_t sequence; /* per target, from 0, contiguous */
	uint64_t window_begin_ns, window_end_ns; /* CLOCK_MONOTONIC */
	bool final; /* the target's last chunk (detach, exit, shutdown) */
};

struct mp_streamer;

/* @buffer_bytes: per-collector buffer (at least one chunk always fits). */
int mp_streamer_new(uint64_t buffer_bytes, struct mp_streamer **ret);
/* Stops the thread; what is still buffered is discarded (flush first). */
void mp_streamer_free(struct mp_streamer *s);

/* Replaces the set of collectors every target streams to (config). */
int mp_streamer_set_global(struct mp_streamer *s, char *const *urls, size_t n);
void mp_streamer_set_buffer(struct mp_streamer *s, uint64_t buffer_bytes);

/* Queues the chunk @p for the global collectors and @extra (a target's
 * own). Encodes on the calling thread, never blocks on the network.
 * Returns 0, or a negative errno if encoding failed. */
int mp_streamer_push(struct mp_streamer *s, const struct mp_chunk_meta *m,
		     const struct mp_profile *p, char *const *extra, size_t n_extra);

/* Whether a chunk of a target with @n_extra own URLs would go anywhere. */
bool mp_streamer_wanted(struct mp_streamer *s, size_t n_extra);

/* Waits until every buffer is empty or @timeout_ns passed. Returns 0 or
 * -ETIMEDOUT. */
int mp_streamer_flush(struct mp_streamer *s, uint64_t timeout_ns);

/* One line per collector: url, state, queued bytes/chunks, sent, lost. */
void mp_streamer_describe(struct mp_streamer *s, void (*line)(void *ctx, const char *text),
			  void *ctx);

/* Varint helpers of the length-delimited framing (also used by
 * `memprof collect`). mp_varint_decode returns the bytes used, 0 when more
 * input is needed, -EBADMSG past 10 bytes. */
size_t mp_varint_encode(uint64_t v, uint8_t out[10]);
int mp_varint_decode(const uint8_t *buf, size_t len, uint64_t *ret);

#endif /* MP_STREAM_H */
