/* SPDX-License-Identifier: MIT */
/* Profiling options shared by `memprofd --pid` and `memprof run`. */
#ifndef MP_OPTIONS_H
#define MP_OPTIONS_H

#include <stdbool.h>
#include <stdio.h>

#include "report.h"
#include "session.h"

#define MP_OPTIONS_MAX_STREAMS 16

struct mp_options {
	struct mp_session_opts session;
	const char *output; /* -o FILE: memprof.proto profile */
	bool output_pprof; /* --format pprof: -o writes gzipped pprof instead */
	enum mp_report_format print; /* what to print on stdout at the end */
	bool print_none;
	const char *region; /* --region for the tfjs view */
	bool no_preload; /* memprof run --no-preload */
	const char *pool; /* --pool: the tfjs view reports this pool */
	/* memprofd --pid only: collectors to stream chunks to, and how often. */
	char *streams[MP_OPTIONS_MAX_STREAMS];
	size_t n_streams;
	uint64_t stream_interval_ns;
};

/* Defaults: RSS at 100 Hz, Pss every 10th sample, print a table. */
void mp_options_init(struct mp_options *o);

/* Parses argv[optind...] with getopt_long until the first non-option (or
 * "--"); @with_pid accepts -p/--pid. Returns 0 (optind is left at the first
 * operand), 1 when --help was printed, or -EINVAL after printing the problem
 * to stderr. */
int mp_options_parse(struct mp_options *o, int argc, char **argv, bool with_pid);

/* The option lines of --help. */
void mp_options_help(FILE *f, bool with_pid);

/* Writes the profile where the options say (-o file, stdout view). Returns
 * 0 or a negative errno, logged. */
int mp_options_emit(const struct mp_options *o, const struct mp_profile *p);

#endif /* MP_OPTIONS_H */
