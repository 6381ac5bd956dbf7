/* SPDX-License-Identifier: MIT */
/*
 * The screen of `memprof top` (daemon/output/top_view.c): rows from a
 * profile the correlator built, their order under every sort key, the
 * whole screen's text, and the fitting to a terminal: long and hostile
 * names, more rows than lines, a tiny terminal.
 */
#include "maps_helpers.h"
#include "top_view.h"

#define U MP_UNKNOWN

/* keep: 3 calls keeping 1000 B each; burst: 1 call of 50000 B, freed in
 * it; tiny: 10 calls of 8 B, freed; one RSS sample of 8 KiB. */
static struct mp_profile *three(void)
{
	struct mp_rss_sample smp = {
		.vm_rss = 8192, .rss_anon = 4096, .rss_file = 4096, .vm_hwm = 8192, .pss = U
	};
	struct stream s;
	struct mp_profile *p;
	struct block b;

	stream_init(&s, NULL);
	for (int i = 0; i < 3; i++) {
		kbegin(&s, 1, "keep");
		alloc(&s, 1, 1000);
		kend(&s, 1);
	}
	kbegin(&s, 1, "burst");
	b = alloc(&s, 1, 50000);
	smp.ts_ns = tick(&s);
	cr_assert_eq(mp_correlator_on_rss(s.c, &smp), 0);
	release(&s, 1, &b);
	kend(&s, 1);
	for (int i = 0; i < 10; i++) {
		kbegin(&s, 2, "tiny");
		b = alloc(&s, 2, 8);
		release(&s, 2, &b);
		kend(&s, 2);
	}
	p = finish(&s);
	cr_assert_eq(mp_profile_set_process(p, 42, "/usr/bin/tiny", NULL, NULL), 0);
	return p;
}

static void expect_order(const struct mp_profile *p, enum mp_top_sort by, const char *a,
			 const char *b, const char *c)
{
	struct mp_top_row *rows = NULL;
	uint32_t n = 0;

	cr_assert_eq(mp_top_rows(p, by, &rows, &n), 0);
	cr_assert_eq(n, 3);
	cr_expect_str_eq(rows[0].name, a, "by %s: first %s, want %s", mp_top_sort_name(by),
			 rows[0].name, a);
	cr_expect_str_eq(rows[1].name, b, "by %s: second %s, want %s", mp_top_sort_name(by),
			 rows[1].name, b);
	cr_expect_str_eq(rows[2].name, c, "by %s: third %s, want %s", mp_top_sort_name(by),
			 rows[2].name, c);
	free(rows);
}

Test(top_view, rows_carry_each_kernels_figures)
{
	struct mp_profile *p = three();
	struct mp_top_row *rows = NULL;
	uint32_t n = 0;

	cr_assert_eq(mp_top_rows(p, MP_TOP_BY_NAME, &rows, &n), 0);
	cr_assert_eq(n, 3);
	cr_expect_str_eq(rows[0].name, "burst");
	cr_expect_eq(rows[0].calls, 1);
	cr_expect_eq(rows[0].live, 0);
	cr_expect_eq(rows[0].peak, 50000);
	cr_expect_eq(rows[0].alloc, 50000);
	cr_expect_str_eq(rows[1].name, "keep");
	cr_expect_eq(rows[1].calls, 3);
	cr_expect_eq(rows[1].live, 3000);
	cr_expect_eq(rows[1].peak, 1000);
	cr_expect_eq(rows[1].alloc, 3000);
	cr_expect_str_eq(rows[2].name, "tiny");
	cr_expect_eq(rows[2].calls, 10);
	cr_expect_eq(rows[2].live, 0);
	cr_expect_eq(rows[2].peak, 8);
	cr_expect_eq(rows[2].alloc, 80);
	free(rows);
	mp_profile_free(p);
}

Test(top_view, every_key_sorts_its_way)
{
	struct mp_profile *p = three();

	/* figures from the highest; equal figures by name */
	expect_order(p, MP_TOP_BY_LIVE, "keep", "burst", "tiny");
	expect_order(p, MP_TOP_BY_PEAK, "burst", "keep", "tiny");
	expect_order(p, MP_TOP_BY_CALLS, "tiny", "keep", "burst");
	expect_order(p, MP_TOP_BY_ALLOC, "burst", "keep", "tiny");
	expect_order(p, MP_TOP_BY_NAME, "burst", "keep", "tiny");
	mp_profile_free(p);
}

Test(top_view, keys_name_the_sorts)
{
	static const struct {
		int key;
		enum mp_top_sort by;
		const char *name;
	} want[] = {
		{ 'l', MP_TOP_BY_LIVE, "live" },     { 'p', MP_TOP_BY_PEAK, "peak" },
		{ 'c', MP_TOP_BY_CALLS, "calls" },   { 'a', MP_TOP_BY_ALLOC, "alloc" },
		{ 'm', MP_TOP_BY_MAPPED, "mapped" }, { 'n', MP_TOP_BY_NAME, "name" },
	};
	enum mp_top_sort by = MP_TOP_BY_NAME;

	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		cr_expect_eq(mp_top_sort_of_key(want[i].key, &by), 0);
		cr_expect_eq(by, want[i].by);
		cr_expect_str_eq(mp_top_sort_name(by), want[i].name);
	}
	by = MP_TOP_BY_PEAK;
	cr_expect_eq(mp_top_sort_of_key('x', &by), -EINVAL);
	cr_expect_eq(mp_top_sort_of_key('L', &by), -EINVAL);
	cr_expect_eq(mp_top_sort_of_key('\033', &by), -EINVAL);
	cr_expect_eq(by, MP_TOP_BY_PEAK, "a refused key leaves the sort");
}

static char *screen(const struct mp_profile *p, const struct mp_top_view *v, uint32_t *header)
{
	char *text = NULL;
	size_t len = 0;

	cr_assert_eq(mp_top_render(p, v, &text, &len, header), 0);
	cr_assert_eq(strlen(text), len);
	return text;
}

/* Columns of one line: bytes, the UTF-8 ellipsis one column. */
static size_t columns(const char *s, size_t n)
{
	size_t cols = 0;

	for (size_t i = 0; i < n; i++)
		if (((unsigned char)s[i] & 0xc0) != 0x80)
			cols++;
	return cols;
}

/* Every line ends in '\n', fits @width, holds nothing but printable
 * ASCII (and the ellipsis); returns the number of lines. */
static unsigned check_fits(const char *text, unsigned width)
{
	unsigned lines = 0;

	for (const char *s = text, *nl; *s; s = nl + 1, lines++) {
		nl = strchr(s, '\n');
		cr_assert_not_null(nl, "line %u has no newline", lines);
		cr_expect_leq(columns(s, (size_t)(nl - s)), width, "line %u: '%.*s'", lines,
			      (int)(nl - s), s);
		for (const char *c = s; c < nl; c++)
			cr_expect((*c >= 0x20 && *c < 0x7f) || !memcmp(c, "\xe2\x80\xa6", 3) ||
					  ((unsigned char)*c & 0xc0) == 0x80,
				  "line %u: byte 0x%02x", lines, (unsigned char)*c);
	}
	return lines;
}

Test(top_view, whole_screen)
{
	struct mp_profile *p = three();
	struct mp_top_view v = { .width = 80, .height = 12, .by = MP_TOP_BY_LIVE, .via = "direct" };
	uint32_t header = 0;
	char *text = screen(p, &v, &header);

	cr_expect_str_eq(
		text,
		"memprof top: pid 42 (direct) /usr/bin/tiny\n"
		"window 0.0 s; mode precise\n"
		"heap: live 2.9 KiB in 3 blocks, peak 51.8 KiB; rss: 8.0 KiB, peak 8.0 KiB\n"
		"mappings: reserved 0 B, peak 0 B; resident peak <= 0 B (not in heap)\n"
		"sorted by live; keys: l live, p peak, c calls, a alloc, m mapped, n name, q quit\n"
		"\n"
		"      CALLS      *LIVE       PEAK      ALLOC     MAPPED  KERNEL                 \n"
		"          3    2.9 KiB     1000 B    2.9 KiB        0 B  keep\n"
		"          1        0 B   48.8 KiB   48.8 KiB        0 B  burst\n"
		"         10        0 B        8 B       80 B        0 B  tiny\n");
	cr_expect_eq(header, 6);
	free(text);

	/* another key, a status line, the sorted column marked */
	v.by = MP_TOP_BY_CALLS;
	v.status = "pid 42 exited: its final profile is shown; q quits";
	text = screen(p, &v, &header);
	cr_expect(strstr(text, "sorted by calls;"), "%s", text);
	cr_expect(strstr(text, "\npid 42 exited: its final profile is shown; q quits\n"
			       "     *CALLS       LIVE       PEAK      ALLOC     MAPPED  KERNEL"),
		  "%s", text);
	cr_expect(strstr(text, "         10        0 B        8 B       80 B        0 B  tiny\n"
			       "          3    2.9 KiB     1000 B    2.9 KiB        0 B  keep\n"
			       "          1        0 B   48.8 KiB   48.8 KiB        0 B  burst\n"),
		  "%s", text);
	free(text);
	mp_profile_free(p);
}

/* A profile of kernels named @names, one call each, @live bytes each. */
static struct mp_profile *named(const char *const *names, uint32_t n)
{
	struct mp_profile *p = mp_profile_new();

	cr_assert_not_null(p);
	p->pid = 7;
	p->names = calloc(n, sizeof(*p->names));
	p->kernels = calloc(n, sizeof(*p->kernels));
	cr_assert(p->names && p->kernels);
	for (uint32_t i = 0; i < n; i++) {
		p->names[i] = strdup(names[i]);
		p->kernels[i] =
			(struct mp_kernel){ .name = i, .calls = 1, .retained_bytes = 100 + i };
	}
	p->n_names = p->n_kernels = n;
	return p;
}

Test(top_view, long_names_end_in_an_ellipsis_at_the_width)
{
	char longname[301];
	const char *names[] = { longname, "short" };
	struct mp_profile *p;
	struct mp_top_view v = { .width = 100, .height = 20, .by = MP_TOP_BY_NAME };
	uint32_t header;
	char *text, *line;

	memset(longname, 'x', 300);
	longname[0] = 'L';
	longname[300] = '\0';
	p = named(names, 2);
	text = screen(p, &v, &header);
	check_fits(text, 100);
	/* 100 columns: 57 of figures and gap, 40 of the name, "..." */
	line = strstr(text, "Lxxx");
	cr_assert_not_null(line, "%s", text);
	cr_expect_eq(strchr(line, '\n') - line, 40 + 3, "%s", text);
	cr_expect(!strncmp(strchr(line, '\n') - 4, "x...\n", 5), "%s", text);
	cr_expect(strstr(text, "  short\n"), "a name that fits is whole: %s", text);
	free(text);

	v.utf8 = true;
	text = screen(p, &v, &header);
	check_fits(text, 100);
	line = strstr(text, "Lxxx");
	cr_assert_not_null(line);
	cr_expect(!strncmp(strchr(line, '\n') - 4, "x\xe2\x80\xa6\n", 5), "%s", text);
	cr_expect_eq(columns(line, (size_t)(strchr(line, '\n') - line)), 43, "%s", text);
	free(text);

	/* wide enough: the whole name */
	v.width = 400;
	text = screen(p, &v, &header);
	cr_expect(strstr(text, longname), "%s", text);
	free(text);
	mp_profile_free(p);
}

Test(top_view, hostile_names_cannot_drive_the_terminal)
{
	const char *names[] = { "\033[2J\033]0;owned\007evil\r\nname\xff" };
	struct mp_profile *p = named(names, 1);
	struct mp_top_view v = { .width = 120, .height = 20 };
	uint32_t header;
	char *text;

	free(p->exe);
	p->exe = strdup("/bin/\033[31mred");
	text = screen(p, &v, &header);
	check_fits(text, 120);
	cr_expect(!strchr(text, '\033') && !strchr(text, '\r') && !strchr(text, '\007'), "%s",
		  text);
	cr_expect(strstr(text, "  ?[2J?]0;owned?evil??name?\n"), "%s", text);
	cr_expect(strstr(text, "/bin/?[31mred\n"), "%s", text);
	free(text);

	/* a name index past the names: "?" */
	p->kernels[0].name = 5;
	text = screen(p, &v, &header);
	cr_expect(strstr(text, "  ?\n"), "%s", text);
	free(text);
	mp_profile_free(p);
}

Test(top_view, rows_beyond_the_height_are_counted)
{
	const char *names[] = { "k0", "k1", "k2", "k3", "k4", "k5", "k6", "k7", "k8", "k9" };
	struct mp_profile *p = named(names, 10);
	struct mp_top_view v = { .width = 80, .height = 10, .by = MP_TOP_BY_LIVE };
	uint32_t header;
	char *text = screen(p, &v, &header);

	/* 7 lines above the rows, 2 rows (k9, k8: the highest live), the
	 * count of the 8 others */
	cr_expect_eq(check_fits(text, 80), 10, "%s", text);
	cr_expect(strstr(text, "  k9\n"), "%s", text);
	cr_expect(strstr(text, "  k8\n... 8 more kernels (a taller terminal shows them)\n"), "%s",
		  text);
	cr_expect(!strstr(text, "  k7\n"), "%s", text);
	free(text);

	/* a tiny terminal: its lines, its width, never more */
	v.width = 12;
	v.height = 3;
	text = screen(p, &v, &header);
	cr_expect_eq(check_fits(text, 12), 3, "%s", text);
	cr_expect_eq(header, UINT32_MAX, "the header did not fit");
	cr_expect_str_eq(text, "memprof t...\nwindow 0....\nheap: liv...\n");
	free(text);
	mp_profile_free(p);
}

Test(top_view, before_the_first_profile)
{
	struct mp_top_view v = { .width = 80, .height = 24, .pid = 99, .via = "memprofd" };
	uint32_t header;
	char *text = screen(NULL, &v, &header);

	cr_expect_str_eq(text,
			 "memprof top: pid 99 (memprofd)\n"
			 "waiting for the first snapshot\n"
			 "\n"
			 "sorted by live; keys: l live, p peak, c calls, a alloc, m mapped, n "
			 "name, q quit\n"
			 "\n"
			 "      CALLS      *LIVE       PEAK      ALLOC     MAPPED  KERNEL        "
			 "         \n");
	cr_expect_eq(header, 5);
	free(text);
}

Test(top_view, bytes_in_binary_units)
{
	const char *names[] = { "a", "b", "c", "d" };
	struct mp_profile *p = named(names, 4);
	struct mp_top_view v = { .width = 80, .height = 20, .by = MP_TOP_BY_NAME };
	uint32_t header;
	char *text;

	p->kernels[0].retained_bytes = 1023;
	p->kernels[1].retained_bytes = 1024;
	p->kernels[2].retained_bytes = 5ull << 30;
	p->kernels[3].retained_bytes = UINT64_MAX;
	text = screen(p, &v, &header);
	cr_expect(strstr(text, "          1     1023 B        0 B        0 B        0 B  a\n"),
		  "%s", text);
	cr_expect(strstr(text, "          1    1.0 KiB        0 B        0 B        0 B  b\n"),
		  "%s", text);
	cr_expect(strstr(text, "          1    5.0 GiB        0 B        0 B        0 B  c\n"),
		  "%s", text);
	cr_expect(strstr(text, "          1   16.0 EiB        0 B        0 B        0 B  d\n"),
		  "%s", text);
	free(text);
	mp_profile_free(p);
}

/* The screen's copy renders as the profile does, without invocations. */
Test(top_view, the_copy_renders_as_the_profile)
{
	struct mp_profile *p = three(), *q = NULL;
	struct mp_top_view v = { .width = 100, .height = 30, .via = "direct" };
	uint32_t header;
	char *a, *b;

	p->drops_bpf = 3;
	cr_assert_eq(mp_top_view_copy(p, &q), 0);
	cr_expect_eq(q->n_invocations, 0);
	cr_expect_null(q->invocations);
	cr_expect_eq(q->n_rss, 1);
	for (int by = MP_TOP_BY_LIVE; by <= MP_TOP_BY_NAME; by++) {
		v.by = (enum mp_top_sort)by;
		a = screen(p, &v, &header);
		b = screen(q, &v, &header);
		cr_expect_str_eq(b, a);
		free(a);
		free(b);
	}
	cr_expect(p->n_invocations > 0);
	mp_profile_free(q);
	mp_profile_free(p);
}

/* Mappings beside the heap: a kernel that maps 8 MiB (RSS sees 1 MiB of
 * it) and frees nothing of the heap shows them in its MAPPED column and
 * the header's mapping line; sorting by m puts it first. A profile without
 * mapping figures says "unknown", never 0. */
Test(top_view, mapped_bytes_beside_the_heap)
{
	struct mp_top_view v = {
		.width = 100, .height = 20, .by = MP_TOP_BY_MAPPED, .via = "direct"
	};
	struct mp_profile *p, *q = NULL;
	struct mp_top_row *rows = NULL;
	struct stream s;
	uint32_t header, n;
	char *text;

	stream_init(&s, NULL);
	kbegin(&s, 1, "heap_only");
	alloc(&s, 1, 4096);
	kend(&s, 1);
	kbegin(&s, 1, "reserve");
	map_make(&s, 1, 0x7f0000000000ull, 8u << 20);
	rss_at(&s, 3u << 20, 1u << 20);
	map_make(&s, 1, 0x7f0001000000ull, 1u << 20);
	map_release(&s, 1, 0x7f0001000000ull, 1u << 20);
	kend(&s, 1);
	p = finish(&s);
	cr_assert_eq(mp_profile_set_process(p, 42, "/usr/bin/node", NULL, NULL), 0);

	cr_assert_eq(mp_top_rows(p, MP_TOP_BY_MAPPED, &rows, &n), 0);
	cr_assert_eq(n, 2);
	cr_expect_str_eq(rows[0].name, "reserve");
	cr_expect_eq(rows[0].mapped, 9u << 20);
	cr_expect_eq(rows[0].alloc, 0);
	cr_expect_str_eq(rows[1].name, "heap_only");
	cr_expect_eq(rows[1].mapped, 0);
	cr_expect_eq(rows[1].alloc, 4096);
	free(rows);

	text = screen(p, &v, &header);
	check_fits(text, 100);
	cr_expect(strstr(text, "heap: live 4.0 KiB in 1 blocks, peak 4.0 KiB; rss: 3.0 MiB, "
			       "peak 3.0 MiB\n"
			       "mappings: reserved 8.0 MiB, peak 9.0 MiB; resident peak <= 1.0 MiB "
			       "(not in heap)\n"
			       "sorted by mapped;"),
		  "%s", text);
	cr_expect(strstr(text, "      CALLS       LIVE       PEAK      ALLOC    *MAPPED  KERNEL"),
		  "%s", text);
	cr_expect(strstr(text,
			 "          1        0 B        0 B        0 B    9.0 MiB  reserve\n"
			 "          1    4.0 KiB    4.0 KiB    4.0 KiB        0 B  heap_only\n"),
		  "%s", text);
	free(text);

	/* the screen's copy keeps them */
	cr_assert_eq(mp_top_view_copy(p, &q), 0);
	text = screen(q, &v, &header);
	cr_expect(strstr(text, "mappings: reserved 8.0 MiB, peak 9.0 MiB;"), "%s", text);
	cr_expect(strstr(text, "    9.0 MiB  reserve\n"), "%s", text);
	free(text);
	mp_profile_free(q);

	p->maps_recorded = false;
	text = screen(p, &v, &header);
	cr_expect(strstr(text, "\nmappings: unknown (this profile has no mapping figures)\n"), "%s",
		  text);
	free(text);
	mp_profile_free(p);
}
