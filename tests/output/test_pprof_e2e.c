// SPDX-License-Identifier: MIT
/*
 * End-to-end: `memprof run` profiles the fixture (tests/output/fixture_pprof.c)
 * with real BPF; its pprof output is read by `go tool pprof`, its
 * memprof.proto output by `protoc --decode`, and the symbols of its
 * allocation sites are checked against nm, readelf and the source, for the
 * -g binary and for stripped copies. Needs root; skips (saying why) when
 * unprivileged or when go/protoc are missing.
 */
#include "../common/helpers.h"
#include "../profile/helpers.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "profile_pb.h"
#include "../tracer_env.h"

extern char **environ;

#define ALLOC_A_LINE 23
#define ALLOC_B_LINE 28

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
	mp_test_tmpdir(tmpdir, sizeof(tmpdir), "pprof");
	/* go tool needs a writable home and build cache. */
	setenv("HOME", tmpdir, 1);
	setenv("GOCACHE", tmpdir, 1);
}

TestSuite(pprof_e2e, .init = setup, .fini = rm_tmpdir);

static char *path_in(const char *dir, const char *rel)
{
	static char buf[8][4096];
	static int i;
	char *p = buf[i++ % 8];

	cr_assert_lt((size_t)snprintf(p, 4096, "%s/%s", dir, rel), 4096);
	return p;
}

/* Runs argv (searched in PATH) with stdin from @in (or /dev/null); returns
 * its exit status, its stdout in a new string. */
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

static bool have(const char *prog)
{
	char *argv[] = { "sh", "-c", NULL, NULL }, cmd[128], *out;
	int r;

	snprintf(cmd, sizeof(cmd), "command -v %s", prog);
	argv[2] = cmd;
	r = run(argv, NULL, &out);
	free(out);
	return r == 0;
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

/* @text has the whole line @line. */
static void expect_line(const char *text, const char *line, const char *what)
{
	size_t n = strlen(line);
	const char *p = text;

	while ((p = strstr(p, line))) {
		if ((p == text || p[-1] == '\n') && (p[n] == '\n' || !p[n]))
			return;
		p++;
	}
	cr_expect_fail("%s: no line \"%s\" in:\n%s", what, line, text);
}

/* Runs `go tool pprof ARGS... FILE`, returns the squeezed output. */
static char *pprof(const char *file, const char *a1, const char *a2, const char *a3, const char *a4)
{
	char *argv[] = { "go",	     "tool",	 "pprof", (char *)a1, (char *)a2,
			 (char *)a3, (char *)a4, NULL,	  NULL };
	char *out, *sq;
	int i = 3;

	while (argv[i])
		i++;
	argv[i] = (char *)file;
	cr_assert_eq(run(argv, NULL, &out), 0, "go tool pprof %s failed", a1);
	sq = squeeze(out);
	free(out);
	return sq;
}

/* memprof run [--format pprof] -o @out --print json -- FIXTURE; returns
 * the target's pid (from the JSON report). */
static int profile(const char *fixture, bool pprof_fmt, const char *out)
{
	char *argv[] = { path_in(build_root, "cli/memprof"),
			 "run",
			 "--format",
			 pprof_fmt ? "pprof" : "memprof",
			 "-o",
			 (char *)out,
			 "--print",
			 "json",
			 "--",
			 path_in(build_root, fixture),
			 NULL };
	char *json, *p;
	int pid;

	cr_assert_eq(run(argv, NULL, &json), 0, "memprof run %s failed", fixture);
	p = strstr(json, "\"pid\": ");
	cr_assert_not_null(p, "no pid in the JSON report");
	pid = atoi(p + 7);
	free(json);
	cr_assert_gt(pid, 0);
	return pid;
}

Test(pprof_e2e, go_tool_pprof_functions_kernels_tags)
{
	const char *f = path_in(tmpdir, "p.pb.gz");
	char *out, want[256];
	int pid;

	if (!have("go"))
		cr_skip_test("go (Debian golang-go) is not installed");
	pid = profile("tests/output/fixture-pprof", true, f);

	/* Per function, in bytes (and as pprof prints by default). */
	out = pprof(f, "-top", "-unit=B", "-sample_index=alloc_space", NULL);
	expect_line(out, "Showing nodes accounting for 6200B, 100% of 6200B total", "top");
	expect_line(out, "flat flat% sum% cum cum%", "top");
	expect_line(out, "4000B 64.52% 64.52% 4000B 64.52% alloc_b", "top");
	expect_line(out, "2200B 35.48% 100% 2200B 35.48% alloc_a", "top");
	free(out);
	out = pprof(f, "-top", "-sample_index=alloc_space", NULL, NULL);
	expect_line(out, "3.91kB 64.52% 64.52% 3.91kB 64.52% alloc_b", "top default unit");
	expect_line(out, "2.15kB 35.48% 100% 2.15kB 35.48% alloc_a", "top default unit");
	free(out);
	out = pprof(f, "-top", "-sample_index=alloc_objects", NULL, NULL);
	expect_line(out, "Showing nodes accounting for 6, 100% of 6 total", "top objects");
	expect_line(out, "3 50.00% 50.00% 3 50.00% alloc_a", "top objects");
	expect_line(out, "3 50.00% 100% 3 50.00% alloc_b", "top objects");
	free(out);
	/* What is live at the end: one block of each kernel from alloc_a. */
	out = pprof(f, "-top", "-unit=B", "-sample_index=inuse_space", NULL);
	expect_line(out, "Showing nodes accounting for 1200B, 100% of 1200B total", "inuse");
	expect_line(out, "1200B 100% 100% 1200B 100% alloc_a", "inuse");
	free(out);

	/* Per kernel, phase, owner, thread. */
	out = pprof(f, "-tags", "-unit=B", "-sample_index=alloc_space", NULL);
	expect_line(out, "kernel: Total 6200.0B", "tags");
	expect_line(out, "5000.0B (80.65%): matmul", "tags");
	expect_line(out, "1200.0B (19.35%): relu", "tags");
	expect_line(out, "phase: Total 6200.0B", "tags");
	expect_line(out, "6200.0B ( 100%): inference", "tags");
	expect_line(out, "owner: Total 6200.0B", "tags");
	expect_line(out, "6200.0B ( 100%): fixture-pprof", "tags");
	expect_line(out, "thread: Total 6200.0B", "tags");
	snprintf(want, sizeof(want), "6200.0B ( 100%%): %d", pid);
	expect_line(out, want, "tags");
	free(out);

	/* One kernel's functions. */
	out = pprof(f, "-tagfocus=kernel=matmul", "-top", "-unit=B", "-sample_index=alloc_space");
	expect_line(out, "Showing nodes accounting for 5000B, 80.65% of 6200B total", "matmul");
	expect_line(out, "3000B 48.39% 48.39% 3000B 48.39% alloc_b", "matmul");
	expect_line(out, "2000B 32.26% 80.65% 2000B 32.26% alloc_a", "matmul");
	free(out);
	out = pprof(f, "-tagfocus=kernel=relu", "-top", "-unit=B", "-sample_index=alloc_space");
	expect_line(out, "Showing nodes accounting for 1200B, 19.35% of 6200B total", "relu");
	expect_line(out, "1000B 16.13% 16.13% 1000B 16.13% alloc_b", "relu");
	expect_line(out, "200B 3.23% 19.35% 200B 3.23% alloc_a", "relu");
	free(out);
}

/* memprof convert --to pprof of a stored memprof.proto gives the same
 * pprof as writing it directly. */
Test(pprof_e2e, convert_to_pprof)
{
	const char *m = path_in(tmpdir, "c.memprof"), *g = path_in(tmpdir, "c.pb.gz");
	char *argv[] = { path_in(build_root, "cli/memprof"),
			 "convert",
			 (char *)m,
			 "--to",
			 "pprof",
			 "-o",
			 (char *)g,
			 NULL };
	char *out;

	if (!have("go"))
		cr_skip_test("go (Debian golang-go) is not installed");
	profile("tests/output/fixture-pprof", false, m);
	cr_assert_eq(run(argv, NULL, &out), 0, "memprof convert failed: %s", out);
	free(out);
	out = pprof(g, "-tagfocus=kernel=matmul", "-top", "-unit=B", "-sample_index=alloc_space");
	expect_line(out, "Showing nodes accounting for 5000B, 80.65% of 6200B total", "convert");
	expect_line(out, "3000B 48.39% 48.39% 3000B 48.39% alloc_b", "convert");
	expect_line(out, "2000B 32.26% 80.65% 2000B 32.26% alloc_a", "convert");
	free(out);
}

/* nm's value and size of @sym in @elf. */
static void nm_symbol(const char *elf, const char *sym, uint64_t *ret_value, uint64_t *ret_size)
{
	char *argv[] = { "nm", "-S", "--defined-only", (char *)elf, NULL }, *out, *l, pat[64];

	cr_assert_eq(run(argv, NULL, &out), 0);
	snprintf(pat, sizeof(pat), " T %s\n", sym);
	l = strstr(out, pat);
	cr_assert_not_null(l, "%s not in nm %s", sym, elf);
	while (l > out && l[-1] != '\n')
		l--;
	cr_assert_eq(sscanf(l, "%" SCNx64 " %" SCNx64, ret_value, ret_size), 2);
	free(out);
}

static char *build_id_of(const char *elf)
{
	char *argv[] = { "readelf", "-n", (char *)elf, NULL }, *out, *p, *id;

	cr_assert_eq(run(argv, NULL, &out), 0);
	p = strstr(out, "Build ID: ");
	cr_assert_not_null(p);
	id = strndup(p + 10, strcspn(p + 10, "\n"));
	free(out);
	return id;
}

enum symbols { FULL, STRIP_DEBUG, STRIP_ALL };

/* The model of a run of @fixture: sites, the mapping, the locations. */
static void check_symbols(const char *fixture, enum symbols level)
{
	const char *f = path_in(tmpdir, "p.memprof"), *why = NULL;
	const char *unstripped = path_in(build_root, "tests/output/fixture-pprof");
	const char *exe = path_in(build_root, fixture);
	struct mp_profile *p = NULL;
	uint64_t va, sa, vb, sb;
	char src[PATH_MAX], got[PATH_MAX], *bid;
	uint32_t owner = MP_NONE;
	int pid;

	pid = profile(fixture, false, f);
	cr_assert_eq(mp_profile_load(f, &p, &why), 0, "%s", why ? why : "");
	nm_symbol(unstripped, "alloc_a", &va, &sa);
	nm_symbol(unstripped, "alloc_b", &vb, &sb);
	bid = build_id_of(exe);
	cr_assert_not_null(realpath(path_in(source_root, "tests/output/fixture_pprof.c"), src));

	/* One mapping: the fixture's text. */
	cr_assert_eq(p->n_objects, 1, "%u objects", p->n_objects);
	const struct mp_object *ob = &p->objects[0];
	cr_expect_str_eq(ob->path, exe);
	cr_expect_str_eq(ob->build_id, bid);
	cr_expect_eq(ob->flags, level == FULL	     ? (MP_OBJ_F_FUNCTIONS | MP_OBJ_F_LINES) :
				level == STRIP_DEBUG ? MP_OBJ_F_FUNCTIONS :
						       0u);
	cr_expect_lt(ob->start, ob->limit);

	/* Two locations: the calls to malloc in alloc_a and alloc_b. Their
	 * ELF address is in the function nm gives (it is a return address,
	 * so it may be the function's end), and the process address maps to
	 * it through the mapping (a PIE: ELF address = file offset). */
	cr_assert_eq(p->n_locations, 2, "%u locations", p->n_locations);
	for (int i = 0; i < 2; i++) {
		const struct mp_location *l = &p->locations[i];
		uint64_t v = i == 0 ? va : vb, s = i == 0 ? sa : sb;

		cr_expect(l->rel_addr > v && l->rel_addr <= v + s,
			  "location %d at 0x%" PRIx64 " outside [0x%" PRIx64 ", +0x%" PRIx64 "]", i,
			  l->rel_addr, v, s);
		cr_expect(l->addr >= ob->start && l->addr < ob->limit);
		cr_expect_eq(l->rel_addr, l->addr - ob->start + ob->file_offset);
		cr_expect_eq(l->object, 0);
		if (level == STRIP_ALL)
			cr_expect_null(l->function, "strip-all: got function %s", l->function);
		else
			cr_expect_str_eq(l->function, i == 0 ? "alloc_a" : "alloc_b");
		if (level == FULL) {
			cr_assert_not_null(l->file);
			cr_assert_not_null(realpath(l->file, got), "%s", l->file);
			cr_expect_str_eq(got, src);
			cr_expect_eq(l->line, i == 0 ? ALLOC_A_LINE : ALLOC_B_LINE);
		} else {
			cr_expect_null(l->file);
			cr_expect_eq(l->line, 0);
		}
	}

	/* The sites: per kernel and function, gross and still live. */
	for (uint32_t i = 0; i < p->n_owners; i++)
		if (!strcmp(p->owners[i].name, strrchr(exe, '/') + 1))
			owner = i;
	cr_assert_neq(owner, MP_NONE);
	cr_assert_eq(p->n_names, 2);
	cr_expect_str_eq(p->names[0], "matmul");
	cr_expect_str_eq(p->names[1], "relu");
	cr_assert_eq(p->n_phases, 1);
	cr_expect_str_eq(p->phases[0].name, "inference");
	uint64_t a = p->locations[0].addr, b = p->locations[1].addr;
	const struct mp_site want[] = {
		{ a, 0, 0, owner, pid, 2, 2000, 1, 1000, 0, 0, 0, 2, 2000, 0, 0 },
		{ b, 0, 0, owner, pid, 1, 3000, 0, 0, 0, 0, 0, 1, 3000, 0, 0 },
		{ a, 1, 0, owner, pid, 1, 200, 1, 200, 0, 0, 0, 0, 0, 0, 0 },
		{ b, 1, 0, owner, pid, 2, 1000, 0, 0, 0, 0, 0, 0, 0, 0, 0 },
	};
	EXPECT_ARRAY("sites", p->sites, p->n_sites, want, 4, expect_site_peak_eq);
	cr_expect_eq(p->sites_dropped, 0);

	free(bid);
	mp_profile_free(p);
}

static void protoc_decodes(const char *f);

/* With debug info; protoc then decodes the same file. */
Test(pprof_e2e, symbols_with_debug_info_and_protoc_decodes)
{
	check_symbols("tests/output/fixture-pprof", FULL);
	protoc_decodes(path_in(tmpdir, "p.memprof"));
}

Test(pprof_e2e, symbols_strip_debug_from_symtab)
{
	check_symbols("tests/output/fixture-pprof-strip-debug", STRIP_DEBUG);
}

Test(pprof_e2e, symbols_strip_all_addresses_only)
{
	check_symbols("tests/output/fixture-pprof-strip-all", STRIP_ALL);
}

/* protoc, knowing only proto/memprof.proto, decodes what memprofd wrote
 * (the payload after the 24-byte header) to the same content. */
static void protoc_decodes(const char *f)
{
	const char *payload = path_in(tmpdir, "payload"), *why = NULL;
	char *argv[] = { "protoc",
			 "--proto_path",
			 path_in(source_root, "proto"),
			 "--decode=memprof.Profile",
			 "memprof.proto",
			 NULL };
	struct mp_profile *p = NULL;
	char *out, want[1024];
	uint8_t *buf;
	size_t len;
	FILE *o;

	if (!have("protoc"))
		cr_skip_test("protoc (Debian protobuf-compiler) is not installed");
	cr_assert_eq(mp_profile_load(f, &p, &why), 0, "%s", why ? why : "");
	cr_assert_eq(mp_profile_file_encode(p, &buf, &len), 0);
	cr_assert_gt(len, MP_PROFILE_FILE_HEADER);
	cr_assert_not_null(o = fopen(payload, "we"));
	cr_assert_eq(fwrite(buf + MP_PROFILE_FILE_HEADER, 1, len - MP_PROFILE_FILE_HEADER, o),
		     len - MP_PROFILE_FILE_HEADER);
	cr_assert_eq(fclose(o), 0);
	free(buf);
	cr_assert_eq(run(argv, payload, &out), 0, "protoc failed");

	cr_expect(strstr(out, "format_version: 2\n") == out, "%s", out);
	cr_expect_not_null(strstr(out, "\nkernel_names: \"matmul\"\nkernel_names: \"relu\"\n"));
	cr_assert_eq(p->n_sites, 4);
	cr_assert_eq(p->n_locations, 2);
	/* Zero fields are not on the wire (proto3): protoc omits them. */
	snprintf(want, sizeof(want),
		 "\nsites {\n  caller: %" PRIu64 "\n  owner: %u\n  tid: %u\n  alloc_objects: 2\n"
		 "  alloc_space: 2000\n  inuse_objects: 1\n  inuse_space: 1000\n  peak_objects: 2\n"
		 "  peak_space: 2000\n  peak_recorded: true\n}\n",
		 p->sites[0].caller, p->sites[0].owner, p->sites[0].tid);
	cr_expect_not_null(strstr(out, want), "no %s in\n%s", want, out);
	snprintf(want, sizeof(want),
		 "\nmappings {\n  start: %" PRIu64 "\n  limit: %" PRIu64 "\n  file_offset: %" PRIu64
		 "\n  path: \"%s\"\n  build_id: \"%s\"\n  has_functions: true\n"
		 "  has_lines: true\n}\n",
		 p->objects[0].start, p->objects[0].limit, p->objects[0].file_offset,
		 p->objects[0].path, p->objects[0].build_id);
	cr_expect_not_null(strstr(out, want), "no %s in\n%s", want, out);
	snprintf(want, sizeof(want),
		 "\nlocations {\n  address: %" PRIu64 "\n  rel_address: %" PRIu64
		 "\n  function: \"alloc_b\"\n  file: \"%s\"\n  line: %d\n}\n",
		 p->locations[1].addr, p->locations[1].rel_addr, p->locations[1].file,
		 ALLOC_B_LINE);
	cr_expect_not_null(strstr(out, want), "no %s in\n%s", want, out);
	free(out);
	mp_profile_free(p);
}
