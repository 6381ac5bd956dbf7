/* SPDX-License-Identifier: MIT */
/*
 * `memprof top PID`: a live view of a target's kernels. top.c holds the
 * command line and the terminal; top_source.c takes the snapshots, either
 * with a profiling session in this process (root, no service) or through
 * the memprofd service (attach, a dump every second, detach).
 */
#ifndef MP_CLI_TOP_H
#define MP_CLI_TOP_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "control.h"
#include "profile.h"
#include "session.h"

/* The entry point: memprof top ARGS (argv[0] is "top"); the exit status. */
int mp_top_main(int argc, char **argv);

struct top_args {
	pid_t pid;
	bool direct; /* --direct */
	const char *control; /* --control, NULL: the default path */
	const char *mode; /* --mode, NULL: the path's default */
	uint64_t sample_bytes; /* --sample-bytes, 0: none */
	const char *tracer; /* --tracer, NULL: auto */
};

/* What the snapshot thread hands the screen, under @lock. */
struct top_feed {
	pthread_mutex_t lock;
	int wake_fd; /* eventfd: written after each change */
	struct mp_profile *latest; /* not taken yet by the screen; owned */
	char status[512]; /* the source's state, "" when all is well */
	bool ended; /* no more snapshots will come */
	int sock; /* service: the connection of the dump in flight, or -1 */
	bool quitting;
};

struct top_source {
	struct top_args a;
	bool direct; /* a session in this process, else the service */
	struct top_feed feed;
	pthread_t thread;
	bool thread_started;
	int stop_fd; /* eventfd: the thread ends */
	/* direct: the session's options and control, its state under
	 * feed.lock */
	struct mp_session_opts sopts;
	struct mp_session_ctl ctl;
	int snapshot_fd;
	bool attached, done;
	int result;
	/* service: the requests (one at a time: at start, then the thread's
	 * dumps, then at stop) */
	struct mp_ctl_builder *b;
	struct mp_ctl_msg *reply;
	bool we_attached; /* false: it was attached already, and stays so */
};

/* Picks the way (--direct, --control, else the service when its socket
 * answers, else direct for root), attaches and waits for it; @sigfd
 * (SIGINT, SIGTERM) ends the wait. 0, or a negative errno after logging
 * why. */
int top_source_start(struct top_source *s, const struct top_args *a, int sigfd);
/* Stops the snapshots and detaches what top attached (logs a failure).
 * 0 or a negative errno. */
int top_source_stop(struct top_source *s);
/* "direct" or "memprofd". */
const char *top_source_via(const struct top_source *s);

#endif /* MP_CLI_TOP_H */
