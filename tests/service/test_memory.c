// SPDX-License-Identifier: MIT
/*
 * Service memory per target (issue 13, item 7d): the limits of the unit
 * and of the default configuration fit each other, an rss-mode target's
 * BPF memory stays below a bound computed from its map sizes, and an
 * attach beyond the memory budget is refused with a clear error. The
 * figures themselves (RSS at 1, 64, 256 targets) are bench/service-mem's.
 */
#include <dirent.h>
#include <inttypes.h>

#include "config.h"
#include "helpers.h"
#include "service.h"
#include "tracer.h"

/* KEY=VALUE of the built unit (systemd/memprofd.service). */
static uint64_t unit_value(const char *key)
{
	char path[4200], line[512];
	uint64_t v = 0;
	FILE *f;

	snprintf(path, sizeof(path), "%s/systemd/memprofd.service", getenv("MEMPROF_BUILD_ROOT"));
	f = fopen(path, "r");
	cr_assert_not_null(f, "%s", path);
	while (fgets(line, sizeof(line), f)) {
		size_t n = strlen(key);
		char *end;

		if (strncmp(line, key, n) || line[n] != '=')
			continue;
		v = strtoull(line + n + 1, &end, 10);
		if (*end == 'G')
			v <<= 30;
		else if (*end == 'M')
			v <<= 20;
	}
	fclose(f);
	cr_assert_gt(v, 0, "no %s= in %s", key, path);
	return v;
}

Test(memory, unit_and_default_configuration_limits_fit_each_other)
{
	uint64_t mem_max = unit_value("MemoryMax"), tasks_max = unit_value("TasksMax");
	struct mp_config *c = NULL;
	uint64_t per, budget;

	cr_assert_not_null(getenv("MEMPROF_BUILD_ROOT"), "run through meson test");
	cr_assert_eq(mp_config_new(&c), 0);
	/* The default mode's targets, max_targets of them, fit the budget
	 * the service derives from MemoryMax (7/8 of it, less its reserve). */
	per = mp_service_target_cost(c->mode, c->bpf_ring_bytes);
	budget = mem_max / 8 * 7 - mp_service_reserved(c->buffer_bytes, 1, c->max_conns);
	cr_assert_leq((uint64_t)c->max_targets * per, budget,
		      "max_targets %u x %" PRIu64 " MiB > %" PRIu64 " MiB", c->max_targets,
		      per >> 20, budget >> 20);
	/* An rss-mode target is a few MiB, not 24. */
	cr_assert_eq(per, MP_SERVICE_TARGET_BASE + MP_TRACER_RSS_RING_BYTES);
	cr_assert_leq(per, 4ull << 20);
	/* One session thread per target, one per control connection, and a
	 * few of the service's own. */
	cr_assert_leq(c->max_targets + c->max_conns + 16, tasks_max);
	mp_config_free(c);
}

/* memlock of every BPF map and program the process holds, in bytes. */
static uint64_t bpf_memlock(pid_t pid)
{
	char path[128], line[256];
	uint64_t total = 0;
	struct dirent *e;
	DIR *d;

	snprintf(path, sizeof(path), "/proc/%d/fdinfo", (int)pid);
	d = opendir(path);
	cr_assert_not_null(d);
	while ((e = readdir(d))) {
		unsigned long long v;
		bool bpf = false;
		FILE *f;

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/%d/fdinfo/%s", (int)pid, e->d_name);
		f = fopen(path, "r");
		if (!f)
			continue;
		while (fgets(line, sizeof(line), f)) {
			if (!strncmp(line, "map_type:", 9) || !strncmp(line, "prog_type:", 10))
				bpf = true;
			if (bpf && sscanf(line, "memlock: %llu", &v) == 1)
				total += v;
		}
		fclose(f);
	}
	closedir(d);
	return total;
}

Test(memory, rss_target_bpf_memory_is_bounded_by_its_map_sizes, .timeout = 120, .fini = cleanup)
{
	/* The ring buffer, its two metadata pages, and an allowance for the
	 * other maps (a few small arrays, per-CPU counters, empty task
	 * storage) and the programs' images: 256 KiB. */
	const uint64_t bound = MP_TRACER_RSS_RING_BYTES + 2 * 4096 + (256 << 10);
	/* Loaded once with the first target, whatever the number of targets
	 * (the tracepoint hub, daemon/sources/hub.h): 4 program arrays and 2
	 * hash tables of MP_HUB_SLOTS entries, 4 programs. */
	const uint64_t hub_bound = 384 << 10;
	struct daemon d;
	char out[4096], ps[32];
	uint64_t base, first, rss, precise;
	pid_t f0, f1, f2;

	need_root();
	daemon_start(&d, "", NULL);
	base = bpf_memlock(d.pid);
	f0 = fixture_start(NULL);
	snprintf(ps, sizeof(ps), "%d", (int)f0);
	cr_assert_eq(client(out, sizeof(out), &d, "attach", ps, "--mode", "rss", NULL), 0);
	first = bpf_memlock(d.pid) - base;
	cr_assert_leq(first, bound + hub_bound,
		      "the first rss-mode target holds %" PRIu64 " KiB of BPF memory", first >> 10);
	/* Every further target costs its own maps and programs only. */
	f1 = fixture_start(NULL);
	snprintf(ps, sizeof(ps), "%d", (int)f1);
	cr_assert_eq(client(out, sizeof(out), &d, "attach", ps, "--mode", "rss", NULL), 0);
	rss = bpf_memlock(d.pid) - base - first;
	cr_assert_geq(rss, MP_TRACER_RSS_RING_BYTES, "%" PRIu64, rss);
	cr_assert_leq(rss, bound, "an rss-mode target holds %" PRIu64 " KiB of BPF memory",
		      rss >> 10);
	/* A precise target still gets the large ring. */
	f2 = fixture_start(NULL);
	snprintf(ps, sizeof(ps), "%d", (int)f2);
	cr_assert_eq(client(out, sizeof(out), &d, "attach", ps, "--mode", "precise", NULL), 0);
	precise = bpf_memlock(d.pid) - base - first - rss;
	cr_assert_geq(precise, MP_TRACER_RING_BYTES, "%" PRIu64, precise);
	cr_assert_eq(daemon_stop(&d), 0);
	fixture_finish(f0);
	fixture_finish(f1);
	fixture_finish(f2);
}

Test(memory, attach_beyond_the_memory_budget_is_refused, .timeout = 120, .fini = cleanup)
{
	struct daemon d;
	char out[4096], want[512], p1[32], p2[32];
	uint64_t targets = (48ull << 20) - mp_service_reserved(1ull << 20, 0, 8);
	pid_t f1, f2;

	need_root();
	daemon_start(&d,
		     "memory_budget = 48M\nbuffer_size = 1M\nmax_connections = 8\n"
		     "max_connections_per_uid = 4\n",
		     NULL);
	cr_assert_eq(client(out, sizeof(out), &d, "status", NULL), 0);
	snprintf(want, sizeof(want), "\nmemory_budget_mib: %" PRIu64 "\n", targets >> 20);
	cr_assert_not_null(strstr(out, want), "status: %s", out);
	f1 = fixture_start(NULL);
	f2 = fixture_start(NULL);
	snprintf(p1, sizeof(p1), "%d", (int)f1);
	snprintf(p2, sizeof(p2), "%d", (int)f2);
	/* 10 MiB for a precise target fits the ~11 MiB; 3 more do not. */
	cr_assert_eq(client(out, sizeof(out), &d, "attach", p1, "--mode", "precise", NULL), 0);
	cr_assert_eq(client(out, sizeof(out), &d, "attach", p2, "--mode", "rss", NULL), 1);
	snprintf(want, sizeof(want),
		 "refused attach to pid %d requested by uid 0: the service's memory budget for "
		 "targets is %" PRIu64 " MiB (memory_budget); its 1 targets hold ~10 MiB "
		 "(estimated)",
		 (int)f2, targets >> 20);
	cr_assert(log_has(&d, want), "no '%s' in %s", want, d.log);
	cr_assert(log_has(&d, "one rss-mode target needs ~3 MiB"));
	/* Room again once the first is detached. */
	cr_assert_eq(client(out, sizeof(out), &d, "detach", p1, NULL), 0);
	cr_assert_eq(client(out, sizeof(out), &d, "attach", p2, "--mode", "rss", NULL), 0);
	cr_assert_eq(daemon_stop(&d), 0);
	fixture_finish(f1);
	fixture_finish(f2);
}

/* KEY of `memprof status` (a mem_* figure), as a number. */
static uint64_t status_value(const struct daemon *d, const char *key)
{
	char out[16384], want[128], *p;

	cr_assert_eq(client(out, sizeof(out), d, "status", NULL), 0);
	snprintf(want, sizeof(want), "\n%s: ", key);
	p = strstr(out, want);
	cr_assert_not_null(p, "no %s in status: %s", key, out);
	return strtoull(p + strlen(want), NULL, 10);
}

/* Dumps @ps's profile into @file; its number of invocations. */
static uint32_t dump_invocations(const struct daemon *d, const char *ps, const char *file)
{
	struct mp_profile *p;
	char out[4096];
	uint32_t n;

	cr_assert_eq(client(out, sizeof(out), d, "dump", ps, "-o", file, NULL), 0, "dump: %s", out);
	p = load(file);
	n = p->n_invocations;
	mp_profile_free(p);
	return n;
}

/* Attach in precise mode, let the profile grow to thousands of invocations
 * and the heap in use to @want_kib, dump it, detach; returns the heap in
 * use (KiB) while it was attached. Waits until the service has reaped the
 * session (its trim counter moved). Every wait is for its condition: a
 * slow host only takes longer. */
static uint64_t attach_dump_detach(const struct daemon *d, pid_t pid, int cycle, uint64_t want_kib)
{
	uint64_t trims, attached = 0;
	char out[4096], ps[32], file[64];
	uint32_t inv = 0;

	snprintf(ps, sizeof(ps), "%d", (int)pid);
	snprintf(file, sizeof(file), "dump-%d.memprof", cycle);
	cr_assert_eq(client(out, sizeof(out), d, "attach", ps, "--mode", "precise", NULL), 0);
	cr_assert(MP_TEST_WAIT_FOR(status_value(d, "mem_heap_in_use_kib") >= want_kib, 120000),
		  "cycle %d: the heap in use never reached %" PRIu64 " KiB", cycle, want_kib);
	/* The fixture runs thousands of kernels: a profile of megabytes. */
	MP_TEST_WAIT_FOR((inv = dump_invocations(d, ps, tmp_of(file)),
			  attached = status_value(d, "mem_heap_in_use_kib"),
			  inv >= 2000 && attached >= want_kib),
			 120000);
	cr_assert_geq(inv, 2000, "cycle %d: only %u invocations", cycle, inv);
	/* After the attach's and the dump's trims (the dump is answered
	 * once its copy is freed): only the end of the session trims now. */
	trims = status_value(d, "mem_heap_trims");
	cr_assert_eq(client(out, sizeof(out), d, "detach", ps, NULL), 0);
	unlink(tmp_of(file));
	cr_assert(MP_TEST_WAIT_FOR(status_value(d, "mem_heap_trims") > trims, 60000),
		  "cycle %d: the ended session's heap was not trimmed", cycle);
	return attached;
}

/* The soak (docs/BENCHMARKS.md section 6) found the service's RSS moving
 * by 200 MiB with no trend: the copies of growing profiles (chunks, dumps)
 * and ended sessions were freed into per-thread arenas that kept them
 * resident until the next attach trimmed them. Asserted on the
 * allocator's own counts, which mean the same in every build (glibc's or
 * ASan's allocator): a target holding megabytes gives them all back when
 * it ends, cycle after cycle, and every ended session is trimmed. */
Test(memory, heap_returns_to_its_baseline_after_attach_detach_cycles, .timeout = 300,
     .fini = cleanup)
{
	struct daemon d;
	uint64_t base, attached, in_use;
	pid_t f;

	need_root();
	daemon_start(&d, "", NULL);
	f = fixture_start_of("tests/service/fixture-kernels", NULL);
	/* The first attach fills the caches kept for the daemon's life
	 * (kernel BTF, libdw, capstone). */
	attach_dump_detach(&d, f, 0, 0);
	base = status_value(&d, "mem_heap_in_use_kib");
	for (int c = 1; c <= 4; c++) {
		attached = attach_dump_detach(&d, f, c, base + 4096);
		in_use = status_value(&d, "mem_heap_in_use_kib");
		cr_log_info("cycle %d: heap in use %" PRIu64 " KiB attached, %" PRIu64
			    " KiB after (base %" PRIu64 ")",
			    c, attached, in_use, base);
		cr_assert_geq(attached, base + 4096,
			      "cycle %d: the target held only %" PRIu64 " KiB", c, attached - base);
		cr_assert_leq(in_use, base + 512,
			      "cycle %d: %" PRIu64 " KiB kept after the target ended", c,
			      in_use - base);
	}
	cr_assert_eq(daemon_stop(&d), 0);
	fixture_finish(f);
}

/* A precise target admitted within the budget whose live heap then grows
 * past it: the service detaches it (profile written, the target untouched)
 * instead of growing into its cgroup's limit, and an rss target attached
 * before it keeps running. */
Test(memory, target_growing_past_the_budget_is_detached_with_its_profile, .timeout = 300,
     .fini = cleanup)
{
	struct daemon d;
	char out[4096], want[256], pg[32], pr[32];
	struct mp_profile *p;
	pid_t grow, other;

	need_root();
	/* a target's own bound above the budget: the budget acts first */
	daemon_start(&d,
		     "memory_budget = 64M\nbuffer_size = 1M\nmax_connections = 8\n"
		     "max_connections_per_uid = 4\nmax_memory = 1G\n",
		     NULL);
	other = fixture_start(NULL);
	grow = fixture_start_of("tests/service/fixture-grow", NULL);
	snprintf(pr, sizeof(pr), "%d", (int)other);
	snprintf(pg, sizeof(pg), "%d", (int)grow);
	cr_assert_eq(client(out, sizeof(out), &d, "attach", pr, "--mode", "rss", NULL), 0, "%s",
		     out);
	cr_assert_eq(client(out, sizeof(out), &d, "attach", pg, "--mode", "precise", "-o",
			    tmp_of("grow.memprof"), NULL),
		     0, "%s", out);
	cr_assert_eq(status_value(&d, "budget_detaches"), 0);
	kill(grow, SIGUSR2);
	/* 4 million live blocks are far more than 64 MiB of live table. */
	MP_TEST_WAIT_FOR(status_value(&d, "budget_detaches") != 0, 120000);
	cr_assert_eq(status_value(&d, "budget_detaches"), 1);
	snprintf(want, sizeof(want), "pid %d: detaching (target ", (int)grow);
	cr_assert(log_has(&d, want), "no '%s' in %s", want, d.log);
	cr_assert(log_has(&d, "over its memory budget of 64 MiB (memory_budget)"), "%s", d.log);
	MP_TEST_WAIT_FOR(status_value(&d, "targets") == 1, 60000);
	cr_assert_eq(status_value(&d, "targets"), 1, "the rss target must keep running");
	/* the detached session's profile is complete, with what it saw */
	p = load(tmp_of("grow.memprof"));
	cr_assert_gt(p->mem.alloc_count, 10000, "%" PRIu64 " allocations",
		     (uint64_t)p->mem.alloc_count);
	mp_profile_free(p);
	unlink(tmp_of("grow.memprof"));
	cr_assert_eq(client(out, sizeof(out), &d, "detach", pr, NULL), 0, "%s", out);
	cr_assert_eq(daemon_stop(&d), 0);
	fixture_finish(grow);
	fixture_finish(other);
}
