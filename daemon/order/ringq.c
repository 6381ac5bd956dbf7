// SPDX-License-Identifier: MIT
#include "ringq.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ring_abi.h"

/* One ring's held records: a power-of-two circular buffer. */
struct queue {
	struct mp_ringq_rec *v;
	uint32_t mask; /* capacity - 1; capacity 0: v is NULL */
	uint32_t head, n;
};

struct marker {
	struct mp_record rec;
	void *ref;
};

struct mp_ringq {
	struct queue *q;
	uint32_t nq;
	/* rings holding records, a min-heap on their first record's ts */
	uint32_t *heap;
	uint32_t nheap;
	struct marker *markers;
	uint32_t *mfree; /* unused marker indices */
	uint32_t nmfree, mcap;
	uint64_t pending, released_ts;
	mp_ringq_pf pf; /* mp_ringq_set_prefetch() */
	void *pf_ctx;
};

/* How far ahead of its release a record is shown to the prefetch. */
#define PF_AHEAD 8u

void mp_ringq_set_prefetch(struct mp_ringq *q, mp_ringq_pf pf, void *ctx)
{
	q->pf = pf;
	q->pf_ctx = ctx;
}

#define Q_MIN_CAP 1024u

static int grow_rings(struct mp_ringq *q, uint32_t n)
{
	struct queue *nqv;
	uint32_t *nheap;

	if (n <= q->nq)
		return 0;
	if (n > MP_RING_MAX_THREADS)
		return -E2BIG;
	nqv = realloc(q->q, n * sizeof(*nqv));
	if (!nqv)
		return -ENOMEM;
	q->q = nqv;
	memset(q->q + q->nq, 0, (n - q->nq) * sizeof(*nqv));
	nheap = realloc(q->heap, n * sizeof(*nheap));
	if (!nheap)
		return -ENOMEM;
	q->heap = nheap;
	q->nq = n;
	return 0;
}

int mp_ringq_new(uint32_t rings, struct mp_ringq **ret)
{
	struct mp_ringq *q = calloc(1, sizeof(*q));
	int r;

	if (!q)
		return -ENOMEM;
	r = grow_rings(q, rings ? rings : 1);
	if (r < 0) {
		mp_ringq_free(q);
		return r;
	}
	*ret = q;
	return 0;
}

void mp_ringq_free(struct mp_ringq *q)
{
	if (!q)
		return;
	for (uint32_t i = 0; i < q->nq; i++)
		free(q->q[i].v);
	free(q->q);
	free(q->heap);
	free(q->markers);
	free(q->mfree);
	free(q);
}

static uint64_t head_ts(const struct mp_ringq *q, uint32_t ring)
{
	const struct queue *qu = &q->q[ring];

	return qu->v[qu->head & qu->mask].ts;
}

static void sift_up(struct mp_ringq *q, uint32_t i)
{
	uint32_t x = q->heap[i];
	uint64_t ts = head_ts(q, x);

	while (i > 0) {
		uint32_t parent = (i - 1) / 2;

		if (head_ts(q, q->heap[parent]) <= ts)
			break;
		q->heap[i] = q->heap[parent];
		i = parent;
	}
	q->heap[i] = x;
}

static void sift_down(struct mp_ringq *q, uint32_t i)
{
	uint32_t x = q->heap[i];
	uint64_t ts = head_ts(q, x);

	for (;;) {
		uint32_t l = 2 * i + 1, best = l;

		if (l >= q->nheap)
			break;
		if (l + 1 < q->nheap && head_ts(q, q->heap[l + 1]) < head_ts(q, q->heap[l]))
			best = l + 1;
		if (head_ts(q, q->heap[best]) >= ts)
			break;
		q->heap[i] = q->heap[best];
		i = best;
	}
	q->heap[i] = x;
}

static int grow_queue(struct queue *qu)
{
	uint32_t cap = qu->v ? (qu->mask + 1) * 2 : Q_MIN_CAP;
	struct mp_ringq_rec *v;

	if (!cap)
		return -ENOMEM;
	v = malloc((size_t)cap * sizeof(*v));
	if (!v)
		return -ENOMEM;
	for (uint32_t i = 0; i < qu->n; i++)
		v[i] = qu->v[(qu->head + i) & qu->mask];
	free(qu->v);
	qu->v = v;
	qu->mask = cap - 1;
	qu->head = 0;
	return 0;
}

static int marker_store(struct mp_ringq *q, const struct mp_record *rec, void *ref, uint32_t *ret)
{
	if (!q->nmfree) {
		uint32_t cap = q->mcap ? q->mcap * 2 : 64;
		struct marker *m;
		uint32_t *f;

		if (cap < q->mcap)
			return -ENOMEM;
		m = realloc(q->markers, (size_t)cap * sizeof(*m));
		if (!m)
			return -ENOMEM;
		q->markers = m;
		f = realloc(q->mfree, (size_t)cap * sizeof(*f));
		if (!f)
			return -ENOMEM;
		q->mfree = f;
		for (uint32_t i = cap; i > q->mcap; i--)
			q->mfree[q->nmfree++] = i - 1;
		q->mcap = cap;
	}
	*ret = q->mfree[--q->nmfree];
	q->markers[*ret] = (struct marker){ .rec = *rec, .ref = ref };
	return 0;
}

int mp_ringq_push(struct mp_ringq *q, uint32_t ring, const struct mp_record *rec, uint32_t stack,
		  void *ref)
{
	struct mp_ringq_rec *e;
	struct queue *qu;
	int r;

	if (ring >= q->nq) {
		uint64_t n = (uint64_t)q->nq * 2;

		r = grow_rings(q, n > ring ? (n > MP_RING_MAX_THREADS ? ring + 1 : (uint32_t)n) :
					     ring + 1);
		if (r < 0)
			return r;
	}
	qu = &q->q[ring];
	if (!qu->v || qu->n > qu->mask) {
		r = grow_queue(qu);
		if (r < 0)
			return r;
	}
	e = &qu->v[(qu->head + qu->n) & qu->mask];
	if (rec->type >= MP_REC_ALLOC && rec->type <= MP_REC_REALLOC) {
		mp_ringq_heap_rec(rec, stack, e);
	} else {
		e->ts = rec->ts_ns;
		e->tid = rec->tid;
		e->type = (uint8_t)rec->type;
		e->flags = (uint8_t)rec->flags;
		e->stack = 0;
		r = marker_store(q, rec, ref, &e->marker);
		if (r < 0)
			return r;
	}
	q->pending++;
	if (qu->n++ == 0) {
		q->heap[q->nheap] = ring;
		sift_up(q, q->nheap++);
	}
	return 0;
}

uint64_t mp_ringq_next_ts(const struct mp_ringq *q)
{
	return q->nheap ? head_ts(q, q->heap[0]) : UINT64_MAX;
}

int64_t mp_ringq_release(struct mp_ringq *q, uint64_t at_most, uint64_t before, mp_ringq_cb cb,
			 void *ctx)
{
	int64_t n = 0;

	while (q->nheap) {
		uint32_t ring = q->heap[0];
		struct queue *qu = &q->q[ring];
		/* The records of the first ring up to the next ring's first
		 * go without touching the heap: one ring's records are in
		 * order, and with a single allocating thread this is all
		 * of them. */
		uint64_t next = UINT64_MAX;
		int r = 0;

		if (q->nheap > 1) {
			next = head_ts(q, q->heap[1]);
			if (q->nheap > 2 && head_ts(q, q->heap[2]) < next)
				next = head_ts(q, q->heap[2]);
		}
		while (qu->n) {
			const struct mp_ringq_rec *e = &qu->v[qu->head & qu->mask];

			if (e->ts > at_most || e->ts >= before || e->ts > next)
				break;
			if (q->pf && qu->n > PF_AHEAD) {
				const struct mp_ringq_rec *a =
					&qu->v[(qu->head + PF_AHEAD) & qu->mask];

				if (a->type >= MP_REC_ALLOC && a->type <= MP_REC_REALLOC)
					q->pf(q->pf_ctx, a);
			}
			qu->head++;
			qu->n--;
			q->pending--;
			if (e->ts > q->released_ts)
				q->released_ts = e->ts;
			n++;
			if (e->type >= MP_REC_ALLOC && e->type <= MP_REC_REALLOC) {
				r = cb(ctx, e, NULL, NULL);
			} else {
				struct marker *m = &q->markers[e->marker];

				r = cb(ctx, e, &m->rec, m->ref);
				q->mfree[q->nmfree++] = e->marker;
			}
			if (r < 0)
				break;
		}
		if (!qu->n) {
			q->heap[0] = q->heap[--q->nheap];
			if (q->nheap)
				sift_down(q, 0);
		} else {
			sift_down(q, 0);
			if (r == 0 && q->heap[0] == ring)
				break; /* the first ring's next record is not due */
		}
		if (r < 0)
			return r;
	}
	return n;
}

uint32_t mp_ringq_sole_ring(const struct mp_ringq *q)
{
	return q->nheap == 1 ? q->heap[0] : UINT32_MAX;
}

uint64_t mp_ringq_pending(const struct mp_ringq *q)
{
	return q->pending;
}

uint64_t mp_ringq_released_ts(const struct mp_ringq *q)
{
	return q->released_ts;
}
