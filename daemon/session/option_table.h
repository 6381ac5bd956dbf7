/* SPDX-License-Identifier: MIT */
/*
 * Every option of memprofd and memprof in one table: its command-line name,
 * its key in the service's configuration file and in control requests, its
 * type, bounds and help text. The command line (options.c, memprof attach),
 * the configuration file (config.c) and attach requests (service.c) parse
 * values with mp_opt_parse(), so a bound is written once.
 */
#ifndef MP_OPTION_TABLE_H
#define MP_OPTION_TABLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Where an option is accepted (struct mp_option.where). */
enum {
	MP_OPT_PID = 1u << 0, /* memprofd --pid */
	MP_OPT_RUN = 1u << 1, /* memprof run */
	MP_OPT_ATTACH = 1u << 2, /* memprof attach and the attach request */
	MP_OPT_CONFIG = 1u << 3, /* the service's configuration file */
};

/* How a value is written; the command line, the file and a request
 * spell some types differently (said here, done in mp_opt_parse()). */
enum mp_opt_type {
	MP_OPT_FLAG, /* no argument; file: yes|no; request: 0|1 */
	MP_OPT_UINT, /* decimal in [min, max] */
	MP_OPT_SIZE, /* decimal bytes, optional K, M or G suffix, in [min, max] */
	MP_OPT_POW2, /* MP_OPT_SIZE, and a power of two */
	MP_OPT_MSEC, /* decimal milliseconds in [min, max]; the value is in ns */
	MP_OPT_SECONDS, /* decimal seconds; request: integer ns; [min, max] ns */
	MP_OPT_MODE, /* precise, sampled or rss (enum mp_trace_mode) */
	MP_OPT_TRACER, /* auto, inprocess or bpf (enum mp_tracer_path) */
	MP_OPT_OWNER, /* GLOB=NAME */
	MP_OPT_URL, /* a stream URL (mp_stream_url_check) */
	MP_OPT_TEXT, /* any text; the front end checks it */
};

enum mp_opt_id {
	MP_OPT_ID_PID,
	MP_OPT_ID_STREAM,
	MP_OPT_ID_CA,
	MP_OPT_ID_STREAM_INTERVAL,
	MP_OPT_ID_DURATION,
	MP_OPT_ID_OUTPUT,
	MP_OPT_ID_FORMAT,
	MP_OPT_ID_PRINT,
	MP_OPT_ID_REGION,
	MP_OPT_ID_POOL,
	MP_OPT_ID_ALLOC,
	MP_OPT_ID_FREE,
	MP_OPT_ID_DEVICE,
	MP_OPT_ID_OWNER,
	MP_OPT_ID_WRAPPER,
	MP_OPT_ID_WRAPPER_FN,
	MP_OPT_ID_NO_DEFAULT_WRAPPERS,
	MP_OPT_ID_RSS_HZ,
	MP_OPT_ID_PSS_EVERY,
	MP_OPT_ID_RSS_EXACT,
	MP_OPT_ID_MODE,
	MP_OPT_ID_SAMPLE_BYTES,
	MP_OPT_ID_MAX_WAIT,
	MP_OPT_ID_DUTY,
	MP_OPT_ID_STACKS,
	MP_OPT_ID_NO_STACKS,
	MP_OPT_ID_STACK_DEPTH,
	MP_OPT_ID_STACK_BYTES,
	MP_OPT_ID_DEBUGINFOD,
	/* Limits: the bounds of a target's tables (docs/PROFILE.md "Limits"). */
	MP_OPT_ID_MAX_MEMORY,
	MP_OPT_ID_MAX_SITES,
	MP_OPT_ID_MAX_STACKS,
	MP_OPT_ID_TRACER,
	MP_OPT_ID_NO_PRELOAD,
	MP_OPT_ID_TORCH,
	MP_OPT_ID_DUMP_EVENTS,
	MP_OPT_ID_MERGE_LAG,
	MP_OPT_ID_VERBOSE,
	MP_OPT_ID_HELP,
	/* The service's own settings: configuration file only. */
	MP_OPT_ID_COLLECTOR,
	MP_OPT_ID_MAX_TARGETS,
	MP_OPT_ID_MAX_CONNS,
	MP_OPT_ID_MAX_CONNS_PER_UID,
	MP_OPT_ID_BUFFER_SIZE,
	MP_OPT_ID_BPF_RING_SIZE,
	MP_OPT_ID_MEMORY_BUDGET,
	MP_OPT_ID_STREAM_PER_UID,
	MP_OPT_ID_STREAM_TOTAL,
	MP_OPT_N,
};

struct mp_option {
	enum mp_opt_id id;
	const char *name; /* --NAME; NULL: not on the command line */
	char short_name; /* -X, or 0 */
	const char *key; /* configuration / request key; NULL: none */
	enum mp_opt_type type;
	unsigned where; /* MP_OPT_* */
	uint64_t min, max;
	const char *hint; /* the valid values, for errors; NULL: from min, max */
	const char *arg; /* the argument in --help ("N"); NULL: none */
	const char *help; /* NULL: not in --help; '\n' separates lines */
};

/* How a value was given: the spelling of flags and durations differs. */
enum mp_opt_front {
	MP_OPT_CLI,
	MP_OPT_FILE,
	MP_OPT_REQUEST,
};

struct mp_opt_value {
	uint64_t u; /* numbers (durations in ns), flags, enums */
	const char *s; /* MP_OPT_OWNER, _URL, _TEXT: the text itself */
};

/* The table, in --help order, MP_OPT_N entries indexed by id. */
extern const struct mp_option mp_options_table[MP_OPT_N];

/* The entry for --@name (or -@name[0] when @name is one character),
 * configuration / request @key; NULL when none. */
const struct mp_option *mp_opt_by_name(const char *name);
const struct mp_option *mp_opt_by_key(const char *key);

/* Parses and checks @text as given through @front. -EINVAL when it is
 * not a valid value; @ret is untouched then. */
int mp_opt_parse(const struct mp_option *o, enum mp_opt_front front, const char *text,
		 struct mp_opt_value *ret);

/* What a valid value looks like ("1 to 256", "precise, sampled or rss"). */
void mp_opt_hint(const struct mp_option *o, enum mp_opt_front front, char *buf, size_t len);

/* Stores @v in the integer or bool field at @off of @base, @size bytes. */
void mp_opt_store(void *base, size_t off, size_t size, uint64_t v);

/* Prints "  -p, --pid PID   help..." for every option of @where. */
void mp_opt_help(FILE *f, unsigned where);

#endif /* MP_OPTION_TABLE_H */
