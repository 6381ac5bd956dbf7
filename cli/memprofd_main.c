// SPDX-License-Identifier: MIT
/* memprofd: profile one live process, in the foreground. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "config.h"
#include "control.h"
#include "log.h"
#include "modules.h"
#include "options.h"
#include "profile.h"
#include "service.h"
#include "session.h"
#include "stream.h"

static void usage(FILE *f)
{
	fputs("Usage: memprofd --pid PID [OPTIONS]\n"
	      "       memprofd [--control PATH] [--config PATH] [-v]   (service mode)\n"
	      "\n"
	      "Attach to the running process PID, trace its allocator with eBPF, read\n"
	      "its libmemprof kernel markers and RSS, and report memory per kernel when\n"
	      "it exits, the duration elapses, or on SIGINT/SIGTERM. Needs root (or\n"
	      "CAP_BPF, CAP_PERFMON, CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH:\n"
	      "docs/SERVICE.md says why each).\n"
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

	/* The service logs for journald: priorities, no name. */
	mp_log_open("memprofd", MP_LOG_JOURNAL);
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
			mp_log_set_max_level(LOG_DEBUG);
			break;
		default:
			log_error("service mode takes --control, --config and -v "
				  "(see --help)");
			return 2;
		}
	}
	if (optind < argc) {
		log_error("unexpected argument '%s' (see --help)", argv[optind]);
		return 2;
	}
	return mp_service_run(&so) < 0 ? 1 : 0;
}

/* --stream in the foreground: the session runs with a ctl (periodic
 * snapshots go to the streamer), so SIGINT/SIGTERM reach it through a
 * thread that turns them into its stop event. */
struct fg {
	struct mp_options *o;
	struct mp_streamer *streamer;
	struct mp_session_ctl ctl;
	uint64_t seq;
	sigset_t sigs;
};

static void fg_push(struct fg *g, const struct mp_profile *p, bool final)
{
	struct mp_chunk_meta m = {
		.target_id = 1,
		.pid = (int32_t)g->o->session.pid,
		.exe = p->exe,
		.sequence = g->seq++,
		.window_begin_ns = p->begin_ns,
		.window_end_ns = p->end_ns,
		.final = final,
	};
	int r = mp_streamer_push(g->streamer, &m, p, NULL, 0);

	if (r < 0)
		log_warning_errno(r, "pid %d: streaming chunk %" PRIu64 ": %m", (int)m.pid,
				  m.sequence);
}

static void fg_on_snapshot(void *ctx, enum mp_snapshot_reason why, struct mp_profile *p, int err)
{
	if (p)
		fg_push(ctx, p, false);
	mp_profile_free(p);
}

static void *fg_signals(void *arg)
{
	struct fg *g = arg;
	uint64_t one = 1;
	int sig;

	if (sigwait(&g->sigs, &sig) == 0 && sig != SIGUSR1)
		if (write(g->ctl.stop_fd, &one, sizeof(one)) < 0)
			log_error_errno(-errno, "stop: %m");
	return NULL;
}

static int run_streaming(struct mp_options *o, struct mp_profile **ret)
{
	struct fg g = { .o = o };
	pthread_t th;
	bool th_ok = false;
	int r;

	sigemptyset(&g.sigs);
	sigaddset(&g.sigs, SIGINT);
	sigaddset(&g.sigs, SIGTERM);
	sigaddset(&g.sigs, SIGUSR1); /* ends the signal thread */
	/* Before any thread starts, so every thread inherits the mask. */
	pthread_sigmask(SIG_BLOCK, &g.sigs, NULL);
	g.ctl = (struct mp_session_ctl){
		.stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK),
		.snapshot_fd = -1,
		.snapshot_period_ns = o->stream_interval_ns,
		.on_snapshot = fg_on_snapshot,
		.ctx = &g,
	};
	if (g.ctl.stop_fd < 0) {
		return log_error_errno(-errno, "eventfd: %m");
	}
	r = mp_streamer_new(64ull << 20, &g.streamer);
	if (r == 0)
		r = mp_streamer_set_global(g.streamer, o->streams, o->n_streams);
	if (r < 0) {
		log_error_errno(r, "streaming: %m");
		goto out;
	}
	th_ok = pthread_create(&th, NULL, fg_signals, &g) == 0;
	if (!th_ok) {
		r = -EAGAIN;
		log_error("cannot start the signal thread");
		goto out;
	}
	o->session.ctl = &g.ctl;
	r = mp_session_run(&o->session, ret);
	if (r == 0) {
		fg_push(&g, *ret, true);
		/* Bounded: a dead collector must not hold the exit. What
		 * is still queued then is never delivered: the profile says
		 * how much (and mp_streamer_free() logs it). */
		mp_streamer_flush(g.streamer, 5ull * 1000000000ull);
		(*ret)->stream_chunks_lost = mp_streamer_target_lost(g.streamer, 1, true);
	}
out:
	if (th_ok) {
		pthread_kill(th, SIGUSR1);
		pthread_join(th, NULL);
	}
	mp_streamer_free(g.streamer);
	close(g.ctl.stop_fd);
	return r;
}

int main(int argc, char **argv)
{
	struct mp_options o;
	struct mp_profile *p = NULL;
	int r;

	if (service_mode(argc, argv))
		return service_main(argc, argv);
	mp_log_open("memprofd", MP_LOG_AUTO);
	mp_options_init(&o);
	r = mp_options_parse(&o, argc, argv, true);
	if (r == 1) {
		usage(stdout);
		return 0;
	}
	if (r < 0)
		return 2;
	if (optind < argc) {
		log_error("unexpected argument '%s' (see --help)", argv[optind]);
		return 2;
	}
	o.session.release_detached = true;
	mp_dwfl_set_net(o.debuginfod);
	r = o.n_streams ? run_streaming(&o, &p) : mp_session_run(&o.session, &p);
	if (r < 0)
		return 1;
	r = mp_emit_profile(&o.out, p, stdout);
	mp_profile_free(p);
	return r < 0 ? 1 : 0;
}
