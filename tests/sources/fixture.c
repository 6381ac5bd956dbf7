// SPDX-License-Identifier: MIT
/*
 * Scripted allocation workload for the tracer tests. Protocol on
 * stdin/stdout (pipes to the test): print "ready PID", wait for one byte,
 * run the script, print "live FN ADDR SIZE" for every block it keeps and
 * "done", wait for one byte (or EOF), _exit(0). No stdio inside the script,
 * so the only allocations are the scripted ones.
 */
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <fcntl.h>

#define N_THREADS 8
#define THREAD_ITERS 1000
#define N_PRE 50
#define N_SMALL 40000
#define SMALL 256
#define LARGE 8192

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#include <stdarg.h>
static void say(const char *fmt, ...)
{
	char buf[256];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	if (write(1, buf, (size_t)n) != n)
		_exit(3);
}

static void wait_byte(void)
{
	char c;

	while (read(0, &c, 1) < 0 && errno == EINTR)
		;
}

/* Keeps the compiler from pairing or eliding allocator calls. */
static void *volatile sink;

static void script(void)
{
	void *p1, *p2, *p3, *p4, *p5, *p6, *p7, *p8, *p9, *p11, *x, *m1, *m2, *f;
#ifndef WITH_JEMALLOC
	void *p10;
#endif
	size_t huge = SIZE_MAX / 2;
	int fd;

	p1 = malloc(100);
	p2 = calloc(10, 20);
	sink = calloc(huge, 4); /* overflow: NULL */
	sink = malloc(huge); /* fails */
	p3 = realloc(NULL, 50);
	p3 = realloc(p3, 5000); /* grow */
	p3 = realloc(p3, 10); /* shrink */
	sink = realloc(p3, huge); /* fails, p3 stays */
	p4 = malloc(30);
	sink = realloc(p4, 0); /* frees p4 */
	p5 = reallocarray(NULL, 10, 8);
	sink = reallocarray(p5, huge, 4); /* overflow, p5 stays */
	p5 = reallocarray(p5, 20, 8);
	if (posix_memalign(&p6, 64, 256))
		_exit(4);
	if (posix_memalign(&x, 3, 100) != EINVAL) /* bad alignment */
		_exit(5);
	p7 = aligned_alloc(128, 512);
	p8 = memalign(256, 1000);
	p9 = valloc(300);
#ifndef WITH_JEMALLOC
	p10 = pvalloc(400); /* jemalloc has none; glibc's would mix heaps */
#endif
	free(NULL);
	p11 = malloc(1 << 20); /* glibc: its own mmap, not an mmap event */
	m1 = mmap(NULL, 65536, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	m1 = mremap(m1, 65536, 131072, MREMAP_MAYMOVE);
	munmap(m1, 131072);
	m2 = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	fd = open("/proc/self/exe", O_RDONLY);
	f = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE, fd, 0); /* not anon */
	munmap(f, 4096);
	close(fd);
	free(p1);
	free(p2);
	free(p5);
	free(p6);
	free(p7);
	free(p9);
#ifndef WITH_JEMALLOC
	free(p10);
#endif
	free(p11);
	say("live realloc %p 10\n", p3);
	say("live memalign %p 1000\n", p8);
	say("live mmap %p 8192\n", m2);
}

/* A delegate's own allocator, named with --alloc/--free; built on malloc
 * and free, which must not count a second time. */
__attribute__((noinline, used)) void *fx_alloc(int tag, size_t size);
__attribute__((noinline, used)) void fx_free(void *p);

void *fx_alloc(int tag, size_t size)
{
	sink = (void *)(uintptr_t)tag;
	return malloc(size);
}

void fx_free(void *p)
{
	free(p);
}

static char stacks[N_THREADS][256 * 1024] __attribute__((aligned(4096)));

static void *thread_main(void *arg)
{
	uintptr_t id = (uintptr_t)arg;

	for (int i = 0; i < THREAD_ITERS; i++) {
		void *volatile p = malloc(64 + id);

		free(p);
	}
	return malloc(1000 + id);
}

static void threads(void)
{
	pthread_t th[N_THREADS];
	void *kept[N_THREADS];

	for (uintptr_t i = 0; i < N_THREADS; i++) {
		pthread_attr_t a;

		/* Our own stacks: no thread-stack mmap in the event stream. */
		pthread_attr_init(&a);
		pthread_attr_setstack(&a, stacks[i], sizeof(stacks[i]));
		if (pthread_create(&th[i], &a, thread_main, (void *)i))
			_exit(6);
		pthread_attr_destroy(&a);
	}
	for (int i = 0; i < N_THREADS; i++)
		pthread_join(th[i], &kept[i]);
	for (int i = 0; i < N_THREADS; i++)
		say("live malloc %p %d\n", kept[i], 1000 + i);
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "seq";
	void *pre[N_PRE];

	/* "MODE unlink": delete our own executable first, as a package
	 * upgrade does to a running service. */
	if (argc > 2 && !strcmp(argv[2], "unlink")) {
		char exe[4096];
		ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);

		if (n <= 0)
			_exit(8);
		exe[n] = '\0';
		if (unlink(exe))
			_exit(9);
	}
	if (!strcmp(mode, "pre"))
		for (int i = 0; i < N_PRE; i++)
			pre[i] = malloc(100);
	say("ready %d\n", (int)getpid());
	wait_byte();
	if (!strcmp(mode, "seq")) {
		script();
	} else if (!strcmp(mode, "threads")) {
		threads();
	} else if (!strcmp(mode, "pre")) {
		void *n[10];

		for (int i = 0; i < N_PRE; i++)
			free(pre[i]);
		for (int i = 0; i < 10; i++)
			n[i] = malloc(200);
		for (int i = 0; i < 10; i += 2)
			free(n[i]);
		for (int i = 1; i < 10; i += 2)
			say("live malloc %p 200\n", n[i]);
	} else if (!strcmp(mode, "rss")) {
		/* 4 MiB of anonymous memory faulted in, then released. */
		char *m = mmap(NULL, 4 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
			       -1, 0);

		memset(m, 1, 4 << 20);
		munmap(m, 4 << 20);
	} else if (!strcmp(mode, "sampled")) {
		/* N_SMALL blocks of SMALL bytes allocated then freed; LARGE
		 * blocks (>= the test's interval) kept and released. */
		static void *small[N_SMALL];
		void *large[10];

		for (int i = 0; i < N_SMALL; i++)
			small[i] = malloc(SMALL);
		for (int i = 0; i < 10; i++)
			large[i] = malloc(LARGE);
		for (int i = 0; i < N_SMALL; i++)
			free(small[i]);
		for (int i = 0; i < 10; i += 2)
			free(large[i]);
		for (int i = 1; i < 10; i += 2)
			say("live malloc %p %d\n", large[i], LARGE);
	} else if (!strcmp(mode, "rssmode")) {
		/* Seen in rss mode: the mapping (and its pages) and the heap
		 * break moved directly; not seen: the malloc. */
		char *m = mmap(NULL, 4 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
			       -1, 0);
		uintptr_t b0;

		memset(m, 1, 4 << 20);
		/* Before reading the break: malloc may grow it itself. */
		sink = malloc(100);
		b0 = (uintptr_t)syscall(SYS_brk, 0);
		if ((uintptr_t)syscall(SYS_brk, b0 + 65536) != b0 + 65536)
			_exit(10);
		memset((void *)b0, 1, 65536);
		if ((uintptr_t)syscall(SYS_brk, b0 + 49152) != b0 + 49152)
			_exit(11);
		say("live mmap %p %d\n", m, 4 << 20);
		say("live brk %p %d\n", (void *)b0, 49152);
	} else if (!strcmp(mode, "duty")) {
		/* A malloc every 10 ms for 1.2 s. */
		for (int i = 0; i < 120; i++) {
			sink = malloc(1000);
			usleep(10000);
		}
	} else if (!strcmp(mode, "custom")) {
		void *a = fx_alloc(1, 123), *b = fx_alloc(2, 77);

		fx_free(a);
		say("live custom0 %p 77\n", b);
	} else if (!strcmp(mode, "exec")) {
		sink = malloc(111);
		execl("/proc/self/exe", argv[0], "seq", (char *)NULL);
		_exit(7);
	}
	say("done\n");
	wait_byte();
	_exit(0);
}
