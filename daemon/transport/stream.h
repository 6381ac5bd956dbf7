/* SPDX-License-Identifier: MIT */
/*
 * Streaming of profile chunks to collectors, from a dedicated thread:
 *   tcp://HOST:PORT, unix:PATH   varint-length-delimited memprof.Chunk
 *                                messages (proto/memprof.proto)
 *   pyroscope://, otlp://, parca://, http(s)://...
 *                                the profile backends over HTTP(S), one
 *                                request per chunk over libcurl's multi
 *                                interface (backend.h, url.h)
 * Each collector has its own bounded buffer, non-blocking socket and
 * reconnect backoff: a slow or dead collector never blocks the caller or
 * another collector. A chunk that does not fit in a collector's buffer is
 * dropped for that collector and counted; the count travels in the next
 * chunk of the same target that gets into the buffer (Chunk.lost_chunks).
 * On tcp:// and unix: streams the collector acknowledges each chunk it
 * has handled (ack.h); a chunk is held, within the same buffer, until it
 * is, and one not acknowledged when the connection ends is sent again on
 * the next one (docs/SERVICE.md, "Acknowledgements").
 *
 * Limits (docs/SERVICE.md, "Streaming limits"): a target's own URLs are
 * acquired and released, and a collector slot nobody holds any more drains
 * (at most 5 s) and goes, its undelivered chunks counted lost; a uid holds
 * at most a configured number of distinct per-target collectors; the
 * queues of all collectors together hold at most a configured total. Host
 * names resolve in a thread of their own, with a 5 s timeout, never under
 * the streamer's lock.
 */
#ifndef MP_STREAM_H
#define MP_STREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "profile.h"
#include "varint.h"

#define MP_STREAM_MAX_COLLECTORS 64
/* Slots per-target collectors leave to the configured ones. */
#define MP_STREAM_GLOBAL_SLOTS 16
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
/* At most @per_uid distinct per-target collectors held by one uid other
 * than root (0: no limit), and @total_bytes queued in all collectors
 * together (0: no limit; a chunk beyond it is dropped and counted). */
void mp_streamer_set_limits(struct mp_streamer *s, unsigned per_uid, uint64_t total_bytes);

/* A target's own URL, held by a target of @uid until released: -ENOSPC
 * when every per-target slot is taken, -EDQUOT beyond the uid's limit,
 * -EINVAL/-EPROTONOSUPPORT as mp_stream_url_check(). */
int mp_streamer_acquire(struct mp_streamer *s, const char *url, uint32_t uid);
/* The last release lets the collector deliver what it holds (at most 5 s),
 * then frees its slot; what it could not deliver is logged and counted. */
void mp_streamer_release(struct mp_streamer *s, const char *url, uint32_t uid);

/* Chunks of @target_id not delivered to some collector so far: dropped
 * (buffer full, released, shutdown), and with @with_queued those still
 * queued (after a flush that timed out: never to be delivered). */
uint64_t mp_streamer_target_lost(struct mp_streamer *s, uint64_t target_id, bool with_queued);

/* Collector slots in use (per-target ones in *ret_target), and the bytes
 * queued in all of them: for status and tests. */
size_t mp_streamer_slots(struct mp_streamer *s, size_t *ret_target);
uint64_t mp_streamer_queued_total(struct mp_streamer *s);

/* The deadline of each HTTP request (MP_BACKEND_TRANSFER_MS unless
 * replaced: a test seam; <= 0 restores it). */
void mp_streamer_set_http_deadline(struct mp_streamer *s, long deadline_ms);

/* Name resolution, getaddrinfo() unless replaced (a test seam). */
struct addrinfo;
typedef int (*mp_stream_resolver_fn)(const char *host, const char *port,
				     const struct addrinfo *hints, struct addrinfo **ret);
void mp_streamer_set_resolver(struct mp_streamer *s, mp_stream_resolver_fn fn);

/* Queues the chunk @p for the global collectors and @extra (a target's
 * own, acquired; others are ignored). Encodes on the calling thread, never
 * blocks on the network. Returns 0, or a negative errno if encoding
 * failed. */
int mp_streamer_push(struct mp_streamer *s, const struct mp_chunk_meta *m,
		     const struct mp_profile *p, char *const *extra, size_t n_extra);

/* Same, with @p already encoded as a bare memprof.Profile in @msg (the
 * caller wrote it to a file too): the profile is not encoded twice. */
int mp_streamer_push_encoded(struct mp_streamer *s, const struct mp_chunk_meta *m,
			     const struct mp_profile *p, const uint8_t *msg, size_t msg_len,
			     char *const *extra, size_t n_extra);

/* Whether a chunk of a target with @n_extra own URLs would go anywhere. */
bool mp_streamer_wanted(struct mp_streamer *s, size_t n_extra);

/* Waits until every buffer is empty (on tcp:// and unix: streams: every
 * chunk acknowledged) or @timeout_ns passed. Returns 0 or -ETIMEDOUT. */
int mp_streamer_flush(struct mp_streamer *s, uint64_t timeout_ns);

/* One line per collector: url, state, queued bytes/chunks, sent, lost,
 * refused, and (lost_by=) the reasons of what was lost. */
void mp_streamer_describe(struct mp_streamer *s, void (*line)(void *ctx, const char *text),
			  void *ctx);

#endif /* MP_STREAM_H */
