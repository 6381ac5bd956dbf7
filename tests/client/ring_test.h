/* SPDX-License-Identifier: MIT */
/* Helpers shared by the libclient tests. */
#ifndef RING_TEST_H
#define RING_TEST_H

#include <criterion/criterion.h>
#include <stdbool.h>
#include <stdint.h>
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

/* Reads until nothing is ready (or @max records). */
static inline size_t drain(struct mp_consumer *c, struct mp_record *recs, size_t max)
{
	size_t n = 0;
	int r = 0;

	while (n < max && (r = mp_consumer_read(c, &recs[n])) == 1)
		n++;
	cr_assert_geq(r, 0, "mp_consumer_read: %s", strerror(-r));
	return n;
}

#endif
