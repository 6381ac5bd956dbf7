// SPDX-License-Identifier: MIT
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "options.h"
#include "rss.h"
#include "stream.h"

void mp_options_init(struct mp_options *o)
{
	memset(o, 0, sizeof(*o));
	o->session.rss_hz = MP_RSS_DEFAULT_HZ;
	o->session.pss_every = MP_RSS_DEFAULT_PSS_EVERY;
	o->out.print = MP_REPORT_TABLE;
	o->stream_interval_ns = 10ull * 1000000000ull;
}

void mp_options_help(FILE *f, bool with_pid)
{
	mp_opt_help(f, with_pid ? MP_OPT_PID : MP_OPT_RUN);
}

/* The one message of a refused value: what would be valid. */
static int bad(const struct mp_option *o, const char *arg)
{
	char hint[160];

	mp_opt_hint(o, MP_OPT_CLI, hint, sizeof(hint));
	return log_error_errno(-EINVAL, "invalid --%s '%s' (%s; see --help)", o->name, arg, hint);
}

static int too_many(const struct mp_option *o, const char *arg)
{
	return log_error_errno(-EINVAL, "too many --%s: '%s' (see --help)", o->name, arg);
}

/* "1s", "250ms", "1.5s" -> ns; 0 on error. */
static uint64_t parse_span(const char *s, size_t len)
{
	char buf[32], *end;
	double d, unit;

	if (!len || len >= sizeof(buf))
		return 0;
	memcpy(buf, s, len);
	buf[len] = '\0';
	errno = 0;
	d = strtod(buf, &end);
	if (errno || end == buf || !isfinite(d) || !(d > 0))
		return 0;
	if (!strcmp(end, "ms"))
		unit = 1e6;
	else if (!strcmp(end, "s") || !*end)
		unit = 1e9;
	else
		return 0;
	if (d * unit > 1e15)
		return 0;
	return (uint64_t)(d * unit);
}

/* --duty ON/PERIOD with 0 < ON < PERIOD. */
static int parse_duty(const char *arg, uint64_t *ret_on, uint64_t *ret_period)
{
	const char *slash = strchr(arg, '/');
	uint64_t on, period;

	if (!slash)
		return -EINVAL;
	on = parse_span(arg, (size_t)(slash - arg));
	period = parse_span(slash + 1, strlen(slash + 1));
	if (!on || !period || on >= period)
		return -EINVAL;
	*ret_on = on;
	*ret_period = period;
	return 0;
}

/* --ca FILE: the https collectors of this command use FILE, as if each
 * URL said ca=FILE (the URLs live as long as the program). */
static int add_ca(struct mp_options *o, const char *ca)
{
	static char urls[MP_OPTIONS_MAX_STREAMS][MP_STREAM_MAX_URL];

	for (size_t i = 0; i < o->n_streams; i++) {
		const char *u = o->streams[i];
		int n;

		if (strncmp(u, "https://", 8) && !strstr(u, "+https://"))
			continue;
		if (strstr(u, "?ca=") || strstr(u, "&ca="))
			return -EINVAL;
		n = snprintf(urls[i], sizeof(urls[i]), "%s%cca=%s", u, strchr(u, '?') ? '&' : '?',
			     ca);
		if (n < 0 || (size_t)n >= sizeof(urls[i]) || mp_stream_url_check(urls[i]) < 0)
			return -EINVAL;
		o->streams[i] = urls[i];
	}
	return 0;
}

#define FIELD(id, member)                                            \
	{                                                            \
		MP_OPT_ID_##id, offsetof(struct mp_options, member), \
			sizeof(((struct mp_options *)0)->member)     \
	}

/* Options that set one number or flag: stored as the table parsed them. */
static const struct {
	enum mp_opt_id id;
	size_t off, size;
} fields[] = {
	FIELD(PID, session.pid),
	FIELD(DURATION, session.duration_ns),
	FIELD(STREAM_INTERVAL, stream_interval_ns),
	FIELD(RSS_HZ, session.rss_hz),
	FIELD(PSS_EVERY, session.pss_every),
	FIELD(RSS_EXACT, session.rss_exact),
	FIELD(MODE, session.mode),
	FIELD(SAMPLE_BYTES, session.sample_bytes),
	FIELD(MAX_WAIT, session.max_wait_ns),
	FIELD(STACKS, session.stacks),
	FIELD(NO_DEFAULT_WRAPPERS, session.no_default_wrappers),
	FIELD(STACK_DEPTH, session.stack_depth),
	FIELD(STACK_BYTES, session.stack_bytes),
	FIELD(TRACER, session.tracer),
	FIELD(MAX_MEMORY, session.max_memory),
	FIELD(MAX_SITES, session.max_sites),
	FIELD(MAX_STACKS, session.max_stacks),
	FIELD(NO_PRELOAD, no_preload),
	FIELD(TORCH, torch),
	FIELD(DEBUGINFOD, debuginfod),
	FIELD(MERGE_LAG, session.lag_ns),
	FIELD(VERBOSE, session.verbose),
};

/* An option apply_*() does not know: the next one is asked. */
#define NOT_MINE 1

/* Where the profile goes: -o, --format, --stream, --print, --region. */
static int apply_output(struct mp_options *o, const struct mp_option *opt, const char *arg)
{
	switch (opt->id) {
	case MP_OPT_ID_OUTPUT:
		o->out.output = arg;
		return 0;
	case MP_OPT_ID_STREAM:
		if (o->n_streams >= MP_OPTIONS_MAX_STREAMS)
			return too_many(opt, arg);
		o->streams[o->n_streams++] = (char *)arg;
		return 0;
	case MP_OPT_ID_FORMAT:
		if (strcmp(arg, "pprof") && strcmp(arg, "memprof"))
			return bad(opt, arg);
		o->out.pprof = !strcmp(arg, "pprof");
		return 0;
	case MP_OPT_ID_PRINT:
		o->out.print_none = !strcmp(arg, "none");
		/* the page is for `memprof report -o`, not for a terminal */
		if (!o->out.print_none && (mp_report_format_parse(arg, &o->out.print) < 0 ||
					   o->out.print == MP_REPORT_HTML))
			return bad(opt, arg);
		return 0;
	case MP_OPT_ID_POOL:
		o->out.pool = arg;
		return 0;
	case MP_OPT_ID_REGION:
		o->out.region = arg;
		return 0;
	default:
		return NOT_MINE;
	}
}

/* What is traced beyond the table's plain fields: functions, owners. */
static int apply_trace(struct mp_session_opts *s, const struct mp_option *opt, const char *arg)
{
	const struct mp_tracer_func *fs;
	size_t n;

	switch (opt->id) {
	case MP_OPT_ID_ALLOC:
	case MP_OPT_ID_FREE:
		if (s->n_extra >= MP_TRACER_MAX_EXTRA)
			return too_many(opt, arg);
		if (mp_tracer_parse_func(arg, opt->id == MP_OPT_ID_FREE, &s->extra[s->n_extra]) < 0)
			return bad(opt, arg);
		s->n_extra++;
		return 0;
	case MP_OPT_ID_DEVICE:
		if (mp_tracer_device_preset(arg, &fs, &n) < 0)
			return bad(opt, arg);
		if (s->n_extra + n > MP_TRACER_MAX_EXTRA)
			return too_many(opt, arg);
		for (size_t i = 0; i < n; i++)
			s->extra[s->n_extra++] = fs[i];
		return 0;
	case MP_OPT_ID_OWNER:
		if (s->n_owner_rules >= MP_SESSION_MAX_OWNER_RULES)
			return too_many(opt, arg);
		s->owner_rules[s->n_owner_rules++] = arg;
		return 0;
	case MP_OPT_ID_WRAPPER:
		if (s->n_wrapper_dsos >= MP_SESSION_MAX_WRAPPERS)
			return too_many(opt, arg);
		s->wrapper_dsos[s->n_wrapper_dsos++] = arg;
		return 0;
	case MP_OPT_ID_WRAPPER_FN:
		if (s->n_wrapper_fns >= MP_SESSION_MAX_WRAPPERS)
			return too_many(opt, arg);
		s->wrapper_fns[s->n_wrapper_fns++] = arg;
		return 0;
	case MP_OPT_ID_DUTY:
		if (parse_duty(arg, &s->duty_on_ns, &s->duty_period_ns) < 0)
			return bad(opt, arg);
		return 0;
	case MP_OPT_ID_NO_STACKS:
		s->stacks = false;
		return 0;
	case MP_OPT_ID_DUMP_EVENTS:
		s->dump = stdout;
		return 0;
	default:
		return NOT_MINE;
	}
}

/* One option of the command line, its value checked by the table. */
static int apply(struct mp_options *o, const struct mp_option *opt, const char *arg,
		 const char **ca)
{
	struct mp_opt_value v = { .u = 1, .s = arg };
	int r;

	if (opt->type != MP_OPT_FLAG && mp_opt_parse(opt, MP_OPT_CLI, arg, &v) < 0)
		return bad(opt, arg);
	for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++)
		if (fields[i].id == opt->id) {
			mp_opt_store(o, fields[i].off, fields[i].size, v.u);
			if (opt->id == MP_OPT_ID_SAMPLE_BYTES)
				o->session.mode = MP_TRACE_SAMPLED;
			if (opt->id == MP_OPT_ID_VERBOSE)
				mp_log_set_max_level(LOG_DEBUG);
			return 0;
		}
	if (opt->id == MP_OPT_ID_CA) {
		if (arg[0] != '/' || strlen(arg) >= 256 || strpbrk(arg, "&?#%"))
			return bad(opt, arg);
		*ca = arg;
		return 0;
	}
	r = apply_output(o, opt, arg);
	if (r == NOT_MINE)
		r = apply_trace(&o->session, opt, arg);
	return r == NOT_MINE ? -EINVAL : r;
}

/* Settings that only make sense together. */
static int options_check(struct mp_session_opts *s, bool with_pid)
{
	if (s->mode == MP_TRACE_SAMPLED && !s->sample_bytes)
		s->sample_bytes = MP_SAMPLE_BYTES_DEFAULT;
	if (s->duty_period_ns && s->mode == MP_TRACE_RSS)
		return log_error_errno(-EINVAL, "invalid --duty with --mode rss (see --help)");
	if (with_pid && !s->pid)
		return log_error_errno(-EINVAL, "--pid PID is required (see --help)");
	return 0;
}

/* "memprofd --pid and memprof attach": where else --NAME is accepted. */
static int not_here(const struct mp_option *opt)
{
	static const char *const fronts[] = { "memprofd --pid", "memprof run", "memprof attach" };
	char where[96] = "";

	for (size_t i = 0; i < 3; i++)
		if (opt->where & (1u << i))
			snprintf(where + strlen(where), sizeof(where) - strlen(where), "%s%s",
				 where[0] ? " and " : "", fronts[i]);
	return log_error_errno(-EINVAL, "--%s is an option of %s only (see --help)", opt->name,
			       where);
}

int mp_options_parse(struct mp_options *o, int argc, char **argv, bool with_pid)
{
	struct option longopts[MP_OPT_N + 1];
	unsigned scope = with_pid ? MP_OPT_PID : MP_OPT_RUN;
	const char *ca = NULL;
	size_t n = 0;
	int c, r;

	for (size_t i = 0; i < MP_OPT_N; i++) {
		const struct mp_option *opt = &mp_options_table[i];

		if (opt->name && (opt->where & (MP_OPT_PID | MP_OPT_RUN | MP_OPT_ATTACH)))
			longopts[n++] =
				(struct option){ opt->name,
						 opt->type == MP_OPT_FLAG ? no_argument :
									    required_argument,
						 NULL, 0x100 + (int)i };
	}
	longopts[n] = (struct option){ 0 };
	/* "+": stop at the first operand, it is the command of `memprof run`. */
	while ((c = getopt_long(argc, argv, with_pid ? "+p:d:o:vh" : "+d:o:vh", longopts, NULL)) !=
	       -1) {
		char name[2] = { (char)c, '\0' };
		const struct mp_option *opt =
			c >= 0x100 ? &mp_options_table[c - 0x100] : mp_opt_by_name(name);

		if (!opt || c == '?')
			return -EINVAL;
		if (!(opt->where & scope))
			return not_here(opt);
		if (opt->id == MP_OPT_ID_HELP)
			return 1;
		r = apply(o, opt, optarg, &ca);
		if (r < 0)
			return r;
	}
	if (ca && add_ca(o, ca) < 0)
		return log_error_errno(-EINVAL,
				       "invalid --ca '%s' with these --stream URLs (too long, or "
				       "one has ca= already)",
				       ca);
	return options_check(&o->session, with_pid);
}
