// SPDX-License-Identifier: MIT
#include <errno.h>

#include "varint.h"

size_t mp_varint_encode(uint64_t v, uint8_t out[10])
{
	size_t n = 0;

	do {
		out[n] = (uint8_t)(v & 0x7f);
		v >>= 7;
		if (v)
			out[n] |= 0x80;
		n++;
	} while (v);
	return n;
}

int mp_varint_decode(const uint8_t *buf, size_t len, uint64_t *ret)
{
	uint64_t v = 0;

	for (size_t i = 0; i < 10; i++) {
		if (i >= len)
			return 0;
		if (i == 9 && buf[i] > 1)
			return -EBADMSG;
		v |= (uint64_t)(buf[i] & 0x7f) << (7 * i);
		if (!(buf[i] & 0x80)) {
			*ret = v;
			return (int)i + 1;
		}
	}
	return -EBADMSG;
}
