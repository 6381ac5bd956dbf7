/* SPDX-License-Identifier: MIT */
/*
 * The collector's side of a tcp:// or unix: stream (docs/SERVICE.md,
 * "Streaming"): a memprof.StreamHello once, right after the connection is
 * accepted, then a memprof.ChunkAck for each chunk the collector has
 * handled, each message preceded by its length as a varint. The daemon
 * reads these from the network, so the reader bounds every message; the
 * encoders serve collectors (`memprof collect`).
 */
#ifndef MP_STREAM_ACK_H
#define MP_STREAM_ACK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The protocol version a collector that acknowledges chunks announces. */
#define MP_STREAM_ACK_VERSION 1
/* Longest message accepted (a ChunkAck takes at most 22 bytes; room for
 * fields a later version may add); a frame holds its length too. */
#define MP_ACK_MAX_MSG 64
#define MP_ACK_MAX_FRAME (MP_ACK_MAX_MSG + 10)

enum mp_ack_kind { MP_ACK_HELLO = 1, MP_ACK_CHUNK = 2 };

struct mp_ack_msg {
	enum mp_ack_kind kind;
	uint32_t version; /* MP_ACK_HELLO */
	uint64_t target_id, sequence; /* MP_ACK_CHUNK */
};

/* Bytes received from one connection and not yet decoded. */
struct mp_ack_reader {
	uint8_t buf[MP_ACK_MAX_FRAME];
	size_t len;
	bool hello; /* the hello came: every later message is a ChunkAck */
};

void mp_ack_reader_init(struct mp_ack_reader *r);
/* Where to receive into and how much fits (never 0: a full buffer holds
 * a complete message, which mp_ack_next() takes out first). */
uint8_t *mp_ack_space(struct mp_ack_reader *r, size_t *ret_len);
void mp_ack_received(struct mp_ack_reader *r, size_t n);
/* Takes the next message out: 1 (in *ret), 0 when it is incomplete,
 * -EBADMSG when it is malformed or longer than MP_ACK_MAX_MSG, -EPROTO
 * for a hello of version 0. The first message is the hello. */
int mp_ack_next(struct mp_ack_reader *r, struct mp_ack_msg *ret);

/* Framed messages for a collector to send: the length written to @out. */
size_t mp_ack_encode_hello(uint8_t out[MP_ACK_MAX_FRAME]);
size_t mp_ack_encode(uint64_t target_id, uint64_t sequence, uint8_t out[MP_ACK_MAX_FRAME]);

#endif /* MP_STREAM_ACK_H */
