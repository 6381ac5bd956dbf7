// SPDX-License-Identifier: MIT
/*
 * A daemon that dies releases its target (docs/RING.md "A consumer that
 * dies", docs/SERVICE.md "When the daemon dies"): memprofd --pid, and the
 * service, attached on the in-process path to a target that allocates
 * without pause, are killed with SIGKILL. Within 3 s the target's ring is
 * detached and its interposer dormant, its allocation rate per CPU second
 * is back to the one it had before the attach, a precise-mode wait never
 * ran to its 1 s timeout, and a later attach profiles it as usual. Rates
 * are ratios to the target's own dormant rate measured in the same test.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <inttypes.h>
#include <sys/mman.h>

#include "helpers.h"
#include "lease_stats.h"
#include "ring_abi.h"

#define LOAD(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
/* the target's CPU time per rate window */
#define WINDOW_CPU_NS (100 * 1000 * 1000ull)
/* a rate this far below the dormant one is not dormant */
#define DORMANT_SHARE 0.7
/* the precise wait's timeout (libclient/heap_writer.c WAIT_MAX_NS) */
#define WAIT_MAX_NS (1000 * 1000 * 1000ull)
#define RELEASE_BOUND_MS 3000

struct target {
	pid_t pid;
	char pidbuf[16];
	struct lease_stats *st;
	const struct mp_ring_hdr *hdr;
};

/* The header of @pid's ring, mapped read-only (the test's own open file:
 * no lock, nothing written). */
static const struct mp_ring_hdr *ring_of(pid_t pid)
{
	static const char want[] = "/memfd:" MP_RING_MEMFD_NAME " (deleted)";
	char dir[64], link[sizeof(want) + 1];
	const struct mp_ring_hdr *h = NULL;
	struct dirent *de;
	DIR *d;

	snprintf(dir, sizeof(dir), "/proc/%d/fd", (int)pid);
	d = opendir(dir);
	cr_assert_not_null(d, "%s", dir);
	while (!h && (de = readdir(d))) {
		ssize_t n = readlinkat(dirfd(d), de->d_name, link, sizeof(link));
		int fd;

		if (n != (ssize_t)sizeof(want) - 1 || memcmp(link, want, (size_t)n))
			continue;
		fd = openat(dirfd(d), de->d_name, O_RDONLY | O_CLOEXEC);
		cr_assert_geq(fd, 0);
		h = mmap(NULL, sizeof(*h), PROT_READ, MAP_SHARED, fd, 0);
		cr_assert_neq(h, MAP_FAILED);
		close(fd);
	}
	closedir(d);
	cr_assert_not_null(h, "pid %d has no marker ring", (int)pid);
	return h;
}

static void target_start(struct target *t)
{
	char *stats = tmp_of("stats"), line[64];
	char *argv[] = { path_of("tests/service/fixture-lease"), stats, NULL };
	int fd = open(stats, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644), pipefd[2];
	FILE *f;

	cr_assert_geq(fd, 0);
	cr_assert_eq(ftruncate(fd, 4096), 0);
	t->st = mmap(NULL, sizeof(*t->st), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	cr_assert_neq(t->st, MAP_FAILED);
	close(fd);
	cr_assert_eq(pipe2(pipefd, O_CLOEXEC), 0);
	t->pid = spawn(argv, pipefd[1], -1);
	close(pipefd[1]);
	f = fdopen(pipefd[0], "r");
	cr_assert_not_null(fgets(line, sizeof(line), f), "fixture-lease said nothing");
	cr_assert_str_eq(line, "ready\n");
	fclose(f);
	snprintf(t->pidbuf, sizeof(t->pidbuf), "%d", (int)t->pid);
	t->hdr = ring_of(t->pid);
}

static void target_stop(struct target *t)
{
	int st;

	__atomic_store_n(&t->st->stop, 1, __ATOMIC_RELAXED);
	cr_assert_eq(waitpid(t->pid, &st, 0), t->pid);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "fixture-lease status %d", st);
}

struct counts {
	uint64_t pairs[2], cpu_ns[2];
};

/* The counts of one step of the fixture (a seqlock read). */
static struct counts counts_of(const struct target *t)
{
	struct counts c;
	uint64_t s0, s1;

	do {
		s0 = LOAD(&t->st->seq);
		for (int i = 0; i < 2; i++) {
			c.pairs[i] = __atomic_load_n(&t->st->pairs[i], __ATOMIC_RELAXED);
			c.cpu_ns[i] = __atomic_load_n(&t->st->cpu_ns[i], __ATOMIC_RELAXED);
		}
		__atomic_thread_fence(__ATOMIC_ACQUIRE);
		s1 = __atomic_load_n(&t->st->seq, __ATOMIC_RELAXED);
	} while ((s0 & 1) || s0 != s1);
	return c;
}

static uint64_t cpu_of(const struct target *t)
{
	struct counts c = counts_of(t);

	return c.cpu_ns[LEASE_MP] + c.cpu_ns[LEASE_LIBC];
}

/* The interposed loop's rate (pairs per CPU second) as a share of the
 * rate of the same loop past the interposer, over the same windows: the
 * best of three windows of WINDOW_CPU_NS of the target's CPU time. */
static double rate(struct target *t)
{
	double best = 0;

	for (int i = 0; i < 3; i++) {
		struct counts a = counts_of(t), b;
		double r[2];

		cr_assert(MP_TEST_WAIT_FOR(cpu_of(t) - (a.cpu_ns[0] + a.cpu_ns[1]) >= WINDOW_CPU_NS,
					   60000),
			  "the target stopped running");
		b = counts_of(t);
		for (int k = 0; k < 2; k++)
			r[k] = (double)(b.pairs[k] - a.pairs[k]) /
			       (double)(b.cpu_ns[k] - a.cpu_ns[k] + 1);
		if (r[LEASE_MP] / r[LEASE_LIBC] > best)
			best = r[LEASE_MP] / r[LEASE_LIBC];
	}
	return best;
}

static uint32_t mode_of(const struct target *t)
{
	return LOAD(&t->hdr->alloc_mode);
}

static uint32_t attached_of(const struct target *t)
{
	return LOAD(&t->hdr->attached);
}

static long ms_since(const struct timespec *t0)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return (now.tv_sec - t0->tv_sec) * 1000 + (now.tv_nsec - t0->tv_nsec) / 1000000;
}

/* @dpid has attached to @t in @mode: it holds the lease, and in precise
 * mode the target runs clearly slower. Then SIGKILL: the target must be
 * released within 3 s, run at its dormant rate, and (precise) never have
 * waited a full timeout. */
static void kill_and_check(struct target *t, pid_t dpid, uint32_t mode, double dormant,
			   const char *what)
{
	double on, after;
	struct timespec k0;
	uint64_t step;
	long released;
	int st;

	cr_assert(
		MP_TEST_WAIT_FOR(mode_of(t) == mode && (attached_of(t) & MP_ATTACHED_LEASE), 60000),
		"%s never attached with the lease: mode %u, attached %#x", what, mode_of(t),
		attached_of(t));
	on = rate(t);
	if (mode == MP_ALLOC_PRECISE)
		cr_assert_lt(on, DORMANT_SHARE * dormant,
			     "%s: precise mode ran at %.2f of the dormant rate: the test could not "
			     "tell",
			     what, on / dormant);
	__atomic_store_n(&t->st->max_step_ns, 0, __ATOMIC_RELAXED);
	clock_gettime(CLOCK_MONOTONIC, &k0);
	cr_assert_eq(kill(dpid, SIGKILL), 0);
	cr_assert_eq(waitpid(dpid, &st, 0), dpid);
	cr_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "%s status %d", what, st);
	cr_assert(MP_TEST_WAIT_FOR(mode_of(t) == MP_ALLOC_OFF && attached_of(t) == 0,
				   RELEASE_BOUND_MS - ms_since(&k0)),
		  "%s killed: the target was not released within %d ms (mode %u, attached %#x)",
		  what, RELEASE_BOUND_MS, mode_of(t), attached_of(t));
	released = ms_since(&k0);
	after = rate(t);
	step = LOAD(&t->st->max_step_ns);
	fprintf(stderr,
		"%s: the interposed loop at %.2f of glibc's own dormant, %.2f attached, %.2f "
		"after the kill (%.2fx and %.2fx the dormant share); released %ld ms after the "
		"kill, longest step %.1f ms\n",
		what, dormant, on, after, on / dormant, after / dormant, released, step / 1e6);
	cr_assert_geq(after, DORMANT_SHARE * dormant,
		      "%s killed: the target runs at %.2f of its dormant rate", what,
		      after / dormant);
	if (mode == MP_ALLOC_PRECISE)
		cr_assert_lt(step, WAIT_MAX_NS,
			     "%s killed: the target stalled %.0f ms (the precise wait's timeout)",
			     what, step / 1e6);
}

/* memprofd --pid on @t in @mode for @duration ("" for none), sampling
 * every @sample bytes ("" for the default); its pid. */
static pid_t memprofd_sampling(const struct target *t, const char *mode, const char *sample,
			       const char *duration, const char *out)
{
	char *argv[16];
	int n = 0;

	argv[n++] = path_of("cli/memprofd");
	argv[n++] = "--pid";
	argv[n++] = (char *)t->pidbuf;
	argv[n++] = "--tracer";
	argv[n++] = "inprocess";
	argv[n++] = "--mode";
	argv[n++] = (char *)mode;
	if (*sample) {
		argv[n++] = "--sample-bytes";
		argv[n++] = (char *)sample;
	}
	if (*duration) {
		argv[n++] = "--duration";
		argv[n++] = (char *)duration;
	}
	argv[n++] = "-o";
	argv[n++] = (char *)out;
	argv[n++] = "--print";
	argv[n++] = "none";
	argv[n] = NULL;
	return spawn(argv, -1, -1);
}

static pid_t memprofd_on(const struct target *t, const char *mode, const char *duration,
			 const char *out)
{
	return memprofd_sampling(t, mode, "", duration, out);
}

/* A later memprofd --pid attach profiles the target as usual: its
 * kernels with their heap figures, exact when nothing was dropped (a
 * sanitized daemon may stall the target past the precise wait's timeout
 * at its start or its end, and the records then dropped are counted). */
static void later_attach_profiles(const struct target *t)
{
	char *path = tmp_of("later.pb");
	const struct mp_kernel *k;
	struct mp_profile *p;
	uint64_t cut, want;
	pid_t d = memprofd_on(t, "precise", "1", path);
	int st;

	cr_assert_eq(waitpid(d, &st, 0), d);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the later memprofd: status %d", st);
	p = load(path);
	cr_assert_str_eq(mp_tracer_path_name(p->tracer_path), "inprocess");
	k = mp_profile_kernel(p, "batch");
	cr_assert_not_null(k, "the later attach saw no kernel");
	cr_assert_gt(k->calls, 10, "%" PRIu64 " calls", k->calls);
	want = k->calls * LEASE_PAIRS;
	cr_assert(k->incl.alloc_count > 0 && k->incl.alloc_count <= want,
		  "%" PRIu64 " allocations in %" PRIu64 " calls", k->incl.alloc_count, k->calls);
	cr_assert_eq(k->incl.alloc_bytes, LEASE_BLOCK * k->incl.alloc_count);
	cr_assert_leq(k->incl.free_count, want);
	fprintf(stderr,
		"later attach: %" PRIu64 " calls, %" PRIu64 " allocations, %" PRIu64
		" heap records dropped\n",
		k->calls, k->incl.alloc_count, p->drops_heap);
	if (p->drops_heap == 0) {
		/* exact, but for the invocation open at the attach and the
		 * one open at the end */
		cut = k->open_at_attach + k->truncated;
		cr_assert(k->incl.alloc_count + cut * LEASE_PAIRS >= want,
			  "%" PRIu64 " allocations in %" PRIu64 " calls (%" PRIu64 " cut)",
			  k->incl.alloc_count, k->calls, cut);
		cr_assert(k->incl.free_count + cut * LEASE_PAIRS >= want,
			  "%" PRIu64 " frees in %" PRIu64 " calls", k->incl.free_count, k->calls);
	}
	mp_profile_free(p);
}

Test(lease, memprofd_killed_in_precise_mode_releases_its_target, .timeout = 180, .fini = cleanup)
{
	struct target t;
	double dormant;

	need_root();
	target_start(&t);
	dormant = rate(&t);
	kill_and_check(&t, memprofd_on(&t, "precise", "", tmp_of("killed.pb")), MP_ALLOC_PRECISE,
		       dormant, "memprofd --pid (precise)");
	later_attach_profiles(&t);
	target_stop(&t);
}

Test(lease, memprofd_killed_in_sampled_mode_releases_its_target, .timeout = 180, .fini = cleanup)
{
	struct target t;
	double dormant;

	need_root();
	target_start(&t);
	dormant = rate(&t);
	kill_and_check(&t, memprofd_on(&t, "sampled", "", tmp_of("killed.pb")), MP_ALLOC_SAMPLED,
		       dormant, "memprofd --pid (sampled)");
	target_stop(&t);
}

/* Samples too rare to ever fill the ring: one every 4 MiB is one every
 * 65,536 pairs of the fixture, whose 32 Ki records (two per sample) take
 * 64 GiB of allocations, about a minute of its loop, and no markers (they
 * would fill it); a release that waits for a full ring never comes within
 * the 3 s. The sampled records look at the lease themselves. The later
 * attach has the kernels back. */
Test(lease, memprofd_killed_in_sampled_mode_with_rare_samples_releases_its_target, .timeout = 180,
     .fini = cleanup)
{
	struct target t;
	double dormant;

	need_root();
	target_start(&t);
	__atomic_store_n(&t.st->quiet, 1, __ATOMIC_RELAXED);
	dormant = rate(&t);
	kill_and_check(&t, memprofd_sampling(&t, "sampled", "4M", "", tmp_of("killed.pb")),
		       MP_ALLOC_SAMPLED, dormant, "memprofd --pid (sampled, rare samples)");
	__atomic_store_n(&t.st->quiet, 0, __ATOMIC_RELAXED);
	later_attach_profiles(&t);
	target_stop(&t);
}

Test(lease, service_killed_releases_its_targets, .timeout = 180, .fini = cleanup)
{
	struct target t;
	struct daemon d;
	double dormant;
	char out[4096];

	need_root();
	target_start(&t);
	dormant = rate(&t);
	daemon_start(&d, "", NULL);
	cr_assert_eq(
		client(out, sizeof(out), &d, "attach", t.pidbuf, "--tracer", "inprocess", NULL), 0,
		"attach: %s", out);
	kill_and_check(&t, d.pid, MP_ALLOC_PRECISE, dormant, "the service (precise)");
	later_attach_profiles(&t);
	target_stop(&t);
}
