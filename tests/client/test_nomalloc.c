/* SPDX-License-Identifier: MIT */
/*
 * The marker path never allocates and makes no syscall after a thread's
 * first marker. Allocation: malloc & co. are interposed in this executable
 * (ASan build: ASan's allocator hooks) and counted on the marker thread. Syscalls: a seccomp filter that kills
 * the process on any syscall but exit is installed before the markers run.
 */
#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "memprof.h"
#include "ring_test.h"

#if defined(__SANITIZE_ADDRESS__)
#define HAVE_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define HAVE_ASAN 1
#endif
#endif

static __thread volatile int counting; /* volatile: gcc assumes malloc reads no globals */
static __thread volatile unsigned long allocs;

#ifdef HAVE_ASAN
/* ASan owns malloc; it reports every allocation and free to these hooks. */
int __sanitizer_install_malloc_and_free_hooks(void (*m)(const volatile void *, size_t),
					      void (*f)(const volatile void *));

static void malloc_hook(const volatile void *p, size_t n)
{
	(void)p;
	(void)n;
	allocs += counting;
}

static void free_hook(const volatile void *p)
{
	allocs += counting && p;
}

static void install_counting(void)
{
	__sanitizer_install_malloc_and_free_hooks(malloc_hook, free_hook);
}
#else
static void install_counting(void)
{
}

void *__libc_malloc(size_t n);
void *__libc_calloc(size_t n, size_t m);
void *__libc_realloc(void *p, size_t n);
void *__libc_memalign(size_t a, size_t n);
void __libc_free(void *p);

/* Interposed: every allocation in the process comes through here. */
void *malloc(size_t n)
{
	allocs += counting;
	return __libc_malloc(n);
}

void *calloc(size_t n, size_t m)
{
	allocs += counting;
	return __libc_calloc(n, m);
}

void *realloc(void *p, size_t n)
{
	allocs += counting;
	return __libc_realloc(p, n);
}

void free(void *p)
{
	allocs += counting && p;
	__libc_free(p);
}

int posix_memalign(void **ret, size_t a, size_t n)
{
	void *p;

	allocs += counting;
	p = __libc_memalign(a, n);
	if (!p)
		return ENOMEM;
	*ret = p;
	return 0;
}

void *aligned_alloc(size_t a, size_t n)
{
	allocs += counting;
	return __libc_memalign(a, n);
}
#endif

static const char *const names[] = { "conv", "matmul", "softmax", "relu", "add", "gather" };

/* One round of every marker kind. */
static void markers(int i)
{
	static const int64_t dims[] = { 1, 3, 224, 224 };

	memprof_tag_begin("weights");
	memprof_kernel_begin(names[i % 6]);
	memprof_kernel_input_shape(dims, 4);
	memprof_kernel_begin(names[(i + 1) % 6]);
	memprof_kernel_output_shape(dims, 2);
	memprof_kernel_end();
	memprof_kernel_end();
	memprof_tag_end();
	if (i % 64 == 0)
		memprof_phase(i % 128 ? "load" : "inference");
	(void)memprof_dropped();
}

Test(nomalloc, marker_path_never_allocates)
{
	struct mp_consumer *c;
	unsigned long total = 0;

	install_counting();
	/* the interposition works: a malloc here is counted */
	counting = 1;
	{
		void *volatile p = malloc(16);

		free(p);
	}
	counting = 0;
	cr_assert_eq(allocs, 2, "malloc interposition is not active (%lu)", allocs);
	allocs = 0;

	/* warm up: ring, thread slot, names, attached and detached paths */
	for (int i = 0; i < 256; i++)
		markers(i);
	cr_assert_eq(mp_consumer_open_pid(getpid(), &c), 0);
	for (int i = 0; i < 256; i++)
		markers(i);
	for (int round = 0; round < 40; round++) {
		counting = 1;
		/* attached; the ring fills up on some rounds: drop path too */
		for (int i = 0; i < 5000; i++)
			markers(i);
		counting = 0;
		total += allocs;
		allocs = 0;
		if (round % 2)
			drop_all(c);
	}
	cr_assert_gt(mp_consumer_drops(c), 0, "the drop path was not exercised");
	mp_consumer_free(c);
	counting = 1;
	for (int i = 0; i < 100000; i++)
		markers(i); /* detached */
	counting = 0;
	total += allocs;
	cr_assert_eq(total, 0, "%lu allocations on the marker path", total);
}

/* Runs the markers in a child under a seccomp filter that kills on any
 * syscall but exit_group; @control makes one syscall on purpose. */
static int markers_under_seccomp(bool control)
{
	struct mp_consumer *c;
	int status;
	pid_t pid;

	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		struct sock_filter f[] = {
			BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
			BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_exit_group, 0, 1),
			BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
			BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
		};
		struct sock_fprog prog = { .len = sizeof(f) / sizeof(f[0]), .filter = f };

		for (int i = 0; i < 256; i++)
			markers(i);
		if (mp_consumer_open_pid(getpid(), &c) < 0)
			_exit(2);
		for (int i = 0; i < 256; i++)
			markers(i);
		if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 ||
		    syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) < 0)
			_exit(3);
		/* any syscall from here on kills us with SIGSYS */
		for (int i = 0; i < 100000; i++)
			markers(i); /* attached, the ring fills: drop path too */
		if (control)
			syscall(SYS_getppid);
		syscall(SYS_exit_group, 0);
	}
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	return status;
}

Test(nomalloc, marker_path_makes_no_syscall)
{
	int status = markers_under_seccomp(false);

	cr_assert(!WIFSIGNALED(status), "marker child killed by signal %d (a syscall)",
		  WTERMSIG(status));
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child exit %d",
		  WEXITSTATUS(status));
	/* control: the filter does catch a syscall */
	status = markers_under_seccomp(true);
	cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGSYS, "control child status %#x",
		  status);
}
