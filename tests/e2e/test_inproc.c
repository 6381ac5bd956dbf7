// SPDX-License-Identifier: MIT
/*
 * The in-process allocation path on real processes (docs/TRACER.md "Two
 * allocation paths"): a program not linked with libmemprof under `memprof
 * run` (preloaded), the malloc family and realloc cases over glibc,
 * jemalloc, tcmalloc and mimalloc with identical figures on both paths,
 * C++ new/delete, 1,000 short threads, fork with and without exec,
 * dlopen'd code, attach/detach/re-attach. Registered once per path
 * (MEMPROF_TEST_TRACER, tests/tracer_env.h).
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "window.h"
#include "profile.h"
#include "profile_pb.h"
#include "../tracer_env.h"
#include "../common/helpers.h"

extern char **environ;

static const char *root(void)
{
	const char *r = getenv("MEMPROF_BUILD_ROOT");

	cr_assert_not_null(r, "MEMPROF_BUILD_ROOT not set");
	return r;
}

static char *path_of(const char *rel)
{
	static char bufs[8][4096];
	static int i;
	char *p = bufs[i++ % 8];

	snprintf(p, 4096, "%s/%s", root(), rel);
	return p;
}

static void need_root(void)
{
	cr_assert_eq(geteuid(), 0, "the in-process tests load BPF: run as root");
}

/* Environment: ours, with LD_PRELOAD=@preload when given. */
static char **env_with(const char *preload)
{
	static char *env[512], pre[4200];
	size_t n = 0;

	for (char **e = environ; *e && n + 2 < 512; e++)
		if (strncmp(*e, "LD_PRELOAD=", 11))
			env[n++] = *e;
	if (preload) {
		snprintf(pre, sizeof(pre), "LD_PRELOAD=%s", preload);
		env[n++] = pre;
	}
	env[n] = NULL;
	return env;
}

/* Reaps @pid (@what): its exit status (a death by signal fails). */
static int wait_exit(pid_t pid, const char *what)
{
	int st;

	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFEXITED(st), "%s died by signal %d", what, WTERMSIG(st));
	return WEXITSTATUS(st);
}

static int spawn_wait(char *const argv[], char **envp)
{
	pid_t pid;

	cr_assert_eq(posix_spawn(&pid, argv[0], NULL, NULL, argv, envp), 0, "spawn %s", argv[0]);
	return wait_exit(pid, argv[0]);
}

static struct mp_profile *load(const char *path)
{
	struct mp_profile *p = NULL;
	const char *why = NULL;

	cr_assert_eq(mp_profile_load(path, &p, &why), 0, "loading %s: %s", path, why ? why : "");
	unlink(path);
	return p;
}

/* Starts `memprof run [--tracer T] -o @path --print none -- @fixture ARGS`
 * (the suite's path when @tracer is NULL; the ARGS from @args up to a
 * NULL, 4 at most), with @preload (an allocator) preloaded after
 * libmemprof; its pid. */
static pid_t run_start(const char *tracer, const char *preload, char *path, const char *fixture,
		       const char *const *args)
{
	char *argv[16];
	int n = 0;
	pid_t pid;

	argv[n++] = path_of("cli/memprof");
	argv[n++] = "run";
	if (tracer && !strcmp(tracer, "no-preload")) {
		argv[n++] = "--no-preload"; /* the eBPF path's probes on libc's */
	} else if (tracer) {
		argv[n++] = "--tracer";
		argv[n++] = (char *)tracer;
	}
	argv[n++] = "-o";
	argv[n++] = path;
	argv[n++] = "--print";
	argv[n++] = "none";
	argv[n++] = "--";
	argv[n++] = path_of(fixture);
	for (int i = 0; args[i] && i < 4; i++)
		argv[n++] = (char *)args[i];
	argv[n] = NULL;
	cr_assert_eq(posix_spawn(&pid, argv[0], NULL, NULL, tracer ? argv : mp_test_argv(argv),
				 env_with(preload)),
		     0, "spawn %s", argv[0]);
	return pid;
}

/* `memprof run -o TMP [--tracer T] -- fixture-inproc A1 A2` (see
 * run_start(); @a2 only after @a1) to its end: the profile. */
static struct mp_profile *run(const char *tracer, const char *preload, const char *fixture,
			      const char *a1, const char *a2)
{
	char path[] = "/tmp/mp-inproc-XXXXXX";
	int fd = mkstemp(path);
	pid_t pid;

	cr_assert_geq(fd, 0);
	close(fd);
	pid = run_start(tracer, preload, path, fixture, (const char *[]){ a1, a2, NULL });
	cr_assert_eq(wait_exit(pid, "memprof run"), 0, "memprof run %s %s", fixture, a1 ? a1 : "");
	return load(path);
}

static const char *suite_path(void)
{
	const char *t = getenv("MEMPROF_TEST_TRACER");

	return t && *t ? t : "inprocess";
}

static const struct mp_kernel *kernel(const struct mp_profile *p, const char *name)
{
	const struct mp_kernel *k = mp_profile_kernel(p, name);

	cr_assert_not_null(k, "no kernel %s", name);
	return k;
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
		  "%s: got added=%" PRId64 " tensors=%" PRId64 " alloc=%" PRIu64 "/%" PRIu64
		  " free=%" PRIu64 "/%" PRIu64 ", want added=%" PRId64 " tensors=%" PRId64
		  " alloc=%" PRIu64 "/%" PRIu64 " free=%" PRIu64 "/%" PRIu64,
		  what, got->bytes_added, got->tensors_added, got->alloc_bytes, got->alloc_count,
		  got->free_bytes, got->free_count, want->bytes_added, want->tensors_added,
		  want->alloc_bytes, want->alloc_count, want->free_bytes, want->free_count);
}

/* Exact, on the suite's path, and nothing dropped. */
static void assert_exact(const struct mp_profile *p)
{
	cr_assert_str_eq(mp_tracer_path_name(p->tracer_path), suite_path());
	cr_assert_eq(p->drops_heap, 0, "heap records dropped: %" PRIu64, p->drops_heap);
	cr_assert_eq(p->drops_ring, 0);
	cr_assert_eq(p->drops_bpf, 0);
}

/* 100 -> 200 -> 50, realloc(NULL, 30), realloc(q, 0), a failed realloc,
 * reallocarray to 80 (kept), an overflowing reallocarray, calloc(4, 25),
 * posix_memalign 64, aligned_alloc 128, memalign 48, valloc 10, pvalloc 10,
 * malloc(0), all freed but the 80 bytes. */
static const struct mp_mem_stats matrix_glibc = {
	.bytes_added = 80,
	.tensors_added = 1,
	.alloc_bytes = 100 + 200 + 50 + 30 + 80 + 100 + 64 + 128 + 48 + 10 + 10 + 0,
	.alloc_count = 12,
	.free_bytes = 100 + 200 + 30 + 50 + 100 + 64 + 128 + 48 + 10 + 10 + 0,
	.free_count = 11,
};

Test(inproc, program_not_linked_with_libmemprof_realloc_matrix_exact)
{
	struct mp_profile *p;

	need_root();
	p = run(NULL, NULL, "tests/e2e/fixture-inproc", "matrix", NULL);
	assert_exact(p);
	assert_mem(&kernel(p, "matrix")->incl, &matrix_glibc, "matrix");
	cr_assert_eq(p->unknown_frees, 0);
	mp_profile_free(p);
}

/* The same program over every allocator Debian ships, preloaded after
 * libmemprof (which forwards to it): both paths give the same figures. */
Test(inproc, allocators_give_identical_figures_on_both_paths, .timeout = 120)
{
	static const char *const libs[] = { NULL, "libjemalloc.so.2", "libtcmalloc_minimal.so.4",
					    "libmimalloc.so.2" };
	char lib[4096];

	need_root();
	for (size_t i = 0; i < sizeof(libs) / sizeof(libs[0]); i++) {
		struct mp_profile *a, *b;

		if (libs[i])
			snprintf(lib, sizeof(lib), "%s/%s", ALLOC_LIBDIR, libs[i]);
		a = run("inprocess", libs[i] ? lib : NULL, "tests/e2e/fixture-inproc", "matrix",
			NULL);
		b = run("bpf", libs[i] ? lib : NULL, "tests/e2e/fixture-inproc", "matrix", NULL);
		cr_assert_eq(a->tracer_path, MP_PATH_INPROCESS);
		cr_assert_eq(b->tracer_path, MP_PATH_BPF);
		cr_assert_eq(a->drops_heap, 0);
		assert_mem(&kernel(a, "matrix")->incl, &kernel(b, "matrix")->incl,
			   libs[i] ? libs[i] : "glibc");
		if (!libs[i])
			assert_mem(&kernel(a, "matrix")->incl, &matrix_glibc, "glibc");
		/* every allocator keeps the 80-byte block and frees the rest */
		cr_assert_eq(kernel(a, "matrix")->incl.bytes_added, 80, "%s",
			     libs[i] ? libs[i] : "glibc");
		mp_profile_free(a);
		mp_profile_free(b);
	}
}

Test(inproc, cxx_new_and_delete)
{
	struct mp_profile *p;
	const struct mp_mem_stats want = { .bytes_added = 100,
					   .tensors_added = 1,
					   .alloc_bytes = 100 + 24 + 40,
					   .alloc_count = 3,
					   .free_bytes = 64,
					   .free_count = 2 };

	need_root();
	p = run(NULL, NULL, "tests/e2e/fixture-cxx", NULL, NULL);
	assert_exact(p);
	assert_mem(&kernel(p, "cxx")->incl, &want, "cxx");
	mp_profile_free(p);
}

Test(inproc, thousand_short_threads, .timeout = 120)
{
	struct mp_profile *p;
	const struct mp_kernel *k;
	const struct mp_mem_stats want = { .bytes_added = 7000,
					   .tensors_added = 1000,
					   .alloc_bytes = 107000,
					   .alloc_count = 2000,
					   .free_bytes = 100000,
					   .free_count = 1000 };

	need_root();
	p = run(NULL, NULL, "tests/e2e/fixture-inproc", "threads", "1000");
	assert_exact(p);
	k = kernel(p, "t");
	cr_assert_eq(k->calls, 1000);
	assert_mem(&k->incl, &want, "t");
	mp_profile_free(p);
}

/* 16 threads that start, allocate and exit together: no unknown free
 * and no corruption on either path, and every block freed. On the eBPF
 * path (a program started without libmemprof: the probes on libc's, and
 * no markers) glibc's flush of each exiting thread's cache goes through
 * free's entry, where the uprobe sees frees of blocks the program had
 * freed already (and of the cache itself, never seen allocated): counted
 * apart as the allocator's own, never as unknown frees or refused
 * records. */
Test(inproc, threads_exiting_together_are_not_corruption, .timeout = 120)
{
	const struct mp_mem_stats want = { .bytes_added = 0,
					   .tensors_added = 0,
					   .alloc_bytes = 16 * 10 * 30616,
					   .alloc_count = 16 * 640,
					   .free_bytes = 16 * 10 * 30616,
					   .free_count = 16 * 640 };
	struct mp_profile *p[2];

	need_root();
	p[0] = run("inprocess", NULL, "tests/e2e/fixture-inproc", "together", "16");
	p[1] = run("no-preload", NULL, "tests/e2e/fixture-inproc", "together", "16");
	for (int i = 0; i < 2; i++) {
		const char *path = i ? "eBPF" : "in-process";

		cr_assert_eq(p[i]->tracer_path, i ? MP_PATH_BPF : MP_PATH_INPROCESS);
		cr_assert_eq(p[i]->drops_heap + p[i]->drops_bpf, 0, "%s: drops", path);
		cr_expect_eq(p[i]->unknown_frees, 0, "%s: %" PRIu64 " unknown frees", path,
			     p[i]->unknown_frees);
		cr_expect_eq(p[i]->corruption, 0, "%s: corruption %#x (%" PRIu64 " freeUnmapped)",
			     path, p[i]->corruption, p[i]->rejected[MP_REJECT_FREE_UNMAPPED]);
		/* the workers' blocks, and a few of the runtime's own */
		cr_expect_geq(p[i]->mem.alloc_count, want.alloc_count, "%s", path);
		cr_expect_leq(p[i]->mem.tensors_added, 16, "%s: %" PRId64 " blocks left", path,
			      p[i]->mem.tensors_added);
	}
	assert_mem(&kernel(p[0], "w")->incl, &want, "in-process");
	cr_assert_eq(kernel(p[0], "w")->calls, 16);
	cr_expect_eq(p[0]->internal_frees, 0);
	/* each thread's cache holds blocks of some of its 64 sizes */
	cr_expect_gt(p[1]->internal_frees, 16, "eBPF: %" PRIu64 " of the allocator's own frees",
		     p[1]->internal_frees);
	mp_profile_free(p[0]);
	mp_profile_free(p[1]);
}

/* The child's 10,000 allocations (before and after exec) never reach the
 * parent's profile: it gets a fresh ring (or none) and a dormant
 * interposer. */
static void forked(const char *how)
{
	struct mp_profile *p;
	const struct mp_mem_stats want = {
		.bytes_added = 1024, .tensors_added = 2, .alloc_bytes = 1024, .alloc_count = 2
	};

	need_root();
	p = run(NULL, NULL, "tests/e2e/fixture-inproc", how, NULL);
	assert_exact(p);
	assert_mem(&kernel(p, "parent")->incl, &want, how);
	cr_assert_lt(p->mem.alloc_count, 10000, "%s: the child's allocations were traced", how);
	mp_profile_free(p);
}

Test(inproc, fork_child_does_not_write_into_the_parents_ring)
{
	forked("fork");
}

Test(inproc, fork_exec_child_does_not_write_into_the_parents_ring)
{
	forked("forkexec");
}

Test(inproc, dlopened_code_allocating)
{
	struct mp_profile *p;
	const struct mp_mem_stats want = { .bytes_added = 222,
					   .tensors_added = 1,
					   .alloc_bytes = 555,
					   .alloc_count = 2,
					   .free_bytes = 333,
					   .free_count = 1 };
	bool owner = false;

	need_root();
	p = run(NULL, NULL, "tests/e2e/fixture-inproc", "dlopen",
		path_of("tests/e2e/libowner_a.so"));
	assert_exact(p);
	assert_mem(&kernel(p, "dl")->incl, &want, "dl");
	/* the caller (in the dlopen'd library) is the owner */
	for (uint32_t i = 0; i < p->n_owners; i++)
		if (!strcmp(p->owners[i].name, "libowner_a.so") &&
		    p->owners[i].mem.alloc_bytes >= 555)
			owner = true;
	cr_assert(owner, "no owner libowner_a.so with the dlopen'd code's allocations");
	mp_profile_free(p);
}

/* A deep-bound library whose process exits right after calling it: its
 * allocations are seen on both paths (the in-process one patches its
 * slots) and charged to it, by the loader's notice of the load, though
 * /proc no longer shows it when they are read. */
Test(inproc, library_of_a_process_that_exits_at_once_owns_its_bytes)
{
	const char *lib = path_of("tests/e2e/libowner_a.so");
	const struct mp_mem_stats want = { .bytes_added = 222,
					   .tensors_added = 1,
					   .alloc_bytes = 555,
					   .alloc_count = 2,
					   .free_bytes = 333,
					   .free_count = 1 };
	struct mp_profile *p;
	bool object = false;
	uint32_t a;

	need_root();
	p = run(NULL, NULL, "tests/e2e/fixture-inproc", "dlexit", lib);
	assert_exact(p);
	assert_mem(&kernel(p, "dl")->incl, &want, "dl");
	for (a = 0; a < p->n_owners && strcmp(p->owners[a].name, "libowner_a.so"); a++)
		;
	cr_assert_lt(a, p->n_owners, "no owner libowner_a.so");
	cr_assert_eq(p->owners[a].mem.alloc_bytes, 555);
	cr_assert_eq(p->owners[a].mem.alloc_count, 2);
	/* every allocation of the run has a named owner */
	cr_assert_eq(p->owners[MP_OWNER_UNKNOWN].mem.alloc_bytes, 0, "%llu B unowned",
		     (unsigned long long)p->owners[MP_OWNER_UNKNOWN].mem.alloc_bytes);
	for (uint32_t i = 0; i < p->n_objects; i++)
		if (!strcmp(p->objects[i].path, lib))
			object = true;
	cr_assert(object, "%s not in the profile's objects", lib);
	/* its slots were patched: nothing is past the interposer */
	cr_assert_eq(p->unseen_objects, 0);
	mp_profile_free(p);
}

/* An object that calls glibc's allocator by its own names: what is traced
 * (the interposer; the eBPF path's probes, on libmemprof's functions where
 * it is preloaded) cannot see its 4000 B, and the profile names it. The
 * probes on libc's own malloc see the call (__libc_malloc is malloc). */
static void past_the_traced_functions(const char *tracer, bool seen)
{
	const char *lib = path_of("tests/e2e/libdirect.so");
	struct mp_profile *p = run(tracer, NULL, "tests/e2e/fixture-inproc", "direct", lib);
	uint64_t direct = 0;
	char want[512];

	assert_exact(p);
	/* without libmemprof no kernel: the library's own blocks */
	for (uint32_t i = 0; i < p->n_owners; i++)
		if (!strcmp(p->owners[i].name, "libdirect.so"))
			direct = p->owners[i].mem.alloc_bytes;
	cr_assert_eq(direct, seen ? 4000 : 0);
	if (!seen) {
		cr_assert_eq(kernel(p, "direct")->incl.alloc_count, 1);
		cr_assert_eq(kernel(p, "direct")->incl.alloc_bytes, 100);
	}
	cr_assert_eq(p->unseen_objects, seen ? 0 : 1);
	if (!seen) {
		snprintf(want, sizeof(want), "%s: __libc_", lib);
		cr_assert_eq(p->n_unseen_names, 1);
		cr_assert(!strncmp(p->unseen_names[0], want, strlen(want)), "%s",
			  p->unseen_names[0]);
		cr_assert(strstr(p->unseen_names[0], "-> libc.so.6"), "%s", p->unseen_names[0]);
	}
	mp_profile_free(p);
}

Test(inproc, an_object_past_the_traced_functions_is_named)
{
	need_root();
	past_the_traced_functions(NULL, false);
	if (!strcmp(suite_path(), "bpf"))
		past_the_traced_functions("no-preload", true);
}

/* fixture-inproc race N: every mmap and munmap in "map" (in its mapping
 * figures, none in its heap figures), its 100-byte blocks there too, each
 * 7-byte block in "heap", exact. */
#define RACE_N 100000
/* Against a stopped daemon: long enough for several stops wherever the
 * unstopped run takes a fraction of a second. */
#define RACE_N_STOPPED 400000
#define STR_(x) #x
#define STR(x) STR_(x)

static void assert_race(const struct mp_profile *p, uint64_t n)
{
	const struct mp_mem_stats map = { .alloc_bytes = n * 100,
					  .alloc_count = n,
					  .free_bytes = n * 100,
					  .free_count = n },
				  heap = { .alloc_bytes = n * 7,
					   .alloc_count = n,
					   .free_bytes = n * 7,
					   .free_count = n };

	assert_exact(p);
	cr_assert_eq(kernel(p, "map")->calls, n);
	cr_assert_eq(kernel(p, "heap")->calls, n);
	const struct mp_map_stats *m = &kernel(p, "map")->maps, *h = &kernel(p, "heap")->maps;

	assert_mem(&kernel(p, "map")->incl, &map, "map");
	assert_mem(&kernel(p, "heap")->incl, &heap, "heap");
	cr_assert(m->alloc_bytes == n * 65536 && m->alloc_count == n &&
			  m->free_bytes == n * 65536 && m->free_count == n,
		  "map: mapped %" PRIu64 " B in %" PRIu64 ", unmapped %" PRIu64 " B in %" PRIu64,
		  m->alloc_bytes, m->alloc_count, m->free_bytes, m->free_count);
	cr_assert(h->alloc_count == 0 && h->free_count == 0, "a mapping charged to \"heap\"");
	cr_assert_geq(p->maps.alloc_count, n);
	cr_assert_lt(p->peak_bytes, 65536, "a mapping in the heap peak");
}

/* Ring records are released as soon as the BPF ring buffer and every ring
 * have been read past them (docs/RING.md "Consumer: how far the rings have
 * been read"), no longer 10 ms later: each mmap and munmap of the syscall
 * tracepoints still lands in the kernel whose ring records bracket it,
 * 100,000 times, while the daemon drains both streams every 0.5 ms. Had a
 * ring record gone to the correlator before a BPF event stamped earlier,
 * a mapping would count outside "map" (or in "heap"). */
Test(inproc, syscall_events_stay_inside_the_ring_kernels_racing_them, .timeout = 120)
{
	struct mp_profile *p;

	need_root();
	p = run(NULL, NULL, "tests/e2e/fixture-inproc", "race", STR(RACE_N));
	assert_race(p, RACE_N);
	mp_profile_free(p);
}

/* The same race against a daemon that falls far behind: `memprof run` is
 * stopped (SIGSTOP) for 300 ms at a time while the target runs, so that
 * each time it resumes its ring holds a full ring of records stamped
 * 300 ms ago (the producer waits for space, precise mode) and its BPF ring
 * buffer the mmaps of the same moments. A drain reads 8,192 ring records at
 * most: a rule that releases the BPF events past ring records not read yet
 * because the daemon is more than some time behind (the floor of ten lags,
 * 100 ms, before session 7) can charge the mmaps of the unread kernels
 * outside "map" (with that floor: 3 of 10 runs failed here, ~3,000 mmaps
 * each, and the unit test session-release pins the rule). Only a ring that
 * makes no progress may be passed (docs/RING.md "Consumer: how far the
 * rings have been read"). In-process path only (on the eBPF path the stops
 * would overflow the BPF ring buffer). */
Test(inproc, syscall_events_stay_inside_their_kernels_behind_a_stopped_daemon, .timeout = 120)
{
	/* running long enough to catch up (a full ring and the BPF
	 * events of its kernels), stopped for less than the producer's wait
	 * (1 s, precise mode), from past the daemon's start (BPF set-up) */
	struct timespec run_for = { .tv_nsec = 400 * 1000 * 1000 },
			stop_for = { .tv_nsec = 300 * 1000 * 1000 },
			start = { .tv_nsec = 500 * 1000 * 1000 };
	char path[] = "/tmp/mp-inproc-XXXXXX";
	struct mp_profile *p;
	int fd, st, stops = 0;
	pid_t pid;

	need_root();
	if (strcmp(suite_path(), "inprocess"))
		return;
	fd = mkstemp(path);
	cr_assert_geq(fd, 0);
	close(fd);
	pid = run_start("inprocess", NULL, path, "tests/e2e/fixture-inproc",
			(const char *[]){ "race", STR(RACE_N_STOPPED), NULL });
	nanosleep(&start, NULL);
	for (;;) {
		pid_t w;

		nanosleep(&run_for, NULL);
		w = waitpid(pid, &st, WNOHANG);
		cr_assert_geq(w, 0);
		if (w == pid)
			break;
		cr_assert_eq(kill(pid, SIGSTOP), 0);
		nanosleep(&stop_for, NULL);
		cr_assert_eq(kill(pid, SIGCONT), 0);
		stops++;
	}
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "memprof run status %d", st);
	p = load(path);
	cr_assert_gt(stops, 2, "%d stops", stops);
	assert_race(p, RACE_N_STOPPED);
	mp_profile_free(p);
}

/* A running process with libmemprof preloaded: attach, detach, attach
 * again. Each session sees its own kernels exactly (one invocation may be
 * cut by the attach and one by the detach, each flagged). */
Test(inproc, attach_detach_reattach, .timeout = 120)
{
	char lib[4096], pidbuf[32], path[] = "/tmp/mp-inproc-XXXXXX";
	char *fargv[] = { path_of("tests/e2e/fixture-inproc"), "loop", "4000", NULL };
	struct timespec settle = { .tv_nsec = 200 * 1000 * 1000 };
	pid_t fix;
	int fd, st;

	need_root();
	snprintf(lib, sizeof(lib), "%s", path_of("libclient/libmemprof.so.0"));
	cr_assert_eq(posix_spawn(&fix, fargv[0], NULL, NULL, fargv, env_with(lib)), 0);
	nanosleep(&settle, NULL);
	snprintf(pidbuf, sizeof(pidbuf), "%d", (int)fix);
	for (int round = 0; round < 2; round++) {
		char *pargv[] = { path_of("cli/memprofd"),
				  "--pid",
				  pidbuf,
				  "--duration",
				  "0.5",
				  "-o",
				  path,
				  "--print",
				  "none",
				  NULL };
		const struct mp_kernel *k;
		struct mp_profile *p;
		uint64_t cut;

		fd = mkstemp(path);
		cr_assert_geq(fd, 0);
		close(fd);
		cr_assert_eq(spawn_wait(mp_test_argv(pargv), environ), 0);
		p = load(path);
		memcpy(path + strlen(path) - 6, "XXXXXX", 6);
		assert_exact(p);
		k = kernel(p, "it");
		cr_assert_gt(k->calls, 10, "round %d: %" PRIu64 " calls", round, k->calls);
		/* Exact but for the invocation open at the attach (its
		 * allocation may precede the interposer: flagged
		 * open_at_attach) and the one open at the end (truncated).
		 * The interposer goes on before the attach's snapshot
		 * (docs/RING.md "Per-thread state and late attach"); turned on
		 * after it, as before session 7, a kernel begun in between
		 * had its markers recorded and its allocation not: under load
		 * 2-6 invocations of ~1 ms, unflagged. */
		cut = k->open_at_attach + k->truncated;
		cr_assert(k->open_at_attach <= 1 && k->truncated <= 1,
			  "round %d: %" PRIu64 " open at attach, %" PRIu64 " truncated", round,
			  k->open_at_attach, k->truncated);
		cr_assert(k->incl.alloc_count + cut >= k->calls && k->incl.alloc_count <= k->calls,
			  "round %d: %" PRIu64 " allocations in %" PRIu64 " calls (%" PRIu64
			  " cut)",
			  round, k->incl.alloc_count, k->calls, cut);
		cr_assert_eq(k->incl.alloc_bytes, 64 * k->incl.alloc_count);
		cr_assert(k->incl.free_count + cut >= k->calls && k->incl.free_count <= k->calls,
			  "round %d: %" PRIu64 " frees in %" PRIu64 " calls", round,
			  k->incl.free_count, k->calls);
		cr_assert_leq(p->unknown_frees, 1);
		mp_profile_free(p);
	}
	cr_assert_eq(waitpid(fix, &st, 0), fix);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "fixture status %d", st);
}

/* Voluntary context switches of every thread of @pid. */
static uint64_t wakeups_of(pid_t pid)
{
	char dir[64], path[384], line[256];
	uint64_t sum = 0, v;
	struct dirent *d;
	DIR *t;

	snprintf(dir, sizeof(dir), "/proc/%d/task", (int)pid);
	t = opendir(dir);
	cr_assert_not_null(t, "%s: %s", dir, strerror(errno));
	while ((d = readdir(t))) {
		FILE *f;

		if (d->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s/status", dir, d->d_name);
		f = fopen(path, "re");
		while (f && fgets(line, sizeof(line), f))
			if (sscanf(line, "voluntary_ctxt_switches: %" SCNu64, &v) == 1)
				sum += v;
		if (f)
			fclose(f);
	}
	closedir(t);
	return sum;
}

/* A target that sleeps costs the profiler few wake-ups (the in-process
 * path's 0.5 ms tick backs off to 5 ms while its ring stays empty: ~2,000
 * a second before, ~300 with the RSS sampler), and the burst that ends the
 * sleep, 400k records against a 32k-slot ring filling before the first
 * tick, stays exact: in precise mode the producer waits. */
Test(inproc, idle_target_is_polled_less_and_the_burst_after_stays_exact, .timeout = 120)
{
	char path[] = "/tmp/mp-inproc-XXXXXX";
	struct mp_mem_stats want = { .alloc_count = WINDOW_LIVE + 200000,
				     .free_count = WINDOW_LIVE + 200000 };
	uint64_t rng = WINDOW_SEED, before, after;
	struct mp_profile *p;
	pid_t pid;
	int fd;

	need_root();
	for (long i = 0; i < WINDOW_LIVE + 200000; i++)
		want.alloc_bytes += window_size(&rng);
	want.free_bytes = want.alloc_bytes;
	fd = mkstemp(path);
	cr_assert_geq(fd, 0);
	close(fd);
	pid = run_start(NULL, NULL, path, "tests/e2e/fixture-inproc",
			(const char *[]){ "idle", "2500", "200000", NULL });
	/* attached within the first second; the target sleeps until 2.5 s */
	nanosleep(&(struct timespec){ .tv_sec = 1, .tv_nsec = 200 * 1000 * 1000 }, NULL);
	before = wakeups_of(pid);
	nanosleep(&(struct timespec){ .tv_sec = 1 }, NULL);
	after = wakeups_of(pid);
	cr_assert_eq(wait_exit(pid, "memprof run"), 0, "memprof run exit status");
	cr_assert_lt(after - before, 1000, "%" PRIu64 " wake-ups in one second of an idle target",
		     after - before);
	p = load(path);
	assert_exact(p);
	assert_mem(&kernel(p, "win")->incl, &want, "win");
	mp_profile_free(p);
}

/* memprofd -v on the in-process path against @fargv (fixture-inproc, with
 * libmemprof preloaded and @env_extra, "NAME=VALUE", in its environment
 * if not NULL); each line of its log goes to @on_line. Both must exit 0;
 * the profile is on the in-process path whatever the suite's, and nothing
 * was dropped. */
static struct mp_profile *memprofd_inproc_v(char *const *fargv, char *env_extra,
					    void (*on_line)(const char *line, void *ctx), void *ctx)
{
	char lib[4096], pidbuf[32], line[512], path[] = "/tmp/mp-inproc-XXXXXX";
	struct mp_profile *p;
	char **env;
	int fd, st, n = 0;
	pid_t fix, prof;
	FILE *f;

	fd = mkstemp(path);
	cr_assert_geq(fd, 0);
	close(fd);
	snprintf(lib, sizeof(lib), "%s", path_of("libclient/libmemprof.so.0"));
	env = env_with(lib);
	if (env_extra) {
		while (env[n])
			n++;
		env[n++] = env_extra;
		env[n] = NULL;
	}
	cr_assert_eq(posix_spawn(&fix, fargv[0], NULL, NULL, fargv, env), 0);
	snprintf(pidbuf, sizeof(pidbuf), "%d", (int)fix);
	{
		char *pargv[] = { path_of("cli/memprofd"),
				  "--pid",
				  pidbuf,
				  "--tracer",
				  "inprocess",
				  "-o",
				  (char *)path,
				  "--print",
				  "none",
				  "-v",
				  NULL };

		f = mp_test_spawn_stderr(pargv, environ, &prof);
	}
	while (fgets(line, sizeof(line), f))
		on_line(line, ctx);
	fclose(f);
	cr_assert_eq(waitpid(prof, &st, 0), prof);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "memprofd status %d", st);
	cr_assert_eq(waitpid(fix, &st, 0), fix);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "fixture status %d", st);
	p = load(path);
	cr_assert_str_eq(mp_tracer_path_name(p->tracer_path), "inprocess");
	cr_assert_eq(p->drops_heap, 0, "heap records dropped: %" PRIu64, p->drops_heap);
	cr_assert_eq(p->drops_ring, 0);
	cr_assert_eq(p->drops_bpf, 0);
	return p;
}

/* The debug log's drain counts. */
struct drains {
	uint64_t drains, full, held;
};

static void on_drains_line(const char *line, void *ctx)
{
	struct drains *d = ctx;
	const char *s = strstr(line, "pid ");

	if (s && strstr(s, " ring drains, "))
		cr_assert_eq(sscanf(s,
				    "pid %*d: %" SCNu64 " ring drains, %" SCNu64
				    " of them at the batch limit; at most %" SCNu64,
				    &d->drains, &d->full, &d->held),
			     3, "%s", line);
}

/* The debug log's count of allocations applied with their free. */
static void on_pairs_line(const char *line, void *ctx)
{
	const char *s = strstr(line, "pid ");

	if (s && strstr(s, " allocations applied with the free that followed"))
		cr_assert_eq(sscanf(s, "pid %*d: %" SCNu64, (uint64_t *)ctx), 1, "%s", line);
}

/* A precise-mode flood against a daemon that cannot keep up: 800k records
 * through a 32k-slot ring, the producer waiting for space most of the
 * time. The daemon drains in short reads, one after the other without a
 * sleep between them, each against a fresh clock (docs/RING.md "Waiting
 * for space"): a record published while a drain runs is stamped after
 * the drain's clock and held in the ring queue until the next one, so a
 * read of 65,536 records (as before) out of a 32k ring always ended with
 * more than 32k records held, never released as they were read. Counted,
 * not timed: the debug log's count of held records after a drain. */
Test(inproc, a_flood_is_drained_in_short_reads_without_holding_it, .timeout = 120)
{
	char *fargv[] = { path_of("tests/e2e/fixture-inproc"), "idle", "2500", "400000", NULL };
	struct mp_mem_stats want = { .alloc_count = WINDOW_LIVE + 400000,
				     .free_count = WINDOW_LIVE + 400000 };
	struct drains dr = { .held = UINT64_MAX };
	uint64_t rng = WINDOW_SEED;
	struct mp_profile *p;

	need_root();
	for (long i = 0; i < WINDOW_LIVE + 400000; i++)
		want.alloc_bytes += window_size(&rng);
	want.free_bytes = want.alloc_bytes;
	p = memprofd_inproc_v(fargv, NULL, on_drains_line, &dr);
	assert_mem(&kernel(p, "win")->incl, &want, "win");
	/* 808k records in reads of at most 8,192 */
	cr_assert_geq(dr.drains, 98, "%" PRIu64 " drains (%" PRIu64 " at the limit)", dr.drains,
		      dr.full);
	cr_assert_lt(dr.held, 32768, "%" PRIu64 " records held after a drain", dr.held);
	mp_profile_free(p);
}

/* Temporary allocations (each freed by the next heap record) go to the
 * correlator in one step in precise mode (mp_correlator_apply_temporary():
 * no live-table round trip, one attribution), and the profile is what the
 * two steps give: every count, and the kernel's peak, reached by a
 * temporary block over the kept ones. Before them, a kernel without any
 * (the session stops holding allocations there, and starts again).
 * Counted from the debug log. */
Test(inproc, temporary_allocations_go_in_one_step_and_stay_exact, .timeout = 120)
{
	char *fargv[] = { path_of("tests/e2e/fixture-inproc"), "temps", "2500", "200000", NULL };
	const long n = 200000;
	struct mp_mem_stats want = { .alloc_count = n + TEMPS_KEPT,
				     .free_count = n + TEMPS_KEPT,
				     .alloc_bytes = 1000 * TEMPS_KEPT };
	const struct mp_invocation *inv = NULL;
	struct mp_mem_stats fifo = { .alloc_count = TEMPS_FIFO + TEMPS_FIFO_STEPS,
				     .free_count = TEMPS_FIFO + TEMPS_FIFO_STEPS,
				     .alloc_bytes = 48 * (TEMPS_FIFO + TEMPS_FIFO_STEPS),
				     .free_bytes = 48 * (TEMPS_FIFO + TEMPS_FIFO_STEPS) };
	struct mp_profile *p;
	uint64_t pairs = 0;

	need_root();
	for (long i = 0; i < n; i++)
		want.alloc_bytes += 32 + (uint64_t)(i % 64);
	want.free_bytes = want.alloc_bytes;
	p = memprofd_inproc_v(fargv, NULL, on_pairs_line, &pairs);
	assert_mem(&kernel(p, "fifo")->incl, &fifo, "fifo");
	cr_assert_eq(kernel(p, "fifo")->peak_added, 48 * TEMPS_FIFO);
	assert_mem(&kernel(p, "temps")->incl, &want, "temps");
	for (uint32_t i = 0; i < p->n_invocations; i++)
		if (p->invocations[i].name == kernel(p, "temps")->name)
			inv = &p->invocations[i];
	cr_assert_not_null(inv);
	/* the kept blocks, then a temporary one of 95 B */
	cr_assert_eq(inv->peak_added, 1000 * TEMPS_KEPT + 95, "peak %" PRIu64, inv->peak_added);
	cr_assert_eq(kernel(p, "temps")->peak_added, 1000 * TEMPS_KEPT + 95);
	/* all but those a drain or a kept block came between, and the first
	 * ones after the fifo kernel (HOLD_SKIP), none of the fifo's */
	cr_assert_geq(pairs, n * 9 / 10, "%" PRIu64 " of %ld paired", pairs, n);
	cr_assert_leq(pairs, n);
	mp_profile_free(p);
}

/* CPU time (clock ticks) of @pid's first child, once it has one: the
 * fixture that `memprof run` resumes once attached; -1 before. */
static long child_ticks(pid_t pid)
{
	char p[64], buf[1024], *close_paren;
	unsigned long ut, st;
	pid_t child = 0;
	FILE *f;

	snprintf(p, sizeof(p), "/proc/%d/task/%d/children", (int)pid, (int)pid);
	f = fopen(p, "re");
	if (!f)
		return -1;
	if (fscanf(f, "%d", &child) != 1)
		child = 0;
	fclose(f);
	if (child <= 0)
		return -1;
	snprintf(p, sizeof(p), "/proc/%d/stat", (int)child);
	f = fopen(p, "re");
	if (!f)
		return -1;
	close_paren = fgets(buf, sizeof(buf), f) ? strrchr(buf, ')') : NULL;
	fclose(f);
	/* after the name: state and 11 fields, then utime and stime */
	if (!close_paren ||
	    sscanf(close_paren + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut,
		   &st) != 2)
		return -1;
	return (long)(ut + st);
}

/* `memprof run [--max-wait @max_wait] -- fixture-inproc temps 0 N`,
 * stopped (SIGSTOP) for 3 s once the fixture has run 50 ms of CPU
 * (attached: memprof run resumes it then), so that it fills its ring
 * while its daemon is stopped: the profile. */
static struct mp_profile *stopped_for_long(const char *max_wait, long n)
{
	struct timespec poll = { .tv_nsec = 5 * 1000 * 1000 }, stop = { .tv_sec = 3 };
	long hz = sysconf(_SC_CLK_TCK);
	char path[] = "/tmp/mp-inproc-XXXXXX", nbuf[32];
	char *argv[16];
	int fd, n_args = 0;
	pid_t pid;

	fd = mkstemp(path);
	cr_assert_geq(fd, 0);
	close(fd);
	snprintf(nbuf, sizeof(nbuf), "%ld", n);
	argv[n_args++] = path_of("cli/memprof");
	argv[n_args++] = "run";
	argv[n_args++] = "--tracer";
	argv[n_args++] = "inprocess";
	if (max_wait) {
		argv[n_args++] = "--max-wait";
		argv[n_args++] = (char *)max_wait;
	}
	argv[n_args++] = "-o";
	argv[n_args++] = path;
	argv[n_args++] = "--print";
	argv[n_args++] = "none";
	argv[n_args++] = "--";
	argv[n_args++] = path_of("tests/e2e/fixture-inproc");
	argv[n_args++] = "temps";
	argv[n_args++] = "0";
	argv[n_args++] = nbuf;
	argv[n_args] = NULL;
	cr_assert_eq(posix_spawn(&pid, argv[0], NULL, NULL, argv, env_with(NULL)), 0);
	for (int i = 0; child_ticks(pid) < (hz + 19) / 20; i++) {
		cr_assert_lt(i, 6000, "the fixture did not run within 30 s");
		nanosleep(&poll, NULL);
	}
	cr_assert_eq(kill(pid, SIGSTOP), 0);
	nanosleep(&stop, NULL);
	cr_assert_eq(kill(pid, SIGCONT), 0);
	cr_assert_eq(wait_exit(pid, "memprof run"), 0);
	return load(path);
}

/* Precise mode stays exact while its daemon lives, however long it is
 * stopped: a thread whose ring is full waits as long as the daemon holds
 * the ring's lease (it used to drop after 1 s). --max-wait trades that
 * for a bound: records are then dropped, and the profile says its live
 * figures are neither upper nor lower bounds. */
Test(inproc, precise_waits_for_a_stopped_daemon, .timeout = 120)
{
	const long n = 20 * 1000 * 1000;
	struct mp_profile *p;

	need_root();
	if (strcmp(suite_path(), "inprocess"))
		return;
	p = stopped_for_long(NULL, n);
	cr_assert_eq(p->drops_heap, 0, "%" PRIu64 " heap records dropped", p->drops_heap);
	cr_assert_gt(p->heap_waits, 0);
	cr_assert_eq(kernel(p, "temps")->incl.alloc_count, (uint64_t)n + TEMPS_KEPT);
	cr_assert_eq(kernel(p, "temps")->incl.free_count, (uint64_t)n + TEMPS_KEPT);
	cr_assert_eq(mp_profile_heap_bound(p), MP_BOUND_EXACT);
	mp_profile_free(p);

	p = stopped_for_long("0.2", n);
	cr_assert_gt(p->drops_heap, 0, "no record dropped with --max-wait 0.2");
	cr_assert_eq(mp_profile_heap_bound(p), MP_BOUND_NONE);
	mp_profile_free(p);
}

/* A process whose libmemprof has made no ring (MEMPROF_RING_LAZY=1 and no
 * marker: sleep(1) never marks), attached on the in-process path: its
 * allocations cannot be seen, and memprofd says so once instead of
 * writing an empty heap profile in silence. The sleep leaves the daemon
 * seconds past the 1 s after which it tells, on a slow host too. */
static void on_ring_missing_line(const char *line, void *ctx)
{
	*(unsigned *)ctx += strstr(line, "no libmemprof ring to read after 1 s") != NULL;
}

Test(inproc, a_target_without_a_ring_is_told, .timeout = 60)
{
	char *sargv[] = { "/bin/sleep", "6", NULL }, lazy[] = "MEMPROF_RING_LAZY=1";
	unsigned told = 0;

	need_root();
	mp_profile_free(memprofd_inproc_v(sargv, lazy, on_ring_missing_line, &told));
	cr_assert_eq(told, 1, "the missing ring told %u times", told);
}
