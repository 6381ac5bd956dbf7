// SPDX-License-Identifier: MIT
#include <errno.h>
#include <string.h>

#include "ack.h"
#include "memprof.pb-c.h"
#include "varint.h"

void mp_ack_reader_init(struct mp_ack_reader *r)
{
	memset(r, 0, sizeof(*r));
}

uint8_t *mp_ack_space(struct mp_ack_reader *r, size_t *ret_len)
{
	*ret_len = sizeof(r->buf) - r->len;
	return r->buf + r->len;
}

void mp_ack_received(struct mp_ack_reader *r, size_t n)
{
	if (n > sizeof(r->buf) - r->len)
		n = sizeof(r->buf) - r->len;
	r->len += n;
}

static void consume(struct mp_ack_reader *r, size_t n)
{
	memmove(r->buf, r->buf + n, r->len - n);
	r->len -= n;
}

int mp_ack_next(struct mp_ack_reader *r, struct mp_ack_msg *ret)
{
	uint64_t n;
	int h = mp_varint_decode(r->buf, r->len, &n);

	if (h < 0 || (h > 0 && n > MP_ACK_MAX_MSG))
		return -EBADMSG;
	if (h == 0) {
		/* Ten bytes without the end of a varint were refused above. */
		return 0;
	}
	if (r->len - (size_t)h < n)
		return 0;
	/* protobuf-c checks every field against the bytes it is given. */
	if (!r->hello) {
		Memprof__StreamHello *m =
			memprof__stream_hello__unpack(NULL, (size_t)n, r->buf + h);

		if (!m)
			return -EBADMSG;
		*ret = (struct mp_ack_msg){ .kind = MP_ACK_HELLO, .version = m->version };
		memprof__stream_hello__free_unpacked(m, NULL);
		if (!ret->version)
			return -EPROTO;
		r->hello = true;
	} else {
		Memprof__ChunkAck *m = memprof__chunk_ack__unpack(NULL, (size_t)n, r->buf + h);

		if (!m)
			return -EBADMSG;
		*ret = (struct mp_ack_msg){ .kind = MP_ACK_CHUNK,
					    .target_id = m->target_id,
					    .sequence = m->sequence };
		memprof__chunk_ack__free_unpacked(m, NULL);
	}
	consume(r, (size_t)h + (size_t)n);
	return 1;
}

size_t mp_ack_encode_hello(uint8_t out[MP_ACK_MAX_FRAME])
{
	Memprof__StreamHello m = MEMPROF__STREAM_HELLO__INIT;
	size_t len, h;

	m.version = MP_STREAM_ACK_VERSION;
	len = memprof__stream_hello__get_packed_size(&m);
	h = mp_varint_encode(len, out);
	return h + memprof__stream_hello__pack(&m, out + h);
}

size_t mp_ack_encode(uint64_t target_id, uint64_t sequence, uint8_t out[MP_ACK_MAX_FRAME])
{
	Memprof__ChunkAck m = MEMPROF__CHUNK_ACK__INIT;
	size_t len, h;

	m.target_id = target_id;
	m.sequence = sequence;
	len = memprof__chunk_ack__get_packed_size(&m);
	h = mp_varint_encode(len, out);
	return h + memprof__chunk_ack__pack(&m, out + h);
}
