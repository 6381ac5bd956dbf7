/* SPDX-License-Identifier: MIT */
/* The command line shared by `memprofd --pid` and `memprof run`, parsed
 * with the option table (option_table.h). */
#ifndef MP_OPTIONS_H
#define MP_OPTIONS_H

#include <stdbool.h>
#include <stdio.h>

#include "emit.h"
#include "option_table.h"
#include "session.h"

#define MP_OPTIONS_MAX_STREAMS 16

struct mp_options {
	struct mp_session_opts session;
	struct mp_emit out; /* -o, --format, --print, --region, --pool */
	bool no_preload; /* memprof run --no-preload */
	bool torch; /* memprof run --torch */
	bool debuginfod; /* --debuginfod: mp_dwfl_set_net() */
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

/* The option lines of --help, from the option table. */
void mp_options_help(FILE *f, bool with_pid);

#endif /* MP_OPTIONS_H */
