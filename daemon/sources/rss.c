// SPDX-License-Identifier: MIT
#include "rss.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "util.h"

/* Large enough for status with the usual handful of supplementary groups;
 * grown once (never per sample) if a target has thousands. */
#define READ_BUF_INITIAL 4096
#define READ_BUF_MAX (1u << 20)

/*
 * The timed Pss reads on a thread of their own (the default): a walk of a
 * big target's page tables takes milliseconds (8 ms for 440 MB of RSS
 * here, growing with it), which the thread that samples, the session's
 * event loop, would otherwise spend away from the rings it drains. One
 * read at a time, each on a thread made for it (no thread lives between
 * reads: a service with hundreds of targets keeps its task count), of a
 * dup of smaps_fd that the thread closes; the result goes out with the
 * first sample after the thread is done, which joins it.
 */
struct pss_job {
	pthread_t th;
	bool running; /* a thread to join (the sampling thread's field) */
	bool done; /* atomic: the thread has set the fields below */
	int fd;
	int err;
	uint64_t pss, cost_ns;
	char *buf; /* one read's at a time */
	size_t buf_size;
};

struct mp_rss_sampler {
	pid_t pid;
	int status_fd;
	int thread_fd; /* status of another thread once the leader has exited, or -1 */
	int smaps_fd; /* -1 when Pss is never read */
	int timer_fd;
	unsigned pss_every_n;
	unsigned pss_cost_ratio; /* mp_rss_sampler_set_pss_cost_ratio() */
	unsigned tick;
	uint64_t pss_not_before; /* CLOCK_MONOTONIC ns */
	uint64_t missed, pss_deferred;
	char *buf;
	size_t buf_size;
	bool async_pss;
	struct pss_job job;
};

static int open_live_thread(struct mp_rss_sampler *s);

/* Parses " 1234 kB" (the rest of a line after "Key:") into bytes. */
static int parse_kb(const char *p, const char *end, uint64_t *ret_bytes)
{
	uint64_t v = 0;
	const char *digits;

	while (p < end && (*p == ' ' || *p == '\t'))
		p++;
	digits = p;
	while (p < end && *p >= '0' && *p <= '9') {
		unsigned d = (unsigned)(*p - '0');

		if (v > (UINT64_MAX - d) / 10)
			return -ERANGE;
		v = v * 10 + d;
		p++;
	}
	if (p == digits)
		return -EBADMSG;
	while (p < end && (*p == ' ' || *p == '\t'))
		p++;
	if (end - p < 2 || p[0] != 'k' || p[1] != 'B')
		return -EBADMSG;
	p += 2;
	while (p < end && (*p == ' ' || *p == '\t'))
		p++;
	if (p != end)
		return -EBADMSG;
	if (v > UINT64_MAX / 1024)
		return -ERANGE;
	*ret_bytes = v * 1024;
	return 0;
}

struct key {
	const char *name; /* with the colon, so "Pss:" never matches "Pss_Anon:" */
	size_t len;
	size_t offset; /* into struct mp_rss_sample */
};

#define KEY(s, field)                                                   \
	{                                                               \
		s, sizeof(s) - 1, offsetof(struct mp_rss_sample, field) \
	}

static const struct key status_keys[] = {
	KEY("VmRSS:", vm_rss),	     KEY("RssAnon:", rss_anon), KEY("RssFile:", rss_file),
	KEY("RssShmem:", rss_shmem), KEY("VmHWM:", vm_hwm),	KEY("VmSwap:", vm_swap),
};

static const struct key smaps_keys[] = {
	KEY("Pss:", pss),
};

/*
 * Matches keys only at the start of a line. The kernel escapes control
 * characters in the Name: line, so a hostile process name cannot start a line
 * of its own; should one ever get through, the genuine line that follows it
 * makes the key repeated, which is rejected rather than silently believed.
 */
static int parse_lines(const char *buf, size_t len, const struct key *keys, size_t n_keys,
		       struct mp_rss_sample *s)
{
	const char *p = buf, *end = buf + len;
	unsigned seen = 0;

	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		const char *eol = nl ? nl : end;
		size_t line_len = (size_t)(eol - p);

		for (size_t i = 0; i < n_keys; i++) {
			uint64_t v;
			int r;

			if (line_len < keys[i].len || memcmp(p, keys[i].name, keys[i].len) != 0)
				continue;
			if (seen & (1u << i))
				return -EBADMSG;
			seen |= 1u << i;
			r = parse_kb(p + keys[i].len, eol, &v);
			if (r < 0)
				return r;
			memcpy((char *)s + keys[i].offset, &v, sizeof(v));
			break;
		}
		p = nl ? nl + 1 : end;
	}
	return 0;
}

int mp_rss_parse_status(const char *buf, size_t len, struct mp_rss_sample *ret)
{
	struct mp_rss_sample s = {
		.ts_ns = 0,
		.vm_rss = UINT64_MAX,
		.rss_anon = UINT64_MAX,
		.rss_file = UINT64_MAX,
		.rss_shmem = UINT64_MAX,
		.vm_hwm = UINT64_MAX,
		.vm_swap = UINT64_MAX,
		.pss = UINT64_MAX,
	};
	int r;

	if (!buf && len)
		return -EINVAL;
	r = parse_lines(buf, len, status_keys, sizeof(status_keys) / sizeof(status_keys[0]), &s);
	if (r < 0)
		return r;
	*ret = s;
	return 0;
}

int mp_rss_parse_smaps_rollup(const char *buf, size_t len, uint64_t *ret_pss)
{
	struct mp_rss_sample s = { .pss = UINT64_MAX };
	int r;

	if (!buf && len)
		return -EINVAL;
	r = parse_lines(buf, len, smaps_keys, 1, &s);
	if (r < 0)
		return r;
	if (s.pss == UINT64_MAX)
		return -ENODATA;
	*ret_pss = s.pss;
	return 0;
}

static int open_proc(pid_t pid, const char *name, int *ret_fd)
{
	char path[64];
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, name);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? -ESRCH : -errno;
	*ret_fd = fd;
	return 0;
}

/* Waits for the read in flight, if any, and drops its result. */
static void pss_job_stop(struct pss_job *j)
{
	if (!j->running)
		return;
	pthread_join(j->th, NULL);
	j->running = false;
	__atomic_store_n(&j->done, false, __ATOMIC_RELAXED);
}

void mp_rss_sampler_free(struct mp_rss_sampler *s)
{
	if (!s)
		return;
	pss_job_stop(&s->job);
	free(s->job.buf);
	if (s->status_fd >= 0)
		close(s->status_fd);
	if (s->thread_fd >= 0)
		close(s->thread_fd);
	if (s->smaps_fd >= 0)
		close(s->smaps_fd);
	if (s->timer_fd >= 0)
		close(s->timer_fd);
	free(s->buf);
	free(s);
}

int mp_rss_sampler_new(pid_t pid, unsigned hz, unsigned pss_every_n, struct mp_rss_sampler **ret)
{
	struct mp_rss_sampler *s;
	uint64_t period_ns;
	int r;

	if (pid <= 0 || hz == 0 || hz > MP_RSS_MAX_HZ || !ret)
		return -EINVAL;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->pid = pid;
	s->status_fd = s->thread_fd = s->smaps_fd = s->timer_fd = s->job.fd = -1;
	s->async_pss = true;
	s->pss_every_n = pss_every_n;
	s->pss_cost_ratio = MP_RSS_PSS_COST_RATIO;
	s->buf_size = READ_BUF_INITIAL;
	s->buf = malloc(s->buf_size);
	if (!s->buf) {
		r = -ENOMEM;
		goto fail;
	}
	/* Opened once: the fds pin the target's struct pid, so a recycled pid
	 * can never be sampled by mistake, and sampling costs no open(). */
	r = open_proc(pid, "status", &s->status_fd);
	if (r < 0)
		goto fail;
	if (pss_every_n) {
		r = open_proc(pid, "smaps_rollup", &s->smaps_fd);
		if (r == -ESRCH)
			r = open_live_thread(s);
		if (r < 0)
			goto fail;
	}
	s->timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	if (s->timer_fd < 0) {
		r = -errno;
		goto fail;
	}
	period_ns = 1000000000u / hz;
	r = mp_timer_arm(s->timer_fd, period_ns, period_ns);
	if (r < 0)
		goto fail;
	*ret = s;
	return 0;
fail:
	mp_rss_sampler_free(s);
	return r;
}

int mp_rss_sampler_set_period(struct mp_rss_sampler *s, uint64_t period_ns)
{
	return s ? mp_timer_arm(s->timer_fd, period_ns, period_ns) : -EINVAL;
}

int mp_rss_sampler_fd(const struct mp_rss_sampler *s)
{
	return s ? s->timer_fd : -EINVAL;
}

uint64_t mp_rss_sampler_missed(const struct mp_rss_sampler *s)
{
	return s ? s->missed : 0;
}

/* One pread at offset 0 regenerates the whole seq_file; reading it in pieces
 * would splice two different snapshots, so the buffer must hold all of it. */
static int read_whole_into(int fd, char **buf, size_t *size, size_t *ret_len)
{
	for (;;) {
		ssize_t n = *buf ? pread(fd, *buf, *size, 0) : 0;

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (*buf && (size_t)n < *size) {
			*ret_len = (size_t)n;
			return 0;
		}
		if (*buf && *size >= READ_BUF_MAX)
			return -EFBIG;
		size_t nsize = *buf ? *size * 2 : READ_BUF_INITIAL;
		char *nb = realloc(*buf, nsize);
		if (!nb)
			return -ENOMEM;
		*buf = nb;
		*size = nsize;
	}
}

static int read_whole(struct mp_rss_sampler *s, int fd, size_t *ret_len)
{
	return read_whole_into(fd, &s->buf, &s->buf_size, ret_len);
}

/* "Threads:" of a status text; 0 when absent or malformed. */
static unsigned long status_threads(const char *buf, size_t len)
{
	static const char key[] = "\nThreads:";
	const char *end = buf + len;

	for (const char *p = buf; p && p < end; p = memchr(p + 1, '\n', (size_t)(end - p - 1))) {
		unsigned long n = 0;
		const char *q;

		if ((size_t)(end - p) < sizeof(key) - 1 || memcmp(p, key, sizeof(key) - 1) != 0)
			continue;
		for (q = p + sizeof(key) - 1; q < end && (*q == ' ' || *q == '\t'); q++)
			;
		for (; q < end && *q >= '0' && *q <= '9' && n < 1000000000ul; q++)
			n = n * 10 + (unsigned long)(*q - '0');
		return n;
	}
	return 0;
}

/*
 * The leader's status loses its Vm lines as soon as the main thread exits
 * (pthread_exit() from main), and its smaps_rollup can no longer be opened,
 * although the other threads still run in the same mm. Their files report
 * the same memory: find a live thread and keep its fds. Opens and
 * allocates, but only when the leader has gone.
 */
static int open_live_thread(struct mp_rss_sampler *s)
{
	char path[80];
	struct dirent *de;
	DIR *dir;
	int r = -ESRCH;

	snprintf(path, sizeof(path), "/proc/%d/task", (int)s->pid);
	dir = opendir(path);
	if (!dir)
		return errno == ENOENT ? -ESRCH : -errno;
	while (r < 0 && (de = readdir(dir))) {
		struct mp_rss_sample sample;
		char *end;
		long tid = strtol(de->d_name, &end, 10);
		size_t len = 0;
		int fd, smaps_fd = -1;

		if (*end || tid <= 0 || tid == s->pid)
			continue;
		snprintf(path, sizeof(path), "/proc/%d/task/%ld/status", (int)s->pid, tid);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			continue;
		if (read_whole(s, fd, &len) < 0 || mp_rss_parse_status(s->buf, len, &sample) < 0 ||
		    sample.vm_rss == UINT64_MAX) {
			close(fd);
			continue;
		}
		if (s->pss_every_n) {
			snprintf(path, sizeof(path), "/proc/%d/task/%ld/smaps_rollup", (int)s->pid,
				 tid);
			smaps_fd = open(path, O_RDONLY | O_CLOEXEC);
			if (smaps_fd < 0) {
				close(fd);
				continue;
			}
			if (s->smaps_fd >= 0)
				close(s->smaps_fd);
			s->smaps_fd = smaps_fd;
		}
		if (s->thread_fd >= 0)
			close(s->thread_fd);
		s->thread_fd = fd;
		r = 0;
	}
	closedir(dir);
	return r;
}

/* Reads and parses the status of the process into @ret (ts_ns set). */
static int read_status(struct mp_rss_sampler *s, struct mp_rss_sample *ret)
{
	for (int attempt = 0; attempt < 3; attempt++) {
		int fd = s->thread_fd >= 0 ? s->thread_fd : s->status_fd;
		uint64_t t0, t1;
		size_t len = 0;
		int r;

		t0 = mp_now_ns();
		r = read_whole(s, fd, &len);
		t1 = mp_now_ns();
		if (r == 0)
			r = mp_rss_parse_status(s->buf, len, ret);
		if (r == 0 && ret->vm_rss != UINT64_MAX) {
			ret->ts_ns = t0 + (t1 - t0) / 2;
			return 0;
		}
		if (fd == s->thread_fd) {
			/* that thread is gone too: start over from the leader */
			close(s->thread_fd);
			s->thread_fd = -1;
			continue;
		}
		if (r < 0)
			return r;
		/* A zombie still has a status file, but no mm and so no Vm lines;
		 * a leader that exited before its threads shows Threads > 1. */
		if (status_threads(s->buf, len) <= 1)
			return -ESRCH;
		r = open_live_thread(s);
		if (r < 0)
			return r;
	}
	return -ESRCH;
}

int mp_rss_sampler_read(struct mp_rss_sampler *s, bool with_pss, struct mp_rss_sample *ret)
{
	struct mp_rss_sample sample;
	uint64_t pss;
	size_t len = 0;
	int r;

	if (!s || !ret)
		return -EINVAL;
	r = read_status(s, &sample);
	if (r < 0)
		return r;
	for (int attempt = 0; with_pss && s->smaps_fd >= 0; attempt++) {
		r = read_whole(s, s->smaps_fd, &len);
		if (r == 0)
			r = mp_rss_parse_smaps_rollup(s->buf, len, &pss);
		if (r == 0) {
			sample.pss = pss;
			break;
		}
		if (r != -ESRCH && r != -ENODATA)
			return r;
		/* The status was just read, so the process lives: the thread
		 * whose smaps_rollup we hold has exited. */
		if (attempt > 0 || open_live_thread(s) < 0)
			return -ESRCH;
	}
	*ret = sample;
	return 0;
}

void (*mp_rss_pss_read_hook)(void);

static void *pss_main(void *arg)
{
	struct pss_job *j = arg;
	uint64_t a, b, pss = UINT64_MAX;
	size_t len = 0;
	int r;

	if (mp_rss_pss_read_hook)
		mp_rss_pss_read_hook();
	a = mp_now_ns();
	r = read_whole_into(j->fd, &j->buf, &j->buf_size, &len);
	if (r == 0)
		r = mp_rss_parse_smaps_rollup(j->buf, len, &pss);
	b = mp_now_ns();
	close(j->fd);
	j->fd = -1;
	j->err = r;
	j->pss = pss;
	j->cost_ns = b - a;
	__atomic_store_n(&j->done, true, __ATOMIC_RELEASE);
	return NULL;
}

/* The result of the read that ended since the last sample, if any, into
 * @ret; the next read is not asked for before MP_RSS_PSS_COST_RATIO times
 * its cost has passed. */
static void pss_collect(struct mp_rss_sampler *s, struct mp_rss_sample *ret)
{
	struct pss_job *j = &s->job;

	if (!j->running || !__atomic_load_n(&j->done, __ATOMIC_ACQUIRE))
		return;
	pss_job_stop(j);
	if (j->err == 0)
		ret->pss = j->pss;
	if (s->pss_cost_ratio)
		s->pss_not_before = mp_now_ns() + j->cost_ns * s->pss_cost_ratio;
	/* the status was just read, so the process lives: the thread whose
	 * smaps_rollup we hold has exited */
	if (j->err == -ESRCH || j->err == -ENODATA)
		open_live_thread(s);
}

/* Starts a read on a thread of its own; false when none can be started
 * now (one in flight, the bound, no fd, no thread). */
static bool pss_request(struct mp_rss_sampler *s)
{
	struct pss_job *j = &s->job;
	pthread_attr_t attr;
	sigset_t all, old;
	int r;

	if (j->running || s->smaps_fd < 0 || (s->pss_cost_ratio && mp_now_ns() < s->pss_not_before))
		return false;
	j->fd = fcntl(s->smaps_fd, F_DUPFD_CLOEXEC, 0);
	if (j->fd < 0)
		return false;
	if (pthread_attr_init(&attr) != 0) {
		close(j->fd);
		j->fd = -1;
		return false;
	}
	/* a few frames; a sanitizer's own need included */
	pthread_attr_setstacksize(&attr, 256 << 10);
	/* signals stay the sampling thread's business */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	r = pthread_create(&j->th, &attr, pss_main, j);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	pthread_attr_destroy(&attr);
	if (r != 0) {
		close(j->fd);
		j->fd = -1;
		return false;
	}
	j->running = true;
	return true;
}

void mp_rss_sampler_set_async_pss(struct mp_rss_sampler *s, bool async)
{
	if (!async)
		pss_job_stop(&s->job);
	s->async_pss = async;
}

int mp_rss_sampler_sample(struct mp_rss_sampler *s, struct mp_rss_sample *ret)
{
	uint64_t expirations = 0;
	bool with_pss;

	if (!s || !ret)
		return -EINVAL;
	if (read(s->timer_fd, &expirations, sizeof(expirations)) < 0 && errno != EAGAIN &&
	    errno != EINTR)
		return -errno;
	if (expirations > 1)
		s->missed += expirations - 1;
	with_pss = s->pss_every_n && s->tick % s->pss_every_n == 0;
	s->tick++;
	if (s->async_pss) {
		int r = mp_rss_sampler_read(s, false, ret);

		if (r < 0)
			return r;
		pss_collect(s, ret);
		if (with_pss && !pss_request(s))
			s->pss_deferred++;
		return 0;
	}
	if (with_pss && s->pss_cost_ratio) {
		uint64_t a = mp_now_ns(), b;
		int r;

		if (a < s->pss_not_before) {
			s->pss_deferred++;
			return mp_rss_sampler_read(s, false, ret);
		}
		r = mp_rss_sampler_read(s, true, ret);
		b = mp_now_ns();
		/* the read's cost, status included: an upper bound on the
		 * walk of the target's page tables */
		s->pss_not_before = b + (b - a) * s->pss_cost_ratio;
		return r;
	}
	return mp_rss_sampler_read(s, with_pss, ret);
}

void mp_rss_sampler_set_pss_cost_ratio(struct mp_rss_sampler *s, unsigned ratio)
{
	s->pss_cost_ratio = ratio;
}

uint64_t mp_rss_sampler_pss_deferred(const struct mp_rss_sampler *s)
{
	return s ? s->pss_deferred : 0;
}
