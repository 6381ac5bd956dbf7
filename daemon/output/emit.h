/* SPDX-License-Identifier: MIT */
/*
 * Where a finished profile goes at the end of `memprofd --pid` and
 * `memprof run`: the -o file (memprof.proto or gzipped pprof) and the view
 * printed on stdout.
 */
#ifndef MP_EMIT_H
#define MP_EMIT_H

#include <stdbool.h>
#include <stdio.h>

#include "report.h"

struct mp_profile;

struct mp_emit {
	const char *output; /* -o FILE: memprof.proto profile; NULL: none */
	bool pprof; /* --format pprof: -o writes gzipped pprof instead */
	enum mp_report_format print; /* what to print at the end */
	bool print_none;
	const char *region; /* --region for the tfjs view */
	const char *pool; /* --pool: the tfjs view reports this pool */
};

/* Writes @p where @e says, the view to @out. Returns 0 or a negative
 * errno, logged. */
int mp_emit_profile(const struct mp_emit *e, const struct mp_profile *p, FILE *out);

#endif /* MP_EMIT_H */
