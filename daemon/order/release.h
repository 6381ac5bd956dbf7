/* SPDX-License-Identifier: MIT */
/*
 * The session's release watermark on the in-process path (docs/RING.md
 * "Consumer: how far the rings have been read"): what may go from the
 * merge and the ring queue to the correlator after a drain.
 */
#ifndef MP_SESSION_RELEASE_H
#define MP_SESSION_RELEASE_H

#include <stdint.h>

/*
 * mp_release_watermark() (correlate/ringq.h), whose lag floor (@t0 - @lag)
 * lifts the BPF ring buffer's bound (an event in flight longer than the
 * lag), but never past @rings_done, the marker rings' bound
 * (mp_consumer_complete_ns()), less the margin: a ring record not read yet
 * may be older than any floor (the daemon off the CPU for longer, a drain
 * cut at its batch limit), and a BPF event or another ring's record
 * released past it lands in the wrong kernel. A ring that makes no
 * progress (a hostile writer) is passed by the consumer itself, after its
 * stall time (struct mp_consumer_opts).
 */
uint64_t mp_session_watermark(uint64_t t0, uint64_t lag, uint64_t bpf_done, uint64_t rings_done);

#endif /* MP_SESSION_RELEASE_H */
