/* SPDX-License-Identifier: MIT */
/* fork, thread exit, exec and discovery across mount namespaces. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../common/helpers.h"
#include "memprof.h"
#include "ring_test.h"

struct child {
	pid_t pid;
	FILE *in; /* child's stdin */
	FILE *out; /* child's stdout */
};

/* Runs @argv with MEMPROF_RING_LAZY=1 (ring at the first marker) or without
 * it (ring when libmemprof loads). */
static void spawn(struct child *ch, char *const argv[], bool lazy)
{
	int in[2], out[2];

	cr_assert_eq(pipe2(in, O_CLOEXEC), 0);
	cr_assert_eq(pipe2(out, O_CLOEXEC), 0);
	ch->pid = fork();
	cr_assert_geq(ch->pid, 0);
	if (ch->pid == 0) {
		dup2(in[0], 0);
		dup2(out[1], 1);
		if (lazy)
			setenv("MEMPROF_RING_LAZY", "1", 1);
		else
			unsetenv("MEMPROF_RING_LAZY");
		execv(argv[0], argv);
		_exit(127);
	}
	close(in[0]);
	close(out[1]);
	ch->in = fdopen(in[1], "w");
	ch->out = fdopen(out[0], "r");
}

static void expect_line(struct child *ch, const char *line)
{
	char buf[64];

	cr_assert_not_null(fgets(buf, sizeof(buf), ch->out), "child said nothing, expected %s",
			   line);
	buf[strcspn(buf, "\n")] = '\0';
	cr_assert_str_eq(buf, line);
}

static void go(struct child *ch)
{
	fputs("go\n", ch->in);
	fflush(ch->in);
}

static void reap(struct child *ch)
{
	int status;

	fclose(ch->in);
	fclose(ch->out);
	cr_assert_eq(waitpid(ch->pid, &status, 0), ch->pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %#x", status);
}

/* Opens @pid's ring and asserts its only record is kernel @name, open at
 * attach with @flags, begun by the process's main thread. */
static struct mp_consumer *expect_open_kernel_flags(pid_t pid, const char *name, uint32_t flags)
{
	struct mp_consumer *c;
	struct mp_record rec;
	int r = mp_consumer_open_pid(pid, &c);

	cr_assert_eq(r, 0, "open pid %d: %s", (int)pid, strerror(-r));
	cr_assert_eq(mp_consumer_pid(c), pid);
	cr_assert_eq(read_one(c, &rec), 1);
	assert_rec(&rec, &(struct exp_rec)REC(MP_REC_KERNEL_BEGIN, flags, name), (uint32_t)pid, 0);
	cr_assert_eq(read_one(c, &rec), 0);
	return c;
}

/* Same, for a kernel begun while no consumer was attached. */
static struct mp_consumer *expect_open_kernel(pid_t pid, const char *name)
{
	return expect_open_kernel_flags(pid, name, MP_REC_F_OPEN_AT_ATTACH | MP_REC_F_TS_UNKNOWN);
}

static bool need_root(void)
{
	mp_test_need_root("opening another process's /proc/PID/fd");
	return true;
}

Test(lifecycle, fork_child_gets_fresh_ring)
{
	struct mp_consumer *cp, *cc;
	struct mp_record rec;
	int p2c[2], c2p[2];
	pid_t pid;
	char b;

	if (!need_root())
		return;
	cr_assert_eq(memprof_kernel_begin("parent"), 0);
	cr_assert_eq(pipe(p2c), 0);
	cr_assert_eq(pipe(c2p), 0);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		/* child: no ring until its first marker; the inherited
		 * "parent" kernel is not in the child's ring */
		if (read(p2c[0], &b, 1) != 1)
			_exit(2);
		if (memprof_kernel_begin("child") < 0)
			_exit(3);
		if (write(c2p[1], "x", 1) != 1 || read(p2c[0], &b, 1) != 1)
			_exit(4);
		_exit(memprof_kernel_end() == 0 ? 0 : 5);
	}
	cr_assert_eq(mp_consumer_open_pid(pid, &cc), -ENOENT);
	cr_assert_eq(write(p2c[1], "x", 1), 1);
	cr_assert_eq(read(c2p[0], &b, 1), 1);
	cc = expect_open_kernel(pid, "child");
	/* the parent's ring is untouched: still one open kernel, and its
	 * markers keep working */
	cp = expect_open_kernel(getpid(), "parent");
	cr_assert_eq(memprof_kernel_end(), 0);
	cr_assert_eq(read_one(cp, &rec), 1);
	assert_rec(&rec, &(struct exp_rec)REC(MP_REC_KERNEL_END, 0, NULL), (uint32_t)getpid(), 0);
	cr_assert_eq(write(p2c[1], "x", 1), 1);
	cr_assert_eq(waitpid(pid, &(int){ 0 }, 0), pid);
	/* the child's END went to the child's ring only */
	cr_assert_eq(read_one(cc, &rec), 1);
	assert_rec(&rec, &(struct exp_rec)REC(MP_REC_KERNEL_END, 0, NULL), (uint32_t)pid, 0);
	cr_assert_eq(read_one(cp, &rec), 0);
	mp_consumer_free(cc);
	mp_consumer_free(cp);
}

static uint32_t exiting_tid;

static void *exits_with_open_kernel(void *arg)
{
	(void)arg;
	exiting_tid = (uint32_t)gettid();
	memprof_kernel_begin("left-open");
	memprof_tag_begin("tag-left-open");
	return NULL;
}

static void *one_marker(void *arg)
{
	int *ret = arg;

	*ret = memprof_kernel_begin("short");
	if (*ret == 0)
		*ret = memprof_kernel_end();
	return NULL;
}

Test(lifecycle, thread_exit_releases_slot)
{
	struct mp_record recs[8];
	struct mp_consumer *c;
	pthread_t th;
	size_t n;

	cr_assert_eq(memprof_phase("threads"), 0);
	cr_assert_eq(mp_consumer_open_pid(getpid(), &c), 0);
	n = drain(c, recs, 8);
	cr_assert_eq(n, 1);
	cr_assert_eq(pthread_create(&th, NULL, exits_with_open_kernel, NULL), 0);
	cr_assert_eq(pthread_join(th, NULL), 0);
	n = drain(c, recs, 8);
	const struct exp_rec exp[] = {
		REC(MP_REC_KERNEL_BEGIN, 0, "left-open"),
		REC(MP_REC_TAG_BEGIN, 0, "tag-left-open"),
		REC(MP_REC_TAG_END, MP_REC_F_THREAD_EXIT, NULL),
		REC(MP_REC_KERNEL_END, MP_REC_F_THREAD_EXIT, NULL),
	};
	cr_assert_eq(n, 4, "got %zu records", n);
	for (size_t i = 0; i < n; i++)
		assert_rec(&recs[i], &exp[i], exiting_tid, i);
	mp_consumer_free(c);

	/* 2000 short-lived threads, far more than the 512 thread slots: each
	 * exit gives its slot back, so no marker is ever refused */
	for (int i = 0; i < 2000; i++) {
		int r = -1;

		cr_assert_eq(pthread_create(&th, NULL, one_marker, &r), 0);
		cr_assert_eq(pthread_join(th, NULL), 0);
		cr_assert_eq(r, 0, "thread %d: %s", i, memprof_strerror(r));
	}
	cr_assert_eq(memprof_dropped(), 0);
}

/* After exec, the old ring is gone with the old image (close-on-exec memfd,
 * mapping dropped); the new image has its own ring. @lazy: the new ring
 * appears at the first marker rather than when libmemprof loads. */
static void exec_gets_new_ring(bool lazy)
{
	char *argv[] = { RING_HELPER, "exec", NULL };
	struct mp_consumer *old, *c = NULL, *c2;
	struct mp_record rec;
	struct child ch;

	if (!need_root())
		return;
	spawn(&ch, argv, lazy);
	expect_line(&ch, "ready1");
	old = expect_open_kernel(ch.pid, "before-exec");
	go(&ch);
	expect_line(&ch, "ready2");
	if (lazy) {
		/* no marker yet in the new image: no ring at all */
		cr_assert_eq(mp_consumer_open_pid(ch.pid, &c), -ENOENT);
	} else {
		/* a new, empty ring: "before-exec" is not open in it */
		cr_assert_eq(mp_consumer_open_pid(ch.pid, &c), 0);
		cr_assert_eq(read_one(c, &rec), 0);
	}
	go(&ch);
	expect_line(&ch, "ready3");
	if (c) {
		/* the new image's marker reaches the new ring, live */
		cr_assert_eq(read_one(c, &rec), 1);
		assert_rec(&rec, &(struct exp_rec)REC(MP_REC_KERNEL_BEGIN, 0, "after-exec"),
			   (uint32_t)ch.pid, 0);
		/* begun while c was attached: its begin time is known */
		c2 = expect_open_kernel_flags(ch.pid, "after-exec", MP_REC_F_OPEN_AT_ATTACH);
	} else {
		c2 = expect_open_kernel(ch.pid, "after-exec");
	}
	/* the old mapping stays readable and stays silent */
	cr_assert_eq(read_one(old, &rec), 0);
	go(&ch);
	reap(&ch);
	mp_consumer_free(c2);
	mp_consumer_free(c);
	mp_consumer_free(old);
}

Test(lifecycle, exec_gets_new_ring_at_first_marker)
{
	exec_gets_new_ring(true);
}

Test(lifecycle, exec_gets_new_ring_at_load)
{
	exec_gets_new_ring(false);
}

/* Without MEMPROF_RING_LAZY the ring exists before the first marker. */
Test(lifecycle, ring_created_at_load)
{
	char *argv[] = { RING_HELPER, "idle", NULL };
	struct mp_consumer *c;
	struct mp_record rec;
	struct child ch;

	if (!need_root())
		return;
	spawn(&ch, argv, false);
	expect_line(&ch, "ready");
	cr_assert_eq(mp_consumer_open_pid(ch.pid, &c), 0);
	cr_assert_eq(mp_consumer_pid(c), ch.pid);
	cr_assert_eq(read_one(c, &rec), 0);
	mp_consumer_free(c);
	go(&ch);
	reap(&ch);

	spawn(&ch, argv, true);
	expect_line(&ch, "ready");
	cr_assert_eq(mp_consumer_open_pid(ch.pid, &c), -ENOENT);
	go(&ch);
	reap(&ch);
}

Test(lifecycle, discovery_in_private_mount_namespace)
{
	char *argv[] = { "/usr/bin/unshare",
			 "-m",
			 "--propagation",
			 "private",
			 "/bin/sh",
			 "-c",
			 "mount -t tmpfs none /dev/shm && exec " RING_HELPER " hold in-namespace",
			 NULL };
	char p1[64], p2[64];
	struct stat s1, s2;
	struct mp_consumer *c;
	struct child ch;

	if (!need_root())
		return;
	if (access(argv[0], X_OK) != 0) {
		cr_log_warn("skipped: %s not installed (util-linux)", argv[0]);
		cr_skip_test("no unshare");
		return;
	}
	spawn(&ch, argv, true);
	expect_line(&ch, "ready");
	snprintf(p1, sizeof(p1), "/proc/%d/ns/mnt", (int)getpid());
	snprintf(p2, sizeof(p2), "/proc/%d/ns/mnt", (int)ch.pid);
	cr_assert_eq(stat(p1, &s1), 0);
	cr_assert_eq(stat(p2, &s2), 0);
	cr_assert_neq(s1.st_ino, s2.st_ino, "the helper did not get its own mount namespace");
	c = expect_open_kernel(ch.pid, "in-namespace");
	go(&ch);
	reap(&ch);
	mp_consumer_free(c);
}

/* A memfd with the ring's name in a process's fd table that was not created
 * by that process (here: created by us, inherited by a raw fork child) is
 * refused: the header's creator pid does not match. */
Test(lifecycle, ring_of_another_pid_refused)
{
	struct mp_consumer *c;
	int p2c[2];
	pid_t pid;
	char b;

	if (!need_root())
		return;
	cr_assert_eq(memprof_kernel_begin("mine"), 0);
	cr_assert_eq(pipe(p2c), 0);
	/* raw clone: no pthread_atfork handler runs, the child keeps our
	 * memfd with our pid in its header */
	pid = (pid_t)syscall(SYS_clone, SIGCHLD, 0, 0, 0, 0);
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		if (read(p2c[0], &b, 1) != 1)
			_exit(2);
		_exit(0);
	}
	cr_assert_eq(mp_consumer_open_pid(pid, &c), -ENOENT);
	cr_assert_eq(write(p2c[1], "x", 1), 1);
	cr_assert_eq(waitpid(pid, &(int){ 0 }, 0), pid);
	mp_consumer_free(expect_open_kernel(getpid(), "mine"));
}
