// SPDX-License-Identifier: MIT
/*
 * Limits (docs/PROFILE.md "Limits"): the live table at its memory bound
 * counts new blocks without tracking them, the site table at its bound
 * puts the rest into "(other sites)", totals still add up, and the
 * profile's limits say so, through the file format too. No privileges.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <inttypes.h>
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

/* ---- the site table past its bound: space-saving ---- */

/* Ground truth of a stream, by caller (every site of these streams is one
 * caller: one thread, no kernel, phase or stack): the bytes and blocks it
 * allocated and those live. */
#define CALLERS 4096
struct truth {
	uint64_t alloc_space[CALLERS], alloc_objects[CALLERS];
	uint64_t inuse_space[CALLERS], inuse_objects[CALLERS];
	uint64_t total, ts;
};

static uint64_t caller_of(uint32_t k)
{
	return 0x401000 + (uint64_t)k * 16;
}

static void t_alloc(struct mp_correlator *c, struct truth *t, uint32_t k, uint64_t addr,
		    uint64_t size)
{
	struct mp_raw_event e = ev(MP_RAW_ALLOC, t->ts++, addr, size, 0, caller_of(k));

	cr_assert_eq(mp_correlator_apply_heap(c, &e, 0), 0);
	t->alloc_space[k] += size;
	t->alloc_objects[k]++;
	t->inuse_space[k] += size;
	t->inuse_objects[k]++;
	t->total += size;
}

static void t_free(struct mp_correlator *c, struct truth *t, uint32_t k, uint64_t addr,
		   uint64_t size)
{
	struct mp_raw_event e = ev(MP_RAW_FREE, t->ts++, addr, 0, 0, caller_of(k));

	cr_assert_eq(mp_correlator_apply_heap(c, &e, 0), 0);
	t->inuse_space[k] -= size;
	t->inuse_objects[k]--;
}

/* The listed site of caller @k, NULL when it is not listed. */
static const struct mp_site *site_of(const struct mp_profile *p, uint32_t k)
{
	for (uint32_t i = 0; i < p->n_sites; i++)
		if (!(p->sites[i].flags & MP_SITE_F_OTHER) && p->sites[i].caller == caller_of(k))
			return &p->sites[i];
	return NULL;
}

/* What every profile past the site bound keeps: at most max_sites sites
 * and one "(other sites)", the sites' figures adding up to the heap's (and
 * to the truth), each listed site's figures within its error of the truth
 * (exact for what is live), the largest error stated, every site above
 * total / max_sites listed, and all of it through the file. */
static void check_sites(const struct mp_profile *p, const struct truth *t, uint32_t max_sites)
{
	uint64_t alloc = 0, objs = 0, inuse = 0, inuse_objs = 0, max_err = 0;
	uint32_t listed = 0, others = 0;
	struct mp_profile *q;

	for (uint32_t i = 0; i < p->n_sites; i++) {
		const struct mp_site *st = &p->sites[i];

		alloc += st->alloc_space;
		objs += st->alloc_objects;
		inuse += st->inuse_space;
		inuse_objs += st->inuse_objects;
		cr_assert_leq(st->peak_space, st->alloc_space);
		if (st->flags & MP_SITE_F_OTHER) {
			others++;
			cr_assert_eq(st->alloc_objects, p->sites_dropped);
			continue;
		}
		listed++;
		if (st->error_space > max_err)
			max_err = st->error_space;
	}
	cr_assert_leq(listed, max_sites);
	cr_assert_eq(others, 1);
	cr_assert_eq(alloc, p->mem.alloc_bytes);
	cr_assert_eq(alloc, t->total);
	cr_assert_eq(objs, p->mem.alloc_count);
	cr_assert_eq(inuse, (uint64_t)p->mem.bytes_added);
	cr_assert_eq(inuse_objs, (uint64_t)p->mem.tensors_added);
	cr_assert_eq(p->limits.reached & MP_LIMIT_SITES, MP_LIMIT_SITES);
	cr_assert_gt(p->limits.sites_evicted, 0);
	cr_assert_eq(p->limits.site_error_bytes, max_err);
	for (uint32_t k = 0; k < CALLERS; k++) {
		const struct mp_site *st = site_of(p, k);

		if (!st) {
			/* space-saving's guarantee */
			cr_assert_leq(t->alloc_space[k], t->total / max_sites,
				      "caller %u: %" PRIu64 " of %" PRIu64 " bytes, not listed", k,
				      t->alloc_space[k], t->total);
			continue;
		}
		cr_assert_leq(st->alloc_space, t->alloc_space[k], "caller %u", k);
		cr_assert_geq(st->alloc_space + st->error_space, t->alloc_space[k],
			      "caller %u: %" PRIu64 " + error %" PRIu64 " < %" PRIu64 " allocated",
			      k, st->alloc_space, st->error_space, t->alloc_space[k]);
		cr_assert_leq(st->alloc_objects, t->alloc_objects[k], "caller %u", k);
		/* live blocks are charged to the site that allocated them */
		cr_assert_leq(st->inuse_space, t->inuse_space[k], "caller %u", k);
		cr_assert_leq(st->inuse_objects, t->inuse_objects[k], "caller %u", k);
		if (!st->error_space) {
			cr_assert_eq(st->alloc_space, t->alloc_space[k], "caller %u", k);
			cr_assert_eq(st->inuse_space, t->inuse_space[k], "caller %u", k);
		}
	}
	q = roundtrip(p);
	cr_assert_eq(q->n_sites, p->n_sites);
	for (uint32_t i = 0; i < p->n_sites; i++)
		cr_assert_eq(q->sites[i].error_space, p->sites[i].error_space);
	cr_assert_eq(q->limits.sites_evicted, p->limits.sites_evicted);
	cr_assert_eq(q->limits.site_error_bytes, p->limits.site_error_bytes);
	mp_profile_free(q);
}

static struct mp_correlator *sites_new(uint32_t max_sites, struct truth **ret)
{
	struct mp_correlator_opts o = { .begin_ns = 1,
					.max_sites = max_sites,
					.resolve_owner = owner_of };
	struct mp_correlator *c;

	cr_assert_eq(mp_correlator_new(&o, &c), 0);
	*ret = calloc(1, sizeof(**ret));
	cr_assert_not_null(*ret);
	(*ret)->ts = 10;
	return c;
}

/* Sites by stack: one caller allocating under four stacks whose site
 * hints share a slot (ids 256 apart), in turn and in runs of one stack,
 * on one thread and then on two (a stack's first site is found by its id,
 * the second thread's in the site map), makes eight sites, each with
 * exactly its stack's and thread's bytes; and as many past a bound of 2
 * sites, where each site kept holds its stack's and thread's bytes
 * within its error and the sites add up to the heap. */
static void stack_sites(uint32_t max_sites)
{
	static const uint32_t stacks[4] = { 1, 257, 513, 769 };
	struct mp_correlator *c;
	struct truth *t;
	struct mp_profile *p;
	uint64_t bytes[4][2] = { { 0 } }, addr = 0x10000, sum = 0;

	c = sites_new(max_sites, &t);
	for (uint32_t i = 0; i < 6000; i++) {
		/* in turn for the first third, then runs of 10, then the
		 * second thread beside the first */
		uint32_t k = i < 2000 ? i % 4 : (i / 10) % 4, th = i >= 4000 && i % 3 == 0;
		struct mp_raw_event e = ev(MP_RAW_ALLOC, t->ts++, addr, 100 + k, 0, caller_of(0));

		e.tid = 7 + th;
		addr += 256;
		cr_assert_eq(mp_correlator_apply_heap(c, &e, stacks[k]), 0);
		bytes[k][th] += 100 + k;
	}
	cr_assert_eq(mp_correlator_finish(c, t->ts, &p), 0);
	for (uint32_t i = 0; i < p->n_sites; i++) {
		const struct mp_site *st = &p->sites[i];
		uint32_t k = 0, th;

		sum += st->alloc_space;
		if (st->flags & MP_SITE_F_OTHER)
			continue;
		while (k < 4 && stacks[k] != st->stack)
			k++;
		cr_assert_lt(k, 4, "site %u: stack %u", i, st->stack);
		cr_assert(st->tid == 7 || st->tid == 8, "site %u: thread %u", i, st->tid);
		th = st->tid - 7;
		cr_assert_eq(st->caller, caller_of(0));
		cr_assert_leq(st->alloc_space, bytes[k][th], "stack %u", st->stack);
		cr_assert_geq(st->alloc_space + st->error_space, bytes[k][th], "stack %u",
			      st->stack);
		if (max_sites >= 8)
			cr_assert_eq(st->alloc_space, bytes[k][th], "stack %u thread %u", st->stack,
				     st->tid);
	}
	cr_assert_eq(sum, p->mem.alloc_bytes);
	if (max_sites >= 8)
		cr_assert_eq(p->n_sites, 8);
	else
		cr_assert_gt(p->limits.sites_evicted, 0);
	mp_profile_free(p);
	mp_correlator_free(c);
	free(t);
}

Test(limits, stacks_of_one_caller_are_sites_of_their_own)
{
	stack_sites(64);
	stack_sites(2);
}

Test(limits, sites_past_their_bound_fold_the_smallest_into_other_sites)
{
	struct truth *t;
	struct mp_correlator *c = sites_new(10, &t);
	struct mp_profile *p;

	/* 100 callers, 3 blocks each; the first block of each is freed */
	for (uint32_t k = 0; k < 3; k++)
		for (uint32_t i = 0; i < 100; i++)
			t_alloc(c, t, i, 0x10000 + (k * 100 + i) * 64, 100 + i);
	for (uint32_t i = 0; i < 100; i++)
		t_free(c, t, i, 0x10000 + i * 64, 100 + i);
	cr_assert_eq(mp_correlator_finish(c, t->ts, &p), 0);
	cr_assert_eq(p->n_sites, 11);
	cr_assert_eq(p->limits.sites, 10);
	cr_assert_eq(p->limits.untracked_allocs, 0);
	check_sites(p, t, 10);
	mp_profile_free(p);
	mp_correlator_free(c);
	free(t);
}

/* The user report: a table filled by an import's many small sites, then
 * the script's own four 8 MiB tensors, between more small ones. */
Test(limits, a_big_site_arriving_last_gets_its_own_entry_with_its_exact_bytes)
{
	struct truth *t;
	struct mp_correlator *c = sites_new(8, &t);
	const struct mp_site *big;
	struct mp_profile *p;
	uint64_t addr = 0x10000;
	uint32_t k = 1;

	for (; k < 1000; k++, addr += 64)
		t_alloc(c, t, k, addr, 16 + k % 32);
	for (uint32_t n = 0; n < 4; n++) {
		t_alloc(c, t, 0, 0x7f0000000000 + n * (8ull << 20), 8ull << 20);
		for (uint32_t j = 0; j < 200; j++, k++, addr += 64)
			t_alloc(c, t, k, addr, 16 + k % 32);
	}
	cr_assert_eq(mp_correlator_finish(c, t->ts, &p), 0);
	big = site_of(p, 0);
	cr_assert_not_null(big, "the 32 MiB site is in \"(other sites)\"");
	cr_assert_eq(big->alloc_space, 32ull << 20);
	cr_assert_eq(big->alloc_objects, 4);
	cr_assert_eq(big->inuse_space, 32ull << 20);
	cr_assert_eq(big->inuse_objects, 4);
	/* what it may lack: no more than the smallest key, at most the
	 * bytes before it over max_sites (a few KiB here, none its own) */
	cr_assert_leq(big->error_space, (t->total - (32ull << 20)) / 8);
	check_sites(p, t, 8);
	mp_profile_free(p);
	mp_correlator_free(c);
	free(t);
}

Test(limits, a_big_site_from_the_start_keeps_its_entry_through_thousands_of_small_ones)
{
	struct truth *t;
	struct mp_correlator *c = sites_new(8, &t);
	const struct mp_site *big;
	struct mp_profile *p;

	for (uint32_t k = 1; k < CALLERS; k++) {
		uint64_t addr = 0x10000 + (uint64_t)k * 64;

		if (k % 100 == 1)
			t_alloc(c, t, 0, 0x7f0000000000 + k * (1ull << 20), 1 << 20);
		t_alloc(c, t, k, addr, 8 + k % 64);
		/* half of them gone again at once */
		if (k % 2)
			t_free(c, t, k, addr, 8 + k % 64);
	}
	cr_assert_eq(mp_correlator_finish(c, t->ts, &p), 0);
	big = site_of(p, 0);
	cr_assert_not_null(big);
	cr_assert_eq(big->error_space, 0);
	cr_assert_eq(big->alloc_space, t->alloc_space[0]);
	cr_assert_eq(big->inuse_space, t->alloc_space[0]);
	check_sites(p, t, 8);
	mp_profile_free(p);
	mp_correlator_free(c);
	free(t);
}

/* Sites evicted while their blocks are live, more of them than entries
 * kept aside for them (64 at max_sites 8): their entries are taken again
 * by new sites (the live table's values rewritten), and the old blocks'
 * frees must go to "(other sites)", never to a new site in the same
 * entry. Every figure is then checked against the truth. */
Test(limits, frees_of_evicted_sites_blocks_go_to_other_sites_never_to_the_new_ones)
{
	struct truth *t;
	struct mp_correlator *c = sites_new(8, &t);
	struct mp_profile *p;
	uint32_t n = 1000;

	/* each site one live block, of growing size: each new one evicts */
	for (uint32_t k = 0; k < n; k++)
		t_alloc(c, t, k, 0x10000 + (uint64_t)k * 64, 100 + k);
	/* the older blocks freed, oldest first, while new sites come */
	for (uint32_t k = 0; k < n - 8; k++) {
		t_free(c, t, k, 0x10000 + (uint64_t)k * 64, 100 + k);
		t_alloc(c, t, n + k % 2000, 0x900000 + (uint64_t)k * 64, 50);
		t_free(c, t, n + k % 2000, 0x900000 + (uint64_t)k * 64, 50);
	}
	cr_assert_eq(mp_correlator_finish(c, t->ts, &p), 0);
	check_sites(p, t, 8);
	/* each listed site's live figures are exactly its own */
	for (uint32_t i = 0; i < p->n_sites; i++) {
		const struct mp_site *st = &p->sites[i];
		uint32_t k = (uint32_t)((st->caller - 0x401000) / 16);

		if (st->flags & MP_SITE_F_OTHER)
			continue;
		cr_assert_eq(st->inuse_objects, t->inuse_objects[k], "caller %u", k);
		cr_assert_eq(st->inuse_space, t->inuse_space[k], "caller %u", k);
	}
	mp_profile_free(p);
	mp_correlator_free(c);
	free(t);
}

/* The error bound on a skewed stream: a few heavy callers among many
 * light ones, blocks freed at random. */
Test(limits, every_listed_site_is_within_its_error_and_every_heavy_site_is_listed)
{
	struct truth *t;
	struct mp_correlator *c = sites_new(16, &t);
	struct mp_profile *p;
	uint64_t rs = 0x9e3779b97f4a7c15ull, live[256] = { 0 }, live_size[256] = { 0 };
	uint32_t live_k[256] = { 0 };

	for (uint32_t i = 0; i < 40000; i++) {
		uint32_t k, slot;
		uint64_t size;

		rs = rs * 6364136223846793005ull + 1442695040888963407ull;
		/* caller k with weight ~ 1/(k+1): heavy ones among CALLERS */
		k = (uint32_t)((rs >> 33) % CALLERS);
		k = k % (1 + (uint32_t)(rs >> 20) % CALLERS);
		size = 16 + (rs >> 40) % (k < 4 ? 65536 : 256);
		slot = (uint32_t)(rs >> 8) % 256;
		if (live[slot])
			t_free(c, t, live_k[slot], live[slot], live_size[slot]);
		live[slot] = 0x10000 + (uint64_t)i * 64;
		live_k[slot] = k;
		live_size[slot] = size;
		t_alloc(c, t, k, live[slot], size);
	}
	cr_assert_eq(mp_correlator_finish(c, t->ts, &p), 0);
	check_sites(p, t, 16);
	mp_profile_free(p);
	mp_correlator_free(c);
	free(t);
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
