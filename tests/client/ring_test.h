/* SPDX-License-Identifier: MIT */
/* Helpers shared by the libclient tests. */
#ifndef RING_TEST_H
#define RING_TEST_H

#include <criterion/criterion.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "consumer.h"

static inline uint64_t test_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Expected record; ts_ns and seq are checked separately. */
struct exp_rec {
	uint32_t type;
	uint32_t flags;
	const char *name;
	uint32_t rank;
	int64_t dims[MP_MAX_RANK];
};

#define REC(t, f, n, ...)                                           \
	{                                                           \
		.type = (t), .flags = (f), .name = (n), __VA_ARGS__ \
	}

/* Asserts every field of @got except ts_ns and seq against @exp. */
static inline void assert_rec(const struct mp_record *got, const struct exp_rec *exp, uint32_t tid,
			      size_t i)
{
	cr_assert_eq(got->type, exp->type, "record %zu: type %s, expected %s", i,
		     mp_record_type_name(got->type), mp_record_type_name(exp->type));
	cr_assert_eq(got->flags, exp->flags, "record %zu: flags %#x, expected %#x", i, got->flags,
		     exp->flags);
	cr_assert_eq(got->tid, tid, "record %zu: tid %u, expected %u", i, got->tid, tid);
	if (exp->name) {
		cr_assert_not_null(got->name, "record %zu: no name", i);
		cr_assert_str_eq(got->name, exp->name, "record %zu: name", i);
	} else {
		cr_assert_null(got->name, "record %zu: name %s, expected none", i, got->name);
	}
	cr_assert_eq(got->rank, exp->rank, "record %zu: rank %u, expected %u", i, got->rank,
		     exp->rank);
	for (uint32_t k = 0; k < MP_MAX_RANK; k++)
		cr_assert_eq(got->dims[k], k < exp->rank ? exp->dims[k] : 0,
			     "record %zu: dims[%u] = %lld", i, k, (long long)got->dims[k]);
}

/*
 * Reading through the daemon's path, mp_consumer_read_rings_at(): it hands
 * each record to a callback, its stack valid only during the call. The
 * helpers keep copies; the stacks they copy are valid until the next read
 * through them.
 */
struct read_buf {
	struct mp_record *recs;
	uint32_t *rings; /* the ring of each record */
	size_t n, max;
	size_t stk_used;
};

static inline unsigned char *read_stacks(size_t *size)
{
	static unsigned char arena[8 * (sizeof(struct mp_rec_stack) + MP_RING_STACK_MAX)]
		__attribute__((aligned(8)));

	*size = sizeof(arena);
	return arena;
}

static inline int read_keep(void *ctx, uint32_t ring, const struct mp_record *rec)
{
	struct read_buf *b = ctx;
	struct mp_record *r;

	cr_assert_lt(b->n, b->max, "more records than asked for");
	r = &b->recs[b->n];
	*r = *rec;
	b->rings[b->n++] = ring;
	if (rec->stack) {
		/* a STACK record's bytes, or a FRAMES record's frames */
		size_t body = rec->stack->frames ? rec->stack->n_frames * sizeof(uint64_t) :
						   rec->stack->len;
		size_t size, need = sizeof(*rec->stack) + body;
		unsigned char *arena = read_stacks(&size);
		struct mp_rec_stack *st = (struct mp_rec_stack *)(arena + b->stk_used);

		cr_assert_leq(need, size - b->stk_used, "the read's stacks do not fit");
		*st = *rec->stack;
		if (body)
			memcpy(st + 1,
			       rec->stack->frames ? (const void *)rec->stack->frames :
						    (const void *)rec->stack->bytes,
			       body);
		if (rec->stack->frames)
			st->frames = (const uint64_t *)(st + 1);
		else
			st->bytes = (const unsigned char *)(st + 1);
		r->stack = st;
		b->stk_used += (need + 7) & ~(size_t)7;
	}
	return 0;
}

/* The next record: 1 when @ret was filled, 0 when nothing is ready,
 * negative errno when the ring is corrupted. */
static inline int read_one(struct mp_consumer *c, struct mp_record *ret)
{
	uint32_t ring;
	struct read_buf b = { .recs = ret, .rings = &ring, .max = 1 };

	return mp_consumer_read_rings_at(c, 1, test_now_ns(), read_keep, &b);
}

static inline int read_drop(void *ctx, uint32_t ring, const struct mp_record *rec)
{
	(void)ctx;
	(void)ring;
	(void)rec;
	return 0;
}

/* Reads and drops every record ready. */
static inline void drop_all(struct mp_consumer *c)
{
	int r;

	while ((r = mp_consumer_read_rings_at(c, 4096, test_now_ns(), read_drop, NULL)) > 0)
		;
	cr_assert_geq(r, 0, "mp_consumer_read_rings_at: %s", strerror(-r));
}

/* Reads until nothing is ready (or @max records), in the order the ordering
 * stage gives them: the attach snapshot's records, then every ring's
 * records merged by timestamp, each ring's in its own order (ties: the
 * record read first). */
static inline size_t drain(struct mp_consumer *c, struct mp_record *recs, size_t max)
{
	struct mp_record *got = calloc(max ? max : 1, sizeof(*got));
	uint32_t *rings = calloc(max ? max : 1, sizeof(*rings));
	bool *out = calloc(max ? max : 1, sizeof(*out));
	struct read_buf b = { .recs = got, .rings = rings, .max = max };
	size_t n = 0;
	int r = 0;

	cr_assert(got && rings && out);
	while (b.n < max &&
	       (r = mp_consumer_read_rings_at(c, max - b.n, test_now_ns(), read_keep, &b)) > 0)
		;
	cr_assert_geq(r, 0, "mp_consumer_read_rings_at: %s", strerror(-r));
	for (size_t i = 0; i < b.n; i++)
		if (rings[i] == MP_CONSUMER_RING_SYNTH) {
			recs[n++] = got[i];
			out[i] = true;
		}
	while (n < b.n) {
		size_t best = b.n;

		/* the earliest of the rings' first records not out yet */
		for (size_t i = 0; i < b.n; i++) {
			bool first = !out[i];

			for (size_t j = 0; j < i && first; j++)
				first = out[j] || rings[j] != rings[i];
			if (first && (best == b.n || got[i].ts_ns < got[best].ts_ns))
				best = i;
		}
		recs[n++] = got[best];
		out[best] = true;
	}
	free(got);
	free(rings);
	free(out);
	return n;
}

#endif
