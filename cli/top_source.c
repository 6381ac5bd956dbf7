// SPDX-License-Identifier: MIT
/*
 * The snapshots of `memprof top` (top.h): a profiling session in this
 * process, snapshotting itself every second, or the memprofd service,
 * asked for a dump every second.
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "control.h"
#include "log.h"
#include "option_table.h"
#include "options.h"
#include "profile_pb.h"
#include "top.h"
#include "top_view.h"

#define NS_PER_S 1000000000ull
/* A dump answers within the service's own bound (a few seconds); attach
 * and detach wait for the probes and the final flush, as memprof's. */
#define DUMP_TIMEOUT_S 30
#define ATTACH_TIMEOUT_S 120

static void wake(int fd)
{
	uint64_t one = 1;

	if (write(fd, &one, sizeof(one)) < 0 && errno != EAGAIN)
		log_debug_errno(-errno, "eventfd: %m");
}

/* Hands the screen a profile (owned; NULL: none) and/or a status. */
static void feed_post(struct top_feed *f, struct mp_profile *p, const char *status, bool ended)
{
	pthread_mutex_lock(&f->lock);
	if (p) {
		mp_profile_free(f->latest);
		f->latest = p;
	}
	if (status)
		snprintf(f->status, sizeof(f->status), "%s", status);
	if (ended)
		f->ended = true;
	pthread_mutex_unlock(&f->lock);
	wake(f->wake_fd);
}

/* The same with the part of @p the screen shows (@p is freed): the
 * screen keeps its copy until the next one, and a whole profile holds
 * every invocation record. */
static void feed_post_view(struct top_feed *f, struct mp_profile *p, const char *status, bool ended)
{
	struct mp_profile *v = NULL;

	if (p && mp_top_view_copy(p, &v) < 0)
		status = "out of memory for the screen's copy of a snapshot";
	mp_profile_free(p);
	feed_post(f, v, status, ended);
}

const char *top_source_via(const struct top_source *s)
{
	return s->direct ? "direct" : "memprofd";
}

/* ---- direct: a session in this process ---- */

static void direct_on_snapshot(void *ctx, enum mp_snapshot_reason why, struct mp_profile *p,
			       int err)
{
	struct top_source *s = ctx;
	char status[128];

	(void)why;
	if (p) {
		feed_post_view(&s->feed, p, "", false);
		return;
	}
	snprintf(status, sizeof(status), "snapshot failed: %s (tried again in a second)",
		 strerror(err < 0 ? -err : EIO));
	feed_post(&s->feed, NULL, status, false);
}

/* Everything is attached: the first snapshot now, not in a second. */
static int direct_on_attached(void *ctx)
{
	struct top_source *s = ctx;

	pthread_mutex_lock(&s->feed.lock);
	s->attached = true;
	pthread_mutex_unlock(&s->feed.lock);
	wake(s->snapshot_fd);
	wake(s->feed.wake_fd);
	return 0;
}

static void *direct_main(void *arg)
{
	struct top_source *s = arg;
	struct mp_profile *p = NULL;
	char status[160];
	int r = mp_session_run(&s->sopts, &p);

	if (r == 0)
		snprintf(status, sizeof(status),
			 "pid %d exited: its final profile is shown; q quits", (int)s->a.pid);
	else
		snprintf(status, sizeof(status),
			 "the session failed: %s (its message follows on q)", strerror(-r));
	pthread_mutex_lock(&s->feed.lock);
	s->done = true;
	s->result = r;
	pthread_mutex_unlock(&s->feed.lock);
	feed_post_view(&s->feed, p, status, true);
	return NULL;
}

/* The options of `memprofd --pid` (mp_options_init()), and top's. */
static void direct_options(struct top_source *s)
{
	const struct top_args *a = &s->a;
	struct mp_opt_value v;
	struct mp_options o;

	mp_options_init(&o);
	s->sopts = o.session;
	s->sopts.pid = a->pid;
	if (a->mode &&
	    mp_opt_parse(&mp_options_table[MP_OPT_ID_MODE], MP_OPT_CLI, a->mode, &v) == 0)
		s->sopts.mode = (uint32_t)v.u;
	else if (a->sample_bytes)
		s->sopts.mode = MP_TRACE_SAMPLED; /* --sample-bytes implies it */
	if (s->sopts.mode == MP_TRACE_SAMPLED)
		s->sopts.sample_bytes = a->sample_bytes ? a->sample_bytes : MP_SAMPLE_BYTES_DEFAULT;
	if (a->tracer &&
	    mp_opt_parse(&mp_options_table[MP_OPT_ID_TRACER], MP_OPT_CLI, a->tracer, &v) == 0)
		s->sopts.tracer = (uint32_t)v.u;
	s->ctl = (struct mp_session_ctl){
		.stop_fd = s->stop_fd,
		.snapshot_fd = s->snapshot_fd,
		.snapshot_period_ns = NS_PER_S,
		.on_snapshot = direct_on_snapshot,
		.ctx = s,
	};
	s->sopts.ctl = &s->ctl;
	s->sopts.on_attached = direct_on_attached;
	s->sopts.on_attached_ctx = s;
}

/* Whether a signal of @sigfd is pending (it is left for the caller). */
static bool signalled(int sigfd)
{
	struct pollfd p = { .fd = sigfd, .events = POLLIN };

	return poll(&p, 1, 0) > 0;
}

static int direct_start(struct top_source *s, int sigfd)
{
	struct pollfd pfd[2] = { { .fd = s->feed.wake_fd, .events = POLLIN },
				 { .fd = sigfd, .events = POLLIN } };
	bool attached = false, done = false;
	uint64_t n;
	int r;

	s->snapshot_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (s->snapshot_fd < 0)
		return log_error_errno(-errno, "eventfd: %m");
	direct_options(s);
	r = -pthread_create(&s->thread, NULL, direct_main, s);
	if (r < 0)
		return log_error_errno(r, "cannot start the session thread: %m");
	s->thread_started = true;
	while (!attached && !done) {
		if (poll(pfd, 2, -1) < 0 && errno != EINTR)
			return log_error_errno(-errno, "poll: %m");
		if (pfd[1].revents)
			return log_error_errno(-EINTR, "interrupted while attaching to pid %d",
					       (int)s->a.pid);
		if (pfd[0].revents && read(s->feed.wake_fd, &n, sizeof(n)) < 0 && errno != EAGAIN)
			return log_error_errno(-errno, "eventfd: %m");
		pthread_mutex_lock(&s->feed.lock);
		attached = s->attached;
		done = s->done;
		pthread_mutex_unlock(&s->feed.lock);
	}
	/* The session said why it failed. */
	return attached ? 0 : s->result < 0 ? s->result : -ESRCH;
}

/* ---- through the service ---- */

/* One request (with @fd unless negative) and its reply in s->reply: 0
 * when the service said ok; else the service's errno (negative) with its
 * message in @why, or a local error with its reason. The connection is in
 * s->feed.sock meanwhile, so that quitting can cut a dump short. */
static int svc_call(struct top_source *s, int fd, int timeout_s, char *why, size_t why_len)
{
	struct timeval tv = { .tv_sec = timeout_s };
	const char *st, *msg, *err;
	int sock, r;

	r = mp_ctl_build_end(s->b);
	if (r < 0) {
		snprintf(why, why_len, "request too long");
		return r;
	}
	r = mp_ctl_connect(s->a.control, &sock);
	if (r < 0) {
		snprintf(why, why_len, "cannot reach memprofd at %s: %s",
			 s->a.control ? s->a.control : MP_CTL_DEFAULT_PATH, strerror(-r));
		return r;
	}
	setsockopt(sock, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(sock, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	pthread_mutex_lock(&s->feed.lock);
	r = s->feed.quitting ? -ECANCELED : 0;
	if (r == 0)
		s->feed.sock = sock;
	pthread_mutex_unlock(&s->feed.lock);
	if (r == 0)
		r = mp_ctl_send(sock, s->b->buf, s->b->len, fd);
	if (r == 0)
		r = mp_ctl_recv(sock, s->reply, NULL);
	pthread_mutex_lock(&s->feed.lock);
	s->feed.sock = -1;
	if (s->feed.quitting)
		r = -ECANCELED;
	pthread_mutex_unlock(&s->feed.lock);
	close(sock);
	if (r < 0) {
		snprintf(why, why_len, "talking to memprofd: %s", strerror(-r));
		return r;
	}
	st = mp_ctl_get(s->reply, "status");
	if (st && !strcmp(st, "ok"))
		return 0;
	msg = mp_ctl_get(s->reply, "message");
	err = mp_ctl_get(s->reply, "errno");
	snprintf(why, why_len, "%s", msg ? msg : "the service refused");
	r = err ? atoi(err) : 0;
	return r > 0 && r < 4096 ? -r : -EPROTO;
}

/* Reads the profile the service wrote into @fd: bounded, decoded with the
 * validating decoder (the file is the service's, the figures the
 * target's). */
static int read_dump(int fd, struct mp_profile **ret, char *why, size_t why_len)
{
	const char *w = NULL;
	struct stat st;
	uint8_t *buf;
	size_t got = 0;
	int r;

	if (fstat(fd, &st) < 0 || st.st_size <= 0 || (uint64_t)st.st_size > MP_PROFILE_MAX_FILE) {
		snprintf(why, why_len, "the service wrote no readable profile");
		return -EBADMSG;
	}
	buf = malloc((size_t)st.st_size);
	if (!buf) {
		snprintf(why, why_len, "out of memory for a %lld-byte profile",
			 (long long)st.st_size);
		return -ENOMEM;
	}
	while (got < (size_t)st.st_size) {
		ssize_t n = pread(fd, buf + got, (size_t)st.st_size - got, (off_t)got);

		if (n <= 0)
			break;
		got += (size_t)n;
	}
	r = got == (size_t)st.st_size ? mp_profile_file_decode(buf, got, ret, &w) : -EIO;
	if (r < 0)
		snprintf(why, why_len, "unreadable profile from the service: %s",
			 w ? w : strerror(-r));
	free(buf);
	return r;
}

static int svc_dump(struct top_source *s, struct mp_profile **ret, char *why, size_t why_len)
{
	int fd, r;

	mp_ctl_build_init(s->b);
	mp_ctl_add(s->b, "cmd", "dump");
	mp_ctl_add(s->b, "pid", "%d", (int)s->a.pid);
	/* An anonymous file, gone with its last descriptor. */
	fd = memfd_create("memprof-top", MFD_CLOEXEC);
	if (fd < 0) {
		snprintf(why, why_len, "memfd_create: %s", strerror(errno));
		return -errno;
	}
	r = svc_call(s, fd, DUMP_TIMEOUT_S, why, why_len);
	if (r == 0)
		r = read_dump(fd, ret, why, why_len);
	close(fd);
	return r;
}

static void *svc_main(void *arg)
{
	struct top_source *s = arg;
	struct pollfd pfd = { .fd = s->stop_fd, .events = POLLIN };
	char why[300], status[400];

	for (;;) {
		struct mp_profile *p = NULL;
		int r = poll(&pfd, 1, 1000);

		if (r < 0 && errno == EINTR)
			continue;
		if (r != 0)
			break; /* stop, or poll failed: nothing to wait with */
		r = svc_dump(s, &p, why, sizeof(why));
		if (r == -ECANCELED)
			break;
		if (r == -ESRCH) {
			snprintf(
				status, sizeof(status),
				"pid %d is no longer profiled (it exited, or was detached); q quits",
				(int)s->a.pid);
			feed_post(&s->feed, NULL, status, true);
			break;
		}
		/* Other failures are tried again in a second. */
		feed_post_view(&s->feed, p, r == 0 ? "" : why, false);
	}
	return NULL;
}

static int svc_detach(struct top_source *s)
{
	char why[300];
	int r;

	mp_ctl_build_init(s->b);
	mp_ctl_add(s->b, "cmd", "detach");
	mp_ctl_add(s->b, "pid", "%d", (int)s->a.pid);
	r = svc_call(s, -1, ATTACH_TIMEOUT_S, why, sizeof(why));
	if (r == -ESRCH) /* it exited: the service has ended its session */
		return 0;
	if (r < 0)
		log_error("detaching from pid %d: %s", (int)s->a.pid, why);
	return r;
}

/* Attach (or find it attached already), then one dump before the screen
 * opens: what fails, fails here, with the terminal untouched. */
static int svc_start(struct top_source *s, int sigfd)
{
	const struct top_args *a = &s->a;
	struct mp_profile *p = NULL;
	char why[300];
	int r;

	s->b = malloc(sizeof(*s->b));
	s->reply = malloc(sizeof(*s->reply));
	if (!s->b || !s->reply)
		return log_error_errno(-ENOMEM, "out of memory");
	mp_ctl_build_init(s->b);
	mp_ctl_add(s->b, "cmd", "attach");
	mp_ctl_add(s->b, "pid", "%d", (int)a->pid);
	if (a->mode || a->sample_bytes) /* --sample-bytes implies sampled */
		mp_ctl_add(s->b, "mode", "%s", a->mode ? a->mode : "sampled");
	if (a->sample_bytes)
		mp_ctl_add(s->b, "sample_bytes", "%" PRIu64, a->sample_bytes);
	if (a->tracer)
		mp_ctl_add(s->b, "tracer", "%s", a->tracer);
	r = svc_call(s, -1, ATTACH_TIMEOUT_S, why, sizeof(why));
	if (r < 0 && r != -EBUSY) {
		log_error("%s", why);
		return r;
	}
	s->we_attached = r == 0;
	/* On failure, top_source_stop() detaches what was attached here. */
	r = signalled(sigfd) ? -EINTR : svc_dump(s, &p, why, sizeof(why));
	if (r == -EINTR)
		return log_error_errno(r, "interrupted while attaching to pid %d", (int)a->pid);
	if (r < 0) {
		if (s->we_attached)
			log_error("%s", why);
		else
			log_error("%s (pid %d was being profiled already)", why, (int)a->pid);
		return r;
	}
	if (!s->we_attached)
		snprintf(
			why, sizeof(why),
			"pid %d was attached before: q leaves it attached (memprof detach ends it)",
			(int)a->pid);
	feed_post_view(&s->feed, p, s->we_attached ? "" : why, false);
	r = -pthread_create(&s->thread, NULL, svc_main, s);
	if (r < 0)
		return log_error_errno(r, "cannot start the snapshot thread: %m");
	s->thread_started = true;
	return 0;
}

/* ---- both ---- */

static int pick(struct top_source *s, const struct top_args *a)
{
	int sock, r;

	if (a->direct || a->control) {
		s->direct = a->direct;
		return 0;
	}
	r = mp_ctl_connect(NULL, &sock);
	if (r == 0) {
		close(sock);
		s->direct = false;
		return 0;
	}
	if (geteuid() == 0) {
		log_debug_errno(r, "no service at %s (%m): profiling in this process",
				MP_CTL_DEFAULT_PATH);
		s->direct = true;
		return 0;
	}
	return log_error_errno(r,
			       "cannot reach memprofd at %s: %m (without the service, "
			       "memprof top needs root)",
			       MP_CTL_DEFAULT_PATH);
}

int top_source_start(struct top_source *s, const struct top_args *a, int sigfd)
{
	int r;

	memset(s, 0, sizeof(*s));
	s->a = *a;
	s->stop_fd = s->snapshot_fd = s->feed.wake_fd = -1;
	s->feed.sock = -1;
	pthread_mutex_init(&s->feed.lock, NULL);
	s->feed.wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	s->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (s->feed.wake_fd < 0 || s->stop_fd < 0)
		r = log_error_errno(-errno, "eventfd: %m");
	else
		r = pick(s, a);
	if (r == 0)
		r = s->direct ? direct_start(s, sigfd) : svc_start(s, sigfd);
	if (r < 0)
		top_source_stop(s);
	return r;
}

int top_source_stop(struct top_source *s)
{
	int r = 0;

	pthread_mutex_lock(&s->feed.lock);
	s->feed.quitting = true;
	if (s->feed.sock >= 0)
		shutdown(s->feed.sock, SHUT_RDWR); /* a dump in flight ends now */
	pthread_mutex_unlock(&s->feed.lock);
	if (s->stop_fd >= 0)
		wake(s->stop_fd);
	if (s->thread_started)
		pthread_join(s->thread, NULL);
	s->thread_started = false;
	if (s->direct) {
		r = s->result;
	} else if (s->we_attached) {
		s->feed.quitting = false; /* the thread is gone: requests again */
		r = svc_detach(s);
		s->we_attached = false;
	}
	mp_profile_free(s->feed.latest);
	s->feed.latest = NULL;
	free(s->b);
	free(s->reply);
	s->b = NULL;
	s->reply = NULL;
	if (s->feed.wake_fd >= 0)
		close(s->feed.wake_fd);
	if (s->stop_fd >= 0)
		close(s->stop_fd);
	if (s->snapshot_fd >= 0)
		close(s->snapshot_fd);
	s->feed.wake_fd = s->stop_fd = s->snapshot_fd = -1;
	pthread_mutex_destroy(&s->feed.lock);
	return r;
}
