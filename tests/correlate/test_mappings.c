/* SPDX-License-Identifier: MIT */
/*
 * Anonymous mappings (mmap, mremap, munmap) through the live table and the
 * correlator, as both paths feed them: a view apart from the heap. Every
 * heap figure holds the malloc family alone; the mapping figures hold the
 * reserved bytes, per kernel, phase, owner and tag, across mremap growth
 * and shrinking, partial munmap and mappings made over others.
 */
#include <inttypes.h>

#include "../profile/helpers.h"
#include "live.h"
#include "profile_pb.h"

#define U MP_UNKNOWN
#define MAPPER 0x7f0000001100ull /* a caller in "libmapper.so" */
#define A 0x7f0000100000ull
#define B 0x7f0000200000ull
#define C 0x7f0000300000ull

static const char *resolve(void *ctx, uint64_t addr)
{
	(void)ctx;
	if (addr >= 0x7f0000001000 && addr < 0x7f0000002000)
		return "/usr/lib/libmapper.so";
	return NULL;
}

static void raw(struct stream *s, uint32_t type, uint32_t fn, uint64_t addr, uint64_t size,
		uint64_t old_addr, uint64_t caller)
{
	struct mp_raw_event ev = { .type = type,
				   .fn = fn,
				   .pid = 1,
				   .tid = 1,
				   .ts_ns = tick(s),
				   .addr = addr,
				   .size = size,
				   .old_addr = old_addr,
				   .caller = caller };

	cr_assert_eq(mp_correlator_apply_heap(s->c, &ev, 0), 0);
}

static void rss_anon(struct stream *s, uint64_t anon)
{
	struct mp_rss_sample smp = { .ts_ns = tick(s),
				     .vm_rss = anon + 4096,
				     .rss_anon = anon,
				     .rss_file = 4096,
				     .rss_shmem = 0,
				     .vm_hwm = anon + 4096,
				     .vm_swap = 0,
				     .pss = U };

	cr_assert_eq(mp_correlator_on_rss(s->c, &smp), 0);
}

#define MAPS(ab, ac, fb, fc, live, peak)                                                          \
	(struct mp_map_stats)                                                                     \
	{                                                                                         \
		.alloc_bytes = (ab), .alloc_count = (ac), .free_bytes = (fb), .free_count = (fc), \
		.live_bytes = (live), .peak_bytes = (peak)                                        \
	}

Test(mappings, apart_from_the_heap)
{
	struct mp_correlator_opts o = { .resolve_owner = resolve };
	struct mp_live_stats ls;
	struct mp_profile *p;
	struct stream s;

	stream_init(&s, &o);
	phase(&s, "load");
	kbegin(&s, 1, "k1");
	tag_begin(&s, 1, "weights");
	raw(&s, MP_RAW_ALLOC, MP_FN_MALLOC, 0x5000, 100, 0, 0);
	raw(&s, MP_RAW_ALLOC, MP_FN_MMAP, A, 32768, 0, MAPPER);
	/* grown and moved: the old length released, the new one mapped */
	raw(&s, MP_RAW_REALLOC, MP_FN_MREMAP, B, 65536, A, MAPPER);
	/* a hole in the middle: two mappings are left */
	raw(&s, MP_RAW_FREE, MP_FN_MUNMAP, B + 16384, 16384, 0, MAPPER);
	/* a file mapping (never seen made): nothing */
	raw(&s, MP_RAW_FREE, MP_FN_MUNMAP, 0x7f0000900000, 4096, 0, MAPPER);
	rss_anon(&s, 20000);
	tag_end(&s, 1);
	kend(&s, 1);
	kbegin(&s, 1, "k2");
	/* one munmap over both pieces */
	raw(&s, MP_RAW_FREE, MP_FN_MUNMAP, B, 65536, 0, MAPPER);
	raw(&s, MP_RAW_ALLOC, MP_FN_MMAP, C, 8192, 0, MAPPER);
	/* shrunk in place */
	raw(&s, MP_RAW_REALLOC, MP_FN_MREMAP, C, 4096, C, MAPPER);
	kend(&s, 1);
	rss_anon(&s, 1ull << 30);
	raw(&s, MP_RAW_FREE, MP_FN_FREE, 0x5000, 0, 0, 0);
	mp_live_stats(mp_correlator_live(s.c), &ls);
	cr_expect_eq(ls.ignored, 1, "the file mapping's munmap is ignored");
	cr_expect_eq(ls.live_blocks, 1, "the shrunk mapping is live");
	cr_expect_eq(ls.live_bytes, 4096);
	p = finish(&s);

	/* the heap: the malloc alone */
	struct mp_mem_stats heap = {
		.alloc_bytes = 100, .alloc_count = 1, .free_bytes = 100, .free_count = 1
	};
	expect_mem_eq("profile.mem", &p->mem, &heap);
	cr_expect_eq(p->peak_bytes, 100);
	cr_expect_eq(p->peak_tensors, 1);
	cr_expect_eq(p->accounting_errors, 0);
	cr_assert_eq(p->n_kernels, 2);
	cr_expect_eq(p->kernels[0].incl.alloc_bytes, 100);
	cr_expect_eq(p->kernels[0].incl.free_bytes, 0);
	cr_expect_eq(p->kernels[0].peak_bytes, 100);
	cr_expect_eq(p->kernels[1].incl.alloc_count, 0);
	cr_expect_eq(p->kernels[1].incl.free_count, 0);
	cr_expect_eq(p->kernels[1].peak_bytes, 100);
	cr_expect_eq(p->phases[0].peak_bytes, 100);
	cr_assert_eq(p->n_owners, 2);
	cr_expect_str_eq(p->owners[1].name, "libmapper.so");
	cr_expect_eq(p->owners[0].mem.alloc_bytes, 100);
	cr_expect_eq(p->owners[0].peak_bytes, 100);
	cr_expect_eq(p->owners[1].mem.alloc_count, 0, "no heap figure of the mapper");
	cr_expect_eq(p->owners[1].peak_bytes, 0);
	cr_assert_eq(p->n_tags, 2);
	cr_expect_eq(p->tags[1].mem.alloc_bytes, 100);
	cr_expect_eq(p->tags[1].peak_bytes, 100);
	cr_expect_eq(p->tags[0].mem.alloc_count, 0);
	for (uint32_t i = 0; i < p->n_sites; i++)
		cr_expect_neq(p->sites[i].caller, MAPPER, "a mapping has no heap site");

	/* the mappings: 32768, +65536 -32768, -65536 +16384 +32768 in k1;
	 * -16384 -32768, +8192, -8192 +4096 in k2 */
	expect_maps_eq("profile.maps", &p->maps, &MAPS(159744, 6, 155648, 5, 4096, 65536));
	expect_maps_eq("invocations[0].maps", &p->invocations[0].maps,
		       &MAPS(147456, 4, 98304, 2, 49152, 65536));
	expect_maps_eq("invocations[1].maps", &p->invocations[1].maps,
		       &MAPS(12288, 2, 57344, 3, 4096, 49152));
	expect_maps_eq("kernels[0].maps", &p->kernels[0].maps,
		       &MAPS(147456, 4, 98304, 2, 49152, 65536));
	expect_maps_eq("kernels[1].maps", &p->kernels[1].maps,
		       &MAPS(12288, 2, 57344, 3, 4096, 49152));
	expect_maps_eq("phases[0].maps", &p->phases[0].maps,
		       &MAPS(159744, 6, 155648, 5, 4096, 65536));
	expect_maps_eq("owners[0].maps", &p->owners[0].maps, &MAPS(0, 0, 0, 0, 0, 0));
	expect_maps_eq("owners[1].maps", &p->owners[1].maps,
		       &MAPS(159744, 6, 155648, 5, 4096, 65536));
	/* a mapping's release goes to the tag of its making */
	expect_maps_eq("tags[1].maps", &p->tags[1].maps, &MAPS(147456, 4, 147456, 4, 0, 65536));
	expect_maps_eq("tags[0].maps", &p->tags[0].maps, &MAPS(12288, 2, 8192, 1, 4096, 8192));
	/* resident: at most the lesser of the reserved bytes and RssAnon */
	cr_expect_eq(p->maps_resident_peak, 20000);
	cr_assert_eq(p->n_rss, 2);
	cr_expect_eq(p->rss[0].maps_live, 49152);
	cr_expect_eq(p->rss[1].maps_live, 4096);
	cr_expect_eq(p->rss[0].heap_live, 100);

	assert_report_has(
		p, MP_REPORT_TABLE,
		"heap: new 0 B in 0 blocks, peak 100 B, allocated 100 B in 1 blocks",
		"mappings: reserved peak 65536 B, live 4096 B, mapped 159744 B in 6, "
		"unmapped 155648 B in 5; resident peak <= 20000 B",
		"k1                                       147456          98304          "
		"49152          49152          65536",
		"libmapper.so                             159744         155648           "
		"4096           4096          65536");
	assert_report_has(p, MP_REPORT_JSON, "\"anonMapsResidentPeak\": 20000",
			  "\"mappedBytes\": 159744", "\"anonMapsLive\": 49152");
	mp_profile_free(p);
}

/* The file keeps every mapping figure. */
Test(mappings, proto_round_trip)
{
	struct mp_correlator_opts o = { .resolve_owner = resolve };
	struct mp_profile *p, *q = NULL;
	const char *why = NULL;
	struct stream s;
	uint8_t *buf;
	size_t len;

	stream_init(&s, &o);
	phase(&s, "load");
	kbegin(&s, 1, "k1");
	raw(&s, MP_RAW_ALLOC, MP_FN_MMAP, A, 8192, 0, MAPPER);
	rss_anon(&s, 4096);
	kend(&s, 1);
	p = finish(&s);
	cr_assert_eq(mp_profile_encode(p, &buf, &len), 0);
	cr_assert_eq(mp_profile_decode(buf, len, &q, &why), 0, "%s", why);
	expect_profile_eq(q, p);
	cr_expect_eq(q->maps_resident_peak, 4096);
	cr_expect(q->maps_recorded);
	expect_maps_eq("decoded maps", &q->maps, &MAPS(8192, 1, 0, 0, 8192, 8192));
	free(buf);
	mp_profile_free(p);
	mp_profile_free(q);
}

static void live_apply(struct mp_live *l, uint32_t type, uint32_t fn, uint64_t addr, uint64_t size,
		       uint64_t old_addr)
{
	struct mp_raw_event ev = {
		.type = type, .fn = fn, .tid = 1, .addr = addr, .size = size, .old_addr = old_addr
	};

	cr_assert_eq(mp_live_apply(l, &ev, NULL, NULL), 0);
}

/* A mapping made over others (MAP_FIXED) replaces what it covers; a
 * munmap releases whole pages, of every mapping its range touches. */
Test(mappings, fixed_and_ranges)
{
	struct mp_live_block b;
	struct mp_live_stats st;
	struct mp_live *l;

	cr_assert_eq(mp_live_new(&l), 0);
	live_apply(l, MP_RAW_ALLOC, MP_FN_MMAP, A, 16384, 0);
	live_apply(l, MP_RAW_ALLOC, MP_FN_MMAP, A + 4096, 4096, 0);
	mp_live_stats(l, &st);
	cr_expect_eq(st.live_blocks, 3);
	cr_expect_eq(st.live_bytes, 16384);
	cr_expect_eq(mp_live_lookup(l, A, &b), 0);
	cr_expect_eq(b.size, 4096);
	cr_expect_eq(mp_live_lookup(l, A + 8192, &b), 0);
	cr_expect_eq(b.size, 8192);
	/* a range over all three, starting before them, ending inside the last */
	live_apply(l, MP_RAW_FREE, MP_FN_MUNMAP, A - 4096, 16384, 0);
	mp_live_stats(l, &st);
	cr_expect_eq(st.live_blocks, 1);
	cr_expect_eq(st.live_bytes, 4096);
	cr_expect_eq(mp_live_lookup(l, A + 12288, &b), 0);
	cr_expect_eq(b.size, 4096);
	/* a heap block is never a mapping's: munmap leaves it */
	live_apply(l, MP_RAW_ALLOC, MP_FN_MALLOC, A + 0x100000, 64, 0);
	live_apply(l, MP_RAW_FREE, MP_FN_MUNMAP, A + 0x100000, 4096, 0);
	mp_live_stats(l, &st);
	cr_expect_eq(st.live_blocks, 2);
	cr_expect_eq(st.ignored, 1);
	/* the last page's remainder of a length not page-sized goes too */
	live_apply(l, MP_RAW_ALLOC, MP_FN_MMAP, B, 5000, 0);
	live_apply(l, MP_RAW_FREE, MP_FN_MUNMAP, B + 4096, 4096, 0);
	cr_expect_eq(mp_live_lookup(l, B, &b), 0);
	cr_expect_eq(b.size, 4096);
	mp_live_free(l);
}

/* A hostile stream: a block recorded as a mapping without the release of
 * what it covers (an ALLOC named munmap) leaves mappings that overlap, and
 * one span outlives its block. A munmap over them ends, and releases only
 * the mapping that is there. */
Test(mappings, overlapping_spans_end, .timeout = 10)
{
	struct mp_live_block b;
	struct mp_live_stats st;
	struct mp_live *l;

	cr_assert_eq(mp_live_new(&l), 0);
	live_apply(l, MP_RAW_ALLOC, MP_FN_MMAP, A, 8192, 0);
	/* over the first's start, not releasing it */
	live_apply(l, MP_RAW_ALLOC, MP_FN_MUNMAP, A - 4096, 8192, 0);
	/* a smaller one where the first was, its span found by neither */
	live_apply(l, MP_RAW_ALLOC, MP_FN_MUNMAP, A, 4096, 0);
	/* the first's second page, where no block is any more */
	live_apply(l, MP_RAW_FREE, MP_FN_MUNMAP, A + 4096, 4096, 0);
	cr_expect_eq(mp_live_lookup(l, A, &b), 0);
	cr_expect_eq(b.size, 4096);
	live_apply(l, MP_RAW_FREE, MP_FN_MUNMAP, A - 4096, 3 * 4096, 0);
	mp_live_stats(l, &st);
	cr_expect_eq(st.live_blocks, 0);
	cr_expect_eq(st.live_bytes, 0);
	mp_live_free(l);
}
