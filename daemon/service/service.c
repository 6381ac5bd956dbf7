// SPDX-License-Identifier: MIT
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
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
#include "option_table.h"
#include "control.h"
#include "log.h"
#include "memstats.h"
#include "profile_pb.h"
#include "service_impl.h"
#include "session.h"
#include "stream.h"
#include "util.h"

static void wake_reaper(struct service *svc)
{
	uint64_t one = 1;

	if (write(svc->reap_fd, &one, sizeof(one)) < 0) {
		/* The counter cannot overflow in practice; nothing to do. */
	}
}

/* --- targets --- */

/* Every profile copy (periodic chunk, dump) and every ended session frees
 * megabytes that glibc keeps resident in the thread's arena until
 * trimmed; one trim a second for the whole service returns them
 * (docs/BENCHMARKS.md section 6). */
#define HEAP_TRIM_INTERVAL_NS 1000000000ull

static void heap_trim_later(struct service *svc)
{
	uint64_t now = mp_now_ns(), last = atomic_load(&svc->trimmed_ns);

	if (now - last >= HEAP_TRIM_INTERVAL_NS &&
	    atomic_compare_exchange_strong(&svc->trimmed_ns, &last, now))
		mp_heap_trim();
}

static int pwrite_all(int fd, const uint8_t *buf, size_t len, off_t at)
{
	size_t off = 0;

	while (off < len) {
		ssize_t n = pwrite(fd, buf + off, len - off, at + (off_t)off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		off += (size_t)n;
	}
	return 0;
}

/* The profile file from @msg, the profile encoded once for the file and
 * the final stream chunk. */
static int write_profile_msg(int fd, const uint8_t *msg, size_t len)
{
	uint8_t hdr[MP_PROFILE_FILE_HEADER];
	int r;

	mp_profile_file_header(msg, len, hdr);
	if (ftruncate(fd, 0) < 0)
		return -errno;
	r = pwrite_all(fd, hdr, sizeof(hdr), 0);
	if (r == 0)
		r = pwrite_all(fd, msg, len, (off_t)sizeof(hdr));
	if (r == 0 && fsync(fd) < 0 && errno != EINVAL && errno != EROFS)
		r = -errno;
	return r;
}

static int write_profile(int fd, const struct mp_profile *p)
{
	uint8_t *msg;
	size_t len;
	int r = mp_profile_encode(p, &msg, &len);

	if (r < 0)
		return r;
	r = write_profile_msg(fd, msg, len);
	free(msg);
	return r;
}

static void stream_chunk_encoded(struct target *t, const struct mp_profile *p, const uint8_t *msg,
				 size_t msg_len, bool final)
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
	int r = mp_streamer_push_encoded(t->svc->streamer, &m, p, msg, msg_len, t->streams,
					 t->n_streams);

	if (r < 0)
		log_warning_errno(r, "pid %d: streaming chunk %" PRIu64 ": %m", (int)t->pid,
				  m.sequence);
}

static void stream_chunk(struct target *t, const struct mp_profile *p, bool final)
{
	stream_chunk_encoded(t, p, NULL, 0, final);
}

/* The final profile: to the -o file and the collectors, encoded once. */
static void emit_final(struct target *t, const struct mp_profile *p)
{
	uint8_t *msg = NULL;
	size_t len = 0;
	int r = 0;

	if (t->out_fd >= 0 || mp_streamer_wanted(t->svc->streamer, t->n_streams))
		r = mp_profile_encode(p, &msg, &len);
	if (t->out_fd >= 0) {
		int w = r < 0 ? r : write_profile_msg(t->out_fd, msg, len);

		if (w < 0)
			log_error_errno(w, "pid %d: writing the profile: %m", (int)t->pid);
		else
			log_debug("pid %d: profile written", (int)t->pid);
	}
	stream_chunk_encoded(t, p, msg, len, true);
	free(msg);
}

static void on_snapshot(void *ctx, enum mp_snapshot_reason why, struct mp_profile *p, int err)
{
	struct target *t = ctx;
	struct service *svc = t->svc;

	if (why == MP_SNAPSHOT_PERIODIC) {
		if (p)
			stream_chunk(t, p, false);
		mp_profile_free(p);
		heap_trim_later(svc);
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

	/* Loading the BPF object parses the kernel's BTF (~11 MiB of heap,
	 * freed at once); the session's own allocations made after it pin
	 * that memory in this thread's malloc arena unless it is given
	 * back (docs/SERVICE.md, "Memory per target"). */
	mp_heap_trim();

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
		/* Chunks this target's collectors missed so far; its final
		 * chunk's fate is logged when a collector is released. */
		p->stream_chunks_lost = mp_streamer_target_lost(svc->streamer, t->id, false);
		emit_final(t, p);
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
	for (size_t i = 0; i < t->n_streams; i++) {
		mp_streamer_release(t->svc->streamer, t->streams[i], (uint32_t)t->uid);
		free(t->streams[i]);
	}
	for (size_t i = 0; i < t->sopts.n_owner_rules; i++)
		free(t->owners[i]);
	for (size_t i = 0; i < t->sopts.n_wrapper_dsos; i++)
		free(t->wrappers[i]);
	for (size_t i = 0; i < t->sopts.n_wrapper_fns; i++)
		free(t->wrapper_fns[i]);
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
	if (!dead)
		return;
	while (dead) {
		struct target *t = dead;

		dead = t->next;
		pthread_join(t->thread, NULL);
		target_free(t);
	}
	/* The ended sessions' tables and profiles were freed in their
	 * threads' arenas. */
	mp_heap_trim();
}

/* --- requests --- */

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

/* A target's own collector, counted against its requester's limit. */
static int acquire_stream(struct target *t, struct request *q, const char *url)
{
	int r = mp_streamer_acquire(t->svc->streamer, url, (uint32_t)q->uid);
	unsigned limit;

	pthread_mutex_lock(&t->svc->lock);
	limit = t->svc->cfg->stream_per_uid;
	pthread_mutex_unlock(&t->svc->lock);
	if (r == -EDQUOT)
		return fail(q, r,
			    "too many distinct stream collectors for uid %u "
			    "(stream_collectors_per_uid = %u); detach a target streaming elsewhere",
			    (unsigned)q->uid, limit);
	if (r == -ENOSPC)
		return fail(q, r, "no free collector slot (%d per-target collectors at most)",
			    MP_STREAM_MAX_COLLECTORS - MP_STREAM_GLOBAL_SLOTS);
	if (r < 0)
		return fail(q, r, "stream URL '%s': %s", url, strerror(-r));
	return 0;
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

/* What an attach request asks for. */
struct attach_req {
	pid_t pid;
	uint64_t duration_ns, sample_bytes;
	uint32_t mode; /* UINT32_MAX: the configured default */
	uint64_t stacks; /* 0 or 1; UINT64_MAX: the configured default */
	uint32_t tracer; /* enum mp_tracer_path, 0 auto; UINT32_MAX: configured */
	uint64_t max_memory; /* 0: the target's share */
	uint64_t no_default_wrappers; /* 0 or 1; UINT64_MAX: configured */
};

/* The request's repeatable attribution rules: --owner, --wrapper,
 * --wrapper-fn (owner=, wrapper=, wrapper_fn=). */
static const enum mp_opt_id rule_ids[] = { MP_OPT_ID_OWNER, MP_OPT_ID_WRAPPER,
					   MP_OPT_ID_WRAPPER_FN };

/* Every rule of the request is a valid value of its option. */
static int rules_check(struct request *q)
{
	for (size_t i = 0; i < q->msg.n; i++)
		for (size_t k = 0; k < sizeof(rule_ids) / sizeof(rule_ids[0]); k++) {
			const struct mp_option *o = &mp_options_table[rule_ids[k]];
			struct mp_opt_value x;
			char hint[128];

			if (strcmp(q->msg.f[i].key, o->key))
				continue;
			if (!q->msg.f[i].value[0] ||
			    mp_opt_parse(o, MP_OPT_REQUEST, q->msg.f[i].value, &x) < 0) {
				mp_opt_hint(o, MP_OPT_REQUEST, hint, sizeof(hint));
				return fail(q, -EINVAL, "invalid %s '%s' (%s)", o->key,
					    q->msg.f[i].value, hint);
			}
		}
	return 0;
}

/* Field @id of the request (the option table's key, type and bounds);
 * *@ret is left alone when the request does not say. */
static int attach_opt(struct request *q, enum mp_opt_id id, uint64_t *ret)
{
	const struct mp_option *o = &mp_options_table[id];
	const char *v = mp_ctl_get(&q->msg, o->key);
	struct mp_opt_value x;
	char hint[128];

	if (!v)
		return 0;
	if (mp_opt_parse(o, MP_OPT_REQUEST, v, &x) < 0) {
		mp_opt_hint(o, MP_OPT_REQUEST, hint, sizeof(hint));
		return fail(q, -EINVAL, "invalid %s (%s)", o->key, hint);
	}
	*ret = x.u;
	return 0;
}

/* Parses and authorizes an attach request; replies on failure. */
static int attach_parse(struct request *q, struct attach_req *a)
{
	static const enum mp_opt_id ids[] = { MP_OPT_ID_DURATION,
					      MP_OPT_ID_MODE,
					      MP_OPT_ID_SAMPLE_BYTES,
					      MP_OPT_ID_STACKS,
					      MP_OPT_ID_TRACER,
					      MP_OPT_ID_MAX_MEMORY,
					      MP_OPT_ID_NO_DEFAULT_WRAPPERS };
	uint64_t mode = UINT32_MAX, tracer = UINT32_MAX;
	uint64_t *dst[] = { &a->duration_ns, &mode,	     &a->sample_bytes,	     &a->stacks,
			    &tracer,	     &a->max_memory, &a->no_default_wrappers };
	char why[256];
	int r;

	*a = (struct attach_req){ .mode = UINT32_MAX,
				  .stacks = UINT64_MAX,
				  .tracer = UINT32_MAX,
				  .no_default_wrappers = UINT64_MAX };
	r = get_pid(q, &a->pid);
	for (size_t i = 0; r == 0 && i < sizeof(ids) / sizeof(ids[0]); i++)
		r = attach_opt(q, ids[i], dst[i]);
	if (r == 0)
		r = rules_check(q);
	if (r < 0)
		return r;
	a->mode = (uint32_t)mode;
	a->tracer = (uint32_t)tracer;
	r = check_out_fd(q);
	if (r < 0)
		return r;
	r = mp_service_authorize(q->uid, q->gid, a->pid, why, sizeof(why));
	if (r < 0) {
		log_notice("refused attach to pid %d requested by uid %u (pid %d): %s", (int)a->pid,
			   (unsigned)q->uid, (int)q->peer_pid, why);
		return fail(q, r, "not permitted: %s", why);
	}
	return 0;
}

/* A new target for @pid, owning the request's output fd. */
static int target_new(struct request *q, pid_t pid, struct target **ret)
{
	struct target *t;
	char path[64];
	ssize_t n;

	t = calloc(1, sizeof(*t));
	if (!t)
		return fail(q, -ENOMEM, "out of memory");
	pthread_mutex_init(&t->dump_lock, NULL);
	t->svc = q->svc;
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
	*ret = t;
	if (t->ctl.stop_fd < 0 || t->ctl.snapshot_fd < 0)
		return fail(q, -errno, "eventfd: %s", strerror(errno));
	return 0;
}

/* The request's own stream URLs, checked. */
static int target_add_streams(struct request *q, struct target *t)
{
	int r;

	for (size_t i = 0; i < q->msg.n; i++) {
		const char *url = q->msg.f[i].value;

		if (strcmp(q->msg.f[i].key, "stream"))
			continue;
		if (t->n_streams >= MAX_TARGET_STREAMS)
			return fail(q, -E2BIG, "at most %d --stream per target",
				    MAX_TARGET_STREAMS);
		/* The daemon may reach sockets the requester may not: only
		 * root names Unix sockets (configured collectors are root's). */
		if (q->uid != 0 && !strncmp(url, "unix:", 5))
			return fail(q, -EPERM, "only root may stream to a Unix socket ('%s')", url);
		/* Nor may anyone else make the daemon read a file (a token
		 * would go to their collector). */
		if (q->uid != 0 && (strstr(url, "headers=") || strstr(url, "ca=")))
			return fail(q, -EPERM, "only root may name files (headers=, ca=) in '%s'",
				    url);
		r = mp_stream_url_check(url);
		if (r < 0) {
			fail(q, r, "invalid stream URL '%s'%s", url,
			     r == -EPROTONOSUPPORT ? " (this build has no pprof encoder)" : "");
			return r;
		}
		t->streams[t->n_streams] = strdup(url);
		if (!t->streams[t->n_streams])
			return fail(q, -ENOMEM, "out of memory");
		r = acquire_stream(t, q, url);
		if (r < 0) {
			free(t->streams[t->n_streams]);
			t->streams[t->n_streams] = NULL;
			return r;
		}
		t->n_streams++;
	}
	return 0;
}

/* A copy of rule @v in @own, listed in @dst (the session's options). */
static int rule_add(struct request *q, char **own, const char **dst, size_t *n, const char *key,
		    const char *v)
{
	if (*n >= MP_CONFIG_MAX_OWNERS)
		return fail(q, -E2BIG, "at most %u %s rules, the configuration's included",
			    (unsigned)MP_CONFIG_MAX_OWNERS, key);
	own[*n] = strdup(v);
	if (!own[*n])
		return fail(q, -ENOMEM, "out of memory");
	dst[*n] = own[*n];
	(*n)++;
	return 0;
}

/* The target's owner and wrapper rules: the request's first (an owner
 * rule that matches first wins), then the configuration's. */
static int target_rules(struct request *q, struct target *t, const struct mp_config *cfg)
{
	_Static_assert(MP_SESSION_MAX_OWNER_RULES >= MP_CONFIG_MAX_OWNERS &&
			       MP_SESSION_MAX_WRAPPERS >= MP_CONFIG_MAX_OWNERS,
		       "a target's rules fit its session's");
	struct {
		char **own;
		const char **dst;
		size_t *n;
		char *const *cfg;
		size_t n_cfg;
	} kinds[] = {
		{ t->owners, t->sopts.owner_rules, &t->sopts.n_owner_rules, cfg->owners,
		  cfg->n_owners },
		{ t->wrappers, t->sopts.wrapper_dsos, &t->sopts.n_wrapper_dsos, cfg->wrappers,
		  cfg->n_wrappers },
		{ t->wrapper_fns, t->sopts.wrapper_fns, &t->sopts.n_wrapper_fns, cfg->wrapper_fns,
		  cfg->n_wrapper_fns },
	};
	int r = 0;

	for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
		const char *key = mp_options_table[rule_ids[k]].key;

		for (size_t i = 0; r == 0 && i < q->msg.n; i++)
			if (!strcmp(q->msg.f[i].key, key))
				r = rule_add(q, kinds[k].own, kinds[k].dst, kinds[k].n, key,
					     q->msg.f[i].value);
		for (size_t i = 0; r == 0 && i < kinds[k].n_cfg; i++)
			r = rule_add(q, kinds[k].own, kinds[k].dst, kinds[k].n, key,
				     kinds[k].cfg[i]);
	}
	return r;
}

/* Under svc->lock: admission (shutdown, max_targets, one session per
 * pid), then the session settings from the request and the
 * configuration. */
static int target_configure_locked(struct request *q, struct target *t, const struct attach_req *a)
{
	struct service *svc = q->svc;
	struct mp_config *cfg = svc->cfg;
	int r = 0;

	if (svc->stopping)
		return fail(q, -ESHUTDOWN, "the service is shutting down");
	if (svc->n_targets >= cfg->max_targets)
		return fail(q, -EMFILE, "too many targets (max_targets = %u)", cfg->max_targets);
	{
		uint32_t m = a->mode != UINT32_MAX ? a->mode : cfg->mode;
		char why[256];

		t->cost = mp_service_target_cost(m, cfg->bpf_ring_bytes);
		t->ring_bytes = mp_tracer_ring_bytes(m, cfg->bpf_ring_bytes);
		r = mp_svc_budget_check(svc, t->cost, m, why, sizeof(why));
		if (r < 0) {
			log_notice("refused attach to pid %d requested by uid %u: %s", (int)a->pid,
				   (unsigned)q->uid, why);
			return fail(q, r, "not enough memory: %s", why);
		}
	}
	for (struct target *o = svc->targets; o; o = o->next)
		if (o->pid == a->pid && o->state != T_DONE)
			return fail(q, -EBUSY, "pid %d is already being profiled", (int)a->pid);
	t->id = ++svc->next_id;
	t->sopts.pid = a->pid;
	t->sopts.duration_ns = a->duration_ns;
	t->sopts.rss_hz = cfg->rss_hz;
	t->sopts.pss_every = cfg->pss_every;
	t->sopts.bpf_ring_bytes = cfg->bpf_ring_bytes;
	t->sopts.mode = a->mode != UINT32_MAX ? a->mode : cfg->mode;
	t->sopts.sample_bytes = a->sample_bytes ? a->sample_bytes : cfg->sample_bytes;
	t->sopts.stacks = a->stacks != UINT64_MAX ? a->stacks == 1 : cfg->stacks;
	t->sopts.tracer = a->tracer != UINT32_MAX ? a->tracer : cfg->tracer;
	t->sopts.no_inject = mp_service_inject_refusal(q->uid, getenv("MEMPROFD_TEST_YAMA_SCOPE"),
						       t->no_inject, sizeof(t->no_inject));
	t->sopts.stack_depth = cfg->stack_depth;
	/* Limits: the target's share for its tables; a request may ask less */
	t->sopts.max_memory = mp_service_target_tables(svc->budget, cfg->max_memory);
	if (a->max_memory && a->max_memory < t->sopts.max_memory)
		t->sopts.max_memory = a->max_memory;
	t->sopts.max_sites = cfg->max_sites;
	t->sopts.max_stacks = cfg->max_stacks;
	t->ctl.tables_bytes = &t->tables_bytes;
	t->sopts.verbose = svc->o->verbose;
	t->sopts.on_attached = on_attached;
	t->sopts.on_attached_ctx = t;
	t->sopts.ctl = &t->ctl;
	t->ctl.snapshot_period_ns = cfg->stream_interval_ns;
	t->ctl.on_snapshot = on_snapshot;
	t->ctl.want_periodic = want_periodic;
	t->ctl.ctx = t;
	t->sopts.no_default_wrappers = a->no_default_wrappers != UINT64_MAX ?
					       a->no_default_wrappers == 1 :
					       cfg->no_default_wrappers;
	return target_rules(q, t, cfg);
}

/* Under svc->lock: waits (bounded) for the session to attach, replies. */
static int attach_wait_locked(struct request *q, struct target *t)
{
	struct service *svc = q->svc;
	struct timespec ts;
	int r = 0;

	deadline(&ts, ATTACH_TIMEOUT_S);
	while (t->state == T_STARTING)
		if (pthread_cond_timedwait(&svc->cond, &svc->lock, &ts) == ETIMEDOUT)
			break;
	if (t->state == T_RUNNING) {
		ok(q);
		mp_ctl_add(&q->reply, "target", "%" PRIu64, t->id);
		mp_ctl_add(&q->reply, "exe", "%s", t->exe);
		log_info("pid %d (%s): attached for uid %u (target %" PRIu64 ")", (int)t->pid,
			 t->exe, (unsigned)q->uid, t->id);
	} else if (t->state == T_DONE) {
		r = t->result < 0 ? t->result : -ESRCH;
		fail(q, r, "attaching to pid %d failed: %s (see the service log)", (int)t->pid,
		     strerror(-r));
	} else {
		/* Still attaching: the session goes on and can be detached. */
		r = fail(q, -ETIMEDOUT, "attaching to pid %d takes too long", (int)t->pid);
	}
	return r;
}

static int do_attach(struct request *q)
{
	struct service *svc = q->svc;
	struct attach_req a;
	struct target *t = NULL;
	int r;

	r = attach_parse(q, &a);
	if (r < 0)
		return r;
	r = target_new(q, a.pid, &t);
	if (r == 0)
		r = target_add_streams(q, t);
	if (r < 0)
		goto err;
	pthread_mutex_lock(&svc->lock);
	r = target_configure_locked(q, t, &a);
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
	r = attach_wait_locked(q, t);
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
	mp_svc_signal_fd(t->ctl.stop_fd);
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
	mp_svc_signal_fd(t->ctl.snapshot_fd);
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
	heap_trim_later(svc);
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

/* Under svc->lock: the service's memory by part (docs/SERVICE.md,
 * "Memory per target"), in KiB. RssFile is mostly the targets' BPF ring
 * buffers (mapped twice), RssShmem their marker rings; RssAnon is the heap
 * in use, free heap not yet trimmed, and thread stacks. */
static void status_memory(struct service *svc, struct request *q)
{
	struct mp_memstats m;
	uint64_t rings = 0;

	for (struct target *t = svc->targets; t; t = t->next)
		if (t->state != T_DONE)
			rings += t->ring_bytes;
	mp_memstats_read(&m);
	mp_ctl_add(&q->reply, "mem_rss_kib", "%" PRIu64, m.vm_rss >> 10);
	mp_ctl_add(&q->reply, "mem_rss_anon_kib", "%" PRIu64, m.rss_anon >> 10);
	mp_ctl_add(&q->reply, "mem_rss_file_kib", "%" PRIu64, m.rss_file >> 10);
	mp_ctl_add(&q->reply, "mem_rss_shmem_kib", "%" PRIu64, m.rss_shmem >> 10);
	mp_ctl_add(&q->reply, "mem_bpf_rings_kib", "%" PRIu64, rings >> 10);
	mp_ctl_add(&q->reply, "mem_heap_in_use_kib", "%" PRIu64, m.heap_in_use >> 10);
	mp_ctl_add(&q->reply, "mem_heap_mmapped_kib", "%" PRIu64, m.heap_mmapped >> 10);
	mp_ctl_add(&q->reply, "mem_heap_free_kib", "%" PRIu64, m.heap_free >> 10);
	mp_ctl_add(&q->reply, "mem_stream_queued_kib", "%" PRIu64,
		   mp_streamer_queued_total(svc->streamer) >> 10);
	mp_ctl_add(&q->reply, "mem_heap_trims", "%" PRIu64, m.trims);
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
	mp_ctl_add(&q->reply, "memory_budget_mib", "%" PRIu64, svc->budget >> 20);
	mp_ctl_add(&q->reply, "budget_detaches", "%" PRIu64, svc->budget_detaches);
	mp_ctl_add(&q->reply, "connections", "%u", svc->n_live);
	mp_ctl_add(&q->reply, "max_connections", "%u", svc->cfg->max_conns);
	mp_ctl_add(&q->reply, "max_connections_per_uid", "%u", svc->cfg->max_conns_per_uid);
	mp_ctl_add(&q->reply, "connections_dropped", "%" PRIu64, svc->conns_dropped);
	mp_ctl_add(&q->reply, "connections_refused", "%" PRIu64, svc->conns_refused);
	status_memory(svc, q);
	pthread_mutex_unlock(&svc->lock);
	mp_streamer_describe(svc->streamer, describe_line, q);
	return 0;
}

static void dispatch(struct request *q)
{
	const char *cmd = mp_ctl_get(&q->msg, "cmd");
	char why[160];
	int r;

	r = mp_ctl_check_request(&q->msg, why, sizeof(why));
	if (r == -EOPNOTSUPP)
		fail(q, r, "unknown command");
	else if (r < 0)
		fail(q, r, "malformed request: %s", why);
	else if (!strcmp(cmd, "attach"))
		do_attach(q);
	else if (!strcmp(cmd, "detach"))
		do_detach(q);
	else if (!strcmp(cmd, "dump"))
		do_dump(q);
	else if (!strcmp(cmd, "list"))
		do_list(q);
	else
		do_status(q);
}

void *mp_svc_conn_main(void *arg)
{
	struct request *q = arg;
	struct service *svc = q->svc;
	bool dropped;
	int r;

	r = mp_ctl_recv(q->sock, &q->msg, &q->fd);
	pthread_mutex_lock(&svc->lock);
	dropped = q->dropped;
	q->busy = !dropped;
	pthread_mutex_unlock(&svc->lock);
	if (dropped) {
		fail(q, -EAGAIN,
		     "connection dropped: too many control connections (the idlest goes "
		     "first); send the request right after connecting");
	} else if (r < 0) {
		if (q->msg.why[0])
			log_debug("control request from pid %d uid %u refused: %s",
				  (int)q->peer_pid, (unsigned)q->uid, q->msg.why);
		else
			log_debug_errno(r, "control request from pid %d uid %u dropped: %m",
					(int)q->peer_pid, (unsigned)q->uid);
		/* A peer that closed without a byte gets no answer. */
		if (!q->msg.why[0])
			goto out;
		fail(q, r, "malformed request: %s", q->msg.why);
	} else {
		dispatch(q);
	}
	if (mp_ctl_build_end(&q->reply) < 0)
		fail(q, -E2BIG, "reply too long");
	r = mp_ctl_send(q->sock, q->reply.buf, q->reply.len, -1);
	if (r < 0)
		log_debug_errno(r, "control reply to pid %d: %m", (int)q->peer_pid);
out:
	if (q->fd >= 0)
		close(q->fd);
	mp_svc_conn_remove(svc, q);
	close(q->sock);
	free(q);
	return NULL;
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
	mp_streamer_set_limits(svc->streamer, c->stream_per_uid, c->stream_total_bytes);
	pthread_mutex_lock(&svc->lock);
	mp_config_free(svc->cfg);
	svc->cfg = c;
	mp_svc_budget_update(svc);
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
	    /* Any local user may ask; authorization is per request. Never
	     * through a symlink swapped in since the bind. */
	    fchmodat(AT_FDCWD, path, 0666, AT_SYMLINK_NOFOLLOW) < 0 || listen(s, 128) < 0) {
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
			mp_svc_signal_fd(t->ctl.stop_fd);
	while (svc->n_targets)
		pthread_cond_wait(&svc->cond, &svc->lock);
	/* Connections still waiting for a request end now; the others
	 * within their I/O timeouts. */
	for (struct request *q = svc->conns; q; q = q->next)
		if (!q->busy)
			shutdown(q->sock, SHUT_RD);
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

/* Every thread inherits the mask set here: signals go to the signalfd. */
static int service_signals(int *ret_sfd)
{
	sigset_t mask;

	sigemptyset(&mask);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGHUP);
	sigaddset(&mask, SIGPIPE);
	pthread_sigmask(SIG_BLOCK, &mask, NULL);
	*ret_sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
	return *ret_sfd < 0 ? -errno : 0;
}

/* Streamer, configuration, control socket; READY=1 once listening. */
static int service_start(struct service *svc, int *ret_lfd)
{
	int r;

	r = mp_streamer_new(64ull << 20, &svc->streamer);
	if (r < 0)
		return log_error_errno(r, "streamer: %m");
	r = load_config(svc, true);
	if (r < 0)
		return r;
	r = open_control(svc->control_path, ret_lfd);
	if (r == -EADDRINUSE)
		return log_error_errno(r, "control socket %s: another memprofd is running",
				       svc->control_path);
	if (r < 0)
		return log_error_errno(r, "control socket %s: %m", svc->control_path);
	log_info("listening on %s", svc->control_path);
	sd_notifyf(0, "READY=1\nSTATUS=listening on %s\nMAINPID=%d", svc->control_path,
		   (int)getpid());
	return 0;
}

/* Drains the signalfd: SIGHUP reloads; returns false on SIGTERM/SIGINT. */
static bool service_on_signals(struct service *svc, int sfd)
{
	struct signalfd_siginfo si;
	bool running = true;

	while (read(sfd, &si, sizeof(si)) == sizeof(si)) {
		if (si.ssi_signo == SIGHUP) {
			sd_notify(0, "RELOADING=1");
			log_info("SIGHUP: reloading %s", svc->config_path);
			load_config(svc, false);
			sd_notify(0, "READY=1");
		} else if (si.ssi_signo == SIGTERM || si.ssi_signo == SIGINT) {
			running = false;
		}
	}
	return running;
}

/* Until SIGTERM/SIGINT: control connections, ended targets, signals. */
static int service_loop(struct service *svc, int lfd, int sfd)
{
	bool running = true;

	while (running) {
		struct pollfd pf[3] = {
			{ .fd = lfd, .events = POLLIN },
			{ .fd = sfd, .events = POLLIN },
			{ .fd = svc->reap_fd, .events = POLLIN },
		};

		uint64_t now;

		if (poll(pf, 3, BUDGET_CHECK_MS) < 0) {
			if (errno == EINTR)
				continue;
			return log_error_errno(-errno, "poll: %m");
		}
		now = mp_now_ns();
		if (now - svc->budget_checked_ns >= BUDGET_CHECK_MS * 1000000ull) {
			svc->budget_checked_ns = now;
			mp_svc_budget_enforce(svc);
		}
		if (pf[2].revents & POLLIN) {
			uint64_t v;

			if (read(svc->reap_fd, &v, sizeof(v)) == sizeof(v))
				reap(svc);
		}
		if (pf[1].revents & POLLIN)
			running = service_on_signals(svc, sfd);
		if (running && (pf[0].revents & POLLIN))
			mp_svc_accept_one(svc, lfd);
	}
	return 0;
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
	pthread_condattr_t ca;
	int lfd = -1, sfd = -1, r;

	pthread_mutex_init(&svc.lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&svc.cond, &ca);
	pthread_condattr_destroy(&ca);
	r = service_signals(&sfd);
	svc.reap_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (r < 0 || svc.reap_fd < 0) {
		r = log_error_errno(r < 0 ? r : -errno, "signalfd/eventfd: %m");
		goto out;
	}
	svc.cgroup_max = mp_svc_cgroup_memory_max();
	if (mp_heap_setup() < 0)
		log_warning("the allocator refused a fixed mmap threshold: freed profile copies "
			    "may stay resident between trims");
	r = service_start(&svc, &lfd);
	if (r < 0)
		goto out;
	r = service_loop(&svc, lfd, sfd);
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
