// SPDX-License-Identifier: MIT
/* memprof: the command-line front end. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "chrome.h"
#include "launch.h"
#include "options.h"
#include "profile.h"
#include "pprof.h"
#include "profile_pb.h"
#include "report.h"
#include "session.h"

static void usage(FILE *f)
{
	fputs("Usage: memprof COMMAND [ARGS]\n"
	      "\n"
	      "Commands:\n"
	      "  run [OPTIONS] -- CMD [ARGS...]   start CMD, profile it from before its main()\n"
	      "                                   until it exits, print a per-kernel table\n"
	      "  report FILE [--format table|json|tfjs] [--region NAME[#N]]\n"
	      "                                   print a profile written with -o\n"
	      "  convert FILE --to pprof|chrome|json [-o OUT]\n"
	      "                                   convert a profile to another format\n"
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
	      "CMD's exit status. Needs root (or CAP_BPF, CAP_PERFMON, CAP_SYS_PTRACE).\n"
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
		fprintf(stderr,
			"memprof run: no command given (memprof run [OPTIONS] -- CMD...)\n");
		return 2;
	}

	r = mp_launch(argv + optind, &pid);
	if (r < 0) {
		fprintf(stderr, "memprof run: cannot start '%s': %s\n", argv[optind],
			r == -ECHILD ? "it exited before reaching its entry point" : strerror(-r));
		return 127;
	}
	o.session.pid = pid;
	o.session.on_attached = resume;
	o.session.on_attached_ctx = &pid;
	r = mp_session_run(&o.session, &p);
	if (r < 0) {
		mp_launch_kill(pid);
		return 1;
	}
	/* A stop by duration or signal leaves the command running: wait for it
	 * as a shell would, the profile is already complete. */
	if (mp_launch_wait(pid, &status) < 0)
		status = 0;
	r = mp_options_emit(&o, p);
	mp_profile_free(p);
	if (r < 0)
		return 1;
	return mp_launch_exit_code(status);
}

static int cmd_report(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "format", required_argument, NULL, 'f' },
		{ "region", required_argument, NULL, 'r' },
		{ "help", no_argument, NULL, 'h' },
		{},
	};
	enum mp_report_format format = MP_REPORT_TABLE;
	const char *region = NULL, *why = NULL;
	struct mp_profile *p = NULL;
	int c, r;

	while ((c = getopt_long(argc, argv, "f:r:h", longopts, NULL)) != -1) {
		switch (c) {
		case 'f':
			if (mp_report_format_parse(optarg, &format) < 0) {
				fprintf(stderr,
					"memprof report: unknown format '%s' (table, json, tfjs)\n",
					optarg);
				return 2;
			}
			break;
		case 'r':
			region = optarg;
			break;
		case 'h':
			fputs("Usage: memprof report FILE [--format table|json|tfjs] "
			      "[--region NAME[#N]]\n"
			      "\n"
			      "Print a profile written by `memprofd -o` or `memprof run -o`.\n"
			      "  -f, --format FMT   table (default), json (the whole profile) or\n"
			      "                     tfjs (tf.profile's ProfileInfo for the region)\n"
			      "  -r, --region SPEC  NAME or NAME#N: the N-th invocation of kernel\n"
			      "                     NAME and the kernels nested in it (tfjs)\n",
			      stdout);
			return 0;
		default:
			return 2;
		}
	}
	if (optind + 1 != argc) {
		fprintf(stderr, "memprof report: expected exactly one FILE (see --help)\n");
		return 2;
	}
	r = mp_profile_load(argv[optind], &p, &why);
	if (r < 0) {
		fprintf(stderr, "memprof report: %s: %s\n", argv[optind], why ? why : strerror(-r));
		return 1;
	}
	r = mp_report_write(p, format, region, stdout);
	if (r == -ENOENT)
		fprintf(stderr, "memprof report: no invocation '%s' in %s\n", region, argv[optind]);
	else if (r < 0)
		fprintf(stderr, "memprof report: %s\n", strerror(-r));
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
				fprintf(stderr,
					"memprof convert: unknown format '%s' (pprof, chrome, json)\n",
					optarg);
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
		fprintf(stderr, "memprof convert: expected exactly one FILE (see --help)\n");
		return 2;
	}
	if (to == TO_NONE) {
		fprintf(stderr, "memprof convert: --to pprof|chrome|json is required\n");
		return 2;
	}
	if (to == TO_PPROF && !out && isatty(STDOUT_FILENO)) {
		fprintf(stderr, "memprof convert: pprof is binary: not writing it to a terminal "
				"(use -o FILE or a redirection)\n");
		return 2;
	}
	in = argv[optind];
	r = mp_profile_load(in, &p, &why);
	if (r < 0) {
		fprintf(stderr, "memprof convert: %s: %s\n", in, why ? why : strerror(-r));
		return 1;
	}
	if (out) {
		f = fopen(out, "we");
		if (!f) {
			r = -errno;
			fprintf(stderr, "memprof convert: cannot create %s: %s\n", out,
				strerror(-r));
			mp_profile_free(p);
			return 1;
		}
	}
	r = convert_write(p, to, f);
	/* The last buffered write fails here; its errno says why. */
	if ((f != stdout ? fclose(f) : fflush(f)) != 0)
		r = errno ? -errno : -EIO;
	if (r < 0) {
		fprintf(stderr, "memprof convert: writing %s: %s\n", out ? out : "standard output",
			strerror(-r));
		if (out)
			unlink(out);
	}
	mp_profile_free(p);
	return r < 0 ? 1 : 0;
}

int main(int argc, char **argv)
{
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
	fprintf(stderr, "memprof: unknown command '%s' (see memprof --help)\n", argv[1]);
	return 2;
}
