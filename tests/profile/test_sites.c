/* SPDX-License-Identifier: MIT */
/*
 * Allocation sites: per (caller, kernel, phase, owner, thread) gross and
 * in-use figures, a bounded table whose overflow is counted, frees that
 * find their site, and the round trip through memprof.proto.
 */
#include <inttypes.h>

#include "helpers.h"
#include "memprof.pb-c.h"
#include "profile_pb.h"

static const char *resolve(void *ctx, uint64_t addr)
{
	(void)ctx;
	return addr < 0x2000 ? "/usr/lib/libxnnpack.so.1" : "/opt/app/bin/runner";
}

#define N MP_NONE

Test(sites, aggregated_per_caller_kernel_phase_owner_thread)
{
	struct mp_correlator_opts o = { .resolve_owner = resolve };
	struct stream s;
	struct mp_profile *p;
	struct block a, b;

	stream_init(&s, &o);
	phase(&s, "load");
	alloc_from(&s, 1, 100, 0x1100); /* outside any kernel */
	kbegin(&s, 1, "matmul");
	a = alloc_from(&s, 1, 1000, 0x1100);
	b = alloc_from(&s, 1, 2000, 0x2200);
	alloc_from(&s, 1, 1000, 0x1100);
	release(&s, 1, &b);
	alloc_from(&s, 2, 64, 0x1100); /* worker thread: cross-thread charge */
	kend(&s, 1);
	phase(&s, "inference");
	kbegin(&s, 1, "relu");
	alloc_from(&s, 1, 300, 0x1100);
	release(&s, 1, &a); /* allocated in matmul, freed in relu */
	kend(&s, 1);
	p = finish(&s);

	/* owners: [0] (unknown), [1] libxnnpack.so.1, [2] runner */
	const struct mp_site want[] = {
		{ 0x1100, N, 0, 1, 1, 1, 100, 1, 100, 0, 0, 0, 1, 100, 0, 0 },
		{ 0x1100, 0, 0, 1, 1, 2, 2000, 1, 1000, 0, 0, 0, 2, 2000, 0, 0 },
		{ 0x2200, 0, 0, 2, 1, 1, 2000, 0, 0, 0, 0, 0, 1, 2000, 0, 0 },
		{ 0x1100, 0, 0, 1, 2, 1, 64, 1, 64, 0, 0, 0, 0, 0, 0, 0 },
		{ 0x1100, 1, 1, 1, 1, 1, 300, 1, 300, 0, 0, 0, 0, 0, 0, 0 },
	};
	EXPECT_ARRAY("sites", p->sites, p->n_sites, want, 5, expect_site_peak_eq);
	cr_expect_eq(p->sites_dropped, 0);
	cr_expect_eq(p->n_objects, 0);
	cr_expect_eq(p->n_locations, 0);
	/* The other figures see the same frees as before sites existed. */
	const struct mp_pool owners[] = {
		POOL_UNKNOWN_EMPTY,
		{ .name = "libxnnpack.so.1",
		  .mem = { 1464, 4, 2464, 5, 1000, 1 },
		  .live_bytes = 1464,
		  .live_count = 4,
		  .peak_bytes = 2464 },
		{ .name = "runner",
		  .mem = { 0, 0, 2000, 1, 2000, 1 },
		  .live_bytes = 0,
		  .live_count = 0,
		  .peak_bytes = 2000 },
	};
	EXPECT_ARRAY("owners", p->owners, p->n_owners, owners, 3, expect_pool_eq);
	mp_profile_free(p);
}

Test(sites, table_is_bounded_and_overflow_counted)
{
	struct mp_correlator_opts o = { .resolve_owner = resolve, .max_sites = 2 };
	struct stream s;
	struct mp_profile *p;
	struct block a, b, c;

	stream_init(&s, &o);
	kbegin(&s, 1, "k");
	a = alloc_from(&s, 1, 10, 0x1100);
	b = alloc_from(&s, 1, 20, 0x1200);
	/* third site: over the cap, in place of 0x1100 (10 bytes, the
	 * fewest), whose block stays live */
	c = alloc_from(&s, 1, 40, 0x2300);
	alloc_from(&s, 1, 80, 0x2300);
	/* 0x1100 again: a new site now, in place of 0x1200 (20 bytes) */
	alloc_from(&s, 1, 5, 0x1100);
	release(&s, 1, &c);
	release(&s, 1, &b); /* an evicted site's blocks: "(other sites)" */
	kend(&s, 1);
	release(&s, 1, &a);
	p = finish(&s);

	const struct mp_site want[] = {
		/* the evicted: "(other sites)" (docs/PROFILE.md "Limits") */
		{ 0, N, N, 0, 0, 2, 30, 0, 0, 0, MP_SITE_F_OTHER, 0, 2, 30, 0, 0 },
		/* each may lack the bytes of the site it replaced */
		{ 0x2300, 0, N, 2, 1, 2, 120, 1, 80, 0, 0, 0, 2, 120, 0, 10 },
		{ 0x1100, 0, N, 1, 1, 1, 5, 1, 5, 0, 0, 0, 1, 5, 0, 20 },
	};
	EXPECT_ARRAY("sites", p->sites, p->n_sites, want, 3, expect_site_peak_eq);
	cr_expect_eq(p->sites_dropped, 2);
	cr_expect_eq(p->limits.sites_evicted, 2);
	cr_expect_eq(p->limits.site_error_bytes, 20);
	/* The dropped site's free still finds its owner and kernel. */
	const struct mp_pool runner = { .name = "runner",
					.mem = { 80, 1, 120, 2, 40, 1 },
					.live_bytes = 80,
					.live_count = 1,
					.peak_bytes = 120 };
	expect_pool_eq("owners[2]", &p->owners[2], &runner);
	cr_expect_eq(p->kernels[0].retained_bytes, 85);
	cr_expect_eq(p->kernels[0].retained_count, 2);
	mp_profile_free(p);
}

/* Fills in what mp_symbolize_profile() would for callers 0x1100 and
 * 0x2200 of resolve()'s files. */
static void add_symbols(struct mp_profile *p)
{
	p->n_objects = 2;
	p->objects = calloc(2, sizeof(*p->objects));
	cr_assert_not_null(p->objects);
	p->objects[0] = (struct mp_object){ 0x1000,	      0x2000,
					    0x3000,	      strdup("/usr/lib/libx.so"),
					    strdup("0a1b2c"), MP_OBJ_F_FUNCTIONS | MP_OBJ_F_LINES };
	p->objects[1] =
		(struct mp_object){ 0x2000, 0x2800, 0, strdup("/opt/app/bin/runner"), NULL, 0 };
	p->n_locations = 2;
	p->locations = calloc(2, sizeof(*p->locations));
	cr_assert_not_null(p->locations);
	p->locations[0] = (struct mp_location){
		0x1100, 0, 0x4100, strdup("conv_im2col"), strdup("conv.c"), 42, 0, NULL, false
	};
	p->locations[1] = (struct mp_location){ 0x2200, 1, 0x1200, NULL, NULL, 0, 0, NULL, false };
}

/* Sites and symbols survive write → read, and a snapshot carries them. */
Test(sites, round_trip_and_snapshot)
{
	struct mp_correlator_opts o = { .resolve_owner = resolve };
	struct mp_profile *p, *q = NULL, *snap = NULL;
	const char *why = NULL;
	struct stream s;
	uint8_t *buf;
	size_t len;

	stream_init(&s, &o);
	kbegin(&s, 7, "conv");
	alloc_from(&s, 7, 4096, 0x1100);
	alloc_from(&s, 7, 8, 0x2200);
	cr_assert_eq(mp_correlator_snapshot(s.c, s.ts + 1, &snap), 0);
	const struct mp_site want[] = {
		{ 0x1100, 0, N, 1, 7, 1, 4096, 1, 4096, 0, 0, 0, 1, 4096, 0, 0 },
		{ 0x2200, 0, N, 2, 7, 1, 8, 1, 8, 0, 0, 0, 1, 8, 0, 0 },
	};
	EXPECT_ARRAY("snapshot.sites", snap->sites, snap->n_sites, want, 2, expect_site_peak_eq);
	kend(&s, 7);
	p = finish(&s);
	p->sites_dropped = 3;
	add_symbols(p);

	cr_assert_eq(mp_profile_file_encode(p, &buf, &len), 0);
	cr_assert_eq(mp_profile_file_decode(buf, len, &q, &why), 0, "%s", why ? why : "");
	free(buf);
	expect_profile_eq(q, p);
	cr_expect_eq(mp_profile_location(q, 0x2200), &q->locations[1]);
	cr_expect_eq(mp_profile_location(q, 0x1100), &q->locations[0]);
	cr_expect_null(mp_profile_location(q, 0x1101));
	mp_profile_free(p);
	mp_profile_free(q);
	mp_profile_free(snap);
}

/* --print json / convert --to json are the whole model: sites, objects and
 * locations included, and the tracing mode the figures come from. */
Test(sites, json_carries_sites_symbols_and_mode)
{
	struct mp_correlator_opts o = { .resolve_owner = resolve };
	const char *src = getenv("MEMPROF_SOURCE_ROOT");
	char path[4096], *want = NULL, *txt;
	struct mp_profile *p;
	struct stream s;
	struct block b;
	size_t len = 0;
	FILE *f;

	cr_assert_not_null(src, "MEMPROF_SOURCE_ROOT is not set (run through meson test)");
	stream_init(&s, &o);
	alloc_from(&s, 3, 16, 0x2200); /* no kernel, no phase */
	phase(&s, "run");
	kbegin(&s, 7, "conv");
	b = alloc_from(&s, 7, 4096, 0x1100);
	alloc_from(&s, 7, 8, 0x1100);
	release(&s, 7, &b);
	kend(&s, 7);
	p = finish(&s);
	cr_assert_eq(mp_profile_set_process(p, 9, "/opt/app/bin/runner", NULL, "runner"), 0);
	p->trace_mode = 1; /* MP_TRACE_SAMPLED */
	p->sample_bytes = 524288;
	p->duty_on_ns = 50000000;
	p->duty_period_ns = 1000000000;
	p->duty_active_ns = 150000000;
	p->sites_dropped = 4;
	add_symbols(p);
	txt = render(p, MP_REPORT_JSON, NULL);
	snprintf(path, sizeof(path), "%s/tests/profile/golden/sites.json", src);
	f = fopen(path, "r");
	cr_assert_not_null(f, "%s: %m", path);
	cr_assert_gt(getdelim(&want, &len, '\0', f), 0);
	fclose(f);
	cr_expect_str_eq(txt, want, "JSON differs from %s:\n%s", path, txt);
	free(want);
	free(txt);
	mp_profile_free(p);
}

static int decode_msg(const Memprof__Profile *m, const char **why)
{
	size_t len = memprof__profile__get_packed_size(m);
	uint8_t *buf = malloc(len + 1);
	struct mp_profile *q = NULL;
	int r;

	memprof__profile__pack(m, buf);
	r = mp_profile_decode(buf, len, &q, why);
	free(buf);
	mp_profile_free(q);
	return r;
}

/* Sites, mappings and locations that break the model's rules. */
Test(sites, inconsistent_messages_refused)
{
	char *names[] = { "k" };
	Memprof__Pool pool = MEMPROF__POOL__INIT, *pools[] = { &pool };
	Memprof__Site st = MEMPROF__SITE__INIT, *sts[] = { &st, &st };
	Memprof__ObjectMapping om = MEMPROF__OBJECT_MAPPING__INIT, *oms[] = { &om };
	Memprof__Location l1 = MEMPROF__LOCATION__INIT, l2 = MEMPROF__LOCATION__INIT,
			  *ls[] = { &l1, &l2 };
	Memprof__Profile m = MEMPROF__PROFILE__INIT;
	const char *why = NULL;

	pool.name = "(unknown)";
	m.format_version = 1;
	m.n_kernel_names = 1;
	m.kernel_names = names;
	m.n_owners = 1;
	m.owners = pools;
	m.n_sites = 2;
	m.sites = sts;
	m.n_mappings = 1;
	m.mappings = oms;
	m.n_locations = 2;
	m.locations = ls;
	st.kernel = MP_NONE;
	st.phase = MP_NONE;
	l1.address = 0x10;
	l1.mapping = 0;
	l2.address = 0x20;
	l2.mapping = MP_NONE;
	cr_assert_eq(decode_msg(&m, &why), 0, "%s", why);

	st.kernel = 1;
	cr_expect_eq(decode_msg(&m, &why), -EBADMSG);
	cr_expect_str_eq(why, "site refers to no kernel, phase or owner");
	st.kernel = 0;
	st.phase = 0; /* no phases */
	cr_expect_eq(decode_msg(&m, &why), -EBADMSG);
	cr_expect_str_eq(why, "site refers to no kernel, phase or owner");
	st.phase = MP_NONE;
	st.owner = 1;
	cr_expect_eq(decode_msg(&m, &why), -EBADMSG);
	st.owner = 0;
	cr_expect_eq(decode_msg(&m, &why), 0);

	/* at the peak, at most what the site allocated */
	st.alloc_objects = 1;
	st.alloc_space = 10;
	st.peak_recorded = true;
	st.peak_objects = 1;
	st.peak_space = 11;
	cr_expect_eq(decode_msg(&m, &why), -EBADMSG);
	cr_expect_str_eq(why, "site has more live at the peak than it allocated");
	st.peak_space = 10;
	st.peak_objects = 2;
	cr_expect_eq(decode_msg(&m, &why), -EBADMSG);
	st.peak_objects = 1;
	cr_expect_eq(decode_msg(&m, &why), 0);
	st.peak_recorded = false; /* an older file: unknown, never checked */
	st.peak_objects = 2;
	cr_expect_eq(decode_msg(&m, &why), 0);
	st.peak_objects = 0;
	st.peak_space = 0;

	l2.address = 0x10; /* duplicate */
	cr_expect_eq(decode_msg(&m, &why), -EBADMSG);
	cr_expect_str_eq(why, "locations not sorted by address");
	l2.address = 0x20;
	l1.mapping = 1;
	cr_expect_eq(decode_msg(&m, &why), -EBADMSG);
	cr_expect_str_eq(why, "location refers to no mapping");
	l1.mapping = 0;
	m.n_sites = 1; /* more locations than sites */
	cr_expect_eq(decode_msg(&m, &why), -EBADMSG);
	cr_expect_str_eq(why, "more sites, locations or mappings than memprofd writes");
}

/* A block of @size at @caller, its size an estimate (MP_HEAP_F_SCALED)
 * with @scaled: sampled mode's blocks below the interval. */
static struct block alloc_est(struct stream *s, uint64_t size, uint64_t caller, bool scaled)
{
	struct mp_heap_event ev = { .kind = MP_HEAP_ALLOC,
				    .fn = MP_FN_MALLOC,
				    .flags = scaled ? MP_HEAP_F_SCALED : 0,
				    .tid = 1,
				    .ts_ns = tick(s),
				    .addr = s->next_addr,
				    .size = size,
				    .caller = caller };
	struct block b = {
		.addr = ev.addr, .size = size, .caller = caller, .ts = ev.ts_ns, .tid = 1
	};

	s->next_addr += 0x1000;
	b.user = mp_correlator_on_heap(s->c, &ev);
	return b;
}

static void release_est(struct stream *s, const struct block *b, bool scaled)
{
	struct mp_heap_event ev = { .kind = MP_HEAP_FREE,
				    .fn = MP_FN_FREE,
				    .flags = scaled ? MP_HEAP_F_SCALED : 0,
				    .tid = 1,
				    .alloc_tid = b->tid,
				    .ts_ns = tick(s),
				    .addr = b->addr,
				    .size = b->size,
				    .alloc_ts_ns = b->ts,
				    .alloc_caller = b->caller,
				    .user = b->user };

	mp_correlator_on_heap(s->c, &ev);
}

static void expect_peak(const struct mp_site *st, uint64_t objects, uint64_t space)
{
	cr_expect_eq(st->peak_objects, objects, "site %#" PRIx64 ": %" PRIu64 " blocks at the peak",
		     st->caller, st->peak_objects);
	cr_expect_eq(st->peak_space, space, "site %#" PRIx64 ": %" PRIu64 " bytes at the peak",
		     st->caller, st->peak_space);
}

/* A 100, B 200 (the peak, 300), B freed, A 50: at the peak A held 100 and B
 * 200, although at the end A holds 150 and B nothing. A later peak (C 1000)
 * replaces them all. The same in sampled mode, where the sizes of blocks
 * below the interval are estimates: the same rule on the estimates. */
static void sites_at_the_peak(uint64_t sample_bytes, bool scaled)
{
	struct mp_correlator_opts o = { .resolve_owner = resolve, .sample_bytes = sample_bytes };
	struct mp_profile *snap = NULL, *p, *q = NULL;
	const char *why = NULL;
	struct block b;
	struct stream s;
	uint8_t *buf;
	size_t len;

	stream_init(&s, &o);
	alloc_est(&s, 100, 0x1100, scaled);
	b = alloc_est(&s, 200, 0x2200, scaled);
	release_est(&s, &b, scaled);
	alloc_est(&s, 50, 0x1100, scaled);
	cr_assert_eq(mp_correlator_snapshot(s.c, s.ts + 1, &snap), 0);
	cr_assert_eq(snap->peak_bytes, 300);
	cr_assert_eq(snap->n_sites, 2);
	cr_expect_eq(snap->sites[0].inuse_space, 150);
	cr_expect_eq(snap->sites[1].inuse_space, 0);
	expect_peak(&snap->sites[0], 1, 100);
	expect_peak(&snap->sites[1], 1, 200);

	/* a new peak, 1150: A's 150 and C's 1000 */
	alloc_est(&s, 1000, 0x3300, scaled);
	p = finish(&s);
	cr_assert_eq(p->peak_bytes, 1150);
	cr_assert_eq(p->n_sites, 3);
	expect_peak(&p->sites[0], 2, 150);
	expect_peak(&p->sites[1], 0, 0);
	expect_peak(&p->sites[2], 1, 1000);
	for (uint32_t i = 0; i < p->n_sites; i++)
		cr_expect_eq(p->sites[i].peak_ver, 0, "correlator state left in the profile");

	/* the file keeps them */
	cr_assert_eq(mp_profile_file_encode(p, &buf, &len), 0);
	cr_assert_eq(mp_profile_file_decode(buf, len, &q, &why), 0, "%s", why ? why : "");
	free(buf);
	expect_profile_eq(q, p);
	expect_peak(&q->sites[0], 2, 150);
	mp_profile_free(p);
	mp_profile_free(q);
	mp_profile_free(snap);
}

Test(sites, bytes_live_at_the_peak)
{
	sites_at_the_peak(0, false);
}

Test(sites, bytes_live_at_the_peak_sampled)
{
	sites_at_the_peak(4096, false);
	sites_at_the_peak(4096, true);
}

/* A peak reached by a block freed right after it (the session's pairing,
 * mp_correlator_apply_temporary()) counts that block at its site. */
Test(sites, peak_of_a_temporary_allocation)
{
	struct mp_correlator_opts o = { .resolve_owner = resolve };
	struct mp_raw_event al = { .type = MP_RAW_ALLOC,
				   .fn = MP_FN_MALLOC,
				   .tid = 1,
				   .addr = 0x50000,
				   .size = 500,
				   .caller = 0x2200 };
	struct mp_raw_event fr = {
		.type = MP_RAW_FREE, .fn = MP_FN_FREE, .tid = 1, .addr = 0x50000
	};
	struct mp_profile *p;
	struct stream s;

	stream_init(&s, &o);
	alloc_from(&s, 1, 100, 0x1100);
	al.ts_ns = tick(&s);
	fr.ts_ns = tick(&s);
	cr_assert_eq(mp_correlator_apply_temporary(s.c, &al, 0, &fr), 0);
	p = finish(&s);
	cr_assert_eq(p->peak_bytes, 600);
	cr_assert_eq(p->n_sites, 2);
	cr_expect_eq(p->sites[1].inuse_space, 0);
	cr_expect_eq(p->sites[1].alloc_space, 500);
	expect_peak(&p->sites[0], 1, 100);
	expect_peak(&p->sites[1], 1, 500);
	mp_profile_free(p);
}

/* A profile whose sites' figures at the peak are unknown (MP_UNKNOWN) is
 * written as a writer before them wrote it (no peak fields on the wire),
 * and read back unknown; JSON has null for them. */
Test(sites, peak_unknown_in_older_files)
{
	struct mp_profile *p, *q = NULL;
	const char *why = NULL;
	struct stream s;
	uint8_t *buf;
	size_t len;
	char *json;

	stream_init(&s, NULL);
	alloc_from(&s, 1, 100, 0x1100);
	p = finish(&s);
	cr_assert_eq(p->n_sites, 1);
	expect_peak(&p->sites[0], 1, 100);
	p->sites[0].peak_objects = p->sites[0].peak_space = MP_UNKNOWN;
	cr_assert_eq(mp_profile_file_encode(p, &buf, &len), 0);
	cr_assert_eq(mp_profile_file_decode(buf, len, &q, &why), 0, "%s", why ? why : "");
	free(buf);
	expect_peak(&q->sites[0], MP_UNKNOWN, MP_UNKNOWN);
	json = render(q, MP_REPORT_JSON, NULL);
	cr_expect_not_null(strstr(json, "\"peakObjects\": null,\n"), "%s", json);
	cr_expect_not_null(strstr(json, "\"peakSpace\": null"), "%s", json);
	free(json);
	mp_profile_free(p);
	mp_profile_free(q);
}
