// SPDX-License-Identifier: MIT
/* memprof: the command-line front end. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "chrome.h"
#include "collect.h"
#include "control.h"
#include "diff_cmd.h"
#include "launch.h"
#include "log.h"
#include "modules.h"
#include "options.h"
#include "outfile.h"
#include "pprof.h"
#include "profile.h"
#include "profile_pb.h"
#include "report.h"
#include "sites.h"
#include "session.h"
#include "top.h"
#include "tracer.h"

static void usage(FILE *f)
{
	fputs("Usage: memprof COMMAND [ARGS]\n"
	      "\n"
	      "Commands:\n"
	      "  run [OPTIONS] -- CMD [ARGS...]   start CMD, profile it from before its main()\n"
	      "                                   until it exits, print a per-kernel table\n"
	      "  report FILE [--format table|json|tfjs|html] [--region NAME[#N]] [--pool NAME]\n"
	      "         [--sites N] [-o OUT]\n"
	      "                                   print a profile written with -o\n"
	      "  convert FILE --to pprof|chrome|json [-o OUT]\n"
	      "                                   convert a profile to another format\n"
	      "  diff OLD NEW [--max-increase LIMIT]... [--format table|json]\n"
	      "                                   what changed between two profiles; a CI gate\n"
	      "  attach PID [--duration S] [-o FILE] [--stream URL]... [--mode M]\n"
	      "                                   have the memprofd service profile PID\n"
	      "                                   (mode rss by default: no allocator probes)\n"
	      "  detach PID                       stop it; the profile is written/streamed\n"
	      "  dump PID [-o FILE]               the profile so far, without stopping\n"
	      "  list                             targets of the service (yours, or all for root)\n"
	      "  status                           the service's state and collectors\n"
	      "  top PID [--direct]               live per-kernel view of PID (keys: l p c a n\n"
	      "                                   sort, q quits and detaches)\n"
	      "  collect --listen URL --out DIR   reference collector of profile streams\n"
	      "  env [--torch]                    shell lines that prepare a process started\n"
	      "                                   later for memprofd --pid (docs/PYTHON.md)\n"
	      "Service commands take --control PATH (default " MP_CTL_DEFAULT_PATH ").\n"
	      "\n"
	      "`memprof COMMAND --help` describes a command's options.\n",
	      f);
}

static void run_usage(FILE *f)
{
	fputs("Usage: memprof run [OPTIONS] -- CMD [ARGS...]\n"
	      "\n"
	      "Start CMD stopped at its entry point, attach the profiler, let it run to\n"
	      "its exit, then print the per-kernel table (and write -o FILE). Exits with\n"
	      "CMD's exit status. Needs root (the capabilities memprofd needs).\n"
	      "\n"
	      "Options:\n",
	      f);
	mp_options_help(f, false);
	fputs("\nExample: memprof run -o demo.memprof -- ./memprof-demo 3\n", f);
}

static int resume(void *ctx)
{
	return mp_launch_resume(*(pid_t *)ctx);
}

/* libmemprof for LD_PRELOAD: $MEMPROF_PRELOAD_LIB, the build tree next to
 * this executable (cli/ -> libclient/), then the installed one. */
static const char *preload_lib(char *buf, size_t len)
{
	const char *env = getenv("MEMPROF_PRELOAD_LIB");
	char *slash;
	ssize_t n;

	if (env && env[0])
		return access(env, R_OK) == 0 ? env : NULL;
	n = readlink("/proc/self/exe", buf, len - 1);
	if (n > 0) {
		buf[n] = '\0';
		slash = strrchr(buf, '/');
		if (slash &&
		    (size_t)(slash - buf) + sizeof("/../libclient/libmemprof.so.0") < len) {
			strcpy(slash, "/../libclient/libmemprof.so.0");
			if (access(buf, R_OK) == 0)
				return buf;
		}
	}
	snprintf(buf, len, "%s", MP_LIBDIR "/libmemprof.so.0");
	return access(buf, R_OK) == 0 ? buf : NULL;
}

/* The command inherits our environment: put libmemprof first in its
 * LD_PRELOAD so that its malloc is the interposer (the in-process path),
 * ahead of any allocator the user preloads, which it then forwards to. */
static int set_preload(void)
{
	char lib[PATH_MAX], real[PATH_MAX], *val;
	const char *old = getenv("LD_PRELOAD"), *path = preload_lib(lib, sizeof(lib));
	int r;

	if (!path) {
		fprintf(stderr, "memprof run: libmemprof not found (set MEMPROF_PRELOAD_LIB); "
				"using the eBPF path\n");
		return 0;
	}
	/* the real file: what the target's maps will show */
	if (realpath(path, real))
		path = real;
	if (old && old[0])
		r = asprintf(&val, "%s:%s", path, old);
	else
		r = asprintf(&val, "%s", path);
	if (r < 0)
		return -ENOMEM;
	r = setenv("LD_PRELOAD", val, 1) < 0 ? -errno : 0;
	free(val);
	return r;
}

/* The memprof Python package for `import memprof` in the command: the
 * build tree next to this executable (cli/ -> python/), else the installed
 * one, appended to PYTHONPATH (the user's own entries come first). With
 * @boot (libmemprof preloaded, or --torch), its startup hook first: a
 * Python program's stacks get Python frames, and with @torch (which sets
 * MEMPROF_TORCH=1) PyTorch is instrumented. */
static int set_pythonpath(bool torch, bool boot)
{
	char dir[PATH_MAX], real[PATH_MAX], probe[PATH_MAX + 32], *val, *slash;
	const char *old = getenv("PYTHONPATH"), *path;
	ssize_t n;
	int r;

	n = readlink("/proc/self/exe", dir, sizeof(dir) - 1);
	if (n <= 0 || !(dir[n] = '\0', slash = strrchr(dir, '/')) ||
	    (size_t)(slash - dir) + sizeof("/../python") >= sizeof(dir))
		dir[0] = '\0';
	else
		strcpy(slash, "/../python");
	snprintf(probe, sizeof(probe), "%s/memprof/__init__.py", dir);
	if (!dir[0] || access(probe, R_OK) != 0) {
		snprintf(dir, sizeof(dir), "%s", MP_PYTHONDIR);
		snprintf(probe, sizeof(probe), "%s/memprof/__init__.py", dir);
		if (access(probe, R_OK) != 0) {
			if (torch) {
				fprintf(stderr, "memprof run: --torch: the memprof Python "
						"package is not installed (meson install)\n");
				return -ENOENT;
			}
			return 0; /* not installed: nothing to add */
		}
	}
	path = realpath(dir, real) ? real : dir;
	/* the hook's switch is --torch's alone, not an inherited one */
	if (torch ? setenv("MEMPROF_TORCH", "1", 1) < 0 : unsetenv("MEMPROF_TORCH") < 0)
		return -errno;
	/* the startup hook first, so that it runs (docs/PYTHON.md) */
	if (boot || torch)
		r = asprintf(&val, "%s/memprof/_boot:%s%s%s", path, old && old[0] ? old : "",
			     old && old[0] ? ":" : "", path);
	else if (old && old[0])
		r = asprintf(&val, "%s:%s", old, path);
	else
		r = asprintf(&val, "%s", path);
	if (r < 0)
		return -ENOMEM;
	r = setenv("PYTHONPATH", val, 1) < 0 ? -errno : 0;
	free(val);
	return r;
}

/* One shell word: single quotes, a quote inside as '\''. */
static void print_quoted(const char *s)
{
	putchar('\'');
	for (; *s; s++) {
		if (*s == '\'')
			fputs("'\\''", stdout);
		else
			putchar(*s);
	}
	putchar('\'');
}

/* `memprof env [--torch]`: the environment under which a process started
 * later can be profiled by memprofd --pid as `memprof run` would
 * (libmemprof preloaded, the Python package importable; --torch: PyTorch
 * instrumented), as shell export lines (docs/PYTHON.md). */
static int cmd_env(int argc, char **argv)
{
	const char *names[] = { "LD_PRELOAD", "PYTHONPATH", "MEMPROF_TORCH" };
	bool torch = false;
	int i, r;

	for (i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--torch")) {
			torch = true;
		} else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
			fputs("Usage: memprof env [--torch]\n"
			      "\n"
			      "Print shell export lines that prepare a process started later for\n"
			      "memprofd --pid: libmemprof preloaded (the in-process path; markers\n"
			      "and hooks stay dormant until a profiler attaches) and the memprof\n"
			      "Python package importable. With --torch, a Python script's PyTorch\n"
			      "modules and aten ops become kernels, as with memprof run --torch.\n"
			      "\n"
			      "Example: eval \"$(memprof env --torch)\"; python3 serve.py &\n"
			      "         memprofd --pid $! --duration 10 -o serve.memprof\n",
			      stdout);
			return 0;
		} else {
			log_error("unknown argument '%s' (see memprof env --help)", argv[i]);
			return 2;
		}
	}
	if (!MP_PRELOAD_DEFAULT) {
		log_error("a sanitizer build's libmemprof cannot be preloaded");
		return 1;
	}
	r = set_preload();
	if (r >= 0)
		r = set_pythonpath(torch, true);
	if (r < 0) {
		log_error("%s", strerror(-r));
		return 1;
	}
	for (i = 0; i < (int)(sizeof(names) / sizeof(names[0])); i++) {
		const char *v = getenv(names[i]);

		if (!v || !v[0])
			continue;
		printf("export %s=", names[i]);
		print_quoted(v);
		putchar('\n');
	}
	return 0;
}

/* --torch: PyTorch's libraries as named parts (docs/PYTHON.md "Who held the
 * peak"), each named after what Debian's PyTorch links: the framework
 * (libtorch*, libc10, libshm, the torch._C extension), each delegate
 * library (XNNPACK, oneDNN), the interpreter, the C/C++ runtime. */
static const char *const torch_owner_groups[] = {
	"libtorch*=framework",	    "libc10*=framework",       "libshm*=framework",
	"libcaffe2*=framework",	    "_C.cpython-*=framework",  "libXNNPACK*=delegate:xnnpack",
	"libdnnl*=delegate:onednn", "python3*=interpreter",    "libpython3*=interpreter",
	"libc.so*=runtime:c/c++",   "libm.so*=runtime:c/c++",  "libstdc++*=runtime:c/c++",
	"libgcc_s*=runtime:c/c++",  "ld-linux*=runtime:c/c++",
};

/* After the user's --owner rules: the first rule matching names the
 * owner, so the user's override these. */
static int add_torch_owner_groups(struct mp_session_opts *s)
{
	for (size_t i = 0; i < sizeof(torch_owner_groups) / sizeof(torch_owner_groups[0]); i++) {
		if (s->n_owner_rules >= MP_SESSION_MAX_OWNER_RULES)
			return log_error_errno(-E2BIG,
					       "--torch: no room for its %zu owner groups after "
					       "%zu --owner rules (at most %d in all)",
					       sizeof(torch_owner_groups) /
						       sizeof(torch_owner_groups[0]),
					       s->n_owner_rules - i, MP_SESSION_MAX_OWNER_RULES);
		s->owner_rules[s->n_owner_rules++] = torch_owner_groups[i];
	}
	return 0;
}

static int cmd_run(int argc, char **argv)
{
	struct mp_options o;
	struct mp_profile *p = NULL;
	pid_t pid;
	int r, status = 0;

	mp_options_init(&o);
	r = mp_options_parse(&o, argc, argv, false);
	if (r == 1) {
		run_usage(stdout);
		return 0;
	}
	if (r < 0)
		return 2;
	if (optind >= argc) {
		log_error("no command given (memprof run [OPTIONS] -- CMD...)");
		return 2;
	}

	/* --no-preload forces eBPF; so does a sanitizer build, whose
	 * libmemprof needs the sanitizer runtime loaded first. */
	if (o.no_preload || !MP_PRELOAD_DEFAULT) {
		if (o.no_preload && !o.session.tracer)
			o.session.tracer = MP_PATH_BPF;
	} else if (set_preload() < 0) {
		fprintf(stderr, "memprof run: setting LD_PRELOAD: out of memory\n");
		return 1;
	}
	if (o.torch && add_torch_owner_groups(&o.session) < 0)
		return 2;
	mp_dwfl_set_net(o.debuginfod);
	r = set_pythonpath(o.torch, !o.no_preload && MP_PRELOAD_DEFAULT);
	if (r == -ENOMEM)
		fprintf(stderr, "memprof run: setting PYTHONPATH: out of memory\n");
	if (r < 0)
		return 1;
	r = mp_launch(argv + optind, &pid);
	if (r < 0) {
		log_error("cannot start '%s': %s", argv[optind],
			  r == -ECHILD ? "it exited before reaching its entry point" :
					 strerror(-r));
		return 127;
	}
	o.session.pid = pid;
	o.session.on_attached = resume;
	o.session.on_attached_ctx = &pid;
	o.session.release_detached = true;
	r = mp_session_run(&o.session, &p);
	if (r < 0) {
		mp_launch_kill(pid);
		return 1;
	}
	/* A stop by duration or signal leaves the command running: wait for it
	 * as a shell would, the profile is already complete. */
	if (mp_launch_wait(pid, &status) < 0)
		status = 0;
	r = mp_emit_profile(&o.out, p, stdout);
	mp_profile_free(p);
	if (r < 0)
		return 1;
	return mp_launch_exit_code(status);
}

/* The report to standard output, or rendered in memory and written to @out
 * like every output file (outfile.h). Logs its own write errors (-EPIPE). */
static int report_out(const struct mp_profile *p, enum mp_report_format format, const char *region,
		      const char *pool, uint32_t sites, const char *out)
{
	FILE *f = stdout;
	char *buf = NULL;
	size_t len = 0;
	int r;

	if (out && !(f = open_memstream(&buf, &len)))
		return -ENOMEM;
	r = sites ? mp_report_sites(p, sites, f) : mp_report_write_pool(p, format, region, pool, f);
	if (out) {
		if (fclose(f) != 0 && r == 0)
			r = -ENOMEM;
		if (r == 0 && (r = mp_output_write(out, buf, len)) < 0) {
			log_error_errno(r, "writing %s: %s", out, mp_output_strerror(r));
			r = -EPIPE;
		}
		free(buf);
	}
	return r;
}

static int cmd_report(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "format", required_argument, NULL, 'f' },
		{ "region", required_argument, NULL, 'r' },
		{ "sites", required_argument, NULL, 's' },
		{ "pool", required_argument, NULL, 'P' },
		{ "output", required_argument, NULL, 'o' },
		{ "help", no_argument, NULL, 'h' },
		{},
	};
	enum mp_report_format format = MP_REPORT_TABLE;
	const char *region = NULL, *why = NULL, *pool = NULL, *out = NULL;
	struct mp_profile *p = NULL;
	long sites = 0;
	int c, r;

	while ((c = getopt_long(argc, argv, "f:r:s:P:o:h", longopts, NULL)) != -1) {
		switch (c) {
		case 's':
			sites = strtol(optarg, NULL, 10);
			if (sites <= 0 || sites > 1000000) {
				fprintf(stderr,
					"memprof report: --sites takes a count (1..1000000)\n");
				return 2;
			}
			break;
		case 'f':
			if (mp_report_format_parse(optarg, &format) < 0) {
				log_error("unknown format '%s' (table, json, tfjs, html)", optarg);
				return 2;
			}
			break;
		case 'r':
			region = optarg;
			break;
		case 'P':
			pool = optarg;
			break;
		case 'o':
			out = optarg;
			break;
		case 'h':
			fputs("Usage: memprof report FILE [--format table|json|tfjs|html] "
			      "[--region NAME[#N]] [--pool NAME] [--sites N] [-o OUT]\n"
			      "\n"
			      "Print a profile written by `memprofd -o` or `memprof run -o`.\n"
			      "  -f, --format FMT   table (default), json (the whole profile),\n"
			      "                     tfjs (tf.profile's ProfileInfo for the region) or\n"
			      "                     html (one self-contained page for a browser)\n"
			      "  -o, --output OUT   write to OUT instead of standard output\n"
			      "  -r, --region SPEC  NAME or NAME#N: the N-th invocation of kernel\n"
			      "                     NAME and the kernels nested in it (tfjs)\n"
			      "      --pool NAME    tfjs: the figures of pool NAME, not the heap\n"
			      "  -s, --sites N      the top N allocation sites of every kernel by\n"
			      "                     bytes allocated, with their call stacks\n"
			      "                     (profiles taken with --stacks) or callers\n",
			      stdout);
			return 0;
		default:
			return 2;
		}
	}
	if (optind + 1 != argc) {
		log_error("expected exactly one FILE (see --help)");
		return 2;
	}
	r = mp_profile_load(argv[optind], &p, &why);
	if (r < 0) {
		log_error("%s: %s", argv[optind], why ? why : strerror(-r));
		return 1;
	}
	r = report_out(p, format, region, pool, (uint32_t)sites, out);
	if (r == -ENOENT)
		log_error("no invocation '%s' in %s", region, argv[optind]);
	else if (r == -ESRCH)
		log_error("no pool '%s' in %s", pool, argv[optind]);
	else if (r < 0 && r != -EPIPE)
		log_error_errno(r, "%m");
	mp_profile_free(p);
	return r < 0 ? 1 : 0;
}

enum convert_to {
	TO_NONE,
	TO_PPROF,
	TO_CHROME,
	TO_JSON,
};

static void convert_usage(FILE *f)
{
	fputs("Usage: memprof convert FILE --to pprof|chrome|json [-o OUT]\n"
	      "\n"
	      "Convert a profile written by `memprofd -o` or `memprof run -o`.\n"
	      "  -t, --to FMT     pprof (gzipped profile.proto, for `go tool pprof`),\n"
	      "                   chrome (Chrome / Perfetto trace JSON, for\n"
	      "                   ui.perfetto.dev or chrome://tracing) or json (the\n"
	      "                   whole model, as `memprof report --format json`)\n"
	      "  -o, --output OUT write to OUT instead of standard output (pprof is\n"
	      "                   binary: it needs -o when standard output is a terminal)\n"
	      "\n"
	      "Example: memprof convert demo.memprof --to chrome -o demo.trace.json\n",
	      f);
}

static int convert_write(const struct mp_profile *p, enum convert_to to, FILE *f)
{
	switch (to) {
	case TO_CHROME:
		return mp_chrome_write(p, f);
	case TO_JSON:
		return mp_report_write(p, MP_REPORT_JSON, NULL, f);
	case TO_PPROF: {
		uint8_t *buf = NULL;
		size_t len = 0;
		int r = mp_pprof_encode(p, true, &buf, &len);

		if (r == 0 && fwrite(buf, 1, len, f) != len)
			r = errno ? -errno : -EIO;
		free(buf);
		return r;
	}
	case TO_NONE:
		break;
	}
	return -EINVAL;
}

static int cmd_convert(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "to", required_argument, NULL, 't' },
		{ "output", required_argument, NULL, 'o' },
		{ "help", no_argument, NULL, 'h' },
		{},
	};
	enum convert_to to = TO_NONE;
	const char *out = NULL, *in, *why = NULL;
	struct mp_profile *p = NULL;
	FILE *f = stdout;
	char *mbuf = NULL;
	size_t mlen = 0;
	int c, r;

	while ((c = getopt_long(argc, argv, "t:o:h", longopts, NULL)) != -1) {
		switch (c) {
		case 't':
			if (!strcmp(optarg, "pprof"))
				to = TO_PPROF;
			else if (!strcmp(optarg, "chrome"))
				to = TO_CHROME;
			else if (!strcmp(optarg, "json"))
				to = TO_JSON;
			else {
				log_error("unknown format '%s' (pprof, chrome, json)", optarg);
				return 2;
			}
			break;
		case 'o':
			out = optarg;
			break;
		case 'h':
			convert_usage(stdout);
			return 0;
		default:
			return 2;
		}
	}
	if (optind + 1 != argc) {
		log_error("expected exactly one FILE (see --help)");
		return 2;
	}
	if (to == TO_NONE) {
		log_error("--to pprof|chrome|json is required");
		return 2;
	}
	if (to == TO_PPROF && !out && isatty(STDOUT_FILENO)) {
		log_error("pprof is binary: not writing it to a terminal "
			  "(use -o FILE or a redirection)");
		return 2;
	}
	in = argv[optind];
	r = mp_profile_load(in, &p, &why);
	if (r < 0) {
		log_error("%s: %s", in, why ? why : strerror(-r));
		return 1;
	}
	if (out) {
		/* Rendered in memory, then written like every output file
		 * (outfile.h): atomically, never through an unsafe symlink. */
		f = open_memstream(&mbuf, &mlen);
		if (!f) {
			log_error_errno(-errno, "open_memstream: %m");
			mp_profile_free(p);
			return 1;
		}
	}
	r = convert_write(p, to, f);
	/* The last buffered write fails here; its errno says why. */
	if ((f != stdout ? fclose(f) : fflush(f)) != 0)
		r = errno ? -errno : -EIO;
	if (r < 0) {
		log_error_errno(r, "writing %s: %m", out ? out : "standard output");
	} else if (out) {
		r = mp_output_write(out, mbuf, mlen);
		if (r < 0)
			log_error_errno(r, "%s %s: %s",
					r == -ENOSPC || r == -EIO || r == -EDQUOT ? "writing" :
										    "cannot create",
					out, mp_output_strerror(r));
	}
	free(mbuf);
	mp_profile_free(p);
	return r < 0 ? 1 : 0;
}

/* --- service client: attach, detach, dump, list, status --- */

/* The service takes at most 64 of each kind (its configuration's
 * included); this bounds what one command line can send. */
#define CLIENT_MAX_RULES 192

struct client_args {
	const char *control;
	const char *output;
	const char *streams[MP_OPTIONS_MAX_STREAMS];
	size_t n_streams;
	uint64_t duration_ns;
	long pid;
	const char *mode;
	uint64_t sample_bytes;
	bool stacks;
	const char *tracer;
	uint64_t max_memory; /* limits: 0, the service's share */
	/* --owner, --wrapper, --wrapper-fn in the order given */
	const char *rules[CLIENT_MAX_RULES];
	const char *rule_keys[CLIENT_MAX_RULES];
	size_t n_rules;
	bool no_default_wrappers;
};

static void client_usage(void)
{
	printf("Usage: memprof attach PID [--duration S] [-o FILE] [--stream URL]...\n"
	       "                   [--mode precise|sampled|rss] [--sample-bytes N] [--stacks]\n"
	       "                   [--tracer auto|inject|inprocess|bpf] [--max-memory N]\n"
	       "                   [--owner GLOB=NAME]... [--wrapper GLOB]...\n"
	       "                   [--wrapper-fn SYMBOL]... [--no-default-wrappers]\n"
	       "       memprof detach PID\n"
	       "       memprof dump PID [-o FILE]\n"
	       "       memprof list | status\n"
	       "All take --control PATH (default %s). The service writes -o FILE\n"
	       "through a descriptor opened here, with your rights; `dump` without -o\n"
	       "prints the table. Stream URLs: tcp://HOST:PORT, unix:PATH,\n"
	       "http://HOST:PORT/ingest (Pyroscope). Values and their bounds are those\n"
	       "of `memprofd --help`.\n",
	       MP_CTL_DEFAULT_PATH);
}

/* A value of the option table for @cmd: -o of attach and dump, the
 * attach request's options of attach. Stream URLs are the service's to
 * check: it knows what the requester may name. Returns 0 or 2. */
static int client_opt(const char *cmd, bool opts_out, const struct mp_option *o, const char *arg,
		      struct client_args *a)
{
	struct mp_opt_value v = { .u = 1, .s = arg };
	bool ok = o->id == MP_OPT_ID_OUTPUT ? opts_out :
					      !strcmp(cmd, "attach") && (o->where & MP_OPT_ATTACH);
	char hint[160];

	if (!ok) {
		log_error("invalid option --%s for %s (see --help)", o->name, cmd);
		return 2;
	}
	if (o->type != MP_OPT_FLAG && o->type != MP_OPT_URL &&
	    mp_opt_parse(o, MP_OPT_CLI, arg, &v) < 0) {
		mp_opt_hint(o, MP_OPT_CLI, hint, sizeof(hint));
		log_error("invalid --%s '%s' (%s; see --help)", o->name, arg, hint);
		return 2;
	}
	if (o->id == MP_OPT_ID_STREAM && a->n_streams >= MP_OPTIONS_MAX_STREAMS) {
		log_error("too many --stream");
		return 2;
	}
	if (o->id == MP_OPT_ID_OWNER || o->id == MP_OPT_ID_WRAPPER ||
	    o->id == MP_OPT_ID_WRAPPER_FN) {
		if (a->n_rules >= CLIENT_MAX_RULES) {
			log_error("too many --%s", o->name);
			return 2;
		}
		a->rule_keys[a->n_rules] = o->key;
		a->rules[a->n_rules++] = arg;
		return 0;
	}
	if (o->id == MP_OPT_ID_OUTPUT)
		a->output = arg;
	else if (o->id == MP_OPT_ID_DURATION)
		a->duration_ns = v.u;
	else if (o->id == MP_OPT_ID_STREAM)
		a->streams[a->n_streams++] = arg;
	else if (o->id == MP_OPT_ID_MODE)
		a->mode = arg;
	else if (o->id == MP_OPT_ID_SAMPLE_BYTES)
		a->sample_bytes = v.u;
	else if (o->id == MP_OPT_ID_STACKS)
		a->stacks = true;
	else if (o->id == MP_OPT_ID_TRACER)
		a->tracer = arg;
	else if (o->id == MP_OPT_ID_MAX_MEMORY)
		a->max_memory = v.u;
	else if (o->id == MP_OPT_ID_NO_DEFAULT_WRAPPERS)
		a->no_default_wrappers = true;
	return 0;
}

/* PID (when @want_pid) and nothing else after the options. */
static int client_operands(int argc, char **argv, bool want_pid, struct client_args *a)
{
	const struct mp_option *o = &mp_options_table[MP_OPT_ID_PID];
	struct mp_opt_value v;

	if (!want_pid) {
		if (optind == argc)
			return 0;
		log_error("unexpected argument '%s'", argv[optind]);
		return 2;
	}
	if (optind + 1 != argc) {
		log_error("expected one PID (see --help)");
		return 2;
	}
	if (mp_opt_parse(o, MP_OPT_CLI, argv[optind], &v) < 0) {
		log_error("invalid pid '%s'", argv[optind]);
		return 2;
	}
	a->pid = (long)v.u;
	return 0;
}

/* Returns 0, 1 when --help was printed, or 2 (the exit status). */
static int client_parse(const char *cmd, int argc, char **argv, bool want_pid, bool opts_out,
			struct client_args *a)
{
	struct option longopts[MP_OPT_N + 3];
	size_t n = 0;
	int c, r;

	for (size_t i = 0; i < MP_OPT_N; i++) {
		const struct mp_option *o = &mp_options_table[i];

		if (o->name && (o->where & MP_OPT_ATTACH))
			longopts[n++] = (struct option){ o->name,
							 o->type == MP_OPT_FLAG ? no_argument :
										  required_argument,
							 NULL, 0x100 + (int)i };
	}
	longopts[n++] = (struct option){ "control", required_argument, NULL, 'c' };
	longopts[n++] = (struct option){ "help", no_argument, NULL, 'h' };
	longopts[n] = (struct option){ 0 };
	memset(a, 0, sizeof(*a));
	while ((c = getopt_long(argc, argv, "c:o:d:h", longopts, NULL)) != -1) {
		if (c == 'c') {
			a->control = optarg;
		} else if (c == 'h') {
			client_usage();
			return 1;
		} else if (c == 'o' || c == 'd' || c >= 0x100) {
			const struct mp_option *o =
				c >= 0x100 ? &mp_options_table[c - 0x100] :
					     &mp_options_table[c == 'o' ? MP_OPT_ID_OUTPUT :
									  MP_OPT_ID_DURATION];

			r = client_opt(cmd, opts_out, o, optarg, a);
			if (r)
				return r;
		} else {
			log_error("invalid option (see --help)");
			return 2;
		}
	}
	return client_operands(argc, argv, want_pid, a);
}

/* Sends @b (with @fd) and receives the reply into @reply; prints the
 * service's error. Returns 0 when the service said ok. */
static int client_call(const char *cmd, const char *control, struct mp_ctl_builder *b, int fd,
		       struct mp_ctl_msg *reply)
{
	struct timeval tv = { .tv_sec = 120 };
	const char *st, *msg;
	int sock, r;

	r = mp_ctl_build_end(b);
	if (r < 0) {
		log_error("request too long");
		return r;
	}
	r = mp_ctl_connect(control, &sock);
	if (r < 0) {
		log_error_errno(r, "cannot reach memprofd at %s: %m",
				control ? control : MP_CTL_DEFAULT_PATH);
		return r;
	}
	/* Detach waits for the final flush; attach for the probes. */
	setsockopt(sock, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	r = mp_ctl_send(sock, b->buf, b->len, fd);
	if (r == 0)
		r = mp_ctl_recv(sock, reply, NULL);
	close(sock);
	if (r < 0) {
		log_error_errno(r, "talking to memprofd: %m");
		return r;
	}
	st = mp_ctl_get(reply, "status");
	if (st && !strcmp(st, "ok"))
		return 0;
	msg = mp_ctl_get(reply, "message");
	log_error("%s", msg ? msg : "the service refused");
	return -EPERM;
}

/* Opened here, with the caller's rights, through the same path walk and
 * symlink rule as every output file (outfile.h); not truncated (the
 * service does that when it writes), so a refused request leaves an
 * existing file as it was. */
static int open_output(const char *cmd, const char *path, struct mp_output_file *f)
{
	int r = mp_output_open(path, f);

	if (r == -EINVAL)
		log_error_errno(r,
				"%s: not a regular file (the service writes only regular files; "
				"use memprof dump -o for other outputs)",
				path);
	else if (r < 0)
		log_error_errno(r, "%s: %s", path, mp_output_strerror(r));
	return r;
}

static int cmd_attach(int argc, char **argv)
{
	struct mp_ctl_builder *b = malloc(sizeof(*b));
	struct mp_ctl_msg *reply = malloc(sizeof(*reply));
	struct mp_output_file of = { .fd = -1, .dirfd = -1 };
	struct client_args a;
	int r;

	if (!b || !reply) {
		r = 1;
		goto out;
	}
	r = client_parse("attach", argc, argv, true, true, &a);
	if (r)
		goto out_parse;
	mp_ctl_build_init(b);
	mp_ctl_add(b, "cmd", "attach");
	mp_ctl_add(b, "pid", "%ld", a.pid);
	if (a.duration_ns)
		mp_ctl_add(b, "duration_ns", "%" PRIu64, a.duration_ns);
	for (size_t i = 0; i < a.n_streams; i++)
		mp_ctl_add(b, "stream", "%s", a.streams[i]);
	if (a.mode)
		mp_ctl_add(b, "mode", "%s", a.mode);
	if (a.sample_bytes)
		mp_ctl_add(b, "sample_bytes", "%" PRIu64, a.sample_bytes);
	if (a.stacks)
		mp_ctl_add(b, "stacks", "1");
	if (a.tracer)
		mp_ctl_add(b, "tracer", "%s", a.tracer);
	if (a.max_memory)
		mp_ctl_add(b, "max_memory", "%" PRIu64, a.max_memory);
	if (a.no_default_wrappers)
		mp_ctl_add(b, "no_default_wrappers", "1");
	for (size_t i = 0; i < a.n_rules; i++)
		mp_ctl_add(b, a.rule_keys[i], "%s", a.rules[i]);
	if (a.output && open_output("attach", a.output, &of) < 0) {
		r = 1;
		goto out;
	}
	r = client_call("attach", a.control, b, of.fd, reply) < 0 ? 1 : 0;
	if (r == 0)
		printf("attached to pid %ld (target %s)\n", a.pid,
		       mp_ctl_get(reply, "target") ?: "?");
	mp_output_close(&of, r == 0);
	goto out;
out_parse:
	r = r == 1 ? 0 : r;
out:
	free(b);
	free(reply);
	return r;
}

static int cmd_simple(const char *cmd, int argc, char **argv)
{
	struct mp_ctl_builder *b = malloc(sizeof(*b));
	struct mp_ctl_msg *reply = malloc(sizeof(*reply));
	bool is_dump = !strcmp(cmd, "dump"), with_pid = is_dump || !strcmp(cmd, "detach");
	struct mp_profile *p = NULL;
	struct client_args a;
	int fd = -1, r;

	if (!b || !reply) {
		r = 1;
		goto out;
	}
	r = client_parse(cmd, argc, argv, with_pid, is_dump, &a);
	if (r) {
		r = r == 1 ? 0 : r;
		goto out;
	}
	mp_ctl_build_init(b);
	mp_ctl_add(b, "cmd", "%s", cmd);
	if (with_pid)
		mp_ctl_add(b, "pid", "%ld", a.pid);
	if (is_dump) {
		/* The service writes an anonymous file; the table is read
		 * from it, or it is copied to -o like every output file. */
		fd = memfd_create("memprof-dump", MFD_CLOEXEC);
		if (fd < 0) {
			log_error_errno(-errno, "memfd_create: %m");
			r = 1;
			goto out;
		}
	}
	r = client_call(cmd, a.control, b, fd, reply) < 0 ? 1 : 0;
	if (r)
		goto out;
	if (!strcmp(cmd, "detach")) {
		printf("detached from pid %ld\n", a.pid);
	} else if (!strcmp(cmd, "list")) {
		size_t n = 0;

		for (size_t i = 0; i < reply->n; i++)
			if (!strcmp(reply->f[i].key, "target")) {
				printf("%s\n", reply->f[i].value);
				n++;
			}
		if (!n)
			printf("no targets\n");
	} else if (!strcmp(cmd, "status")) {
		for (size_t i = 1; i < reply->n; i++)
			printf("%s: %s\n", reply->f[i].key, reply->f[i].value);
	} else if (is_dump) {
		struct stat st;
		uint8_t *buf = NULL;
		const char *why = NULL;

		r = fstat(fd, &st) < 0 || st.st_size <= 0 || st.st_size > MP_PROFILE_MAX_FILE;
		if (!r) {
			buf = malloc((size_t)st.st_size);
			r = !buf || pread(fd, buf, (size_t)st.st_size, 0) != st.st_size;
		}
		if (!r)
			r = mp_profile_file_decode(buf, (size_t)st.st_size, &p, &why) < 0;
		if (!r && a.output) {
			int w = mp_output_write(a.output, buf, (size_t)st.st_size);

			if (w < 0)
				log_error_errno(w, "writing %s: %s", a.output,
						mp_output_strerror(w));
			else
				printf("dumped pid %ld to %s\n", a.pid, a.output);
			r = w < 0;
		} else if (!r) {
			r = mp_report_write(p, MP_REPORT_TABLE, NULL, stdout) < 0;
		} else {
			log_error("unreadable profile%s%s", why ? ": " : "", why ? why : "");
		}
		free(buf);
	}
out:
	mp_profile_free(p);
	if (fd >= 0)
		close(fd);
	free(b);
	free(reply);
	return r;
}

static int cmd_collect(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "listen", required_argument, NULL, 'l' },
		{ "out", required_argument, NULL, 'o' },
		{ "help", no_argument, NULL, 'h' },
		{},
	};
	const char *listen = NULL, *out = NULL;
	int c;

	while ((c = getopt_long(argc, argv, "l:o:h", longopts, NULL)) != -1) {
		switch (c) {
		case 'l':
			listen = optarg;
			break;
		case 'o':
			out = optarg;
			break;
		case 'h':
			puts("Usage: memprof collect --listen tcp://ADDR:PORT|unix:PATH --out DIR\n"
			     "\n"
			     "Receive memprofd's profile stream; write each chunk to\n"
			     "DIR/PID-TARGET/SEQ.memprof, acknowledge it to memprofd once it is\n"
			     "on disk (memprofd sends a chunk not acknowledged again), and print\n"
			     "one line per chunk, and per gap in a target's sequence numbers.\n"
			     "Ends on SIGINT/SIGTERM.");
			return 0;
		default:
			return 2;
		}
	}
	if (!listen || !out || optind != argc) {
		log_error("--listen URL and --out DIR are required");
		return 2;
	}
	return mp_collect_run(listen, out, stdout) < 0 ? 1 : 0;
}

int main(int argc, char **argv)
{
	static char ident[64];

	/* Messages name the subcommand: "memprof convert: ...". */
	snprintf(ident, sizeof(ident), "memprof%s%.40s", argc >= 2 && argv[1][0] != '-' ? " " : "",
		 argc >= 2 && argv[1][0] != '-' ? argv[1] : "");
	mp_log_open(ident, MP_LOG_AUTO);
	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
		usage(stdout);
		return 0;
	}
	/* Subcommands parse argv from their own name on. */
	if (!strcmp(argv[1], "run"))
		return cmd_run(argc - 1, argv + 1);
	if (!strcmp(argv[1], "report"))
		return cmd_report(argc - 1, argv + 1);
	if (!strcmp(argv[1], "convert"))
		return cmd_convert(argc - 1, argv + 1);
	if (!strcmp(argv[1], "diff"))
		return memprof_cmd_diff(argc - 1, argv + 1);
	if (!strcmp(argv[1], "attach"))
		return cmd_attach(argc - 1, argv + 1);
	if (!strcmp(argv[1], "detach") || !strcmp(argv[1], "dump") || !strcmp(argv[1], "list") ||
	    !strcmp(argv[1], "status"))
		return cmd_simple(argv[1], argc - 1, argv + 1);
	if (!strcmp(argv[1], "top"))
		return mp_top_main(argc - 1, argv + 1);
	if (!strcmp(argv[1], "collect"))
		return cmd_collect(argc - 1, argv + 1);
	if (!strcmp(argv[1], "env"))
		return cmd_env(argc - 1, argv + 1);
	mp_log_open("memprof", MP_LOG_AUTO);
	log_error("unknown command '%s' (see memprof --help)", argv[1]);
	return 2;
}
