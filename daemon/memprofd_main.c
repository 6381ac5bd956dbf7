// SPDX-License-Identifier: MIT
/* memprofd: profile one live process, in the foreground. */
#include <errno.h>
#include <stdbool.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "control.h"
#include "options.h"
#include "profile.h"
#include "service.h"
#include "session.h"

static void usage(FILE *f)
{
	fputs("Usage: memprofd --pid PID [OPTIONS]\n"
	      "       memprofd [--control PATH] [--config PATH] [-v]   (service mode)\n"
	      "\n"
	      "Attach to the running process PID, trace its allocator with eBPF, read\n"
	      "its libmemprof kernel markers and RSS, and report memory per kernel when\n"
	      "it exits, the duration elapses, or on SIGINT/SIGTERM. Needs root (or\n"
	      "CAP_BPF, CAP_PERFMON and CAP_SYS_PTRACE).\n"
	      "\n"
	      "Options:\n",
	      f);
	mp_options_help(f, true);
	fputs("\nService mode (no --pid): serve `memprof attach|detach|list|status|dump`\n"
	      "on a control socket; see docs/SERVICE.md.\n"
	      "      --control PATH      control socket (default " MP_CTL_DEFAULT_PATH ")\n"
	      "      --config PATH       configuration file (default " MP_CONFIG_DEFAULT_PATH ",\n"
	      "                          optional)\n"
	      "\nExample: memprofd --pid 1234 --duration 10 -o app.memprof\n",
	      f);
}

/* Service mode: nothing on the command line but service options (any
 * profiling option means the foreground mode, which wants --pid). */
static bool service_mode(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];

		if (!strcmp(a, "--control") || !strcmp(a, "--config"))
			i++;
		else if (strncmp(a, "--control=", 10) && strncmp(a, "--config=", 9) &&
			 strcmp(a, "-v") && strcmp(a, "--verbose"))
			return false;
	}
	return true;
}

static int service_main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "control", required_argument, NULL, 'c' },
		{ "config", required_argument, NULL, 'C' },
		{ "verbose", no_argument, NULL, 'v' },
		{},
	};
	struct mp_service_opts so = { 0 };
	int c;

	while ((c = getopt_long(argc, argv, "v", longopts, NULL)) != -1) {
		switch (c) {
		case 'c':
			so.control_path = optarg;
			break;
		case 'C':
			so.config_path = optarg;
			break;
		case 'v':
			so.verbose = true;
			break;
		default:
			fprintf(stderr, "memprofd: service mode takes --control, --config and -v "
					"(see --help)\n");
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "memprofd: unexpected argument '%s' (see --help)\n", argv[optind]);
		return 2;
	}
	return mp_service_run(&so) < 0 ? 1 : 0;
}

int main(int argc, char **argv)
{
	struct mp_options o;
	struct mp_profile *p = NULL;
	int r;

	if (service_mode(argc, argv))
		return service_main(argc, argv);
	mp_options_init(&o);
	r = mp_options_parse(&o, argc, argv, true);
	if (r == 1) {
		usage(stdout);
		return 0;
	}
	if (r < 0)
		return 2;
	if (optind < argc) {
		fprintf(stderr, "memprofd: unexpected argument '%s' (see --help)\n", argv[optind]);
		return 2;
	}
	r = mp_session_run(&o.session, &p);
	if (r < 0)
		return 1;
	r = mp_options_emit(&o, p);
	mp_profile_free(p);
	return r < 0 ? 1 : 0;
}
