// SPDX-License-Identifier: MIT
/* The sampler on a real child that faults in 64 MiB of fresh anonymous pages. */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../common/wait.h"
#include "rss.h"

extern char **environ;

#define TOUCH_BYTES (64ull << 20)

struct child {
	pid_t pid;
	int cmd; /* parent -> child */
	int done; /* child -> parent */
};

static void command(struct child *c, char what);

/* The measured child is tests/proc/rss_child.c, a separate executable
 * without sanitizers, so its RSS is the same in every build. It waits for
 * 't' (touch 64 MiB) and 'q' (exit 0), acking each. */
static struct child start_child_ex(int leaderless)
{
	char *argv[] = { RSS_CHILD, leaderless ? "leaderless" : NULL, NULL };
	posix_spawn_file_actions_t fa;
	int to[2], from[2];
	struct child c;

	cr_assert(eq(int, pipe2(to, O_CLOEXEC), 0));
	cr_assert(eq(int, pipe2(from, O_CLOEXEC), 0));
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, to[0], 0);
	posix_spawn_file_actions_adddup2(&fa, from[1], 1);
	cr_assert(eq(int, posix_spawn(&c.pid, RSS_CHILD, &fa, NULL, argv, environ), 0));
	posix_spawn_file_actions_destroy(&fa);
	close(to[0]);
	close(from[1]);
	c.cmd = to[1];
	c.done = from[0];
	/* Once it answers, it is loaded and waits in read(): nothing but
	 * the touch changes its RSS from here on. */
	command(&c, 'n');
	return c;
}

static struct child start_child(void)
{
	return start_child_ex(0);
}

static char proc_state(pid_t pid)
{
	char path[64], buf[512], *p;
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	cr_assert(ge(int, fd, 0));
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	cr_assert(gt(int, (int)n, 0));
	buf[n] = '\0';
	p = strrchr(buf, ')');
	cr_assert_not_null(p);
	return p[2];
}

static void command(struct child *c, char what)
{
	char ack = 0;

	cr_assert(eq(int, (int)write(c->cmd, &what, 1), 1));
	cr_assert(eq(int, (int)read(c->done, &ack, 1), 1));
	cr_assert(eq(chr, ack, what));
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Waits for the timer, then samples; checks what must hold of any sample of
 * a live, quiescent process. */
static struct mp_rss_sample timed_sample(struct mp_rss_sampler *s, int want_pss)
{
	struct pollfd pfd = { .fd = mp_rss_sampler_fd(s), .events = POLLIN };
	struct mp_rss_sample got;
	uint64_t before, after;

	/* A bound for a host that does not run us for seconds, not a
	 * measure of the timer. */
	cr_assert(eq(int, poll(&pfd, 1, 30000), 1), "the timer did not fire in 30 s");
	before = now_ns();
	cr_assert(eq(int, mp_rss_sampler_sample(s, &got), 0));
	after = now_ns();
	cr_expect(ge(u64, got.ts_ns, before));
	cr_expect(le(u64, got.ts_ns, after));
	/* the child is blocked in read(): the counters are one snapshot */
	cr_expect(eq(u64, got.vm_rss, got.rss_anon + got.rss_file + got.rss_shmem));
	cr_expect(ge(u64, got.vm_hwm, got.vm_rss));
	cr_expect(eq(u64, got.vm_swap, 0));
	if (want_pss) {
		cr_expect(ne(u64, got.pss, UINT64_MAX));
		cr_expect(le(u64, got.pss, got.vm_rss));
	} else {
		cr_expect(eq(u64, got.pss, UINT64_MAX));
	}
	return got;
}

static uint64_t dist(uint64_t a, uint64_t b)
{
	return a > b ? a - b : b - a;
}

Test(rss_sampler, touch_64mib)
{
	struct child c = start_child();
	struct mp_rss_sampler *s = NULL;
	struct mp_rss_sample before, after, gone;
	int status;

	cr_assert(eq(int, mp_rss_sampler_new(c.pid, MP_RSS_DEFAULT_HZ, 1, &s), 0));
	mp_rss_sampler_set_async_pss(s, false);
	before = timed_sample(s, 1);
	command(&c, 't');
	after = timed_sample(s, 1);

	cr_expect(le(u64, dist(after.vm_rss - before.vm_rss, TOUCH_BYTES), TOUCH_BYTES / 20),
		  "VmRSS grew by %llu bytes, want 64 MiB +- 5%%",
		  (unsigned long long)(after.vm_rss - before.vm_rss));
	cr_expect(le(u64, dist(after.rss_anon - before.rss_anon, TOUCH_BYTES), TOUCH_BYTES / 20));
	cr_expect(le(u64, dist(after.pss - before.pss, TOUCH_BYTES), TOUCH_BYTES / 20));
	/* the child's code was faulted in before the first sample */
	cr_expect(le(u64, dist(after.rss_file, before.rss_file), 1 << 20));
	cr_expect(eq(u64, after.rss_shmem, before.rss_shmem));
	cr_expect(gt(u64, after.ts_ns, before.ts_ns));

	/* a zombie has a status file but no memory */
	command(&c, 'q');
	cr_assert(eq(int, waitid(P_PID, (id_t)c.pid, NULL, WEXITED | WNOWAIT), 0));
	gone = before;
	cr_expect(eq(int, mp_rss_sampler_sample(s, &gone), -ESRCH));
	cr_expect(eq(int, memcmp(&gone, &before, sizeof(gone)), 0), "output touched on error");
	cr_assert(eq(int, waitpid(c.pid, &status, 0), c.pid));
	cr_expect(eq(int, status, 0));
	cr_expect(eq(int, mp_rss_sampler_read(s, true, &gone), -ESRCH));
	mp_rss_sampler_free(s);
	close(c.cmd);
	close(c.done);
}

/* pthread_exit() in main: the leader is a zombie, the process lives on. */
Test(rss_sampler, main_thread_exited)
{
	struct child c = start_child_ex(1);
	struct mp_rss_sampler *s = NULL;
	struct mp_rss_sample before, after, gone;
	int status;

	MP_TEST_WAIT_FOR(proc_state(c.pid) == 'Z', 30000);
	cr_assert(eq(chr, proc_state(c.pid), 'Z'), "the main thread did not exit");
	cr_assert(eq(int, mp_rss_sampler_new(c.pid, MP_RSS_DEFAULT_HZ, 1, &s), 0));
	mp_rss_sampler_set_async_pss(s, false);
	before = timed_sample(s, 1);
	command(&c, 't');
	after = timed_sample(s, 1);
	cr_expect(le(u64, dist(after.vm_rss - before.vm_rss, TOUCH_BYTES), TOUCH_BYTES / 20),
		  "VmRSS grew by %llu bytes, want 64 MiB +- 5%%",
		  (unsigned long long)(after.vm_rss - before.vm_rss));
	cr_expect(le(u64, dist(after.pss - before.pss, TOUCH_BYTES), TOUCH_BYTES / 20));

	command(&c, 'q');
	cr_assert(eq(int, waitid(P_PID, (id_t)c.pid, NULL, WEXITED | WNOWAIT), 0));
	gone = before;
	cr_expect(eq(int, mp_rss_sampler_sample(s, &gone), -ESRCH));
	cr_expect(eq(int, memcmp(&gone, &before, sizeof(gone)), 0), "output touched on error");
	cr_assert(eq(int, waitpid(c.pid, &status, 0), c.pid));
	cr_expect(eq(int, status, 0));
	mp_rss_sampler_free(s);
	close(c.cmd);
	close(c.done);
}

Test(rss_sampler, pss_cadence_and_on_demand)
{
	struct child c = start_child();
	struct mp_rss_sampler *s = NULL;
	struct mp_rss_sample got;
	int status;

	cr_assert(eq(int, mp_rss_sampler_new(c.pid, 200, 3, &s), 0));
	mp_rss_sampler_set_async_pss(s, false);
	mp_rss_sampler_set_pss_cost_ratio(s, 0);
	/* Pss on samples 0 and 3 of the timer cadence, never on others */
	for (int i = 0; i < 7; i++)
		timed_sample(s, i % 3 == 0);
	/* an on-demand read does not shift the cadence */
	cr_assert(eq(int, mp_rss_sampler_read(s, true, &got), 0));
	cr_expect(ne(u64, got.pss, UINT64_MAX));
	cr_assert(eq(int, mp_rss_sampler_read(s, false, &got), 0));
	cr_expect(eq(u64, got.pss, UINT64_MAX));
	timed_sample(s, 0); /* tick 7 */
	timed_sample(s, 0);
	timed_sample(s, 1); /* tick 9 */

	/* A late caller: the expirations are coalesced and counted. Being
	 * late is the scenario: 60 ms at 200 Hz are at least 11 expirations
	 * (10 missed), and a longer sleep on a loaded host only more. */
	usleep(60 * 1000);
	timed_sample(s, 0);
	cr_expect(ge(u64, mp_rss_sampler_missed(s), 5));

	command(&c, 'q');
	cr_assert(eq(int, waitpid(c.pid, &status, 0), c.pid));
	mp_rss_sampler_free(s);
	close(c.cmd);
	close(c.done);
}

/* Pss on every sample asked for, but the reads' cost bounds them: samples
 * taken back to back (each costs about what a Pss read does) get Pss only
 * once the bound's ratio of its cost has passed, so at most one in ten
 * here; the others are counted as deferred. */
Test(rss_sampler, pss_bounded_by_its_cost)
{
	struct child c = start_child();
	struct mp_rss_sampler *s = NULL;
	struct mp_rss_sample got;
	unsigned with = 0;
	int status;

	cr_assert(eq(int, mp_rss_sampler_new(c.pid, 1000, 1, &s), 0));
	mp_rss_sampler_set_async_pss(s, false);
	for (int i = 0; i < 100; i++) {
		cr_assert(eq(int, mp_rss_sampler_sample(s, &got), 0));
		with += got.pss != UINT64_MAX;
	}
	cr_log_info("%u of 100 back-to-back samples with Pss", with);
	cr_expect(ge(u32, with, 1));
	cr_expect(le(u32, with, 10));
	cr_expect(eq(u64, mp_rss_sampler_pss_deferred(s), 100 - with));

	command(&c, 'q');
	cr_assert(eq(int, waitpid(c.pid, &status, 0), c.pid));
	mp_rss_sampler_free(s);
	close(c.cmd);
	close(c.done);
}

/* ---- timed Pss reads on the sampler's own thread (the default) ---- */

static atomic_bool hold;
static sem_t entered;

/* mp_rss_pss_read_hook: the read in flight stays there while @hold. */
static void held_read(void)
{
	sem_post(&entered);
	while (atomic_load(&hold))
		usleep(1000);
}

static int open_fds(void)
{
	int n = 0;
	DIR *d = opendir("/proc/self/fd");

	cr_assert_not_null(d);
	while (readdir(d))
		n++;
	closedir(d);
	return n;
}

static void *release_later(void *arg)
{
	(void)arg;
	usleep(100 * 1000);
	atomic_store(&hold, false);
	return NULL;
}

/* The timed Pss read is the sampler's thread's: a sample that asks for it
 * returns while the read is held in flight (were it read by the caller,
 * the hook would hold the test itself until its timeout), and the samples
 * that follow carry no Pss and ask for none (one read at a time) until it
 * ends; its Pss then goes out with the next sample, read after the touch.
 * Freeing the sampler waits for a read in flight and leaves no fd. */
Test(rss_sampler, pss_read_on_a_thread_of_its_own, .timeout = 120)
{
	struct child c = start_child();
	struct mp_rss_sampler *s = NULL;
	struct mp_rss_sample before, got;
	pthread_t th;
	int status, fds = open_fds(), i;

	cr_assert(eq(int, sem_init(&entered, 0, 0), 0));
	atomic_store(&hold, true);
	mp_rss_pss_read_hook = held_read;
	cr_assert(eq(int, mp_rss_sampler_new(c.pid, 1000, 1, &s), 0));
	mp_rss_sampler_set_pss_cost_ratio(s, 0);
	/* the on-demand read stays the caller's */
	cr_assert(eq(int, mp_rss_sampler_read(s, true, &before), 0));
	cr_assert(ne(u64, before.pss, UINT64_MAX));

	got = timed_sample(s, 0);
	cr_assert(eq(int, sem_wait(&entered), 0), "the Pss thread did not start its read");
	for (i = 0; i < 3; i++)
		got = timed_sample(s, 0);
	cr_expect(eq(u64, mp_rss_sampler_pss_deferred(s), 3), "asked again with one in flight");

	command(&c, 't');
	atomic_store(&hold, false);
	/* the first sample after the read ended has its Pss */
	for (i = 0; i < 30000; i++) {
		struct pollfd pfd = { .fd = mp_rss_sampler_fd(s), .events = POLLIN };

		cr_assert(eq(int, poll(&pfd, 1, 30000), 1));
		cr_assert(eq(int, mp_rss_sampler_sample(s, &got), 0));
		if (got.pss != UINT64_MAX)
			break;
	}
	cr_assert(ne(u64, got.pss, UINT64_MAX), "no Pss came back");
	cr_expect(le(u64, dist(got.pss - before.pss, TOUCH_BYTES), TOUCH_BYTES / 20),
		  "Pss grew by %llu bytes, want 64 MiB +- 5%%",
		  (unsigned long long)(got.pss - before.pss));
	cr_expect(le(u64, got.pss, got.vm_rss));

	/* a read in flight when the sampler goes */
	atomic_store(&hold, true);
	for (i = 0; i < 30000 && sem_trywait(&entered) < 0; i++) {
		struct pollfd pfd = { .fd = mp_rss_sampler_fd(s), .events = POLLIN };

		cr_assert(eq(int, poll(&pfd, 1, 30000), 1));
		cr_assert(eq(int, mp_rss_sampler_sample(s, &got), 0));
	}
	cr_assert(eq(int, pthread_create(&th, NULL, release_later, NULL), 0));
	mp_rss_sampler_free(s);
	cr_assert(eq(int, pthread_join(th, NULL), 0));
	mp_rss_pss_read_hook = NULL;
	sem_destroy(&entered);
	cr_expect(eq(int, open_fds(), fds), "the sampler left an fd open");

	command(&c, 'q');
	cr_assert(eq(int, waitpid(c.pid, &status, 0), c.pid));
	close(c.cmd);
	close(c.done);
}

/* pthread_exit() in main, on the Pss thread: its Pss still comes back,
 * from the live thread's smaps_rollup. */
Test(rss_sampler, pss_thread_after_main_thread_exited, .timeout = 120)
{
	struct child c = start_child_ex(1);
	struct mp_rss_sampler *s = NULL;
	struct mp_rss_sample got = { .pss = UINT64_MAX };
	int status;

	MP_TEST_WAIT_FOR(proc_state(c.pid) == 'Z', 30000);
	cr_assert(eq(chr, proc_state(c.pid), 'Z'), "the main thread did not exit");
	cr_assert(eq(int, mp_rss_sampler_new(c.pid, 1000, 1, &s), 0));
	mp_rss_sampler_set_pss_cost_ratio(s, 0);
	for (int i = 0; i < 30000 && got.pss == UINT64_MAX; i++) {
		struct pollfd pfd = { .fd = mp_rss_sampler_fd(s), .events = POLLIN };

		cr_assert(eq(int, poll(&pfd, 1, 30000), 1));
		cr_assert(eq(int, mp_rss_sampler_sample(s, &got), 0));
	}
	cr_expect(ne(u64, got.pss, UINT64_MAX), "no Pss came back");
	cr_expect(le(u64, got.pss, got.vm_rss));
	command(&c, 'q');
	cr_assert(eq(int, waitid(P_PID, (id_t)c.pid, NULL, WEXITED | WNOWAIT), 0));
	cr_expect(eq(int, mp_rss_sampler_sample(s, &got), -ESRCH));
	cr_assert(eq(int, waitpid(c.pid, &status, 0), c.pid));
	mp_rss_sampler_free(s);
	close(c.cmd);
	close(c.done);
}

Test(rss_sampler, no_pss_never_opens_smaps)
{
	struct child c = start_child();
	struct mp_rss_sampler *s = NULL;
	int status;

	cr_assert(eq(int, mp_rss_sampler_new(c.pid, 1000, 0, &s), 0));
	for (int i = 0; i < 3; i++)
		timed_sample(s, 0);
	command(&c, 'q');
	cr_assert(eq(int, waitpid(c.pid, &status, 0), c.pid));
	mp_rss_sampler_free(s);
	close(c.cmd);
	close(c.done);
}

Test(rss_sampler, bad_arguments)
{
	struct mp_rss_sampler *s = (struct mp_rss_sampler *)&s;
	pid_t dead;
	int status;

	cr_expect(eq(int, mp_rss_sampler_new(0, 100, 10, &s), -EINVAL));
	cr_expect(eq(int, mp_rss_sampler_new(getpid(), 0, 10, &s), -EINVAL));
	cr_expect(eq(int, mp_rss_sampler_new(getpid(), MP_RSS_MAX_HZ + 1, 10, &s), -EINVAL));
	/* a pid that just went away */
	dead = fork();
	cr_assert(ge(int, dead, 0));
	if (dead == 0)
		_exit(0);
	cr_assert(eq(int, waitpid(dead, &status, 0), dead));
	cr_expect(eq(int, mp_rss_sampler_new(dead, 100, 10, &s), -ESRCH));
	cr_expect(eq(ptr, s, (struct mp_rss_sampler *)&s), "output touched on error");
	mp_rss_sampler_free(NULL);
}
