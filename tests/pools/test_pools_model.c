/* SPDX-License-Identifier: MIT */
/*
 * Pool accounting on synthetic streams (one nanosecond per event): the
 * correlator's per-pool, per-kernel figures, the renderers, the storage
 * round trip and the --alloc/--free spec parser with the --device presets.
 */
#include <inttypes.h>

#include "../profile/helpers.h"
#include "chrome.h"
#include "pprof.h"
#include "profile.pb-c.h"
#include "profile_pb.h"
#include "tracer.h"

static void pool_rec(struct stream *s, uint32_t type, uint32_t tid, const char *pool, uint32_t kind,
		     uint64_t addr, uint64_t size)
{
	struct mp_record r = {
		.type = type, .tid = tid, .ts_ns = tick(s), .name = pool, .seq = next_seq(s, tid)
	};

	r.pool.kind = kind;
	r.pool.addr = addr;
	r.pool.size = size;
	r.pool.caller = 0x401000;
	cr_assert_eq(mp_correlator_on_record(s->c, &r), 0);
}

#define PA(s, pool, addr, size) \
	pool_rec(s, MP_REC_POOL_ALLOC, 1, pool, MP_POOL_KIND_HOST, addr, size)
#define PF(s, pool, addr) pool_rec(s, MP_REC_POOL_FREE, 1, pool, MP_POOL_KIND_HOST, addr, 0)
#define PR(s, pool) pool_rec(s, MP_REC_POOL_RESET, 1, pool, MP_POOL_KIND_HOST, 0, 0)

/* An arena: a 1 MiB malloc, two inferences of two kernels carving it,
 * reset after each; "inner" nests in "fc". */
static struct mp_profile *arena_profile(void)
{
	struct stream s;
	struct block arena;

	stream_init(&s, NULL);
	kbegin(&s, 1, "load");
	arena = alloc(&s, 1, 1 << 20);
	kend(&s, 1);
	for (int i = 0; i < 2; i++) {
		kbegin(&s, 1, "conv");
		PA(&s, "arena", arena.addr, 1000);
		PA(&s, "arena", arena.addr + 1000, 500);
		PF(&s, "arena", arena.addr + 1000);
		kend(&s, 1);
		kbegin(&s, 1, "fc");
		PA(&s, "arena", arena.addr + 1000, 3000);
		kbegin(&s, 1, "inner");
		PA(&s, "arena", arena.addr + 4000, 24);
		kend(&s, 1);
		kend(&s, 1);
		PR(&s, "arena");
	}
	PF(&s, "arena", 0xdead); /* never handed out */
	return finish(&s);
}

static void expect_bucket(const char *what, const struct mp_pool_bucket *g,
			  const struct mp_pool_bucket *w)
{
	cr_assert_not_null(g, "%s: no bucket", what);
	cr_expect(g->alloc_bytes == w->alloc_bytes && g->alloc_count == w->alloc_count &&
			  g->free_bytes == w->free_bytes && g->free_count == w->free_count &&
			  g->peak_added == w->peak_added && g->peak_bytes == w->peak_bytes &&
			  g->live_end == w->live_end && g->live_count_end == w->live_count_end,
		  "%s: id %u alloc %" PRIu64 "/%" PRIu64 " free %" PRIu64 "/%" PRIu64
		  " peak_added %" PRIu64 " peak %" PRIu64 " end %" PRIu64 "/%" PRIu64,
		  what, g->id, g->alloc_bytes, g->alloc_count, g->free_bytes, g->free_count,
		  g->peak_added, g->peak_bytes, g->live_end, g->live_count_end);
}

#define PB(ab, ac, fb, fc, pa, pk, le, lc)              \
	(&(struct mp_pool_bucket){ .id = 0,             \
				   .alloc_bytes = (ab), \
				   .alloc_count = (ac), \
				   .free_bytes = (fb),  \
				   .free_count = (fc),  \
				   .peak_added = (pa),  \
				   .peak_bytes = (pk),  \
				   .live_end = (le),    \
				   .live_count_end = (lc) })

static void expect_arena(const struct mp_profile *p)
{
	const struct mp_mempool *mp;
	const struct mp_kernel *k;

	/* host view: one 1 MiB block, nothing else */
	cr_expect_eq(p->mem.alloc_bytes, 1 << 20);
	cr_expect_eq(p->mem.alloc_count, 1);
	cr_expect_eq(p->mem.free_count, 0);
	cr_expect_eq(p->peak_bytes, 1 << 20);
	/* pool view */
	cr_assert_eq(p->n_mempools, 1);
	mp = &p->mempools[0];
	cr_expect_str_eq(mp->name, "arena");
	cr_expect_eq(mp->kind, MP_POOL_KIND_HOST);
	cr_expect_eq(mp->source, MP_POOL_SRC_API);
	cr_expect(!memcmp(&mp->mem,
			  &(struct mp_mem_stats){ .alloc_bytes = 2 * 4524,
						  .alloc_count = 8,
						  .free_bytes = 2 * 4524,
						  .free_count = 8 },
			  sizeof(mp->mem)));
	cr_expect_eq(mp->live_bytes, 0);
	cr_expect_eq(mp->live_count, 0);
	cr_expect_eq(mp->peak_bytes, 4024);
	cr_expect_eq(mp->resets, 2);
	cr_expect_eq(mp->unknown_frees, 1);
	/* sites: the heap's one block, and the pool's slices per kernel */
	cr_assert_eq(p->n_sites, 4);
	cr_expect_eq(p->sites[0].pool, 0);
	cr_expect_eq(p->sites[0].alloc_space, 1 << 20);
	for (uint32_t i = 1; i < 4; i++) {
		static const uint64_t space[] = { 0, 3000, 6000, 48 }, objects[] = { 0, 4, 2, 2 };

		cr_expect_eq(p->sites[i].pool, 1, "site %u", i);
		cr_expect_eq(p->sites[i].caller, 0x401000);
		cr_expect_eq(p->sites[i].alloc_space, space[i], "site %u", i);
		cr_expect_eq(p->sites[i].alloc_objects, objects[i], "site %u", i);
		cr_expect_eq(p->sites[i].inuse_space, 0);
		cr_expect_eq(p->sites[i].inuse_objects, 0);
	}
	/* load began before the pool existed: no bucket */
	k = mp_profile_kernel(p, "load");
	cr_expect_eq(k->n_pools, 0);
	cr_expect_eq(k->incl.alloc_bytes, 1 << 20);
	k = mp_profile_kernel(p, "conv");
	expect_bucket("conv", mp_pool_bucket_find(k->pools, k->n_pools, 0),
		      PB(3000, 4, 1000, 2, 1500, 1500, 1000, 1));
	cr_expect_eq(k->incl.alloc_count, 0);
	k = mp_profile_kernel(p, "fc");
	expect_bucket("fc", mp_pool_bucket_find(k->pools, k->n_pools, 0),
		      PB(6048, 4, 0, 0, 3024, 4024, 4024, 3));
	k = mp_profile_kernel(p, "inner");
	expect_bucket("inner", mp_pool_bucket_find(k->pools, k->n_pools, 0),
		      PB(48, 2, 0, 0, 24, 4024, 4024, 3));
	/* per invocation: the second conv began with nothing live */
	cr_assert_eq(p->n_invocations, 7);
	expect_bucket("conv#2",
		      mp_pool_bucket_find(p->invocations[4].pools, p->invocations[4].n_pools, 0),
		      PB(1500, 2, 500, 1, 1500, 1500, 1000, 1));
}

Test(pools_model, arena)
{
	struct mp_profile *p = arena_profile();

	expect_arena(p);
	mp_profile_free(p);
}

/* @p written to memprof.proto and read back. */
static struct mp_profile *round_trip(const struct mp_profile *p)
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

Test(pools_model, storage_round_trip)
{
	struct mp_profile *p = arena_profile(), *q = round_trip(p);

	expect_arena(q);
	for (uint32_t i = 0; i < p->n_invocations; i++) {
		cr_assert_eq(q->invocations[i].n_pools, p->invocations[i].n_pools);
		for (uint32_t b = 0; b < p->invocations[i].n_pools; b++) {
			cr_expect_eq(q->invocations[i].pools[b].id, p->invocations[i].pools[b].id);
			expect_bucket("round trip", &q->invocations[i].pools[b],
				      &p->invocations[i].pools[b]);
		}
	}
	expect_profile_eq(q, p);
	mp_profile_free(p);
	mp_profile_free(q);
}

Test(pools_model, table_json_tfjs)
{
	struct mp_profile *p = arena_profile();
	char *table = render(p, MP_REPORT_TABLE, NULL), *json = render(p, MP_REPORT_JSON, NULL);
	char *tfjs = NULL;
	size_t len = 0;
	FILE *f;

	cr_expect(strstr(table, "\npools (a separate view: slices the program or a device runtime "
				"handed out;\nan arena's backing malloc is counted once, in the "
				"heap figures above)\n"
				"POOL                               KIND    ALLOC_BYTES     "
				"LIVE_BYTES     PEAK_BYTES      NET_BYTES   RESETS\n"
				"arena                              host           9048"
				"              0           4024              0        2\n"),
		  "%s", table);
	cr_expect(strstr(table, "conv                             arena                      "
				"3000           1000           1500           1500\n"),
		  "%s", table);
	cr_expect(strstr(json, "\"pools\": [\n    {\n      \"name\": \"arena\",\n      \"kind\": "
			       "\"host\",\n      \"source\": \"api\",\n"),
		  "%s", json);
	f = open_memstream(&tfjs, &len);
	cr_assert_eq(mp_report_write_pool(p, MP_REPORT_TFJS, "fc#2", "arena", f), 0);
	fclose(f);
	cr_expect_str_eq(tfjs,
			 "{\"newBytes\":3024,\"newTensors\":2,\"peakBytes\":4024,\"kernels\":["
			 "{\"name\":\"inner\",\"bytesAdded\":24,\"totalBytesSnapshot\":4024,"
			 "\"tensorsAdded\":1,\"totalTensorsSnapshot\":3,"
			 "\"inputShapes\":[],\"outputShapes\":[]}]}\n");
	free(tfjs);
	f = open_memstream(&tfjs, &len);
	cr_assert_eq(mp_report_write_pool(p, MP_REPORT_TFJS, NULL, "nope", f), -ESRCH);
	fclose(f);
	free(tfjs);
	free(table);
	free(json);
	mp_profile_free(p);
}

/* One counter track per pool: its live slices at each kernel end. */
Test(pools_model, chrome_counter_track)
{
	struct mp_profile *p = arena_profile();
	char *buf = NULL, *at;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	static const uint64_t want[] = { 0, 1000, 4024, 4024, 1000, 4024, 4024, 0 };
	size_t n = 0;

	cr_assert_eq(mp_chrome_write(p, f), 0);
	fclose(f);
	for (at = buf; (at = strstr(at, "\"name\":\"pool arena (host)\"")); at++) {
		char *live = strstr(at, "\"live\":");

		cr_assert_not_null(live);
		cr_assert_lt(n, sizeof(want) / sizeof(want[0]));
		cr_expect_eq(strtoull(live + 7, NULL, 10), want[n], "point %zu", n);
		n++;
	}
	cr_expect_eq(n, sizeof(want) / sizeof(want[0]));
	free(buf);
	mp_profile_free(p);
}

/* Per phase: the pool's traffic and peak while each phase was current. */
Test(pools_model, phases)
{
	struct stream s;
	struct mp_profile *p;
	const struct mp_phase *load, *inf;

	stream_init(&s, NULL);
	phase(&s, "load");
	PA(&s, "arena", 0x1000, 700); /* stays: live when inference begins */
	PA(&s, "arena", 0x2000, 300);
	PF(&s, "arena", 0x2000);
	phase(&s, "inference");
	for (int i = 0; i < 2; i++) {
		kbegin(&s, 1, "k");
		PA(&s, "arena", 0x3000, 50);
		kend(&s, 1);
		PR(&s, "arena");
	}
	p = finish(&s);
	load = mp_profile_phase(p, "load");
	inf = mp_profile_phase(p, "inference");
	cr_assert_eq(load->n_pools, 1);
	cr_assert_eq(inf->n_pools, 1);
	expect_bucket("load", &load->pools[0], PB(1000, 2, 300, 1, 1000, 1000, 700, 1));
	/* the first reset frees the 700 too: net -650 over the phase */
	expect_bucket("inference", &inf->pools[0], PB(100, 2, 800, 3, 50, 750, 0, 0));
	mp_profile_free(p);
}

/* Blocks of probed pool functions (--alloc ...,pool=) never touch the heap. */
Test(pools_model, probed_functions)
{
	struct stream s;
	struct mp_profile *p;
	struct mp_heap_event ev = { .kind = MP_HEAP_ALLOC, .fn = MP_FN_CUSTOM, .tid = 1 };
	uint64_t user;
	const struct mp_kernel *k;

	stream_init(&s, NULL);
	cr_assert_eq(mp_correlator_set_fn_pool(s.c, MP_FN_CUSTOM, "cuda", MP_POOL_KIND_DEVICE), 0);
	cr_assert_eq(mp_correlator_set_fn_pool(s.c, MP_FN_CUSTOM + 1, "cuda", MP_POOL_KIND_DEVICE),
		     0);
	cr_assert_eq(mp_correlator_set_fn_pool(s.c, 64, "x", MP_POOL_KIND_DEVICE), -EINVAL);
	kbegin(&s, 1, "k");
	ev.ts_ns = tick(&s);
	ev.addr = 0x7000000000;
	ev.size = 1 << 30;
	user = mp_correlator_on_heap(s.c, &ev);
	alloc(&s, 1, 10); /* a host block beside it */
	ev = (struct mp_heap_event){ .kind = MP_HEAP_FREE,
				     .fn = MP_FN_CUSTOM + 1,
				     .tid = 1,
				     .ts_ns = tick(&s),
				     .addr = 0x7000000000,
				     .size = 1 << 30,
				     .user = user };
	mp_correlator_on_heap(s.c, &ev);
	ev = (struct mp_heap_event){
		.kind = MP_HEAP_UNKNOWN_FREE, .fn = MP_FN_CUSTOM + 1, .tid = 1, .ts_ns = tick(&s)
	};
	mp_correlator_on_heap(s.c, &ev);
	kend(&s, 1);
	p = finish(&s);
	cr_expect_eq(p->mem.alloc_bytes, 10);
	cr_expect_eq(p->peak_bytes, 10);
	cr_expect_eq(p->unknown_frees, 0);
	cr_assert_eq(p->n_mempools, 1);
	cr_expect_eq(p->mempools[0].kind, MP_POOL_KIND_DEVICE);
	cr_expect_eq(p->mempools[0].source, MP_POOL_SRC_PROBE);
	cr_expect_eq(p->mempools[0].peak_bytes, 1 << 30);
	cr_expect_eq(p->mempools[0].unknown_frees, 1);
	k = mp_profile_kernel(p, "k");
	expect_bucket("k", mp_pool_bucket_find(k->pools, k->n_pools, 0),
		      PB(1 << 30, 1, 1 << 30, 1, 1 << 30, 1 << 30, 0, 0));
	cr_expect_eq(k->incl.alloc_bytes, 10);
	mp_profile_free(p);
}

Test(pools_model, snapshot_keeps_pools)
{
	struct stream s;
	struct mp_profile *q;

	stream_init(&s, NULL);
	kbegin(&s, 1, "open");
	PA(&s, "arena", 0x1000, 64);
	cr_assert_eq(mp_correlator_snapshot(s.c, tick(&s), &q), 0);
	cr_assert_eq(q->n_mempools, 1);
	cr_expect_eq(q->mempools[0].live_bytes, 64);
	cr_expect_eq(q->kernels[0].n_pools, 1);
	cr_expect_eq(q->kernels[0].pools[0].alloc_bytes, 64);
	mp_profile_free(q);
	mp_profile_free(finish(&s));
}

/* Slices are charged to the tag innermost open on the allocating thread and
 * freed from it, as heap blocks are: weights outside any kernel, act with
 * tmp nested in it inside k, untagged slices of two threads, a free under
 * another tag, and a reset that frees slices of three tags at once. */
static struct mp_profile *tagged_profile(void)
{
	struct stream s;

	stream_init(&s, NULL);
	alloc(&s, 1, 4096); /* the arena's backing block, untagged */
	tag_begin(&s, 1, "weights");
	PA(&s, "arena", 0x1000, 1000);
	tag_end(&s, 1);
	kbegin(&s, 1, "k");
	tag_begin(&s, 1, "act");
	PA(&s, "arena", 0x2000, 300);
	tag_begin(&s, 1, "tmp");
	PA(&s, "arena", 0x3000, 40);
	PF(&s, "arena", 0x3000);
	tag_end(&s, 1);
	PA(&s, "arena", 0x4000, 200);
	tag_end(&s, 1);
	PA(&s, "arena", 0x5000, 7);
	PF(&s, "arena", 0x2000); /* untagged now: still act's */
	kend(&s, 1);
	pool_rec(&s, MP_REC_POOL_ALLOC, 2, "arena", MP_POOL_KIND_HOST, 0x6000, 11);
	kbegin(&s, 1, "r");
	PR(&s, "arena");
	kend(&s, 1);
	return finish(&s);
}

static uint32_t tag_id(const struct mp_profile *p, const char *name)
{
	const struct mp_pool *t = mp_profile_tag(p, name);

	cr_assert_not_null(t, "no tag %s", name);
	return (uint32_t)(t - p->tags);
}

/* Pool 0's figures of tag @tag: allocated/freed bytes and slices, peak. */
static void expect_pool_tag(const struct mp_profile *p, const char *tag, uint64_t ab, uint64_t ac,
			    uint64_t fb, uint64_t fc, uint64_t peak)
{
	const struct mp_pool_tag *t = mp_pool_tag_find(&p->mempools[0], tag_id(p, tag));

	cr_assert_not_null(t, "pool has no tag %s", tag);
	cr_expect(t->mem.alloc_bytes == ab && t->mem.alloc_count == ac && t->mem.free_bytes == fb &&
			  t->mem.free_count == fc && t->peak_bytes == peak &&
			  t->mem.bytes_added == (int64_t)(ab - fb) &&
			  t->mem.tensors_added == (int64_t)(ac - fc) && t->live_bytes == ab - fb &&
			  t->live_count == ac - fc,
		  "tag %s: alloc %" PRIu64 "/%" PRIu64 " free %" PRIu64 "/%" PRIu64 " peak %" PRIu64
		  " live %" PRIu64 "/%" PRIu64,
		  tag, t->mem.alloc_bytes, t->mem.alloc_count, t->mem.free_bytes, t->mem.free_count,
		  t->peak_bytes, t->live_bytes, t->live_count);
}

/* Kernel @kernel's bucket of pool 0 and tag @tag. */
static void expect_kernel_pool_tag(const struct mp_profile *p, const char *kernel, const char *tag,
				   uint64_t ab, uint64_t ac, uint64_t fb, uint64_t fc)
{
	const struct mp_kernel *k = mp_profile_kernel(p, kernel);
	const struct mp_pool_tag_bucket *b;

	cr_assert_not_null(k);
	b = mp_pool_tag_bucket_find(k->pool_tags, k->n_pool_tags, 0, tag_id(p, tag));
	cr_assert_not_null(b, "%s has no bucket of tag %s", kernel, tag);
	cr_expect(b->alloc_bytes == ab && b->alloc_count == ac && b->free_bytes == fb &&
			  b->free_count == fc,
		  "%s/%s: alloc %" PRIu64 "/%" PRIu64 " free %" PRIu64 "/%" PRIu64, kernel, tag,
		  b->alloc_bytes, b->alloc_count, b->free_bytes, b->free_count);
}

static void expect_tagged(const struct mp_profile *p)
{
	const struct mp_kernel *k;

	cr_assert_eq(p->n_mempools, 1);
	cr_assert_eq(p->mempools[0].n_tags, 4);
	/* in order of first sight */
	cr_expect_eq(p->mempools[0].tags[0].tag, tag_id(p, "weights"));
	cr_expect_eq(p->mempools[0].tags[3].tag, MP_TAG_NONE);
	expect_pool_tag(p, "weights", 1000, 1, 1000, 1, 1000);
	expect_pool_tag(p, "act", 500, 2, 500, 2, 500);
	expect_pool_tag(p, "tmp", 40, 1, 40, 1, 40);
	expect_pool_tag(p, "(untagged)", 18, 2, 18, 2, 18);
	/* the heap's tag figures hold heap blocks only */
	cr_expect_eq(p->tags[tag_id(p, "weights")].mem.alloc_count, 0);
	cr_expect_eq(p->tags[tag_id(p, "act")].mem.alloc_count, 0);
	cr_expect_eq(p->tags[MP_TAG_NONE].mem.alloc_bytes, 4096);
	/* per kernel (inclusive), and per invocation */
	k = mp_profile_kernel(p, "k");
	cr_expect_eq(k->n_pool_tags, 3);
	expect_kernel_pool_tag(p, "k", "act", 500, 2, 300, 1);
	expect_kernel_pool_tag(p, "k", "tmp", 40, 1, 40, 1);
	expect_kernel_pool_tag(p, "k", "(untagged)", 7, 1, 0, 0);
	cr_expect_null(
		mp_pool_tag_bucket_find(k->pool_tags, k->n_pool_tags, 0, tag_id(p, "weights")));
	k = mp_profile_kernel(p, "r");
	cr_expect_eq(k->n_pool_tags, 3);
	expect_kernel_pool_tag(p, "r", "weights", 0, 0, 1000, 1);
	expect_kernel_pool_tag(p, "r", "act", 0, 0, 200, 1);
	expect_kernel_pool_tag(p, "r", "(untagged)", 0, 0, 18, 2);
	cr_assert_eq(p->n_invocations, 2);
	cr_expect_eq(p->invocations[0].n_pool_tags, 3);
	/* one call of k: its invocation's breakdown is the kernel's */
	cr_expect(!memcmp(p->invocations[0].pool_tags, mp_profile_kernel(p, "k")->pool_tags,
			  3 * sizeof(*p->invocations[0].pool_tags)));
}

Test(pools_model, tags)
{
	struct mp_profile *p = tagged_profile();

	expect_tagged(p);
	mp_profile_free(p);
}

Test(pools_model, tags_storage_round_trip)
{
	struct mp_profile *p = tagged_profile(), *q = round_trip(p), *c = NULL;

	expect_tagged(q);
	cr_assert_eq(mp_profile_clone(q, &c), 0);
	expect_tagged(c);
	mp_profile_free(p);
	mp_profile_free(q);
	mp_profile_free(c);
}

/* The table's POOL/TAG section and the JSON breakdowns. */
Test(pools_model, tags_table_json)
{
	struct mp_profile *p = tagged_profile();
	char *table = render(p, MP_REPORT_TABLE, NULL), *json = render(p, MP_REPORT_JSON, NULL);

	cr_expect(strstr(table, "\n"
				"POOL                             TAG             "
				"    ALLOC_BYTES     LIVE_BYTES     PEAK_BYTES      NET_BYTES\n"
				"arena                            weights         "
				"           1000              0           1000              0\n"
				"arena                            act             "
				"            500              0            500              0\n"
				"arena                            tmp             "
				"             40              0             40              0\n"
				"arena                            (untagged)      "
				"             18              0             18              0\n\n"),
		  "%s", table);
	/* the pool's tags, then kernel k's pool bucket broken down by tag */
	cr_expect(strstr(json, "\"unknownFrees\": 0,\n      \"tags\": [\n        {\n"
			       "          \"name\": \"weights\",\n          \"slices\": {\n"
			       "            \"bytesAdded\": 0,\n            \"tensorsAdded\": 0,\n"
			       "            \"allocBytes\": 1000,\n"),
		  "%s", json);
	cr_expect(strstr(json, "\"liveCountEnd\": 3,\n          \"tags\": [\n            {\n"
			       "              \"name\": \"act\",\n"
			       "              \"bytesAdded\": 200,\n"
			       "              \"allocBytes\": 500,\n"
			       "              \"allocCount\": 2,\n"
			       "              \"freeBytes\": 300,\n"),
		  "%s", json);
	free(table);
	free(json);
	mp_profile_free(p);
}

/* No slice under a tag: no POOL/TAG section (it would repeat POOL). */
Test(pools_model, no_tags_no_section)
{
	struct mp_profile *p = arena_profile();
	char *table = render(p, MP_REPORT_TABLE, NULL);

	cr_assert_eq(p->mempools[0].n_tags, 1);
	cr_expect_eq(p->mempools[0].tags[0].mem.alloc_bytes, 9048);
	cr_expect_null(strstr(table, " TAG  "), "%s", table);
	free(table);
	mp_profile_free(p);
}

/* A snapshot closes open kernels with their pools' live figures as they are
 * at the snapshot, not as they were when the kernels began; the correlator
 * itself goes on unchanged. "inner" is beyond the invocation cap, so only
 * its kernel aggregate holds it. */
Test(pools_model, snapshot_live_figures_now)
{
	struct mp_correlator_opts o = { .max_invocations = 1 };
	const struct mp_pool_bucket *b;
	struct mp_profile *q, *p;
	struct stream s;

	stream_init(&s, &o);
	phase(&s, "inference");
	PA(&s, "arena", 0x1000, 10);
	kbegin(&s, 1, "outer");
	kbegin(&s, 1, "inner");
	PA(&s, "arena", 0x2000, 64);
	PA(&s, "arena", 0x3000, 36);
	cr_assert_eq(mp_correlator_snapshot(s.c, tick(&s), &q), 0);
	cr_assert_eq(q->n_invocations, 1);
	b = mp_pool_bucket_find(q->invocations[0].pools, q->invocations[0].n_pools, 0);
	expect_bucket("outer (snapshot)", b, PB(100, 2, 0, 0, 100, 110, 110, 3));
	b = mp_pool_bucket_find(q->kernels[0].pools, q->kernels[0].n_pools, 0);
	expect_bucket("outer kernel (snapshot)", b, PB(100, 2, 0, 0, 100, 110, 110, 3));
	b = mp_pool_bucket_find(q->kernels[1].pools, q->kernels[1].n_pools, 0);
	expect_bucket("inner kernel (snapshot)", b, PB(100, 2, 0, 0, 100, 110, 110, 3));
	b = mp_pool_bucket_find(q->phases[0].pools, q->phases[0].n_pools, 0);
	expect_bucket("phase (snapshot)", b, PB(110, 3, 0, 0, 110, 110, 110, 3));
	mp_profile_free(q);
	/* the original: nothing of the snapshot's closing stuck */
	PF(&s, "arena", 0x2000);
	kend(&s, 1);
	kend(&s, 1);
	p = finish(&s);
	b = mp_pool_bucket_find(p->invocations[0].pools, p->invocations[0].n_pools, 0);
	expect_bucket("outer", b, PB(100, 2, 64, 1, 100, 110, 46, 2));
	b = mp_pool_bucket_find(p->kernels[1].pools, p->kernels[1].n_pools, 0);
	expect_bucket("inner", b, PB(100, 2, 64, 1, 100, 110, 46, 2));
	cr_expect_eq(p->kernels[0].calls, 1);
	cr_expect_eq(p->kernels[1].calls, 1);
	mp_profile_free(p);
}

/* A --device preset declares pools the program may never use: the table
 * names them on one line instead of rows of zeros, the Chrome trace has no
 * flat track for them, JSON keeps them with zero figures. */
static struct mp_profile *device_profile(bool use)
{
	struct mp_heap_event ev = {
		.kind = MP_HEAP_ALLOC, .fn = MP_FN_CUSTOM, .tid = 1, .addr = 0x7000, .size = 512
	};
	struct stream s;

	stream_init(&s, NULL);
	cr_assert_eq(mp_correlator_set_fn_pool(s.c, MP_FN_CUSTOM, "cuda", MP_POOL_KIND_DEVICE), 0);
	cr_assert_eq(mp_correlator_set_fn_pool(s.c, MP_FN_CUSTOM + 1, "cuda-managed",
					       MP_POOL_KIND_DEVICE),
		     0);
	cr_assert_eq(
		mp_correlator_set_fn_pool(s.c, MP_FN_CUSTOM + 2, "cuda-host", MP_POOL_KIND_HOST),
		0);
	kbegin(&s, 1, "k");
	if (use) {
		ev.ts_ns = tick(&s);
		mp_correlator_on_heap(s.c, &ev);
	}
	kend(&s, 1);
	return finish(&s);
}

Test(pools_model, unused_pools)
{
	struct mp_profile *p = device_profile(true);
	char *table = render(p, MP_REPORT_TABLE, NULL), *json = render(p, MP_REPORT_JSON, NULL);
	char *trace = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&trace, &len);

	cr_assert_eq(p->n_mempools, 3);
	cr_expect(mp_mempool_used(&p->mempools[0]));
	cr_expect(!mp_mempool_used(&p->mempools[1]));
	cr_expect(!mp_mempool_used(&p->mempools[2]));
	cr_expect(strstr(table, "RESETS\n"
				"cuda                             device            512"
				"            512            512            512        0\n"
				"unused pools (not shown): cuda-managed, cuda-host\n\n"),
		  "%s", table);
	cr_expect_null(strstr(table, "\ncuda-managed "), "%s", table);
	cr_expect(strstr(json, "\"name\": \"cuda-host\",\n      \"kind\": \"host\",\n"
			       "      \"source\": \"probe\",\n      \"slices\": {\n"
			       "        \"bytesAdded\": 0,\n"),
		  "%s", json);
	cr_assert_eq(mp_chrome_write(p, f), 0);
	fclose(f);
	cr_expect(strstr(trace, "\"name\":\"pool cuda (device)\""));
	cr_expect_null(strstr(trace, "pool cuda-managed"));
	cr_expect_null(strstr(trace, "pool cuda-host"));
	free(trace);
	free(table);
	free(json);
	mp_profile_free(p);
	p = device_profile(false);
	table = render(p, MP_REPORT_TABLE, NULL);
	cr_expect(strstr(table, "\npools: none used; declared: cuda, cuda-managed, cuda-host\n"),
		  "%s", table);
	cr_expect_null(strstr(table, "POOL "), "%s", table);
	free(table);
	mp_profile_free(p);
}

/* pprof: pool slices are samples labelled pool=NAME, heap samples have no
 * such label. */
Test(pools_model, pprof_pool_label)
{
	struct mp_profile *p = arena_profile();
	Perftools__Profiles__Profile *m;
	size_t labelled = 0, heap = 0;
	uint8_t *buf;
	size_t len;

	cr_assert_eq(mp_pprof_encode(p, false, &buf, &len), 0);
	m = perftools__profiles__profile__unpack(NULL, len, buf);
	cr_assert_not_null(m);
	cr_assert_eq(m->n_sample, 4);
	for (size_t i = 0; i < m->n_sample; i++) {
		const Perftools__Profiles__Sample *sm = m->sample[i];
		const char *pool = NULL;

		for (size_t l = 0; l < sm->n_label; l++)
			if (!strcmp(m->string_table[sm->label[l]->key], "pool"))
				pool = m->string_table[sm->label[l]->str];
		cr_assert_gt(sm->n_value, 1);
		if (pool) {
			cr_expect_str_eq(pool, "arena");
			labelled++;
		} else {
			cr_expect_eq(sm->value[1], 1 << 20, "heap sample: alloc_space");
			heap++;
		}
	}
	cr_expect_eq(labelled, 3);
	cr_expect_eq(heap, 1);
	perftools__profiles__profile__free_unpacked(m, NULL);
	free(buf);
	mp_profile_free(p);
}

/* Device pools are in no heap or RSS figure: the RSS timeline's heap_live,
 * the heap counter track of the Chrome trace and the process peak leave a
 * 1 GiB device slice out; it has its own track. */
Test(pools_model, device_pools_not_in_heap_or_rss)
{
	struct mp_heap_event ev = { .kind = MP_HEAP_ALLOC,
				    .fn = MP_FN_CUSTOM,
				    .tid = 1,
				    .addr = 0x7000000000,
				    .size = 1 << 30 };
	struct mp_rss_sample smp = { .vm_rss = 4 << 20, .pss = UINT64_MAX };
	struct mp_profile *p;
	struct stream s;
	char *trace = NULL;
	size_t len = 0;
	FILE *f;

	stream_init(&s, NULL);
	cr_assert_eq(mp_correlator_set_fn_pool(s.c, MP_FN_CUSTOM, "cuda", MP_POOL_KIND_DEVICE), 0);
	kbegin(&s, 1, "k");
	alloc(&s, 1, 100);
	ev.ts_ns = tick(&s);
	mp_correlator_on_heap(s.c, &ev);
	smp.ts_ns = tick(&s);
	cr_assert_eq(mp_correlator_on_rss(s.c, &smp), 0);
	kend(&s, 1);
	p = finish(&s);
	cr_assert_eq(p->n_rss, 1);
	cr_expect_eq(p->rss[0].heap_live, 100);
	cr_expect_eq(p->rss[0].vm_rss, 4 << 20);
	cr_expect_eq(p->rss_peak, 4 << 20);
	cr_expect_eq(p->peak_bytes, 100);
	cr_expect_eq(p->kernels[0].peak_bytes, 100);
	cr_expect_eq(p->mempools[0].live_bytes, 1 << 30);
	f = open_memstream(&trace, &len);
	cr_assert_eq(mp_chrome_write(p, f), 0);
	fclose(f);
	cr_expect(strstr(trace, "\"name\":\"heap\""), "%s", trace);
	cr_expect_null(strstr(trace, "\"live\":1073741924"), "%s", trace);
	cr_expect(strstr(trace, "\"name\":\"pool cuda (device)\",\"pid\""), "%s", trace);
	cr_expect(strstr(trace, "\"live\":1073741824"), "%s", trace);
	free(trace);
	mp_profile_free(p);
}

static void expect_func(const char *spec, bool is_free, const struct mp_tracer_func *want)
{
	struct mp_tracer_func f;

	cr_assert_eq(mp_tracer_parse_func(spec, is_free, &f), 0, "%s", spec);
	cr_expect(!strcmp(f.name, want->name) && !strcmp(f.object, want->object) &&
			  f.is_free == want->is_free && f.arg == want->arg && f.ptr == want->ptr &&
			  f.ptr_arg == want->ptr_arg && f.ok == want->ok &&
			  !strcmp(f.pool, want->pool) && f.pool_kind == want->pool_kind &&
			  f.optional == want->optional,
		  "%s: name %s object %s arg %u ptr %u/%u ok %u "
		  "pool %s/%u",
		  spec, f.name, f.object, f.arg, f.ptr, f.ptr_arg, f.ok, f.pool, f.pool_kind);
}

Test(pools_model, spec_parser)
{
	static const char *const bad[] = {
		"f:size=arg1,ok=ret==0", /* without pool: posix_memalign's shape only */
		"f:size=arg1,ptr=*arg0",
		"f:ptr=*arg0,size=arg1,pool=p,pool=q", /* twice */
		"f:size=arg1,pool=",
		"f:size=arg1,pool=a b",
		"f:size=arg1,kind=device",
		"f:size=arg1,pool=p,kind=gpu",
		"f:size=arg1,ok=ret<0,pool=p",
		"f:size=arg6,pool=p",
		"f:ptr=**arg0,size=arg1,pool=p",
		"f:ptr=*arg0,pool=p", /* no size */
		"f:size=arg1,",
		"f:size=arg1,bogus=1",
		":size=arg1",
		"f@:size=arg1",
		"f",
		"f:size=arg1,ptr=arg0,pool=p",
	};
	struct mp_tracer_func f;
	struct mp_tracer_func want = { .arg = 1,
				       .ptr = MP_FUNC_PTR_OUT,
				       .ptr_arg = 0,
				       .ok = MP_FUNC_OK_ZERO,
				       .pool = "cuda",
				       .pool_kind = MP_POOL_KIND_DEVICE };

	strcpy(want.name, "cudaMalloc");
	strcpy(want.object, "libcudart.so*");
	expect_func("cudaMalloc@libcudart.so*:ptr=*arg0,size=arg1,ok=ret==0,pool=cuda", false,
		    &want);
	want = (struct mp_tracer_func){ .is_free = true,
					.ok = MP_FUNC_OK_ZERO,
					.pool = "cuda",
					.pool_kind = MP_POOL_KIND_DEVICE };
	strcpy(want.name, "cudaFree");
	strcpy(want.object, "libcudart.so*");
	expect_func("cudaFree@libcudart.so*:ptr=arg0,ok=ret==0,pool=cuda", true, &want);
	want = (struct mp_tracer_func){ .arg = 2,
					.ptr = MP_FUNC_PTR_RET,
					.ok = MP_FUNC_OK_ANY,
					.pool = "npu.0",
					.pool_kind = MP_POOL_KIND_HOST };
	strcpy(want.name, "npu_alloc");
	expect_func("npu_alloc:size=arg2,ptr=ret,kind=host,pool=npu.0", false, &want);
	/* posix_memalign's shape on the heap */
	want = (struct mp_tracer_func){
		.arg = 2, .ptr = MP_FUNC_PTR_OUT, .ptr_arg = 0, .ok = MP_FUNC_OK_ZERO
	};
	strcpy(want.name, "my_memalign");
	expect_func("my_memalign:ptr=*arg0,size=arg2,ok=ret==0", false, &want);
	/* the plain forms are unchanged */
	want = (struct mp_tracer_func){ .arg = 2 };
	strcpy(want.name, "xnn_allocate_memory");
	strcpy(want.object, "libXNNPACK.so");
	expect_func("xnn_allocate_memory@libXNNPACK.so:size=arg2", false, &want);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		cr_expect_eq(mp_tracer_parse_func(bad[i], false, &f), -EINVAL, "%s", bad[i]);
	cr_expect_eq(mp_tracer_parse_func("f:ptr=*arg0,pool=p", true, &f), -EINVAL);
	cr_expect_eq(mp_tracer_parse_func("f:ptr=ret,pool=p", true, &f), -EINVAL);
	cr_expect_eq(mp_tracer_parse_func("f:size=arg0,ptr=arg0,pool=p", true, &f), -EINVAL);
	cr_expect_eq(mp_tracer_parse_func("f:ptr=arg0,ok=ret==0", true, &f), -EINVAL);
}

Test(pools_model, device_presets)
{
	const struct mp_tracer_func *fs;
	size_t n;
	bool seen_v2 = false;

	cr_assert_eq(mp_tracer_device_preset("cuda", &fs, &n), 0);
	cr_assert_eq(n, 14);
	for (size_t i = 0; i < n; i++) {
		cr_expect(fs[i].optional && fs[i].pool[0] && fs[i].ok == MP_FUNC_OK_ZERO, "%s",
			  fs[i].name);
		if (!strcmp(fs[i].name, "cuMemAlloc_v2")) {
			seen_v2 = true;
			cr_expect_eq(fs[i].ptr, MP_FUNC_PTR_OUT);
			cr_expect_eq(fs[i].arg, 1);
			cr_expect_str_eq(fs[i].object, "libcuda.so*");
		}
	}
	cr_expect(seen_v2);
	cr_assert_eq(mp_tracer_device_preset("hip", &fs, &n), 0);
	cr_assert_eq(n, 7);
	cr_expect_str_eq(fs[0].name, "hipMalloc");
	cr_expect_eq(mp_tracer_device_preset("opencl", &fs, &n), -EINVAL);
	cr_expect_eq(mp_tracer_device_preset(NULL, &fs, &n), -EINVAL);
}
