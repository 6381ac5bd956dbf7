// SPDX-License-Identifier: MIT
/* Unit tests of the live-allocation table (no privileges needed). */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "live.h"

#define MAXEV 64

struct rec {
	struct mp_heap_event ev[MAXEV];
	size_t n;
	uint64_t next_user;
};

static uint64_t record(void *ctx, const struct mp_heap_event *e)
{
	struct rec *r = ctx;

	cr_assert_lt(r->n, MAXEV);
	r->ev[r->n++] = *e;
	return ++r->next_user * 1000;
}

static struct mp_raw_event raw(uint32_t type, uint32_t fn, uint64_t ts, uint64_t addr,
			       uint64_t size, uint64_t old, uint64_t caller)
{
	return (struct mp_raw_event){
		.type = type,
		.fn = fn,
		.pid = 100,
		.tid = 100 + (uint32_t)(ts % 3),
		.ts_ns = ts,
		.addr = addr,
		.size = size,
		.old_addr = old,
		.caller = caller,
	};
}

static void apply(struct mp_live *l, struct mp_raw_event e, struct rec *r)
{
	cr_assert_eq(mp_live_apply(l, &e, record, r), 0);
}

static struct mp_heap_event hev(uint32_t kind, uint32_t fn, uint64_t ts, uint64_t addr,
				uint64_t size, uint64_t caller)
{
	return (struct mp_heap_event){
		.kind = kind,
		.fn = fn,
		.tid = 100 + (uint32_t)(ts % 3),
		.ts_ns = ts,
		.addr = addr,
		.size = size,
		.caller = caller,
	};
}

static struct mp_heap_event hfree(uint32_t fn, uint64_t ts, uint64_t addr, uint64_t caller,
				  uint64_t size, uint64_t alloc_ts, uint64_t alloc_caller,
				  uint64_t user)
{
	struct mp_heap_event e = hev(MP_HEAP_FREE, fn, ts, addr, size, caller);

	e.alloc_tid = 100 + (uint32_t)(alloc_ts % 3);
	e.alloc_ts_ns = alloc_ts;
	e.alloc_caller = alloc_caller;
	e.user = user;
	return e;
}

Test(live, pairs_events_and_returns_user_values)
{
	struct mp_live *l;
	struct rec r = { 0 };
	struct mp_live_stats st, want = { 0 };
	struct mp_heap_event exp[] = {
		hev(MP_HEAP_ALLOC, MP_FN_MALLOC, 1, 0x1000, 100, 0xa1),
		hev(MP_HEAP_ALLOC, MP_FN_CALLOC, 2, 0x2000, 60, 0xa2),
		/* realloc moving 0x1000 -> 0x3000 */
		hfree(MP_FN_REALLOC, 3, 0x1000, 0xa3, 100, 1, 0xa1, 1000),
		hev(MP_HEAP_ALLOC, MP_FN_REALLOC, 3, 0x3000, 500, 0xa3),
		hfree(MP_FN_FREE, 4, 0x2000, 0xa4, 60, 2, 0xa2, 2000),
		hev(MP_HEAP_UNKNOWN_FREE, MP_FN_FREE, 5, 0x9000, 0, 0xa5),
	};

	cr_assert_eq(mp_live_new(&l), 0);
	apply(l, raw(MP_RAW_ALLOC, MP_FN_MALLOC, 1, 0x1000, 100, 0, 0xa1), &r);
	apply(l, raw(MP_RAW_ALLOC, MP_FN_CALLOC, 2, 0x2000, 60, 0, 0xa2), &r);
	apply(l, raw(MP_RAW_REALLOC, MP_FN_REALLOC, 3, 0x3000, 500, 0x1000, 0xa3), &r);
	apply(l, raw(MP_RAW_FREE, MP_FN_FREE, 4, 0x2000, 0, 0, 0xa4), &r);
	apply(l, raw(MP_RAW_FREE, MP_FN_FREE, 5, 0x9000, 0, 0, 0xa5), &r);
	/* NULL frees and failed allocations are not events. */
	apply(l, raw(MP_RAW_FREE, MP_FN_FREE, 6, 0, 0, 0, 0xa6), &r);
	apply(l, raw(MP_RAW_ALLOC, MP_FN_MALLOC, 7, 0, 10, 0, 0xa7), &r);

	cr_assert_eq(r.n, sizeof(exp) / sizeof(exp[0]));
	cr_assert_arr_eq(r.ev, exp, sizeof(exp));
	mp_live_stats(l, &st);
	want.live_bytes = 500;
	want.live_blocks = 1;
	want.unknown_frees = 1;
	want.fn[MP_FN_MALLOC] = (struct mp_live_fn_stats){ 1, 100, 0, 0, 0 };
	want.fn[MP_FN_CALLOC] = (struct mp_live_fn_stats){ 1, 60, 0, 0, 0 };
	want.fn[MP_FN_REALLOC] = (struct mp_live_fn_stats){ 1, 500, 1, 100, 0 };
	want.fn[MP_FN_FREE] = (struct mp_live_fn_stats){ 0, 0, 1, 60, 1 };
	cr_assert_arr_eq(&st, &want, sizeof(st));
	mp_live_free(l);
}

Test(live, realloc_semantics)
{
	struct mp_live *l;
	struct rec r = { 0 };
	struct mp_live_stats st, want = { 0 };
	struct mp_live_block b, wb = { .addr = 0x5000,
				       .size = 40,
				       .ts_ns = 1,
				       .caller = 0xc1,
				       .user = 1000,
				       .tid = 101,
				       .fn = MP_FN_REALLOC };
	struct mp_heap_event exp[] = {
		hev(MP_HEAP_ALLOC, MP_FN_REALLOC, 1, 0x5000, 40, 0xc1),
		hev(MP_HEAP_ALLOC, MP_FN_MALLOC, 3, 0x6000, 8, 0xc3),
		hfree(MP_FN_REALLOC, 4, 0x6000, 0xc4, 8, 3, 0xc3, 2000),
		hev(MP_HEAP_UNKNOWN_FREE, MP_FN_REALLOCARRAY, 5, 0x7000, 0, 0xc5),
		hev(MP_HEAP_ALLOC, MP_FN_REALLOCARRAY, 5, 0x7100, 24, 0xc5),
	};

	cr_assert_eq(mp_live_new(&l), 0);
	/* realloc(NULL, 40) is malloc */
	apply(l, raw(MP_RAW_REALLOC, MP_FN_REALLOC, 1, 0x5000, 40, 0, 0xc1), &r);
	/* failed growth keeps the block */
	apply(l, raw(MP_RAW_REALLOC, MP_FN_REALLOC, 2, 0, 1 << 30, 0x5000, 0xc2), &r);
	/* realloc(p, 0) returning NULL frees p */
	apply(l, raw(MP_RAW_ALLOC, MP_FN_MALLOC, 3, 0x6000, 8, 0, 0xc3), &r);
	apply(l, raw(MP_RAW_REALLOC, MP_FN_REALLOC, 4, 0, 0, 0x6000, 0xc4), &r);
	/* moving a block from before attach: unknown free + alloc */
	apply(l, raw(MP_RAW_REALLOC, MP_FN_REALLOCARRAY, 5, 0x7100, 24, 0x7000, 0xc5), &r);

	cr_assert_eq(r.n, sizeof(exp) / sizeof(exp[0]));
	cr_assert_arr_eq(r.ev, exp, sizeof(exp));
	cr_assert_eq(mp_live_lookup(l, 0x5000, &b), 0);
	cr_assert_arr_eq(&b, &wb, sizeof(b));
	cr_assert_eq(mp_live_lookup(l, 0x6000, &b), -ENOENT);
	mp_live_stats(l, &st);
	want.live_bytes = 64;
	want.live_blocks = 2;
	want.unknown_frees = 1;
	want.failed = 1;
	want.fn[MP_FN_MALLOC] = (struct mp_live_fn_stats){ 1, 8, 0, 0, 0 };
	want.fn[MP_FN_REALLOC] = (struct mp_live_fn_stats){ 1, 40, 1, 8, 0 };
	want.fn[MP_FN_REALLOCARRAY] = (struct mp_live_fn_stats){ 1, 24, 0, 0, 1 };
	cr_assert_arr_eq(&st, &want, sizeof(st));
	mp_live_free(l);
}

Test(live, mappings)
{
	struct mp_live *l;
	struct rec r = { 0 };
	struct mp_live_stats st, want = { 0 };
	struct mp_heap_event exp[] = {
		hev(MP_HEAP_ALLOC, MP_FN_MMAP, 1, 0x10000, 4096, 0xd1),
		hfree(MP_FN_MREMAP, 2, 0x10000, 0xd2, 4096, 1, 0xd1, 1000),
		hev(MP_HEAP_ALLOC, MP_FN_MREMAP, 2, 0x20000, 8192, 0xd2),
		hfree(MP_FN_MUNMAP, 5, 0x20000, 0xd5, 8192, 2, 0xd2, 3000),
	};

	cr_assert_eq(mp_live_new(&l), 0);
	apply(l, raw(MP_RAW_ALLOC, MP_FN_MMAP, 1, 0x10000, 4096, 0, 0xd1), &r);
	apply(l, raw(MP_RAW_REALLOC, MP_FN_MREMAP, 2, 0x20000, 8192, 0x10000, 0xd2), &r);
	/* munmap/mremap of mappings we never saw created (files, before
	 * attach): not ours, not unknown frees */
	apply(l, raw(MP_RAW_FREE, MP_FN_MUNMAP, 3, 0x90000, 4096, 0, 0xd3), &r);
	apply(l, raw(MP_RAW_REALLOC, MP_FN_MREMAP, 4, 0xa0000, 4096, 0x90000, 0xd4), &r);
	apply(l, raw(MP_RAW_FREE, MP_FN_MUNMAP, 5, 0x20000, 8192, 0, 0xd5), &r);

	cr_assert_eq(r.n, sizeof(exp) / sizeof(exp[0]));
	cr_assert_arr_eq(r.ev, exp, sizeof(exp));
	mp_live_stats(l, &st);
	want.ignored = 2;
	want.fn[MP_FN_MMAP] = (struct mp_live_fn_stats){ 1, 4096, 0, 0, 0 };
	want.fn[MP_FN_MREMAP] = (struct mp_live_fn_stats){ 1, 8192, 1, 4096, 0 };
	want.fn[MP_FN_MUNMAP] = (struct mp_live_fn_stats){ 0, 0, 1, 8192, 0 };
	cr_assert_arr_eq(&st, &want, sizeof(st));
	mp_live_free(l);
}

Test(live, exec_forgets_and_reused_address_replaces)
{
	struct mp_live *l;
	struct mp_live_stats st, want = { 0 };
	struct mp_raw_event e;

	cr_assert_eq(mp_live_new(&l), 0);
	e = raw(MP_RAW_ALLOC, MP_FN_MALLOC, 1, 0x1000, 10, 0, 1);
	cr_assert_eq(mp_live_apply(l, &e, NULL, NULL), 0);
	/* Same address handed out again: its free was lost; no double count */
	e = raw(MP_RAW_ALLOC, MP_FN_MALLOC, 2, 0x1000, 30, 0, 1);
	cr_assert_eq(mp_live_apply(l, &e, NULL, NULL), 0);
	e = raw(MP_RAW_ALLOC, MP_FN_MALLOC, 3, 0x2000, 5, 0, 1);
	cr_assert_eq(mp_live_apply(l, &e, NULL, NULL), 0);
	mp_live_stats(l, &st);
	cr_assert_eq(st.live_bytes, 35);
	cr_assert_eq(st.live_blocks, 2);
	e = raw(MP_RAW_EXEC, 0, 4, 0, 0, 0, 0);
	cr_assert_eq(mp_live_apply(l, &e, NULL, NULL), 0);
	e = raw(MP_RAW_FREE, MP_FN_FREE, 5, 0x2000, 0, 0, 1);
	cr_assert_eq(mp_live_apply(l, &e, NULL, NULL), 0);
	mp_live_stats(l, &st);
	want.exec_dropped = 2;
	want.unknown_frees = 1;
	want.fn[MP_FN_MALLOC] = (struct mp_live_fn_stats){ 3, 45, 0, 0, 0 };
	want.fn[MP_FN_FREE] = (struct mp_live_fn_stats){ 0, 0, 0, 0, 1 };
	cr_assert_arr_eq(&st, &want, sizeof(st));
	mp_live_free(l);
}

static int count_block(void *ctx, const struct mp_live_block *b)
{
	uint64_t *sum = ctx;

	*sum += b->size;
	return 0;
}

/* Many blocks, freed in a scrambled order: growth and backward-shift
 * deletion keep every remaining block findable. */
Test(live, grows_and_deletes)
{
	enum { N = 200000 };
	struct mp_live *l;
	struct mp_live_stats st;
	struct mp_live_block b;
	uint64_t sum = 0, want_sum = 0;

	cr_assert_eq(mp_live_new(&l), 0);
	for (uint64_t i = 1; i <= N; i++) {
		struct mp_raw_event e = raw(MP_RAW_ALLOC, MP_FN_MALLOC, i, i * 16, i % 97, 0, 1);

		cr_assert_eq(mp_live_apply(l, &e, NULL, NULL), 0);
	}
	/* free every block whose index is not a multiple of 3, stride order */
	for (uint64_t k = 0; k < N; k++) {
		uint64_t i = (k * 7919) % N + 1;
		struct mp_raw_event e = raw(MP_RAW_FREE, MP_FN_FREE, N + k, i * 16, 0, 0, 1);

		if (i % 3)
			cr_assert_eq(mp_live_apply(l, &e, NULL, NULL), 0);
	}
	for (uint64_t i = 1; i <= N; i++) {
		int r = mp_live_lookup(l, i * 16, &b);

		if (i % 3) {
			cr_assert_eq(r, -ENOENT, "block %llu", (unsigned long long)i);
		} else {
			cr_assert_eq(r, 0, "block %llu", (unsigned long long)i);
			cr_assert_eq(b.size, i % 97);
			want_sum += i % 97;
		}
	}
	mp_live_stats(l, &st);
	cr_assert_eq(st.live_blocks, N / 3);
	cr_assert_eq(st.live_bytes, want_sum);
	cr_assert_eq(st.unknown_frees, 0);
	cr_assert_eq(mp_live_foreach(l, count_block, &sum), 0);
	cr_assert_eq(sum, want_sum);
	mp_live_free(l);
	mp_live_free(NULL);
}

/* brk (rss mode): growth is a block of its own; a shrink frees every heap
 * block above the new break and cuts the one it lands in. */
Test(live, brk_growth_and_shrink)
{
	struct mp_live *l;
	struct rec r = { 0 };
	struct mp_live_stats st, want = { 0 };
	struct mp_heap_event exp[] = {
		hev(MP_HEAP_ALLOC, MP_FN_BRK, 1, 0x10000, 0x1000, 0xb1),
		hev(MP_HEAP_ALLOC, MP_FN_BRK, 2, 0x11000, 0x3000, 0xb2),
		hev(MP_HEAP_ALLOC, MP_FN_MMAP, 3, 0x14000, 0x1000, 0xb3),
		/* break 0x14000 -> 0x10800: the second block goes, the first
		 * is cut at 0x10800; the mapping above is not heap */
		hfree(MP_FN_BRK, 4, 0x11000, 0xb4, 0x3000, 2, 0xb2, 2000),
		hfree(MP_FN_BRK, 4, 0x10000, 0xb4, 0x1000, 1, 0xb1, 1000),
		hev(MP_HEAP_ALLOC, MP_FN_BRK, 4, 0x10000, 0x800, 0xb4),
	};
	int ok;

	cr_assert_eq(mp_live_new(&l), 0);
	apply(l, raw(MP_RAW_REALLOC, MP_FN_BRK, 1, 0x11000, 0, 0x10000, 0xb1), &r);
	apply(l, raw(MP_RAW_REALLOC, MP_FN_BRK, 2, 0x14000, 0, 0x11000, 0xb2), &r);
	apply(l, raw(MP_RAW_ALLOC, MP_FN_MMAP, 3, 0x14000, 0x1000, 0, 0xb3), &r);
	apply(l, raw(MP_RAW_REALLOC, MP_FN_BRK, 4, 0x10800, 0, 0x14000, 0xb4), &r);
	cr_assert_eq(r.n, sizeof(exp) / sizeof(exp[0]), "%zu events", r.n);
	/* The two frees may come in table order. */
	ok = !memcmp(r.ev, exp, sizeof(exp));
	if (!ok) {
		struct mp_heap_event t = exp[3];

		exp[3] = exp[4];
		exp[4] = t;
		ok = !memcmp(r.ev, exp, sizeof(exp));
	}
	cr_assert(ok, "events differ");
	mp_live_stats(l, &st);
	want.live_bytes = 0x800 + 0x1000;
	want.live_blocks = 2;
	want.fn[MP_FN_BRK] = (struct mp_live_fn_stats){ 3, 0x4800, 2, 0x4000, 0 };
	want.fn[MP_FN_MMAP] = (struct mp_live_fn_stats){ 1, 0x1000, 0, 0, 0 };
	cr_assert_arr_eq(&st, &want, sizeof(st));
	mp_live_free(l);
}
