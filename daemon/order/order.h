/* SPDX-License-Identifier: MIT */
/*
 * The ordering stage: every source's output (marker-ring records as they
 * are read, BPF events, RSS samples) in, one timestamp order out, to one
 * sink set at creation.
 *
 * Two stores, one release: ring records wait in per-ring FIFOs
 * (ringq.h: one thread's ring is already in order, 56-byte copies), the
 * rest in a min-heap of 160-byte payloads (merge.h), and a release takes
 * from both in timestamp order, up to one watermark
 * (mp_order_watermark(), docs/RING.md "Consumer: how far the rings have
 * been read"). A ring record that nothing older can precede anymore goes
 * to the sink as it is read, without being held at all.
 *
 * Steady state allocates nothing.
 */
#ifndef MP_ORDER_H
#define MP_ORDER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "consumer.h"
#include "merge.h"
#include "ringq.h"

/*
 * The release watermark: everything stamped at or before it may go to
 * the sink. @t0 is the clock read before the drains, @lag the floor,
 * @bpf_done the @t0 of the last drain that emptied the BPF ring buffer
 * with no reservation in flight (0: none yet; the eBPF programs stamp an
 * event after reserving it), @rings_done mp_consumer_complete_ns()
 * (UINT64_MAX: no ring). The earlier of the two bounds less
 * MP_RELEASE_MARGIN_NS (the clocks' disagreement: TSC conversion,
 * out-of-order reads of the clock, stores not yet visible), capped at
 * @t0. The floor lifts the BPF bound (an event in flight longer than the
 * lag is taken to be later), never the rings' bound: a ring record not
 * read yet may be older than any floor (the daemon off the CPU, a drain
 * cut at its batch limit), and a BPF event or another ring's record
 * released past it lands in the wrong kernel. A ring stuck at a record it
 * cannot take (a hostile writer) is passed by the consumer itself, after
 * its stall time (struct mp_consumer_opts).
 */
#define MP_RELEASE_MARGIN_NS (50 * 1000ull)
uint64_t mp_order_watermark(uint64_t t0, uint64_t lag, uint64_t bpf_done, uint64_t rings_done);

/* Where released items go, oldest first. Each callback's negative return
 * stops the release and is returned. */
struct mp_order_sink {
	void *ctx;
	/* A ring record: a heap record (@marker NULL), or a marker with the
	 * record itself and the @ref it was pushed with (NULL when it went
	 * out as it was read). */
	int (*ring)(void *ctx, const struct mp_ringq_rec *rec, const struct mp_record *marker,
		    void *ref);
	/* Any other item (mp_order_push()). */
	int (*item)(void *ctx, const struct mp_merge_item *it);
	/* Nothing more is released for now (may be NULL). */
	int (*idle)(void *ctx);
	/* A held heap record released soon (may be NULL): mp_ringq_pf. */
	void (*prefetch)(void *ctx, const struct mp_ringq_rec *rec);
};

struct mp_order_opts {
	uint64_t lag_ns; /* the watermark's floor behind the clock */
	/* Release against how far the sources have been read
	 * (mp_order_watermark()), not the lag alone: only when every BPF
	 * event is stamped after its reservation. */
	bool fast_release;
};

struct mp_order;

int mp_order_new(const struct mp_order_opts *opts, const struct mp_order_sink *sink,
		 struct mp_order **ret);
void mp_order_free(struct mp_order *o);

/* Item @kind (the caller's, not UINT32_MAX) stamped @ts: @len bytes of
 * @payload are copied (at most MP_MERGE_PAYLOAD_MAX). */
int mp_order_push(struct mp_order *o, uint32_t kind, uint64_t ts, const void *payload, size_t len);

/* A read of the sources begins at clock @t0, the BPF ring buffer found
 * empty with nothing in flight when @bpf_drained. Until mp_order_read_end()
 * ring records may go to the sink while they are read. */
void mp_order_read_begin(struct mp_order *o, uint64_t t0, bool bpf_drained);
void mp_order_read_end(struct mp_order *o);

/*
 * Record @rec of ring @ring of reader @c (MP_CONSUMER_RING_SYNTH: the
 * attach snapshot's, whose timestamps go back to when its kernels began),
 * with @stack (a heap record's stack id). Goes to the sink at once when
 * nothing older is held and the watermark against every other source is
 * past it, else is held. @ref comes back with a marker (the owner of its
 * name). Returns 1 when a marker was held (@ref is referenced until it is
 * released), 0 otherwise, -EBADMSG for a ring index out of bounds,
 * -ENOMEM, or the sink's error.
 */
int mp_order_ring(struct mp_order *o, const struct mp_consumer *c, uint32_t ring,
		  const struct mp_record *rec, uint32_t stack, void *ref);

/* Releases what the watermark at @t0 passes (@c: the rings' reader, NULL
 * when none is open: the lag alone, as the records of the kernels open
 * when a ring opens go back in time). */
int mp_order_release(struct mp_order *o, uint64_t t0, const struct mp_consumer *c);
/* Releases everything stamped up to @wm (UINT64_MAX: everything held). */
int mp_order_release_to(struct mp_order *o, uint64_t wm);

/* Ring records held. */
uint64_t mp_order_held(const struct mp_order *o);

#endif /* MP_ORDER_H */
