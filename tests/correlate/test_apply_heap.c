// SPDX-License-Identifier: MIT
/*
 * mp_correlator_apply_heap(), the fused step of both paths through the
 * correlator's own live table, against the two steps it replaces
 * (mp_live_apply() on a table of the test's with mp_correlator_on_heap()
 * as the callback, an allocation's stack id set on the heap event): seeded random streams of every raw event kind (allocation
 * functions, frees of known, unknown and NULL blocks, every realloc case,
 * mmap/munmap/mremap, brk growth and shrink, custom pool functions,
 * scaled samples, stacks, exec) between kernels, tags and phases on
 * several threads, in precise and in sampled mode, with owner rules. Both
 * sides must give the same profile, field for field and as rendered, and
 * the same live table.
 *
 * A third side feeds the same streams through
 * mp_correlator_apply_temporary() as the session does: an allocation is
 * held until the next event, and goes with it in one call when that is
 * a free (anything else applies the held one alone first). The streams have
 * temporary allocations (freed by the next event) of every kind: on the
 * same or another thread, at an address still live, of huge sizes whose
 * levels wrap, failed, by pool functions, scaled.
 */
#include <inttypes.h>

#include "../profile/helpers.h"
#include "live.h"

static uint64_t rnd(uint64_t *s)
{
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return *s * 0x2545f4914f6cdd1dull;
}

static const char *resolve(void *ctx, uint64_t caller)
{
	static const char *const paths[] = { "/usr/lib/liba.so", "/usr/lib/libb.so.1",
					     "/opt/x/libtorch_cpu.so", "/usr/bin/app" };

	(void)ctx;
	return caller % 7 == 6 ? NULL : paths[(caller >> 4) % 4];
}

static uint64_t stack_frames_buf[4];
static uint32_t stack_frames(void *ctx, uint32_t id, const uint64_t **ret)
{
	(void)ctx;
	for (uint32_t i = 0; i < 4; i++)
		stack_frames_buf[i] = 0x400000 + 16 * (uint64_t)((id + i) % 9);
	*ret = stack_frames_buf;
	return id % 5;
}

struct side {
	struct mp_correlator *c;
	struct mp_live *own; /* the two steps' table (side a); NULL: the correlator's */
	const struct mp_live *l;
	uint64_t observed; /* heap events shown to opts.observe_heap */
};

static void observe(void *ctx, const struct mp_heap_event *ev)
{
	struct side *s = ctx;

	(void)ev;
	s->observed++;
}

/* The two steps' callback: the stack id set as apply_heap() sets it. */
struct two_step {
	struct mp_correlator *c;
	uint32_t stack;
};

static uint64_t two_step_cb(void *ctx, const struct mp_heap_event *ev)
{
	const struct two_step *t = ctx;

	if (ev->kind == MP_HEAP_ALLOC && t->stack) {
		struct mp_heap_event with = *ev;

		with.stack = t->stack;
		return mp_correlator_on_heap(t->c, &with);
	}
	return mp_correlator_on_heap(t->c, ev);
}

/* @own: a live table of the side's own, for the two steps; @observed: the
 * correlator shows every heap event to an observer (--dump-events). */
static void side_new(struct side *s, uint64_t sample_bytes, bool own, bool observed)
{
	struct mp_correlator_opts o = { .begin_ns = 1000,
					.resolve_owner = resolve,
					.stack_frames = stack_frames,
					.observe_heap = observed ? observe : NULL,
					.observe_ctx = s,
					.sample_bytes = sample_bytes,
					.max_sites = 300,
					.max_invocations = 200 };

	*s = (struct side){ 0 };
	cr_assert_eq(mp_correlator_new(&o, &s->c), 0);
	if (own) {
		cr_assert_eq(mp_live_new(&s->own), 0);
		mp_correlator_values_in(s->c, s->own);
	}
	s->l = own ? s->own : mp_correlator_live(s->c);
	cr_assert_eq(mp_correlator_add_owner_rule(s->c, "libb*=B"), 0);
	cr_assert_eq(mp_correlator_set_fn_pool(s->c, MP_FN_CUSTOM + 1, "arena", MP_POOL_KIND_HOST),
		     0);
}

/* The pairing side: an allocation waiting for the next heap event. */
struct pairing {
	struct side s;
	struct mp_raw_event held;
	uint32_t held_stack;
	bool holding;
	uint64_t pairs; /* calls of mp_correlator_apply_temporary() */
};

static void pair_flush(struct pairing *p)
{
	if (!p->holding)
		return;
	p->holding = false;
	cr_assert_eq(mp_correlator_apply_heap(p->s.c, &p->held, p->held_stack), 0);
}

static void pair_heap(struct pairing *p, const struct mp_raw_event *ev, uint32_t stack)
{
	if (p->holding && ev->type == MP_RAW_FREE) {
		p->holding = false;
		p->pairs++;
		cr_assert_eq(mp_correlator_apply_temporary(p->s.c, &p->held, p->held_stack, ev), 0);
		return;
	}
	pair_flush(p);
	if (ev->type == MP_RAW_ALLOC) {
		p->held = *ev;
		p->held_stack = stack;
		p->holding = true;
		return;
	}
	cr_assert_eq(mp_correlator_apply_heap(p->s.c, ev, stack), 0);
}

static void both_record(struct side *a, struct side *b, struct pairing *c,
			const struct mp_record *r)
{
	int ra = mp_correlator_on_record(a->c, r);

	cr_assert_eq(ra, mp_correlator_on_record(b->c, r));
	pair_flush(c);
	cr_assert_eq(ra, mp_correlator_on_record(c->s.c, r));
}

static void both_heap(struct side *a, struct side *b, struct pairing *c,
		      const struct mp_raw_event *ev, uint32_t stack)
{
	struct two_step t = { .c = a->c, .stack = stack };
	/* the two steps, after the refusal the fused step makes first */
	int ra = mp_correlator_heap_refused(a->c, ev) ? 0 :
							mp_live_apply(a->own, ev, two_step_cb, &t);
	int rb = mp_correlator_apply_heap(b->c, ev, stack);

	cr_assert_eq(ra, rb);
	cr_assert_eq(ra, 0);
	pair_heap(c, ev, stack);
}

static int live_cmp_cb(void *ctx, const struct mp_live_block *blk)
{
	const struct mp_live *other = ctx;
	struct mp_live_block o;

	cr_assert_eq(mp_live_lookup(other, blk->addr, &o), 0, "block 0x%" PRIx64, blk->addr);
	cr_expect_eq(memcmp(&o, blk, sizeof(o)), 0,
		     "block 0x%" PRIx64 ": size %" PRIu64 "/%" PRIu64 ", ts %" PRIu64 "/%" PRIu64
		     ", user 0x%" PRIx64 "/0x%" PRIx64 ", tid %u/%u, fn %u/%u, flags %u/%u",
		     blk->addr, o.size, blk->size, o.ts_ns, blk->ts_ns, o.user, blk->user, o.tid,
		     blk->tid, o.fn, blk->fn, o.flags, blk->flags);
	return 0;
}

/* @observed: side b shows its heap events to an observer (off the fused
 * path), which must change nothing. */
static void run_stream(uint64_t seed, uint64_t sample_bytes, uint32_t events, bool observed)
{
	static const char *const names[] = { "matmul", "conv", "softmax", "gather" };
	static const char *const tags[] = { "kv", "weights" };
	static const char *const phases[] = { "load", "step" };
	uint64_t addrs[64] = { 0 }, brk_top = 0x5000000, ts = 2000, rs = seed;
	uint32_t depth[4] = { 0 }, ntags[4] = { 0 };
	struct mp_live_stats sa, sb;
	struct mp_profile *pa, *pb, *pc;
	struct pairing c = { 0 };
	struct mp_live_stats sc;
	struct side a, b;
	char *ja, *jb, *jc;

	side_new(&a, sample_bytes, true, false);
	side_new(&b, sample_bytes, false, observed);
	side_new(&c.s, sample_bytes, false, false);
	for (uint32_t k = 0; k < events; k++) {
		uint64_t x = rnd(&rs);
		uint32_t th = (uint32_t)(x >> 8) % 4, tid = 100 + th;
		uint32_t op = (uint32_t)(x % 100);
		uint64_t *slot = &addrs[(x >> 16) % 64];
		struct mp_raw_event ev = { .pid = 1,
					   .tid = tid,
					   .ts_ns = ++ts,
					   .caller = 0x400000 + 16 * ((x >> 24) % 9) };
		struct mp_record r = { .tid = tid, .ts_ns = ts };
		uint32_t stack = (x >> 40) % 3 == 0 ? (uint32_t)((x >> 44) % 6) : 0;

		if (op < 6) {
			if (depth[th] < 5 && (op < 4 || !depth[th])) {
				r.type = MP_REC_KERNEL_BEGIN;
				r.name = names[(x >> 32) % 4];
				depth[th]++;
			} else {
				r.type = MP_REC_KERNEL_END;
				if (depth[th])
					depth[th]--;
			}
			both_record(&a, &b, &c, &r);
			continue;
		}
		if (op < 8) {
			if (ntags[th] < 3 && op == 6) {
				r.type = MP_REC_TAG_BEGIN;
				r.name = tags[(x >> 32) % 2];
				ntags[th]++;
			} else {
				r.type = MP_REC_TAG_END;
				if (ntags[th])
					ntags[th]--;
			}
			both_record(&a, &b, &c, &r);
			continue;
		}
		if (op == 8) {
			r.type = MP_REC_PHASE;
			r.name = phases[(x >> 32) % 2];
			both_record(&a, &b, &c, &r);
			continue;
		}
		if (op == 9 && (x >> 32) % 20 == 0) {
			/* exec: blocks forgotten, kernels closed */
			ev.type = MP_RAW_EXEC;
			cr_assert_eq(mp_correlator_on_exec(a.c, ts, tid, "/bin/new"),
				     mp_correlator_on_exec(b.c, ts, tid, "/bin/new"));
			pair_flush(&c);
			cr_assert_eq(mp_correlator_on_exec(c.s.c, ts, tid, "/bin/new"), 0);
			both_heap(&a, &b, &c, &ev, 0);
			memset(addrs, 0, sizeof(addrs));
			memset(depth, 0, sizeof(depth));
			memset(ntags, 0, sizeof(ntags));
			continue;
		}
		if (op >= 30 && op < 45 && (x >> 20) % 2) {
			/* a temporary allocation: freed by the next event,
			 * mostly on the same thread, at times at an address
			 * still live, of a size whose levels wrap, failed, by
			 * a pool function, scaled, or freed by munmap, or
			 * freed by a record whose (unused) size is hostile */
			uint32_t v = (uint32_t)(x >> 32) % 40;
			uint64_t addr = v == 0 && *slot ? *slot : 0x10000 + 64 * (k + 1);

			ev.type = MP_RAW_ALLOC;
			ev.fn = v == 1 ? MP_FN_CUSTOM + 1 : v == 2 ? MP_FN_MMAP : MP_FN_MALLOC;
			ev.addr = v == 3 ? 0 : addr;
			ev.size = v == 4 ? UINT64_MAX - (x >> 56) : v == 5 ? (1ull << 63) : 32;
			if (sample_bytes && v >= 6 && v < 12)
				ev.fn |= MP_LIVE_FN_SCALED;
			both_heap(&a, &b, &c, &ev, stack);
			if (ev.addr == *slot)
				*slot = 0;
			ev = (struct mp_raw_event){ .type = MP_RAW_FREE,
						    .fn = v == 2 ? MP_FN_MUNMAP : MP_FN_FREE,
						    .pid = 1,
						    .tid = v == 6 ? 100 + (th + 1) % 4 : tid,
						    .ts_ns = ++ts,
						    .addr = v == 7 ? addr + 64 : addr,
						    .size = v == 8 ? UINT64_MAX - (x >> 56) : 0,
						    .caller = ev.caller + 16 };
			both_heap(&a, &b, &c, &ev, 0);
			continue;
		}
		if (op < 45) {
			static const uint32_t fns[] = { MP_FN_MALLOC,	      MP_FN_CALLOC,
							MP_FN_POSIX_MEMALIGN, MP_FN_MMAP,
							MP_FN_CUSTOM + 1,     MP_FN_MALLOC };

			ev.type = MP_RAW_ALLOC;
			ev.fn = fns[(x >> 32) % 6];
			/* sometimes an address still live: a missed free */
			ev.addr = (x >> 36) % 16 == 0 && *slot ? *slot : 0x10000 + 64 * (k + 1);
			if ((x >> 50) % 50 == 0)
				ev.addr = 0; /* failed */
			ev.size = (x >> 52) % 3000;
			if (sample_bytes && ev.size < sample_bytes && (x >> 62))
				ev.fn |= MP_LIVE_FN_SCALED;
			both_heap(&a, &b, &c, &ev, stack);
			*slot = ev.addr;
			continue;
		}
		if (op < 80) {
			ev.type = MP_RAW_FREE;
			ev.fn = (x >> 32) % 5 == 0 ? MP_FN_MUNMAP : MP_FN_FREE;
			/* known, unknown or NULL */
			ev.addr = (x >> 36) % 10 == 0 ? 0x900000 + 64 * (x >> 40 & 0xff) :
				  (x >> 36) % 10 == 1 ? 0 :
							*slot;
			if (ev.fn == MP_FN_MUNMAP)
				ev.size = 4096;
			both_heap(&a, &b, &c, &ev, 0);
			if (ev.addr == *slot)
				*slot = 0;
			continue;
		}
		if (op < 95) {
			ev.type = MP_RAW_REALLOC;
			ev.fn = (x >> 32) % 6 == 0 ? MP_FN_MREMAP : MP_FN_REALLOC;
			ev.old_addr = (x >> 36) % 5 == 0 ? 0 : *slot;
			ev.size = (x >> 39) % 4 == 0 ? 0 : (x >> 42) % 5000;
			ev.addr = (x >> 47) % 4 == 0 ? 0 : 0x10000 + 64 * (k + 1);
			if (sample_bytes && ev.size && ev.size < sample_bytes && (x >> 62))
				ev.fn |= MP_LIVE_FN_SCALED;
			both_heap(&a, &b, &c, &ev, stack);
			if (ev.addr)
				*slot = ev.addr;
			continue;
		}
		/* the heap break: up, or down over some of its blocks */
		ev.type = MP_RAW_REALLOC;
		ev.fn = MP_FN_BRK;
		ev.old_addr = brk_top;
		brk_top = (x >> 32) % 3 ? brk_top + 4096 * ((x >> 40) % 4 + 1) :
					  brk_top - 3000 * ((x >> 40) % 3);
		ev.addr = brk_top;
		both_heap(&a, &b, &c, &ev, 0);
	}
	pair_flush(&c);
	mp_live_stats(a.l, &sa);
	mp_live_stats(b.l, &sb);
	mp_live_stats(c.s.l, &sc);
	cr_expect_eq(memcmp(&sa, &sb, sizeof(sa)), 0, "live table statistics differ");
	cr_expect_eq(memcmp(&sa, &sc, sizeof(sa)), 0, "live table statistics differ (pairs)");
	cr_expect_gt(c.pairs, events / 20);
	cr_expect_gt(sa.live_blocks + sa.unknown_frees, 0);
	if (observed)
		cr_expect_gt(b.observed, events / 2);
	mp_live_foreach(a.l, live_cmp_cb, (void *)b.l);
	mp_live_foreach(b.l, live_cmp_cb, (void *)a.l);
	mp_live_foreach(a.l, live_cmp_cb, (void *)c.s.l);
	mp_live_foreach(c.s.l, live_cmp_cb, (void *)a.l);
	cr_assert_eq(mp_correlator_finish(a.c, ts + 1, &pa), 0);
	cr_assert_eq(mp_correlator_finish(b.c, ts + 1, &pb), 0);
	cr_assert_eq(mp_correlator_finish(c.s.c, ts + 1, &pc), 0);
	cr_expect_gt(pa->mem.alloc_count, events / 10);
	cr_expect_gt(pa->n_invocations, 0);
	/* The heap sites at the peak hold at most the peak (these streams
	 * have sites beyond the cap, whose bytes are in no site). */
	uint64_t at_peak = 0;

	for (uint32_t i = 0; i < pa->n_sites; i++)
		if (!pa->sites[i].pool)
			at_peak += pa->sites[i].peak_space;
	cr_expect_leq(at_peak, pa->peak_bytes, "seed %" PRIu64, seed);
	expect_profile_eq(pb, pa);
	expect_profile_eq(pc, pa);
	ja = render(pa, MP_REPORT_JSON, NULL);
	jb = render(pb, MP_REPORT_JSON, NULL);
	jc = render(pc, MP_REPORT_JSON, NULL);
	/* stops at the first stream that differs */
	cr_assert(strcmp(ja, jb) == 0, "seed %" PRIu64 ": the rendered profiles differ", seed);
	cr_assert(strcmp(ja, jc) == 0, "seed %" PRIu64 ": the rendered profiles differ (pairs)",
		  seed);
	free(ja);
	free(jb);
	free(jc);
	mp_profile_free(pa);
	mp_profile_free(pb);
	mp_profile_free(pc);
	mp_correlator_free(a.c);
	mp_correlator_free(b.c);
	mp_correlator_free(c.s.c);
	mp_live_free(a.own);
}

Test(apply_heap, precise_mode_same_profile_as_live_apply_and_on_heap)
{
	for (uint64_t seed = 1; seed <= 20; seed++)
		run_stream(seed * 0x9e3779b97f4a7c15ull, 0, 20000, false);
}

Test(apply_heap, observed_heap_events_same_profile)
{
	for (uint64_t seed = 1; seed <= 4; seed++) {
		run_stream(seed * 0x9e3779b97f4a7c15ull, 0, 20000, true);
		run_stream(seed * 0xc2b2ae3d27d4eb4full, 4096, 20000, true);
	}
}

Test(apply_heap, sampled_mode_same_profile_as_live_apply_and_on_heap)
{
	for (uint64_t seed = 1; seed <= 20; seed++)
		run_stream(seed * 0xc2b2ae3d27d4eb4full, 4096, 20000, false);
}
