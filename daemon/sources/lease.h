/* SPDX-License-Identifier: MIT */
/*
 * The consumer's lease on a ring (docs/RING.md "A consumer that dies"):
 * while it holds it, libmemprof keeps the ring attached and the
 * interposer on; once the consumer is gone (killed, crashed), the first
 * heap record that finds its ring full gives the ring back, and the target
 * runs as if nothing had attached. The lease is an open-file-description
 * read lock on the ring's memfd, which the kernel drops with the
 * consumer's last reference to the file: no renewal, no clock.
 */
#ifndef MP_SOURCES_LEASE_H
#define MP_SOURCES_LEASE_H

#include <stdbool.h>
#include <stdint.h>

#include "ring_abi.h"

/* Takes the lease on the ring behind @fd, an open file of its own (never
 * the target's: a lock the target's open file holds is invisible to the
 * target). Held by that open file, and so by a mapping of it after @fd is
 * closed, until the last reference goes. 0 or a negative errno (-EAGAIN:
 * the target holds a write lock there itself; the ring is then used
 * without a lease, as by a consumer that knows none). */
int mp_lease_take(int fd);

/* At attach, before the consumer writes anything else into the header:
 * clears attached and the interposer's mode that a consumer gone before
 * left, so that a release libmemprof decided on for that consumer cannot
 * apply to this one. */
void mp_lease_clear(struct mp_ring_hdr *h);

/* The value of attached for a consumer that holds the lease (@leased) or
 * not: MP_ATTACHED_LEASE with the ring's alloc_epoch (read after the
 * consumer set it), or 1. */
uint32_t mp_lease_attached(const struct mp_ring_hdr *h, bool leased);

#endif /* MP_SOURCES_LEASE_H */
