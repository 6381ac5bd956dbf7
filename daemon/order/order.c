// SPDX-License-Identifier: MIT
#include "order.h"
#include "order_inline.h"

#include <errno.h>
#include <stdlib.h>

/* The merge's kind of the attach snapshot's markers: they go to the sink
 * as ring records. */
#define KIND_MARKER UINT32_MAX
/* Ring records read between two releases during a read: the held ones
 * stay few and in cache. */
#define RELEASE_EVERY 4096

/* What a snapshot marker carries through the merge. */
struct marker_item {
	struct mp_record rec;
	void *ref;
};

uint64_t mp_order_watermark(uint64_t t0, uint64_t lag, uint64_t bpf_done, uint64_t rings_done)
{
	uint64_t floor = t0 > lag ? t0 - lag : 0;
	uint64_t done = bpf_done < rings_done ? bpf_done : rings_done;
	uint64_t rings = rings_done > MP_RELEASE_MARGIN_NS ? rings_done - MP_RELEASE_MARGIN_NS : 0;

	done = done > MP_RELEASE_MARGIN_NS ? done - MP_RELEASE_MARGIN_NS : 0;
	if (done > t0)
		done = t0;
	if (done < floor)
		done = floor;
	return done < rings ? done : rings;
}

int mp_order_new(const struct mp_order_opts *opts, const struct mp_order_sink *sink,
		 struct mp_order **ret)
{
	struct mp_order *o = calloc(1, sizeof(*o));
	int r;

	if (!o)
		return -ENOMEM;
	o->sink = *sink;
	o->lag = opts->lag_ns;
	o->fast = opts->fast_release;
	o->now_ring = UINT32_MAX;
	r = mp_merge_new(4096, &o->merge);
	if (r == 0)
		r = mp_ringq_new(1, &o->rq);
	if (r < 0) {
		mp_order_free(o);
		return r;
	}
	if (sink->prefetch)
		mp_ringq_set_prefetch(o->rq, sink->prefetch, sink->ctx);
	*ret = o;
	return 0;
}

void mp_order_free(struct mp_order *o)
{
	if (!o)
		return;
	mp_merge_free(o->merge);
	mp_ringq_free(o->rq);
	free(o);
}

static int merge_push(struct mp_order *o, uint32_t kind, uint64_t ts, const void *payload,
		      size_t len)
{
	int r;

	mp_merge_note_released(o->merge, o->released_ts);
	r = mp_merge_push(o->merge, kind, ts, payload, len);
	if (r == 0)
		o->items++;
	return r;
}

static uint64_t merge_next_ts(const struct mp_order *o)
{
	return o->items ? mp_merge_next_ts(o->merge) : UINT64_MAX;
}

int mp_order_push(struct mp_order *o, uint32_t kind, uint64_t ts, const void *payload, size_t len)
{
	if (kind == KIND_MARKER)
		return -EINVAL;
	return merge_push(o, kind, ts, payload, len);
}

void mp_order_read_begin(struct mp_order *o, uint64_t t0, bool bpf_drained)
{
	if (bpf_drained)
		o->bpf_done_ns = t0;
	o->read_ns = t0;
	o->now_ring = UINT32_MAX;
}

void mp_order_read_end(struct mp_order *o)
{
	o->read_ns = 0;
}

/* The ring records up to @wm that are older than the merge's next item. */
static int release_rings(struct mp_order *o, uint64_t wm)
{
	int64_t n;

	if (!o->held)
		return 0;
	n = mp_ringq_release(o->rq, wm, merge_next_ts(o), o->sink.ring, o->sink.ctx);
	o->held = mp_ringq_pending(o->rq);
	if (n < 0)
		return (int)n;
	if (n)
		mp_merge_note_released(o->merge, mp_ringq_released_ts(o->rq));
	return 0;
}

static int deliver(struct mp_order *o, const struct mp_merge_item *it)
{
	const struct marker_item *mi;
	struct mp_ringq_rec e;

	if (it->kind != KIND_MARKER)
		return o->sink.item(o->sink.ctx, it);
	mi = (const struct marker_item *)it->payload.bytes;
	e = (struct mp_ringq_rec){ .ts = mi->rec.ts_ns,
				   .tid = mi->rec.tid,
				   .type = (uint8_t)mi->rec.type,
				   .flags = (uint8_t)mi->rec.flags };
	return o->sink.ring(o->sink.ctx, &e, &mi->rec, mi->ref);
}

/* Everything up to @wm in timestamp order: the ring records older than
 * the merge's next item, then that item, and again. */
int mp_order_release_to(struct mp_order *o, uint64_t wm)
{
	const struct mp_merge_item *it;
	int r;

	for (;;) {
		r = release_rings(o, wm);
		if (r < 0)
			return r;
		/* nothing more released: the sink may finish what it holds */
		mp_merge_note_released(o->merge, o->released_ts);
		if (!o->items || mp_merge_pop(o->merge, wm, &it) != 1)
			return o->sink.idle ? o->sink.idle(o->sink.ctx) : 0;
		o->items--;
		r = deliver(o, it);
		if (r < 0)
			return r;
	}
}

int mp_order_release(struct mp_order *o, uint64_t t0, const struct mp_consumer *c)
{
	if (!o->fast || !c)
		return mp_order_release_to(o, t0 > o->lag ? t0 - o->lag : 0);
	return mp_order_release_to(
		o, mp_order_watermark(t0, o->lag, o->bpf_done_ns, mp_consumer_complete_ns(c)));
}

/* While a ring is read, every RELEASE_EVERY records held: the ring
 * records the watermark already passes. Ring records only: the merge's
 * items (an exec retires the ring being read) wait for the end of the
 * read. */
static int release_reading(struct mp_order *o, const struct mp_consumer *c)
{
	if (!o->fast || !o->read_ns || ++o->unreleased < RELEASE_EVERY)
		return 0;
	o->unreleased = 0;
	return release_rings(o, mp_order_watermark(o->read_ns, o->lag, o->bpf_done_ns,
						   mp_consumer_complete_ns(c)));
}

/* Whether record @rec of ring @ring, just read, can go to the sink at
 * once: nothing older is held, and the watermark against every other ring
 * and the BPF ring buffer is past it (in a steady drain, all but the last
 * margin's worth: the FIFOs then only hold those). */
static bool release_now(struct mp_order *o, const struct mp_consumer *c, uint32_t ring,
			const struct mp_record *rec)
{
	if (!o->fast || !o->read_ns)
		return false;
	if (ring != o->now_ring) {
		o->now_ring = ring;
		o->now_wm = mp_order_watermark(o->read_ns, o->lag, o->bpf_done_ns,
					       mp_consumer_complete_others_ns(c));
		/* What this ring left held at the last read (its last
		 * margin's worth) goes first, against the same watermark,
		 * when no other ring holds records. */
		if (mp_ringq_sole_ring(o->rq) == ring)
			(void)release_rings(o, o->now_wm);
	}
	if (o->held)
		return false;
	return rec->ts_ns <= o->now_wm && rec->ts_ns < merge_next_ts(o);
}

int mp_order_ring(struct mp_order *o, const struct mp_consumer *c, uint32_t ring,
		  const struct mp_record *rec, uint32_t stack, void *ref)
{
	bool heap = rec->type >= MP_REC_ALLOC && rec->type <= MP_REC_REALLOC;
	int r;

	if (ring == MP_CONSUMER_RING_SYNTH) {
		struct marker_item mi = { .rec = *rec, .ref = ref };

		r = merge_push(o, KIND_MARKER, rec->ts_ns, &mi, sizeof(mi));
		return r < 0 ? r : 1;
	}
	if (release_now(o, c, ring, rec)) {
		struct mp_ringq_rec e = { .ts = rec->ts_ns };

		if (rec->ts_ns > o->released_ts)
			o->released_ts = rec->ts_ns;
		if (!heap)
			return o->sink.ring(o->sink.ctx, &e, rec, NULL);
		mp_ringq_heap_rec(rec, stack, &e);
		return o->sink.ring(o->sink.ctx, &e, NULL, NULL);
	}
	r = mp_ringq_push(o->rq, ring, rec, stack, ref);
	if (r < 0)
		return r == -E2BIG ? -EBADMSG : r;
	o->held++;
	if (heap)
		return release_reading(o, c);
	return 1;
}

uint64_t mp_order_held(const struct mp_order *o)
{
	return o->held;
}
