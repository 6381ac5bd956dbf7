// SPDX-License-Identifier: MIT
/* memprof-demo prints what examples/README.md says, and makes exactly the
 * heap calls listed there (checked with an LD_PRELOAD interposer); its
 * conv2d and relu outputs are slices of an arena (the pools API), not heap
 * calls. */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <memprof.h>

#ifndef DEMO_PATH
#error "DEMO_PATH must name the memprof-demo executable"
#endif

struct run {
	int status;
	char out[16384];
};

/* Runs the demo with @arg (NULL: none) and @env_extra added to the
 * environment; captures stdout (and stderr after it with @with_stderr). */
static void run_demo_ex(const char *arg, char *const env_extra[], bool with_stderr, struct run *ret)
{
	int pipefd[2];
	size_t len = 0;
	ssize_t n;
	pid_t pid;

	cr_assert(eq(int, pipe2(pipefd, O_CLOEXEC), 0));
	pid = fork();
	cr_assert(ge(int, pid, 0));
	if (pid == 0) {
		char *argv[] = { DEMO_PATH, (char *)arg, NULL };

		for (size_t i = 0; env_extra && env_extra[i]; i++)
			putenv(env_extra[i]);
		dup2(pipefd[1], STDOUT_FILENO);
		if (with_stderr)
			dup2(pipefd[1], STDERR_FILENO);
		execv(argv[0], argv);
		_exit(127);
	}
	close(pipefd[1]);
	while (len + 1 < sizeof(ret->out) &&
	       (n = read(pipefd[0], ret->out + len, sizeof(ret->out) - 1 - len)) > 0)
		len += (size_t)n;
	ret->out[len] = '\0';
	close(pipefd[0]);
	cr_assert(eq(int, waitpid(pid, &ret->status, 0), pid));
}

static void run_demo(const char *arg, char *const env_extra[], struct run *ret)
{
	run_demo_ex(arg, env_extra, false, ret);
}

Test(demo, output_two_steps)
{
	static struct run r;
	char want[2048];

	snprintf(want, sizeof(want),
		 "memprof-demo (libmemprof %s): load 4 weight tensors, then 2 inference step(s) "
		 "of conv2d -> relu -> matmul -> softmax on a 1x3x16x16 input\n"
		 "step 0: class 1 (p=0.1868)\n"
		 "step 1: class 1 (p=0.1471)\n"
		 "load: peak 331344 bytes, 165672 bytes of weights live after\n"
		 "inference: peak 229160 bytes\n"
		 "end: 0 bytes in 0 blocks live, dropped markers 0\n",
		 memprof_version());
	run_demo("2", NULL, &r);
	cr_expect(eq(int, r.status, 0));
	cr_expect(eq(str, r.out, want));
}

/* MEMPROF_DEMO_TIME: the same output, then main's own runtime on stderr
 * (what bench/run times, traced or not). */
Test(demo, own_runtime_on_stderr)
{
	static struct run r;
	static char env_time[] = "MEMPROF_DEMO_TIME=1";
	char *env[] = { env_time, NULL };
	const char *tail;
	double wall, user, sys;
	long faults, vol, invol;

	run_demo_ex("2", env, true, &r);
	cr_expect(eq(int, r.status, 0));
	tail = strstr(r.out, "dropped markers 0\n");
	cr_assert(ne(ptr, (void *)tail, NULL), "%s", r.out);
	tail += strlen("dropped markers 0\n");
	cr_assert(
		eq(int,
		   sscanf(tail,
			  "memprof-demo: %lf s, user %lf s, sys %lf s, faults %ld, switches %ld+%ld\n",
			  &wall, &user, &sys, &faults, &vol, &invol),
		   6),
		"%s", tail);
	cr_expect(gt(dbl, wall, 0.0));
	cr_expect(ge(long, faults, 0));
	cr_expect(eq(ptr, (void *)strchr(tail, '\n'), (void *)(tail + strlen(tail) - 1)),
		  "one line, last");
	run_demo("2", NULL, &r);
	cr_expect(eq(ptr, strstr(r.out, "memprof-demo: "), NULL));
}

Test(demo, bad_arguments)
{
	static struct run r;

	run_demo("0", NULL, &r);
	cr_expect(eq(int, WEXITSTATUS(r.status), 2));
	cr_expect(eq(str, r.out, ""));
	run_demo("3x", NULL, &r);
	cr_expect(eq(int, WEXITSTATUS(r.status), 2));
	run_demo("--help", NULL, &r);
	cr_expect(eq(int, WEXITSTATUS(r.status), 0));
	cr_expect(eq(str, r.out, "usage: " DEMO_PATH " [STEPS]\n"));
}

#ifdef ALLOC_LOG_LIB
static const char load_calls[] = "malloc 165672\n"
				 "malloc 1728\n"
				 "malloc 64\n"
				 "malloc 163840\n"
				 "malloc 40\n"
				 "free 165672\n";
static const char arena_call[] = "malloc 32768\n"; /* the activation arena */
static const char step_calls[] = "calloc 3072\n" /* input, outside kernels */
				 "malloc 27648\n" /* conv2d im2col workspace */
				 "free 27648\n"
				 "malloc 40\n" /* matmul output */
				 "calloc 80\n" /* matmul accumulators */
				 "free 80\n"
				 "malloc 40\n" /* softmax output */
				 "malloc 40\n" /* softmax exp buffer */
				 "free 40\n"
				 "free 3072\n" /* end of step */
				 "free 40\n"
				 "free 40\n";
static const char teardown_calls[] = "free 1728\n"
				     "free 64\n"
				     "free 163840\n"
				     "free 40\n"
				     "free 32768\n";

Test(demo, exact_heap_calls)
{
	static struct run r;
	static char log[16384], want[16384];
	char log_path[] = "/tmp/mp-demo-alloc-XXXXXX";
	char env_log[64], env_preload[512];
	char *env[] = { env_log, env_preload, NULL };
	int fd = mkstemp(log_path);
	ssize_t n;

	cr_assert(ge(int, fd, 0));
	snprintf(env_log, sizeof(env_log), "MP_ALLOC_LOG=%s", log_path);
	snprintf(env_preload, sizeof(env_preload), "LD_PRELOAD=%s", ALLOC_LOG_LIB);
	run_demo("3", env, &r);
	cr_expect(eq(int, r.status, 0));
	n = read(fd, log, sizeof(log) - 1);
	close(fd);
	unlink(log_path);
	cr_assert(ge(int, (int)n, 0));
	log[n] = '\0';
	snprintf(want, sizeof(want), "%s%s%s%s%s%s", load_calls, arena_call, step_calls, step_calls,
		 step_calls, teardown_calls);
	cr_expect(eq(str, log, want));
}
#endif
