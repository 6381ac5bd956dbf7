// SPDX-License-Identifier: MIT
/* memprofd: profile one live process, in the foreground. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "options.h"
#include "profile.h"
#include "session.h"

static void usage(FILE *f)
{
	fputs("Usage: memprofd --pid PID [OPTIONS]\n"
	      "\n"
	      "Attach to the running process PID, trace its allocator with eBPF, read\n"
	      "its libmemprof kernel markers and RSS, and report memory per kernel when\n"
	      "it exits, the duration elapses, or on SIGINT/SIGTERM. Needs root (or\n"
	      "CAP_BPF, CAP_PERFMON and CAP_SYS_PTRACE).\n"
	      "\n"
	      "Options:\n",
	      f);
	mp_options_help(f, true);
	fputs("\nExample: memprofd --pid 1234 --duration 10 -o app.memprof\n", f);
}

int main(int argc, char **argv)
{
	struct mp_options o;
	struct mp_profile *p = NULL;
	int r;

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
