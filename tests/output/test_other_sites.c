// SPDX-License-Identifier: MIT
/*
 * Limits (docs/PROFILE.md "Limits"): `memprof run --stacks --max-sites 50`
 * on a program with some 400 distinct sites (fixture-sites). The pprof
 * output holds every allocated byte (its alloc_space adds up to the
 * profile's allocated bytes within 1%), an "(other sites)" sample holds
 * what passed the bound, and the bound is named in the pprof comments,
 * the table's first lines and the JSON.
 */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "../common/helpers.h"
#include "profile.pb-c.h"

static char tmpdir[256];

static void setup(void)
{
	mp_test_need_root("BPF and ptrace");
	mp_test_tmpdir(tmpdir, sizeof(tmpdir), "sites");
}

static void cleanup(void)
{
	mp_test_rmtree(tmpdir);
	tmpdir[0] = '\0';
}

static uint8_t *read_gunzip(const char *path, size_t *ret_len)
{
	size_t cap = 64 << 20;
	uint8_t *in = malloc(cap), *out = malloc(cap);
	z_stream z = { 0 };
	FILE *f = fopen(path, "rb");
	size_t n;

	cr_assert_not_null(f, "%s", path);
	cr_assert(in && out);
	n = fread(in, 1, cap, f);
	fclose(f);
	cr_assert_eq(inflateInit2(&z, 15 + 16), Z_OK);
	z.next_in = in;
	z.avail_in = (uInt)n;
	z.next_out = out;
	z.avail_out = (uInt)cap;
	cr_assert_eq(inflate(&z, Z_FINISH), Z_STREAM_END);
	*ret_len = z.total_out;
	inflateEnd(&z);
	free(in);
	return out;
}

static const char *str_at(const Perftools__Profiles__Profile *m, int64_t i)
{
	cr_assert(i >= 0 && (size_t)i < m->n_string_table);
	return m->string_table[i];
}

static bool is_other(const Perftools__Profiles__Profile *m, uint64_t loc_id)
{
	for (size_t i = 0; i < m->n_location; i++) {
		const Perftools__Profiles__Location *l = m->location[i];

		if (l->id != loc_id || l->n_line != 1)
			continue;
		for (size_t j = 0; j < m->n_function; j++)
			if (m->function[j]->id == l->line[0]->function_id)
				return !strcmp(str_at(m, m->function[j]->name), "(other sites)");
	}
	return false;
}

Test(limits, other_sites_hold_every_byte_past_max_sites, .init = setup, .fini = cleanup,
     .timeout = 240)
{
	char pb[300], out[1 << 16];
	static char json[8 << 20];
	char *fixture = mp_test_build_path("tests/output/fixture-sites");
	char *argv[] = { mp_test_build_path("cli/memprof"),
			 "run",
			 "--stacks",
			 "--max-sites",
			 "50",
			 "--format",
			 "pprof",
			 "-o",
			 pb,
			 "--print",
			 "table",
			 "--",
			 fixture,
			 NULL };
	char *jargv[] = { mp_test_build_path("cli/memprof"),
			  "run",
			  "--stacks",
			  "--max-sites",
			  "50",
			  "--print",
			  "json",
			  "--",
			  fixture,
			  NULL };
	Perftools__Profiles__Profile *m;
	uint64_t allocated = 0, sum = 0, other = 0;
	bool noted = false;
	const char *h;
	uint8_t *raw;
	size_t len;
	int alloc_ix = -1;

	snprintf(pb, sizeof(pb), "%s/p.pb.gz", tmpdir);
	cr_assert_eq(mp_test_run_capture(argv, out, sizeof(out)), 0);
	cr_assert_not_null(strstr(out, "limit reached: sites (max_sites 50): "), "%s", out);
	/* the smallest evicted, and the bound on what a listed site lacks */
	cr_assert_not_null(strstr(out, " sites with the fewest bytes evicted, their "), "%s", out);
	cr_assert_not_null(strstr(out, "; a site listed lacks at most "), "%s", out);
	h = strstr(out, ", allocated ");
	cr_assert_not_null(h, "%s", out);
	allocated = strtoull(h + strlen(", allocated "), NULL, 10);
	cr_assert_gt(allocated, 200 * 1500);

	raw = read_gunzip(pb, &len);
	m = perftools__profiles__profile__unpack(NULL, len, raw);
	cr_assert_not_null(m);
	for (size_t i = 0; i < m->n_sample_type; i++)
		if (!strcmp(str_at(m, m->sample_type[i]->type), "alloc_space"))
			alloc_ix = (int)i;
	cr_assert_geq(alloc_ix, 0);
	for (size_t i = 0; i < m->n_sample; i++) {
		const Perftools__Profiles__Sample *s = m->sample[i];

		sum += (uint64_t)s->value[alloc_ix];
		if (s->n_location_id == 1 && is_other(m, s->location_id[0]))
			other += (uint64_t)s->value[alloc_ix];
	}
	cr_assert_gt(other, 0, "no \"(other sites)\" sample");
	cr_assert(sum * 100 >= allocated * 99 && sum * 100 <= allocated * 101,
		  "pprof alloc_space %" PRIu64 ", profile allocated %" PRIu64, sum, allocated);
	for (size_t i = 0; i < m->n_comment; i++)
		noted |= strstr(str_at(m, m->comment[i]), "limit reached: sites (max_sites 50)") !=
			 NULL;
	cr_assert(noted, "no comment names the bound");
	perftools__profiles__profile__free_unpacked(m, NULL);
	free(raw);

	cr_assert_eq(mp_test_run_capture(jargv, json, sizeof(json)), 0);
	h = strstr(json, "\"limits\": {");
	cr_assert_not_null(h, "%.3000s", json);
	cr_assert_not_null(strstr(h, "\"sites\": 50,"), "%.3000s", h);
	cr_assert_not_null(strstr(h, "\"sites\"\n"), "%.3000s", h);
	cr_assert_not_null(strstr(json, "\"other\": true"));
	cr_assert_not_null(strstr(h, "\"sitesEvicted\": "), "%.3000s", h);
	cr_assert_not_null(strstr(h, "\"siteErrorBytes\": "), "%.3000s", h);
	cr_assert_not_null(strstr(json, "\"errorSpace\": "));
}

/* The site table's default bound (docs/PROFILE.md "Limits"): an eighth
 * of --max-memory at 160 bytes a site, a quarter with --stacks, so that
 * every stack the stack table holds can be a site of its own. */
Test(limits, sites_by_default_as_many_as_stacks, .init = setup, .fini = cleanup, .timeout = 120)
{
	static char json[8 << 20];
	char *fixture = mp_test_build_path("tests/output/fixture-sites");
	char *argv[] = { mp_test_build_path("cli/memprof"),
			 "run",
			 "--stacks",
			 "--max-memory",
			 "64M",
			 "--print",
			 "json",
			 "--",
			 fixture,
			 NULL };
	char *argv_plain[] = { argv[0], "run", "--max-memory", "64M", "--print",
			       "json",	"--",  fixture,	       NULL };
	const char *h;

	cr_assert_eq(mp_test_run_capture(argv, json, sizeof(json)), 0);
	h = strstr(json, "\"limits\": {");
	cr_assert_not_null(h, "%.3000s", json);
	/* 64 MiB / 4 / 160; 64 MiB / 2 / 8 frames, one stack for 40 */
	cr_assert_not_null(strstr(h, "\"sites\": 104857,"), "%.600s", h);
	cr_assert_not_null(strstr(h, "\"stacks\": 104857,"), "%.600s", h);
	/* without stacks, an eighth */
	cr_assert_eq(mp_test_run_capture(argv_plain, json, sizeof(json)), 0);
	h = strstr(json, "\"limits\": {");
	cr_assert_not_null(h, "%.3000s", json);
	cr_assert_not_null(strstr(h, "\"sites\": 52428,"), "%.600s", h);
}
