/* SPDX-License-Identifier: MIT */
/* The consumer's lease on a ring: lease.h, docs/RING.md "A consumer that
 * dies". */
#include <errno.h>
#include <fcntl.h>

#include "lease.h"

#define LOAD(p, mo) __atomic_load_n((p), __ATOMIC_##mo)
#define STORE(p, v, mo) __atomic_store_n((p), (v), __ATOMIC_##mo)

int mp_lease_take(int fd)
{
	struct flock fl = {
		.l_type = F_RDLCK,
		.l_whence = SEEK_SET,
		.l_start = MP_RING_LEASE_BYTE,
		.l_len = 1,
	};

	return fcntl(fd, F_OFD_SETLK, &fl) < 0 ? -errno : 0;
}

void mp_lease_clear(struct mp_ring_hdr *h)
{
	/* released: the consumer's own writes come after (release stores) */
	STORE(&h->attach_word, 0, SEQ_CST);
}

uint32_t mp_lease_attached(const struct mp_ring_hdr *h, bool leased)
{
	/* alloc_epoch grows with every consumer that turns the interposer
	 * on, so the number differs from the previous consumer's whenever a
	 * release could apply (the interposer on) */
	if (!leased)
		return 1;
	return MP_ATTACHED_LEASE | ((uint32_t)LOAD(&h->alloc_epoch, RELAXED) & ~MP_ATTACHED_LEASE);
}
