// SPDX-License-Identifier: MIT
/*
 * A toyinfer-like target started without memprof, for attach by pid
 * (tests/inject). Usage: fixture-toy [THREADS [STEPS [loop]]]
 *
 * It starts THREADS workers (default 0): the odd ones block in a system
 * call, the even ones allocate and free in a loop inside their own kernel
 * "worker" (so that their blocks never land in the main thread's kernels).
 * It allocates a block, prints "ready", and waits for SIGUSR1. Then it runs
 * STEPS steps (default 3) of fixed work, each a kernel "step" holding:
 *   conv     malloc(4096), calloc(10, 100), free both
 *   matmul   posix_memalign(64, 8192), aligned_alloc(64, 1024), kept to
 *            "release"; realloc(NULL, 100) grown to 5000, freed
 *   ops      libtoyops's op: malloc(333) and free in a linked library
 *   load     dlopen()s libtoylate and, with RTLD_DEEPBIND (which binds
 *            malloc to libc's own), libtoydeep: loaded by the first step
 *            (the loader's own blocks), referenced again by the others
 *   late     libtoylate's op: malloc(777) and free
 *   deep     libtoydeep's op: malloc(999) and free (in its own object: its
 *            malloc may be another allocator's than the program's)
 *   release  frees matmul's two blocks
 * and after the steps a kernel "old" frees the 500-byte block allocated
 * before the attach (an unknown free). It prints "done" and exits 0.
 * With "loop", it does not wait: it runs steps, one per millisecond, until
 * SIGTERM, then stops its workers and prints "done N" (N steps).
 *
 * Kernels are marked through libmemprof only when $MEMPROF_TOY_LIB names
 * it: the program dlopen()s it for its markers, as a runtime with optional
 * instrumentation does (NVTX's pattern), so libmemprof is in the process
 * but not its malloc. Without it the markers are no-ops. With
 * $MEMPROF_TOY_NOLOAD=1 the program does not load it: before each step it
 * looks whether it is there (RTLD_NOLOAD), so the markers start once a
 * profiler injected it. $MEMPROF_TOY_NODEEP=1 loads libtoydeep without
 * RTLD_DEEPBIND (AddressSanitizer refuses it).
 */
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void toy_op(void);

/* set by the main thread, read by every thread */
static void (*_Atomic k_begin)(const char *);
static void (*_Atomic k_end)(void);
static atomic_int stop;
/* RTLD_DEEPBIND, or 0 under AddressSanitizer, which refuses it */
static int deepbind = RTLD_DEEPBIND;

static void begin(const char *name)
{
	if (k_begin)
		k_begin(name);
}

static void end(void)
{
	if (k_end)
		k_end();
}

static void on_term(int sig)
{
	(void)sig;
	atomic_store(&stop, 1);
}

static void *worker(void *arg)
{
	unsigned n = 0;
	char c;

	if ((intptr_t)arg % 2) {
		/* blocked in a system call until the process exits */
		int fd[2];

		if (pipe(fd) == 0)
			while (read(fd[0], &c, 1) < 0)
				;
		return NULL;
	}
	bool marked = false;

	while (!atomic_load(&stop)) {
		/* its own kernel as soon as there are markers */
		if (!marked && k_begin) {
			begin("worker");
			marked = true;
		}
		void *p = malloc(16 + (n++ % 64) * 8);
		void *q = calloc(1, 200);

		free(p);
		q = realloc(q, 300);
		free(q);
		/* a busy service's pace, not a benchmark's: some 10k
		 * blocks a second */
		if (n % 4 == 0)
			usleep(500);
	}
	if (marked)
		end();
	return NULL;
}

/* libmemprof's markers, from @lib opened with @flags; false when it is not
 * there. */
static bool bind_markers(const char *lib, int flags)
{
	void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL | flags);

	if (!h)
		return false;
	k_end = (void (*)(void))dlsym(h, "memprof_kernel_end");
	k_begin = (void (*)(const char *))dlsym(h, "memprof_kernel_begin");
	return k_begin && k_end;
}

static void (*late_fn(const char *lib, const char *fn, int flags))(void)
{
	void *h = dlopen(lib, RTLD_NOW | flags);

	if (!h) {
		fprintf(stderr, "fixture-toy: %s\n", dlerror());
		exit(3);
	}
	return (void (*)(void))dlsym(h, fn);
}

static void step(const char *dir)
{
	char late[4096], deep[4096];
	void *a, *b, *m1 = NULL, *m2, *r;
	void (*late_op)(void), (*deep_op)(void);

	snprintf(late, sizeof(late), "%s/libtoylate.so", dir);
	snprintf(deep, sizeof(deep), "%s/libtoydeep.so", dir);
	begin("step");
	begin("conv");
	a = malloc(4096);
	b = calloc(10, 100);
	free(a);
	free(b);
	end();
	begin("matmul");
	if (posix_memalign(&m1, 64, 8192))
		exit(4);
	m2 = aligned_alloc(64, 1024);
	r = realloc(NULL, 100);
	r = realloc(r, 5000);
	free(r);
	end();
	begin("ops");
	toy_op();
	end();
	begin("load");
	late_op = late_fn(late, "toy_late", 0);
	deep_op = late_fn(deep, "toy_deep", deepbind);
	end();
	begin("late");
	late_op();
	end();
	begin("deep");
	deep_op();
	end();
	begin("release");
	free(m1);
	free(m2);
	end();
	end();
}

int main(int argc, char **argv)
{
	int threads = argc > 1 ? atoi(argv[1]) : 0, steps = argc > 2 ? atoi(argv[2]) : 3, sig;
	const char *lib = getenv("MEMPROF_TOY_LIB");
	char dir[4096], *slash;
	pthread_t t[64];
	sigset_t set;
	void *old;

	bool loop = argc > 3 && !strcmp(argv[3], "loop");
	unsigned long done = 0;

	snprintf(dir, sizeof(dir), "%s", argv[0]);
	slash = strrchr(dir, '/');
	if (slash)
		*slash = '\0';
	const char *nl = getenv("MEMPROF_TOY_NOLOAD");
	bool noload = nl && nl[0] == '1';
	const char *nd = getenv("MEMPROF_TOY_NODEEP");

	if (nd && nd[0] == '1')
		deepbind = 0;
	if (lib && lib[0] && !noload && !bind_markers(lib, 0)) {
		fprintf(stderr, "fixture-toy: %s\n", dlerror());
		return 2;
	}
	sigemptyset(&set);
	sigaddset(&set, SIGUSR1);
	sigprocmask(SIG_BLOCK, &set, NULL);
	if (threads > 64)
		threads = 64;
	for (int i = 0; i < threads; i++)
		if (pthread_create(&t[i], NULL, worker, (void *)(intptr_t)i))
			return 5;
	old = malloc(500);
	if (loop) {
		signal(SIGTERM, on_term);
		puts("ready");
		fflush(stdout);
		while (!atomic_load(&stop)) {
			if (noload && lib && !k_begin)
				bind_markers(lib, RTLD_NOLOAD);
			step(dir);
			done++;
			usleep(1000);
		}
		for (int i = 0; i < threads; i += 2)
			pthread_join(t[i], NULL);
		free(old);
		printf("done %lu\n", done);
		fflush(stdout);
		_exit(0);
	}
	puts("ready");
	fflush(stdout);
	sigwait(&set, &sig);
	for (int i = 0; i < steps; i++)
		step(dir);
	begin("old");
	free(old);
	end();
	atomic_store(&stop, 1);
	puts("done");
	fflush(stdout);
	/* workers blocked in read() end with the process */
	_exit(0);
}
