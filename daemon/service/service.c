// SPDX-License-Identifier: MIT
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <systemd/sd-daemon.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "control.h"
#include "log.h"
#include "profile_pb.h"
#include "service.h"
#include "session.h"
#include "stream.h"
#include "util.h"

#define MAX_CONNS 64
#define MAX_TARGET_STREAMS 8
/* Bounds how long a client may keep a connection thread busy sending or
 * reading. */
#define IO_TIMEOUT_S 5
#define ATTACH_TIMEOUT_S 60
#define DUMP_TIMEOUT_S 30
#define SHUTDOWN_FLUSH_NS (5ull * 1000000000ull)

enum target_state { T_STARTING, T_RUNNING, T_DONE };

struct service;

struct target {
	struct service *svc;
	struct target *next;
	uint64_t id;
	pid_t pid;
	uid_t uid; /* who attached */
	gid_t gid;
	char exe[PATH_MAX];
	uint64_t started_ns;
	int out_fd;
	char *streams[MAX_TARGET_STREAMS];
	size_t n_streams;
	char *owners[MP_CONFIG_MAX_OWNERS];
	struct mp_session_opts sopts;
	struct mp_session_ctl ctl;
	pthread_t thread;
	bool joined;
	/* Under svc->lock. */
	enum target_state state;
	int result;
	unsigned users; /* connection threads holding a pointer */
	bool dump_wanted, dump_ready;
	struct mp_profile *dump;
	int dump_err;
	/* Session thread only. */
	uint64_t seq;
	pthread_mutex_t dump_lock; /* one dump at a time */
};

struct service {
	const struct mp_service_opts *o;
	const char *control_path, *config_path;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct mp_config *cfg; /* under lock */
	struct target *targets; /* under lock */
	unsigned n_targets; /* not DONE */
	unsigned n_conns;
	uint64_t next_id;
	bool stopping;
	int reap_fd; /* eventfd: a target ended or was released */
	struct mp_streamer *streamer;
	uint64_t started_ns;
};

static void wake_reaper(struct service *svc)
{
	uint64_t one = 1;

	if (write(svc->reap_fd, &one, sizeof(one)) < 0) {
		/* The counter cannot overflow in practice; nothing to do. */
	}
}

/* --- authorization --- */

static int read_ids(const char *text, const char *key, unsigned long ids[4])
{
	const char *p = strstr(text, key);

	if (!p || (p != text && p[-1] != '\n'))
		return -EINVAL;
	p += strlen(key);
	for (int i = 0; i < 4; i++) {
		char *end;

		while (*p == ' ' || *p == '\t')
			p++;
		if (*p < '0' || *p > '9')
			return -EINVAL;
		errno = 0;
		ids[i] = strtoul(p, &end, 10);
		if (errno)
			return -EINVAL;
		p = end;
	}
	return 0;
}

int mp_service_authorize(uid_t uid, gid_t gid, pid_t pid, char *why, size_t why_len)
{
	char path[64], text[8192];
	unsigned long u[4], g[4];
	struct stat st;
	ssize_t n;
	int fd;

	if (pid <= 0) {
		snprintf(why, why_len, "invalid pid");
		return -ESRCH;
	}
	snprintf(path, sizeof(path), "/proc/%d", (int)pid);
	if (stat(path, &st) < 0) {
		snprintf(why, why_len, "no process %d", (int)pid);
		return -ESRCH;
	}
	if (uid == 0)
		return 0;
	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		snprintf(why, why_len, "no process %d", (int)pid);
		return -ESRCH;
	}
	/* The kernel gives the files under /proc/PID of a non-dumpable
	 * process to root (the directory itself keeps its owner). */
	if (fstat(fd, &st) < 0) {
		close(fd);
		snprintf(why, why_len, "no process %d", (int)pid);
		return -ESRCH;
	}
	n = read(fd, text, sizeof(text) - 1);
	close(fd);
	if (n <= 0) {
		snprintf(why, why_len, "no process %d", (int)pid);
		return -ESRCH;
	}
	text[n] = '\0';
	if (read_ids(text, "Uid:", u) < 0 || read_ids(text, "Gid:", g) < 0) {
		snprintf(why, why_len, "cannot read the credentials of process %d", (int)pid);
		return -EPERM;
	}
	for (int i = 0; i < 3; i++) {
		if (u[i] != uid || g[i] != gid) {
			snprintf(why, why_len,
				 "process %d runs with uids %lu/%lu/%lu gids %lu/%lu/%lu, "
				 "not only %u/%u (only root may profile other users' or "
				 "set-id processes)",
				 (int)pid, u[0], u[1], u[2], g[0], g[1], g[2], (unsigned)uid,
				 (unsigned)gid);
			return -EPERM;
		}
	}
	/* Checked after the ids: the ownership only tells dumpability apart
	 * once we know the process is the requester's. */
	if (st.st_uid != uid || st.st_gid != gid) {
		snprintf(why, why_len, "process %d is not dumpable (PR_SET_DUMPABLE 0 or set-id)",
			 (int)pid);
		return -EPERM;
	}
	return 0;
}

/* --- targets --- */

static int write_profile(int fd, const struct mp_profile *p)
{
	uint8_t *buf = NULL;
	size_t len, off = 0;
	int r;

	r = mp_profile_file_encode(p, &buf, &len);
	if (r < 0)
		return r;
	if (ftruncate(fd, 0) < 0) {
		r = -errno;
		goto out;
	}
	while (off < len) {
		ssize_t n = pwrite(fd, buf + off, len - off, (off_t)off);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			r = -errno;
			goto out;
		}
		off += (size_t)n;
	}
	if (fsync(fd) < 0 && errno != EINVAL && errno != EROFS)
		r = -errno;
out:
	free(buf);
	return r;
}

static void stream_chunk(struct target *t, const struct mp_profile *p, bool final)
{
	struct mp_chunk_meta m = {
		.target_id = t->id,
		.pid = (int32_t)t->pid,
		.exe = p->exe ? p->exe : t->exe,
		.sequence = t->seq++,
		.window_begin_ns = p->begin_ns,
		.window_end_ns = p->end_ns,
		.final = final,
	};
	int r = mp_streamer_push(t->svc->streamer, &m, p, t->streams, t->n_streams);

	if (r < 0)
		log_warning_errno(r, "pid %d: streaming chunk %" PRIu64 ": %m", (int)t->pid,
				  m.sequence);
}

static void on_snapshot(void *ctx, enum mp_snapshot_reason why, struct mp_profile *p, int err)
{
	struct target *t = ctx;
	struct service *svc = t->svc;

	if (why == MP_SNAPSHOT_PERIODIC) {
		if (p)
			stream_chunk(t, p, false);
		mp_profile_free(p);
		return;
	}
	pthread_mutex_lock(&svc->lock);
	if (t->dump_wanted && !t->dump_ready) {
		t->dump = p;
		t->dump_err = p ? 0 : (err < 0 ? err : -EIO);
		t->dump_ready = true;
		p = NULL;
		pthread_cond_broadcast(&svc->cond);
	}
	pthread_mutex_unlock(&svc->lock);
	mp_profile_free(p);
}

static bool want_periodic(void *ctx)
{
	struct target *t = ctx;

	return mp_streamer_wanted(t->svc->streamer, t->n_streams);
}

static int on_attached(void *ctx)
{
	struct target *t = ctx;

	pthread_mutex_lock(&t->svc->lock);
	t->state = T_RUNNING;
	pthread_cond_broadcast(&t->svc->cond);
	pthread_mutex_unlock(&t->svc->lock);
	return 0;
}

static void *target_main(void *arg)
{
	struct target *t = arg;
	struct service *svc = t->svc;
	struct mp_profile *p = NULL;
	int r;

	r = mp_session_run(&t->sopts, &p);
	if (r == 0) {
		if (t->out_fd >= 0) {
			int w = write_profile(t->out_fd, p);

			if (w < 0)
				log_error_errno(w, "pid %d: writing the profile: %m", (int)t->pid);
			else
				log_debug("pid %d: profile written", (int)t->pid);
		}
		stream_chunk(t, p, true);
	}
	mp_profile_free(p);
	if (t->out_fd >= 0) {
		close(t->out_fd);
		t->out_fd = -1;
	}
	log_info("pid %d: detached (target %" PRIu64 ")%s", (int)t->pid, t->id,
		 r < 0 ? ", session failed" : "");
	pthread_mutex_lock(&svc->lock);
	t->state = T_DONE;
	t->result = r;
	svc->n_targets--;
	pthread_cond_broadcast(&svc->cond);
	pthread_mutex_unlock(&svc->lock);
	wake_reaper(svc);
	return NULL;
}

static void target_free(struct target *t)
{
	if (!t)
		return;
	if (t->out_fd >= 0)
		close(t->out_fd);
	if (t->ctl.stop_fd >= 0)
		close(t->ctl.stop_fd);
	if (t->ctl.snapshot_fd >= 0)
		close(t->ctl.snapshot_fd);
	for (size_t i = 0; i < t->n_streams; i++)
		free(t->streams[i]);
	for (size_t i = 0; i < t->sopts.n_owner_rules; i++)
		free(t->owners[i]);
	mp_profile_free(t->dump);
	pthread_mutex_destroy(&t->dump_lock);
	free(t);
}

/* Joins and frees every ended target nobody looks at any more. */
static void reap(struct service *svc)
{
	struct target **pp, *dead = NULL;

	pthread_mutex_lock(&svc->lock);
	for (pp = &svc->targets; *pp;) {
		struct target *t = *pp;

		if (t->state == T_DONE && !t->users) {
			*pp = t->next;
			t->next = dead;
			dead = t;
		} else {
			pp = &t->next;
		}
	}
	pthread_mutex_unlock(&svc->lock);
	while (dead) {
		struct target *t = dead;

		dead = t->next;
		pthread_join(t->thread, NULL);
		target_free(t);
	}
}

static void signal_fd(int fd)
{
	uint64_t one = 1;

	if (write(fd, &one, sizeof(one)) < 0) {
		/* An eventfd only fails here on overflow: already signalled. */
	}
}

/* --- requests --- */

struct request {
	struct service *svc;
	int sock;
	uid_t uid;
	gid_t gid;
	pid_t peer_pid;
	struct mp_ctl_msg msg;
	int fd; /* passed by the client, or -1 */
	struct mp_ctl_builder reply;
};

static int fail(struct request *q, int err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static int fail(struct request *q, int err, const char *fmt, ...)
{
	va_list ap;

	mp_ctl_build_init(&q->reply);
	mp_ctl_add(&q->reply, "status", "error");
	mp_ctl_add(&q->reply, "errno", "%d", err < 0 ? -err : err);
	va_start(ap, fmt);
	mp_ctl_vadd(&q->reply, "message", fmt, ap);
	va_end(ap);
	return err;
}

static void ok(struct request *q)
{
	mp_ctl_build_init(&q->reply);
	mp_ctl_add(&q->reply, "status", "ok");
}

static int get_pid(struct request *q, pid_t *ret)
{
	uint64_t v;

	if (mp_ctl_get_u64(&q->msg, "pid", INT_MAX, &v) < 0 || v == 0)
		return fail(q, -EINVAL, "missing or invalid pid");
	*ret = (pid_t)v;
	return 0;
}

static int check_out_fd(struct request *q)
{
	struct stat st;
	int fl;

	if (q->fd < 0)
		return 0;
	fl = fcntl(q->fd, F_GETFL);
	/* A regular file never blocks the session thread that writes it
	 * (a pipe or socket could, forever). */
	if (fstat(q->fd, &st) < 0 || !S_ISREG(st.st_mode))
		return fail(q, -EINVAL, "the output must be a regular file");
	if (fl < 0 || (fl & O_ACCMODE) == O_RDONLY)
		return fail(q, -EBADF, "the output file is not open for writing");
	return 0;
}

/* Finds the live target of @pid the requester may control; takes a use. */
static struct target *grab(struct request *q, pid_t pid)
{
	struct service *svc = q->svc;
	struct target *t;

	pthread_mutex_lock(&svc->lock);
	for (t = svc->targets; t; t = t->next)
		if (t->pid == pid && t->state != T_DONE && (q->uid == 0 || q->uid == t->uid))
			break;
	if (t)
		t->users++;
	pthread_mutex_unlock(&svc->lock);
	return t;
}

static void release(struct service *svc, struct target *t)
{
	bool done;

	pthread_mutex_lock(&svc->lock);
	t->users--;
	done = t->state == T_DONE && !t->users;
	pthread_mutex_unlock(&svc->lock);
	if (done)
		wake_reaper(svc);
}

static void deadline(struct timespec *ts, int seconds)
{
	clock_gettime(CLOCK_MONOTONIC, ts);
	ts->tv_sec += seconds;
}

static int do_attach(struct request *q)
{
	struct service *svc = q->svc;
	struct mp_config *cfg;
	struct target *t;
	struct timespec ts;
	uint64_t dur = 0, sample_bytes = 0;
	uint32_t mode = UINT32_MAX; /* the configured default */
	const char *mode_s;
	char why[256], path[64];
	pid_t pid = 0;
	ssize_t n;
	int r;

	r = get_pid(q, &pid);
	if (r < 0)
		return r;
	r = mp_ctl_get_u64(&q->msg, "duration_ns", UINT64_MAX / 2, &dur);
	if (r == -EINVAL)
		return fail(q, r, "invalid duration_ns");
	mode_s = mp_ctl_get(&q->msg, "mode");
	if (mode_s && mp_trace_mode_parse(mode_s, &mode) < 0)
		return fail(q, -EINVAL, "invalid mode (precise, sampled or rss)");
	r = mp_ctl_get_u64(&q->msg, "sample_bytes", 1ull << 40, &sample_bytes);
	if (r == -EINVAL || (r == 0 && !sample_bytes))
		return fail(q, -EINVAL, "invalid sample_bytes");
	r = check_out_fd(q);
	if (r < 0)
		return r;
	r = mp_service_authorize(q->uid, q->gid, pid, why, sizeof(why));
	if (r < 0) {
		log_notice("refused attach to pid %d requested by uid %u (pid %d): %s", (int)pid,
			   (unsigned)q->uid, (int)q->peer_pid, why);
		return fail(q, r, "not permitted: %s", why);
	}

	t = calloc(1, sizeof(*t));
	if (!t)
		return fail(q, -ENOMEM, "out of memory");
	pthread_mutex_init(&t->dump_lock, NULL);
	t->svc = svc;
	t->pid = pid;
	t->uid = q->uid;
	t->gid = q->gid;
	t->out_fd = q->fd;
	q->fd = -1;
	t->ctl.stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	t->ctl.snapshot_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	t->started_ns = mp_now_ns();
	snprintf(path, sizeof(path), "/proc/%d/exe", (int)pid);
	n = readlink(path, t->exe, sizeof(t->exe) - 1);
	t->exe[n > 0 ? n : 0] = '\0';
	if (t->ctl.stop_fd < 0 || t->ctl.snapshot_fd < 0) {
		r = fail(q, -errno, "eventfd: %s", strerror(errno));
		goto err;
	}
	for (size_t i = 0; i < q->msg.n; i++) {
		const char *url = q->msg.f[i].value;

		if (strcmp(q->msg.f[i].key, "stream"))
			continue;
		if (t->n_streams >= MAX_TARGET_STREAMS) {
			r = fail(q, -E2BIG, "at most %d --stream per target", MAX_TARGET_STREAMS);
			goto err;
		}
		/* The daemon may reach sockets the requester may not: only
		 * root names Unix sockets (configured collectors are root's). */
		if (q->uid != 0 && !strncmp(url, "unix:", 5)) {
			r = fail(q, -EPERM, "only root may stream to a Unix socket ('%s')", url);
			goto err;
		}
		/* Nor may anyone else make the daemon read a file (a token
		 * would go to their collector). */
		if (q->uid != 0 && (strstr(url, "headers=") || strstr(url, "ca="))) {
			r = fail(q, -EPERM, "only root may name files (headers=, ca=) in '%s'",
				 url);
			goto err;
		}
		r = mp_stream_url_check(url);
		if (r < 0) {
			fail(q, r, "invalid stream URL '%s'%s", url,
			     r == -EPROTONOSUPPORT ? " (this build has no pprof encoder)" : "");
			goto err;
		}
		t->streams[t->n_streams] = strdup(url);
		if (!t->streams[t->n_streams]) {
			r = fail(q, -ENOMEM, "out of memory");
			goto err;
		}
		t->n_streams++;
	}

	pthread_mutex_lock(&svc->lock);
	cfg = svc->cfg;
	r = 0;
	if (svc->stopping)
		r = fail(q, -ESHUTDOWN, "the service is shutting down");
	else if (svc->n_targets >= cfg->max_targets)
		r = fail(q, -EMFILE, "too many targets (max_targets = %u)", cfg->max_targets);
	for (struct target *o = svc->targets; o && r == 0; o = o->next)
		if (o->pid == pid && o->state != T_DONE)
			r = fail(q, -EBUSY, "pid %d is already being profiled", (int)pid);
	if (r == 0) {
		t->id = ++svc->next_id;
		t->sopts.pid = pid;
		t->sopts.duration_ns = dur;
		t->sopts.rss_hz = cfg->rss_hz;
		t->sopts.pss_every = cfg->pss_every;
		t->sopts.bpf_ring_bytes = cfg->bpf_ring_bytes;
		t->sopts.mode = mode != UINT32_MAX ? mode : cfg->mode;
		t->sopts.sample_bytes = sample_bytes ? sample_bytes : cfg->sample_bytes;
		t->sopts.verbose = svc->o->verbose;
		t->sopts.on_attached = on_attached;
		t->sopts.on_attached_ctx = t;
		t->sopts.ctl = &t->ctl;
		t->ctl.snapshot_period_ns = cfg->stream_interval_ns;
		t->ctl.on_snapshot = on_snapshot;
		t->ctl.want_periodic = want_periodic;
		t->ctl.ctx = t;
		for (size_t i = 0; i < cfg->n_owners && r == 0; i++) {
			t->owners[i] = strdup(cfg->owners[i]);
			if (!t->owners[i])
				r = fail(q, -ENOMEM, "out of memory");
			else
				t->sopts.owner_rules[t->sopts.n_owner_rules++] = t->owners[i];
		}
	}
	if (r == 0) {
		t->state = T_STARTING;
		t->users = 1;
		r = -pthread_create(&t->thread, NULL, target_main, t);
		if (r < 0)
			fail(q, r, "cannot start a thread: %s", strerror(-r));
	}
	if (r < 0) {
		pthread_mutex_unlock(&svc->lock);
		goto err;
	}
	t->next = svc->targets;
	svc->targets = t;
	svc->n_targets++;
	deadline(&ts, ATTACH_TIMEOUT_S);
	while (t->state == T_STARTING)
		if (pthread_cond_timedwait(&svc->cond, &svc->lock, &ts) == ETIMEDOUT)
			break;
	if (t->state == T_RUNNING) {
		ok(q);
		mp_ctl_add(&q->reply, "target", "%" PRIu64, t->id);
		mp_ctl_add(&q->reply, "exe", "%s", t->exe);
		log_info("pid %d (%s): attached for uid %u (target %" PRIu64 ")", (int)pid, t->exe,
			 (unsigned)q->uid, t->id);
	} else if (t->state == T_DONE) {
		r = t->result < 0 ? t->result : -ESRCH;
		fail(q, r, "attaching to pid %d failed: %s (see the service log)", (int)pid,
		     strerror(-r));
	} else {
		/* Still attaching: the session goes on and can be detached. */
		r = fail(q, -ETIMEDOUT, "attaching to pid %d takes too long", (int)pid);
	}
	t->users--;
	pthread_mutex_unlock(&svc->lock);
	wake_reaper(svc);
	return r;
err:
	target_free(t);
	return r;
}

static int do_detach(struct request *q)
{
	struct service *svc = q->svc;
	struct target *t;
	pid_t pid = 0;
	int r;

	r = get_pid(q, &pid);
	if (r < 0)
		return r;
	t = grab(q, pid);
	if (!t)
		return fail(q, -ESRCH, "pid %d is not being profiled%s", (int)pid,
			    q->uid ? " by you" : "");
	signal_fd(t->ctl.stop_fd);
	pthread_mutex_lock(&svc->lock);
	while (t->state != T_DONE)
		pthread_cond_wait(&svc->cond, &svc->lock);
	r = t->result;
	pthread_mutex_unlock(&svc->lock);
	release(svc, t);
	if (r < 0)
		return fail(q, r, "the session of pid %d failed: %s", (int)pid, strerror(-r));
	ok(q);
	return 0;
}

static int do_dump(struct request *q)
{
	struct service *svc = q->svc;
	struct mp_profile *p = NULL;
	struct timespec ts;
	struct target *t;
	pid_t pid = 0;
	int r;

	r = get_pid(q, &pid);
	if (r < 0)
		return r;
	if (q->fd < 0)
		return fail(q, -EINVAL, "dump needs an output file");
	r = check_out_fd(q);
	if (r < 0)
		return r;
	t = grab(q, pid);
	if (!t)
		return fail(q, -ESRCH, "pid %d is not being profiled%s", (int)pid,
			    q->uid ? " by you" : "");
	pthread_mutex_lock(&t->dump_lock);
	pthread_mutex_lock(&svc->lock);
	t->dump_wanted = true;
	t->dump_ready = false;
	pthread_mutex_unlock(&svc->lock);
	signal_fd(t->ctl.snapshot_fd);
	pthread_mutex_lock(&svc->lock);
	deadline(&ts, DUMP_TIMEOUT_S);
	r = 0;
	while (!t->dump_ready && t->state != T_DONE && r == 0)
		r = -pthread_cond_timedwait(&svc->cond, &svc->lock, &ts);
	if (t->dump_ready) {
		p = t->dump;
		r = t->dump_err;
	} else if (r == 0) {
		r = -ESRCH;
	}
	t->dump = NULL;
	t->dump_wanted = false;
	t->dump_ready = false;
	pthread_mutex_unlock(&svc->lock);
	pthread_mutex_unlock(&t->dump_lock);
	release(svc, t);
	if (r == 0)
		r = write_profile(q->fd, p);
	mp_profile_free(p);
	if (r < 0)
		return fail(q, r, "dump of pid %d failed: %s", (int)pid, strerror(-r));
	ok(q);
	return 0;
}

static int do_list(struct request *q)
{
	struct service *svc = q->svc;
	uint64_t now = mp_now_ns();

	ok(q);
	pthread_mutex_lock(&svc->lock);
	for (struct target *t = svc->targets; t; t = t->next) {
		if (t->state == T_DONE || (q->uid && q->uid != t->uid))
			continue;
		mp_ctl_add(&q->reply, "target",
			   "pid=%d id=%" PRIu64 " uid=%u state=%s seconds=%.1f output=%s "
			   "streams=%zu exe=%s",
			   (int)t->pid, t->id, (unsigned)t->uid,
			   t->state == T_RUNNING ? "running" : "attaching",
			   (double)(now - t->started_ns) / 1e9, t->out_fd >= 0 ? "file" : "none",
			   t->n_streams, t->exe);
	}
	pthread_mutex_unlock(&svc->lock);
	return 0;
}

static void describe_line(void *ctx, const char *text)
{
	struct request *q = ctx;

	mp_ctl_add(&q->reply, "collector", "%s", text);
}

static int do_status(struct request *q)
{
	struct service *svc = q->svc;

	ok(q);
	pthread_mutex_lock(&svc->lock);
	mp_ctl_add(&q->reply, "pid", "%d", (int)getpid());
	mp_ctl_add(&q->reply, "uptime_s", "%.1f", (double)(mp_now_ns() - svc->started_ns) / 1e9);
	mp_ctl_add(&q->reply, "targets", "%u", svc->n_targets);
	mp_ctl_add(&q->reply, "max_targets", "%u", svc->cfg->max_targets);
	mp_ctl_add(&q->reply, "config", "%s", svc->config_path);
	mp_ctl_add(&q->reply, "stream_interval_s", "%.3f",
		   (double)svc->cfg->stream_interval_ns / 1e9);
	mp_ctl_add(&q->reply, "rss_hz", "%u", svc->cfg->rss_hz);
	mp_ctl_add(&q->reply, "mode", "%s", mp_trace_mode_name(svc->cfg->mode));
	pthread_mutex_unlock(&svc->lock);
	mp_streamer_describe(svc->streamer, describe_line, q);
	return 0;
}

static void *conn_main(void *arg)
{
	struct request *q = arg;
	struct service *svc = q->svc;
	const char *cmd;
	int r;

	r = mp_ctl_recv(q->sock, &q->msg, &q->fd);
	if (r < 0) {
		log_debug_errno(r, "control request from pid %d dropped: %m", (int)q->peer_pid);
		goto out;
	}
	cmd = mp_ctl_get(&q->msg, "cmd");
	if (!cmd)
		fail(q, -EINVAL, "no cmd");
	else if (!strcmp(cmd, "attach"))
		do_attach(q);
	else if (!strcmp(cmd, "detach"))
		do_detach(q);
	else if (!strcmp(cmd, "dump"))
		do_dump(q);
	else if (!strcmp(cmd, "list"))
		do_list(q);
	else if (!strcmp(cmd, "status"))
		do_status(q);
	else
		fail(q, -EOPNOTSUPP, "unknown command");
	if (mp_ctl_build_end(&q->reply) < 0)
		fail(q, -E2BIG, "reply too long");
	r = mp_ctl_send(q->sock, q->reply.buf, q->reply.len, -1);
	if (r < 0)
		log_debug_errno(r, "control reply to pid %d: %m", (int)q->peer_pid);
out:
	if (q->fd >= 0)
		close(q->fd);
	close(q->sock);
	free(q);
	pthread_mutex_lock(&svc->lock);
	svc->n_conns--;
	pthread_cond_broadcast(&svc->cond);
	pthread_mutex_unlock(&svc->lock);
	return NULL;
}

static void accept_one(struct service *svc, int lfd)
{
	struct timeval tv = { .tv_sec = IO_TIMEOUT_S };
	struct ucred cred;
	socklen_t len = sizeof(cred);
	struct request *q;
	pthread_attr_t attr;
	pthread_t th;
	int s, r;

	s = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
	if (s < 0)
		return;
	if (getsockopt(s, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0) {
		close(s);
		return;
	}
	setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	pthread_mutex_lock(&svc->lock);
	if (svc->n_conns >= MAX_CONNS) {
		pthread_mutex_unlock(&svc->lock);
		log_warning("too many control connections, refusing one from pid %d",
			    (int)cred.pid);
		close(s);
		return;
	}
	svc->n_conns++;
	pthread_mutex_unlock(&svc->lock);
	q = malloc(sizeof(*q));
	r = q ? 0 : ENOMEM;
	if (q) {
		*q = (struct request){ .svc = svc,
				       .sock = s,
				       .uid = cred.uid,
				       .gid = cred.gid,
				       .peer_pid = cred.pid,
				       .fd = -1 };
		pthread_attr_init(&attr);
		pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
		pthread_attr_setstacksize(&attr, 256 * 1024);
		r = pthread_create(&th, &attr, conn_main, q);
		pthread_attr_destroy(&attr);
	}
	if (r) {
		log_error_errno(r, "control connection: %m");
		free(q);
		close(s);
		pthread_mutex_lock(&svc->lock);
		svc->n_conns--;
		pthread_mutex_unlock(&svc->lock);
	}
}

/* --- lifecycle --- */

static int load_config(struct service *svc, bool initial)
{
	struct mp_config *c = NULL;
	char err[512];
	int r;

	r = mp_config_load(svc->config_path, &c, err, sizeof(err));
	if (r == -ENOENT && !svc->o->config_path) {
		r = mp_config_new(&c);
		if (r == 0 && initial)
			log_info("no %s, using defaults", svc->config_path);
	} else if (r < 0) {
		log_error("%s: %s%s", svc->config_path, err,
			  initial ? "" : " (keeping the previous configuration)");
		return r;
	}
	if (r < 0)
		return r;
	r = mp_streamer_set_global(svc->streamer, c->collectors, c->n_collectors);
	if (r < 0) {
		log_error_errno(r, "%s: collectors: %m", svc->config_path);
		mp_config_free(c);
		return r;
	}
	mp_streamer_set_buffer(svc->streamer, c->buffer_bytes);
	pthread_mutex_lock(&svc->lock);
	mp_config_free(svc->cfg);
	svc->cfg = c;
	pthread_mutex_unlock(&svc->lock);
	log_info("configuration %s from %s: %zu collectors, max_targets %u, stream_interval "
		 "%.3fs",
		 initial ? "loaded" : "reloaded", svc->config_path, c->n_collectors, c->max_targets,
		 (double)c->stream_interval_ns / 1e9);
	return 0;
}

static int open_control(const char *path, int *ret)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct stat st;
	int s, probe, r;

	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	strcpy(sa.sun_path, path);
	/* Replace a stale socket, never a live service's or another file. */
	if (lstat(path, &st) == 0) {
		if (!S_ISSOCK(st.st_mode))
			return -EEXIST;
		if (mp_ctl_connect(path, &probe) == 0) {
			close(probe);
			return -EADDRINUSE;
		}
		unlink(path);
	}
	s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (s < 0)
		return -errno;
	if (bind(s, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    /* Any local user may ask; authorization is per request. */
	    chmod(path, 0666) < 0 || listen(s, 128) < 0) {
		r = -errno;
		close(s);
		return r;
	}
	*ret = s;
	return 0;
}

static void shutdown_all(struct service *svc)
{
	struct timespec ts;

	pthread_mutex_lock(&svc->lock);
	svc->stopping = true;
	for (struct target *t = svc->targets; t; t = t->next)
		if (t->state != T_DONE)
			signal_fd(t->ctl.stop_fd);
	while (svc->n_targets)
		pthread_cond_wait(&svc->cond, &svc->lock);
	/* Connection threads end within their I/O timeouts. */
	deadline(&ts, 2 * IO_TIMEOUT_S);
	while (svc->n_conns)
		if (pthread_cond_timedwait(&svc->cond, &svc->lock, &ts) == ETIMEDOUT)
			break;
	pthread_mutex_unlock(&svc->lock);
	reap(svc);
	if (mp_streamer_flush(svc->streamer, SHUTDOWN_FLUSH_NS) < 0)
		log_warning("collectors did not take every chunk within %llu s, the rest is lost",
			    (unsigned long long)(SHUTDOWN_FLUSH_NS / 1000000000ull));
}

int mp_service_run(const struct mp_service_opts *o)
{
	struct service svc = {
		.o = o,
		.control_path = o->control_path ? o->control_path : MP_CTL_DEFAULT_PATH,
		.config_path = o->config_path ? o->config_path : MP_CONFIG_DEFAULT_PATH,
		.reap_fd = -1,
		.started_ns = mp_now_ns(),
	};
	int lfd = -1, sfd = -1, r;
	sigset_t mask;
	bool running = true;

	pthread_mutex_init(&svc.lock, NULL);
	{
		pthread_condattr_t ca;

		pthread_condattr_init(&ca);
		pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
		pthread_cond_init(&svc.cond, &ca);
		pthread_condattr_destroy(&ca);
	}
	/* Every thread inherits this mask: signals go to the signalfd. */
	sigemptyset(&mask);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGHUP);
	sigaddset(&mask, SIGPIPE);
	pthread_sigmask(SIG_BLOCK, &mask, NULL);
	sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
	svc.reap_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (sfd < 0 || svc.reap_fd < 0) {
		r = log_error_errno(-errno, "signalfd/eventfd: %m");
		goto out;
	}
	r = mp_streamer_new(64ull << 20, &svc.streamer);
	if (r < 0) {
		log_error_errno(r, "streamer: %m");
		goto out;
	}
	r = load_config(&svc, true);
	if (r < 0)
		goto out;
	r = open_control(svc.control_path, &lfd);
	if (r < 0) {
		if (r == -EADDRINUSE)
			log_error("control socket %s: another memprofd is running",
				  svc.control_path);
		else
			log_error_errno(r, "control socket %s: %m", svc.control_path);
		goto out;
	}
	log_info("listening on %s", svc.control_path);
	sd_notifyf(0, "READY=1\nSTATUS=listening on %s\nMAINPID=%d", svc.control_path,
		   (int)getpid());

	while (running) {
		struct pollfd pf[3] = {
			{ .fd = lfd, .events = POLLIN },
			{ .fd = sfd, .events = POLLIN },
			{ .fd = svc.reap_fd, .events = POLLIN },
		};

		if (poll(pf, 3, -1) < 0) {
			if (errno == EINTR)
				continue;
			r = log_error_errno(-errno, "poll: %m");
			break;
		}
		if (pf[2].revents & POLLIN) {
			uint64_t v;

			if (read(svc.reap_fd, &v, sizeof(v)) == sizeof(v))
				reap(&svc);
		}
		if (pf[1].revents & POLLIN) {
			struct signalfd_siginfo si;

			while (read(sfd, &si, sizeof(si)) == sizeof(si)) {
				if (si.ssi_signo == SIGHUP) {
					sd_notify(0, "RELOADING=1");
					log_info("SIGHUP: reloading %s", svc.config_path);
					load_config(&svc, false);
					sd_notify(0, "READY=1");
				} else if (si.ssi_signo == SIGTERM || si.ssi_signo == SIGINT) {
					running = false;
				}
			}
		}
		if (running && (pf[0].revents & POLLIN))
			accept_one(&svc, lfd);
	}
	sd_notify(0, "STOPPING=1");
	close(lfd);
	lfd = -1;
	unlink(svc.control_path);
	log_info("stopping: flushing %u targets", svc.n_targets);
	shutdown_all(&svc);
	log_info("stopped");
out:
	if (lfd >= 0)
		close(lfd);
	if (sfd >= 0)
		close(sfd);
	if (svc.reap_fd >= 0)
		close(svc.reap_fd);
	mp_streamer_free(svc.streamer);
	mp_config_free(svc.cfg);
	pthread_cond_destroy(&svc.cond);
	pthread_mutex_destroy(&svc.lock);
	return r;
}
