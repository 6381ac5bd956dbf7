/* SPDX-License-Identifier: MIT */
/*
 * `memprof report --format html -o` on a real profile: the bundled demo
 * (examples/demo.c, built plain) under `memprof run --stacks`, rendered by
 * headless chromium. The page ran without a script error and shows the
 * demo's kernels, its peak (examples/README.md: 331344 B), its phases,
 * tags and pool, a drawn timeline and the flame graph of its stacks at
 * the peak.
 * Needs root (memprof run).
 */
#include <errno.h>

#include "../common/helpers.h"
#include "html_helpers.h"

static char dir[128];

static void setup(void)
{
	mp_test_need_root("memprof run");
	mp_test_tmpdir(dir, sizeof(dir), "html-real");
}

static void teardown(void)
{
	mp_test_rmtree(dir);
}

TestSuite(html_real, .init = setup, .fini = teardown);

static char *section(const char *dom, const char *start, const char *end)
{
	const char *a = strstr(dom, start), *b;

	cr_assert_not_null(a, "no %s in the page", start);
	b = strstr(a, end);
	cr_assert_not_null(b, "%s does not end", start);
	return strndup(a, (size_t)(b - a));
}

Test(html_real, demo_report)
{
	static const char *const kernels[] = { "load_weights", "conv2d", "relu", "matmul",
					       "softmax" };
	char profile[192], page[192], url[224], want[128], *dom, *part;
	struct run r;

	snprintf(profile, sizeof(profile), "%s/demo.memprof", dir);
	snprintf(page, sizeof(page), "%s/demo.html", dir);
	/* RSS at 1 kHz: the three steps take ~12 ms, about one tick at the
	 * default 100 Hz, none when the machine is faster */
	r = run_cmd((char *[]){ (char *)memprof_bin(), "run", "--stacks", "--rss-hz", "1000", "-o",
				profile, "--", mp_test_build_path("tests/output/html-demo"), "3",
				NULL },
		    NULL);
	cr_assert_eq(r.status, 0, "memprof run: %s", r.err);
	run_free(&r);
	r = run_cmd((char *[]){ (char *)memprof_bin(), "report", profile, "--format", "html", "-o",
				page, NULL },
		    NULL);
	cr_assert_eq(r.status, 0, "memprof report: %s", r.err);
	cr_expect_str_empty(r.err);
	cr_expect_str_empty(r.out);
	run_free(&r);

	dom = html_dom(page);
	html_expect_ran(dom);
	part = section(dom, "<table id=\"mp-kernels\">", "</table>");
	for (size_t i = 0; i < sizeof(kernels) / sizeof(kernels[0]); i++) {
		snprintf(want, sizeof(want), "%s</td>", kernels[i]);
		cr_expect_not_null(strstr(part, want), "no kernel %s in %s", kernels[i], part);
	}
	free(part);
	cr_expect_not_null(strstr(dom, "id=\"mp-peak\">331,344 B<"), "no peak 331,344 B");
	cr_expect_not_null(strstr(dom, "<li class=\"ok\">Nothing flagged"));
	cr_expect_gt(html_num(dom, "<canvas id=\"mp-timeline\"", "data-heap-columns"), 0);
	/* the RSS line (its samples may all precede the first view) */
	cr_expect_eq(html_num(dom, "<canvas id=\"mp-timeline\"", "data-rss-drawn"), 1);
	cr_expect_gt(html_num(dom, "<canvas id=\"mp-timeline\"", "data-slices"), 0);
	part = section(dom, "<table id=\"mp-phases\">", "</table>");
	cr_expect_not_null(strstr(part, ">load</td>"), "%s", part);
	cr_expect_not_null(strstr(part, ">inference</td>"), "%s", part);
	cr_expect_not_null(strstr(part, ">teardown</td>"), "%s", part);
	free(part);
	part = section(dom, "<table id=\"mp-tags\">", "</table>");
	cr_expect_not_null(strstr(part, ">weights</td>"), "%s", part);
	free(part);
	part = section(dom, "<table id=\"mp-pools\">", "</table>");
	cr_expect_not_null(strstr(part, ">activations</td><td class=\"name\">host</td>"), "%s",
			   part);
	free(part);
	/* the flame graph of bytes live at the peak, its default: every heap
	 * byte live at the demo's peak is in a site (the table holds every
	 * site), under main; the peak is reached in load_weights with the
	 * staging buffer and the four weights live, all allocated there
	 * (examples/README.md), so no other kernel's frame is in it */
	part = section(dom, "<svg id=\"mp-flame\"", "</svg>");
	cr_expect_eq(html_num(dom, "<svg id=\"mp-flame\"", "data-kind"), 4, "%s", part);
	cr_expect_not_null(strstr(part, "<title>all\n331,344 B"), "%s", part);
	cr_expect_not_null(strstr(part, "<title>main\n331,344 B"), "%s", part);
	cr_expect_not_null(strstr(part, "<title>load_weights\n331,344 B"), "%s", part);
	cr_expect_null(strstr(part, "<title>conv2d\n"), "%s", part);
	free(part);
	free(dom);

	/* The page driven as a user would (report.js selftest()): the wheel
	 * zooms in, a drag pans, hovering shows the heap, a click on the first
	 * kernel shows its tf.profile region, load_weights' figures in
	 * examples/README.md. */
	snprintf(url, sizeof(url), "%s#selftest", page);
	dom = html_dom(url);
	html_expect_ran(dom);
	cr_expect_str_eq(html_attr(dom, "<body", "data-mp-selftest", want, sizeof(want)) ?:
											   "(none)",
			 "zoom in; pan earlier; tip heap live; click load_weights#1");
	cr_expect_not_null(strstr(dom, "{\"newBytes\":165672,\"newTensors\":4,\"peakBytes\":331344,"
				       "\"kernels\":[]}"),
			   "%s", dom);
	free(dom);
}

/* A report that cannot be written says why and exits 1. */
Test(html_real, unwritable_output)
{
	char profile[192], want[256];
	struct run r;

	snprintf(profile, sizeof(profile), "%s/p.memprof", dir);
	r = run_cmd((char *[]){ (char *)memprof_bin(), "run", "-o", profile, "--",
				mp_test_build_path("tests/output/html-demo"), "1", NULL },
		    NULL);
	cr_assert_eq(r.status, 0, "memprof run: %s", r.err);
	run_free(&r);
	r = run_cmd((char *[]){ (char *)memprof_bin(), "report", profile, "--format", "html", "-o",
				"/nonexistent-dir/r.html", NULL },
		    NULL);
	snprintf(want, sizeof(want), "memprof report: writing /nonexistent-dir/r.html: %s\n",
		 strerror(ENOENT));
	cr_expect_eq(r.status, 1);
	cr_expect_str_eq(r.err, want);
	cr_expect_str_empty(r.out);
	run_free(&r);
}
