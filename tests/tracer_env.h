/* SPDX-License-Identifier: MIT */
/*
 * The integration suites run once per allocation path: meson registers them
 * twice, with MEMPROF_TEST_TRACER=inprocess and =bpf, and every `memprof
 * run` or `memprofd` command line a test starts gets `--tracer` with that
 * value (docs/TRACER.md "Two allocation paths"). Unset: the default (auto).
 */
#ifndef MP_TEST_TRACER_ENV_H
#define MP_TEST_TRACER_ENV_H

#include <stdlib.h>
#include <string.h>

/* @argv, or a copy (static storage, valid until the next call) with
 * "--tracer VALUE" after `memprof run` / `memprofd`. */
static __attribute__((unused)) char *const *mp_test_argv(char *const argv[])
{
	static char *buf[128];
	const char *t = getenv("MEMPROF_TEST_TRACER"), *base;
	size_t n = 0, at;

	if (!t || !*t)
		return argv;
	base = strrchr(argv[0], '/');
	base = base ? base + 1 : argv[0];
	if (!strcmp(base, "memprofd"))
		at = 1;
	else if (!strcmp(base, "memprof") && argv[1] && !strcmp(argv[1], "run"))
		at = 2;
	else
		return argv;
	for (size_t i = 0; argv[i] && n + 3 < sizeof(buf) / sizeof(buf[0]); i++) {
		if (i == at) {
			buf[n++] = "--tracer";
			buf[n++] = (char *)t;
		}
		buf[n++] = argv[i];
	}
	if (n == at) {
		buf[n++] = "--tracer";
		buf[n++] = (char *)t;
	}
	buf[n] = NULL;
	return buf;
}

#endif /* MP_TEST_TRACER_ENV_H */
