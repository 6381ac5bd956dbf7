// SPDX-License-Identifier: MIT
/*
 * The daemon in a PID namespace other than the initial one (a container, a
 * pod without hostPID): `unshare -p -f --mount-proc memprof run` must give
 * the very figures of the same run on the host. The BPF programs see
 * initial-namespace ids; the target is named by a pid of the daemon's
 * namespace (issue 12: tracing was silently empty there).
 */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "profile.h"
#include "profile_pb.h"

extern char **environ;

static char build_root[2048];

static void need_root(void)
{
	const char *b = getenv("MEMPROF_BUILD_ROOT");

	if (geteuid() != 0)
		cr_skip_test("needs root for BPF and unshare (running as uid %d)", (int)geteuid());
	cr_assert_not_null(b, "MEMPROF_BUILD_ROOT is not set (run through meson test)");
	snprintf(build_root, sizeof(build_root), "%s", b);
}

static void path_of(char *buf, size_t len, const char *rel)
{
	cr_assert_lt((size_t)snprintf(buf, len, "%s/%s", build_root, rel), len);
}

/* Runs argv to completion with stdout and stderr in @err (NUL-ended). */
static int run(char *const argv[], char *err, size_t cap)
{
	posix_spawn_file_actions_t fa;
	int pipefd[2], status;
	size_t n = 0;
	ssize_t k;
	pid_t pid;

	cr_assert_eq(pipe2(pipefd, O_CLOEXEC), 0);
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, pipefd[1], 1);
	posix_spawn_file_actions_adddup2(&fa, pipefd[1], 2);
	cr_assert_eq(posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ), 0, "spawn %s", argv[0]);
	posix_spawn_file_actions_destroy(&fa);
	close(pipefd[1]);
	while (n + 1 < cap && (k = read(pipefd[0], err + n, cap - 1 - n)) > 0)
		n += (size_t)k;
	err[n] = '\0';
	close(pipefd[0]);
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status), "%s died by signal %d", argv[0], WTERMSIG(status));
	return WEXITSTATUS(status);
}

/* `[unshare -p -f --mount-proc] memprof run -o TMP --print none OPTS -- FIXTURE`. */
static struct mp_profile *profile_of(bool in_pidns, const char *fixture, const char *mode,
				     const char *extra, char *out, size_t cap)
{
	char dir[] = "/tmp/memprof-pidns-XXXXXX", path[256], memprof[4096], fx[4096];
	char *argv[20];
	struct mp_profile *p = NULL;
	const char *why = NULL;
	int n = 0;

	cr_assert_not_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/p.memprof", dir);
	path_of(memprof, sizeof(memprof), "cli/memprof");
	path_of(fx, sizeof(fx), fixture);
	if (in_pidns) {
		argv[n++] = "unshare";
		argv[n++] = "-p";
		argv[n++] = "-f";
		argv[n++] = "--mount-proc";
	}
	argv[n++] = memprof;
	argv[n++] = "run";
	argv[n++] = "-o";
	argv[n++] = path;
	argv[n++] = "--print";
	argv[n++] = "none";
	/* The eBPF path: its pid filter is what runs in the kernel. */
	argv[n++] = "--tracer";
	argv[n++] = "bpf";
	argv[n++] = "--mode";
	argv[n++] = (char *)mode;
	if (extra)
		argv[n++] = (char *)extra;
	argv[n++] = "--";
	argv[n++] = fx;
	argv[n] = NULL;
	cr_assert_eq(run(argv, out, cap), 0, "%s: %s", fixture, out);
	cr_assert_eq(mp_profile_load(path, &p, &why), 0, "loading %s: %s", path, why ? why : "");
	unlink(path);
	rmdir(dir);
	return p;
}

static void assert_mem_eq(const struct mp_mem_stats *a, const struct mp_mem_stats *b,
			  const char *what)
{
	cr_assert(!memcmp(a, b, sizeof(*a)),
		  "%s: host alloc=%llu/%llu free=%llu/%llu added=%lld, pid namespace "
		  "alloc=%llu/%llu free=%llu/%llu added=%lld",
		  what, (unsigned long long)a->alloc_bytes, (unsigned long long)a->alloc_count,
		  (unsigned long long)a->free_bytes, (unsigned long long)a->free_count,
		  (long long)a->bytes_added, (unsigned long long)b->alloc_bytes,
		  (unsigned long long)b->alloc_count, (unsigned long long)b->free_bytes,
		  (unsigned long long)b->free_count, (long long)b->bytes_added);
}

/* The same fixture on the host and in a child PID namespace: every heap
 * figure of the whole window and of every invocation is the same, and
 * per-thread attribution (the BPF event's thread id against the marker
 * ring's) still holds. */
static void same_figures(const char *fixture, const char *mode, const char *extra)
{
	char out[8192];
	struct mp_profile *host, *ns;

	need_root();
	host = profile_of(false, fixture, mode, extra, out, sizeof(out));
	ns = profile_of(true, fixture, mode, extra, out, sizeof(out));
	cr_assert_gt(host->mem.alloc_count, 0, "%s: the host run saw no allocation", fixture);
	assert_mem_eq(&host->mem, &ns->mem, "whole window");
	cr_assert_eq(host->peak_bytes, ns->peak_bytes);
	cr_assert_eq(host->unknown_frees, ns->unknown_frees);
	cr_assert_eq(ns->probe_hits_unmatched, 0, "%s: %llu probe hits not matched", fixture,
		     (unsigned long long)ns->probe_hits_unmatched);
	cr_assert_eq(host->n_invocations, ns->n_invocations);
	for (uint32_t i = 0; i < host->n_invocations; i++) {
		const struct mp_invocation *a = &host->invocations[i], *b = &ns->invocations[i];

		cr_assert_str_eq(host->names[a->name], ns->names[b->name]);
		assert_mem_eq(&a->incl, &b->incl, host->names[a->name]);
		cr_assert_eq(a->cross_thread_allocs, b->cross_thread_allocs);
		cr_assert_eq(a->cross_thread_bytes, b->cross_thread_bytes);
		cr_assert_eq(a->flags, b->flags);
	}
	cr_assert_eq(host->n_sites, ns->n_sites);
	mp_profile_free(host);
	mp_profile_free(ns);
}

Test(pidns, precise_thread_pool, .timeout = 120)
{
	same_figures("tests/e2e/fixture-pool", "precise", NULL);
}

Test(pidns, precise_phases, .timeout = 120)
{
	same_figures("tests/e2e/fixture-phases", "precise", NULL);
}

/* Every allocation of at least the interval is sent exactly: with an
 * interval of one byte, sampled mode is deterministic. */
Test(pidns, sampled_every_block, .timeout = 120)
{
	same_figures("tests/e2e/fixture-pool", "sampled", "--sample-bytes=1");
}

Test(pidns, rss_mode, .timeout = 120)
{
	same_figures("tests/e2e/fixture-rss", "rss", NULL);
}
