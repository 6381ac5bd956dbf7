/* SPDX-License-Identifier: MIT */
/*
 * Chrome trace test helpers: render a profile to text, and check a trace
 * with tests/output/validate_trace.py (strict JSON, fields, counters
 * monotone, slices nested, names present).
 */
#ifndef MP_TEST_CHROME_HELPERS_H
#define MP_TEST_CHROME_HELPERS_H

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "chrome.h"

#define CHROME_UNUSED __attribute__((unused))

static CHROME_UNUSED char *chrome_render(const struct mp_profile *p)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	cr_assert_not_null(f);
	cr_assert_eq(mp_chrome_write(p, f), 0);
	cr_assert_eq(fclose(f), 0);
	return buf;
}

/* Runs the validator on the trace in @path; returns its output line. */
static CHROME_UNUSED char *validate_file(const char *path)
{
	const char *src = getenv("MEMPROF_SOURCE_ROOT");
	char cmd[8192], *line = calloc(1, 4096);
	FILE *f;

	cr_assert_not_null(src, "MEMPROF_SOURCE_ROOT is not set (run through meson test)");
	cr_assert_not_null(line);
	snprintf(cmd, sizeof(cmd), "python3 '%s/tests/output/validate_trace.py' '%s' 2>&1", src,
		 path);
	f = popen(cmd, "r");
	cr_assert_not_null(f);
	if (!fgets(line, 4096, f))
		line[0] = '\0';
	pclose(f);
	line[strcspn(line, "\n")] = '\0';
	return line;
}

static CHROME_UNUSED char *validate_text(const char *text)
{
	char path[] = "/tmp/memprof-chrome-XXXXXX";
	int fd = mkstemp(path);
	size_t len = strlen(text);
	char *line;

	cr_assert_geq(fd, 0);
	cr_assert_eq(write(fd, text, len), (ssize_t)len);
	close(fd);
	line = validate_file(path);
	unlink(path);
	return line;
}

/* The site events of the trace in @path as tests/output/trace_sites.py
 * prints them (their stacks resolved through stackFrames, by Python's json
 * module): the whole output. @stop: the frame a chain ends at, or NULL. */
static CHROME_UNUSED char *sites_of_file(const char *path, const char *stop)
{
	const char *src = getenv("MEMPROF_SOURCE_ROOT");
	char cmd[8192], *buf = NULL, chunk[4096];
	size_t len = 0, n;
	FILE *f, *m = open_memstream(&buf, &len);

	cr_assert_not_null(src, "MEMPROF_SOURCE_ROOT is not set (run through meson test)");
	cr_assert_not_null(m);
	snprintf(cmd, sizeof(cmd), "python3 '%s/tests/output/trace_sites.py' %s%s%s '%s' 2>&1", src,
		 stop ? "--stop '" : "", stop ? stop : "", stop ? "'" : "", path);
	f = popen(cmd, "r");
	cr_assert_not_null(f);
	while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
		fwrite(chunk, 1, n, m);
	cr_assert_eq(pclose(f), 0, "%s failed", cmd);
	cr_assert_eq(fclose(m), 0);
	return buf;
}

static CHROME_UNUSED char *sites_of_text(const char *text, const char *stop)
{
	char path[] = "/tmp/memprof-chrome-XXXXXX";
	int fd = mkstemp(path);
	size_t len = strlen(text);
	char *out;

	cr_assert_geq(fd, 0);
	cr_assert_eq(write(fd, text, len), (ssize_t)len);
	close(fd);
	out = sites_of_file(path, stop);
	unlink(path);
	return out;
}

#endif /* MP_TEST_CHROME_HELPERS_H */
