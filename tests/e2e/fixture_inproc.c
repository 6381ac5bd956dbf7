// SPDX-License-Identifier: MIT
/*
 * A program NOT linked with libmemprof, for the in-process path tests: under
 * `memprof run` the library is preloaded, and the markers are found with
 * dlsym (no-ops when it is not there). Every scenario allocates inside one
 * kernel exactly what tests/e2e/test_inproc.c expects; no stdio (its buffers
 * would be allocations of their own).
 *
 *   matrix           the malloc family and the realloc cases
 *   threads N        N short threads, each: kernel t, malloc 100 + free, malloc 7
 *   together N       N threads started at once (a barrier), each: kernel w,
 *                    10 rounds of 64 blocks of 16-1015 B allocated then
 *                    freed; they exit together (glibc flushes each one's
 *                    thread cache through free's entry as it exits)
 *   fork | forkexec  a child that allocates (and execs /bin/true)
 *   dlopen LIB       allocations by code of a dlopen'd library
 *   dlexit LIB       the same, the library loaded with RTLD_DEEPBIND (its
 *                    malloc bound to libc's own), and the process exits
 *                    at once, its 222 B still allocated
 *   direct LIB       kernel direct: LIB's direct_alloc (glibc's __libc_malloc)
 *                    of 4000 B and malloc 100, both kept; stays 1 s (the
 *                    daemon looks for such objects while it lives)
 *   loop MS          kernel it: malloc 64 + free, every millisecond for MS ms
 *   window N         kernel win: 4,096 live blocks of 16-63 B, each of N
 *                    steps frees the oldest and allocates a new one (sizes
 *                    from the LCG of tests/e2e/window.h), then frees all
 *   race N           N times: kernel map (mmap 64 KiB, munmap it: the BPF
 *                    side; malloc 100 + free: the ring), then kernel heap
 *                    (malloc 7 + free): the kernels' ring records race the
 *                    syscall events of the same moments
 *   idle MS N        sleeps MS ms, then "window N"
 *   temps MS N       sleeps MS ms, then kernel fifo: 64 blocks of 48 B,
 *                    10,000 times the oldest freed and a new one, all
 *                    freed; then kernel temps: N temporary allocations
 *                    (malloc of 32-95 B, freed right after it), and every
 *                    N/100 steps a block of 1000 B kept to the end: the
 *                    kernel's peak is reached by a temporary one, over
 *                    the kept ones
 */
#include <dlfcn.h>
#include <malloc.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "window.h"

static int (*kbegin)(const char *);
static int (*kend)(void);

static void begin(const char *name)
{
	if (kbegin)
		kbegin(name);
}

static void end(void)
{
	if (kend)
		kend();
}

/* The compiler must not elide a malloc/free pair, nor see the sizes that
 * make a call fail. */
static void *volatile sink;
static volatile size_t big = SIZE_MAX / 2, huge = SIZE_MAX;

static void matrix(void)
{
	void *p, *q, *r, *c, *pm = NULL, *aa, *ma, *va, *pva, *z;

	begin("matrix");
	p = malloc(100);
	p = realloc(p, 200); /* grow */
	p = realloc(p, 50); /* shrink */
	q = realloc(NULL, 30); /* malloc */
	r = realloc(q, 0); /* glibc: frees q, returns NULL */
	sink = r;
	sink = realloc(p, big); /* fails, p stays live */
	p = reallocarray(p, 2, 40);
	sink = reallocarray(p, huge, 2); /* overflow: fails untouched */
	c = calloc(4, 25);
	if (posix_memalign(&pm, 64, 64))
		_exit(3);
	aa = aligned_alloc(64, 128);
	ma = memalign(32, 48);
	va = valloc(10);
	pva = pvalloc(10);
	z = malloc(0);
	free(NULL);
	free(c);
	free(pm);
	free(aa);
	free(ma);
	free(va);
	free(pva);
	free(z);
	end();
	sink = p; /* 80 bytes stay live */
}

static void *worker(void *arg)
{
	(void)arg;
	begin("t");
	sink = malloc(100);
	free(sink);
	sink = malloc(7);
	end();
	return sink;
}

static void threads(int n)
{
	pthread_t t;
	void *kept;

	/* pthread_create's own allocations go to this kernel, not to a
	 * worker's open one (cross-thread attribution) */
	begin("spawn");
	for (int i = 0; i < n; i++) {
		if (pthread_create(&t, NULL, worker, NULL) || pthread_join(t, &kept))
			_exit(4);
		free(kept);
	}
	end();
}

#define TOGETHER_MAX 64

static pthread_barrier_t together_start;

static void *together_worker(void *arg)
{
	void *b[64];

	pthread_barrier_wait(&together_start);
	begin("w");
	for (int r = 0; r < 10; r++) {
		for (int i = 0; i < 64; i++)
			b[i] = malloc(16 + (size_t)(i * 37 % 1000));
		for (int i = 0; i < 64; i++)
			free(b[i]);
	}
	end();
	return arg;
}

static int together(int n)
{
	pthread_t t[TOGETHER_MAX];

	if (n < 1 || n > TOGETHER_MAX || pthread_barrier_init(&together_start, NULL, (unsigned)n))
		return 2;
	begin("spawn");
	for (int i = 0; i < n; i++)
		if (pthread_create(&t[i], NULL, together_worker, NULL))
			_exit(4);
	for (int i = 0; i < n; i++)
		pthread_join(t[i], NULL);
	end();
	pthread_barrier_destroy(&together_start);
	return 0;
}

static void forked(bool exec)
{
	pid_t pid;
	int st;

	begin("parent");
	sink = malloc(1000);
	pid = fork();
	if (pid == 0) {
		/* none of this may reach the parent's profile */
		for (int i = 0; i < 10000; i++)
			sink = malloc(64);
		if (exec)
			execl("/bin/true", "true", (char *)NULL);
		_exit(0);
	}
	if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st))
		_exit(5);
	sink = malloc(24);
	end();
}

/* Kernel dl: LIB's owner_a_alloc, 333 B freed and 222 B kept. */
static void dl_kernel(const char *lib, int mode)
{
	void *h = dlopen(lib, mode);
	void *(*fn)(size_t);

	if (!h)
		_exit(6);
	fn = (void *(*)(size_t))dlsym(h, "owner_a_alloc");
	if (!fn)
		_exit(6);
	begin("dl");
	sink = fn(333);
	free(sink);
	sink = fn(222);
	end();
}

static void dlopened(const char *lib)
{
	dl_kernel(lib, RTLD_NOW);
	/* Alive while the daemon reads its allocations: the caller's object
	 * is found in /proc (dlexit covers a process already gone). */
	nanosleep(&(struct timespec){ .tv_nsec = 300 * 1000 * 1000 }, NULL);
}

static void direct(const char *lib)
{
	void *h = dlopen(lib, RTLD_NOW);
	void *(*fn)(size_t);

	if (!h || !(fn = (void *(*)(size_t))dlsym(h, "direct_alloc")))
		_exit(6);
	begin("direct");
	sink = fn(4000);
	sink = malloc(100);
	end();
	nanosleep(&(struct timespec){ .tv_sec = 1 }, NULL);
}

static void loop(long ms)
{
	struct timespec d = { .tv_nsec = 1000 * 1000 };

	for (long i = 0; i < ms; i++) {
		begin("it");
		sink = malloc(64);
		free(sink);
		end();
		nanosleep(&d, NULL);
	}
}

static void window(long n)
{
	static void *slot[WINDOW_LIVE];
	uint64_t rng = WINDOW_SEED;

	begin("win");
	for (long i = 0; i < WINDOW_LIVE + n; i++) {
		void **s = &slot[i % WINDOW_LIVE];

		free(*s);
		*s = malloc(window_size(&rng));
	}
	for (int i = 0; i < WINDOW_LIVE; i++)
		free(slot[i]);
	end();
}

static int race(long n)
{
	for (long i = 0; i < n; i++) {
		void *p;

		begin("map");
		p = mmap(NULL, 65536, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (p == MAP_FAILED)
			return 1;
		munmap(p, 65536);
		sink = malloc(100);
		free(sink);
		end();
		begin("heap");
		sink = malloc(7);
		free(sink);
		end();
	}
	return 0;
}

static void temps(long n)
{
	static void *keep[TEMPS_KEPT], *fifo[TEMPS_FIFO];
	long every = n / TEMPS_KEPT;

	/* first no temporary allocation at all: each freed one is the
	 * oldest of TEMPS_FIFO */
	begin("fifo");
	for (int i = 0; i < TEMPS_FIFO; i++)
		fifo[i] = malloc(48);
	for (int i = 0; i < TEMPS_FIFO_STEPS; i++) {
		free(fifo[i % TEMPS_FIFO]);
		fifo[i % TEMPS_FIFO] = malloc(48);
	}
	for (int i = 0; i < TEMPS_FIFO; i++)
		free(fifo[i]);
	end();
	begin("temps");
	for (long i = 0; i < n; i++) {
		sink = malloc(32 + (size_t)(i % 64));
		free(sink);
		if (every && i % every == 0 && i / every < TEMPS_KEPT)
			keep[i / every] = malloc(1000);
	}
	for (int i = 0; i < TEMPS_KEPT; i++)
		free(keep[i]);
	end();
}

int main(int argc, char **argv)
{
	kbegin = (int (*)(const char *))dlsym(RTLD_DEFAULT, "memprof_kernel_begin");
	kend = (int (*)(void))dlsym(RTLD_DEFAULT, "memprof_kernel_end");
	if (argc < 2)
		return 2;
	if (!strcmp(argv[1], "matrix"))
		matrix();
	else if (!strcmp(argv[1], "threads") && argc > 2)
		threads(atoi(argv[2]));
	else if (!strcmp(argv[1], "together") && argc > 2)
		return together(atoi(argv[2]));
	else if (!strcmp(argv[1], "fork"))
		forked(false);
	else if (!strcmp(argv[1], "forkexec"))
		forked(true);
	else if (!strcmp(argv[1], "dlopen") && argc > 2)
		dlopened(argv[2]);
	else if (!strcmp(argv[1], "direct") && argc > 2)
		direct(argv[2]);
	else if (!strcmp(argv[1], "dlexit") && argc > 2)
		/* gone before the daemon has read its allocations: the library
		 * is named by the loader's notice alone */
		dl_kernel(argv[2], RTLD_NOW | RTLD_DEEPBIND);
	else if (!strcmp(argv[1], "loop") && argc > 2)
		loop(atol(argv[2]));
	else if (!strcmp(argv[1], "window") && argc > 2)
		window(atol(argv[2]));
	else if (!strcmp(argv[1], "temps") && argc > 3) {
		long ms = atol(argv[2]);

		nanosleep(&(struct timespec){ .tv_sec = ms / 1000, .tv_nsec = ms % 1000 * 1000000 },
			  NULL);
		temps(atol(argv[3]));
	} else if (!strcmp(argv[1], "race") && argc > 2)
		return race(atol(argv[2]));
	else if (!strcmp(argv[1], "idle") && argc > 3) {
		long ms = atol(argv[2]);

		nanosleep(&(struct timespec){ .tv_sec = ms / 1000, .tv_nsec = ms % 1000 * 1000000 },
			  NULL);
		window(atol(argv[3]));
	} else
		return 2;
	return 0;
}
