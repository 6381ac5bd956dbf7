// SPDX-License-Identifier: MIT
/*
 * End-to-end: the real memprof / memprofd binaries profile real fixture
 * processes with real BPF programs. Needs root (CAP_BPF, CAP_PERFMON,
 * CAP_SYS_PTRACE); anywhere else every test says why it skips.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../common/helpers.h"
#include "profile.h"
#include "profile_pb.h"
#include "../tracer_env.h"

extern char **environ;

static void need_root(void)
{
	mp_test_need_root("BPF and ptrace");
}

#define path_of mp_test_build_path
#define run_capture mp_test_run_capture

static void tmp_profile(char *path, size_t len)
{
	snprintf(path, len, "/tmp/memprof-e2e-%d-XXXXXX", (int)getpid());
	int fd = mkstemp(path);
	cr_assert_geq(fd, 0);
	close(fd);
}

static struct mp_profile *load(const char *path)
{
	struct mp_profile *p = NULL;
	const char *why = NULL;

	cr_assert_eq(mp_profile_load(path, &p, &why), 0, "loading %s: %s", path, why ? why : "");
	unlink(path);
	/* the suite's path was the one used */
	if (getenv("MEMPROF_TEST_TRACER"))
		cr_assert_str_eq(mp_tracer_path_name(p->tracer_path),
				 getenv("MEMPROF_TEST_TRACER"));
	return p;
}

static const struct mp_invocation *inv_named(const struct mp_profile *p, const char *name, int nth)
{
	for (uint32_t i = 0; i < p->n_invocations; i++)
		if (!strcmp(p->names[p->invocations[i].name], name) && --nth == 0)
			return &p->invocations[i];
	cr_assert_fail("no invocation %s", name);
	return NULL;
}

static uint32_t pool_id(const struct mp_pool *pools, uint32_t n, const char *name)
{
	for (uint32_t i = 0; i < n; i++)
		if (!strcmp(pools[i].name, name))
			return i;
	cr_assert_fail("no owner/tag %s", name);
	return 0;
}

static void assert_mem(const struct mp_mem_stats *got, const struct mp_mem_stats *want,
		       const char *what)
{
	cr_assert(!memcmp(got, want, sizeof(*got)),
		  "%s: got added=%lld tensors=%lld alloc=%llu/%llu free=%llu/%llu, want "
		  "added=%lld tensors=%lld alloc=%llu/%llu free=%llu/%llu",
		  what, (long long)got->bytes_added, (long long)got->tensors_added,
		  (unsigned long long)got->alloc_bytes, (unsigned long long)got->alloc_count,
		  (unsigned long long)got->free_bytes, (unsigned long long)got->free_count,
		  (long long)want->bytes_added, (long long)want->tensors_added,
		  (unsigned long long)want->alloc_bytes, (unsigned long long)want->alloc_count,
		  (unsigned long long)want->free_bytes, (unsigned long long)want->free_count);
}

/* `memprof run --print tfjs --region profile -- FIXTURE` prints exactly @want. */
static void assert_tfjs(const char *fixture, const char *want)
{
	char out[8192];
	char *argv[] = {
		path_of("cli/memprof"), "run", "--print", "tfjs", "--region", "profile", "--",
		path_of(fixture),	NULL
	};

	cr_assert_eq(run_capture(argv, out, sizeof(out)), 0);
	cr_assert_str_eq(out, want);
}

Test(e2e, tfjs_example1_whole_result)
{
	need_root();
	assert_tfjs("tests/e2e/fixture-tfjs1",
		    "{\"newBytes\":12,\"newTensors\":1,\"peakBytes\":24,\"kernels\":["
		    "{\"name\":\"square\",\"bytesAdded\":12,\"totalBytesSnapshot\":24,"
		    "\"tensorsAdded\":1,\"totalTensorsSnapshot\":2,"
		    "\"inputShapes\":[[3]],\"outputShapes\":[[3]]},"
		    "{\"name\":\"square\",\"bytesAdded\":12,\"totalBytesSnapshot\":24,"
		    "\"tensorsAdded\":1,\"totalTensorsSnapshot\":2,"
		    "\"inputShapes\":[[3]],\"outputShapes\":[[3]]}]}\n");
}

Test(e2e, tfjs_example2_whole_result)
{
	need_root();
	assert_tfjs("tests/e2e/fixture-tfjs2",
		    "{\"newBytes\":32,\"newTensors\":3,\"peakBytes\":32,\"kernels\":["
		    "{\"name\":\"matMul\",\"bytesAdded\":8,\"totalBytesSnapshot\":32,"
		    "\"tensorsAdded\":1,\"totalTensorsSnapshot\":3,"
		    "\"inputShapes\":[[1,2],[2,2]],\"outputShapes\":[[1,2]]}]}\n");
}

/* Runs `memprof run -o TMP --print none [opts] -- fixture` and loads TMP. */
static struct mp_profile *profile_of(const char *fixture, const char *opt1, const char *opt2,
				     char *out, size_t cap, int want_status)
{
	char path[256];
	char *argv[12];
	int n = 0;

	tmp_profile(path, sizeof(path));
	argv[n++] = path_of("cli/memprof");
	argv[n++] = "run";
	argv[n++] = "-o";
	argv[n++] = path;
	argv[n++] = "--print";
	argv[n++] = "none";
	if (opt1)
		argv[n++] = (char *)opt1;
	if (opt2)
		argv[n++] = (char *)opt2;
	argv[n++] = "--";
	argv[n++] = path_of(fixture);
	argv[n] = NULL;
	cr_assert_eq(run_capture(argv, out, cap), want_status);
	return load(path);
}

Test(e2e, thread_pool_allocations_go_to_the_dispatchers_kernel)
{
	char out[4096];

	need_root();
	struct mp_profile *p =
		profile_of("tests/e2e/fixture-pool", NULL, NULL, out, sizeof(out), 0);
	const struct mp_invocation *inv = inv_named(p, "parallel_for", 1);
	struct mp_mem_stats want = {
		.bytes_added = 4000, .tensors_added = 2, .alloc_bytes = 4000, .alloc_count = 2
	};

	cr_assert_eq(p->n_invocations, 1);
	assert_mem(&inv->incl, &want, "parallel_for");
	cr_assert_eq(inv->cross_thread_allocs, 2);
	cr_assert_eq(inv->cross_thread_bytes, 4000);
	cr_assert_eq(inv->flags, 0);
	cr_assert_eq(p->truncated, false);
	mp_profile_free(p);
}

Test(e2e, owners_split_bytes_by_library)
{
	char out[4096];

	need_root();
	struct mp_profile *p = profile_of("tests/e2e/fixture-owners", "--owner",
					  "libowner_a*=alpha", out, sizeof(out), 0);
	const struct mp_invocation *inv = inv_named(p, "mixed", 1);
	uint32_t a = pool_id(p->owners, p->n_owners, "alpha");
	uint32_t b = pool_id(p->owners, p->n_owners, "libowner_b.so");
	uint32_t x = pool_id(p->owners, p->n_owners, "fixture-owners");
	const struct mp_bucket *ba = mp_bucket_find(inv->owners, inv->n_owners, a);
	const struct mp_bucket *bb = mp_bucket_find(inv->owners, inv->n_owners, b);
	const struct mp_bucket *bx = mp_bucket_find(inv->owners, inv->n_owners, x);

	cr_assert_eq(inv->n_owners, 3);
	cr_assert_not_null(ba);
	cr_assert_not_null(bb);
	cr_assert_not_null(bx);
	struct mp_bucket wa = { .id = a, .alloc_bytes = 1500, .alloc_count = 2 };
	struct mp_bucket wb = { .id = b, .alloc_bytes = 2500, .alloc_count = 1 };
	struct mp_bucket wx = { .id = x, .alloc_bytes = 64, .alloc_count = 1 };
	cr_assert(!memcmp(ba, &wa, sizeof(wa)), "alpha: %llu bytes in %llu",
		  (unsigned long long)ba->alloc_bytes, (unsigned long long)ba->alloc_count);
	cr_assert(!memcmp(bb, &wb, sizeof(wb)), "libowner_b: %llu bytes in %llu",
		  (unsigned long long)bb->alloc_bytes, (unsigned long long)bb->alloc_count);
	cr_assert(!memcmp(bx, &wx, sizeof(wx)), "exe: %llu bytes in %llu",
		  (unsigned long long)bx->alloc_bytes, (unsigned long long)bx->alloc_count);
	mp_profile_free(p);
}

Test(e2e, phases_and_tags_are_reported_separately_and_exactly)
{
	char out[4096];

	need_root();
	struct mp_profile *p =
		profile_of("tests/e2e/fixture-phases", NULL, NULL, out, sizeof(out), 0);
	const struct mp_phase *load = mp_profile_phase(p, "load");
	const struct mp_phase *inf = mp_profile_phase(p, "inference");
	const struct mp_pool *w = mp_profile_tag(p, "weights");
	const struct mp_pool *act = mp_profile_tag(p, "activations");

	cr_assert_not_null(load);
	cr_assert_not_null(inf);
	cr_assert_not_null(w);
	cr_assert_not_null(act);
	cr_assert_eq(load->peak_bytes, 74000);
	cr_assert_eq(inf->peak_bytes, 72000);
	struct mp_mem_stats wl = { .bytes_added = 64000,
				   .tensors_added = 2,
				   .alloc_bytes = 74000,
				   .alloc_count = 3,
				   .free_bytes = 10000,
				   .free_count = 1 };
	assert_mem(&load->mem, &wl, "phase load");
	struct mp_mem_stats wi = { .bytes_added = -64000,
				   .tensors_added = -2,
				   .alloc_bytes = 16000,
				   .alloc_count = 4,
				   .free_bytes = 80000,
				   .free_count = 6 };
	assert_mem(&inf->mem, &wi, "phase inference");
	struct mp_mem_stats ww = { .bytes_added = 0,
				   .tensors_added = 0,
				   .alloc_bytes = 64000,
				   .alloc_count = 2,
				   .free_bytes = 64000,
				   .free_count = 2 };
	assert_mem(&w->mem, &ww, "tag weights");
	cr_assert_eq(w->peak_bytes, 64000);
	cr_assert_eq(w->live_bytes, 0);
	struct mp_mem_stats wa = { .bytes_added = 0,
				   .tensors_added = 0,
				   .alloc_bytes = 16000,
				   .alloc_count = 4,
				   .free_bytes = 16000,
				   .free_count = 4 };
	assert_mem(&act->mem, &wa, "tag activations");
	cr_assert_eq(act->peak_bytes, 8000);
	mp_profile_free(p);
}

static const struct mp_kernel *kernel(const struct mp_profile *p, const char *name)
{
	const struct mp_kernel *k = mp_profile_kernel(p, name);

	cr_assert_not_null(k, "no kernel %s", name);
	return k;
}

Test(e2e, rss_delta_of_64MiB_sampled_and_exact)
{
	char out[4096];
	unsigned long touched = 0;

	need_root();
	struct mp_profile *p =
		profile_of("tests/e2e/fixture-rss", "--rss-hz", "1000", out, sizeof(out), 0);
	const struct mp_invocation *inv = inv_named(p, "touch", 1);
	double delta, want = 64.0 * 1024 * 1024;

	cr_assert_neq(inv->rss_begin, MP_UNKNOWN);
	cr_assert_neq(inv->rss_end, MP_UNKNOWN);
	delta = (double)inv->rss_end - (double)inv->rss_begin;
	cr_assert(delta > want * 0.95 && delta < want * 1.05,
		  "sampled RSS delta %.0f not within 5%% of 64 MiB", delta);
	mp_profile_free(p);

	p = profile_of("tests/e2e/fixture-rss", "--rss-exact", NULL, out, sizeof(out), 0);
	cr_assert_eq(sscanf(out, "touched=%lu", &touched), 1, "fixture said: %s", out);
	inv = inv_named(p, "touch", 1);
	/* rss_stat reports the mm counter's global part, which lags the true
	 * value by at most one per-CPU batch (32 pages here) per CPU; the
	 * kernel offers nothing finer to BPF on this machine (docs/PROFILE.md).
	 * Pages of this machine's size, not 4 KiB. */
	long slack = 32L * sysconf(_SC_PAGESIZE) * sysconf(_SC_NPROCESSORS_CONF);
	cr_assert(labs((long)inv->rss_exact_incl - (long)touched) <= slack,
		  "exact RSS %lld, touched %lu", (long long)inv->rss_exact_incl, touched);
	cr_assert_eq(kernel(p, "touch")->rss_exact_incl, inv->rss_exact_incl);
	mp_profile_free(p);
}

Test(e2e, target_exiting_mid_kernel_is_flushed_and_truncated)
{
	char out[4096];

	need_root();
	struct mp_profile *p =
		profile_of("tests/e2e/fixture-exit", NULL, NULL, out, sizeof(out), 3);
	const struct mp_invocation *inv = inv_named(p, "doomed", 1);
	struct mp_mem_stats want = {
		.bytes_added = 1000, .tensors_added = 1, .alloc_bytes = 1000, .alloc_count = 1
	};

	cr_assert_eq(p->truncated, true);
	cr_assert_eq(inv->flags, MP_INV_F_TRUNCATED);
	assert_mem(&inv->incl, &want, "doomed");
	mp_profile_free(p);
}

Test(e2e, attach_mid_run_sees_the_open_kernel)
{
	char path[256], line[256];
	int out_pipe[2], err_pipe[2], status;
	posix_spawn_file_actions_t fa;
	pid_t fix, prof;
	FILE *f;

	need_root();
	tmp_profile(path, sizeof(path));

	cr_assert_eq(pipe2(out_pipe, O_CLOEXEC), 0);
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, out_pipe[1], 1);
	char *fargv[] = { path_of("tests/e2e/fixture-attach"), NULL };
	cr_assert_eq(posix_spawn(&fix, fargv[0], &fa, NULL, fargv, environ), 0);
	posix_spawn_file_actions_destroy(&fa);
	close(out_pipe[1]);
	f = fdopen(out_pipe[0], "r");
	cr_assert_not_null(fgets(line, sizeof(line), f));
	cr_assert_str_eq(line, "ready\n");
	fclose(f);

	char pidbuf[32];
	snprintf(pidbuf, sizeof(pidbuf), "%d", (int)fix);
	char *pargv[] = {
		path_of("cli/memprofd"), "--pid", pidbuf, "-o", path, "--print", "none", "-v", NULL
	};
	cr_assert_eq(pipe2(err_pipe, O_CLOEXEC), 0);
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, err_pipe[1], 2);
	cr_assert_eq(posix_spawn(&prof, pargv[0], &fa, NULL, mp_test_argv(pargv), environ), 0);
	posix_spawn_file_actions_destroy(&fa);
	close(err_pipe[1]);
	f = fdopen(err_pipe[0], "r");
	for (;;) {
		cr_assert_not_null(fgets(line, sizeof(line), f), "memprofd ended before attaching");
		if (strstr(line, "attached to pid"))
			break;
	}
	kill(fix, SIGUSR1);
	cr_assert_eq(waitpid(fix, &status, 0), fix);
	cr_assert_eq(status, 0);
	while (fgets(line, sizeof(line), f))
		;
	fclose(f);
	cr_assert_eq(waitpid(prof, &status, 0), prof);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "memprofd status %d", status);

	struct mp_profile *p = load(path);
	const struct mp_invocation *inv = inv_named(p, "outer", 1);
	struct mp_mem_stats want = {
		.bytes_added = 700, .tensors_added = 1, .alloc_bytes = 700, .alloc_count = 1
	};
	assert_mem(&inv->incl, &want, "outer");
	cr_assert_eq(inv->flags, MP_INV_F_OPEN_AT_ATTACH);
	cr_assert_eq(p->unknown_frees, 1);
	cr_assert_geq(p->mem.bytes_added, 0);
	mp_profile_free(p);
}

/* A single thread overrunning its ring (the kernel loop is faster than the
 * daemon): the invocations whose BEGIN or END was lost are flagged and left
 * out, so no per-kernel total can exceed the window or the peak. */
Test(e2e, ring_overrun_keeps_kernel_totals_within_the_window)
{
	char out[4096];
	unsigned long calls = 0;
	unsigned long long dropped = 0;
	uint64_t sum = 0;

	need_root();
	struct mp_profile *p =
		profile_of("tests/e2e/fixture-overrun", NULL, NULL, out, sizeof(out), 0);
	const struct mp_kernel *k = mp_profile_kernel(p, "tiny");
	uint64_t window = p->end_ns - p->begin_ns;

	cr_assert_eq(sscanf(out, "calls=%lu dropped=%llu", &calls, &dropped), 2, "fixture: %s",
		     out);
	cr_assert_geq(dropped, 200000, "the fixture did not overrun its ring: %s", out);
	cr_assert_not_null(k);
	cr_assert_geq(p->drops_ring, dropped, "profile drops %llu, the library counted %llu",
		      (unsigned long long)p->drops_ring, dropped);
	cr_assert_gt(p->marker_gaps, 0);
	cr_assert_gt(k->markers_lost, 0);
	cr_assert_leq(k->calls + k->markers_lost, calls);
	cr_assert_leq(k->total_ns, window, "TIME %llu ns in a %llu ns window",
		      (unsigned long long)k->total_ns, (unsigned long long)window);
	cr_assert_leq(k->max_ns, window);
	cr_assert_leq(k->incl.alloc_bytes, p->mem.alloc_bytes);
	cr_assert_leq(k->peak_added, p->peak_bytes);
	cr_assert_leq((uint64_t)llabs(k->rss_delta_sum), p->rss_peak,
		      "RSS delta sum %lld with peak RSS %llu", (long long)k->rss_delta_sum,
		      (unsigned long long)p->rss_peak);
	/* one thread, flat kernels: nothing nests, and they do not overlap */
	for (uint32_t i = 0; i < p->n_invocations; i++) {
		const struct mp_invocation *v = &p->invocations[i];

		cr_assert_eq(v->depth, 0, "invocation %u nested at depth %u", i, v->depth);
		if (!(v->flags & MP_INV_F_MARKERS_LOST))
			sum += v->end_ns - v->begin_ns;
	}
	cr_assert_leq(sum, window);
	mp_profile_free(p);
}

/* exec with a kernel open: the old image's kernel ends there (truncated),
 * the exec is recorded with the new image's path, and the new image's
 * allocations go to its own kernels only. */
Test(e2e, exec_closes_open_kernels_and_is_recorded)
{
	char out[4096], exe[4096];

	need_root();
	struct mp_profile *p =
		profile_of("tests/e2e/fixture-exec", NULL, NULL, out, sizeof(out), 0);
	const struct mp_invocation *before = inv_named(p, "before_exec", 1);
	const struct mp_invocation *after = inv_named(p, "after_exec", 1);
	struct mp_mem_stats want_before = {
		.bytes_added = 1000, .tensors_added = 1, .alloc_bytes = 1000, .alloc_count = 1
	};
	struct mp_mem_stats want_after = {
		.bytes_added = 300, .tensors_added = 1, .alloc_bytes = 300, .alloc_count = 1
	};

	cr_assert_not_null(realpath(path_of("tests/e2e/fixture-exec"), exe));
	cr_assert_eq(before->flags, MP_INV_F_TRUNCATED | MP_INV_F_EXEC);
	assert_mem(&before->incl, &want_before, "before_exec");
	cr_assert_eq(after->flags, 0);
	assert_mem(&after->incl, &want_after, "after_exec");
	cr_assert_eq(p->n_execs, 1);
	cr_assert_eq(p->exec_count, 1);
	cr_assert_eq(p->execs[0].kernels_closed, 1);
	cr_assert_eq(p->execs[0].ts_ns, before->end_ns);
	cr_assert_lt(p->execs[0].ts_ns, after->begin_ns);
	cr_assert_str_eq(p->execs[0].path, exe);
	cr_assert_eq(p->execs[0].tid, (uint32_t)p->pid);
	cr_assert_eq(p->n_phases, 2);
	mp_profile_free(p);
}
