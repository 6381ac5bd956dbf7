// SPDX-License-Identifier: MIT
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "options.h"
#include "outfile.h"
#include "pprof.h"
#include "profile_pb.h"
#include "rss.h"
#include "stream.h"
#include "unwind.h"

enum {
	OPT_ALLOC = 0x100,
	OPT_FREE,
	OPT_OWNER,
	OPT_RSS_HZ,
	OPT_PSS_EVERY,
	OPT_RSS_EXACT,
	OPT_DUMP,
	OPT_PRINT,
	OPT_REGION,
	OPT_LAG,
	OPT_FORMAT,
	OPT_STREAM,
	OPT_STREAM_INTERVAL,
	OPT_CA,
	OPT_MODE,
	OPT_SAMPLE_BYTES,
	OPT_DUTY,
	OPT_STACKS,
	OPT_NO_STACKS,
	OPT_STACK_DEPTH,
	OPT_STACK_BYTES,
	OPT_TRACER,
	OPT_NO_PRELOAD,
	OPT_DEVICE,
	OPT_POOL,
};

void mp_options_init(struct mp_options *o)
{
	memset(o, 0, sizeof(*o));
	o->session.rss_hz = MP_RSS_DEFAULT_HZ;
	o->session.pss_every = MP_RSS_DEFAULT_PSS_EVERY;
	o->print = MP_REPORT_TABLE;
	o->stream_interval_ns = 10ull * 1000000000ull;
}

void mp_options_help(FILE *f, bool with_pid)
{
	if (with_pid)
		fputs("  -p, --pid PID           process to profile (required)\n"
		      "      --stream URL        also stream profile chunks to a collector:\n"
		      "                          tcp://HOST:PORT, unix:PATH (length-delimited\n"
		      "                          memprof.proto), pyroscope[+https]://HOST[:PORT],\n"
		      "                          otlp[+https]://..., parca[+https]://..., or\n"
		      "                          http(s)://HOST:PORT/PATH (Pyroscope /ingest);\n"
		      "                          settings after '?': service_name=, label.K=V,\n"
		      "                          headers=FILE, ca=FILE (docs/SERVICE.md);\n"
		      "                          repeatable\n"
		      "      --ca FILE           PEM CA certificates for the https collectors of\n"
		      "                          --stream (default: the system trust store)\n"
		      "      --stream-interval S send a chunk every S seconds (default 10) and\n"
		      "                          a final one at the end\n",
		      f);
	fputs("  -d, --duration SECONDS  stop after SECONDS (default: when the target exits,\n"
	      "                          or on SIGINT/SIGTERM)\n"
	      "  -o, --output FILE       write the profile to FILE (memprof.proto; read it\n"
	      "                          with `memprof report FILE`)\n"
	      "      --format FMT        format of -o: memprof (default) or pprof (gzipped\n"
	      "                          profile.proto for `go tool pprof` and Pyroscope)\n"
	      "      --print FORMAT      print the profile at the end as table (default),\n"
	      "                          json, tfjs (tf.profile's ProfileInfo) or none\n"
	      "      --region NAME[#N]   tfjs view of the N-th (default 1st) invocation of\n"
	      "                          kernel NAME instead of the whole profile\n"
	      "      --pool NAME         tfjs view of pool NAME instead of the heap\n"
	      "      --alloc SYM[@OBJ]:size=argN[,ptr=ret|*argN][,ok=ret==0|ret!=0]\n"
	      "              [,pool=NAME[,kind=device|host]]\n"
	      "                          also trace allocator function SYM (in object OBJ,\n"
	      "                          a glob; default: first definition in lookup order)\n"
	      "                          whose size is argument N (from 0); ptr=*argN: the\n"
	      "                          pointer is stored through argument N (cudaMalloc);\n"
	      "                          ok=: which return values are a success; pool=:\n"
	      "                          its blocks are slices of pool NAME, reported apart\n"
	      "                          from the heap (docs/TRACER.md); repeatable\n"
	      "      --free SYM[@OBJ]:ptr=argN[,ok=...][,pool=NAME]\n"
	      "                          also trace a free function; repeatable\n"
	      "      --device cuda|hip   trace the device allocators of the CUDA runtime and\n"
	      "                          driver or of HIP as pools (cuda, cuda-managed,\n"
	      "                          cuda-host; hip, hip-managed, hip-host)\n"
	      "      --owner GLOB=NAME   report allocations whose caller is in an object\n"
	      "                          whose file name matches GLOB as owner NAME\n"
	      "                          (e.g. 'libxnnpack*=xnnpack'); repeatable\n"
	      "      --rss-hz N          sample /proc/PID/status N times a second\n"
	      "                          (default 100, 0 = off, max 10000)\n"
	      "      --pss-every N       read smaps_rollup (Pss) every Nth sample\n"
	      "                          (default 10, 0 = never)\n"
	      "      --rss-exact         attribute every RSS change to its kernel with the\n"
	      "                          kernel's rss_stat tracepoint\n"
	      "      --mode MODE         precise (default): every allocation, exact figures;\n"
	      "                          costs ~4 uprobe hits per malloc+free pair.\n"
	      "                          sampled: byte-weighted Poisson sampling in BPF\n"
	      "                          (see --sample-bytes); heap figures are unbiased\n"
	      "                          estimates, block counts are of sampled blocks;\n"
	      "                          the probes still fire on every call, only the\n"
	      "                          event cost is saved. rss: no allocator probes;\n"
	      "                          per-kernel RSS (exact rss_stat attribution),\n"
	      "                          anonymous mmap and brk growth at near-zero cost\n"
	      "      --sample-bytes N    mean sampling interval of --mode sampled in bytes\n"
	      "                          (default 4096; allocations >= N always exact;\n"
	      "                          implies --mode sampled)\n"
	      "      --duty ON/PERIOD    attach the allocator probes only for ON of every\n"
	      "                          PERIOD (e.g. 1s/10s, units ms or s): cost falls\n"
	      "                          by ~PERIOD/ON; heap figures cover ON windows only\n"
	      "                          (frees made while off are missed)\n"
	      "      --stacks            record the full call stack of every allocation\n"
	      "                          (every sampled one in sampled mode): pprof\n"
	      "                          traces and flame graphs, --sites in reports\n"
	      "      --no-stacks         the caller only (the default)\n"
	      "      --stack-depth N     frames kept per stack (default 64, max 256);\n"
	      "                          deeper stacks are marked truncated\n"
	      "      --stack-bytes N     bytes of the thread's stack copied per allocation\n"
	      "                          for unwinding (default 16384, max 32768)\n"
	      "      --tracer PATH       how allocator calls are seen: auto (default) uses\n"
	      "                          libmemprof's in-process interposer whenever the\n"
	      "                          target's malloc is libmemprof's (~10-20 ns per\n"
	      "                          call), else eBPF uprobes; inprocess or bpf force\n"
	      "                          one (docs/TRACER.md \"Two allocation paths\")\n",
	      f);
	if (!with_pid)
		fputs("      --no-preload        do not LD_PRELOAD libmemprof into CMD (its\n"
		      "                          allocator calls then go through eBPF uprobes\n"
		      "                          unless it links libmemprof itself)\n",
		      f);
	fputs("      --dump-events       print every event as it is correlated\n"
	      "  -v, --verbose           log what is attached and libbpf's messages\n"
	      "  -h, --help              show this help\n",
	      f);
}

static int bad(const char *what, const char *arg)
{
	return log_error_errno(-EINVAL, "invalid %s '%s' (see --help)", what, arg);
}

static int parse_uint(const char *s, unsigned long max, unsigned long *ret)
{
	char *end;
	unsigned long v;

	if (!s[0] || s[0] == '-')
		return -EINVAL;
	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || *end || v > max)
		return -EINVAL;
	*ret = v;
	return 0;
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

/* An option parse_*_opt() does not know: the next one is asked. */
#define NOT_MINE 1

/* Where the profile goes: -o, --format, --stream, --print, --region. */
static int parse_output_opt(struct mp_options *o, int c, bool with_pid)
{
	char *end;
	double d;

	switch (c) {
	case 'o':
		o->output = optarg;
		return 0;
	case OPT_STREAM:
		if (!with_pid)
			return bad("option", "--stream (memprofd --pid, or memprof attach)");
		if (o->n_streams >= MP_OPTIONS_MAX_STREAMS)
			return bad("(too many) --stream", optarg);
		if (mp_stream_url_check(optarg) < 0)
			return bad("--stream URL", optarg);
		o->streams[o->n_streams++] = optarg;
		return 0;
	case OPT_STREAM_INTERVAL:
		errno = 0;
		d = strtod(optarg, &end);
		if (errno || *end || !(d >= 0.05) || d > 86400)
			return bad("--stream-interval", optarg);
		o->stream_interval_ns = (uint64_t)(d * 1e9);
		return 0;
	case OPT_FORMAT:
		if (!strcmp(optarg, "pprof"))
			o->output_pprof = true;
		else if (!strcmp(optarg, "memprof"))
			o->output_pprof = false;
		else
			return bad("--format (memprof or pprof)", optarg);
		return 0;
	case OPT_PRINT:
		if (!strcmp(optarg, "none")) {
			o->print_none = true;
			return 0;
		}
		o->print_none = false;
		if (mp_report_format_parse(optarg, &o->print) < 0)
			return bad("--print format", optarg);
		return 0;
	case OPT_POOL:
		o->pool = optarg;
		return 0;
	case OPT_NO_PRELOAD:
		if (with_pid)
			return bad("option", "--no-preload");
		o->no_preload = true;
		return 0;
	case OPT_REGION:
		o->region = optarg;
		return 0;
	default:
		return NOT_MINE;
	}
}

/* What is traced and how: probes, owners, RSS, mode, duty cycle. */
static int parse_trace_opt(struct mp_session_opts *s, int c)
{
	unsigned long v;

	switch (c) {
	case OPT_ALLOC:
	case OPT_FREE:
		if (s->n_extra >= MP_TRACER_MAX_EXTRA)
			return bad("(too many) function", optarg);
		if (mp_tracer_parse_func(optarg, c == OPT_FREE, &s->extra[s->n_extra]) < 0)
			return bad(c == OPT_FREE ? "--free" : "--alloc", optarg);
		s->n_extra++;
		return 0;
	case OPT_DEVICE: {
		const struct mp_tracer_func *fs;
		size_t n;

		if (mp_tracer_device_preset(optarg, &fs, &n) < 0)
			return bad("--device (cuda or hip)", optarg);
		if (s->n_extra + n > MP_TRACER_MAX_EXTRA)
			return bad("(too many functions with) --device", optarg);
		for (size_t i = 0; i < n; i++)
			s->extra[s->n_extra++] = fs[i];
		return 0;
	}
	case OPT_OWNER:
		if (s->n_owner_rules >= MP_SESSION_MAX_OWNER_RULES)
			return bad("(too many) owner rule", optarg);
		if (!strchr(optarg, '=') || optarg[0] == '=')
			return bad("--owner", optarg);
		s->owner_rules[s->n_owner_rules++] = optarg;
		return 0;
	case OPT_RSS_HZ:
		if (parse_uint(optarg, MP_RSS_MAX_HZ, &v) < 0)
			return bad("--rss-hz", optarg);
		s->rss_hz = (unsigned)v;
		return 0;
	case OPT_PSS_EVERY:
		if (parse_uint(optarg, 1000000, &v) < 0)
			return bad("--pss-every", optarg);
		s->pss_every = (unsigned)v;
		return 0;
	case OPT_RSS_EXACT:
		s->rss_exact = true;
		return 0;
	case OPT_DUMP:
		s->dump = stdout;
		return 0;
	case OPT_LAG:
		if (parse_uint(optarg, 10000, &v) < 0)
			return bad("--merge-lag-ms", optarg);
		s->lag_ns = (uint64_t)v * 1000000ull;
		return 0;
	case OPT_MODE:
		if (mp_trace_mode_parse(optarg, &s->mode) < 0)
			return bad("--mode", optarg);
		return 0;
	case OPT_SAMPLE_BYTES:
		if (parse_uint(optarg, 1ul << 40, &v) < 0 || !v)
			return bad("--sample-bytes", optarg);
		s->sample_bytes = v;
		s->mode = MP_TRACE_SAMPLED;
		return 0;
	case OPT_TRACER:
		if (mp_tracer_choice_parse(optarg, &s->tracer) < 0)
			return bad("--tracer", optarg);
		return 0;
	case OPT_STACKS:
	case OPT_NO_STACKS:
		s->stacks = c == OPT_STACKS;
		return 0;
	case OPT_STACK_DEPTH:
		if (parse_uint(optarg, MP_UNWIND_MAX_DEPTH, &v) < 0 || !v)
			return bad("--stack-depth", optarg);
		s->stack_depth = (uint32_t)v;
		return 0;
	case OPT_STACK_BYTES:
		if (parse_uint(optarg, MP_STACK_MAX_BYTES, &v) < 0 || v < 64)
			return bad("--stack-bytes", optarg);
		s->stack_bytes = (uint32_t)v;
		return 0;
	case OPT_DUTY:
		if (parse_duty(optarg, &s->duty_on_ns, &s->duty_period_ns) < 0)
			return bad("--duty", optarg);
		return 0;
	default:
		return NOT_MINE;
	}
}

/* Settings that only make sense together. */
static int options_check(struct mp_session_opts *s, bool with_pid)
{
	if (s->mode == MP_TRACE_SAMPLED && !s->sample_bytes)
		s->sample_bytes = 4096;
	if (s->duty_period_ns && s->mode == MP_TRACE_RSS)
		return bad("--duty with --mode", "rss");
	if (with_pid && !s->pid)
		return log_error_errno(-EINVAL, "--pid PID is required (see --help)");
	return 0;
}

int mp_options_parse(struct mp_options *o, int argc, char **argv, bool with_pid)
{
	const char *ca = NULL;
	static const struct option longopts[] = {
		{ "pid", required_argument, NULL, 'p' },
		{ "duration", required_argument, NULL, 'd' },
		{ "output", required_argument, NULL, 'o' },
		{ "format", required_argument, NULL, OPT_FORMAT },
		{ "stream", required_argument, NULL, OPT_STREAM },
		{ "stream-interval", required_argument, NULL, OPT_STREAM_INTERVAL },
		{ "ca", required_argument, NULL, OPT_CA },
		{ "print", required_argument, NULL, OPT_PRINT },
		{ "region", required_argument, NULL, OPT_REGION },
		{ "alloc", required_argument, NULL, OPT_ALLOC },
		{ "free", required_argument, NULL, OPT_FREE },
		{ "owner", required_argument, NULL, OPT_OWNER },
		{ "rss-hz", required_argument, NULL, OPT_RSS_HZ },
		{ "pss-every", required_argument, NULL, OPT_PSS_EVERY },
		{ "rss-exact", no_argument, NULL, OPT_RSS_EXACT },
		{ "dump-events", no_argument, NULL, OPT_DUMP },
		{ "merge-lag-ms", required_argument, NULL, OPT_LAG },
		{ "mode", required_argument, NULL, OPT_MODE },
		{ "sample-bytes", required_argument, NULL, OPT_SAMPLE_BYTES },
		{ "stacks", no_argument, NULL, OPT_STACKS },
		{ "no-stacks", no_argument, NULL, OPT_NO_STACKS },
		{ "stack-depth", required_argument, NULL, OPT_STACK_DEPTH },
		{ "stack-bytes", required_argument, NULL, OPT_STACK_BYTES },
		{ "duty", required_argument, NULL, OPT_DUTY },
		{ "tracer", required_argument, NULL, OPT_TRACER },
		{ "no-preload", no_argument, NULL, OPT_NO_PRELOAD },
		{ "device", required_argument, NULL, OPT_DEVICE },
		{ "pool", required_argument, NULL, OPT_POOL },
		{ "verbose", no_argument, NULL, 'v' },
		{ "help", no_argument, NULL, 'h' },
		{},
	};
	struct mp_session_opts *s = &o->session;
	unsigned long v;
	char *end;
	double d;
	int c, r;

	/* "+": stop at the first operand, it is the command of `memprof run`. */
	while ((c = getopt_long(argc, argv, with_pid ? "+p:d:o:vh" : "+d:o:vh", longopts, NULL)) !=
	       -1) {
		switch (c) {
		case 'p':
			if (!with_pid)
				return bad("option", "--pid");
			if (parse_uint(optarg, INT_MAX, &v) < 0 || v == 0)
				return bad("pid", optarg);
			s->pid = (pid_t)v;
			break;
		case 'd':
			errno = 0;
			d = strtod(optarg, &end);
			if (errno || *end || !(d > 0) || d > 1e9 || !isfinite(d))
				return bad("duration", optarg);
			s->duration_ns = (uint64_t)(d * 1e9);
			if (!s->duration_ns)
				s->duration_ns = 1;
			break;
		case OPT_CA:
			if (!with_pid)
				return bad("option", "--ca (memprofd --pid)");
			if (optarg[0] != '/' || strlen(optarg) >= 256 || strpbrk(optarg, "&?#%"))
				return bad("--ca FILE (an absolute path)", optarg);
			ca = optarg;
			break;
		case 'v':
			s->verbose = true;
			mp_log_set_max_level(LOG_DEBUG);
			break;
		case 'h':
			return 1;
		default:
			r = parse_output_opt(o, c, with_pid);
			if (r == NOT_MINE)
				r = parse_trace_opt(s, c);
			if (r)
				return r == NOT_MINE ? -EINVAL : r;
		}
	}
	if (ca && add_ca(o, ca) < 0)
		return bad("--ca with --stream URLs (too long, or one has ca= already)", ca);
	return options_check(s, with_pid);
}

int mp_options_emit(const struct mp_options *o, const struct mp_profile *p)
{
	int r;

	if (o->output) {
		r = o->output_pprof ? mp_pprof_save(p, o->output) : mp_profile_save(p, o->output);
		if (r < 0) {
			return log_error_errno(r, "writing %s: %s", o->output,
					       mp_output_strerror(r));
		}
	}
	if (!o->print_none) {
		r = mp_report_write_pool(p, o->print, o->region, o->pool, stdout);
		if (r == -ESRCH)
			return log_error_errno(r, "no pool '%s' in the profile (--pool)", o->pool);
		if (r == -ENOENT) {
			return log_error_errno(r, "no invocation '%s' in the profile (--region)",
					       o->region);
		}
		if (r < 0) {
			return log_error_errno(r, "printing the profile: %m");
		}
		fflush(stdout);
	}
	return 0;
}
