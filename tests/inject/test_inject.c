// SPDX-License-Identifier: MIT
/*
 * Attach by pid at in-process cost (daemon/sources/injector.c,
 * libclient/got.c): targets started without memprof get libmemprof
 * injected by memprofd --pid (--tracer auto, the default), with the same
 * per-kernel figures as `memprof run` on the same work, on glibc and on
 * jemalloc; a second attach reuses the library; 100 attaches to a target
 * whose threads allocate or sit in system calls leave it running with
 * exact figures each time; and each reason to fall back to the eBPF path
 * leaves the target running and is in the profile's path line.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "profile.h"
#include "profile_pb.h"
#include "../common/helpers.h"

#define STEPS 3

struct fixture {
	pid_t pid;
	FILE *out; /* its stdout */
};

static char *envs[512];

/* Our environment, without LD_PRELOAD and the variables set here, plus
 * @extra (NULL-terminated "K=V"). */
static char **env_with(const char *const *extra)
{
	size_t n = 0;

	for (char **e = environ; *e && n + 16 < 512; e++)
		if (strncmp(*e, "LD_PRELOAD=", 11) && strncmp(*e, "MEMPROF_", 8))
			envs[n++] = *e;
	for (size_t i = 0; extra && extra[i]; i++)
		envs[n++] = (char *)extra[i];
	envs[n] = NULL;
	return envs;
}

static const char *inject_lib(void)
{
	const char *l = getenv("MEMPROF_TEST_INJECT_LIB");

	cr_assert_not_null(l, "MEMPROF_TEST_INJECT_LIB not set (run through meson test)");
	return l;
}

static char *kv(const char *k, const char *v)
{
	static char buf[16][4200];
	static int i;
	char *p = buf[i++ % 16];

	snprintf(p, 4200, "%s=%s", k, v);
	return p;
}

/* Spawns @argv with @env, its fd @which (1 or 2) a pipe whose read end is
 * returned; the child is killed if the test dies (no process outlives a
 * failed test to hold meson's pipes). */
static FILE *spawn_piped(char *const argv[], char **env, int which, pid_t *ret_pid)
{
	pid_t parent = getpid();
	int fd[2];
	FILE *f;

	cr_assert_eq(pipe2(fd, O_CLOEXEC), 0);
	*ret_pid = fork();
	cr_assert_geq(*ret_pid, 0);
	if (*ret_pid == 0) {
		if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent)
			_exit(126);
		if (dup2(fd[1], which) < 0)
			_exit(126);
		execve(argv[0], argv, env);
		_exit(127);
	}
	close(fd[1]);
	f = fdopen(fd[0], "r");
	cr_assert_not_null(f);
	return f;
}

/* @argv with @env, its stdout a pipe; waits for its first line, which
 * must start with "ready". */
static void fixture_start(struct fixture *f, char *const argv[], char **env)
{
	char line[256];

	f->out = spawn_piped(argv, env, 1, &f->pid);
	cr_assert_not_null(fgets(line, sizeof(line), f->out), "%s printed nothing", argv[0]);
	cr_assert(!strncmp(line, "ready", 5), "%s: %s", argv[0], line);
}

/* Reaps the fixture, which must exit 0; its last line in @last. */
static void fixture_end(struct fixture *f, char *last, size_t len)
{
	char line[256];
	int st;

	if (last)
		last[0] = '\0';
	while (fgets(line, sizeof(line), f->out))
		if (last)
			snprintf(last, len, "%s", line);
	fclose(f->out);
	cr_assert_eq(waitpid(f->pid, &st, 0), f->pid);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "fixture status 0x%x", st);
}

struct daemon {
	pid_t pid;
	FILE *err;
	char log[16384];
	size_t len;
};

/* memprofd --pid @pid -o @path -v [@a1 @a2 @a3] with @env, until it says
 * it attached. */
static void daemon_start(struct daemon *d, pid_t pid, const char *path, char **env, const char *a1,
			 const char *a2, const char *a3)
{
	char ps[32], line[1024];
	char *argv[16] = { mp_test_build_path("cli/memprofd"),
			   "--pid",
			   ps,
			   "-o",
			   (char *)path,
			   "--print",
			   "none",
			   "-v" };
	int n = 8;

	snprintf(ps, sizeof(ps), "%d", (int)pid);
	if (a1)
		argv[n++] = (char *)a1;
	if (a2)
		argv[n++] = (char *)a2;
	if (a3)
		argv[n++] = (char *)a3;
	argv[n] = NULL;
	d->len = 0;
	d->err = spawn_piped(argv, env, 2, &d->pid);
	for (;;) {
		cr_assert_not_null(fgets(line, sizeof(line), d->err),
				   "memprofd ended before attaching:\n%s", d->log);
		d->len += (size_t)snprintf(d->log + d->len, sizeof(d->log) - d->len, "%s", line);
		if (d->len >= sizeof(d->log))
			d->len = sizeof(d->log) - 1;
		if (strstr(line, "attached to pid"))
			break;
	}
}

static void daemon_end(struct daemon *d)
{
	char line[1024];
	int st;

	while (fgets(line, sizeof(line), d->err)) {
		d->len += (size_t)snprintf(d->log + d->len, sizeof(d->log) - d->len, "%s", line);
		if (d->len >= sizeof(d->log))
			d->len = sizeof(d->log) - 1;
	}
	fclose(d->err);
	cr_assert_eq(waitpid(d->pid, &st, 0), d->pid);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "memprofd status 0x%x:\n%s", st, d->log);
}

static void tmp_profile(char *path, size_t len)
{
	int fd;

	snprintf(path, len, "/tmp/memprof-inject-%d-XXXXXX", (int)getpid());
	fd = mkstemp(path);
	cr_assert_geq(fd, 0);
	close(fd);
}

static struct mp_profile *load(const char *path)
{
	struct mp_profile *p = NULL;
	const char *why = NULL;

	cr_assert_eq(mp_profile_load(path, &p, &why), 0, "loading %s: %s", path, why ? why : "");
	unlink(path);
	return p;
}

static void assert_mem(const struct mp_mem_stats *got, const struct mp_mem_stats *want,
		       const char *what)
{
	cr_assert(got->bytes_added == want->bytes_added &&
			  got->tensors_added == want->tensors_added &&
			  got->alloc_bytes == want->alloc_bytes &&
			  got->alloc_count == want->alloc_count &&
			  got->free_bytes == want->free_bytes &&
			  got->free_count == want->free_count,
		  "%s: got added=%lld tensors=%lld alloc=%llu/%llu free=%llu/%llu, want "
		  "added=%lld tensors=%lld alloc=%llu/%llu free=%llu/%llu",
		  what, (long long)got->bytes_added, (long long)got->tensors_added,
		  (unsigned long long)got->alloc_bytes, (unsigned long long)got->alloc_count,
		  (unsigned long long)got->free_bytes, (unsigned long long)got->free_count,
		  (long long)want->bytes_added, (long long)want->tensors_added,
		  (unsigned long long)want->alloc_bytes, (unsigned long long)want->alloc_count,
		  (unsigned long long)want->free_bytes, (unsigned long long)want->free_count);
}

/* One step of fixture-toy, per kernel (fixture_toy.c), times @n. */
static struct mp_mem_stats want_of(const char *kernel, uint64_t n)
{
	static const struct {
		const char *name;
		struct mp_mem_stats m;
	} w[] = {
		{ "conv", { 0, 0, 5096, 2, 5096, 2, 0, 0 } },
		/* realloc(NULL, 100): an allocation; realloc to 5000: the
		 * 100-byte block freed and a 5000-byte one allocated */
		{ "matmul", { 9216, 2, 14316, 4, 5100, 2, 0, 0 } },
		{ "ops", { 0, 0, 333, 1, 333, 1, 0, 0 } },
		{ "late", { 0, 0, 777, 1, 777, 1, 0, 0 } },
		{ "deep", { 0, 0, 999, 1, 999, 1, 0, 0 } },
		{ "release", { -9216, -2, 0, 0, 9216, 2, 0, 0 } },
	};
	for (size_t i = 0; i < sizeof(w) / sizeof(w[0]); i++)
		if (!strcmp(w[i].name, kernel)) {
			struct mp_mem_stats m = w[i].m;

			m.bytes_added *= (int64_t)n;
			m.tensors_added *= (int64_t)n;
			m.alloc_bytes *= n;
			m.alloc_count *= n;
			m.free_bytes *= n;
			m.free_count *= n;
			return m;
		}
	cr_assert_fail("no kernel %s", kernel);
	return (struct mp_mem_stats){ 0 };
}

static const struct mp_kernel *kernel(const struct mp_profile *p, const char *name)
{
	const struct mp_kernel *k = mp_profile_kernel(p, name);

	cr_assert_not_null(k, "no kernel %s", name);
	return k;
}

/* tests/inject/@exe THREADS STEPS (fixture-toy, or fixture-toy-jemalloc),
 * its markers through libmemprof, attached by memprofd --pid after
 * "ready". */
static struct mp_profile *toy_attached(const char *exe, const char *threads, char *log,
				       size_t loglen)
{
	char path[256], steps[16], exe_path[64];
	const char *fenv[] = { kv("MEMPROF_TOY_LIB", inject_lib()), NULL };
	const char *denv[] = { kv("MEMPROF_INJECT_LIB", inject_lib()), NULL };
	struct fixture f;
	struct daemon d;

	snprintf(steps, sizeof(steps), "%d", STEPS);
	snprintf(exe_path, sizeof(exe_path), "tests/inject/%s", exe);
	char *argv[] = { mp_test_build_path(exe_path), (char *)threads, steps, NULL };
	tmp_profile(path, sizeof(path));
	fixture_start(&f, argv, env_with(fenv));
	daemon_start(&d, f.pid, path, env_with(denv), NULL, NULL, NULL);
	kill(f.pid, SIGUSR1);
	fixture_end(&f, NULL, 0);
	daemon_end(&d);
	if (log)
		snprintf(log, loglen, "%s", d.log);
	return load(path);
}

/* The same under `memprof run` (libmemprof preloaded). */
static struct mp_profile *toy_run(const char *exe, const char *threads)
{
	char path[256], steps[16], line[256], exe_path[64];
	const char *fenv[] = { kv("MEMPROF_TOY_LIB", inject_lib()),
			       kv("MEMPROF_PRELOAD_LIB", inject_lib()), NULL };
	struct fixture f;

	snprintf(steps, sizeof(steps), "%d", STEPS);
	snprintf(exe_path, sizeof(exe_path), "tests/inject/%s", exe);
	tmp_profile(path, sizeof(path));
	char *argv[] = { mp_test_build_path("cli/memprof"),
			 "run",
			 "--tracer",
			 "inprocess",
			 "-o",
			 path,
			 "--print",
			 "none",
			 "--",
			 mp_test_build_path(exe_path),
			 (char *)threads,
			 steps,
			 NULL };
	fixture_start(&f, argv, env_with(fenv));
	/* memprof run attached before main: the fixture waits for SIGUSR1 */
	{
		char p[64];
		FILE *c;
		pid_t child = 0;

		/* the fixture is memprof run's child */
		snprintf(p, sizeof(p), "/proc/%d/task/%d/children", (int)f.pid, (int)f.pid);
		c = fopen(p, "re");
		cr_assert_not_null(c);
		cr_assert_eq(fscanf(c, "%d", &child), 1);
		fclose(c);
		kill(child, SIGUSR1);
	}
	while (fgets(line, sizeof(line), f.out))
		;
	fixture_end(&f, NULL, 0);
	return load(path);
}

static void assert_injected(const struct mp_profile *p, const char *log)
{
	cr_assert_eq(p->tracer_path, MP_PATH_INPROCESS, "path %u (%s):\n%s", p->tracer_path,
		     p->tracer_path_reason, log);
	cr_assert(p->injected, "not injected: %s", p->tracer_path_reason);
	cr_assert(!strncmp(p->tracer_path_reason, "injected by ptrace", 18), "reason: %s",
		  p->tracer_path_reason);
}

/* Every leaf kernel of fixture-toy: exact, and the same as under memprof
 * run. "deep" is a library loaded with RTLD_DEEPBIND, which binds malloc
 * to libc's own: libmemprof's dlopen patches its slots, injected or
 * preloaded, where libc's malloc is the one libmemprof forwards to. Where
 * it is not (jemalloc), the library keeps libc's, which the patch leaves
 * alone: blocks libc gave it must not reach jemalloc's free
 * (docs/TRACER.md). The loader's own
 * blocks ("load") are the loader's: preloaded, its malloc is libmemprof's;
 * injected, it keeps libc's. */
static void same_as_run(const char *exe, bool jemalloc)
{
	static const char *const kernels[] = { "conv", "matmul", "ops", "late", "release" };
	char log[16384];
	struct mp_profile *inj = toy_attached(exe, "2", log, sizeof(log));
	struct mp_profile *run = toy_run(exe, "2");
	struct mp_mem_stats want;

	assert_injected(inj, log);
	/* a sanitizer build's memprof run preloads nothing: it injects */
	cr_assert_eq(run->tracer_path, MP_PATH_INPROCESS);
	for (size_t i = 0; i < sizeof(kernels) / sizeof(kernels[0]); i++) {
		want = want_of(kernels[i], STEPS);
		assert_mem(&kernel(inj, kernels[i])->incl, &want, kernels[i]);
		assert_mem(&kernel(run, kernels[i])->incl, &want, kernels[i]);
		cr_assert_eq(kernel(inj, kernels[i])->calls, STEPS);
	}
	want = want_of("deep", jemalloc ? 0 : STEPS);
	assert_mem(&kernel(inj, "deep")->incl, &want, "deep (injected)");
	assert_mem(&kernel(run, "deep")->incl, &want,
		   run->injected ? "deep (memprof run, injected)" :
				   "deep (memprof run, preloaded)");
	/* the block allocated before the attach, freed after: unknown (and
	 * so are blocks a worker had in hand at the attach) */
	cr_assert_eq(kernel(inj, "old")->calls, 1);
	cr_assert_eq(kernel(inj, "old")->incl.free_count, 0);
	cr_assert_geq(inj->unknown_frees, 1);
	want = (struct mp_mem_stats){
		.bytes_added = -500, .tensors_added = -1, .free_bytes = 500, .free_count = 1
	};
	assert_mem(&kernel(run, "old")->incl, &want, "old (memprof run)");
	mp_profile_free(inj);
	mp_profile_free(run);
}

Test(inject, toy_on_glibc_as_under_memprof_run, .timeout = 240)
{
	mp_test_need_root("ptrace and BPF");
	same_as_run("fixture-toy", false);
}

Test(inject, toy_on_jemalloc_as_under_memprof_run, .timeout = 240)
{
	mp_test_need_root("ptrace and BPF");
	same_as_run("fixture-toy-jemalloc", true);
}

/* Every complete invocation of fixture-toy's leaf kernels in @p holds
 * exactly one step's blocks; the number of complete steps. */
static unsigned steps_exact(const struct mp_profile *p, bool deep_seen)
{
	static const char *const leaves[] = { "conv", "matmul", "ops", "late", "deep", "release" };
	unsigned complete = 0;

	for (uint32_t i = 0; i < p->n_invocations; i++) {
		const struct mp_invocation *inv = &p->invocations[i];
		const char *name = p->names[inv->name];

		/* blocks of threads without a kernel of their own are charged
		 * to the kernel begun last (docs/PROFILE.md): the workers'
		 * before they opened theirs */
		if (inv->flags || inv->cross_thread_allocs)
			continue;
		/* a step under way at the attach: its leaves may free what
		 * was allocated before (unknown frees) */
		if (inv->parent == MP_NONE || inv->parent >= p->n_invocations ||
		    p->invocations[inv->parent].flags)
			continue;
		if (!strcmp(name, "release"))
			complete++;
		for (size_t l = 0; l < sizeof(leaves) / sizeof(leaves[0]); l++)
			if (!strcmp(name, leaves[l])) {
				struct mp_mem_stats want =
					want_of(name, deep_seen || strcmp(name, "deep"));

				assert_mem(&inv->incl, &want, name);
			}
	}
	return complete;
}

/* How many executable mappings of @lib the process has. */
static int lib_mappings(pid_t pid, const char *lib)
{
	char path[64], line[4352], real[4096];
	int n = 0;
	FILE *f;

	cr_assert_not_null(realpath(lib, real));
	snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
	f = fopen(path, "re");
	cr_assert_not_null(f);
	while (fgets(line, sizeof(line), f))
		if (strstr(line, " r-xp ") && strstr(line, real))
			n++;
	fclose(f);
	return n;
}

/* @n attaches of 0.1 s each to tests/inject/@exe with 8 threads (4
 * allocating in a loop, 4 blocked in read()) and steps running every
 * millisecond, with @preload (NULL: none) preloaded; @deep: libtoydeep
 * takes the process's malloc (not loaded with RTLD_DEEPBIND, or it binds
 * the process's allocator itself). The first attach loads libmemprof,
 * every later one finds it; none loses a record, and each gives exact
 * figures for every step it saw whole; the target never stops running and ends cleanly (exit 0:
 * an ASan-built target aborts on a block freed by another allocator than
 * the one that made it, and on a leak). */
static void stress(const char *exe, const char *preload, bool deep, int n)
{
	const char *fenv[] = { kv("MEMPROF_TOY_LIB", inject_lib()), "MEMPROF_TOY_NOLOAD=1",
			       preload ? kv("LD_PRELOAD", preload) : NULL, NULL, NULL };
	const char *denv[] = { kv("MEMPROF_INJECT_LIB", inject_lib()), NULL };
	char exe_path[64], path[256], last[256];

	/* ASan refuses RTLD_DEEPBIND */
	if (strstr(exe, "asan"))
		fenv[preload ? 3 : 2] = "MEMPROF_TOY_NODEEP=1";
	snprintf(exe_path, sizeof(exe_path), "tests/inject/%s", exe);
	char *argv[] = { mp_test_build_path(exe_path), "8", "0", "loop", NULL };
	unsigned long steps = 0, seen = 0;
	struct fixture f;

	fixture_start(&f, argv, env_with(fenv));
	for (int i = 0; i < n; i++) {
		struct daemon d;
		struct mp_profile *p;

		tmp_profile(path, sizeof(path));
		daemon_start(&d, f.pid, path, env_with(denv), "--duration", "0.1", NULL);
		daemon_end(&d);
		p = load(path);
		cr_assert_eq(p->tracer_path, MP_PATH_INPROCESS, "attach %d: %s\n%s", i,
			     p->tracer_path_reason, d.log);
		cr_assert(p->injected);
		cr_assert_eq(!!strstr(p->tracer_path_reason, "(already loaded)"), i > 0,
			     "attach %d: %s", i, p->tracer_path_reason);
		/* precise mode loses nothing while the daemon lives: a writer
		 * waits as long as it holds the ring's lease */
		cr_assert_eq(p->drops_heap, 0, "attach %d: %" PRIu64 " heap records dropped", i,
			     p->drops_heap);
		seen += steps_exact(p, deep);
		mp_profile_free(p);
		cr_assert_eq(lib_mappings(f.pid, inject_lib()), 1);
	}
	kill(f.pid, SIGTERM);
	fixture_end(&f, last, sizeof(last));
	cr_assert_eq(sscanf(last, "done %lu", &steps), 1, "fixture: %s", last);
	cr_log_info("%d attaches, %lu complete steps checked", n, seen);
	cr_assert_gt(seen, (unsigned long)n / 2, "%lu complete steps in %d attaches", seen, n);
	cr_assert_geq(steps, seen);
}

Test(inject, stress_100_attaches_to_a_busy_target_on_glibc, .timeout = 600)
{
	mp_test_need_root("ptrace and BPF");
	stress("fixture-toy", NULL, true, 100);
}

Test(inject, stress_attaches_to_a_busy_asan_built_target, .timeout = 300)
{
	mp_test_need_root("ptrace and BPF");
	stress("fixture-toy-asan", NULL, true, 25);
}

Test(inject, stress_attaches_to_a_busy_target_on_jemalloc, .timeout = 300)
{
	mp_test_need_root("ptrace and BPF");
	stress("fixture-toy", getenv("MEMPROF_TEST_JEMALLOC"), false, 25);
}

/* @fixture (fixture-plain's protocol: "ready", SIGUSR1, work, exit 0)
 * with @fenv, attached with @denv (after the test seized it when
 * @traced); it ran on and exited cleanly. The daemon's log in @log. */
static struct mp_profile *plain_attached(const char *fixture, const char *const *fenv,
					 const char *const *denv, bool traced, char *log,
					 size_t loglen)
{
	char *argv[] = { mp_test_build_path(fixture), NULL };
	char path[256];
	struct fixture f;
	struct daemon d;

	tmp_profile(path, sizeof(path));
	fixture_start(&f, argv, env_with(fenv));
	if (traced)
		cr_assert_eq(ptrace(PTRACE_SEIZE, f.pid, NULL, NULL), 0, "seize: %m");
	daemon_start(&d, f.pid, path, env_with(denv), NULL, NULL, NULL);
	kill(f.pid, SIGUSR1);
	fixture_end(&f, NULL, 0);
	daemon_end(&d);
	snprintf(log, loglen, "%s", d.log);
	return load(path);
}

/* A fallback: @fixture reaches the eBPF path with @why in the profile,
 * runs on and exits cleanly, and its 700-byte block is seen. */
static void falls_back(const char *fixture, const char *const *fenv, const char *const *denv,
		       const char *why, bool traced)
{
	static const struct mp_mem_stats plain_700 = {
		.alloc_bytes = 700, .alloc_count = 1, .free_bytes = 700, .free_count = 1
	};
	char want[512], log[16384];
	struct mp_profile *p = plain_attached(fixture, fenv, denv, traced, log, sizeof(log));

	cr_assert_eq(p->tracer_path, MP_PATH_BPF, "%s:\n%s", p->tracer_path_reason, log);
	cr_assert_not(p->injected);
	snprintf(want, sizeof(want), "not injected: %s", why);
	cr_assert(!strncmp(p->tracer_path_reason, want, strlen(want)), "reason: %s, want %s",
		  p->tracer_path_reason, want);
	assert_mem(&p->mem, &plain_700, fixture);
	mp_profile_free(p);
}

Test(inject, a_static_program_falls_back, .timeout = 120)
{
	const char *denv[] = { kv("MEMPROF_INJECT_LIB", inject_lib()), NULL };

	mp_test_need_root("ptrace and BPF");
	falls_back("tests/inject/fixture-static", NULL, denv,
		   "a static executable: no dynamic loader to load libmemprof", false);
}

Test(inject, a_traced_program_falls_back, .timeout = 120)
{
	const char *denv[] = { kv("MEMPROF_INJECT_LIB", inject_lib()), NULL };
	char why[128];

	mp_test_need_root("ptrace and BPF");
	snprintf(why, sizeof(why), "another tracer holds it (pid %d)", (int)getpid());
	falls_back("tests/e2e/fixture-plain", NULL, denv, why, true);
}

Test(inject, yama_forbidding_ptrace_falls_back, .timeout = 120)
{
	char dir[256], scope[300];
	FILE *f;

	mp_test_need_root("ptrace and BPF");
	mp_test_tmpdir(dir, sizeof(dir), "yama");
	snprintf(scope, sizeof(scope), "%s/ptrace_scope", dir);
	f = fopen(scope, "w");
	cr_assert_not_null(f);
	fputs("3\n", f);
	fclose(f);
	/* the real setting cannot be lowered once 3: read from a file */
	const char *denv[] = { kv("MEMPROF_INJECT_LIB", inject_lib()),
			       kv("MEMPROFD_TEST_YAMA_SCOPE", scope), NULL };
	falls_back("tests/e2e/fixture-plain", NULL, denv,
		   "ptrace is forbidden (Yama ptrace_scope is 3)", false);
	mp_test_rmtree(dir);
}

Test(inject, seccomp_blocking_the_loader_falls_back, .timeout = 120)
{
	const char *denv[] = { kv("MEMPROF_INJECT_LIB", inject_lib()), NULL };

	mp_test_need_root("ptrace and BPF");
	falls_back("tests/inject/fixture-seccomp", NULL, denv,
		   "seccomp blocks memfd_create, which the loader needs", false);
}

/* A library whose constructor sleeps 3 s: dlopen() does not return within
 * the bound (300 ms, then 300 ms with the other threads running); the
 * thread is put back where it was and the process runs on. */
Test(inject, a_call_that_does_not_return_falls_back, .timeout = 120)
{
	const char *denv[] = { kv("MEMPROF_INJECT_LIB",
				  mp_test_build_path("tests/inject/libslowinit.so")),
			       "MEMPROFD_INJECT_TIMEOUT_MS=300", NULL };

	mp_test_need_root("ptrace and BPF");
	falls_back("tests/e2e/fixture-plain", NULL, denv, "dlopen() did not return within 300 ms",
		   false);
}

/* The first attach to a process without libmemprof loads it; a second
 * finds it there and loads nothing; both see the process's blocks. */
Test(inject, a_second_attach_reuses_the_library, .timeout = 120)
{
	const char *denv[] = { kv("MEMPROF_INJECT_LIB", inject_lib()), NULL };
	char *argv[] = { mp_test_build_path("tests/inject/fixture-toy"), "2", "0", "loop", NULL };
	char path[256], last[256];
	struct fixture f;

	mp_test_need_root("ptrace and BPF");
	fixture_start(&f, argv, env_with(NULL));
	cr_assert_eq(lib_mappings(f.pid, inject_lib()), 0);
	for (int i = 0; i < 2; i++) {
		struct daemon d;
		struct mp_profile *p;

		tmp_profile(path, sizeof(path));
		daemon_start(&d, f.pid, path, env_with(denv), "--duration", "0.3", NULL);
		daemon_end(&d);
		p = load(path);
		assert_injected(p, d.log);
		cr_assert_eq(!!strstr(p->tracer_path_reason, "(already loaded)"), i == 1, "%s",
			     p->tracer_path_reason);
		cr_assert_gt(p->mem.alloc_count, 0);
		cr_assert_eq(lib_mappings(f.pid, inject_lib()), 1);
		mp_profile_free(p);
	}
	kill(f.pid, SIGTERM);
	fixture_end(&f, last, sizeof(last));
	cr_assert(!strncmp(last, "done ", 5), "%s", last);
}

/* A non-PIE program that takes malloc's address (Debian's python3 does):
 * malloc is its own PLT entry, which the injector must see through. */
Test(inject, a_non_pie_program_taking_mallocs_address, .timeout = 120)
{
	static const struct mp_mem_stats want = {
		.alloc_bytes = 1000, .alloc_count = 2, .free_bytes = 1000, .free_count = 2
	};
	const char *denv[] = { kv("MEMPROF_INJECT_LIB", inject_lib()), NULL };
	char log[16384];
	struct mp_profile *p;

	mp_test_need_root("ptrace and BPF");
	p = plain_attached("tests/inject/fixture-nopie", NULL, denv, false, log, sizeof(log));
	assert_injected(p, log);
	assert_mem(&p->mem, &want, "fixture-nopie");
	cr_assert_eq(p->unknown_frees, 1);
	mp_profile_free(p);
}
