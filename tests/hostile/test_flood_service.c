// SPDX-License-Identifier: MIT
/*
 * Limits in the service (docs/SERVICE.md "Memory bounds"): two targets of
 * one memprofd service, one flooding it with forged ALLOC records
 * (fixture-flood 2000000), the other honest (fixture-flood 0: 1000 blocks
 * of 100 bytes, kept). With max_memory = 16M the flooding target's
 * profile names the bound reached, the service's memory stays within it,
 * and the honest target is profiled in full, no bound reached.
 */
#include <inttypes.h>

#include "../service/helpers.h"

#define FLOOD_N 2000000ull
#define BOUND_BLOCKS 98304ull

struct target {
	pid_t pid;
	int in;
	FILE *out;
	char ps[32];
};

static void target_start(struct target *t, const char *n)
{
	char *argv[] = { path_of("tests/hostile/fixture-flood"), (char *)n, NULL };
	posix_spawn_file_actions_t fa;
	int in[2], out[2];

	cr_assert_eq(pipe2(in, O_CLOEXEC), 0);
	cr_assert_eq(pipe2(out, O_CLOEXEC), 0);
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, in[0], 0);
	posix_spawn_file_actions_adddup2(&fa, out[1], 1);
	cr_assert_eq(posix_spawn(&t->pid, argv[0], &fa, NULL, argv, environ), 0);
	posix_spawn_file_actions_destroy(&fa);
	close(in[0]);
	close(out[1]);
	t->in = in[1];
	t->out = fdopen(out[0], "r");
	snprintf(t->ps, sizeof(t->ps), "%d", (int)t->pid);
}

static void target_wait_flooded(struct target *t)
{
	char line[64];

	cr_assert_not_null(fgets(line, sizeof(line), t->out), "pid %s ended early", t->ps);
	cr_assert_str_eq(line, "flooded\n");
}

static void target_end(struct target *t)
{
	int st;

	cr_assert_eq(write(t->in, "\n", 1), 1);
	close(t->in);
	fclose(t->out);
	cr_assert_eq(waitpid(t->pid, &st, 0), t->pid);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "pid %s status %d", t->ps, st);
}

static uint64_t status_kib(const struct daemon *d, const char *key)
{
	char out[16384], want[128], *p;

	cr_assert_eq(client(out, sizeof(out), d, "status", NULL), 0);
	snprintf(want, sizeof(want), "\n%s: ", key);
	p = strstr(out, want);
	cr_assert_not_null(p, "no %s in status: %s", key, out);
	return strtoull(p + strlen(want), NULL, 10);
}

Test(flood_service, a_flood_keeps_to_its_target_and_the_other_is_profiled_in_full, .timeout = 300,
     .fini = cleanup)
{
	struct target flood, honest;
	struct mp_profile *p;
	struct daemon d;
	char out[4096];
	uint64_t anon;

	need_root();
	daemon_start(&d, "max_memory = 16M\n", NULL);
	target_start(&honest, "0");
	target_start(&flood, "2000000");
	cr_assert_eq(client(out, sizeof(out), &d, "attach", honest.ps, "--mode", "precise", "-o",
			    tmp_of("honest.memprof"), NULL),
		     0, "%s", out);
	cr_assert_eq(client(out, sizeof(out), &d, "attach", flood.ps, "--mode", "precise", "-o",
			    tmp_of("flood.memprof"), NULL),
		     0, "%s", out);
	target_wait_flooded(&honest);
	target_wait_flooded(&flood);
	/* the forged blocks alone would be a live table of 192 MiB */
	anon = status_kib(&d, "mem_rss_anon_kib");
	fprintf(stderr, "service RssAnon after the flood: %" PRIu64 " KiB\n", anon);
	cr_assert_lt(anon, 160ull << 10, "the service holds %" PRIu64 " KiB", anon);
	cr_assert_eq(client(out, sizeof(out), &d, "detach", flood.ps, NULL), 0, "%s", out);
	cr_assert_eq(client(out, sizeof(out), &d, "detach", honest.ps, NULL), 0, "%s", out);
	target_end(&flood);
	target_end(&honest);
	cr_assert_eq(daemon_stop(&d), 0);

	p = load(tmp_of("flood.memprof"));
	cr_assert(p->limits.reached & MP_LIMIT_LIVE, "reached 0x%x", p->limits.reached);
	cr_assert_eq(p->limits.memory, 16ull << 20);
	cr_assert_eq(p->limits.live_blocks, BOUND_BLOCKS);
	cr_assert_geq(p->limits.untracked_allocs, FLOOD_N - BOUND_BLOCKS);
	mp_profile_free(p);

	p = load(tmp_of("honest.memprof"));
	cr_assert_eq(p->limits.reached, 0, "reached 0x%x", p->limits.reached);
	cr_assert_eq(p->limits.memory, 16ull << 20);
	cr_assert_eq(p->limits.untracked_allocs, 0);
	cr_assert_geq(p->mem.bytes_added, 100 * 1000);
	cr_assert_geq(p->mem.tensors_added, 1000);
	cr_assert_lt(p->mem.tensors_added, 1100);
	mp_profile_free(p);
}
