// SPDX-License-Identifier: MIT
/*
 * End-to-end: `memprof run` profiles tests/output/fixture_maps.c (heap
 * blocks and an anonymous mapping of known sizes, in kernels), on each
 * allocation path. The heap figures hold the malloc family exactly; the
 * mapping is a figure apart, reserved and resident, in the table, the
 * JSON, memprof.proto (the project's reader and `protoc --decode`), pprof
 * (`go tool pprof -raw`) and the Chrome trace. Needs root.
 */
#include "../common/helpers.h"
#include "../profile/helpers.h"

#include <fcntl.h>
#include <inttypes.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "profile_pb.h"
#include "../tracer_env.h"

extern char **environ;

#define MAP_BYTES (4ull << 20)
#define TOUCH_BYTES (1ull << 20)

static char build_root[2048], source_root[2048], tmpdir[64];

static void rm_tmpdir(void)
{
	if (mp_test_rmtree(tmpdir) < 0)
		fprintf(stderr, "cannot remove %s\n", tmpdir);
}

static void setup(void)
{
	const char *b = getenv("MEMPROF_BUILD_ROOT"), *s = getenv("MEMPROF_SOURCE_ROOT");

	mp_test_need_root("BPF and ptrace");
	cr_assert(b && s, "MEMPROF_BUILD_ROOT/MEMPROF_SOURCE_ROOT not set (run through meson)");
	snprintf(build_root, sizeof(build_root), "%s", b);
	snprintf(source_root, sizeof(source_root), "%s", s);
	mp_test_tmpdir(tmpdir, sizeof(tmpdir), "maps");
	setenv("HOME", tmpdir, 1);
	setenv("GOCACHE", tmpdir, 1);
}

TestSuite(maps_e2e, .init = setup, .fini = rm_tmpdir);

static char *path_in(const char *dir, const char *rel)
{
	static char buf[16][4096];
	static int i;
	char *p = buf[i++ % 16];

	cr_assert_lt((size_t)snprintf(p, 4096, "%s/%s", dir, rel), 4096);
	return p;
}

/* Runs argv (searched in PATH) with stdin from @in (or /dev/null); returns
 * its exit status and its stdout in a new string. */
static int run(char *const argv[], const char *in, char **ret_out)
{
	posix_spawn_file_actions_t fa;
	int pipefd[2], status;
	size_t n = 0, cap = 1 << 16;
	char *out = malloc(cap);
	ssize_t k;
	pid_t pid;

	cr_assert_not_null(out);
	cr_assert_eq(pipe2(pipefd, O_CLOEXEC), 0);
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, pipefd[1], 1);
	posix_spawn_file_actions_addopen(&fa, 0, in ? in : "/dev/null", O_RDONLY, 0);
	cr_assert_eq(posix_spawnp(&pid, argv[0], &fa, NULL, mp_test_argv(argv), environ), 0,
		     "spawn %s", argv[0]);
	posix_spawn_file_actions_destroy(&fa);
	close(pipefd[1]);
	while ((k = read(pipefd[0], out + n, cap - 1 - n)) > 0) {
		n += (size_t)k;
		if (n + 1 == cap)
			cr_assert_not_null(out = realloc(out, cap *= 2));
	}
	out[n] = '\0';
	close(pipefd[0]);
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status), "%s died by signal %d", argv[0], WTERMSIG(status));
	*ret_out = out;
	return WEXITSTATUS(status);
}

/* Each line with its runs of blanks collapsed to one space and trimmed. */
static char *squeeze(const char *s)
{
	char *d = malloc(strlen(s) + 1), *o = d;
	bool blank = false, bol = true;

	cr_assert_not_null(d);
	for (; *s; s++) {
		if (*s == ' ' || *s == '\t') {
			blank = true;
			continue;
		}
		if (*s == '\n') {
			*o++ = '\n';
			blank = false;
			bol = true;
			continue;
		}
		if (blank && !bol)
			*o++ = ' ';
		blank = bol = false;
		*o++ = *s;
	}
	*o = '\0';
	return d;
}

/* The memprof.proto payload of file @m (after its header), in @payload. */
static void write_payload(const char *m, const char *payload)
{
	struct mp_profile *p = NULL;
	const char *why = NULL;
	uint8_t *buf;
	size_t len;
	FILE *o;

	cr_assert_eq(mp_profile_load(m, &p, &why), 0, "%s", why ? why : "");
	cr_assert_eq(mp_profile_file_encode(p, &buf, &len), 0);
	cr_assert_gt(len, MP_PROFILE_FILE_HEADER);
	cr_assert_not_null(o = fopen(payload, "we"));
	cr_assert_eq(fwrite(buf + MP_PROFILE_FILE_HEADER, 1, len - MP_PROFILE_FILE_HEADER, o),
		     len - MP_PROFILE_FILE_HEADER);
	cr_assert_eq(fclose(o), 0);
	free(buf);
	mp_profile_free(p);
}

static void expect_has(const char *text, const char *want, const char *what)
{
	cr_expect_not_null(strstr(text, want), "%s: no \"%s\" in:\n%s", what, want, text);
}

static const struct mp_kernel *kernel_named(const struct mp_profile *p, const char *name)
{
	const struct mp_kernel *k = mp_profile_kernel(p, name);

	cr_assert_not_null(k, "no kernel %s", name);
	return k;
}

/* The whole model's heap and mapping figures. */
static void check_profile(const struct mp_profile *p)
{
	const struct mp_mem_stats heap = { .bytes_added = 1000,
					   .tensors_added = 1,
					   .alloc_bytes = 201000,
					   .alloc_count = 2,
					   .free_bytes = 200000,
					   .free_count = 1 };
	const struct mp_kernel *al = kernel_named(p, "alloc"), *mp = kernel_named(p, "map"),
			       *un = kernel_named(p, "unmap");

	expect_mem_eq("profile.mem", &p->mem, &heap);
	cr_expect_eq(p->peak_bytes, 201000, "heap peak %" PRIu64, p->peak_bytes);
	expect_mem_eq("alloc.incl", &al->incl, &heap);
	cr_expect_eq(mp->incl.alloc_count, 0, "a heap block in \"map\"");
	cr_expect_eq(un->incl.free_count, 0, "a heap free in \"unmap\"");
	cr_expect_eq(mp->peak_bytes, 1000, "\"map\"'s heap peak: the kept block");
	cr_expect_eq(p->phases[0].peak_bytes, 201000);

	expect_maps_eq("profile.maps", &p->maps,
		       &(struct mp_map_stats){ MAP_BYTES, 1, MAP_BYTES, 1, 0, MAP_BYTES });
	expect_maps_eq("alloc.maps", &al->maps, &(struct mp_map_stats){ 0 });
	expect_maps_eq("map.maps", &mp->maps,
		       &(struct mp_map_stats){ MAP_BYTES, 1, 0, 0, MAP_BYTES, MAP_BYTES });
	expect_maps_eq("unmap.maps", &un->maps,
		       &(struct mp_map_stats){ 0, 0, MAP_BYTES, 1, 0, MAP_BYTES });
	expect_maps_eq("phase.maps", &p->phases[0].maps,
		       &(struct mp_map_stats){ MAP_BYTES, 1, MAP_BYTES, 1, 0, MAP_BYTES });
	cr_expect_eq(p->tags[0].maps.alloc_bytes, MAP_BYTES);
	/* resident: the RSS samples while the touched megabyte was held */
	cr_expect_neq(p->maps_resident_peak, MP_UNKNOWN, "no RSS sample with the mapping");
	cr_expect_geq(p->maps_resident_peak, TOUCH_BYTES, "resident %" PRIu64,
		      p->maps_resident_peak);
	cr_expect_leq(p->maps_resident_peak, MAP_BYTES);
}

Test(maps_e2e, heap_is_the_malloc_family_mappings_apart, .timeout = 240)
{
	const char *m = path_in(tmpdir, "m.memprof"), *g = path_in(tmpdir, "m.pb.gz"),
		   *c = path_in(tmpdir, "m.json");
	char *mrun[] = { path_in(build_root, "cli/memprof"),
			 "run",
			 "-o",
			 (char *)m,
			 "--print",
			 "table",
			 "--",
			 path_in(build_root, "tests/output/fixture-maps"),
			 NULL };
	char *report[] = {
		path_in(build_root, "cli/memprof"), "report", (char *)m, "--format", "json", NULL
	};
	char *topprof[] = { path_in(build_root, "cli/memprof"),
			    "convert",
			    (char *)m,
			    "--to",
			    "pprof",
			    "-o",
			    (char *)g,
			    NULL };
	char *tochrome[] = { path_in(build_root, "cli/memprof"),
			     "convert",
			     (char *)m,
			     "--to",
			     "chrome",
			     "-o",
			     (char *)c,
			     NULL };
	char *protoc[] = { "protoc",
			   "--proto_path",
			   path_in(source_root, "proto"),
			   "--decode=memprof.Profile",
			   "memprof.proto",
			   NULL };
	char *raw[] = { "go", "tool", "pprof", "-raw", (char *)g, NULL };
	const char *payload = path_in(tmpdir, "payload"), *why = NULL;
	char *out, *sq, want[256];
	struct mp_profile *p = NULL;
	FILE *f;

	/* the table */
	cr_assert_eq(run(mrun, NULL, &out), 0, "memprof run failed:\n%s", out);
	expect_has(out,
		   "heap: new 1000 B in 1 blocks, peak 201000 B, allocated 201000 B in 2 "
		   "blocks",
		   "table");
	snprintf(want, sizeof(want),
		 "mappings: reserved peak %llu B, live 0 B, mapped %llu B in 1, unmapped %llu B "
		 "in 1; resident peak <= ",
		 MAP_BYTES, MAP_BYTES, MAP_BYTES);
	expect_has(out, want, "table");
	expect_has(out, "\nanonymous mappings (a separate view", "table");
	snprintf(want, sizeof(want), "%llu              0        %llu        %llu        %llu",
		 MAP_BYTES, MAP_BYTES, MAP_BYTES, MAP_BYTES);
	expect_has(out, want, "table: the \"map\" row");
	free(out);

	/* the file, by the project's reader */
	cr_assert_eq(mp_profile_load(m, &p, &why), 0, "%s", why ? why : "");
	check_profile(p);
	mp_profile_free(p);

	/* JSON */
	cr_assert_eq(run(report, NULL, &out), 0);
	snprintf(want, sizeof(want), "\"anonMaps\": {\n    \"mappedBytes\": %llu", MAP_BYTES);
	expect_has(out, want, "json");
	expect_has(out, "\"peakBytes\": 201000", "json");
	free(out);

	/* memprof.proto by protoc */
	write_payload(m, payload);
	cr_assert_eq(run(protoc, payload, &out), 0, "protoc --decode failed");
	snprintf(want, sizeof(want), "anon_maps {\n  alloc_bytes: %llu\n  alloc_count: 1\n",
		 MAP_BYTES);
	expect_has(out, want, "protoc");
	expect_has(out, "anon_maps_recorded: true", "protoc");
	expect_has(out, "peak_bytes: 201000", "protoc");
	free(out);

	/* pprof: its own sample types, one sample of the fixture's mapping */
	cr_assert_eq(run(topprof, NULL, &out), 0);
	free(out);
	cr_assert_eq(run(raw, NULL, &sq), 0, "go tool pprof -raw failed");
	out = squeeze(sq);
	free(sq);
	expect_has(out,
		   "Samples:\nalloc_objects/count alloc_space/bytes inuse_objects/count "
		   "inuse_space/bytes[dflt] mapped_objects/count mapped_space/bytes "
		   "mapped_inuse_space/bytes",
		   "pprof -raw");
	snprintf(want, sizeof(want), "0 0 0 0 1 %llu 0:", MAP_BYTES);
	expect_has(out, want, "pprof -raw: the mapping sample");
	expect_has(out, "mapping:[anonymous]", "pprof -raw");
	expect_has(out, "1 1000 1 1000 0 0 0:", "pprof -raw: the kept heap block");
	free(out);

	/* Chrome: a counter track of its own */
	cr_assert_eq(run(tochrome, NULL, &out), 0);
	free(out);
	f = fopen(c, "r");
	cr_assert_not_null(f);
	{
		char *text = NULL;
		size_t len = 0;

		cr_assert_gt(getdelim(&text, &len, '\0', f), 0);
		snprintf(want, sizeof(want), "\"name\":\"anonymous mappings\"");
		expect_has(text, want, "chrome");
		snprintf(want, sizeof(want), "\"reserved\":%llu", MAP_BYTES);
		expect_has(text, want, "chrome");
		free(text);
	}
	fclose(f);
}
