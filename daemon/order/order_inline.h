/* SPDX-License-Identifier: MIT */
/*
 * The ordering stage's per-record path, inlined where the rings are read:
 * the in-process path puts tens of millions of records a second through
 * it, and a record that goes straight to the sink then costs no call but
 * the consumer's. For the reader's callback and the stage itself only.
 */
#ifndef MP_ORDER_INLINE_H
#define MP_ORDER_INLINE_H

#include "order.h"

struct mp_order {
	struct mp_merge *merge;
	/* ring records (all but the attach snapshot's): one FIFO per ring */
	struct mp_ringq *rq;
	struct mp_order_sink sink;
	uint64_t lag;
	bool fast;
	/* the clock before the last drain that emptied the BPF ring; before
	 * the current read (0: not reading) */
	uint64_t bpf_done_ns, read_ns;
	uint32_t unreleased; /* ring records held since the last release */
	/* the ring being read and the watermark against the other sources
	 * (UINT32_MAX: none yet) */
	uint32_t now_ring;
	uint64_t now_wm;
	/* Kept here for the per-record path, which makes no call but the
	 * sink's: the ring records held, the heap's items, and the newest
	 * ring record released as it was read (told to the heap before it is
	 * pushed to or popped: what it counts as late). */
	uint64_t held, items, released_ts;
};

/*
 * mp_order_ring() with its commonest case in the caller: a record of the
 * ring being read, with nothing held and nothing in the heap, that the
 * watermark against the other sources passes, goes to @sink_ring, which
 * must be the sink's ring callback (called directly, it can be inlined
 * too). Anything else goes through mp_order_ring().
 */
static inline __attribute__((always_inline)) int
mp_order_ring_inline(struct mp_order *o, const struct mp_consumer *c, uint32_t ring,
		     const struct mp_record *rec, uint32_t stack, void *ref,
		     int (*sink_ring)(void *ctx, const struct mp_ringq_rec *rec,
				      const struct mp_record *marker, void *ref))
{
	struct mp_ringq_rec e = { .ts = rec->ts_ns };

	if (ring == MP_CONSUMER_RING_SYNTH || ring != o->now_ring || !o->fast || !o->read_ns ||
	    o->held || o->items || rec->ts_ns > o->now_wm)
		return mp_order_ring(o, c, ring, rec, stack, ref);
	if (rec->ts_ns > o->released_ts)
		o->released_ts = rec->ts_ns;
	if (rec->type < MP_REC_ALLOC || rec->type > MP_REC_REALLOC)
		return sink_ring(o->sink.ctx, &e, rec, NULL);
	mp_ringq_heap_rec(rec, stack, &e);
	return sink_ring(o->sink.ctx, &e, NULL, NULL);
}

#endif /* MP_ORDER_INLINE_H */
