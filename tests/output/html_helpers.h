/* SPDX-License-Identifier: MIT */
/*
 * The HTML report in a real browser: Debian's chromium, headless, loads the
 * page from its file and dumps the DOM its script built. The page marks
 * <body> with data-mp-ready="1" once its script ran, data-mp-errors (script
 * errors, window.onerror included) and data-mp-render-ms (navigation start
 * to the page drawn, measured in the page).
 */
#ifndef MP_TEST_HTML_HELPERS_H
#define MP_TEST_HTML_HELPERS_H

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/helpers.h"
#include "run_helpers.h"

/* The DOM of @html_path after its scripts ran (caller frees). */
static __attribute__((unused)) char *html_dom(const char *html_path)
{
	char profile_dir[128], udd[160], url[4200];
	struct run r;

	mp_test_tmpdir(profile_dir, sizeof(profile_dir), "chromium");
	snprintf(udd, sizeof(udd), "--user-data-dir=%s", profile_dir);
	snprintf(url, sizeof(url), "file://%s", html_path);
	r = run_cmd((char *[]){ "/usr/bin/chromium", "--headless", "--no-sandbox", "--disable-gpu",
				"--no-first-run", "--window-size=1280,1000", udd, "--dump-dom", url,
				NULL },
		    NULL);
	mp_test_rmtree(profile_dir);
	cr_assert_eq(r.status, 0, "chromium failed: %s", r.err);
	free(r.err);
	cr_assert_not_null(strstr(r.out, "</html>"), "chromium dumped no page: %.400s", r.out);
	return r.out;
}

/* The value of attribute @name in the tag of @dom that starts with @tag
 * (e.g. "<body", "<canvas id=\"mp-timeline\""), in @buf; NULL if absent. */
static __attribute__((unused)) const char *html_attr(const char *dom, const char *tag,
						     const char *name, char *buf, size_t size)
{
	const char *t = strstr(dom, tag), *end, *a;
	char key[64];
	size_t n;

	if (!t)
		return NULL;
	end = strchr(t, '>');
	snprintf(key, sizeof(key), " %s=\"", name);
	a = strstr(t, key);
	if (!end || !a || a > end)
		return NULL;
	a += strlen(key);
	n = strcspn(a, "\"");
	if (n >= size)
		n = size - 1;
	memcpy(buf, a, n);
	buf[n] = '\0';
	return buf;
}

/* A number attribute of the tag, -1 when absent. */
static __attribute__((unused)) double html_num(const char *dom, const char *tag, const char *name)
{
	char buf[64];

	return html_attr(dom, tag, name, buf, sizeof(buf)) ? strtod(buf, NULL) : -1;
}

/* The page's script ran to its end and reported no error. */
static __attribute__((unused)) void html_expect_ran(const char *dom)
{
	char buf[4096];
	const char *e = strstr(dom, "<div id=\"mp-errors\">");

	cr_assert_str_eq(html_attr(dom, "<body", "data-mp-ready", buf, sizeof(buf)) ?: "(none)",
			 "1", "the page's script did not finish");
	cr_expect_str_eq(html_attr(dom, "<body", "data-mp-errors", buf, sizeof(buf)) ?: "(none)",
			 "0", "script errors: %.2000s", e ? e : "(no #mp-errors)");
	cr_expect_not_null(strstr(dom, "<div id=\"mp-errors\"></div>"), "script errors: %.2000s",
			   e ? e : "(no #mp-errors)");
}

/* @v with thousands separators, as the page writes bytes. */
static __attribute__((unused)) const char *html_group(unsigned long long v, char *buf, size_t size)
{
	char d[32];
	int n = snprintf(d, sizeof(d), "%llu", v), o = 0;

	for (int i = 0; i < n && (size_t)o + 2 < size; i++) {
		if (i && (n - i) % 3 == 0)
			buf[o++] = ',';
		buf[o++] = d[i];
	}
	buf[o] = '\0';
	return buf;
}

#endif /* MP_TEST_HTML_HELPERS_H */
