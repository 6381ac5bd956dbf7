// SPDX-License-Identifier: MIT
/*
 * Who held the peak (docs/PROFILE.md "Who held the peak"): the bytes each
 * owner and each tag held when the process heap, and each phase's, first
 * reached its peak. The correlator keeps them by version counters (a new
 * peak costs nothing per owner); these tests hold it to a reference that
 * copies every owner's and tag's live bytes at every new peak.
 */
#include <inttypes.h>

#include "../profile/helpers.h"
#include "memprof.pb-c.h"
#include "profile_pb.h"

static const char *lib_of(void *ctx, uint64_t addr)
{
	static const char *libs[] = { "/usr/lib/x86_64-linux-gnu/libtorch_cpu.so.1.13",
				      "/usr/lib/x86_64-linux-gnu/libXNNPACK.so.0",
				      "/usr/lib/x86_64-linux-gnu/libc10.so.1.13",
				      "/usr/bin/python3.11", NULL };

	(void)ctx;
	return addr >= 0x400000 ? libs[((addr - 0x400000) >> 4) % 5] : NULL;
}

/* The caller address of library @i of lib_of() (4: none). */
static uint64_t caller_in(uint32_t i)
{
	return 0x400000 + 16 * i;
}

/* The sum of @n parts. */
static uint64_t parts_sum(const struct mp_peak_part *v, uint32_t n)
{
	uint64_t s = 0;

	for (uint32_t i = 0; i < n; i++)
		s += v[i].bytes;
	return s;
}

static uint64_t shares_sum(const struct mp_pool *v, uint32_t n)
{
	uint64_t s = 0;

	for (uint32_t i = 0; i < n; i++)
		s += v[i].peak_share;
	return s;
}

/* The parts of @p's phase @name, as "owner=bytes owner=bytes". */
static void parts_text(const struct mp_profile *p, const struct mp_pool *pools,
		       const struct mp_peak_part *v, uint32_t n, char *buf, size_t len)
{
	size_t off = 0;

	buf[0] = 0;
	for (uint32_t i = 0; i < n && off < len; i++)
		off += snprintf(buf + off, len - off, "%s%s=%" PRIu64, i ? " " : "",
				pools[v[i].id].name, v[i].bytes);
	(void)p;
}

/* The ExecuTorch questions on a small stream: a load phase whose peak is
 * held by the framework's weights and a temporary of the delegate, an
 * inference phase whose peak is held by weights, activations and the
 * delegate's scratch. */
static struct mp_profile *by_hand(void)
{
	struct mp_correlator_opts o = { .resolve_owner = lib_of };
	struct stream s;
	struct block w, t, a, x, x2;

	stream_init(&s, &o);
	cr_assert_eq(mp_correlator_add_owner_rule(s.c, "libtorch*=framework"), 0);
	cr_assert_eq(mp_correlator_add_owner_rule(s.c, "libc10*=framework"), 0);
	cr_assert_eq(mp_correlator_add_owner_rule(s.c, "libXNNPACK*=delegate:xnnpack"), 0);
	phase(&s, "load");
	tag_begin(&s, 1, "weights");
	w = alloc_from(&s, 1, 6000, caller_in(0)); /* framework */
	alloc_from(&s, 1, 1000, caller_in(2)); /* libc10: framework too */
	tag_end(&s, 1);
	t = alloc_from(&s, 1, 3000, caller_in(1)); /* load peak 10000 */
	release(&s, 1, &t);
	alloc_from(&s, 1, 500, caller_in(3)); /* python, 7500 */
	phase(&s, "inference");
	tag_begin(&s, 1, "activations");
	a = alloc_from(&s, 1, 2000, caller_in(0)); /* 9500 */
	x = alloc_from(&s, 1, 1500, caller_in(1)); /* 11000 */
	release(&s, 1, &a); /* 9000 */
	x2 = alloc_from(&s, 1, 2500, caller_in(1)); /* 11500: inference and process peak */
	release(&s, 1, &x);
	release(&s, 1, &x2);
	tag_end(&s, 1);
	release(&s, 1, &w); /* 1500 */
	phase(&s, "load");
	alloc_from(&s, 1, 100, caller_in(3)); /* load re-entered below its peak */
	return finish(&s);
}

/* Every figure of by_hand() written out by hand. */
Test(peak_parts, load_and_inference_by_hand)
{
	struct mp_profile *p = by_hand();
	char buf[512];

	cr_assert(p->peak_parts);
	cr_assert_eq(p->peak_bytes, 11500);
	cr_assert_eq(p->n_owners, 4, "%u owners", p->n_owners);
	/* (unknown), framework, delegate:xnnpack, python3.11 */
	cr_expect_str_eq(p->owners[1].name, "framework");
	cr_expect_str_eq(p->owners[2].name, "delegate:xnnpack");
	cr_expect_str_eq(p->owners[3].name, "python3.11");
	cr_expect_eq(p->owners[0].peak_share, 0);
	cr_expect_eq(p->owners[1].peak_share, 7000);
	cr_expect_eq(p->owners[2].peak_share, 4000);
	cr_expect_eq(p->owners[3].peak_share, 500);
	/* (untagged), weights, activations */
	cr_expect_eq(p->tags[0].peak_share, 500);
	cr_expect_eq(p->tags[1].peak_share, 7000);
	cr_expect_eq(p->tags[2].peak_share, 4000);

	const struct mp_phase *ld = mp_profile_phase(p, "load"),
			      *inf = mp_profile_phase(p, "inference");

	cr_assert(ld && inf);
	cr_expect_eq(ld->peak_bytes, 10000);
	parts_text(p, p->owners, ld->peak_owners, ld->n_peak_owners, buf, sizeof(buf));
	cr_expect_str_eq(buf, "framework=7000 delegate:xnnpack=3000");
	parts_text(p, p->tags, ld->peak_tags, ld->n_peak_tags, buf, sizeof(buf));
	cr_expect_str_eq(buf, "(untagged)=3000 weights=7000");
	cr_expect_eq(inf->peak_bytes, 11500);
	parts_text(p, p->owners, inf->peak_owners, inf->n_peak_owners, buf, sizeof(buf));
	cr_expect_str_eq(buf, "framework=7000 delegate:xnnpack=4000 python3.11=500");
	parts_text(p, p->tags, inf->peak_tags, inf->n_peak_tags, buf, sizeof(buf));
	cr_expect_str_eq(buf, "(untagged)=500 weights=7000 activations=4000");
	mp_profile_free(p);
}

/* A phase entered with more live than its peak so far reaches its peak at
 * the entry: what was live then is its breakdown. */
Test(peak_parts, peak_at_phase_entry)
{
	struct mp_correlator_opts o = { .resolve_owner = lib_of };
	struct stream s;
	struct mp_profile *p;
	struct block b;
	char buf[256];

	stream_init(&s, &o);
	alloc_from(&s, 1, 300, caller_in(0));
	b = alloc_from(&s, 1, 200, caller_in(1));
	phase(&s, "inference"); /* peak 500 at the entry */
	release(&s, 1, &b);
	alloc_from(&s, 1, 100, caller_in(3)); /* 400 */
	p = finish(&s);
	parts_text(p, p->owners, p->phases[0].peak_owners, p->phases[0].n_peak_owners, buf,
		   sizeof(buf));
	cr_expect_str_eq(buf, "libtorch_cpu.so.1.13=300 libXNNPACK.so.0=200");
	cr_expect_eq(p->phases[0].peak_bytes, 500);
	mp_profile_free(p);
}

/* 13 libraries, lib00.so to lib12.so, one per page. */
static const char *many_libs(void *ctx, uint64_t addr)
{
	static char path[32];

	(void)ctx;
	snprintf(path, sizeof(path), "/lib/lib%02u.so", (unsigned)(addr / 0x1000 - 1));
	return path;
}

/* A reference model: every owner's and tag's live bytes, copied at each new
 * peak of the process and of the current phase. */
#define REF_POOLS 8
#define REF_PHASES 3
struct ref {
	uint64_t live, peak, own[REF_POOLS], tag[REF_POOLS];
	uint64_t peak_own[REF_POOLS], peak_tag[REF_POOLS];
	uint64_t ph_peak[REF_PHASES], ph_own[REF_PHASES][REF_POOLS], ph_tag[REF_PHASES][REF_POOLS];
	int phase; /* -1: none */
};

/* A new level @lvl (live, or live + a temporary block of @size of owner
 * @o and tag @t). */
static void ref_level(struct ref *r, uint64_t lvl, uint32_t o, uint32_t t, uint64_t size)
{
	if (lvl > r->peak) {
		r->peak = lvl;
		memcpy(r->peak_own, r->own, sizeof(r->own));
		memcpy(r->peak_tag, r->tag, sizeof(r->tag));
		r->peak_own[o] += size;
		r->peak_tag[t] += size;
	}
	if (r->phase >= 0 && lvl > r->ph_peak[r->phase]) {
		r->ph_peak[r->phase] = lvl;
		memcpy(r->ph_own[r->phase], r->own, sizeof(r->own));
		memcpy(r->ph_tag[r->phase], r->tag, sizeof(r->tag));
		r->ph_own[r->phase][o] += size;
		r->ph_tag[r->phase][t] += size;
	}
}

struct live_blk {
	uint64_t addr, size;
	uint32_t owner, tag;
};

/* The index in @p of owner @name (lib_of()'s base names), or MP_NONE. */
static uint32_t owner_ix(const struct mp_profile *p, const char *name)
{
	for (uint32_t i = 0; i < p->n_owners; i++)
		if (!strcmp(p->owners[i].name, name))
			return i;
	return MP_NONE;
}

static uint32_t tag_ix(const struct mp_profile *p, const char *name)
{
	for (uint32_t i = 0; i < p->n_tags; i++)
		if (!strcmp(p->tags[i].name, name))
			return i;
	return MP_NONE;
}

static uint64_t lcg(uint64_t *x)
{
	*x = *x * 6364136223846793005ull + 1442695040888963407ull;
	return *x >> 33;
}

/* A phase's (or the process's) parts in @p against the reference's
 * vectors: each owner and tag by name, none extra, summing to @peak. */
static void expect_parts(const struct mp_profile *p, const char *what,
			 const struct mp_peak_part *po, uint32_t npo, const struct mp_peak_part *pt,
			 uint32_t npt, const uint64_t *own, const uint64_t *tag, uint64_t peak)
{
	static const char *onames[] = { "(unknown)", "framework", "delegate:xnnpack",
					"python3.11" };
	static const char *tnames[] = { "(untagged)", "weights", "activations" };
	uint32_t nonzero = 0;

	for (uint32_t k = 0; k < 4; k++) {
		uint32_t id = owner_ix(p, onames[k]);
		uint64_t got = 0;

		for (uint32_t i = 0; i < npo && id != MP_NONE; i++)
			if (po[i].id == id)
				got = po[i].bytes;
		cr_expect_eq(got, own[k], "%s: owner %s %" PRIu64 ", want %" PRIu64, what,
			     onames[k], got, own[k]);
		nonzero += own[k] != 0;
	}
	cr_expect_eq(npo, nonzero, "%s: %u owners, want %u", what, npo, nonzero);
	nonzero = 0;
	for (uint32_t k = 0; k < 3; k++) {
		uint32_t id = tag_ix(p, tnames[k]);
		uint64_t got = 0;

		for (uint32_t i = 0; i < npt && id != MP_NONE; i++)
			if (pt[i].id == id)
				got = pt[i].bytes;
		cr_expect_eq(got, tag[k], "%s: tag %s %" PRIu64 ", want %" PRIu64, what, tnames[k],
			     got, tag[k]);
		nonzero += tag[k] != 0;
	}
	cr_expect_eq(npt, nonzero, "%s: %u tags, want %u", what, npt, nonzero);
	cr_expect_eq(parts_sum(po, npo), peak, "%s: owners sum to %" PRIu64 ", peak %" PRIu64, what,
		     parts_sum(po, npo), peak);
	cr_expect_eq(parts_sum(pt, npt), peak, "%s: tags sum to %" PRIu64 ", peak %" PRIu64, what,
		     parts_sum(pt, npt), peak);
}

/* The process's parts as a phase's are (owners and tags with bytes). */
static uint32_t shares_as_parts(const struct mp_pool *v, uint32_t n, struct mp_peak_part *out)
{
	uint32_t k = 0;

	for (uint32_t i = 0; i < n; i++)
		if (v[i].peak_share)
			out[k++] = (struct mp_peak_part){ .id = i, .bytes = v[i].peak_share };
	return k;
}

/* A random stream (allocations through the live table, frees, temporary
 * pairs, tags, phases entered, re-entered and ended) against the
 * reference; with @snap_every, snapshots along the way, each against the
 * reference at that moment. */
static void random_stream(uint64_t seed, uint32_t events, uint32_t snap_every)
{
	static const char *pnames[] = { "load", "inference", "teardown" };
	static const char *tnames[] = { NULL, "weights", "activations" };
	/* owner of lib_of() library i: framework, delegate, framework, python, unknown */
	static const uint32_t owner_of_lib[] = { 1, 2, 1, 3, 0 };
	struct mp_correlator_opts o = { .resolve_owner = lib_of };
	enum { NBLK = 2048 };
	struct live_blk *blk = calloc(NBLK, sizeof(*blk));
	struct ref ref = { .phase = -1 };
	uint32_t nblk = 0, cur_tag = 0, snaps = 0;
	uint64_t x = seed, ts = 1000, next_addr = 0x100000;
	struct stream s;
	struct mp_profile *p;

	cr_assert(blk);
	stream_init(&s, &o);
	cr_assert_eq(mp_correlator_add_owner_rule(s.c, "libtorch*=framework"), 0);
	cr_assert_eq(mp_correlator_add_owner_rule(s.c, "libc10*=framework"), 0);
	cr_assert_eq(mp_correlator_add_owner_rule(s.c, "libXNNPACK*=delegate:xnnpack"), 0);
	for (uint32_t e = 0; e < events; e++) {
		uint32_t op = lcg(&x) % 100;

		s.ts = ts;
		if (op < 2) {
			uint32_t ph = lcg(&x) % 4;

			if (ph == 3) {
				rec(&s, MP_REC_PHASE_END, 1, NULL, 0);
				ref.phase = -1;
			} else {
				phase(&s, pnames[ph]);
				ref.phase = (int)ph;
				ref_level(&ref, ref.live, 0, 0, 0);
			}
		} else if (op < 4) {
			if (cur_tag)
				tag_end(&s, 1);
			cur_tag = lcg(&x) % 3;
			if (cur_tag)
				tag_begin(&s, 1, tnames[cur_tag]);
		} else if (op < 50 && nblk < NBLK) {
			uint32_t lib = lcg(&x) % 5;
			uint64_t size = 1 + lcg(&x) % 5000;
			struct mp_raw_event ev = { .type = MP_RAW_ALLOC,
						   .fn = MP_FN_MALLOC,
						   .pid = 1,
						   .tid = 1,
						   .ts_ns = s.ts + 1,
						   .addr = next_addr,
						   .size = size,
						   .caller = caller_in(lib) };

			next_addr += 0x10000;
			cr_assert_eq(mp_correlator_apply_heap(s.c, &ev, 0), 0);
			blk[nblk++] =
				(struct live_blk){ ev.addr, size, owner_of_lib[lib], cur_tag };
			ref.own[owner_of_lib[lib]] += size;
			ref.tag[cur_tag] += size;
			ref.live += size;
			ref_level(&ref, ref.live, 0, 0, 0);
		} else if (op < 60) {
			/* a temporary: freed by the next event */
			uint32_t lib = lcg(&x) % 5;
			uint64_t size = 1 + lcg(&x) % 20000;
			struct mp_raw_event al = { .type = MP_RAW_ALLOC,
						   .fn = MP_FN_MALLOC,
						   .pid = 1,
						   .tid = 1,
						   .ts_ns = s.ts + 1,
						   .addr = next_addr,
						   .size = size,
						   .caller = caller_in(lib) };
			struct mp_raw_event fr = { .type = MP_RAW_FREE,
						   .fn = MP_FN_FREE,
						   .pid = 1,
						   .tid = 1,
						   .ts_ns = s.ts + 2,
						   .addr = next_addr };

			next_addr += 0x10000;
			cr_assert_eq(mp_correlator_apply_temporary(s.c, &al, 0, &fr), 0);
			ref_level(&ref, ref.live + size, owner_of_lib[lib], cur_tag, size);
		} else if (op < 99 && nblk) {
			uint32_t k = lcg(&x) % nblk;
			struct mp_raw_event ev = { .type = MP_RAW_FREE,
						   .fn = MP_FN_FREE,
						   .pid = 1,
						   .tid = 1,
						   .ts_ns = s.ts + 1,
						   .addr = blk[k].addr };

			cr_assert_eq(mp_correlator_apply_heap(s.c, &ev, 0), 0);
			ref.own[blk[k].owner] -= blk[k].size;
			ref.tag[blk[k].tag] -= blk[k].size;
			ref.live -= blk[k].size;
			blk[k] = blk[--nblk];
		}
		ts = s.ts + 3;
		if (snap_every && e % snap_every == snap_every - 1) {
			struct mp_profile *q = NULL;
			struct mp_peak_part po[8], pt[8];
			char what[64];

			cr_assert_eq(mp_correlator_snapshot(s.c, ts, &q), 0);
			snprintf(what, sizeof(what), "snapshot %u: process", snaps);
			expect_parts(q, what, po, shares_as_parts(q->owners, q->n_owners, po), pt,
				     shares_as_parts(q->tags, q->n_tags, pt), ref.peak_own,
				     ref.peak_tag, ref.peak);
			for (int k = 0; k < REF_PHASES; k++) {
				const struct mp_phase *ph = mp_profile_phase(q, pnames[k]);

				if (!ph)
					continue;
				snprintf(what, sizeof(what), "snapshot %u: %s", snaps, pnames[k]);
				expect_parts(q, what, ph->peak_owners, ph->n_peak_owners,
					     ph->peak_tags, ph->n_peak_tags, ref.ph_own[k],
					     ref.ph_tag[k], ref.ph_peak[k]);
			}
			snaps++;
			mp_profile_free(q);
		}
	}
	s.ts = ts;
	p = finish(&s);
	cr_assert(p->peak_parts);
	cr_expect_eq(p->peak_bytes, ref.peak);
	cr_expect_eq(shares_sum(p->owners, p->n_owners), p->peak_bytes);
	cr_expect_eq(shares_sum(p->tags, p->n_tags), p->peak_bytes);
	{
		struct mp_peak_part po[8], pt[8];

		expect_parts(p, "process", po, shares_as_parts(p->owners, p->n_owners, po), pt,
			     shares_as_parts(p->tags, p->n_tags, pt), ref.peak_own, ref.peak_tag,
			     ref.peak);
	}
	for (int k = 0; k < REF_PHASES; k++) {
		const struct mp_phase *ph = mp_profile_phase(p, pnames[k]);

		cr_assert_not_null(ph, "phase %s never entered", pnames[k]);
		cr_expect_eq(ph->peak_bytes, ref.ph_peak[k]);
		expect_parts(p, pnames[k], ph->peak_owners, ph->n_peak_owners, ph->peak_tags,
			     ph->n_peak_tags, ref.ph_own[k], ref.ph_tag[k], ref.ph_peak[k]);
		cr_expect_gt(ph->entries, 3, "phase %s entered %" PRIu64 " times", pnames[k],
			     ph->entries);
	}
	/* the stream reached many peaks, temporaries among them */
	cr_expect_gt(p->mem.alloc_count, events / 3);
	mp_profile_free(p);
	free(blk);
}

Test(peak_parts, random_streams_match_the_reference)
{
	for (uint64_t seed = 1; seed <= 8; seed++)
		random_stream(seed, 30000, 0);
}

Test(peak_parts, snapshots_match_the_reference)
{
	random_stream(99, 6000, 97);
}

/* Sampled mode: the blocks' sizes are estimates, and so are the parts, but
 * they are the estimates of the blocks live at the peak: they still sum to
 * the (estimated) peak. */
Test(peak_parts, sampled_parts_sum_to_the_peak)
{
	struct mp_correlator_opts o = { .resolve_owner = lib_of, .sample_bytes = 4096 };
	uint64_t x = 7, addrs[256] = { 0 }, next = 0x100000;
	struct stream s;
	struct mp_profile *p;

	stream_init(&s, &o);
	phase(&s, "inference");
	for (int e = 0; e < 20000; e++) {
		uint32_t k = lcg(&x) % 256;
		struct mp_raw_event ev = { .pid = 1, .tid = 1, .ts_ns = tick(&s) };

		if (addrs[k]) {
			ev.type = MP_RAW_FREE;
			ev.fn = MP_FN_FREE;
			ev.addr = addrs[k];
			addrs[k] = 0;
		} else {
			ev.type = MP_RAW_ALLOC;
			/* a scaled block: its size is the estimate */
			ev.fn = MP_FN_MALLOC | MP_LIVE_FN_SCALED;
			ev.addr = addrs[k] = next;
			ev.size = 4096 + lcg(&x) % 100000;
			ev.caller = caller_in(lcg(&x) % 5);
			next += 0x100000;
		}
		cr_assert_eq(mp_correlator_apply_heap(s.c, &ev, 0), 0);
	}
	p = finish(&s);
	cr_assert_gt(p->peak_var, 0, "no block was an estimate");
	cr_expect_eq(shares_sum(p->owners, p->n_owners), p->peak_bytes);
	cr_expect_eq(shares_sum(p->tags, p->n_tags), p->peak_bytes);
	cr_expect_eq(parts_sum(p->phases[0].peak_owners, p->phases[0].n_peak_owners),
		     p->phases[0].peak_bytes);
	cr_expect_eq(p->phases[0].peak_bytes, p->peak_bytes);
	cr_expect_gt(p->phases[0].n_peak_owners, 3);
	mp_profile_free(p);
}

/* The table: a PEAK section by owner and one by tag, the process's peak
 * and each phase's, the most bytes first, with each part's share. */
Test(peak_parts, table_names_who_held_each_peak)
{
	struct mp_profile *p = by_hand();

	assert_report_has(
		p, MP_REPORT_TABLE,
		"\nPEAK                             OWNER                                     BYTES   SHARE\n"
		"(process)                        framework                                  7000   60.9%\n"
		"(process)                        delegate:xnnpack                           4000   34.8%\n"
		"(process)                        python3.11                                  500    4.3%\n"
		"load                             framework                                  7000   70.0%\n"
		"load                             delegate:xnnpack                           3000   30.0%\n"
		"inference                        framework                                  7000   60.9%\n"
		"inference                        delegate:xnnpack                           4000   34.8%\n"
		"inference                        python3.11                                  500    4.3%\n"
		"\nPEAK                             TAG                                       BYTES   SHARE\n"
		"(process)                        weights                                    7000   60.9%\n"
		"(process)                        activations                                4000   34.8%\n"
		"(process)                        (untagged)                                  500    4.3%\n"
		"load                             weights                                    7000   70.0%\n"
		"load                             (untagged)                                 3000   30.0%\n");
	mp_profile_free(p);
}

/* Past MP_PEAK_TABLE_ROWS parts, the rest is one "(N others)" row, so the
 * rows still add up to the peak. */
Test(peak_parts, table_sums_the_rest)
{
	struct mp_correlator_opts o = { .resolve_owner = many_libs };
	struct stream s;
	struct mp_profile *p;

	stream_init(&s, &o);
	for (uint32_t i = 0; i < 13; i++)
		alloc_from(&s, 1, 100 * (13 - i), 0x1000 * (i + 1));
	p = finish(&s);
	assert_report_has(
		p, MP_REPORT_TABLE,
		"(process)                        lib09.so                                    400    4.4%\n"
		"(process)                        (3 others)                                  600    6.6%\n");
	mp_profile_free(p);
}

/* JSON: the profile's "peak" object, each owner's and tag's peakShare, each
 * phase's peakOwners and peakTags. */
Test(peak_parts, json_names_who_held_each_peak)
{
	struct mp_profile *p = by_hand();

	assert_report_has(p, MP_REPORT_JSON,
			  "  \"peak\": {\n"
			  "    \"bytes\": 11500,\n"
			  "    \"owners\": [\n"
			  "      {\n"
			  "        \"name\": \"framework\",\n"
			  "        \"bytes\": 7000\n"
			  "      },\n"
			  "      {\n"
			  "        \"name\": \"delegate:xnnpack\",\n"
			  "        \"bytes\": 4000\n",
			  "      \"peakOwners\": [\n"
			  "        {\n"
			  "          \"name\": \"framework\",\n"
			  "          \"bytes\": 7000\n"
			  "        },\n"
			  "        {\n"
			  "          \"name\": \"delegate:xnnpack\",\n"
			  "          \"bytes\": 3000\n"
			  "        }\n"
			  "      ],\n",
			  "\"name\": \"delegate:xnnpack\",", "\"peakShare\": 4000,",
			  "\"name\": \"activations\",", "\"peakTags\": [");
	mp_profile_free(p);
}

/* The file carries them: a round trip gives them back whole. */
Test(peak_parts, proto_round_trip)
{
	struct mp_profile *p = by_hand(), *q = NULL;
	const char *why = NULL;
	uint8_t *buf = NULL;
	size_t len = 0;

	cr_assert_eq(mp_profile_encode(p, &buf, &len), 0);
	cr_assert_eq(mp_profile_decode(buf, len, &q, &why), 0, "%s", why ? why : "");
	cr_assert(q->peak_parts);
	expect_profile_eq(q, p);
	cr_expect_eq(q->phases[1].n_peak_owners, 3);
	free(buf);
	mp_profile_free(q);
	mp_profile_free(p);
}

static int decode_msg(const Memprof__Profile *m, const char **why)
{
	size_t len = memprof__profile__get_packed_size(m);
	uint8_t *buf = malloc(len + 1);
	struct mp_profile *q = NULL;
	int r;

	cr_assert_not_null(buf);
	memprof__profile__pack(m, buf);
	r = mp_profile_decode(buf, len, &q, why);
	free(buf);
	mp_profile_free(q);
	return r;
}

/* A file's parts are a claim: one naming no owner, out of order, empty or
 * summing past its peak is refused, and so are shares past the peak. */
Test(peak_parts, hostile_parts_refused)
{
	struct mp_profile *p = by_hand();
	Memprof__Profile *m;
	Memprof__PeakPart **po;
	const char *why = NULL;
	uint8_t *buf = NULL;
	size_t len = 0;
	uint32_t id;
	uint64_t bytes;

	cr_assert_eq(mp_profile_encode(p, &buf, &len), 0);
	m = memprof__profile__unpack(NULL, len, buf);
	cr_assert_not_null(m);
	cr_assert_eq(decode_msg(m, &why), 0, "%s", why ? why : "");
	po = m->phases[1]->peak_owners;
	cr_assert_eq(m->phases[1]->n_peak_owners, 3);
	id = po[2]->id;
	po[2]->id = 99;
	cr_expect_eq(decode_msg(m, &why), -EBADMSG);
	po[2]->id = po[0]->id;
	cr_expect_eq(decode_msg(m, &why), -EBADMSG, "out of order");
	po[2]->id = id;
	bytes = po[2]->bytes;
	po[2]->bytes += 1;
	cr_expect_eq(decode_msg(m, &why), -EBADMSG, "past the peak");
	po[2]->bytes = 0;
	cr_expect_eq(decode_msg(m, &why), -EBADMSG, "empty");
	po[2]->bytes = bytes;
	cr_expect_eq(decode_msg(m, &why), 0);
	m->owners[3]->peak_share += 1;
	cr_expect_eq(decode_msg(m, &why), -EBADMSG, "shares past the peak");
	m->owners[3]->peak_share -= 1;
	/* a file from before: none recorded, nothing refused */
	m->peak_parts = false;
	cr_expect_eq(decode_msg(m, &why), 0);
	memprof__profile__free_unpacked(m, NULL);
	free(buf);
	mp_profile_free(p);
}

/* A free charged elsewhere than its allocation (a stored value the live
 * table did not give) leaves an owner holding bytes the process freed: the
 * parts are capped so that they never claim more than the peak, and the
 * profile reads back. */
Test(peak_parts, inconsistent_charges_capped_at_the_peak)
{
	struct mp_correlator_opts o = { .resolve_owner = lib_of };
	struct mp_profile *p, *q = NULL;
	const char *why = NULL;
	struct stream s;
	struct block a;
	uint8_t *buf = NULL;
	size_t len = 0;

	stream_init(&s, &o);
	phase(&s, "inference");
	a = alloc_from(&s, 1, 1000, caller_in(0));
	a.user = 0; /* charged to (unknown), which holds nothing */
	release(&s, 1, &a);
	alloc_from(&s, 1, 1500, caller_in(1)); /* the peak: 1500 */
	p = finish(&s);
	cr_assert_eq(p->peak_bytes, 1500);
	cr_expect_eq(shares_sum(p->owners, p->n_owners), 1500);
	cr_expect_eq(parts_sum(p->phases[0].peak_owners, p->phases[0].n_peak_owners), 1500);
	cr_assert_eq(mp_profile_encode(p, &buf, &len), 0);
	cr_expect_eq(mp_profile_decode(buf, len, &q, &why), 0, "%s", why ? why : "");
	free(buf);
	mp_profile_free(q);
	mp_profile_free(p);
}
