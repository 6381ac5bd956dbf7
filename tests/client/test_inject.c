// SPDX-License-Identifier: MIT
/*
 * memprof__inject (libclient/got.c, inject.h) in a program that was not
 * started with libmemprof: this one is not linked with it. It dlopen()s the
 * library (RTLD_LOCAL, as the daemon makes a ptraced thread do), calls
 * memprof__inject through dlsym, turns the in-process path on as the daemon
 * does (a consumer attached to the ring) and reads ALLOC / REALLOC / FREE
 * records: from the program itself, from a library it links (lazy
 * binding), from one linked with full RELRO, from libraries dlopen()ed
 * afterwards, deep-bound too. Without the patched GOT slots none of these
 * calls would reach libmemprof, so every record asserted here exists only
 * because of them.
 */
#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ring_abi.h"
#include "ring_test.h"
#include "inject_fixture.h"

/* The program's own calls. */
#define FX exe
#include "inject_fixture.c"
#undef FX

/* enum mp_alloc_fn of daemon/sources/heap_event.h */
enum {
	FN_MALLOC = 0,
	FN_CALLOC = 1,
	FN_REALLOC = 2,
	FN_FREE = 4,
	FN_POSIX_MEMALIGN = 5,
	FN_ALIGNED_ALLOC = 6
};

#define MAX_RECS 8192

static int (*inject)(void);

/* Loads libmemprof as the daemon does and attaches a consumer to the ring
 * its constructor created. */
static struct mp_consumer *load(void)
{
	struct mp_consumer *c = NULL;
	void *h = dlopen(LIBMEMPROF_PATH, RTLD_NOW | RTLD_LOCAL);

	cr_assert_not_null(h, "dlopen %s: %s", LIBMEMPROF_PATH, dlerror());
	inject = (int (*)(void))dlsym(h, "memprof__inject");
	cr_assert_not_null(inject, "no memprof__inject: %s", dlerror());
	/* out of the global scope: no call of this program reaches it yet */
	cr_assert_neq(dlsym(RTLD_DEFAULT, "malloc"), dlsym(h, "malloc"));
	cr_assert_eq(mp_consumer_open_pid(getpid(), &c), 0);
	return c;
}

static void trace(struct mp_consumer *c, bool on)
{
	cr_assert_eq(mp_consumer_set_alloc_mode(c, on ? MP_ALLOC_PRECISE : MP_ALLOC_OFF, 0), 0);
}

struct recs {
	struct mp_record r[MAX_RECS];
	size_t n;
};

/* Every record so far, with the path off (reading allocates). */
static void read_all(struct mp_consumer *c, struct recs *out)
{
	trace(c, false);
	out->n = drain(c, out->r, MAX_RECS);
	cr_assert_lt(out->n, MAX_RECS, "ring holds more records than expected");
	cr_assert_eq(mp_consumer_alloc_drops(c), 0);
}

static size_t count(const struct recs *rs, uint32_t type, uint64_t addr)
{
	size_t n = 0;

	for (size_t i = 0; i < rs->n; i++)
		n += rs->r[i].type == type && rs->r[i].heap.addr == addr;
	return n;
}

/* The type of the first heap record of @addr, 0 when none. */
static uint32_t first_type(const struct recs *rs, uintptr_t addr)
{
	for (size_t i = 0; i < rs->n; i++)
		if (rs->r[i].type >= MP_REC_ALLOC && rs->r[i].type <= MP_REC_REALLOC &&
		    (rs->r[i].heap.addr == addr ||
		     (rs->r[i].type == MP_REC_REALLOC && rs->r[i].heap.old_addr == addr)))
			return rs->r[i].type;
	return 0;
}

/* Whether the record's caller is in the object of @code. */
static void caller_in(const char *what, const struct mp_record *got, const void *code)
{
	Dl_info want, at;

	cr_assert(dladdr(code, &want) && dladdr((void *)(uintptr_t)got->heap.caller, &at),
		  "%s: caller %#llx unknown", what, (unsigned long long)got->heap.caller);
	cr_assert_eq(at.dli_fbase, want.dli_fbase, "%s: caller in %s, expected %s", what,
		     at.dli_fname, want.dli_fname);
}

/* The one ALLOC or REALLOC record of a block (its address and size, unique
 * to the call), asserted whole: fn, old address, flags, thread, and a
 * caller in the object of @code. Its index. */
static size_t expect_new(const struct recs *rs, const char *what, uint32_t type, uint32_t fn,
			 const void *addr, uint64_t size, const void *old, const void *code)
{
	const struct mp_record *got = NULL;
	size_t at = 0;

	cr_assert_not_null(addr, "%s: the call failed", what);
	for (size_t i = 0; i < rs->n; i++)
		if (rs->r[i].type == type && rs->r[i].heap.addr == (uintptr_t)addr &&
		    rs->r[i].heap.size == size) {
			cr_assert_null(got, "%s: two %s records of %p, %llu bytes", what,
				       mp_record_type_name(type), addr, (unsigned long long)size);
			got = &rs->r[i];
			at = i;
		}
	cr_assert_not_null(got, "%s: no %s record of %p, %llu bytes", what,
			   mp_record_type_name(type), addr, (unsigned long long)size);
	cr_assert_eq(got->fn, fn, "%s: fn %u, expected %u", what, got->fn, fn);
	cr_assert_eq(got->heap.old_addr, (uintptr_t)old, "%s: old address", what);
	cr_assert_eq(got->flags, 0, "%s: flags %#x", what, got->flags);
	cr_assert_eq(got->tid, (uint32_t)gettid(), "%s: tid", what);
	caller_in(what, got, code);
	return at;
}

/* The FREE record of the block whose ALLOC record is at @from: the first
 * FREE of its address after it, from the object of @code. */
static void expect_free(const struct recs *rs, const char *what, const void *addr, size_t from,
			const void *code)
{
	for (size_t i = from + 1; i < rs->n; i++) {
		const struct mp_record *got = &rs->r[i];

		if (got->type != MP_REC_FREE || got->heap.addr != (uintptr_t)addr)
			continue;
		cr_assert_eq(got->fn, FN_FREE, "%s: free fn %u", what, got->fn);
		cr_assert_eq(got->heap.size, 0, "%s: free size", what);
		cr_assert_eq(got->tid, (uint32_t)gettid(), "%s: free tid", what);
		caller_in(what, got, code);
		return;
	}
	cr_assert_fail("%s: no FREE record of %p", what, addr);
}

/* The records of one inject_fixture.c object's exercise then release. */
static void expect_object(const struct recs *rs, const char *what, const struct fx_blocks *b,
			  size_t base, const void *code)
{
	size_t i;

	i = expect_new(rs, what, MP_REC_ALLOC, FN_MALLOC, b->m, base + 1, NULL, code);
	expect_free(rs, what, b->m, i, code);
	i = expect_new(rs, what, MP_REC_ALLOC, FN_CALLOC, b->c, 3 * (base + 2), NULL, code);
	expect_free(rs, what, b->c, i, code);
	expect_new(rs, what, MP_REC_ALLOC, FN_MALLOC, b->r0, base + 3, NULL, code);
	i = expect_new(rs, what, MP_REC_REALLOC, FN_REALLOC, b->r, base + 4, b->r0, code);
	expect_free(rs, what, b->r, i, code);
	i = expect_new(rs, what, MP_REC_ALLOC, FN_POSIX_MEMALIGN, b->pm, base + 5, NULL, code);
	expect_free(rs, what, b->pm, i, code);
	i = expect_new(rs, what, MP_REC_ALLOC, FN_ALIGNED_ALLOC, b->aa, base + 64, NULL, code);
	expect_free(rs, what, b->aa, i, code);
}

static void *must_open(const char *path, int mode)
{
	void *h = dlopen(path, mode);

	cr_assert_not_null(h, "dlopen %s: %s", path, dlerror());
	return h;
}

static void *must_sym(void *h, const char *name)
{
	void *f = dlsym(h, name);

	cr_assert_not_null(f, "dlsym %s: %s", name, dlerror());
	return f;
}

/* The program, a linked library (lazy binding: its slots may still point
 * into its own PLT), a full-RELRO one (slots read-only since load), and
 * libraries dlopen()ed after the injection, plain and deep-bound, which
 * the patched dlopen patches before it returns. */
Test(inject, every_object_records)
{
	static struct recs rs;
	struct mp_consumer *c = load();
	struct fx_blocks b[5] = { 0 };
	fx_exercise_fn *fx_ex[2];
	fx_release_fn *fx_rel[2];
	const char *name[2] = { "plugin", "deep" };
	void *h[2];
	int n;

	n = inject();
	cr_assert_gt(n, 0, "memprof__inject: %d", n);
	trace(c, true);
	exe_exercise(&b[0], 1024);
	exe_release(&b[0]);
	needed_exercise(&b[1], 2048);
	needed_release(&b[1]);
	relro_exercise(&b[2], 3072);
	relro_release(&b[2]);
	h[0] = must_open(PLUGIN_PATH, RTLD_NOW);
#ifdef __SANITIZE_ADDRESS__
	/* the sanitizer runtime forbids RTLD_DEEPBIND (its malloc is not
	 * libc's, which a deep-bound library would call) */
	h[1] = must_open(DEEP_PATH, RTLD_NOW);
#else
	h[1] = must_open(DEEP_PATH, RTLD_NOW | RTLD_DEEPBIND);
#endif
	for (int i = 0; i < 2; i++) {
		char sym[32];

		snprintf(sym, sizeof(sym), "%s_exercise", name[i]);
		fx_ex[i] = (fx_exercise_fn *)must_sym(h[i], sym);
		snprintf(sym, sizeof(sym), "%s_release", name[i]);
		fx_rel[i] = (fx_release_fn *)must_sym(h[i], sym);
		fx_ex[i](&b[3 + i], 4096 + 1024 * (size_t)i);
		fx_rel[i](&b[3 + i]);
	}
	read_all(c, &rs);
	expect_object(&rs, "program", &b[0], 1024, (void *)exe_exercise);
	expect_object(&rs, "linked", &b[1], 2048, (void *)needed_exercise);
	expect_object(&rs, "full RELRO", &b[2], 3072, (void *)relro_exercise);
	expect_object(&rs, "dlopen", &b[3], 4096, (void *)fx_ex[0]);
	expect_object(&rs, "deep-bound", &b[4], 5120, (void *)fx_ex[1]);
	/* the two libraries' slots were added to the count */
	cr_assert_gt(inject(), n);
	mp_consumer_free(c);
}

/* A block the real allocator handed out before the injection, freed
 * after: the real allocator takes it back, and the ring has its FREE but
 * never its ALLOC. */
Test(inject, block_from_before_freed_by_the_real_allocator)
{
	static struct recs rs;
	void *before = malloc(777), *again;
	uintptr_t addr = (uintptr_t)before;
	struct mp_consumer *c = load();

	cr_assert_not_null(before);
	memset(before, 1, 777);
	cr_assert_gt(inject(), 0);
	trace(c, true);
	free(before);
	again = malloc(777);
	read_all(c, &rs);
	cr_assert_eq(first_type(&rs, addr), MP_REC_FREE, "the block's first record: %s",
		     mp_record_type_name(first_type(&rs, addr)));
	cr_assert_eq(count(&rs, MP_REC_FREE, addr), 1);
	cr_assert_eq(count(&rs, MP_REC_ALLOC, (uintptr_t)again), 1);
#ifndef __SANITIZE_ADDRESS__
	/* glibc's thread cache: the block went back to glibc's free list,
	 * the next request of its size gets it */
	cr_assert_eq((uintptr_t)again, addr, "the block did not go back to the allocator");
#endif
	cr_assert_geq(malloc_usable_size(again), 777);
	free(again);
	mp_consumer_free(c);
}

/* A second call patches nothing more and returns the same count; the
 * interposer keeps working. */
Test(inject, twice_is_idempotent)
{
	static struct recs rs;
	struct mp_consumer *c = load();
	struct fx_blocks b = { 0 };
	int n1, n2;

	n1 = inject();
	n2 = inject();
	cr_assert_gt(n1, 0, "memprof__inject: %d", n1);
	cr_assert_eq(n2, n1);
	trace(c, true);
	relro_exercise(&b, 6144);
	relro_release(&b);
	read_all(c, &rs);
	expect_object(&rs, "full RELRO", &b, 6144, (void *)relro_exercise);
	mp_consumer_free(c);
}

/* Runs this test alone in a fresh copy of the program without
 * LD_LIBRARY_PATH (meson sets it to the fixtures' directory, where any
 * caller would find them); its status. */
static int again_without_library_path(const char *test)
{
	char filter[128];
	pid_t pid;
	int st;

	snprintf(filter, sizeof(filter), "--filter=%s", test);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		unsetenv("LD_LIBRARY_PATH");
		unsetenv("BXFI_MAP"); /* not a criterion worker: a runner */
		execl("/proc/self/exe", "test-client-inject", filter, "-j1", (char *)NULL);
		_exit(127);
	}
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	return st;
}

/* A bare name dlopen()ed by the program is searched in the program's
 * RUNPATH (meson's $ORIGIN here), though the call now goes through
 * libmemprof, whose RUNPATH glibc would search. */
Test(inject, bare_name_searched_as_the_caller)
{
	static struct recs rs;
	struct mp_consumer *c;
	struct fx_blocks b = { 0 };
	fx_exercise_fn *ex;
	fx_release_fn *rel;
	void *h;
	int st;

	if (getenv("LD_LIBRARY_PATH")) {
		st = again_without_library_path("inject/bare_name_searched_as_the_caller");
		cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "without LD_LIBRARY_PATH: %#x",
			  st);
		return;
	}
	c = load();
	cr_assert_gt(inject(), 0);
	trace(c, true);
	h = must_open(BARE_NAME, RTLD_NOW);
	ex = (fx_exercise_fn *)must_sym(h, "bare_exercise");
	rel = (fx_release_fn *)must_sym(h, "bare_release");
	ex(&b, 7168);
	rel(&b);
	read_all(c, &rs);
	expect_object(&rs, "bare name", &b, 7168, (void *)ex);
	mp_consumer_free(c);
}

/* LINKED_HELPER DEEP_PATH [@mode], with @preload preloaded: its output. */
static void linked_run(const char *preload, const char *mode, char *out, size_t size)
{
	int fd[2], st;
	ssize_t len;
	pid_t pid;

	cr_assert_eq(pipe(fd), 0);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		dup2(fd[1], 1);
		if (preload)
			setenv("LD_PRELOAD", preload, 1);
		execl(LINKED_HELPER, LINKED_HELPER, DEEP_PATH, mode, (char *)NULL);
		_exit(127);
	}
	close(fd[1]);
	len = read(fd[0], out, size - 1);
	close(fd[0]);
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "helper status %#x", st);
	cr_assert_gt(len, 0);
	out[len] = '\0';
}

/* In a program linked with libmemprof, its malloc is the first one:
 * nothing to do. A library it loads with RTLD_DEEPBIND binds libc's
 * malloc, and libmemprof's dlopen points it at libmemprof's (as when
 * libmemprof is preloaded: tests/inject's memprof run). */
Test(inject, linked_is_already)
{
	char out[32] = "", *nl;

	linked_run(NULL, NULL, out, sizeof(out));
	cr_assert_eq(atoi(out), -EALREADY, "memprof__inject in a linked program: %s", out);
	nl = strchr(out, '\n');
	cr_assert(nl && !strcmp(nl + 1, "1\n"),
		  "a deep-bound library's malloc in a linked program is not libmemprof's: %s", out);
}

/* The same program with jemalloc ahead of libmemprof, and never injected:
 * libmemprof's dlopen patches nothing (the process's malloc is not
 * libmemprof's), the deep-bound library keeps libc's, and the program's
 * first calls through its lazy slots still reach jemalloc. */
Test(inject, linked_behind_another_allocator_patches_nothing)
{
	char out[32] = "";

	linked_run(JEMALLOC_PATH, "other", out, sizeof(out));
	cr_assert_str_eq(out, "0\n0\n1\n", "helper printed:\n%s", out);
}
