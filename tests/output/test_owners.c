/* SPDX-License-Identifier: MIT */
/*
 * Owners are listed by bytes, the highest first, equal ones by name, in
 * every view that lists them: the table's OWNER rows (by bytes allocated),
 * its mapping OWNER rows (by bytes mapped) and the HTML report's data
 * (which its table keeps for equal figures). The model keeps owners in the
 * order they first allocated.
 */
#include "html.h"
#include "maps_helpers.h"

/* Callers in four objects. */
#define SMALL 0x1100ull
#define TIE_B 0x2100ull
#define TIE_A 0x3100ull
#define BIG 0x4100ull

static const char *resolve(void *ctx, uint64_t addr)
{
	(void)ctx;
	switch (addr & ~0xfffull) {
	case 0x1000:
		return "/usr/lib/libsmall.so";
	case 0x2000:
		return "/usr/lib/libtie_b.so";
	case 0x3000:
		return "/usr/lib/libtie_a.so";
	case 0x4000:
		return "/usr/lib/libbig.so";
	}
	return NULL;
}

static void map_from(struct stream *s, uint64_t addr, uint64_t size, uint64_t caller)
{
	map_event(s, 1, MP_RAW_ALLOC, MP_FN_MMAP, addr, size, caller);
}

/* Heap: small 100 B first, then tie_b and tie_a 500 B each, big 9000 B
 * last. Mappings: small 4 MiB, big 1 MiB, tie_a 2 MiB. */
static struct mp_profile *owners_profile(void)
{
	struct mp_correlator_opts o = { .resolve_owner = resolve };
	struct stream s;
	struct mp_profile *p;

	stream_init(&s, &o);
	alloc_from(&s, 1, 100, SMALL);
	alloc_from(&s, 1, 500, TIE_B);
	alloc_from(&s, 1, 500, TIE_A);
	alloc_from(&s, 1, 9000, BIG);
	map_from(&s, 0x7f0000000000ull, 4u << 20, SMALL);
	map_from(&s, 0x7f0001000000ull, 1u << 20, BIG);
	map_from(&s, 0x7f0002000000ull, 2u << 20, TIE_A);
	p = finish(&s);
	cr_assert_eq(p->n_owners, 5);
	cr_assert_str_eq(p->owners[1].name, "libsmall.so", "the model's order is first seen");
	return p;
}

/* The table of @p (caller frees). */
static __attribute__((noinline)) char *table_of(const struct mp_profile *p)
{
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);

	cr_assert_not_null(f);
	cr_assert_eq(mp_report_write(p, MP_REPORT_TABLE, NULL, f), 0);
	cr_assert_eq(fclose(f), 0);
	return text;
}

/* @names appear in @text in this order, each once after the previous. */
static void expect_in_order(const char *text, const char *const *names, size_t n)
{
	const char *at = text;

	for (size_t i = 0; i < n; i++) {
		const char *next = strstr(at, names[i]);

		cr_assert_not_null(next, "%s missing or out of order after %s:\n%s", names[i],
				   i ? names[i - 1] : "the start", text);
		at = next + strlen(names[i]);
	}
}

Test(owners, table_by_bytes_allocated_then_name)
{
	struct mp_profile *p = owners_profile();
	char *txt = table_of(p);
	const char *heap = strstr(txt, "\nOWNER "), *maps = strstr(txt, "anonymous mappings");

	cr_assert_not_null(heap, "%s", txt);
	cr_assert_not_null(maps, "%s", txt);
	/* the heap's OWNER rows, whole */
	cr_expect_not_null(strstr(heap,
				  "\nlibbig.so                                  9000           9000"
				  "           9000           9000\n"
				  "libtie_a.so                                 500            500"
				  "            500            500\n"
				  "libtie_b.so                                 500            500"
				  "            500            500\n"
				  "libsmall.so                                 100            100"
				  "            100            100\n"),
			   "%s", txt);
	/* the mappings' OWNER rows: by bytes mapped */
	expect_in_order(strstr(maps, "\nOWNER "),
			(const char *const[]){ "\nlibsmall.so ", "\nlibtie_a.so ", "\nlibbig.so " },
			3);
	free(txt);
	mp_profile_free(p);
}

Test(owners, html_data_by_bytes_allocated_then_name)
{
	struct mp_profile *p = owners_profile();
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	const char *owners;

	cr_assert_not_null(f);
	cr_assert_eq(mp_html_write_data(p, f), 0);
	cr_assert_eq(fclose(f), 0);
	owners = strstr(buf, "\"owners\":[");
	cr_assert_not_null(owners, "%s", buf);
	expect_in_order(owners,
			(const char *const[]){ "{\"name\":\"libbig.so\",\"allocBytes\":9000,",
					       "{\"name\":\"libtie_a.so\",\"allocBytes\":500,",
					       "{\"name\":\"libtie_b.so\",\"allocBytes\":500,",
					       "{\"name\":\"libsmall.so\",\"allocBytes\":100,",
					       "\"tags\":[" },
			5);
	free(buf);
	mp_profile_free(p);
}
