// SPDX-License-Identifier: MIT
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "option_table.h"
#include "profile.h"
#include "rss.h"
#include "session.h"
#include "stream.h"
#include "tracer.h"
#include "unwind.h"

#define NS_PER_S 1000000000ull
#define FG (MP_OPT_PID | MP_OPT_RUN)

/* clang-format off */
const struct mp_option mp_options_table[MP_OPT_N] = {
	{ MP_OPT_ID_PID, "pid", 'p', NULL, MP_OPT_UINT, MP_OPT_PID, 1, INT_MAX, "a process id",
	  "PID", "process to profile (required)" },
	{ MP_OPT_ID_STREAM, "stream", 0, "stream", MP_OPT_URL, MP_OPT_PID | MP_OPT_ATTACH, 0, 0,
	  "tcp://HOST:PORT, unix:PATH, pyroscope://, otlp://, parca://, http(s)://", "URL",
	  "also stream profile chunks to a collector:\n"
	  "tcp://HOST:PORT, unix:PATH (length-delimited\n"
	  "memprof.proto), pyroscope[+https]://HOST[:PORT],\n"
	  "otlp[+https]://..., parca[+https]://..., or\n"
	  "http(s)://HOST:PORT/PATH (Pyroscope /ingest);\n"
	  "settings after '?': service_name=, label.K=V,\n"
	  "headers=FILE, ca=FILE (docs/SERVICE.md);\n"
	  "repeatable" },
	{ MP_OPT_ID_CA, "ca", 0, NULL, MP_OPT_TEXT, MP_OPT_PID, 0, 0, "an absolute path", "FILE",
	  "PEM CA certificates for the https collectors of\n"
	  "--stream (default: the system trust store)" },
	{ MP_OPT_ID_STREAM_INTERVAL, "stream-interval", 0, "stream_interval", MP_OPT_SECONDS,
	  MP_OPT_PID | MP_OPT_CONFIG, NS_PER_S / 20, 86400 * NS_PER_S, NULL, "S",
	  "send a chunk every S seconds (default 10) and\n"
	  "a final one at the end" },
	{ MP_OPT_ID_DURATION, "duration", 'd', "duration_ns", MP_OPT_SECONDS,
	  FG | MP_OPT_ATTACH, 1, 1000000000ull * NS_PER_S, NULL, "SECONDS",
	  "stop after SECONDS (default: when the target exits,\n"
	  "or on SIGINT/SIGTERM)" },
	{ MP_OPT_ID_OUTPUT, "output", 'o', NULL, MP_OPT_TEXT, FG | MP_OPT_ATTACH, 0, 0, NULL, "FILE",
	  "write the profile to FILE (memprof.proto; read it\n"
	  "with `memprof report FILE`)" },
	{ MP_OPT_ID_FORMAT, "format", 0, NULL, MP_OPT_TEXT, FG, 0, 0, "memprof or pprof", "FMT",
	  "format of -o: memprof (default) or pprof (gzipped\n"
	  "profile.proto for `go tool pprof` and Pyroscope)" },
	{ MP_OPT_ID_PRINT, "print", 0, NULL, MP_OPT_TEXT, FG, 0, 0, "table, json, tfjs or none",
	  "FORMAT",
	  "print the profile at the end as table (default),\n"
	  "json, tfjs (tf.profile's ProfileInfo) or none" },
	{ MP_OPT_ID_REGION, "region", 0, NULL, MP_OPT_TEXT, FG, 0, 0, NULL, "NAME[#N]",
	  "tfjs view of the N-th (default 1st) invocation of\n"
	  "kernel NAME instead of the whole profile" },
	{ MP_OPT_ID_POOL, "pool", 0, NULL, MP_OPT_TEXT, FG, 0, 0, NULL, "NAME",
	  "tfjs view of pool NAME instead of the heap" },
	{ MP_OPT_ID_ALLOC, "alloc", 0, NULL, MP_OPT_TEXT, FG, 0, 0, "see --help",
	  "SYM[@OBJ]:size=argN[,ptr=ret|*argN][,ok=ret==0|ret!=0]\n"
	  "[,pool=NAME[,kind=device|host]]",
	  "also trace allocator function SYM (in object OBJ,\n"
	  "a glob; default: first definition in lookup order)\n"
	  "whose size is argument N (from 0); ptr=*argN: the\n"
	  "pointer is stored through argument N (cudaMalloc);\n"
	  "ok=: which return values are a success; pool=:\n"
	  "its blocks are slices of pool NAME, reported apart\n"
	  "from the heap (docs/TRACER.md); repeatable" },
	{ MP_OPT_ID_FREE, "free", 0, NULL, MP_OPT_TEXT, FG, 0, 0, "see --help",
	  "SYM[@OBJ]:ptr=argN[,ok=...][,pool=NAME]", "also trace a free function; repeatable" },
	{ MP_OPT_ID_DEVICE, "device", 0, NULL, MP_OPT_TEXT, FG, 0, 0, "cuda or hip", "cuda|hip",
	  "trace the device allocators of the CUDA runtime and\n"
	  "driver or of HIP as pools (cuda, cuda-managed,\n"
	  "cuda-host; hip, hip-managed, hip-host)" },
	{ MP_OPT_ID_OWNER, "owner", 0, "owner", MP_OPT_OWNER, FG | MP_OPT_ATTACH | MP_OPT_CONFIG, 0, 0, "GLOB=NAME",
	  "GLOB=NAME",
	  "report allocations whose caller is in an object\n"
	  "whose file name matches GLOB as owner NAME\n"
	  "(e.g. 'libxnnpack*=xnnpack'); fn:GLOB, src:GLOB and\n"
	  "(Python files, with --stacks) py:GLOB match the\n"
	  "frames' functions and source files\n"
	  "('py:*/transformers/*=hf'); repeatable" },
	{ MP_OPT_ID_WRAPPER, "wrapper", 0, "wrapper", MP_OPT_TEXT, FG | MP_OPT_ATTACH | MP_OPT_CONFIG, 0, 0, NULL,
	  "GLOB",
	  "every function of the objects whose file name\n"
	  "matches GLOB is an allocator wrapper: owners and\n"
	  "sites are the first caller outside the wrappers\n"
	  "(e.g. 'libmyalloc*'); repeatable" },
	{ MP_OPT_ID_WRAPPER_FN, "wrapper-fn", 0, "wrapper_fn", MP_OPT_TEXT, FG | MP_OPT_ATTACH | MP_OPT_CONFIG, 0, 0,
	  NULL, "SYMBOL",
	  "the functions whose symbol matches SYMBOL (a glob,\n"
	  "mangled for C++) are allocator wrappers; repeatable\n"
	  "(default list: operator new, libc10, CPython's\n"
	  "PyMem/PyObject allocators, jemalloc, tcmalloc and\n"
	  "mimalloc entry points; docs/PROFILE.md \"Owners\")" },
	{ MP_OPT_ID_NO_DEFAULT_WRAPPERS, "no-default-wrappers", 0, "no_default_wrappers",
	  MP_OPT_FLAG, FG | MP_OPT_ATTACH | MP_OPT_CONFIG, 0, 1, NULL, NULL,
	  "without the default wrapper list: the owner is the\n"
	  "allocator's direct caller unless --wrapper says" },
	{ MP_OPT_ID_RSS_HZ, "rss-hz", 0, "rss_hz", MP_OPT_UINT, FG | MP_OPT_CONFIG, 0, MP_RSS_MAX_HZ,
	  NULL, "N",
	  "sample /proc/PID/status N times a second\n"
	  "(default 100, 0 = off, max 10000)" },
	{ MP_OPT_ID_PSS_EVERY, "pss-every", 0, "pss_every", MP_OPT_UINT, FG | MP_OPT_CONFIG, 0,
	  1000000, NULL, "N",
	  "read smaps_rollup (Pss) every Nth sample\n"
	  "(default 10, 0 = never), at most ~2% of the time\n"
	  "(a big target's walk is slow: docs/RSS.md)" },
	{ MP_OPT_ID_RSS_EXACT, "rss-exact", 0, NULL, MP_OPT_FLAG, FG, 0, 1, NULL, NULL,
	  "attribute every RSS change to its kernel with the\n"
	  "kernel's rss_stat tracepoint" },
	{ MP_OPT_ID_MODE, "mode", 0, "mode", MP_OPT_MODE, FG | MP_OPT_ATTACH | MP_OPT_CONFIG, 0, 0,
	  "precise, sampled or rss", "MODE",
	  "precise (default): every allocation, exact figures.\n"
	  "sampled: byte-weighted Poisson sampling (see\n"
	  "--sample-bytes); heap figures are unbiased\n"
	  "estimates, block counts are of sampled blocks; an\n"
	  "unsampled call records nothing (with --tracer bpf\n"
	  "its uprobes still fire). rss: no allocator tracing;\n"
	  "per-kernel RSS (exact rss_stat attribution),\n"
	  "anonymous mmap and brk growth at near-zero cost\n"
	  "(costs: docs/TRACER.md, docs/BENCHMARKS.md)" },
	{ MP_OPT_ID_SAMPLE_BYTES, "sample-bytes", 0, "sample_bytes", MP_OPT_SIZE,
	  FG | MP_OPT_ATTACH | MP_OPT_CONFIG, 1, 1ull << 40, NULL, "N",
	  "mean sampling interval of --mode sampled in bytes\n"
	  "(default 512K, K/M/G suffixes; allocations >= N\n"
	  "always exact; implies --mode sampled)" },
	{ MP_OPT_ID_MAX_WAIT, "max-wait", 0, NULL, MP_OPT_SECONDS, FG, 1, 3600 * NS_PER_S, NULL,
	  "SECONDS",
	  "precise mode, in-process path: how long a thread\n"
	  "waits for room in its full ring before it drops the\n"
	  "record (default: as long as the daemon lives, so\n"
	  "that the figures stay exact however slow it is)" },
	{ MP_OPT_ID_DUTY, "duty", 0, NULL, MP_OPT_TEXT, FG, 0, 0,
	  "ON/PERIOD with 0 < ON < PERIOD, units ms or s", "ON/PERIOD",
	  "attach the allocator probes only for ON of every\n"
	  "PERIOD (e.g. 1s/10s, units ms or s): cost falls\n"
	  "by ~PERIOD/ON; heap figures cover ON windows only\n"
	  "(frees made while off are missed)" },
	{ MP_OPT_ID_STACKS, "stacks", 0, "stacks", MP_OPT_FLAG, FG | MP_OPT_ATTACH | MP_OPT_CONFIG,
	  0, 1, NULL, NULL,
	  "record the full call stack of every allocation\n"
	  "(every sampled one in sampled mode): pprof\n"
	  "traces and flame graphs, --sites in reports" },
	{ MP_OPT_ID_NO_STACKS, "no-stacks", 0, NULL, MP_OPT_FLAG, FG, 0, 1, NULL, NULL,
	  "the caller only (the default)" },
	{ MP_OPT_ID_STACK_DEPTH, "stack-depth", 0, "stack_depth", MP_OPT_UINT, FG | MP_OPT_CONFIG,
	  1, MP_UNWIND_MAX_DEPTH, NULL, "N",
	  "frames kept per stack (default 64, max 256);\n"
	  "deeper stacks are marked truncated" },
	{ MP_OPT_ID_STACK_BYTES, "stack-bytes", 0, NULL, MP_OPT_UINT, FG, 64, MP_STACK_MAX_BYTES,
	  NULL, "N",
	  "bytes of the thread's stack copied for the daemon to\n"
	  "unwind (eBPF path, and code libmemprof cannot unwind\n"
	  "itself; default 16384, max 32768)" },
	{ MP_OPT_ID_DEBUGINFOD, "debuginfod", 0, NULL, MP_OPT_FLAG, FG, 0, 1, NULL, NULL,
	  "name the frames of objects without local debug info\n"
	  "from the debuginfod servers DEBUGINFOD_URLS names\n"
	  "(by build-id, after the target exits; cached in\n"
	  "DEBUGINFOD_CACHE_PATH, else ~/.cache/debuginfod_client;\n"
	  "a big library's first fetch takes long)" },
	{ MP_OPT_ID_MAX_MEMORY, "max-memory", 0, "max_memory", MP_OPT_SIZE,
	  FG | MP_OPT_ATTACH | MP_OPT_CONFIG, MP_SESSION_MIN_MEMORY, 1ull << 44, NULL, "N",
	  "memory for this target's tables: live blocks,\n"
	  "sites, stacks (default 512M, K/M/G suffixes);\n"
	  "past it new blocks are counted but not tracked,\n"
	  "the sites with the fewest bytes are folded into\n"
	  "\"(other sites)\" and the profile's limits say so\n"
	  "(docs/PROFILE.md \"Limits\")" },
	{ MP_OPT_ID_MAX_SITES, "max-sites", 0, "max_sites", MP_OPT_UINT, FG | MP_OPT_CONFIG, 1, MP_SESSION_MAX_SITES, NULL, "N",
	  "allocation sites kept (default: from --max-memory);\n"
	  "past it the site with the fewest bytes is folded\n"
	  "into \"(other sites)\" for a new one: a site with\n"
	  "more than 1/N of the bytes is always listed" },
	{ MP_OPT_ID_MAX_STACKS, "max-stacks", 0, "max_stacks", MP_OPT_UINT, FG | MP_OPT_CONFIG, 1, MP_PROFILE_MAX_STACKS, NULL, "N",
	  "distinct call stacks kept with --stacks, up to\n"
	  "16777216 (default: from --max-memory, 838860 for\n"
	  "512M); later ones keep their caller alone" },
	{ MP_OPT_ID_TRACER, "tracer", 0, "tracer", MP_OPT_TRACER, FG | MP_OPT_ATTACH | MP_OPT_CONFIG,
	  0, 0, "auto, inject, inprocess or bpf", "PATH",
	  "how allocator calls are seen: auto (default) uses\n"
	  "libmemprof's in-process interposer (tens of ns per\n"
	  "call, 30x or more below a uprobe), injecting it into\n"
	  "a running process that lacks it (ptrace), else eBPF\n"
	  "uprobes, with the reason in the profile; inject (or\n"
	  "inprocess) fails instead of falling back; bpf\n"
	  "forces uprobes\n"
	  "(docs/TRACER.md \"Two allocation paths\")" },
	{ MP_OPT_ID_NO_PRELOAD, "no-preload", 0, NULL, MP_OPT_FLAG, MP_OPT_RUN, 0, 1, NULL, NULL,
	  "do not LD_PRELOAD libmemprof into CMD (its\n"
	  "allocator calls then go through eBPF uprobes\n"
	  "unless it links libmemprof itself)" },
	{ MP_OPT_ID_TORCH, "torch", 0, NULL, MP_OPT_FLAG, MP_OPT_RUN, 0, 1, NULL, NULL,
	  "CMD is a Python script using PyTorch: make its\n"
	  "modules and aten ops kernels, and its phases load\n"
	  "and inference, with no change to the script; owners\n"
	  "in groups framework, delegate:xnnpack,\n"
	  "delegate:onednn, interpreter, runtime:c/c++ (an\n"
	  "--owner rule overrides them) (docs/PYTHON.md)" },
	{ MP_OPT_ID_DUMP_EVENTS, "dump-events", 0, NULL, MP_OPT_FLAG, FG, 0, 1, NULL, NULL,
	  "print every event as it is correlated" },
	/* The merge watermark: for experiments, not in --help. */
	{ MP_OPT_ID_MERGE_LAG, "merge-lag-ms", 0, NULL, MP_OPT_MSEC, FG, 0, 10000, NULL, "MS",
	  NULL },
	{ MP_OPT_ID_VERBOSE, "verbose", 'v', NULL, MP_OPT_FLAG, FG, 0, 1, NULL, NULL,
	  "log what is attached and libbpf's messages" },
	{ MP_OPT_ID_HELP, "help", 'h', NULL, MP_OPT_FLAG, FG, 0, 1, NULL, NULL, "show this help" },
	{ MP_OPT_ID_COLLECTOR, NULL, 0, "collector", MP_OPT_URL, MP_OPT_CONFIG, 0, 0, NULL, "URL",
	  "stream every target to URL; repeatable" },
	{ MP_OPT_ID_MAX_TARGETS, NULL, 0, "max_targets", MP_OPT_UINT, MP_OPT_CONFIG, 1, 4096, NULL,
	  "N", "attached processes at most" },
	{ MP_OPT_ID_MAX_CONNS, NULL, 0, "max_connections", MP_OPT_UINT, MP_OPT_CONFIG, 2, 4096,
	  NULL, "N", "control connections at most (one kept for root)" },
	{ MP_OPT_ID_MAX_CONNS_PER_UID, NULL, 0, "max_connections_per_uid", MP_OPT_UINT,
	  MP_OPT_CONFIG, 1, 4096, NULL, "N", "control connections of one non-root user at most" },
	{ MP_OPT_ID_BUFFER_SIZE, NULL, 0, "buffer_size", MP_OPT_SIZE, MP_OPT_CONFIG, 0, 1ull << 40,
	  NULL, "N", "per-collector buffer" },
	{ MP_OPT_ID_BPF_RING_SIZE, NULL, 0, "bpf_ring_size", MP_OPT_POW2, MP_OPT_CONFIG, 4096,
	  1ull << 30, NULL, "N", "BPF ring buffer per target (default by mode)" },
	{ MP_OPT_ID_MEMORY_BUDGET, NULL, 0, "memory_budget", MP_OPT_SIZE, MP_OPT_CONFIG, 0,
	  1ull << 50, NULL, "N", "refuse attaches beyond it (0: from the cgroup)" },
	{ MP_OPT_ID_STREAM_PER_UID, NULL, 0, "stream_collectors_per_uid", MP_OPT_UINT,
	  MP_OPT_CONFIG, 0, MP_STREAM_MAX_COLLECTORS, NULL, "N",
	  "distinct --stream collectors of a uid (0: no limit)" },
	{ MP_OPT_ID_STREAM_TOTAL, NULL, 0, "stream_total_size", MP_OPT_SIZE, MP_OPT_CONFIG, 0,
	  1ull << 40, NULL, "N", "all collectors' buffers together (0: no limit)" },
};
/* clang-format on */

const struct mp_option *mp_opt_by_name(const char *name)
{
	for (size_t i = 0; i < MP_OPT_N; i++) {
		const struct mp_option *o = &mp_options_table[i];

		if (o->name && !strcmp(o->name, name))
			return o;
		if (o->short_name && name[0] == o->short_name && !name[1])
			return o;
	}
	return NULL;
}

const struct mp_option *mp_opt_by_key(const char *key)
{
	for (size_t i = 0; i < MP_OPT_N; i++)
		if (mp_options_table[i].key && !strcmp(mp_options_table[i].key, key))
			return &mp_options_table[i];
	return NULL;
}

/* Decimal digits only: no sign, no blank, no base prefix. */
static int parse_decimal(const char *s, char **end, uint64_t *ret)
{
	unsigned long long x;

	if (*s < '0' || *s > '9')
		return -EINVAL;
	errno = 0;
	x = strtoull(s, end, 10);
	if (errno)
		return -EINVAL;
	*ret = x;
	return 0;
}

static int parse_size(const char *s, uint64_t *ret)
{
	uint64_t x, mul = 1;
	char *end;

	if (parse_decimal(s, &end, &x) < 0)
		return -EINVAL;
	switch (*end) {
	case '\0':
		break;
	case 'K':
	case 'k':
		mul = 1ull << 10;
		break;
	case 'M':
	case 'm':
		mul = 1ull << 20;
		break;
	case 'G':
	case 'g':
		mul = 1ull << 30;
		break;
	default:
		return -EINVAL;
	}
	if (*end && end[1])
		return -EINVAL;
	if (x > UINT64_MAX / mul)
		return -EINVAL;
	*ret = x * mul;
	return 0;
}

/* Decimal seconds to ns, rounded; a positive value never rounds to 0. */
static int parse_seconds(const char *s, uint64_t *ret)
{
	char *end;
	double d;

	if (!((*s >= '0' && *s <= '9') || *s == '.'))
		return -EINVAL;
	errno = 0;
	d = strtod(s, &end);
	if (errno || *end || !isfinite(d) || d < 0 || d > 1e10)
		return -EINVAL;
	*ret = (uint64_t)(d * 1e9 + 0.5);
	if (!*ret && d > 0)
		*ret = 1;
	return 0;
}

static int parse_flag(enum mp_opt_front front, const char *s, uint64_t *ret)
{
	const char *on = front == MP_OPT_FILE ? "yes" : "1";
	const char *off = front == MP_OPT_FILE ? "no" : "0";

	if (front == MP_OPT_CLI)
		return -EINVAL;
	if (strcmp(s, on) && strcmp(s, off))
		return -EINVAL;
	*ret = !strcmp(s, on);
	return 0;
}

static int parse_number(const struct mp_option *o, enum mp_opt_front front, const char *s,
			uint64_t *ret)
{
	uint64_t x;
	char *end;

	switch (o->type) {
	case MP_OPT_UINT:
	case MP_OPT_MSEC:
		if (parse_decimal(s, &end, &x) < 0 || *end)
			return -EINVAL;
		break;
	case MP_OPT_SIZE:
	case MP_OPT_POW2:
		if (parse_size(s, &x) < 0 || (o->type == MP_OPT_POW2 && (x & (x - 1))))
			return -EINVAL;
		break;
	case MP_OPT_SECONDS:
		/* A request says nanoseconds; 0 there means "not set". */
		if (front == MP_OPT_REQUEST) {
			if (parse_decimal(s, &end, &x) < 0 || *end || x > o->max)
				return -EINVAL;
			*ret = x;
			return 0;
		}
		if (parse_seconds(s, &x) < 0)
			return -EINVAL;
		break;
	default:
		return -EINVAL;
	}
	if (x < o->min || x > o->max)
		return -EINVAL;
	*ret = o->type == MP_OPT_MSEC ? x * 1000000ull : x;
	return 0;
}

int mp_opt_parse(const struct mp_option *o, enum mp_opt_front front, const char *text,
		 struct mp_opt_value *ret)
{
	struct mp_opt_value v = { .s = text };
	uint32_t e;
	int r = 0;

	switch (o->type) {
	case MP_OPT_FLAG:
		r = parse_flag(front, text, &v.u);
		break;
	case MP_OPT_MODE:
	case MP_OPT_TRACER:
		r = o->type == MP_OPT_MODE ? mp_trace_mode_parse(text, &e) :
					     mp_tracer_choice_parse(text, &e);
		v.u = e;
		break;
	case MP_OPT_OWNER:
		r = strchr(text, '=') && text[0] != '=' ? 0 : -EINVAL;
		break;
	case MP_OPT_URL:
		r = mp_stream_url_check(text);
		break;
	case MP_OPT_TEXT:
		break;
	default:
		r = parse_number(o, front, text, &v.u);
	}
	if (r < 0)
		return -EINVAL;
	*ret = v;
	return 0;
}

void mp_opt_hint(const struct mp_option *o, enum mp_opt_front front, char *buf, size_t len)
{
	const char *unit =
		o->type == MP_OPT_SIZE || o->type == MP_OPT_POW2 ? ", suffix K, M or G" : "";

	if (o->hint) {
		snprintf(buf, len, "%s", o->hint);
		return;
	}
	switch (o->type) {
	case MP_OPT_FLAG:
		snprintf(buf, len, "%s", front == MP_OPT_FILE ? "yes or no" : "0 or 1");
		break;
	case MP_OPT_TEXT:
		snprintf(buf, len, "%s", o->arg ? o->arg : "text");
		break;
	case MP_OPT_SECONDS:
		if (front == MP_OPT_REQUEST)
			snprintf(buf, len, "nanoseconds, at most %" PRIu64, o->max);
		else if (o->min <= 1)
			snprintf(buf, len, "seconds, more than 0, at most %.10g",
				 (double)o->max / 1e9);
		else
			snprintf(buf, len, "seconds, %.10g to %.10g", (double)o->min / 1e9,
				 (double)o->max / 1e9);
		break;
	default:
		snprintf(buf, len, "%s%" PRIu64 " to %" PRIu64 "%s",
			 o->type == MP_OPT_POW2 ? "a power of two, " : "", o->min, o->max, unit);
	}
}

void mp_opt_store(void *base, size_t off, size_t size, uint64_t v)
{
	char *p = (char *)base + off;

	if (size == sizeof(uint64_t)) {
		memcpy(p, &v, sizeof(v));
	} else if (size == sizeof(uint32_t)) {
		uint32_t w = (uint32_t)v;

		memcpy(p, &w, sizeof(w));
	} else if (size == sizeof(bool)) {
		bool b = v != 0;

		memcpy(p, &b, sizeof(b));
	}
}

/* Continuation lines of @text, each indented by @indent. */
static void help_lines(FILE *f, const char *text, int indent)
{
	for (const char *nl; (nl = strchr(text, '\n')); text = nl + 1)
		fprintf(f, "%.*s\n%*s", (int)(nl - text), text, indent, "");
	fprintf(f, "%s\n", text);
}

void mp_opt_help(FILE *f, unsigned where)
{
	for (size_t i = 0; i < MP_OPT_N; i++) {
		const struct mp_option *o = &mp_options_table[i];
		char syn[128];
		int n;

		if (!o->name || !o->help || !(o->where & where))
			continue;
		if (o->short_name)
			n = snprintf(syn, sizeof(syn), "-%c, --%s", o->short_name, o->name);
		else
			n = snprintf(syn, sizeof(syn), "    --%s", o->name);
		if (o->arg && !strchr(o->arg, '\n') && n + 1 + strlen(o->arg) <= 23) {
			fprintf(f, "  %s %-*s ", syn, 22 - n, o->arg);
		} else {
			fprintf(f, "  %s%s", syn, o->arg ? " " : "");
			if (o->arg)
				help_lines(f, o->arg, 14);
			else if (n <= 23)
				fprintf(f, "%*s", 24 - n, "");
			else /* a long flag: its help on the next line */
				fprintf(f, "\n%*s", 26, "");
			if (o->arg)
				fprintf(f, "%*s", 26, "");
		}
		help_lines(f, o->help, 26);
	}
}
