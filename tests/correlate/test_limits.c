// SPDX-License-Identifier: MIT
/*
 * Limits (docs/PROFILE.md "Limits"): the live table at its memory bound
 * counts new blocks without tracking them, the site table at its bound
 * puts the rest into "(other sites)", totals still add up, and the
 * profile's limits say so, through the file format too. No privileges.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "correlator.h"
#include "live.h"
#include "profile_pb.h"

static uint64_t count_cb(void *ctx, const struct mp_heap_event *e)
{
	uint64_t *n = ctx;

	n[e->kind]++;
	return 1;
}

static struct mp_raw_event ev(uint32_t type, uint64_t ts, uint64_t addr, uint64_t size,
			      uint64_t old, uint64_t caller)
{
	return (struct mp_raw_event){ .type = type,
				      .fn = type == MP_RAW_FREE	   ? MP_FN_FREE :
					    type == MP_RAW_REALLOC ? MP_FN_REALLOC :
								     MP_FN_MALLOC,
				      .pid = 7,
				      .tid = 7,
				      .ts_ns = ts,
				      .addr = addr,
				      .size = size,
				      .old_addr = old,
				      .caller = caller };
}

#define BLOCK 48 /* sizeof(struct mp_live_block) */

Test(limits, live_table_counts_new_blocks_past_its_bound)
{
	uint64_t n[8] = { 0 }, ts = 1;
	struct mp_live_stats st;
	struct mp_live *l;
	struct mp_raw_event e;

	cr_assert_eq(mp_live_new(&l), 0);
	mp_live_set_max_bytes(l, 2048 * BLOCK + 100);
	cr_assert_eq(mp_live_max_blocks(l), 1536);
	for (uint64_t i = 0; i < 5000; i++) {
		e = ev(MP_RAW_ALLOC, ts++, 0x10000 + i * 16, 10, 0, 0x400000);
		cr_assert_eq(mp_live_apply(l, &e, count_cb, n), 0);
	}
	mp_live_stats(l, &st);
	cr_assert_eq(n[MP_HEAP_ALLOC], 1536);
	cr_assert_eq(st.live_blocks, 1536);
	cr_assert_eq(st.untracked, 5000 - 1536);
	cr_assert_eq(st.untracked_bytes, (5000 - 1536) * 10);
	cr_assert_leq(mp_live_bytes(l), 2048 * BLOCK);
	/* an untracked block's free is unknown; a tracked one's is paired */
	e = ev(MP_RAW_FREE, ts++, 0x10000 + 4999 * 16, 0, 0, 0x400000);
	cr_assert_eq(mp_live_apply(l, &e, count_cb, n), 0);
	cr_assert_eq(n[MP_HEAP_UNKNOWN_FREE], 1);
	/* a realloc of a tracked block needs no new slot: applied */
	e = ev(MP_RAW_REALLOC, ts++, 0x900000, 20, 0x10000, 0x400000);
	cr_assert_eq(mp_live_apply(l, &e, count_cb, n), 0);
	cr_assert_eq(n[MP_HEAP_FREE], 1);
	cr_assert_eq(n[MP_HEAP_ALLOC], 1537);
	/* a free makes room for one more tracked block */
	e = ev(MP_RAW_FREE, ts++, 0x900000, 0, 0, 0x400000);
	cr_assert_eq(mp_live_apply(l, &e, count_cb, n), 0);
	e = ev(MP_RAW_ALLOC, ts++, 0x800000, 30, 0, 0x400000);
	cr_assert_eq(mp_live_apply(l, &e, count_cb, n), 0);
	cr_assert_eq(n[MP_HEAP_ALLOC], 1538);
	mp_live_stats(l, &st);
	cr_assert_eq(st.untracked, 5000 - 1536);
	cr_assert_eq(st.live_blocks, 1536);
	mp_live_free(l);
}

static uint64_t sum_alloc(const struct mp_profile *p, uint64_t *ret_inuse)
{
	uint64_t a = 0, u = 0;

	for (uint32_t i = 0; i < p->n_sites; i++) {
		a += p->sites[i].alloc_space;
		u += p->sites[i].inuse_space;
	}
	*ret_inuse = u;
	return a;
}

static struct mp_profile *roundtrip(const struct mp_profile *p)
{
	struct mp_profile *q = NULL;
	const char *why = NULL;
	uint8_t *buf;
	size_t len;

	cr_assert_eq(mp_profile_encode(p, &buf, &len), 0);
	cr_assert_eq(mp_profile_decode(buf, len, &q, &why), 0, "%s", why ? why : "");
	free(buf);
	return q;
}

static const char *owner_of(void *ctx, uint64_t caller)
{
	return "/lib/libfixture.so";
}

Test(limits, sites_past_their_bound_go_to_other_sites_and_totals_add_up)
{
	struct mp_correlator_opts o = { .begin_ns = 1, .max_sites = 10, .resolve_owner = owner_of };
	struct mp_correlator *c;
	struct mp_profile *p, *q;
	struct mp_raw_event e;
	uint64_t ts = 10, inuse, other = MP_NONE;

	cr_assert_eq(mp_correlator_new(&o, &c), 0);
	/* 100 callers, 3 blocks each; the first block of each is freed */
	for (uint64_t k = 0; k < 3; k++)
		for (uint64_t i = 0; i < 100; i++) {
			e = ev(MP_RAW_ALLOC, ts++, 0x10000 + (k * 100 + i) * 64, 100 + i, 0,
			       0x401000 + i * 8);
			cr_assert_eq(mp_correlator_apply_heap(c, &e, 0), 0);
		}
	for (uint64_t i = 0; i < 100; i++) {
		e = ev(MP_RAW_FREE, ts++, 0x10000 + i * 64, 0, 0, 0x401000);
		cr_assert_eq(mp_correlator_apply_heap(c, &e, 0), 0);
	}
	cr_assert_eq(mp_correlator_finish(c, ts, &p), 0);
	cr_assert_eq(p->n_sites, 11);
	for (uint32_t i = 0; i < p->n_sites; i++)
		if (p->sites[i].flags & MP_SITE_F_OTHER)
			other = i;
	cr_assert_eq(other, 10, "the (other sites) entry follows the 10 kept");
	cr_assert_eq(p->sites[other].alloc_objects, 270);
	cr_assert_eq(p->sites[other].inuse_objects, 180);
	cr_assert_eq(p->sites[other].caller, 0);
	cr_assert_eq(p->sites_dropped, 270);
	cr_assert_eq(sum_alloc(p, &inuse), p->mem.alloc_bytes);
	cr_assert_eq(inuse, (uint64_t)p->mem.bytes_added);
	cr_assert_eq(p->limits.reached, MP_LIMIT_SITES);
	cr_assert_eq(p->limits.sites, 10);
	cr_assert_eq(p->limits.untracked_allocs, 0);

	q = roundtrip(p);
	cr_assert_eq(q->n_sites, 11);
	cr_assert_eq(q->sites[10].flags, MP_SITE_F_OTHER);
	cr_assert_eq(q->sites[3].flags, 0);
	cr_assert_eq(q->limits.reached, MP_LIMIT_SITES);
	cr_assert_eq(q->limits.sites, 10);
	mp_profile_free(q);
	mp_profile_free(p);
	mp_correlator_free(c);
}

Test(limits, correlator_live_bound_leaves_untracked_blocks_out_of_every_figure)
{
	struct mp_correlator_opts o = { .begin_ns = 1, .max_live_bytes = 2048 * BLOCK };
	struct mp_correlator *c;
	struct mp_profile *p, *q;
	struct mp_raw_event e;
	uint64_t ts = 10, inuse;

	cr_assert_eq(mp_correlator_new(&o, &c), 0);
	for (uint64_t i = 0; i < 4000; i++) {
		e = ev(MP_RAW_ALLOC, ts++, 0x100000 + i * 32, 8, 0, 0x401000 + (i % 7) * 8);
		cr_assert_eq(mp_correlator_apply_heap(c, &e, 0), 0);
	}
	/* temporaries need no slot: counted in full even now */
	for (uint64_t i = 0; i < 10; i++) {
		struct mp_raw_event fr = ev(MP_RAW_FREE, ts + 1, 0x900000, 0, 0, 0x401000);

		e = ev(MP_RAW_ALLOC, ts, 0x900000, 1000, 0, 0x401000);
		ts += 2;
		cr_assert_eq(mp_correlator_apply_temporary(c, &e, 0, &fr), 0);
	}
	cr_assert_eq(mp_correlator_finish(c, ts, &p), 0);
	cr_assert_eq(p->limits.reached, MP_LIMIT_LIVE);
	cr_assert_eq(p->limits.live_blocks, 1536);
	cr_assert_eq(p->limits.untracked_allocs, 4000 - 1536);
	cr_assert_eq(p->limits.untracked_bytes, (4000 - 1536) * 8);
	cr_assert_eq(p->mem.alloc_count, 1536 + 10);
	cr_assert_eq(p->mem.alloc_bytes, 1536 * 8 + 10 * 1000);
	cr_assert_eq(p->mem.bytes_added, 1536 * 8);
	/* a temporary reaches one block above the tracked ones */
	cr_assert_eq(p->peak_tensors, 1537);
	cr_assert_eq(sum_alloc(p, &inuse), p->mem.alloc_bytes);
	cr_assert_eq(inuse, 1536 * 8);

	q = roundtrip(p);
	cr_assert_eq(q->limits.reached, MP_LIMIT_LIVE);
	cr_assert_eq(q->limits.live_blocks, 1536);
	cr_assert_eq(q->limits.untracked_allocs, 4000 - 1536);
	cr_assert_eq(q->limits.untracked_bytes, (4000 - 1536) * 8);
	mp_profile_free(q);
	mp_profile_free(p);
	mp_correlator_free(c);
}
