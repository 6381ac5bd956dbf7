// SPDX-License-Identifier: MIT
/*
 * Integration tests: the real tracer (BPF, uprobes) against the scripted
 * fixture. Events are filtered to those whose caller lies in the fixture
 * executable (libc and ld.so allocate for themselves, e.g. thread TLS) and
 * fed to a live table whose whole statistics and live set are compared.
 */
#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../common/helpers.h"
#include "live.h"
#include "procmaps.h"
#include "rss_sample.h"
#include "session.h"
#include "tracer.h"

#define MAX_BLOCKS 64

struct blk {
	uint64_t addr, size;
	uint32_t fn;
};

struct events {
	struct mp_raw_event *ev;
	size_t n, cap;
};

struct fixture {
	pid_t pid; /* the child we forked */
	pid_t tpid; /* the traced process (reported by the fixture) */
	int to, from;
	char buf[8192];
	size_t len;
};

struct result {
	struct mp_live_stats st;
	struct blk live[MAX_BLOCKS], expected[MAX_BLOCKS];
	size_t n_live, n_expected;
	size_t n_exec, n_exit;
	size_t n_events; /* everything delivered, EXIT included */
	uint64_t drops, drops_kind[MP_DROP_KINDS];
	/* rss_stat, member ANON: first, highest, last value; events from
	 * threads of other processes */
	size_t n_rss, n_rss_foreign;
	int64_t rss_first, rss_max, rss_last;
	pid_t tpid;
	struct mp_probe_info probes[MP_FN_BUILTIN_COUNT + 4];
	char probe_paths[MP_FN_BUILTIN_COUNT + 4][PATH_MAX];
	size_t n_probes;
};

static int collect(void *ctx, const struct mp_raw_event *ev)
{
	struct events *e = ctx;

	if (e->n == e->cap) {
		e->cap = e->cap ? e->cap * 2 : 4096;
		e->ev = realloc(e->ev, e->cap * sizeof(*e->ev));
		cr_assert(e->ev);
	}
	e->ev[e->n++] = *ev;
	return 0;
}

static void fx_start(struct fixture *f, char *const argv[])
{
	int in[2], out[2];

	cr_assert_eq(pipe2(in, O_CLOEXEC), 0);
	cr_assert_eq(pipe2(out, O_CLOEXEC), 0);
	f->pid = fork();
	cr_assert_geq(f->pid, 0);
	if (f->pid == 0) {
		dup2(in[0], 0);
		dup2(out[1], 1);
		execvp(argv[0], argv);
		_exit(127);
	}
	close(in[0]);
	close(out[1]);
	f->to = in[1];
	f->from = out[0];
	f->len = 0;
}

/* Next line from the fixture (10 s timeout); NULL on EOF. */
static char *fx_line(struct fixture *f, char *line, size_t size)
{
	for (;;) {
		char *nl = memchr(f->buf, '\n', f->len);
		struct pollfd p = { .fd = f->from, .events = POLLIN };
		ssize_t n;

		if (nl) {
			size_t l = (size_t)(nl - f->buf);

			cr_assert_lt(l, size);
			memcpy(line, f->buf, l);
			line[l] = '\0';
			memmove(f->buf, nl + 1, f->len - l - 1);
			f->len -= l + 1;
			return line;
		}
		cr_assert_eq(poll(&p, 1, 10000), 1, "fixture timed out");
		n = read(f->from, f->buf + f->len, sizeof(f->buf) - f->len);
		cr_assert_geq(n, 0);
		if (n == 0)
			return NULL;
		f->len += (size_t)n;
	}
}

static void fx_expect_ready(struct fixture *f)
{
	char line[256];
	int pid;

	cr_assert(fx_line(f, line, sizeof(line)), "fixture died");
	cr_assert_eq(sscanf(line, "ready %d", &pid), 1, "got '%s'", line);
	f->tpid = pid;
}

static void fx_go(struct fixture *f)
{
	cr_assert_eq(write(f->to, "g", 1), 1);
}

static uint32_t fn_by_name(const char *name)
{
	if (!strncmp(name, "custom", 6))
		return MP_FN_CUSTOM + (uint32_t)atoi(name + 6);
	for (uint32_t fn = 0; fn < MP_FN_BUILTIN_COUNT; fn++)
		if (!strcmp(mp_alloc_fn_name(fn), name))
			return fn;
	cr_assert_fail("unknown function %s", name);
	return 0;
}

/* Reads "live ..." lines up to "done" into @r->expected. */
static void fx_read_done(struct fixture *f, struct result *r)
{
	char line[256], name[64];

	for (;;) {
		unsigned long long addr, size;

		cr_assert(fx_line(f, line, sizeof(line)), "fixture died");
		if (!strcmp(line, "done"))
			return;
		cr_assert_eq(sscanf(line, "live %63s %llx %llu", name, &addr, &size), 3, "got '%s'",
			     line);
		cr_assert_lt(r->n_expected, MAX_BLOCKS);
		r->expected[r->n_expected++] =
			(struct blk){ .addr = addr, .size = size, .fn = fn_by_name(name) };
	}
}

/* Executable mappings of the target's executable: [lo, hi) ranges. */
struct exe_ranges {
	uint64_t lo[16], hi[16];
	size_t n;
};

static void exe_ranges(pid_t pid, struct exe_ranges *ret)
{
	struct mp_procmaps *pm;
	char link[64], exe[PATH_MAX];
	ssize_t n;

	snprintf(link, sizeof(link), "/proc/%d/exe", (int)pid);
	n = readlink(link, exe, sizeof(exe) - 1);
	cr_assert_gt(n, 0);
	exe[n] = '\0';
	cr_assert_eq(mp_procmaps_read(pid, &pm), 0);
	ret->n = 0;
	for (size_t i = 0; i < pm->n; i++) {
		if (strcmp(pm->maps[i].path, exe) || !(pm->maps[i].perms & MP_MAP_X) ||
		    ret->n == 16)
			continue;
		ret->lo[ret->n] = pm->maps[i].start;
		ret->hi[ret->n++] = pm->maps[i].end;
	}
	mp_procmaps_free(pm);
	cr_assert_gt(ret->n, 0, "no executable mapping of %s", exe);
}

static bool in_exe(const struct exe_ranges *x, uint64_t a)
{
	for (size_t i = 0; i < x->n; i++)
		if (a >= x->lo[i] && a < x->hi[i])
			return true;
	return false;
}

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static void pump(struct mp_tracer *t, struct events *ev, int timeout_ms)
{
	struct epoll_event ee;
	int r;

	epoll_wait(mp_tracer_fd(t), &ee, 1, timeout_ms);
	r = mp_tracer_consume(t, collect, ev);
	cr_assert_geq(r, 0, "consume: %s", strerror(-r));
}

static int live_collect(void *ctx, const struct mp_live_block *b)
{
	struct result *r = ctx;

	cr_assert_lt(r->n_live, MAX_BLOCKS);
	r->live[r->n_live++] = (struct blk){ .addr = b->addr, .size = b->size, .fn = b->fn };
	return 0;
}

static int blk_cmp(const void *a, const void *b)
{
	const struct blk *x = a, *y = b;

	return x->addr < y->addr ? -1 : x->addr > y->addr;
}

static void apply_range(struct mp_live *l, const struct events *ev, size_t from, size_t to,
			const struct exe_ranges *x, struct result *r)
{
	for (size_t i = from; i < to; i++) {
		const struct mp_raw_event *e = &ev->ev[i];

		if (e->type == MP_RAW_EXEC)
			r->n_exec++;
		if (e->type == MP_RAW_EXIT)
			r->n_exit++;
		if (e->type == MP_RAW_RSS_STAT) {
			if (e->tid && e->pid != (uint32_t)r->tpid)
				r->n_rss_foreign++;
			if (e->fn != MP_RSS_ANON)
				continue;
			if (!r->n_rss++)
				r->rss_first = r->rss_max = (int64_t)e->size;
			if ((int64_t)e->size > r->rss_max)
				r->rss_max = (int64_t)e->size;
			r->rss_last = (int64_t)e->size;
			continue;
		}
		if ((e->type == MP_RAW_ALLOC || e->type == MP_RAW_FREE ||
		     e->type == MP_RAW_REALLOC) &&
		    !in_exe(x, e->caller))
			continue;
		cr_assert_eq(mp_live_apply(l, e, NULL, NULL), 0);
	}
}

/*
 * Run the fixture (@argv) under the tracer: attach after "ready", go, wait
 * for "done", let it exit, and fill @r from the events.
 */
static void run(char *const argv[], bool exec_mode, const struct mp_tracer_opts *base,
		struct result *r)
{
	struct mp_tracer_opts o = base ? *base : (struct mp_tracer_opts){ 0 };
	struct fixture f;
	struct events ev = { 0 };
	struct exe_ranges before, after;
	struct mp_tracer *t;
	struct mp_live *l;
	const struct mp_probe_info *pi;
	size_t exec_at = 0;
	int status, rc;

	memset(r, 0, sizeof(*r));
	fx_start(&f, argv);
	fx_expect_ready(&f);
	exe_ranges(f.tpid, &before);
	o.pid = f.tpid;
	r->tpid = f.tpid;
	rc = mp_tracer_new(&o, &t);
	cr_assert_eq(rc, 0, "mp_tracer_new: %s", strerror(-rc));
	r->n_probes = mp_tracer_probes(t, &pi);
	cr_assert_leq(r->n_probes, sizeof(r->probes) / sizeof(r->probes[0]));
	for (size_t i = 0; i < r->n_probes; i++) {
		r->probes[i] = pi[i];
		snprintf(r->probe_paths[i], PATH_MAX, "%s", pi[i].path);
		r->probes[i].path = r->probe_paths[i];
		r->probes[i].name = pi[i].fn >= MP_FN_CUSTOM ?
					    o.extra[pi[i].fn - MP_FN_CUSTOM].name :
					    mp_alloc_fn_name(pi[i].fn);
		cr_assert_str_eq(r->probes[i].name, mp_tracer_fn_name(t, pi[i].fn));
	}
	fx_go(&f);
	if (exec_mode) {
		/* The new image says ready; go only once the tracer has seen
		 * the exec and re-attached. */
		fx_expect_ready(&f);
		for (int i = 0; i < 100; i++) {
			pump(t, &ev, 100);
			for (; exec_at < ev.n; exec_at++)
				if (ev.ev[exec_at].type == MP_RAW_EXEC)
					break;
			if (exec_at < ev.n)
				break;
		}
		cr_assert_lt(exec_at, ev.n, "no exec event");
		fx_go(&f);
	}
	fx_read_done(&f, r);
	exe_ranges(f.tpid, &after);
	pump(t, &ev, 0);
	fx_go(&f);
	for (int i = 0; i < 200 && !mp_tracer_exited(t); i++)
		pump(t, &ev, 100);
	cr_assert(mp_tracer_exited(t), "no exit seen");
	/* the probes go in the background once the target is gone */
	cr_assert(!r->n_probes || mp_tracer_detaching(t), "probes detached in the foreground");
	cr_assert_eq(mp_tracer_consume(t, collect, &ev), -ESRCH);
	r->drops = mp_tracer_drops(t);
	mp_tracer_drops_by_kind(t, r->drops_kind);
	mp_tracer_free(t);
	cr_assert_eq(waitpid(f.pid, &status, 0), f.pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "fixture status %d", status);
	close(f.to);
	close(f.from);

	cr_assert_eq(mp_live_new(&l), 0);
	if (exec_mode)
		apply_range(l, &ev, 0, exec_at, &before, r);
	apply_range(l, &ev, exec_at, ev.n, exec_mode ? &after : &before, r);
	mp_live_stats(l, &r->st);
	mp_live_foreach(l, live_collect, r);
	mp_live_free(l);
	r->n_events = ev.n;
	free(ev.ev);
	qsort(r->live, r->n_live, sizeof(r->live[0]), blk_cmp);
	qsort(r->expected, r->n_expected, sizeof(r->expected[0]), blk_cmp);
}

static void set_fn(struct mp_live_stats *s, uint32_t fn, uint64_t allocs, uint64_t alloc_bytes,
		   uint64_t frees, uint64_t freed_bytes)
{
	s->fn[fn] = (struct mp_live_fn_stats){
		.allocs = allocs,
		.alloc_bytes = alloc_bytes,
		.frees = frees,
		.freed_bytes = freed_bytes,
	};
}

/* What the "seq" script must produce. glibc's memalign is aligned_alloc
 * (one address, reported under the first name). */
static void expect_seq(struct mp_live_stats *s, bool jemalloc)
{
	memset(s, 0, sizeof(*s));
	s->live_bytes = 10 + 1000 + 8192;
	s->live_blocks = 3;
	s->failed = 1; /* realloc(p3, huge) */
	s->ignored = 1; /* munmap of the file mapping */
	set_fn(s, MP_FN_MALLOC, 3, 100 + 30 + (1 << 20), 0, 0);
	set_fn(s, MP_FN_CALLOC, 1, 200, 0, 0);
	set_fn(s, MP_FN_REALLOC, 3, 50 + 5000 + 10, 3, 50 + 5000 + 30);
	set_fn(s, MP_FN_REALLOCARRAY, 2, 80 + 160, 1, 80);
	set_fn(s, MP_FN_POSIX_MEMALIGN, 1, 256, 0, 0);
	if (jemalloc) {
		set_fn(s, MP_FN_ALIGNED_ALLOC, 1, 512, 0, 0);
		set_fn(s, MP_FN_MEMALIGN, 1, 1000, 0, 0);
		set_fn(s, MP_FN_FREE, 0, 0, 7, 100 + 200 + 160 + 256 + 512 + 300 + (1 << 20));
	} else {
		set_fn(s, MP_FN_ALIGNED_ALLOC, 2, 512 + 1000, 0, 0);
		set_fn(s, MP_FN_PVALLOC, 1, 400, 0, 0);
		set_fn(s, MP_FN_FREE, 0, 0, 8, 100 + 200 + 160 + 256 + 512 + 300 + 400 + (1 << 20));
	}
	set_fn(s, MP_FN_VALLOC, 1, 300, 0, 0);
	set_fn(s, MP_FN_MMAP, 1 + 1, 65536 + 8192, 0, 0);
	set_fn(s, MP_FN_MREMAP, 1, 131072, 1, 65536);
	set_fn(s, MP_FN_MUNMAP, 0, 0, 1, 131072);
}

static void print_stats(const char *what, const struct mp_live_stats *s)
{
	fprintf(stderr,
		"%s: live_bytes=%llu live_blocks=%llu unknown=%llu failed=%llu "
		"ignored=%llu exec_dropped=%llu\n",
		what, (unsigned long long)s->live_bytes, (unsigned long long)s->live_blocks,
		(unsigned long long)s->unknown_frees, (unsigned long long)s->failed,
		(unsigned long long)s->ignored, (unsigned long long)s->exec_dropped);
	for (uint32_t fn = 0; fn < MP_LIVE_FN_MAX; fn++) {
		const struct mp_live_fn_stats *f = &s->fn[fn];

		if (f->allocs || f->frees || f->unknown_frees)
			fprintf(stderr,
				"  %s: allocs=%llu bytes=%llu frees=%llu "
				"freed=%llu unknown=%llu\n",
				mp_alloc_fn_name(fn), (unsigned long long)f->allocs,
				(unsigned long long)f->alloc_bytes, (unsigned long long)f->frees,
				(unsigned long long)f->freed_bytes,
				(unsigned long long)f->unknown_frees);
	}
}

static void assert_result(const struct result *r, const struct mp_live_stats *want, size_t n_exec)
{
	if (memcmp(&r->st, want, sizeof(*want))) {
		print_stats("got", &r->st);
		print_stats("want", want);
		cr_assert_fail("statistics differ");
	}
	cr_assert_eq(r->n_live, r->n_expected, "live %zu, expected %zu", r->n_live, r->n_expected);
	cr_assert_arr_eq(r->live, r->expected, r->n_live * sizeof(r->live[0]), "live set differs");
	cr_assert_eq(r->drops, 0);
	cr_assert_eq(r->n_exec, n_exec);
	cr_assert_eq(r->n_exit, 1);
}

/* glibc's memalign is aligned_alloc: one address, reported under the
 * first name. */
static void glibc_aliases(struct result *r)
{
	for (size_t i = 0; i < r->n_expected; i++)
		if (r->expected[i].fn == MP_FN_MEMALIGN)
			r->expected[i].fn = MP_FN_ALIGNED_ALLOC;
}

static const struct mp_probe_info *probe_of(const struct result *r, uint32_t fn)
{
	for (size_t i = 0; i < r->n_probes; i++)
		if (r->probes[i].fn == fn)
			return &r->probes[i];
	cr_assert_fail("no probe for %s", mp_alloc_fn_name(fn));
	return NULL;
}

static const char *probe_path(const struct result *r, uint32_t fn)
{
	for (size_t i = 0; i < r->n_probes; i++)
		if (r->probes[i].fn == fn)
			return r->probes[i].path;
	return "";
}

static void require_root(void)
{
	mp_test_need_root("uprobes (CAP_BPF, CAP_PERFMON)");
}

Test(tracer, glibc_sequence_exact, .timeout = 60)
{
	char *argv[] = { FIXTURE_GLIBC, "seq", NULL };
	struct mp_live_stats want;
	struct result r;

	require_root();
	run(argv, false, NULL, &r);
	glibc_aliases(&r);
	expect_seq(&want, false);
	assert_result(&r, &want, 0);
	cr_assert(strstr(probe_path(&r, MP_FN_MALLOC), "/libc.so"));
	cr_assert(strstr(probe_path(&r, MP_FN_FREE), "/libc.so"));
	/* glibc's free starts with its NULL check: probed after it, and the
	 * exact counts above prove the callers were still read right. */
	cr_assert_gt(probe_of(&r, MP_FN_FREE)->probe_delta, 0);
}

/* mp_tracer_drained() (docs/TRACER.md "Ring buffer, drops, wakeups"):
 * false while the fixture's events wait in the ring buffer, true once a
 * consume took them all and the fixture, blocked, sends no more. The
 * in-process session releases ring records against it. */
Test(tracer, drained_after_consume_only, .timeout = 60)
{
	char *argv[] = { FIXTURE_GLIBC, "seq", NULL };
	struct mp_tracer_opts o = { 0 };
	struct events ev = { 0 };
	struct fixture f;
	struct result *r = calloc(1, sizeof(*r));
	struct mp_tracer *t;
	int status;

	require_root();
	cr_assert_not_null(r);
	fx_start(&f, argv);
	fx_expect_ready(&f);
	o.pid = f.tpid;
	cr_assert_eq(mp_tracer_new(&o, &t), 0);
	cr_assert(mp_tracer_drained(t), "nothing sent yet");
	fx_go(&f);
	fx_read_done(&f, r);
	cr_assert_not(mp_tracer_drained(t), "the fixture's events wait in the ring buffer");
	cr_assert_gt(mp_tracer_consume(t, collect, &ev), 0);
	cr_assert(mp_tracer_drained(t), "consumed, and the fixture is blocked");
	fx_go(&f);
	for (int i = 0; i < 200 && !mp_tracer_exited(t); i++)
		pump(t, &ev, 100);
	mp_tracer_free(t);
	cr_assert_eq(waitpid(f.pid, &status, 0), f.pid);
	close(f.to);
	close(f.from);
	free(ev.ev);
	free(r);
}

Test(tracer, naive_placement_same_result, .timeout = 60)
{
	char *argv[] = { FIXTURE_GLIBC, "seq", NULL };
	struct mp_tracer_opts o = { .naive_placement = true };
	struct mp_live_stats want;
	struct result r;

	require_root();
	run(argv, false, &o, &r);
	glibc_aliases(&r);
	expect_seq(&want, false);
	assert_result(&r, &want, 0);
	for (size_t i = 0; i < r.n_probes; i++)
		cr_assert_eq(r.probes[i].probe_delta, 0, "%s", r.probes[i].name);
}

static void *thread_sleep(void *arg)
{
	*(volatile pid_t *)arg = gettid();
	pause();
	return NULL;
}

/* Whether process @pid runs @path now (its exec is done). */
static bool is_exe(pid_t pid, const char *path)
{
	char link[64], exe[PATH_MAX], want[PATH_MAX];
	ssize_t n;

	snprintf(link, sizeof(link), "/proc/%d/exe", (int)pid);
	n = readlink(link, exe, sizeof(exe) - 1);
	if (n <= 0 || !realpath(path, want))
		return false;
	exe[n] = '\0';
	return !strcmp(exe, want);
}

/* The static program without any allocator, started and past its exec
 * (until then the child is a copy of this test, with an allocator). */
static pid_t start_nomalloc(void)
{
	char *argv[] = { FIXTURE_NOMALLOC, NULL };
	pid_t pid = fork();

	cr_assert_geq(pid, 0);
	if (pid == 0) {
		execv(argv[0], argv);
		_exit(127);
	}
	cr_assert(MP_TEST_WAIT_FOR(is_exe(pid, argv[0]), 30000), "%s never ran", argv[0]);
	return pid;
}

Test(tracer, attach_errors, .timeout = 60)
{
	struct mp_tracer_opts o = { .pid = 0x3ffffff0 };
	struct mp_tracer *t = NULL;
	struct mp_tracer_func fx;
	volatile pid_t tid = 0;
	pthread_t th;
	pid_t pid;

	require_root();
	cr_assert_eq(mp_tracer_new(&o, &t), -ESRCH);
	/* A thread id, not a process id. */
	cr_assert_eq(pthread_create(&th, NULL, thread_sleep, (void *)&tid), 0);
	cr_assert(MP_TEST_WAIT_FOR(tid != 0, 30000), "the thread never started");
	o.pid = tid;
	cr_assert_eq(mp_tracer_new(&o, &t), -EINVAL);
	/* A static program without any allocator. */
	pid = start_nomalloc();
	o.pid = pid;
	cr_assert_eq(mp_tracer_new(&o, &t), -ENOENT);
	/* A custom function nothing defines. */
	cr_assert_eq(mp_tracer_parse_func("no_such_alloc_fn:size=arg0", false, &fx), 0);
	o.pid = getpid();
	o.extra = &fx;
	o.n_extra = 1;
	cr_assert_eq(mp_tracer_new(&o, &t), -ENXIO);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	cr_assert_null(t);
	mp_tracer_free(NULL);
}

Test(tracer, jemalloc_link_order, .timeout = 60)
{
	char *argv[] = { FIXTURE_JEMALLOC, "seq", NULL };
	struct mp_live_stats want;
	struct result r;

	require_root();
	run(argv, false, NULL, &r);
	expect_seq(&want, true);
	assert_result(&r, &want, 0);
	/* The executable links jemalloc before libc: every function jemalloc
	 * defines is probed there, the rest in libc. */
	for (uint32_t fn = MP_FN_MALLOC; fn <= MP_FN_VALLOC; fn++) {
		const char *p = probe_path(&r, fn);

		if (fn == MP_FN_REALLOCARRAY || fn == MP_FN_PVALLOC)
			cr_assert(strstr(p, "/libc.so"), "%s in %s", mp_alloc_fn_name(fn), p);
		else
			cr_assert(strstr(p, "/libjemalloc.so"), "%s in %s", mp_alloc_fn_name(fn),
				  p);
	}
}

Test(tracer, mount_namespace, .timeout = 60)
{
	char dir[] = "/tmp/mp-ns-XXXXXX", cmd[PATH_MAX * 3], path[PATH_MAX];
	char *argv[] = { "unshare", "-m", "--propagation", "private", "sh", "-c", cmd, NULL };
	struct mp_live_stats want;
	struct result r;
	struct stat sb;

	require_root();
	cr_assert(mkdtemp(dir));
	/* The binary exists only on a tmpfs mounted inside the target's
	 * mount namespace: reachable only through /proc/PID/root. */
	snprintf(cmd, sizeof(cmd), "mount -t tmpfs none %s && cp %s %s/fx && exec %s/fx seq", dir,
		 FIXTURE_GLIBC, dir, dir);
	run(argv, false, NULL, &r);
	snprintf(path, sizeof(path), "%s/fx", dir);
	cr_assert_neq(stat(path, &sb), 0, "%s visible outside the namespace", path);
	rmdir(dir);
	glibc_aliases(&r);
	expect_seq(&want, false);
	assert_result(&r, &want, 0);
	cr_assert(strstr(probe_path(&r, MP_FN_MALLOC), "/libc.so"));
}

/* The probed object (here the executable, with a custom allocator) was
 * deleted after it was mapped: reachable only through /proc/PID/map_files. */
Test(tracer, deleted_executable, .timeout = 60)
{
	char dir[] = "/tmp/mp-del-XXXXXX", cmd[PATH_MAX * 3];
	char *argv[] = { "sh", "-c", cmd, NULL };
	struct mp_tracer_func fx[2];
	struct mp_tracer_opts o = { .extra = fx, .n_extra = 2 };
	struct mp_live_stats want = { 0 };
	struct result r;

	require_root();
	cr_assert_eq(mp_tracer_parse_func("fx_alloc:size=arg1", false, &fx[0]), 0);
	cr_assert_eq(mp_tracer_parse_func("fx_free:ptr=arg0", true, &fx[1]), 0);
	cr_assert(mkdtemp(dir));
	snprintf(cmd, sizeof(cmd), "cp %s %s/fx && exec %s/fx custom unlink", FIXTURE_GLIBC, dir,
		 dir);
	run(argv, false, &o, &r);
	rmdir(dir);
	want.live_bytes = 77;
	want.live_blocks = 1;
	set_fn(&want, MP_FN_CUSTOM, 2, 123 + 77, 0, 0);
	set_fn(&want, MP_FN_CUSTOM + 1, 0, 0, 1, 123);
	assert_result(&r, &want, 0);
	cr_assert(strstr(probe_path(&r, MP_FN_CUSTOM), "/fx (deleted)"), "fx_alloc in %s",
		  probe_path(&r, MP_FN_CUSTOM));
}

Test(tracer, preexisting_allocations, .timeout = 60)
{
	char *argv[] = { FIXTURE_GLIBC, "pre", NULL };
	struct mp_live_stats want = { 0 };
	struct result r;

	require_root();
	run(argv, false, NULL, &r);
	want.live_bytes = 5 * 200;
	want.live_blocks = 5;
	want.unknown_frees = 50;
	set_fn(&want, MP_FN_MALLOC, 10, 10 * 200, 0, 0);
	set_fn(&want, MP_FN_FREE, 0, 0, 5, 5 * 200);
	want.fn[MP_FN_FREE].unknown_frees = 50;
	assert_result(&r, &want, 0);
}

Test(tracer, drops_are_counted, .timeout = 60)
{
	char *argv[] = { FIXTURE_GLIBC, "pre", NULL };
	/* A one-page ring holds 63 records of 64 bytes (the kernel keeps it
	 * from filling completely); the script makes 65 events and the test
	 * reads none until the script is done. */
	struct mp_tracer_opts o = { .ring_bytes = 4096 };
	struct result r;

	require_root();
	_Static_assert(sizeof(struct mp_raw_event) + 8 == 64, "record size");
	run(argv, false, &o, &r);
	/* every event is either delivered or counted, none vanishes */
	cr_assert_eq(r.drops, 2, "drops %llu, events %zu", (unsigned long long)r.drops, r.n_events);
	cr_assert_eq(r.n_events, 63 + 1 /* EXIT */);
	/* by what they lost: the script's last two events, frees */
	cr_assert_eq(r.drops_kind[MP_DROP_FREE], 2);
	cr_assert_eq(r.drops_kind[MP_DROP_ALLOC] + r.drops_kind[MP_DROP_REALLOC] +
			     r.drops_kind[MP_DROP_OTHER],
		     0);
	cr_assert_eq(r.n_exit, 1);
}

Test(tracer, ld_preload_first, .timeout = 60)
{
	char *argv[] = { "env", "LD_PRELOAD=" JEMALLOC_SO, FIXTURE_GLIBC, "pre", NULL };
	struct mp_live_stats want = { 0 };
	struct result r;

	require_root();
	run(argv, false, NULL, &r);
	/* The preloaded jemalloc is mapped above libc (the loader maps it
	 * first), so address order would pick libc; lookup order must not. */
	cr_assert(strstr(probe_path(&r, MP_FN_MALLOC), "/libjemalloc.so"), "malloc in %s",
		  probe_path(&r, MP_FN_MALLOC));
	cr_assert(strstr(probe_path(&r, MP_FN_FREE), "/libjemalloc.so"));
	want.live_bytes = 5 * 200;
	want.live_blocks = 5;
	want.unknown_frees = 50;
	set_fn(&want, MP_FN_MALLOC, 10, 10 * 200, 0, 0);
	set_fn(&want, MP_FN_FREE, 0, 0, 5, 5 * 200);
	want.fn[MP_FN_FREE].unknown_frees = 50;
	assert_result(&r, &want, 0);
}

Test(tracer, eight_threads, .timeout = 60)
{
	char *argv[] = { FIXTURE_GLIBC, "threads", NULL };
	struct mp_live_stats want = { 0 };
	uint64_t bytes = 0, freed = 0, live = 0;
	struct result r;

	require_root();
	run(argv, false, NULL, &r);
	for (int i = 0; i < 8; i++) {
		bytes += 1000 * (uint64_t)(64 + i) + 1000 + (uint64_t)i;
		freed += 1000 * (uint64_t)(64 + i);
		live += 1000 + (uint64_t)i;
	}
	want.live_bytes = live;
	want.live_blocks = 8;
	set_fn(&want, MP_FN_MALLOC, 8 * 1001, bytes, 0, 0);
	set_fn(&want, MP_FN_FREE, 0, 0, 8 * 1000, freed);
	assert_result(&r, &want, 0);
}

Test(tracer, exec_and_exit, .timeout = 60)
{
	char *argv[] = { FIXTURE_GLIBC, "exec", NULL };
	struct mp_live_stats want;
	struct result r;

	require_root();
	run(argv, true, NULL, &r);
	glibc_aliases(&r);
	/* The new image runs the whole script, traced after re-attach; the
	 * block of the old image is forgotten at exec, not freed. */
	expect_seq(&want, false);
	want.fn[MP_FN_MALLOC].allocs++;
	want.fn[MP_FN_MALLOC].alloc_bytes += 111;
	want.exec_dropped = 1;
	assert_result(&r, &want, 1);
}

Test(tracer, rss_stat_exact, .timeout = 60)
{
	char *argv[] = { FIXTURE_GLIBC, "rss", NULL };
	struct mp_tracer_opts o = { .rss_exact = true };
	struct mp_live_stats want = { 0 };
	/* The tracepoint reports the counter without the per-CPU deltas:
	 * up to 32 pages per CPU behind. */
	int64_t slack = 32 * 4096 * sysconf(_SC_NPROCESSORS_CONF);
	struct result r;

	require_root();
	run(argv, false, &o, &r);
	set_fn(&want, MP_FN_MMAP, 1, 4 << 20, 0, 0);
	set_fn(&want, MP_FN_MUNMAP, 0, 0, 1, 4 << 20);
	assert_result(&r, &want, 0);
	cr_assert_geq(r.n_rss, 1024 / 32, "%zu rss events", r.n_rss);
	cr_assert_eq(r.n_rss_foreign, 0);
	cr_assert_geq(r.rss_max - r.rss_first, (4 << 20) - slack, "anon rss rose by %lld only",
		      (long long)(r.rss_max - r.rss_first));
	cr_assert_leq(r.rss_last, r.rss_first + slack, "anon rss %lld at the end, %lld at start",
		      (long long)r.rss_last, (long long)r.rss_first);
}

/* Calls @fn for every line of /proc/self/fdinfo of each descriptor this
 * process holds, with what the descriptor is (its /proc/self/fd link, e.g.
 * "anon_inode:bpf_link"); once more with @line NULL per descriptor. */
static void each_fdinfo_line(void (*fn)(void *ctx, const char *what, const char *line), void *ctx)
{
	DIR *d = opendir("/proc/self/fdinfo");
	struct dirent *e;

	cr_assert_not_null(d);
	while ((e = readdir(d))) {
		char path[300], what[64], line[256];
		ssize_t n;
		FILE *f;

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
		n = readlink(path, what, sizeof(what) - 1);
		if (n <= 0)
			continue;
		what[n] = '\0';
		snprintf(path, sizeof(path), "/proc/self/fdinfo/%s", e->d_name);
		f = fopen(path, "re");
		if (!f)
			continue;
		fn(ctx, what, NULL);
		while (fgets(line, sizeof(line), f))
			fn(ctx, what, line);
		fclose(f);
	}
	closedir(d);
}

/* The BPF object kinds a tracer makes, by the key of their id in fdinfo. */
enum bpf_kind { BPF_PROGS, BPF_MAPS, BPF_LINKS, BPF_KINDS };

static const char *const bpf_kind_key[BPF_KINDS] = { "prog_id:", "map_id:", "link_id:" };

struct id_list {
	const char *key;
	uint32_t *ids;
	size_t n, max;
};

static bool has_id(const uint32_t *ids, size_t n, uint32_t id)
{
	for (size_t i = 0; i < n; i++)
		if (ids[i] == id)
			return true;
	return false;
}

static void collect_id(void *ctx, const char *what, const char *line)
{
	struct id_list *l = ctx;
	size_t k = strlen(l->key);
	unsigned id;

	(void)what;
	if (!line || strncmp(line, l->key, k) || sscanf(line + k, "%u", &id) != 1 ||
	    has_id(l->ids, l->n, id))
		return;
	cr_assert_lt(l->n, l->max, "more than %zu BPF objects held", l->max);
	l->ids[l->n++] = id;
}

/* The ids of the objects of @kind that this process holds through its own
 * descriptors (fdinfo; a link's also names its program), each once: ours,
 * whatever other tests or tools load on the machine meanwhile. */
static size_t own_bpf_ids(enum bpf_kind kind, uint32_t *ids, size_t max)
{
	struct id_list l = { bpf_kind_key[kind], ids, 0, max };

	each_fdinfo_line(collect_id, &l);
	return l.n;
}

/* Whether the kernel still has the object @id of @kind (anyone's). */
static bool bpf_id_alive(enum bpf_kind kind, uint32_t id)
{
	int fd = kind == BPF_PROGS ? bpf_prog_get_fd_by_id(id) :
		 kind == BPF_MAPS  ? bpf_map_get_fd_by_id(id) :
				     bpf_link_get_fd_by_id(id);

	if (fd >= 0) {
		close(fd);
		return true;
	}
	cr_assert(errno == ENOENT, "%s %u: %s", bpf_kind_key[kind], id, strerror(errno));
	return false;
}

#define MAX_IDS 1024

struct bpf_made {
	uint32_t ids[BPF_KINDS][MAX_IDS];
	size_t n[BPF_KINDS];
};

static bool bpf_made_gone(void *ctx)
{
	const struct bpf_made *m = ctx;

	for (int k = 0; k < BPF_KINDS; k++)
		for (size_t i = 0; i < m->n[k]; i++)
			if (bpf_id_alive((enum bpf_kind)k, m->ids[k][i]))
				return false;
	return true;
}

/*
 * Freeing the tracer frees every program, map and link it made. Only the
 * objects this test made are looked at: their ids, read from the
 * descriptors this process held while attached (and not before), then
 * looked up by id after the free. The kernel frees programs after an RCU
 * grace period and perf events from a work queue: the look-up is repeated
 * until they are gone, within a bound.
 */
Test(tracer, detach_leaves_nothing, .timeout = 60)
{
	static uint32_t before[BPF_KINDS][MAX_IDS], during[BPF_KINDS][MAX_IDS];
	static struct bpf_made ours;
	size_t nb[BPF_KINDS], nd[BPF_KINDS];
	char *argv[] = { FIXTURE_GLIBC, "seq", NULL };
	struct mp_tracer_opts o = { 0 };
	struct mp_tracer *t;
	struct fixture f;
	bool multi;
	int status, r;

	require_root();
	fx_start(&f, argv);
	fx_expect_ready(&f);
	for (int k = 0; k < BPF_KINDS; k++)
		nb[k] = own_bpf_ids((enum bpf_kind)k, before[k], MAX_IDS);
	o.pid = f.tpid;
	/* With the rss_stat program and link, where the kernel has them. */
	o.rss_exact = true;
	r = mp_tracer_new(&o, &t);
	if (r == -EOPNOTSUPP) {
		o.rss_exact = false;
		r = mp_tracer_new(&o, &t);
	}
	cr_assert_eq(r, 0, "mp_tracer_new: %s", strerror(-r));
	multi = mp_tracer_multi_uprobes(t);
	for (int k = 0; k < BPF_KINDS; k++) {
		nd[k] = own_bpf_ids((enum bpf_kind)k, during[k], MAX_IDS);
		for (size_t i = 0; i < nd[k]; i++)
			if (!has_id(before[k], nb[k], during[k][i]))
				ours.ids[k][ours.n[k]++] = during[k][i];
	}
	mp_tracer_free(t);
	cr_assert(mp_test_wait_until(bpf_made_gone, &ours, 30000),
		  "BPF objects of the tracer still alive 30 s after its free");
	cr_log_info("%zu programs, %zu maps, %zu links made, all gone", ours.n[BPF_PROGS],
		    ours.n[BPF_MAPS], ours.n[BPF_LINKS]);
	/* mp_entry, mp_return, mp_free, mp_caller_hint, sys_enter, sys_exit,
	 * exec (and rss_stat) programs; their 3 (4) tracepoint links; with
	 * multi-uprobe links also one per uprobe program in libc (perf-event
	 * uprobes are not BPF links); the ring buffer and counters. */
	cr_assert_geq(ours.n[BPF_PROGS] + ours.n[BPF_LINKS],
		      (o.rss_exact ? 8 + 4 : 7 + 3) + (multi ? 4 : 0),
		      "%zu programs, %zu links made", ours.n[BPF_PROGS], ours.n[BPF_LINKS]);
	cr_assert_gt(ours.n[BPF_MAPS], 0);
	kill(f.pid, SIGKILL);
	waitpid(f.pid, &status, 0);
	close(f.to);
	close(f.from);
}

/* A child other than @ctx (the fixture) reaped: the grandchild that held
 * the links, reparented to this process (a subreaper). */
static bool reaped_other(void *ctx)
{
	pid_t fixture = *(const pid_t *)ctx, r;

	while ((r = waitpid(-1, NULL, WNOHANG | __WALL)) > 0)
		if (r != fixture)
			return true;
	return false;
}

/*
 * release_in_child (memprof run, memprofd --pid): the kernel's release of
 * the links, tens of ms, is left to a grandchild that nobody waits for.
 * This process is a subreaper, so the grandchild comes back to it: it is
 * seen to exist and to exit. When mp_tracer_free() returns, this process
 * holds no link of the tracer's and no other process holds an fd of ours
 * (a pipe's write end closed here gives its read end EOF at once); once
 * the grandchild is gone, so is every program, map and link.
 */
Test(tracer, release_in_child_leaves_nothing, .timeout = 60)
{
	static uint32_t before[BPF_KINDS][MAX_IDS], during[BPF_KINDS][MAX_IDS],
		after[BPF_KINDS][MAX_IDS];
	static struct bpf_made ours;
	size_t nb[BPF_KINDS], nd[BPF_KINDS];
	char *argv[] = { FIXTURE_GLIBC, "seq", NULL };
	struct mp_tracer_opts o = { 0 };
	struct pollfd pfd;
	struct mp_tracer *t;
	struct fixture f;
	int status, pipefd[2], r;

	require_root();
	cr_assert_eq(prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), 0);
	fx_start(&f, argv);
	fx_expect_ready(&f);
	for (int k = 0; k < BPF_KINDS; k++)
		nb[k] = own_bpf_ids((enum bpf_kind)k, before[k], MAX_IDS);
	o.pid = f.tpid;
	o.release_in_child = true;
	r = mp_tracer_new(&o, &t);
	cr_assert_eq(r, 0, "mp_tracer_new: %s", strerror(-r));
	for (int k = 0; k < BPF_KINDS; k++) {
		nd[k] = own_bpf_ids((enum bpf_kind)k, during[k], MAX_IDS);
		for (size_t i = 0; i < nd[k]; i++)
			if (!has_id(before[k], nb[k], during[k][i]))
				ours.ids[k][ours.n[k]++] = during[k][i];
	}
	cr_assert_gt(ours.n[BPF_LINKS], 0);
	cr_assert_eq(pipe(pipefd), 0);
	mp_tracer_free(t);
	cr_assert_eq(own_bpf_ids(BPF_LINKS, after[BPF_LINKS], MAX_IDS), nb[BPF_LINKS],
		     "links of the tracer still held here");
	close(pipefd[1]);
	pfd = (struct pollfd){ .fd = pipefd[0], .events = POLLIN };
	cr_assert_eq(poll(&pfd, 1, 0), 1, "another process holds the pipe's write end");
	cr_assert(pfd.revents & POLLHUP);
	cr_assert(mp_test_wait_until(reaped_other, &f.pid, 30000), "no process released the links");
	cr_assert(mp_test_wait_until(bpf_made_gone, &ours, 30000),
		  "BPF objects of the tracer still alive 30 s after the release");
	close(pipefd[0]);
	kill(f.pid, SIGKILL);
	waitpid(f.pid, &status, 0);
	close(f.to);
	close(f.from);
}

/* An attach that fails after the shared hub was loaded for it (in a
 * thread of its own, beside the tracer's programs: a static program
 * without an allocator is found out only then) leaves no BPF program, map
 * or link in the daemon. */
Test(tracer, failed_attach_leaves_nothing, .timeout = 60)
{
	static uint32_t before[BPF_KINDS][MAX_IDS], after[BPF_KINDS][MAX_IDS];
	struct mp_tracer_opts o = { 0 };
	struct mp_tracer *t = NULL;
	size_t nb[BPF_KINDS], na[BPF_KINDS];
	pid_t pid;

	require_root();
	pid = start_nomalloc();
	for (int k = 0; k < BPF_KINDS; k++)
		nb[k] = own_bpf_ids((enum bpf_kind)k, before[k], MAX_IDS);
	o.pid = pid;
	cr_assert_eq(mp_tracer_new(&o, &t), -ENOENT);
	cr_assert_null(t);
	for (int k = 0; k < BPF_KINDS; k++) {
		na[k] = own_bpf_ids((enum bpf_kind)k, after[k], MAX_IDS);
		cr_assert_eq(na[k], nb[k], "%zu BPF %s fds before the attach, %zu after", nb[k],
			     bpf_kind_key[k], na[k]);
	}
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
}

/*
 * Sampled mode, interval N = 4096: 10 blocks of 8192 bytes (>= N) are
 * always sent at their true size; 40000 blocks of s = 256 bytes are each
 * sampled with probability p = 1 - exp(-s/N) = 0.0606 and then counted as
 * s/p bytes. With independent Bernoulli draws the estimate of their total
 * T = 10.24 MB has standard deviation sqrt(n s^2 (1-p)/p) = 0.20 MB (2.0 %);
 * a countdown of exponential intervals is more regular than that, not
 * less. The bound of 15 % is 7.5 standard deviations: it fails by chance
 * with probability < 1e-13. Only sampled blocks' frees are sent, so there
 * are no unknown frees and every sampled small block is freed.
 */
Test(tracer, sampled_mode, .timeout = 120)
{
	char *argv[] = { FIXTURE_GLIBC, "sampled", NULL };
	struct mp_tracer_opts o = { .mode = MP_TRACE_SAMPLED, .sample_bytes = 4096 };
	const double total = 40000.0 * 256;
	struct mp_live_stats want = { 0 };
	const struct mp_live_fn_stats *m;
	struct result r;
	double small;

	require_root();
	run(argv, false, &o, &r);
	m = &r.st.fn[MP_FN_MALLOC];
	small = (double)(m->alloc_bytes - 10 * 8192);
	cr_assert(fabs(small - total) < 0.15 * total, "estimate %.0f, truth %.0f", small, total);
	/* Everything else is exact: the whole statistics with the sampled
	 * figures substituted. */
	want.live_bytes = 5 * 8192;
	want.live_blocks = 5;
	set_fn(&want, MP_FN_MALLOC, m->allocs, m->alloc_bytes, 0, 0);
	set_fn(&want, MP_FN_FREE, 0, 0, m->allocs - 5, m->alloc_bytes - 5 * 8192);
	assert_result(&r, &want, 0);
	cr_assert_gt(m->allocs, 10 + 40000 * 0.0606 * 0.8);
	cr_assert_lt(m->allocs, 10 + 40000 * 0.0606 * 1.2);
	cr_assert_eq(mp_tracer_sample_estimate(256, 4096), 4225); /* 4225.3 */
	cr_assert_eq(mp_tracer_sample_estimate(8192, 4096), 8192);
}

/* rss mode: no allocator probe at all; the mapping, the heap break moved
 * directly and the pages faulted in are still reported. */
Test(tracer, rss_mode, .timeout = 60)
{
	char *argv[] = { FIXTURE_GLIBC, "rssmode", NULL };
	struct mp_tracer_opts o = { .mode = MP_TRACE_RSS };
	struct mp_live_stats want = { 0 };
	struct result r;
	const int64_t slack = 32 * 4096 * 2;

	require_root();
	run(argv, false, &o, &r);
	cr_assert_eq(r.n_probes, 0);
	want.live_bytes = (4 << 20) + 49152;
	want.live_blocks = 2;
	set_fn(&want, MP_FN_MMAP, 1, 4 << 20, 0, 0);
	set_fn(&want, MP_FN_BRK, 2, 65536 + 49152, 1, 65536);
	assert_result(&r, &want, 0);
	cr_assert_geq(r.rss_max - r.rss_first, (4 << 20) + 65536 - slack,
		      "anon rss rose by %lld only", (long long)(r.rss_max - r.rss_first));
}

/* What the test saw of the duty cycle from outside the tracer: the probes
 * are surely detached from the end of the consume call that switched them
 * off to the start of the one that switched them on again. */
#define MAX_OFF 256

struct duty_watch {
	bool on;
	size_t closed; /* windows closed by the duty timer */
	uint64_t off_from[MAX_OFF], off_to[MAX_OFF], off_since, off_total;
	size_t n_off;
	uint64_t last_consume_end;
};

static void duty_pump(struct mp_tracer *t, struct events *ev, struct duty_watch *w, int timeout_ms)
{
	struct epoll_event ee;
	uint64_t before;
	int r;

	epoll_wait(mp_tracer_fd(t), &ee, 1, timeout_ms);
	before = mono_ns();
	r = mp_tracer_consume(t, collect, ev);
	w->last_consume_end = mono_ns();
	cr_assert_geq(r, 0, "consume: %s", strerror(-r));
	if (mp_tracer_exited(t))
		return;
	if (w->on && !mp_tracer_duty_on(t)) {
		w->closed++;
		w->off_since = w->last_consume_end;
	} else if (!w->on && mp_tracer_duty_on(t)) {
		cr_assert_lt(w->n_off, MAX_OFF);
		w->off_from[w->n_off] = w->off_since;
		w->off_to[w->n_off++] = before;
		w->off_total += before - w->off_since;
	}
	w->on = mp_tracer_duty_on(t);
}

/*
 * Duty cycle 200 ms / 500 ms over a malloc every 10 ms for 1.2 s, checked
 * for what holds however slow the host: the probes do cycle (off, then on
 * again), no malloc is seen while they are surely off, some are seen, every
 * window the timer closed lasted at least ON, and the active time fits in
 * what the test saw. The windows' exact timing is tests/sources/test_duty.c's,
 * on a fake clock.
 */
Test(tracer, duty_cycle, .timeout = 120)
{
	char *argv[] = { FIXTURE_GLIBC, "duty", NULL };
	struct mp_tracer_opts o = { .duty_on_ns = 200000000ULL, .duty_period_ns = 500000000ULL };
	static struct duty_watch w;
	struct events ev = { 0 };
	struct exe_ranges x;
	struct mp_tracer *t;
	struct fixture f;
	struct result r = { 0 };
	uint64_t t0, on_ns;
	size_t seen = 0;
	int status;

	require_root();
	fx_start(&f, argv);
	fx_expect_ready(&f);
	exe_ranges(f.tpid, &x);
	o.pid = f.tpid;
	t0 = mono_ns();
	cr_assert_eq(mp_tracer_new(&o, &t), 0);
	cr_assert(mp_tracer_duty_on(t));
	w.on = true;
	fx_go(&f);
	/* One whole OFF window seen, however long the switches take. */
	cr_assert(MP_TEST_WAIT_FOR((duty_pump(t, &ev, &w, 20), w.n_off > 0), 60000),
		  "the probes never came back on (%zu windows closed)", w.closed);
	fx_read_done(&f, &r);
	fx_go(&f);
	cr_assert(MP_TEST_WAIT_FOR((duty_pump(t, &ev, &w, 100), mp_tracer_exited(t)), 60000),
		  "no exit seen");
	on_ns = mp_tracer_duty_on_ns(t);
	cr_assert_eq(mp_tracer_drops(t), 0);
	mp_tracer_free(t);
	waitpid(f.pid, &status, 0);
	close(f.to);
	close(f.from);
	for (size_t i = 0; i < ev.n; i++) {
		const struct mp_raw_event *e = &ev.ev[i];

		if (e->type != MP_RAW_ALLOC || e->fn != MP_FN_MALLOC || !in_exe(&x, e->caller))
			continue;
		cr_assert_eq(e->size, 1000);
		for (size_t k = 0; k < w.n_off; k++)
			cr_assert(e->ts_ns <= w.off_from[k] || e->ts_ns >= w.off_to[k],
				  "a malloc at %llu ns, in OFF window %zu [%llu, %llu]",
				  (unsigned long long)e->ts_ns, k,
				  (unsigned long long)w.off_from[k],
				  (unsigned long long)w.off_to[k]);
		seen++;
	}
	free(ev.ev);
	cr_log_info("%zu mallocs seen, %zu windows closed, %zu OFF windows seen, on %llu ns", seen,
		    w.closed, w.n_off, (unsigned long long)on_ns);
	cr_assert(seen >= 1 && seen <= 120, "%zu mallocs seen", seen);
	cr_assert_geq(on_ns, w.closed * o.duty_on_ns, "%zu windows closed, probes on for %llu ns",
		      w.closed, (unsigned long long)on_ns);
	cr_assert_leq(on_ns, w.last_consume_end - t0 - w.off_total,
		      "probes on for %llu ns, off for %llu of %llu ns", (unsigned long long)on_ns,
		      (unsigned long long)w.off_total,
		      (unsigned long long)(w.last_consume_end - t0));
}

static int count_allocs(void *ctx, const struct mp_raw_event *ev)
{
	size_t *n = ctx;

	if (ev->type == MP_RAW_ALLOC && ev->fn == MP_FN_MALLOC && ev->size == 64)
		(*n)++;
	return 0;
}

/* The 64-byte mallocs delivered so far, @n counting them all. */
static size_t consume_count(struct mp_tracer *t, size_t *n)
{
	int r = mp_tracer_consume(t, count_allocs, n);

	cr_assert_geq(r, 0, "consume: %s", strerror(-r));
	return *n;
}

/*
 * Regression: attaching to a process that is calling malloc now and then.
 * With entry probes attached before return probes, a call entered in
 * between never saw its return, stayed "in progress", and every later call
 * at the same stack depth looked nested: nothing was ever reported (one
 * attach in four). Eight attaches in a row must each see the mallocs.
 */
Test(tracer, attach_while_allocating, .timeout = 60)
{
	pid_t pid = fork();
	int status;

	require_root();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		for (;;) {
			void *volatile p = malloc(64);

			free(p);
			usleep(100);
		}
	}
	usleep(20000);
	for (int run = 0; run < 8; run++) {
		struct mp_tracer_opts o = { .pid = pid };
		struct mp_tracer *t;
		size_t n = 0;

		cr_assert_eq(mp_tracer_new(&o, &t), 0);
		/* However slowly the child runs on a loaded host. */
		MP_TEST_WAIT_FOR(consume_count(t, &n) >= 50, 30000);
		mp_tracer_free(t);
		cr_assert_geq(n, 50, "attach %d: %zu mallocs seen", run, n);
	}
	kill(pid, SIGKILL);
	waitpid(pid, &status, 0);
}

static int session_go(void *ctx)
{
	fx_go(ctx);
	return 0;
}

/* The mode figures a session writes into the profile. */
struct mode_marks {
	uint32_t trace_mode;
	uint32_t rss_exact; /* no padding: compared as bytes */
	uint64_t sample_bytes, duty_on_ns, duty_period_ns;
};

/* One session (memprofd --pid) of @mode_script under @so for 1.5 s. */
static struct mp_profile *session_of(const char *script, struct mp_session_opts *so,
				     struct mode_marks *ret)
{
	char *argv[] = { FIXTURE_GLIBC, (char *)script, NULL };
	struct mp_profile *p = NULL;
	struct fixture f;
	int status, r;

	fx_start(&f, argv);
	fx_expect_ready(&f);
	so->pid = f.tpid;
	so->duration_ns = 1500000000ULL;
	so->on_attached = session_go;
	so->on_attached_ctx = &f;
	r = mp_session_run(so, &p);
	cr_assert_eq(r, 0, "session: %s", strerror(-r));
	kill(f.pid, SIGKILL);
	waitpid(f.pid, &status, 0);
	close(f.to);
	close(f.from);
	*ret = (struct mode_marks){
		.trace_mode = p->trace_mode,
		.rss_exact = p->rss_exact,
		.sample_bytes = p->sample_bytes,
		.duty_on_ns = p->duty_on_ns,
		.duty_period_ns = p->duty_period_ns,
	};
	return p;
}

/* The profile says how it was taken: mode, sampling interval, duty cycle
 * and how long the probes were on. */
Test(tracer, profile_marks_modes, .timeout = 60)
{
	struct mp_session_opts so = { 0 };
	struct mode_marks got, want;
	struct mp_profile *p;

	require_root();
	so.duty_on_ns = 200000000ULL;
	so.duty_period_ns = 500000000ULL;
	p = session_of("duty", &so, &got);
	want = (struct mode_marks){ .duty_on_ns = 200000000ULL, .duty_period_ns = 500000000ULL };
	cr_assert_arr_eq(&got, &want, sizeof(got));
	/* The active time is reported, within the profile's span. How long
	 * the windows were depends on the host's switching delays (a slow
	 * attach shifts them all): test_duty.c checks them on a fake clock,
	 * duty_cycle on real probes. */
	cr_assert(p->duty_active_ns > 0 && p->duty_active_ns <= p->end_ns - p->begin_ns,
		  "probes on for %llu ns of %llu", (unsigned long long)p->duty_active_ns,
		  (unsigned long long)(p->end_ns - p->begin_ns));
	mp_profile_free(p);

	so = (struct mp_session_opts){ .mode = MP_TRACE_SAMPLED, .sample_bytes = 4096 };
	p = session_of("seq", &so, &got);
	want = (struct mode_marks){ .trace_mode = MP_TRACE_SAMPLED, .sample_bytes = 4096 };
	cr_assert_arr_eq(&got, &want, sizeof(got));
	cr_assert_eq(p->duty_active_ns, 0);
	mp_profile_free(p);

	so = (struct mp_session_opts){ .mode = MP_TRACE_RSS };
	p = session_of("rssmode", &so, &got);
	want = (struct mode_marks){ .trace_mode = MP_TRACE_RSS, .rss_exact = true };
	cr_assert_arr_eq(&got, &want, sizeof(got));
	mp_profile_free(p);
}

/* This process's BPF links by type (fdinfo's link_type), and its perf
 * event descriptors (the legacy one-uprobe-per-event attach). */
struct link_census {
	int uprobe_multi, other_links, perf_events;
};

static void census_line(void *ctx, const char *what, const char *line)
{
	struct link_census *c = ctx;

	if (!line) {
		if (strstr(what, "perf_event"))
			c->perf_events++;
		return;
	}
	if (!strstr(what, "bpf_link") || strncmp(line, "link_type:", 10))
		return;
	if (strstr(line, "uprobe_multi"))
		c->uprobe_multi++;
	else
		c->other_links++;
}

static struct link_census link_census(void)
{
	struct link_census c = { 0 };

	each_fdinfo_line(census_line, &c);
	return c;
}

/* Whether the running kernel has multi-uprobe links (6.6 on), read from its
 * BTF as the tracer does; its release in @release for a skip's reason. */
static bool kernel_has_uprobe_multi(char *release, size_t size)
{
	struct btf *btf = btf__load_vmlinux_btf();
	struct utsname u;
	bool has;

	cr_assert_eq(uname(&u), 0);
	snprintf(release, size, "%s", u.release);
	cr_assert_not_null(btf, "no kernel BTF (/sys/kernel/btf/vmlinux)");
	has = btf__find_by_name_kind(btf, "bpf_uprobe_multi_link", BTF_KIND_STRUCT) >= 0;
	btf__free(btf);
	return has;
}

/* Regression: perf-event uprobes (one perf event per probe) took 0.1-0.2 s
 * each to detach, 2-5 s for one process, and `memprof run` returned that
 * long after its target. Where the kernel has them, the allocator probes
 * are multi-uprobe links (a few per process, whatever the probe count, each
 * released with one sync), and freeing the tracer closes every link it
 * made. The detach time itself is a timing, measured in bench/run section
 * 4, not asserted here. */
Test(tracer, detach_closes_multi_uprobe_links, .timeout = 60)
{
	char *argv[] = { FIXTURE_GLIBC, "seq", NULL };
	struct mp_tracer_opts o = { 0 };
	const struct mp_probe_info *pi;
	struct link_census before, during, after;
	struct mp_tracer *t;
	struct fixture f;
	char release[65];
	int status, probes;

	require_root();
	if (!kernel_has_uprobe_multi(release, sizeof(release)))
		cr_skip_test("kernel %s has no multi-uprobe links (Linux 6.6 and later): the "
			     "tracer uses perf-event uprobes there, slow to detach by design",
			     release);
	fx_start(&f, argv);
	fx_expect_ready(&f);
	o.pid = f.tpid;
	before = link_census();
	cr_assert_eq(mp_tracer_new(&o, &t), 0);
	cr_assert(mp_tracer_multi_uprobes(t), "kernel %s has multi-uprobe links, not used",
		  release);
	probes = mp_tracer_probes(t, &pi);
	cr_assert_geq(probes, 9);
	during = link_census();
	cr_assert_eq(during.perf_events, before.perf_events,
		     "%d perf events for the uprobes (legacy attach, slow to detach)",
		     during.perf_events - before.perf_events);
	cr_assert_geq(during.uprobe_multi - before.uprobe_multi, 1);
	/* an entry and a return link per probed object at most */
	cr_assert_lt(during.uprobe_multi - before.uprobe_multi, probes,
		     "%d multi-uprobe links for %d probes",
		     during.uprobe_multi - before.uprobe_multi, probes);
	mp_tracer_free(t);
	after = link_census();
	cr_assert_eq(after.uprobe_multi, before.uprobe_multi, "multi-uprobe links left behind");
	cr_assert_eq(after.other_links, before.other_links, "BPF links left behind");
	cr_assert_eq(after.perf_events, before.perf_events);
	kill(f.pid, SIGKILL);
	waitpid(f.pid, &status, 0);
	close(f.to);
	close(f.from);
}

Test(tracer, custom_functions, .timeout = 60)
{
	char *argv[] = { FIXTURE_GLIBC, "custom", NULL };
	struct mp_tracer_func fx[2];
	struct mp_tracer_opts o = { .extra = fx, .n_extra = 2 };
	struct mp_live_stats want = { 0 };
	struct result r;

	require_root();
	cr_assert_eq(mp_tracer_parse_func("fx_alloc@tracer-fixture:size=arg1", false, &fx[0]), 0);
	cr_assert_eq(mp_tracer_parse_func("fx_free:ptr=arg0", true, &fx[1]), 0);
	run(argv, false, &o, &r);
	/* The malloc and free inside them are not counted again. */
	want.live_bytes = 77;
	want.live_blocks = 1;
	set_fn(&want, MP_FN_CUSTOM, 2, 123 + 77, 0, 0);
	set_fn(&want, MP_FN_CUSTOM + 1, 0, 0, 1, 123);
	assert_result(&r, &want, 0);
	cr_assert(strstr(probe_path(&r, MP_FN_CUSTOM), "/tracer-fixture"));
	cr_assert_str_eq(r.probes[r.n_probes - 2].name, "fx_alloc");
	cr_assert_str_eq(r.probes[r.n_probes - 1].name, "fx_free");
}

/* memprofd itself on the eBPF path: --dump-events output and summary, whole. */
Test(tracer, memprofd_dump_events, .timeout = 60)
{
	char *fargv[] = { FIXTURE_GLIBC, "pre", NULL };
	char pidarg[32], line[512], *out = NULL;
	int errp[2], outp[2], status;
	size_t outlen = 0, n_alloc = 0, n_free = 0, n_unknown = 0, n_exit = 0, n_other = 0,
	       n_summary = 0;
	struct fixture f;
	FILE *err, *so;
	pid_t d;

	require_root();
	fx_start(&f, fargv);
	fx_expect_ready(&f);
	snprintf(pidarg, sizeof(pidarg), "%d", (int)f.tpid);
	cr_assert_eq(pipe2(errp, O_CLOEXEC), 0);
	cr_assert_eq(pipe2(outp, O_CLOEXEC), 0);
	d = fork();
	cr_assert_geq(d, 0);
	if (d == 0) {
		dup2(errp[1], 2);
		dup2(outp[1], 1);
		execl(MEMPROFD, "memprofd", "--pid", pidarg, "--tracer", "bpf", "--dump-events",
		      "--rss-hz", "0", "--print", "none", (char *)NULL);
		_exit(127);
	}
	close(errp[1]);
	close(outp[1]);
	err = fdopen(errp[0], "r");
	cr_assert(fgets(line, sizeof(line), err));
	cr_assert(strstr(line, "memprofd: attached to pid"), "got '%s'", line);
	fx_go(&f);
	fx_read_done(&f, &(struct result){ 0 });
	fx_go(&f);
	so = fdopen(outp[0], "r");
	while (fgets(line, sizeof(line), so)) {
		size_t l = strlen(line);

		out = realloc(out, outlen + l + 1);
		memcpy(out + outlen, line, l + 1);
		outlen += l;
		if (!strncmp(line, "alloc fn=malloc ", 16))
			n_alloc++;
		else if (!strncmp(line, "free fn=free ", 13))
			n_free++;
		else if (!strncmp(line, "unknown-free fn=free ", 21))
			n_unknown++;
		else if (!strncmp(line, "exit ", 5))
			n_exit++;
		else if (!strncmp(line, "summary ", 8))
			n_summary++;
		else if (strncmp(line, "fn ", 3))
			n_other++;
	}
	cr_assert_eq(waitpid(d, &status, 0), d);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "memprofd status %d", status);
	waitpid(f.pid, &status, 0);
	cr_assert_eq(n_alloc, 10);
	cr_assert_eq(n_free, 5);
	cr_assert_eq(n_unknown, 50);
	cr_assert_eq(n_exit, 1);
	cr_assert_eq(n_other, 0);
	cr_assert(out && strstr(out, "summary live_bytes=1000 live_blocks=5 unknown_frees=50 "
				     "failed=0 ignored=0 drops=0\n"
				     "fn malloc allocs=10 alloc_bytes=2000 frees=0 freed_bytes=0 "
				     "unknown_frees=0\n"
				     "fn free allocs=0 alloc_bytes=0 frees=5 freed_bytes=1000 "
				     "unknown_frees=50\n"),
		  "output:\n%s", out ? out : "");
	cr_assert_eq(n_summary, 1);
	free(out);
	fclose(err);
	fclose(so);
	close(f.to);
	close(f.from);
}

Test(tracer, parse_func)
{
	struct mp_tracer_func f, want = { .arg = 2 };

	strcpy(want.name, "xnn_allocate_memory");
	strcpy(want.object, "libXNNPACK.so");
	cr_assert_eq(mp_tracer_parse_func("xnn_allocate_memory@libXNNPACK.so:size=arg2", false, &f),
		     0);
	cr_assert_arr_eq(&f, &want, sizeof(f));
	memset(&want, 0, sizeof(want));
	strcpy(want.name, "xfree");
	want.is_free = true;
	cr_assert_eq(mp_tracer_parse_func("xfree:ptr=arg0", true, &f), 0);
	cr_assert_arr_eq(&f, &want, sizeof(f));
	cr_assert_eq(mp_tracer_parse_func("xfree:size=arg0", true, &f), -EINVAL);
	cr_assert_eq(mp_tracer_parse_func("xfree:ptr=arg6", true, &f), -EINVAL);
	cr_assert_eq(mp_tracer_parse_func("@lib:size=arg0", false, &f), -EINVAL);
	cr_assert_eq(mp_tracer_parse_func("f@:size=arg0", false, &f), -EINVAL);
	cr_assert_eq(mp_tracer_parse_func("f", false, &f), -EINVAL);
}

/* Tracepoint links (sys_enter, sys_exit, exec, rss_stat) this process
 * holds, as the kernel reports them in /proc/self/fdinfo. */
static void count_tracepoint_link(void *ctx, const char *what, const char *line)
{
	(void)what;
	if (line && !strncmp(line, "link_type:", 10) && strstr(line, "raw_tracepoint"))
		++*(size_t *)ctx;
}

static size_t own_tracepoint_links(void)
{
	size_t n = 0;

	each_fdinfo_line(count_tracepoint_link, &n);
	return n;
}

/*
 * rss_stat fires on every change of an mm counter of the machine (every page
 * fault of every process): the shared link is attached only while a target
 * wants its events (--rss-exact, rss mode), not for a precise target.
 */
Test(tracer, rss_stat_attached_only_while_wanted, .timeout = 60)
{
	char *argv[] = { FIXTURE_GLIBC, "rssmode", NULL };
	struct mp_tracer_opts po = { 0 }, ro = { .mode = MP_TRACE_RSS };
	static struct fixture fp, fr;
	struct mp_tracer *tp, *tr;
	int status;

	require_root();
	cr_assert_eq(own_tracepoint_links(), 0);
	fx_start(&fp, argv);
	fx_expect_ready(&fp);
	fx_start(&fr, argv);
	fx_expect_ready(&fr);
	po.pid = fp.tpid;
	cr_assert_eq(mp_tracer_new(&po, &tp), 0);
	/* sys_enter, sys_exit and exec */
	cr_expect_eq(own_tracepoint_links(), 3, "precise target: %zu links",
		     own_tracepoint_links());
	ro.pid = fr.tpid;
	cr_assert_eq(mp_tracer_new(&ro, &tr), 0);
	cr_expect_eq(own_tracepoint_links(), 4, "and an rss target: %zu links",
		     own_tracepoint_links());
	mp_tracer_free(tr);
	cr_expect_eq(own_tracepoint_links(), 3, "rss target gone: %zu links",
		     own_tracepoint_links());
	ro.pid = fr.tpid;
	cr_assert_eq(mp_tracer_new(&ro, &tr), 0);
	cr_expect_eq(own_tracepoint_links(), 4, "rss target again: %zu links",
		     own_tracepoint_links());
	mp_tracer_free(tp);
	cr_expect_eq(own_tracepoint_links(), 4, "the rss target alone: %zu links",
		     own_tracepoint_links());
	mp_tracer_free(tr);
	for (struct fixture *f = &fp; f; f = f == &fp ? &fr : NULL) {
		kill(f->pid, SIGKILL);
		waitpid(f->pid, &status, 0);
		close(f->to);
		close(f->from);
	}
	cr_assert_eq(own_tracepoint_links(), 0);
}

/*
 * Many targets (issue 13): the system-wide tracepoint programs are attached
 * once for all targets, not once per target, so that N targets do not cost
 * every syscall of the machine N programs (attaching the 200th target took
 * seconds). The kernel's count of this process's tracepoint links stays
 * that of one target, and each target's events still reach its own
 * tracer, and only its own.
 */
#define MANY 8
Test(tracer, many_targets_share_tracepoints, .timeout = 120)
{
	char *argv[] = { FIXTURE_GLIBC, "rssmode", NULL };
	struct mp_tracer_opts o = { .mode = MP_TRACE_RSS };
	static struct fixture f[MANY];
	struct mp_tracer *t[MANY];
	struct events ev[MANY] = { 0 };
	size_t one, all;
	int status;

	require_root();
	cr_assert_eq(own_tracepoint_links(), 0);
	for (int i = 0; i < MANY; i++) {
		fx_start(&f[i], argv);
		fx_expect_ready(&f[i]);
		o.pid = f[i].tpid;
		cr_assert_eq(mp_tracer_new(&o, &t[i]), 0);
		if (i == 0)
			one = own_tracepoint_links();
	}
	all = own_tracepoint_links();
	/* sys_enter, sys_exit, exec and rss_stat */
	cr_assert_eq(one, 4, "%zu tracepoint links for one target", one);
	cr_assert_eq(all, one, "%zu tracepoint links for %d targets, %zu for one", all, MANY, one);
	for (int i = 0; i < MANY; i++) {
		char line[256];

		fx_go(&f[i]);
		do
			cr_assert(fx_line(&f[i], line, sizeof(line)), "fixture died");
		while (strcmp(line, "done"));
	}
	for (int i = 0; i < MANY; i++) {
		size_t mine = 0;

		for (int k = 0; k < 20 && !mine; k++) {
			pump(t[i], &ev[i], 100);
			for (size_t j = 0; j < ev[i].n; j++)
				if (ev[i].ev[j].type == MP_RAW_ALLOC &&
				    ev[i].ev[j].fn == MP_FN_MMAP && ev[i].ev[j].size == 4 << 20)
					mine++;
		}
		cr_assert_eq(mine, 1, "target %d: %zu 4 MiB mappings", i, mine);
		for (size_t j = 0; j < ev[i].n; j++)
			cr_assert_eq(ev[i].ev[j].pid, (uint32_t)f[i].tpid,
				     "target %d (pid %d) got an event of pid %u", i, (int)f[i].tpid,
				     ev[i].ev[j].pid);
	}
	for (int i = 0; i < MANY; i++) {
		mp_tracer_free(t[i]);
		free(ev[i].ev);
		kill(f[i].pid, SIGKILL);
		waitpid(f[i].pid, &status, 0);
		close(f[i].to);
		close(f[i].from);
	}
	cr_assert_eq(own_tracepoint_links(), 0);
}
