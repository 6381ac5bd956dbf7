/* SPDX-License-Identifier: MIT */
/*
 * Varints of the length-delimited framing of tcp:// and unix: streams, in
 * both directions (stream.h, ack.h; also used by `memprof collect`).
 */
#ifndef MP_STREAM_VARINT_H
#define MP_STREAM_VARINT_H

#include <stddef.h>
#include <stdint.h>

size_t mp_varint_encode(uint64_t v, uint8_t out[10]);
/* The bytes used, 0 when more input is needed, -EBADMSG past 10 bytes. */
int mp_varint_decode(const uint8_t *buf, size_t len, uint64_t *ret);

#endif /* MP_STREAM_VARINT_H */
