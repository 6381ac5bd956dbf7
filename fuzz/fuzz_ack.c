// SPDX-License-Identifier: MIT
/*
 * What a collector sends back on a tcp:// or unix: stream (ack.h): the
 * bytes go to the reader in pieces (the first byte picks their size), as
 * recv() would hand them over, until a message is malformed. Every message
 * taken out must re-encode to one the reader takes back the same.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ack.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void roundtrip(const struct mp_ack_msg *m)
{
	struct mp_ack_reader r;
	struct mp_ack_msg back;
	uint8_t frame[MP_ACK_MAX_FRAME];
	size_t n, room;
	uint8_t *to;

	if (m->kind != MP_ACK_CHUNK)
		return;
	mp_ack_reader_init(&r);
	r.hello = true;
	n = mp_ack_encode(m->target_id, m->sequence, frame);
	to = mp_ack_space(&r, &room);
	if (n > room)
		abort();
	memcpy(to, frame, n);
	mp_ack_received(&r, n);
	if (mp_ack_next(&r, &back) != 1 || back.target_id != m->target_id ||
	    back.sequence != m->sequence || r.len)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct mp_ack_reader r;
	struct mp_ack_msg m;
	size_t step, off = 1;
	int k = 0;

	if (!size)
		return 0;
	step = 1 + data[0] % 37;
	mp_ack_reader_init(&r);
	while (off < size && k >= 0) {
		size_t room, n;
		uint8_t *to = mp_ack_space(&r, &room);

		if (!room)
			abort(); /* a full buffer always holds a whole message */
		n = size - off < step ? size - off : step;
		if (n > room)
			n = room;
		memcpy(to, data + off, n);
		mp_ack_received(&r, n);
		off += n;
		while ((k = mp_ack_next(&r, &m)) == 1)
			roundtrip(&m);
		if (k < 0 && k != -EBADMSG && k != -EPROTO)
			abort();
	}
	return 0;
}
