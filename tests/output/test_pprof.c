// SPDX-License-Identifier: MIT
/*
 * The pprof encoder (decoded back with the protobuf-c code generated from
 * proto/profile.proto, after gunzip) and the symbolizer (against a maps
 * snapshot of a process that no longer exists, checked against binutils'
 * addr2line, nm and readelf on the fixture and its stripped copies).
 */
#include "../profile/helpers.h"

#include <fcntl.h>
#include <gelf.h>
#include <inttypes.h>
#include <unistd.h>
#include <zlib.h>

#include "pprof.h"
#include "procmaps.h"
#include "profile.pb-c.h"
#include "symbolize.h"

/* ---- encoder ---- */

static const char *resolve(void *ctx, uint64_t addr)
{
	(void)ctx;
	return addr < 0x2000 ? "/usr/lib/libxnnpack.so.1" : "/opt/app/bin/runner";
}

/* Sites: two kernels, a phase, two owners, two threads, one caller with no
 * symbol and one allocation outside any kernel. */
static struct mp_profile *sample_profile(void)
{
	struct mp_correlator_opts o = { .resolve_owner = resolve };
	struct stream s;
	struct mp_profile *p;
	struct block b;

	stream_init(&s, &o);
	alloc_from(&s, 1, 7, 0x2100);
	phase(&s, "inference");
	kbegin(&s, 1, "matmul");
	alloc_from(&s, 1, 1000, 0x1100);
	alloc_from(&s, 1, 1000, 0x1100);
	b = alloc_from(&s, 2, 3000, 0x1200);
	release(&s, 2, &b);
	kend(&s, 1);
	kbegin(&s, 1, "relu");
	alloc_from(&s, 1, 200, 0x1100);
	alloc_from(&s, 1, 16, 0x9000);
	kend(&s, 1);
	p = finish(&s);
	cr_assert_eq(mp_profile_set_process(p, 42, "/opt/app/bin/runner", NULL, "runner"), 0);

	p->n_objects = 2;
	p->objects = calloc(2, sizeof(*p->objects));
	p->objects[0] = (struct mp_object){ 0x1000,	    0x2000,
					    0x3000,	    strdup("/usr/lib/libxnnpack.so.1"),
					    strdup("0a1b"), MP_OBJ_F_FUNCTIONS | MP_OBJ_F_LINES };
	p->objects[1] = (struct mp_object){ 0x2000, 0x3000,
					    0,	    strdup("/opt/app/bin/runner"),
					    NULL,   MP_OBJ_F_FUNCTIONS };
	p->n_locations = 4;
	p->locations = calloc(4, sizeof(*p->locations));
	p->locations[0] = (struct mp_location){ 0x1100, 0, 0x4100, strdup("gemm"), strdup("/s/g.c"),
						12,	0, NULL,   false };
	/* Same function as 0x1100: one Function, two Locations. */
	p->locations[1] = (struct mp_location){ 0x1200, 0, 0x4200, strdup("gemm"), strdup("/s/g.c"),
						30,	0, NULL,   false };
	p->locations[2] =
		(struct mp_location){ 0x2100, 1, 0x100, strdup("main"), NULL, 0, 0, NULL, false };
	p->locations[3] = (struct mp_location){ 0x9000, MP_NONE, 0, NULL, NULL, 0, 0, NULL, false };
	return p;
}

static uint8_t *gunzip(const uint8_t *in, size_t len, size_t *ret_len)
{
	z_stream z = { 0 };
	size_t cap = 1 << 20;
	uint8_t *out = malloc(cap);

	cr_assert_not_null(out);
	cr_assert_eq(inflateInit2(&z, 15 + 16), Z_OK);
	z.next_in = (Bytef *)in;
	z.avail_in = len;
	z.next_out = out;
	z.avail_out = cap;
	cr_assert_eq(inflate(&z, Z_FINISH), Z_STREAM_END, "not a complete gzip stream");
	*ret_len = z.total_out;
	inflateEnd(&z);
	return out;
}

struct label {
	const char *key, *str;
};

struct want_sample {
	uint64_t addr;
	int64_t values[4];
	size_t n_labels;
	struct label labels[4];
};

static const char *str_at(const Perftools__Profiles__Profile *m, int64_t i)
{
	cr_assert(i >= 0 && (size_t)i < m->n_string_table, "string index %" PRId64, i);
	return m->string_table[i];
}

static const Perftools__Profiles__Location *loc_by_id(const Perftools__Profiles__Profile *m,
						      uint64_t id)
{
	for (size_t i = 0; i < m->n_location; i++)
		if (m->location[i]->id == id)
			return m->location[i];
	cr_assert_fail("no location id %" PRIu64, id);
	return NULL;
}

static const Perftools__Profiles__Function *fn_by_id(const Perftools__Profiles__Profile *m,
						     uint64_t id)
{
	for (size_t i = 0; i < m->n_function; i++)
		if (m->function[i]->id == id)
			return m->function[i];
	cr_assert_fail("no function id %" PRIu64, id);
	return NULL;
}

static void check_message(const uint8_t *buf, size_t len)
{
	static const char *const types[4][2] = { { "alloc_objects", "count" },
						 { "alloc_space", "bytes" },
						 { "inuse_objects", "count" },
						 { "inuse_space", "bytes" } };
	const struct want_sample want[] = {
		{ 0x2100, { 1, 7, 1, 7 }, 2, { { "owner", "runner" }, { "thread", "1" } } },
		{ 0x1100,
		  { 2, 2000, 2, 2000 },
		  4,
		  { { "kernel", "matmul" },
		    { "phase", "inference" },
		    { "owner", "libxnnpack.so.1" },
		    { "thread", "1" } } },
		{ 0x1200,
		  { 1, 3000, 0, 0 },
		  4,
		  { { "kernel", "matmul" },
		    { "phase", "inference" },
		    { "owner", "libxnnpack.so.1" },
		    { "thread", "2" } } },
		{ 0x1100,
		  { 1, 200, 1, 200 },
		  4,
		  { { "kernel", "relu" },
		    { "phase", "inference" },
		    { "owner", "libxnnpack.so.1" },
		    { "thread", "1" } } },
		{ 0x9000,
		  { 1, 16, 1, 16 },
		  4,
		  { { "kernel", "relu" },
		    { "phase", "inference" },
		    { "owner", "runner" },
		    { "thread", "1" } } },
	};
	Perftools__Profiles__Profile *m = perftools__profiles__profile__unpack(NULL, len, buf);

	cr_assert_not_null(m, "not a pprof Profile message");
	cr_expect_str_eq(str_at(m, 0), "");
	cr_assert_eq(m->n_sample_type, 4);
	for (int i = 0; i < 4; i++) {
		cr_expect_str_eq(str_at(m, m->sample_type[i]->type), types[i][0]);
		cr_expect_str_eq(str_at(m, m->sample_type[i]->unit), types[i][1]);
	}
	cr_assert_not_null(m->period_type);
	cr_expect_str_eq(str_at(m, m->period_type->type), "space");
	cr_expect_str_eq(str_at(m, m->period_type->unit), "bytes");
	cr_expect_eq(m->period, 1);
	cr_expect_str_eq(str_at(m, m->default_sample_type), "inuse_space");
	cr_expect_eq(m->duration_nanos, 13, "duration %" PRId64, m->duration_nanos);
	cr_assert_eq(m->n_comment, 1);
	cr_expect_str_eq(str_at(m, m->comment[0]), "/opt/app/bin/runner");

	/* Samples: one per site, in site order. */
	cr_assert_eq(m->n_sample, 5);
	for (size_t i = 0; i < 5; i++) {
		const Perftools__Profiles__Sample *s = m->sample[i];

		cr_assert_eq(s->n_location_id, 1, "sample %zu", i);
		cr_expect_eq(loc_by_id(m, s->location_id[0])->address, want[i].addr, "sample %zu",
			     i);
		cr_assert_eq(s->n_value, 4);
		for (int v = 0; v < 4; v++)
			cr_expect_eq(s->value[v], want[i].values[v],
				     "sample %zu value %d: %" PRId64, i, v, s->value[v]);
		cr_assert_eq(s->n_label, want[i].n_labels, "sample %zu: %zu labels", i, s->n_label);
		for (size_t l = 0; l < s->n_label; l++) {
			cr_expect_str_eq(str_at(m, s->label[l]->key), want[i].labels[l].key);
			cr_expect_str_eq(str_at(m, s->label[l]->str), want[i].labels[l].str);
			cr_expect_eq(s->label[l]->num, 0);
		}
	}

	/* Mappings: the model's objects. */
	cr_assert_eq(m->n_mapping, 2);
	const Perftools__Profiles__Mapping *mp = m->mapping[0];
	cr_expect(mp->id == 1 && mp->memory_start == 0x1000 && mp->memory_limit == 0x2000 &&
		  mp->file_offset == 0x3000 && mp->has_functions && mp->has_filenames &&
		  mp->has_line_numbers && !mp->has_inline_frames);
	cr_expect_str_eq(str_at(m, mp->filename), "/usr/lib/libxnnpack.so.1");
	cr_expect_str_eq(str_at(m, mp->build_id), "0a1b");
	mp = m->mapping[1];
	cr_expect(mp->id == 2 && mp->memory_start == 0x2000 && mp->memory_limit == 0x3000 &&
		  mp->file_offset == 0 && mp->has_functions && !mp->has_filenames &&
		  !mp->has_line_numbers && !mp->has_inline_frames);
	cr_expect_str_eq(str_at(m, mp->filename), "/opt/app/bin/runner");
	cr_expect_str_eq(str_at(m, mp->build_id), "");

	/* Locations: one per caller, sorted; functions shared by name+file. */
	const struct {
		uint64_t addr, mapping_id;
		const char *fn, *file;
		int64_t line;
	} wl[] = {
		{ 0x1100, 1, "gemm", "/s/g.c", 12 },
		{ 0x1200, 1, "gemm", "/s/g.c", 30 },
		{ 0x2100, 2, "main", "", 0 },
		{ 0x9000, 0, NULL, NULL, 0 },
	};
	cr_assert_eq(m->n_location, 4);
	for (size_t i = 0; i < 4; i++) {
		const Perftools__Profiles__Location *l = m->location[i];

		cr_expect_eq(l->id, i + 1);
		cr_expect_eq(l->address, wl[i].addr);
		cr_expect_eq(l->mapping_id, wl[i].mapping_id, "location %zu", i);
		cr_expect(!l->is_folded);
		if (!wl[i].fn) {
			cr_expect_eq(l->n_line, 0);
			continue;
		}
		cr_assert_eq(l->n_line, 1);
		const Perftools__Profiles__Function *f = fn_by_id(m, l->line[0]->function_id);
		cr_expect_str_eq(str_at(m, f->name), wl[i].fn);
		cr_expect_str_eq(str_at(m, f->system_name), wl[i].fn);
		cr_expect_str_eq(str_at(m, f->filename), wl[i].file);
		cr_expect_eq(l->line[0]->line, wl[i].line);
	}
	cr_expect_eq(m->n_function, 2);
	cr_expect_eq(m->location[0]->line[0]->function_id, m->location[1]->line[0]->function_id);
	perftools__profiles__profile__free_unpacked(m, NULL);
}

Test(pprof, whole_message_plain_and_gzipped)
{
	struct mp_profile *p = sample_profile();
	uint8_t *buf, *raw;
	size_t len, rlen;

	cr_assert_eq(mp_pprof_encode(p, false, &buf, &len), 0);
	check_message(buf, len);
	free(buf);
	cr_assert_eq(mp_pprof_encode(p, true, &buf, &len), 0);
	cr_assert(len > 2 && buf[0] == 0x1f && buf[1] == 0x8b, "no gzip magic");
	raw = gunzip(buf, len, &rlen);
	check_message(raw, rlen);
	free(raw);
	free(buf);
	mp_profile_free(p);
}

Test(pprof, save_writes_gzip_and_dropped_sites_are_noted)
{
	struct mp_profile *p = sample_profile();
	char dir[] = "/tmp/memprof-pprof-XXXXXX", path[64];
	Perftools__Profiles__Profile *m;
	uint8_t *buf, *raw;
	size_t rlen;
	FILE *f;
	long len;

	p->sites_dropped = 9;
	p->limits.sites_evicted = 3;
	p->limits.site_error_bytes = 4096;
	cr_assert_not_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/p.pb.gz", dir);
	cr_assert_eq(mp_pprof_save(p, path), 0);
	cr_assert_not_null(f = fopen(path, "rb"));
	fseek(f, 0, SEEK_END);
	len = ftell(f);
	rewind(f);
	buf = malloc(len);
	cr_assert_eq(fread(buf, 1, len, f), (size_t)len);
	fclose(f);
	unlink(path);
	rmdir(dir);
	raw = gunzip(buf, len, &rlen);
	m = perftools__profiles__profile__unpack(NULL, rlen, raw);
	cr_assert_not_null(m);
	cr_assert_eq(m->n_comment, 2);
	cr_expect_str_eq(str_at(m, m->comment[1]),
			 "memprofd: limit reached: sites (max_sites 65536): 9 allocations are in "
			 "the \"(other sites)\" samples (3 sites evicted); a site listed lacks at "
			 "most 4096 bytes");
	cr_expect_eq(m->n_sample, 5);
	perftools__profiles__profile__free_unpacked(m, NULL);
	free(raw);
	free(buf);
	mp_profile_free(p);
}

Test(pprof, empty_profile_is_valid)
{
	struct mp_profile *p = mp_profile_new();
	Perftools__Profiles__Profile *m;
	uint8_t *buf;
	size_t len;

	cr_assert_eq(mp_pprof_encode(p, false, &buf, &len), 0);
	m = perftools__profiles__profile__unpack(NULL, len, buf);
	cr_assert_not_null(m);
	cr_expect_eq(m->n_sample, 0);
	cr_expect_eq(m->n_location, 0);
	cr_expect_eq(m->n_sample_type, 4);
	cr_expect_str_eq(m->string_table[0], "");
	perftools__profiles__profile__free_unpacked(m, NULL);
	free(buf);
	mp_profile_free(p);
}

/* ---- symbolizer ---- */

#define BASE 0x555555554000ull
#define BASE2 0x7e0000000000ull /* a second load of the same file (dlmopen) */

static const char *fixture(const char *name)
{
	static char buf[4][4096];
	static int i;
	const char *b = getenv("MEMPROF_BUILD_ROOT");
	char *p = buf[i++ % 4];

	cr_assert_not_null(b, "MEMPROF_BUILD_ROOT is not set (run through meson test)");
	snprintf(p, 4096, "%s/tests/output/%s", b, name);
	return p;
}

/* Runs a shell command, returns its stdout. */
static char *sh(const char *fmt, ...)
{
	char cmd[8192], *out = NULL;
	size_t cap = 0;
	va_list ap;
	FILE *f, *m;
	int c;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	cr_assert_not_null(f = popen(cmd, "r"));
	cr_assert_not_null(m = open_memstream(&out, &cap));
	while ((c = fgetc(f)) != EOF)
		fputc(c, m);
	fclose(m);
	cr_assert_eq(pclose(f), 0, "%s failed", cmd);
	return out;
}

/* The maps text of @elf loaded at BASE and BASE2, as the kernel would show
 * it, plus an anonymous region and a mapping of a file that does not
 * exist. */
static char *maps_of(const char *elf)
{
	char *txt = NULL;
	size_t cap = 0;
	FILE *m = open_memstream(&txt, &cap);
	GElf_Ehdr eh;
	size_t n;
	int fd = open(elf, O_RDONLY);
	Elf *e;

	cr_assert_geq(fd, 0);
	elf_version(EV_CURRENT);
	cr_assert_not_null(e = elf_begin(fd, ELF_C_READ, NULL));
	cr_assert_not_null(gelf_getehdr(e, &eh));
	cr_assert_eq(eh.e_type, ET_DYN, "the fixture is expected to be a PIE");
	cr_assert_eq(elf_getphdrnum(e, &n), 0);
	for (int k = 0; k < 2; k++) {
		uint64_t base = k ? BASE2 : BASE;

		for (size_t i = 0; i < n; i++) {
			GElf_Phdr ph;

			cr_assert_not_null(gelf_getphdr(e, i, &ph));
			if (ph.p_type != PT_LOAD)
				continue;
			fprintf(m, "%llx-%llx %c%c%cp %08llx fd:01 0 %s\n",
				(unsigned long long)(base + (ph.p_vaddr & ~4095ull)),
				(unsigned long long)(base +
						     ((ph.p_vaddr + ph.p_memsz + 4095) & ~4095ull)),
				ph.p_flags & PF_R ? 'r' : '-', ph.p_flags & PF_W ? 'w' : '-',
				ph.p_flags & PF_X ? 'x' : '-',
				(unsigned long long)(ph.p_offset & ~4095ull), elf);
		}
	}
	fprintf(m, "7f0000000000-7f0000001000 r-xp 00000000 00:00 0 \n");
	fprintf(m, "7f0000100000-7f0000102000 r-xp 00001000 fd:01 0 /nonexistent/libgone.so\n");
	elf_end(e);
	close(fd);
	fclose(m);
	return txt;
}

static uint64_t nm_value(const char *elf, const char *sym)
{
	char *out = sh("nm --defined-only '%s' | awk '$3 == \"%s\" { print $1 }'", elf, sym);
	uint64_t v = strtoull(out, NULL, 16);

	free(out);
	cr_assert_neq(v, 0, "%s not in %s", sym, elf);
	return v;
}

enum level { FULL, STRIP_DEBUG, STRIP_ALL };

static void check_symbolize(const char *name, enum level level)
{
	const char *elf = fixture(name), *unstripped = fixture("fixture-pprof");
	uint64_t rel[3] = { nm_value(unstripped, "alloc_a") + 0x10,
			    nm_value(unstripped, "alloc_b") + 0x5,
			    nm_value(unstripped, "main") + 0x20 };
	struct mp_profile *p = mp_profile_new();
	struct mp_procmaps *maps;
	const struct mp_mapping *text, *text2;
	char *txt = maps_of(elf), *bid, *a2l;

	cr_assert_eq(mp_procmaps_parse(txt, strlen(txt), &maps), 0);
	text = mp_procmaps_find(maps, BASE + rel[0]);
	text2 = mp_procmaps_find(maps, BASE2 + rel[1]);
	cr_assert(text && text2);
	/* Sites in an order unlike the addresses', some sharing a caller. */
	const uint64_t callers[] = { 0x7f0000100010, BASE + rel[2], BASE + rel[0], 0x7f0000000400,
				     BASE2 + rel[1], BASE + rel[1], BASE + rel[0] };
	p->n_sites = 7;
	p->sites = calloc(7, sizeof(*p->sites));
	for (int i = 0; i < 7; i++)
		p->sites[i] = (struct mp_site){ .caller = callers[i], .alloc_objects = 1 };

	/* pid 0 has no /proc entry: as if the process were gone. */
	cr_assert_eq(mp_symbolize_profile(p, maps, 0), 0);

	bid = sh("readelf -n '%s' | sed -n 's/.*Build ID: //p' | tr -d '\\n'", elf);
	const uint32_t flags = level == FULL	    ? MP_OBJ_F_FUNCTIONS | MP_OBJ_F_LINES :
			       level == STRIP_DEBUG ? MP_OBJ_F_FUNCTIONS :
						      0;
	const struct mp_object want_objs[] = {
		{ text->start, text->end, text->offset, (char *)elf, bid, flags },
		{ text2->start, text2->end, text2->offset, (char *)elf, bid, flags },
		{ 0x7f0000100000, 0x7f0000102000, 0x1000, "/nonexistent/libgone.so", NULL, 0 },
	};
	EXPECT_ARRAY("objects", p->objects, p->n_objects, want_objs, 3, expect_object_eq);

	/* binutils' addr2line is the independent oracle (at the call, one
	 * byte before the return address). */
	a2l = sh("addr2line -f -e '%s' %" PRIx64 " %" PRIx64 " %" PRIx64, elf, rel[0] - 1,
		 rel[1] - 1, rel[2] - 1);
	struct mp_location want_locs[6] = { 0 };
	char *save = NULL, *tok = strtok_r(a2l, "\n", &save);
	const uint64_t sorted_rel[3] = { rel[0], rel[1], rel[2] };
	for (int i = 0; i < 3; i++) {
		char *fn = tok, *fl = strtok_r(NULL, "\n", &save), *colon;

		cr_assert(fn && fl, "addr2line output: %s", a2l);
		colon = strrchr(fl, ':');
		*colon = '\0';
		want_locs[i] = (struct mp_location){
			.addr = BASE + sorted_rel[i],
			.object = 0,
			.rel_addr = sorted_rel[i],
			.function = strcmp(fn, "??") ? fn : NULL,
			.file = strcmp(fl, "??") ? fl : NULL,
			.line = (uint32_t)atoi(colon + 1),
		};
		tok = strtok_r(NULL, "\n", &save);
	}
	cr_expect_str_eq(want_locs[0].function ? want_locs[0].function : "(null)",
			 level == STRIP_ALL ? "(null)" : "alloc_a");
	/* The second load: same symbols, its own mapping and bias. */
	want_locs[3] = want_locs[1];
	want_locs[3].addr = BASE2 + rel[1];
	want_locs[3].object = 1;
	want_locs[4] = (struct mp_location){ .addr = 0x7f0000000400, .object = MP_NONE };
	/* a file that cannot be read: its offset in the file */
	want_locs[5] =
		(struct mp_location){ .addr = 0x7f0000100010, .object = 2, .rel_addr = 0x1010 };
	EXPECT_ARRAY("locations", p->locations, p->n_locations, want_locs, 6, expect_location_eq);
	if (level == FULL)
		cr_expect_eq(p->locations[0].line, 23, "the malloc call of alloc_a is line 23");

	free(a2l);
	free(bid);
	free(txt);
	mp_procmaps_free(maps);
	mp_profile_free(p);
}

Test(symbolize, debug_info_after_exit)
{
	check_symbolize("fixture-pprof", FULL);
}

Test(symbolize, strip_debug_names_from_symtab)
{
	check_symbolize("fixture-pprof-strip-debug", STRIP_DEBUG);
}

Test(symbolize, strip_all_addresses_only)
{
	check_symbolize("fixture-pprof-strip-all", STRIP_ALL);
}

/* A second pass replaces the first, and no sites means no symbols. */
Test(symbolize, resymbolize_and_empty)
{
	struct mp_profile *p = mp_profile_new();

	cr_assert_eq(mp_symbolize_profile(p, NULL, 0), 0);
	cr_expect_eq(p->n_objects, 0);
	cr_expect_eq(p->n_locations, 0);
	p->n_sites = 1;
	p->sites = calloc(1, sizeof(*p->sites));
	p->sites[0].caller = 0x1234;
	cr_assert_eq(mp_symbolize_profile(p, NULL, 0), 0);
	cr_assert_eq(mp_symbolize_profile(p, NULL, 0), 0);
	const struct mp_location want = { .addr = 0x1234, .object = MP_NONE };
	EXPECT_ARRAY("locations", p->locations, p->n_locations, &want, 1, expect_location_eq);
	cr_expect_eq(p->n_objects, 0);
	mp_profile_free(p);
}
