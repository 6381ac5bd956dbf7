// SPDX-License-Identifier: MIT
/*
 * Call stacks end to end: `memprof run --stacks` on the fixture of
 * fixture_stacks.c (an executable and a shared library at -O2
 * -fomit-frame-pointer with an inlined helper and a recursive function;
 * the same stripped with a .gnu_debuglink debug file; the same without
 * debug info) must give, in `go tool pprof -traces`, exactly the known
 * chain and the exact bytes of every allocation site, on both allocation
 * paths (tests/tracer_env.h). The statically linked fixture has no
 * interposer: its tests take the path memprof picks (eBPF).
 */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../tracer_env.h"

extern char **environ;

static int run(char *const argv[], char **ret_out)
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
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	cr_assert_eq(posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ), 0, "spawn %s", argv[0]);
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

struct chain {
	char names[1024];
	long bytes;
};

/* The samples of `go tool pprof -traces` output: functions leaf first, up
 * to and including main, with their bytes summed over identical chains. */
static int parse_traces(char *out, struct chain *ch, int max)
{
	int n = 0;
	struct chain cur = { "", -1 };
	bool done = false;

	for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
		char a[512], b[512];
		int k = sscanf(line, " %511s %511s", a, b);

		if (!strncmp(line, "-----------+", 12) || !strncmp(line, "-----", 5)) {
			if (cur.bytes >= 0) {
				int i;

				for (i = 0; i < n && strcmp(ch[i].names, cur.names); i++)
					;
				if (i == n) {
					cr_assert_lt(n, max);
					ch[n++] = (struct chain){ .bytes = 0 };
					strcpy(ch[i].names, cur.names);
				}
				ch[i].bytes += cur.bytes;
			}
			cur = (struct chain){ "", -1 };
			done = false;
			continue;
		}
		if (k == 2 && a[strlen(a) - 1] == ':')
			continue; /* a label */
		if (k == 2 && a[strlen(a) - 1] == 'B' && cur.bytes < 0) {
			cur.bytes = atol(a);
			cr_assert(strchr(a, 'k') == NULL, "unexpected unit in %s", line);
		} else if (k == 1 && cur.bytes >= 0) {
			strcpy(b, a);
		} else {
			continue;
		}
		if (done)
			continue;
		strncat(cur.names, b, sizeof(cur.names) - strlen(cur.names) - 2);
		strcat(cur.names, ";");
		if (!strcmp(b, "main"))
			done = true;
	}
	return n;
}

static const char *build_path(const char *rel)
{
	static char buf[4][4096];
	static int i;
	char *p = buf[i++ % 4];

	snprintf(p, 4096, "%s/%s", getenv("MEMPROF_BUILD_ROOT"), rel);
	return p;
}

static void check(const char *fixture, bool no_debug)
{
	char dir[] = "/tmp/memprof-stacks-XXXXXX", out_pb[4200], *out;
	char *mp[] = { (char *)build_path("cli/memprof"),
		       "run",
		       "--stacks",
		       "--print",
		       "none",
		       "--format",
		       "pprof",
		       "-o",
		       out_pb,
		       "--",
		       (char *)build_path(fixture),
		       NULL };
	char *gp[] = {
		"go", "tool", "pprof", "-traces", "-sample_index=alloc_space", out_pb, NULL
	};
	struct chain ch[16];
	const struct chain want[] = {
		{ "make_buf;run_a;main;", 100 },
		{ "lib_recurse;lib_recurse;lib_recurse;lib_recurse;run_b;main;", 200 },
		{ "leaf_c;run_c;main;", 600 },
	};
	int n;

	cr_assert_not_null(mkdtemp(dir));
	snprintf(out_pb, sizeof(out_pb), "%s/out.pb.gz", dir);
	cr_assert_eq(run((char **)mp_test_argv(mp), &out), 0, "memprof run failed");
	free(out);
	cr_assert_eq(run(gp, &out), 0, "go tool pprof failed");
	n = parse_traces(out, ch, 16);
	free(out);
	unlink(out_pb);
	rmdir(dir);
	cr_assert_eq(n, 3, "%d chains: %s | %s | %s | %s", n, n > 0 ? ch[0].names : "",
		     n > 1 ? ch[1].names : "", n > 2 ? ch[2].names : "", n > 3 ? ch[3].names : "");
	for (int i = 0; i < 3; i++) {
		int j;
		const char *w = want[i].names;

		if (no_debug && i == 0)
			w = "run_a;main;"; /* no DWARF: the inlined helper is invisible */
		for (j = 0; j < n && strcmp(ch[j].names, w); j++)
			;
		cr_assert_lt(j, n, "no chain %s: %s | %s | %s", w, ch[0].names, ch[1].names,
			     ch[2].names);
		cr_expect_eq(ch[j].bytes, want[i].bytes, "%s: %ld bytes", w, ch[j].bytes);
	}
}

Test(stacks, debug_info)
{
	check("tests/stacks/stacks-fixture", false);
}

Test(stacks, stripped_with_debuglink)
{
	check("tests/stacks/stacks-fixture-stripped", false);
}

Test(stacks, no_debug_info)
{
	check("tests/stacks/stacks-fixture-nodebug", true);
}

/* Bytes of owner @name in `go tool pprof -tags` output (-1: absent). */
static double owner_bytes(const char *out, const char *name)
{
	const char *sec = strstr(out, " owner: Total");
	char want[128];

	cr_assert_not_null(sec, "no owner tags: %s", out);
	snprintf(want, sizeof(want), "): %s\n", name);
	for (const char *l = sec; *l && strncmp(l, "\n\n", 2); l = strchr(l + 1, '\n')) {
		const char *e = strchr(l + 1, '\n');
		double v;
		char unit[8];

		if (!e)
			break;
		if ((size_t)(e - l) > strlen(want) &&
		    !strncmp(e - strlen(want) + 1, want, strlen(want) - 1) &&
		    sscanf(l + 1, " %lf%7[kMB]", &v, unit) == 2)
			return v * (unit[0] == 'k' ? 1000 : unit[0] == 'M' ? 1e6 : 1);
	}
	return -1;
}

static char *owners_of(const char *fixture, char *const rules[], int nrules)
{
	char dir[] = "/tmp/memprof-owners-XXXXXX", out_pb[4200], *out;
	char *mp[32] = { (char *)build_path("cli/memprof"),
			 "run",
			 "--stacks",
			 "--print",
			 "none",
			 "--format",
			 "pprof",
			 "-o",
			 out_pb };
	char *gp[] = { "go", "tool", "pprof", "-tags", "-sample_index=alloc_space", out_pb, NULL };
	int k = 9;

	cr_assert_not_null(mkdtemp(dir));
	snprintf(out_pb, sizeof(out_pb), "%s/out.pb.gz", dir);
	for (int i = 0; i < nrules; i++) {
		mp[k++] = "--owner";
		mp[k++] = rules[i];
	}
	mp[k++] = "--";
	mp[k++] = (char *)build_path(fixture);
	mp[k] = NULL;
	cr_assert_eq(run(mp, &out), 0, "memprof run failed");
	free(out);
	cr_assert_eq(run(gp, &out), 0, "go tool pprof failed");
	unlink(out_pb);
	rmdir(dir);
	return out;
}

/* Statically linked: the library's code is in the executable, so object
 * rules cannot tell it apart; function and source rules can. */
Test(stacks, static_owners_by_function_and_source)
{
	char *rules[] = { "fn:lib_*=lib", "src:*/fixture_stacks.c=app" };
	char *out = owners_of("tests/stacks/stacks-fixture-static", rules, 2);

	cr_expect_eq(owner_bytes(out, "lib"), 200, "%s", out);
	cr_expect_eq(owner_bytes(out, "app"), 700, "%s", out);
	free(out);
}

/* Rules match any frame of the stack, innermost first: run_b is two
 * frames above the allocating lib_recurse, main above everything else. */
Test(stacks, static_owners_by_outer_frames)
{
	char *rules[] = { "fn:run_b=b", "fn:main=m" };
	char *out = owners_of("tests/stacks/stacks-fixture-static", rules, 2);

	cr_expect_eq(owner_bytes(out, "b"), 200, "%s", out);
	cr_expect_eq(owner_bytes(out, "m"), 700, "%s", out);
	free(out);
}

/* `memprof report --sites N` on a memprof.proto file written with
 * --stacks: the top sites of each kernel with their whole stacks. */
Test(stacks, report_sites)
{
	char dir[] = "/tmp/memprof-sites-XXXXXX", file[4200], *out;
	char *mp[] = { (char *)build_path("cli/memprof"),
		       "run",
		       "--stacks",
		       "--print",
		       "none",
		       "-o",
		       file,
		       "--",
		       (char *)build_path("tests/stacks/stacks-fixture"),
		       NULL };
	char *rp[] = { (char *)build_path("cli/memprof"), "report", file, "--sites", "3", NULL };
	char *l;

	cr_assert_not_null(mkdtemp(dir));
	snprintf(file, sizeof(file), "%s/out.memprof", dir);
	cr_assert_eq(run((char **)mp_test_argv(mp), &out), 0, "memprof run failed");
	free(out);
	cr_assert_eq(run(rp, &out), 0, "memprof report failed");
	unlink(file);
	rmdir(dir);
	cr_assert(!strncmp(out,
			   "kernel (none)\n  #1  300 bytes in 1 allocations, 300 in use, owner "
			   "stacks-fixture\n      leaf_c  ",
			   strlen("kernel (none)\n  #1  300 bytes in 1 allocations, 300 in use, "
				  "owner stacks-fixture\n      leaf_c  ")),
		  "%s", out);
	l = strstr(out, "  #3  200 bytes in 1 allocations, 200 in use, owner libstk.so\n");
	cr_assert_not_null(l, "%s", out);
	l = strchr(l, '\n') + 1;
	for (int i = 0; i < 4; i++) {
		cr_assert(!strncmp(l, "      lib_recurse  ", 19), "%s", out);
		l = strchr(l, '\n') + 1;
	}
	cr_assert(!strncmp(l, "      run_b  ", 13), "%s", out);
	/* Top 3 only: the 100-byte site is left out. */
	cr_assert_null(strstr(out, "#4"), "%s", out);
	cr_assert_null(strstr(out, "make_buf"), "%s", out);
	free(out);
}

/* The Chrome / Perfetto trace of a profile written with --stacks: every
 * allocation-site event's "sf", resolved through the trace's stackFrames
 * by tests/output/trace_sites.py (Python's json module), gives exactly the
 * known chain up to main, with the site's exact bytes. */
static void check_chrome(const char *fixture, const char *const *want, int n_want, int n_sites)
{
	char dir[] = "/tmp/memprof-chrome-stacks-XXXXXX", file[4200], json[4200], cmd[8800];
	char *mp[] = { (char *)build_path("cli/memprof"),
		       "run",
		       "--stacks",
		       "--print",
		       "none",
		       "-o",
		       file,
		       "--",
		       (char *)build_path(fixture),
		       NULL };
	char *cv[] = { (char *)build_path("cli/memprof"),
		       "convert",
		       file,
		       "--to",
		       "chrome",
		       "-o",
		       json,
		       NULL };
	char *out, *sh[] = { "sh", "-c", cmd, NULL }, got[4096] = "";
	int n = 0;

	cr_assert_not_null(mkdtemp(dir));
	snprintf(file, sizeof(file), "%s/out.memprof", dir);
	snprintf(json, sizeof(json), "%s/out.json", dir);
	cr_assert_eq(run((char **)mp_test_argv(mp), &out), 0, "memprof run failed");
	free(out);
	cr_assert_eq(run(cv, &out), 0, "memprof convert failed");
	free(out);
	snprintf(cmd, sizeof(cmd),
		 "python3 '%s/tests/output/validate_trace.py' '%s' && "
		 "python3 '%s/tests/output/trace_sites.py' --stop main '%s'",
		 getenv("MEMPROF_SOURCE_ROOT"), json, getenv("MEMPROF_SOURCE_ROOT"), json);
	cr_assert_eq(run(sh, &out), 0, "%s", out);
	unlink(json);
	unlink(file);
	rmdir(dir);
	cr_assert(!strncmp(out, "ok ", 3), "%s", out);
	/* KERNEL|BYTES|COUNT|TID|TS|CHAIN: the thread and time vary by run. */
	for (char *l = strchr(out, '\n') + 1, *nl; *l; l = nl + 1) {
		char *f[6];

		nl = strchr(l, '\n');
		cr_assert_not_null(nl);
		*nl = '\0';
		f[0] = l;
		for (int i = 1; i < 6; i++) {
			f[i] = strchr(f[i - 1], '|');
			cr_assert_not_null(f[i], "%s", l);
			*f[i]++ = '\0';
		}
		snprintf(got + strlen(got), sizeof(got) - strlen(got), "%s|%s|%s|%s\n", f[0], f[1],
			 f[2], f[5]);
		n++;
	}
	cr_expect_eq(n, n_sites, "%s", got);
	for (int i = 0; i < n_want; i++)
		cr_expect(strstr(got, want[i]), "no %s in\n%s", want[i], got);
	free(out);
}

Test(stacks, chrome_trace_debug_info)
{
	static const char *const want[] = {
		"(none)|100|1|make_buf;run_a;main;\n",
		"(none)|200|1|lib_recurse;lib_recurse;lib_recurse;lib_recurse;run_b;main;\n",
		"(none)|300|1|leaf_c;run_c;main;\n(none)|300|1|leaf_c;run_c;main;\n",
	};

	check_chrome("tests/stacks/stacks-fixture", want, 3, 4);
}

Test(stacks, chrome_trace_no_debug_info)
{
	static const char *const want[] = {
		"(none)|100|1|run_a;main;\n",
		"(none)|200|1|lib_recurse;lib_recurse;lib_recurse;lib_recurse;run_b;main;\n",
		"(none)|300|1|leaf_c;run_c;main;\n(none)|300|1|leaf_c;run_c;main;\n",
	};

	check_chrome("tests/stacks/stacks-fixture-nodebug", want, 3, 4);
}

/* The number after "@key": in @json, or -1 when the key is absent. */
static long long json_count(const char *json, const char *key)
{
	const char *p = strstr(json, key);

	if (!p)
		return -1;
	p += strlen(key);
	while (*p == '"' || *p == ':' || *p == ' ')
		p++;
	return strtoll(p, NULL, 10);
}

/* On the in-process path, the fixture's stacks (plain -O2 C code with
 * CFI) are unwound by libmemprof itself: every one, none sent as a copy.
 * A silent fallback to copies would still pass the chains above. The eBPF
 * path copies stacks in the kernel: no such counts. */
Test(stacks, unwound_in_process)
{
	char *mp[] = { (char *)build_path("cli/memprof"),
		       "run",
		       "--stacks",
		       "--print",
		       "json",
		       "--",
		       (char *)build_path("tests/stacks/stacks-fixture"),
		       NULL };
	const char *t = getenv("MEMPROF_TEST_TRACER");
	char *out;

	cr_assert_eq(run((char **)mp_test_argv(mp), &out), 0, "memprof run failed");
	if (t && !strcmp(t, "bpf")) {
		cr_assert_null(strstr(out, "\"stackCapture\""), "%s", out);
	} else {
		cr_assert_geq(json_count(out, "\"unwoundInProcess\""), 3, "%s", out);
		cr_assert_eq(json_count(out, "\"copied\""), 0, "%s", out);
	}
	free(out);
}
