/* SPDX-License-Identifier: MIT */
/*
 * The sites of memprof.proto, written by hand (daemon/profile/profile_enc.c):
 * the profile is byte for byte the one protobuf-c packs from Site messages
 * built as the encoder once built them, for every value a site's fields
 * can take, with none, one or many sites, and it reads back.
 */
#include <math.h>

#include "helpers.h"
#include "memprof.pb-c.h"
#include "profile_pb.h"

static const char *resolve(void *ctx, uint64_t addr)
{
	(void)ctx;
	return addr < 0x2000 ? "/usr/lib/libxnnpack.so.1" : "/opt/app/bin/runner";
}

static uint64_t rnd_state;

static uint64_t rnd(void)
{
	rnd_state ^= rnd_state << 13;
	rnd_state ^= rnd_state >> 7;
	rnd_state ^= rnd_state << 17;
	return rnd_state;
}

/* A value of every varint length, the edges of each and 0. */
static uint64_t any_u64(void)
{
	static const uint64_t edge[] = { 0,
					 1,
					 127,
					 128,
					 16383,
					 16384,
					 UINT32_MAX,
					 1ull << 32,
					 1ull << 56,
					 UINT64_MAX >> 1,
					 UINT64_MAX - 1,
					 UINT64_MAX };

	return rnd() % 3 ? edge[rnd() % (sizeof(edge) / sizeof(edge[0]))] : rnd() >> rnd() % 64;
}

static double any_double(bool finite_positive)
{
	static const double any[] = { 0.0,     -0.0,	  0.5, -3.25,	 1e308,	    4.9e-324,
				      -1e-300, 12345.678, NAN, INFINITY, -INFINITY, 1.0 };
	static const double pos[] = { 0.0, -0.0, 0.5, 1e308, 4.9e-324, 12345.678, 1.0 };

	if (finite_positive)
		return pos[rnd() % (sizeof(pos) / sizeof(pos[0]))];
	return any[rnd() % (sizeof(any) / sizeof(any[0]))];
}

/* A profile with something in the fields before Profile.sites and after
 * (symbols, stacks, pools, execs, limits, wrappers), and no site. */
static struct mp_profile *base_profile(void)
{
	struct mp_correlator_opts o = { .resolve_owner = resolve };
	struct stream s;
	struct mp_profile *p;
	uint64_t off = 0;

	stream_init(&s, &o);
	phase(&s, "load");
	kbegin(&s, 1, "matmul");
	alloc_from(&s, 1, 1000, 0x1100);
	kend(&s, 1);
	phase(&s, "inference");
	kbegin(&s, 2, "relu");
	alloc_from(&s, 2, 300, 0x2200);
	kend(&s, 2);
	p = finish(&s);
	cr_assert_eq(mp_profile_set_process(p, 1234, "/opt/app/bin/runner", "deadbeef00",
					    "runner --model m.pte"),
		     0);
	free(p->sites);
	p->sites = NULL;
	p->n_sites = 0;
	p->n_objects = 1;
	p->objects = calloc(1, sizeof(*p->objects));
	cr_assert_not_null(p->objects);
	p->objects[0] = (struct mp_object){ 0x1000,
					    0x3000,
					    0,
					    strdup("/opt/app/bin/runner"),
					    strdup("0a1b2c"),
					    MP_OBJ_F_FUNCTIONS };
	p->n_locations = 1;
	p->locations = calloc(1, sizeof(*p->locations));
	cr_assert_not_null(p->locations);
	p->locations[0] = (struct mp_location){ .addr = 0x1100,
						.object = 0,
						.rel_addr = 0x1100,
						.function = strdup("conv_im2col"),
						.file = strdup("conv.c"),
						.line = 42 };
	cr_assert_eq(mp_profile_stacks_alloc(p, 3, 6), 0);
	p->n_stacks = 3;
	for (uint32_t i = 0; i < 3; i++) {
		p->stacks[i].frames = p->stack_frames + off;
		p->stacks[i].n_frames = i + 1;
		for (uint32_t j = 0; j <= i; j++)
			p->stacks[i].frames[j] = 0x1100 + 0x10 * j;
		off += i + 1;
	}
	p->stacks[2].flags = MP_STACK_F_TRUNCATED;
	p->stack_depth = 8;
	p->format_version = MP_PROFILE_FORMAT_STACK_TREE; /* as the encoder writes it */
	p->n_mempools = 2;
	p->mempools = calloc(2, sizeof(*p->mempools));
	cr_assert_not_null(p->mempools);
	p->mempools[0] = (struct mp_mempool){ .name = strdup("cuda"), .kind = MP_POOL_KIND_DEVICE };
	p->mempools[1] = (struct mp_mempool){ .name = strdup("pinned"), .resets = 3 };
	p->n_execs = 1;
	p->execs = calloc(1, sizeof(*p->execs));
	cr_assert_not_null(p->execs);
	p->execs[0] = (struct mp_exec){ .ts_ns = 77, .tid = 9, .path = strdup("/bin/true") };
	p->exec_count = 1;
	p->limits = (struct mp_limits){ .reached = MP_LIMIT_SITES, .sites = 1 << 19 };
	p->wrappers = (struct mp_wrappers_info){ .on = true, .functions = 2, .skipped = 5 };
	p->stacks_unwound = 11;
	return p;
}

/* An index below @n, or MP_NONE. */
static uint32_t pick(uint32_t n)
{
	return n && rnd() % 3 ? rnd() % n : MP_NONE;
}

/* @n sites (their variances too if @vars). @any: any value a field holds
 * (the bytes only); else values the decoder takes. */
static void set_sites(struct mp_profile *p, uint32_t n, bool vars, bool any)
{
	free(p->sites);
	free(p->site_vars);
	p->site_vars = NULL;
	p->n_sites = n;
	p->sites = calloc(n ? n : 1, sizeof(*p->sites));
	cr_assert_not_null(p->sites);
	if (vars) {
		p->site_vars = calloc(n ? n : 1, sizeof(*p->site_vars));
		cr_assert_not_null(p->site_vars);
	}
	for (uint32_t i = 0; i < n; i++) {
		struct mp_site *st = &p->sites[i];
		bool peak = rnd() % 4;

		*st = (struct mp_site){ .caller = any_u64(),
					.name = pick(p->n_names),
					.phase = pick(p->n_phases),
					.owner = p->n_owners ? rnd() % p->n_owners : 0,
					.tid = (uint32_t)any_u64(),
					.alloc_objects = any_u64(),
					.alloc_space = any_u64(),
					.inuse_objects = any_u64(),
					.inuse_space = any_u64(),
					.pool = rnd() % (p->n_mempools + 1),
					.flags = rnd() % 5 ? 0 : MP_SITE_F_OTHER,
					.stack = rnd() % (p->n_stacks + 1) };
		st->peak_objects = peak ? st->alloc_objects >> rnd() % 64 : MP_UNKNOWN;
		st->peak_space = peak ? st->alloc_space >> (1 + rnd() % 63) : MP_UNKNOWN;
		if (any) {
			st->name = (uint32_t)any_u64();
			st->owner = (uint32_t)any_u64();
			st->pool = (uint16_t)any_u64();
			st->flags = (uint16_t)any_u64();
			st->stack = (uint32_t)any_u64();
			/* the encoder looks at peak_space alone */
			st->peak_objects = any_u64();
			st->peak_space = rnd() % 4 ? any_u64() : MP_UNKNOWN;
		}
		if (vars) {
			p->site_vars[i].alloc_space = any_double(!any);
			p->site_vars[i].inuse_space = any_double(!any);
		}
	}
}

/* Site @i as mp_profile_encode() once filled the Site message in for
 * protobuf-c to pack. */
static void ref_site(const struct mp_profile *p, uint32_t i, Memprof__Site *o)
{
	const struct mp_site *st = &p->sites[i];

	memprof__site__init(o);
	o->caller = st->caller;
	o->kernel = st->name;
	o->phase = st->phase;
	o->owner = st->owner;
	o->tid = st->tid;
	o->alloc_objects = st->alloc_objects;
	o->alloc_space = st->alloc_space;
	o->inuse_objects = st->inuse_objects;
	o->inuse_space = st->inuse_space;
	if (st->peak_space != MP_UNKNOWN) {
		o->peak_objects = st->peak_objects;
		o->peak_space = st->peak_space;
		o->peak_recorded = true;
	}
	if (p->site_vars) {
		o->alloc_space_var = p->site_vars[i].alloc_space;
		o->inuse_space_var = p->site_vars[i].inuse_space;
	}
	o->pool = st->pool;
	o->stack = st->stack;
	o->other = !!(st->flags & MP_SITE_F_OTHER);
}

/* What protobuf-c packs: the profile without its sites, as encoded and
 * unpacked, with Site messages from ref_site(). */
static uint8_t *ref_encode(const struct mp_profile *p, size_t *ret_len)
{
	struct mp_profile bare = *p;
	Memprof__Site *so = calloc(p->n_sites ? p->n_sites : 1, sizeof(*so));
	Memprof__Site **sv = calloc(p->n_sites ? p->n_sites : 1, sizeof(*sv));
	Memprof__Profile *o;
	uint8_t *buf, *bare_buf;
	size_t len, bare_len;

	cr_assert(so && sv);
	bare.n_sites = 0;
	bare.sites = NULL;
	bare.site_vars = NULL;
	cr_assert_eq(mp_profile_encode(&bare, &bare_buf, &bare_len), 0);
	o = memprof__profile__unpack(NULL, bare_len, bare_buf);
	cr_assert_not_null(o);
	cr_assert_eq(o->n_sites, 0);
	/* without sites, the profile is protobuf-c's own packing */
	cr_assert_eq(memprof__profile__get_packed_size(o), bare_len);
	for (uint32_t i = 0; i < p->n_sites; i++) {
		ref_site(p, i, &so[i]);
		sv[i] = &so[i];
	}
	o->n_sites = p->n_sites;
	o->sites = sv;
	len = memprof__profile__get_packed_size(o);
	buf = malloc(len ? len : 1);
	cr_assert_not_null(buf);
	cr_assert_eq(memprof__profile__pack(o, buf), len);
	o->n_sites = 0;
	o->sites = NULL;
	memprof__profile__free_unpacked(o, NULL);
	free(bare_buf);
	free(so);
	free(sv);
	*ret_len = len;
	return buf;
}

static void expect_bytes_eq(const char *what, const uint8_t *got, size_t ngot, const uint8_t *want,
			    size_t nwant)
{
	size_t i = 0;

	while (i < ngot && i < nwant && got[i] == want[i])
		i++;
	cr_assert(i == ngot && i == nwant,
		  "%s: %zu bytes, want %zu; first difference at byte %zu (0x%02x, want 0x%02x)",
		  what, ngot, nwant, i, i < ngot ? got[i] : 0, i < nwant ? want[i] : 0);
}

/* mp_profile_encode(@p), checked against ref_encode(); the caller frees. */
static uint8_t *expect_as_protobuf_c(const struct mp_profile *p, size_t *ret_len)
{
	uint8_t *got, *want;
	size_t ngot, nwant;

	cr_assert_eq(mp_profile_encode(p, &got, &ngot), 0);
	want = ref_encode(p, &nwant);
	expect_bytes_eq("profile", got, ngot, want, nwant);
	free(want);
	*ret_len = ngot;
	return got;
}

static double variance(double v)
{
	return isfinite(v) && v > 0 ? v : 0;
}

/* @q, read back from @p's encoding, holds its sites to the last field. */
static void expect_sites_read_back(const struct mp_profile *q, const struct mp_profile *p)
{
	bool vars = false;

	expect_profile_eq(q, p);
	for (uint32_t i = 0; i < p->n_sites && i < q->n_sites; i++) {
		const struct mp_site *g = &q->sites[i], *w = &p->sites[i];

		cr_assert(g->caller == w->caller && g->name == w->name && g->phase == w->phase &&
				  g->owner == w->owner && g->tid == w->tid &&
				  g->alloc_objects == w->alloc_objects &&
				  g->alloc_space == w->alloc_space &&
				  g->inuse_objects == w->inuse_objects &&
				  g->inuse_space == w->inuse_space && g->pool == w->pool &&
				  g->flags == w->flags && g->stack == w->stack &&
				  g->peak_objects == w->peak_objects &&
				  g->peak_space == w->peak_space && g->peak_ver == 0,
			  "site %u differs", i);
		if (p->site_vars)
			vars |= p->site_vars[i].alloc_space != 0 ||
				p->site_vars[i].inuse_space != 0;
	}
	cr_assert_eq(!!q->site_vars, vars, "site_vars %s", q->site_vars ? "set" : "NULL");
	for (uint32_t i = 0; vars && i < p->n_sites; i++)
		cr_assert(q->site_vars[i].alloc_space == variance(p->site_vars[i].alloc_space) &&
				  q->site_vars[i].inuse_space ==
					  variance(p->site_vars[i].inuse_space),
			  "site_vars[%u] differ", i);
}

/* Every value each field of a site takes, NaN and negative variances
 * among them, peak_objects known when peak_space is not: the bytes are
 * protobuf-c's. */
Test(site_enc, any_field_value_as_protobuf_c)
{
	struct mp_profile *p = base_profile();
	uint8_t *buf;
	size_t len;

	rnd_state = 0x9e3779b97f4a7c15ull;
	for (int vars = 0; vars < 2; vars++) {
		set_sites(p, 5000, vars, true);
		buf = expect_as_protobuf_c(p, &len);
		free(buf);
	}
	mp_profile_free(p);
}

/* The smallest site (every field 0: an empty message) and the largest (138
 * bytes: its length takes two bytes), alone and side by side. */
Test(site_enc, empty_and_largest_site)
{
	struct mp_profile *p = base_profile();
	Memprof__Site big;
	uint8_t *buf;
	size_t len;

	set_sites(p, 3, true, false);
	p->sites[0] = (struct mp_site){ 0 };
	p->site_vars[0] = (struct mp_site_var){ 0 };
	p->sites[1] = (struct mp_site){ .caller = UINT64_MAX,
					.name = UINT32_MAX,
					.phase = UINT32_MAX,
					.owner = UINT32_MAX,
					.tid = UINT32_MAX,
					.alloc_objects = UINT64_MAX,
					.alloc_space = UINT64_MAX,
					.inuse_objects = UINT64_MAX,
					.inuse_space = UINT64_MAX,
					.peak_objects = UINT64_MAX,
					.peak_space = UINT64_MAX - 1,
					.pool = UINT16_MAX,
					.flags = MP_SITE_F_OTHER,
					.stack = UINT32_MAX };
	p->site_vars[1] = (struct mp_site_var){ -1.5, NAN };
	p->sites[2] = p->sites[0];
	ref_site(p, 1, &big);
	cr_assert_eq(memprof__site__get_packed_size(&big), 138);
	for (uint32_t n = 1; n <= 3; n++) {
		p->n_sites = n;
		buf = expect_as_protobuf_c(p, &len);
		free(buf);
	}
	p->sites[0] = p->sites[1];
	p->n_sites = 1;
	buf = expect_as_protobuf_c(p, &len);
	free(buf);
	mp_profile_free(p);
}

/* No site, one, many (more than 2^16, the last one ending the message
 * when nothing follows the sites), with variances and without: the bytes
 * are protobuf-c's, and the sites read back to the last field, from the
 * bare message and from the file. */
static void round_trip(struct mp_profile *p, uint32_t n, bool vars)
{
	struct mp_profile *q = NULL, *r = NULL;
	const char *why = "unset";
	uint8_t *msg, *file, hdr[MP_PROFILE_FILE_HEADER];
	size_t len, flen;

	set_sites(p, n, vars, false);
	msg = expect_as_protobuf_c(p, &len);
	cr_assert_eq(mp_profile_decode(msg, len, &q, &why), 0, "%u sites: %s", n, why);
	expect_sites_read_back(q, p);

	cr_assert_eq(mp_profile_file_encode(p, &file, &flen), 0);
	mp_profile_file_header(msg, len, hdr);
	cr_assert_eq(flen, MP_PROFILE_FILE_HEADER + len);
	expect_bytes_eq("file header", file, MP_PROFILE_FILE_HEADER, hdr, MP_PROFILE_FILE_HEADER);
	expect_bytes_eq("file message", file + MP_PROFILE_FILE_HEADER,
			flen - MP_PROFILE_FILE_HEADER, msg, len);
	cr_assert_eq(mp_profile_file_decode(file, flen, &r, &why), 0, "%u sites: %s", n, why);
	expect_sites_read_back(r, p);
	free(msg);
	free(file);
	mp_profile_free(q);
	mp_profile_free(r);
}

Test(site_enc, none_one_many_round_trip, .timeout = 120)
{
	static const uint32_t counts[] = { 0, 1, 2, 100, 70000 };
	struct mp_profile *p = base_profile();

	rnd_state = 0x2545f4914f6cdd1dull;
	for (size_t i = 0; i < sizeof(counts) / sizeof(counts[0]); i++)
		for (int vars = 0; vars < 2; vars++)
			round_trip(p, counts[i], vars);
	mp_profile_free(p);
}

/* A profile that is little more than its sites: the fields around them
 * are the few an empty profile writes. */
Test(site_enc, sites_of_an_empty_profile)
{
	struct mp_profile *p = mp_profile_new();
	uint8_t *buf;
	size_t len;

	cr_assert_not_null(p);
	rnd_state = 0x853c49e6748fea9bull;
	set_sites(p, 50, true, true);
	buf = expect_as_protobuf_c(p, &len);
	free(buf);
	mp_profile_free(p);
}
