// SPDX-License-Identifier: MIT
/* Python frames in call stacks (docs/PROFILE.md "Python frames"): a script
 * with known call chains across two files (pyframes_main.py calling
 * pyframes_lib.py, which calls back), each link allocating a tensor or a
 * bytearray of its own size, run under `memprof run --stacks` on the
 * in-process path. Each allocation's stack holds its chain's Python frames
 * (function, file, line), innermost first, in the profile, in `go tool
 * pprof -traces` of the pprof file, and in a py: owner rule; the profile
 * names the threads that had them. With a site table that `import torch`
 * fills (--max-sites 100000; the default with --stacks holds as many sites
 * as stacks), the script's own tensors still have sites of their own
 * (space-saving, docs/PROFILE.md "Limits") with their stacks. */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "profile.h"
#include "profile_pb.h"
#include "../common/helpers.h"

#ifndef PY_SRC_DIR
#error "PY_SRC_DIR must name tests/python in the source tree"
#endif

#define PYTHON "/usr/bin/python3"
#define MIB (1u << 20)
#define MAIN PY_SRC_DIR "/pyframes_main.py"
#define LIB PY_SRC_DIR "/pyframes_lib.py"
#define MEMO PY_SRC_DIR "/pyframes_memo.py"
#define FORK PY_SRC_DIR "/pyframes_fork.py"

static char out[1 << 16], script_out[1 << 16];

/* The line of @file marked "# @tag". */
static unsigned marked_line(const char *file, const char *tag)
{
	char line[512], want[64];
	unsigned n = 0;
	FILE *f = fopen(file, "r");

	cr_assert_not_null(f, "%s", file);
	snprintf(want, sizeof(want), "# @%s", tag);
	while (fgets(line, sizeof(line), f)) {
		const char *at = strstr(line, want);

		n++;
		if (at && (at[strlen(want)] == '\n' || at[strlen(want)] == '\0')) {
			fclose(f);
			return n;
		}
	}
	fclose(f);
	cr_assert_fail("no line marked %s in %s", want, file);
	return 0;
}

struct pyframe {
	const char *function, *file, *tag;
	const char *pprof; /* the function as pprof shows it, if not as it is */
	unsigned line; /* the line, for a file that is not one (no tag) */
};

static unsigned line_of(const struct pyframe *f)
{
	return f->tag ? marked_line(f->file, f->tag) : f->line;
}

/* The site allocating [@lo, @hi) bytes in one block. */
static const struct mp_site *site_of(const struct mp_profile *p, uint64_t lo, uint64_t hi)
{
	for (uint32_t i = 0; i < p->n_sites; i++)
		if (p->sites[i].alloc_objects == 1 && p->sites[i].alloc_space >= lo &&
		    p->sites[i].alloc_space < hi)
			return &p->sites[i];
	cr_assert_fail("no site of one block of %" PRIu64 " bytes", lo);
	return NULL;
}

/* The Python frames of @s's stack, innermost first, are @want (then
 * whatever called the outermost of them). */
static void expect_chain(const struct mp_profile *p, const struct mp_site *s,
			 const struct pyframe *want, unsigned n_want)
{
	uint64_t buf[MP_PROFILE_MAX_DEPTH];
	const uint64_t *frames;
	unsigned k = 0;
	bool native_first = false;

	cr_assert(s->stack && s->stack <= p->n_stacks, "site without a stack");
	frames = mp_profile_stack_frames(p, s->stack - 1, buf);
	for (uint32_t i = 0; i < p->stacks[s->stack - 1].n_frames && k < n_want; i++) {
		const struct mp_location *l = mp_profile_location(p, frames[i]);

		cr_assert_not_null(l, "frame %#" PRIx64 " has no location", frames[i]);
		if (!l->python) {
			native_first |= !k;
			continue;
		}
		cr_assert_str_eq(l->function, want[k].function, "frame %u of %s", k,
				 want[0].function);
		cr_assert_str_eq(l->file, want[k].file, "frame %u of %s", k, want[0].function);
		cr_assert_eq(l->line, line_of(&want[k]), "%s:%u, not @%s", l->file, l->line,
			     want[k].tag ? want[k].tag : "the line given");
		cr_assert_eq(l->object, MP_NONE);
		k++;
	}
	cr_assert_eq(k, n_want, "%u of %u Python frames of %s", k, n_want, want[0].function);
	/* the allocator and what called it from the eval loop come first */
	cr_assert(native_first, "no native frame inside %s", want[0].function);
}

static const struct pyframe lib_tensor[] = {
	{ "lib_tensor", LIB, "lib_tensor", NULL, 0 },
	{ "outer", MAIN, "outer_lib_tensor", NULL, 0 },
	{ "<module>", MAIN, "module_outer", "(module)", 0 },
};
static const struct pyframe lib_bytes[] = {
	{ "lib_bytes", LIB, "lib_bytes", NULL, 0 },
	{ "outer", MAIN, "outer_lib_bytes", NULL, 0 },
	{ "<module>", MAIN, "module_outer", "(module)", 0 },
};
static const struct pyframe called_back[] = {
	{ "main_tensor", MAIN, "main_tensor", NULL, 0 },
	{ "lib_calls_back", LIB, "lib_calls_back", NULL, 0 },
	{ "outer", MAIN, "outer_calls_back", NULL, 0 },
	{ "<module>", MAIN, "module_outer", "(module)", 0 },
};
static const struct pyframe in_thread[] = {
	{ "in_thread", MAIN, "in_thread", NULL, 0 },
};

/* `memprof run --stacks` of pyframes_main.py with a py: rule and a site
 * table it fills, written as memprof.proto at @pb and as pprof at @gz. */
static struct mp_profile *run_chains(const char *dir, char *pb, char *gz, size_t len)
{
	char *argv[] = { mp_test_build_path("cli/memprof"),
			 "run",
			 "--stacks",
			 "--max-sites",
			 "100000",
			 "--owner",
			 "py:*/pyframes_lib.py=pylib",
			 "-o",
			 pb,
			 "--print",
			 "none",
			 "--",
			 PYTHON,
			 MAIN,
			 NULL };
	char *conv[] = {
		mp_test_build_path("cli/memprof"), "convert", pb, "--to", "pprof", "-o", gz, NULL
	};
	struct mp_profile *p = NULL;
	const char *why = NULL;
	int st;

	snprintf(pb, len, "%s/t.memprof", dir);
	snprintf(gz, len, "%s/t.pb.gz", dir);
	cr_assert_eq(unsetenv("PYTHONPATH"), 0);
	st = mp_test_run_capture(argv, out, sizeof(out));
	cr_assert_eq(st, 0, "memprof run exited %d:\n%s", st, out);
	cr_assert(strstr(out, "pyframes done"), "%s", out);
	snprintf(script_out, sizeof(script_out), "%s", out);
	cr_assert_eq(mp_profile_load(pb, &p, &why), 0, "%s: %s", pb, why ? why : "?");
	st = mp_test_run_capture(conv, out, sizeof(out));
	cr_assert_eq(st, 0, "memprof convert exited %d:\n%s", st, out);
	return p;
}

static bool has_tid(const struct mp_profile *p, uint32_t tid)
{
	for (uint32_t i = 0; i < p->n_python_tids; i++)
		if (p->python_tids[i] == tid)
			return true;
	return false;
}

/* The chain's frames, "function file:line" each, one after the other in
 * one of `go tool pprof -traces -lines`'s traces. */
static void expect_in_traces(const char *traces, const struct pyframe *want, unsigned n)
{
	char seq[4096] = "";
	size_t k = 0;

	for (unsigned i = 0; i < n; i++)
		k += (size_t)snprintf(seq + k, sizeof(seq) - k, "%s %s:%u\n             ",
				      want[i].pprof ? want[i].pprof : want[i].function,
				      want[i].file, marked_line(want[i].file, want[i].tag));
	/* the last frame's indentation is the next frame's */
	seq[k - 13] = '\0';
	cr_assert(strstr(traces, seq), "not in go tool pprof -traces:\n%s", seq);
}

Test(pyframes, call_chains_in_process, .timeout = 300)
{
	char dir[256], pb[300], gz[300];
	char cmd[1024], trf[300];
	char *traces[] = { "/bin/sh", "-c", cmd, NULL };
	const struct mp_site *s;
	struct mp_profile *p;
	unsigned main_tid, worker_tid;
	const char *t;
	char *tr;
	size_t trlen = 0;
	FILE *f;
	int st;

	mp_test_tmpdir(dir, sizeof(dir), "pyframes");
	p = run_chains(dir, pb, gz, sizeof(pb));
	cr_assert_eq(p->tracer_path, MP_PATH_INPROCESS);
	cr_assert(p->limits.reached & MP_LIMIT_SITES, "the site table never filled");

	/* the tensors (allocated with the GIL released) and the bytearray */
	s = site_of(p, 6 * MIB, 6 * MIB + 4096);
	expect_chain(p, s, lib_tensor, 3);
	cr_assert_str_eq(p->owners[s->owner].name, "pylib");
	s = site_of(p, 5 * MIB, 5 * MIB + 4096);
	expect_chain(p, s, lib_bytes, 3);
	cr_assert_str_eq(p->owners[s->owner].name, "pylib");
	/* called back from the library: the innermost rule match is there */
	s = site_of(p, 7 * MIB, 7 * MIB + 4096);
	expect_chain(p, s, called_back, 4);
	cr_assert_str_eq(p->owners[s->owner].name, "pylib");
	/* another Python thread: its own frames, no py: match */
	s = site_of(p, 9 * MIB, 9 * MIB + 4096);
	expect_chain(p, s, in_thread, 1);
	cr_assert_str_neq(p->owners[s->owner].name, "pylib");

	/* the threads that had Python frames */
	t = strstr(script_out, "tid ");
	cr_assert_not_null(t);
	cr_assert_eq(sscanf(t, "tid %u worker %u", &main_tid, &worker_tid), 2);
	cr_assert(has_tid(p, main_tid), "main thread %u not among the Python threads", main_tid);
	cr_assert(has_tid(p, worker_tid), "worker %u not among the Python threads", worker_tid);
	cr_assert_eq(s->tid, worker_tid);
	{
		char *report[] = { mp_test_build_path("cli/memprof"), "report", pb, NULL };
		char want[64];

		st = mp_test_run_capture(report, out, sizeof(out));
		cr_assert_eq(st, 0);
		cr_assert(strstr(out, "python frames: in the stacks of "), "%s", out);
		snprintf(want, sizeof(want), "%u", worker_tid);
		cr_assert(strstr(strstr(out, "python frames: "), want), "%s", out);
	}

	/* pprof: function, file and line, as go tool pprof shows them */
	snprintf(trf, sizeof(trf), "%s/traces", dir);
	snprintf(cmd, sizeof(cmd),
		 "exec go tool pprof -traces -lines -sample_index=alloc_space '%s' > '%s'", gz,
		 trf);
	st = mp_test_run_capture(traces, out, sizeof(out));
	cr_assert_eq(st, 0, "go tool pprof exited %d:\n%s", st, out);
	f = fopen(trf, "r");
	cr_assert_not_null(f);
	cr_assert_eq(getdelim(&tr, &trlen, '\0', f) > 0, true);
	fclose(f);
	expect_in_traces(tr, lib_tensor, 3);
	expect_in_traces(tr, lib_bytes, 3);
	expect_in_traces(tr, called_back, 4);
	expect_in_traces(tr, in_thread, 1);
	free(tr);
	mp_profile_free(p);
	mp_test_rmtree(dir);
}

/* The frames of one allocation after another of the same thread that
 * differ in one thing only (pyframes_memo.py): none has the frame the
 * walker kept from the one before. */
static const struct pyframe memo_line_a[] = {
	{ "two_lines", MEMO, "memo_line_a", NULL, 0 },
	{ "<module>", MEMO, "memo_two_lines", NULL, 0 },
};
static const struct pyframe memo_line_b[] = {
	{ "two_lines", MEMO, "memo_line_b", NULL, 0 },
	{ "<module>", MEMO, "memo_two_lines", NULL, 0 },
};
static const struct pyframe memo_first[] = {
	{ "first", MEMO, "memo_first", NULL, 0 },
	{ "in_turn", MEMO, "memo_in_turn_first", NULL, 0 },
	{ "<module>", MEMO, "memo_in_turn", NULL, 0 },
};
static const struct pyframe memo_second[] = {
	{ "second", MEMO, "memo_second", NULL, 0 },
	{ "in_turn", MEMO, "memo_in_turn_second", NULL, 0 },
	{ "<module>", MEMO, "memo_in_turn", NULL, 0 },
};
static const struct pyframe memo_code_one[] = {
	{ "<module>", "<memo-one>", NULL, NULL, 1 },
	{ "run_code", MEMO, "memo_exec", NULL, 0 },
	{ "fresh_code", MEMO, "memo_fresh_one", NULL, 0 },
	{ "<module>", MEMO, "memo_fresh_code", NULL, 0 },
};
static const struct pyframe memo_code_two[] = {
	{ "<module>", "<memo-two>", NULL, NULL, 2 },
	{ "run_code", MEMO, "memo_exec", NULL, 0 },
	{ "fresh_code", MEMO, "memo_fresh_two", NULL, 0 },
	{ "<module>", MEMO, "memo_fresh_code", NULL, 0 },
};

static const struct pyframe memo_same_one[] = {
	{ "<module>", "<memo-same>", NULL, NULL, 1 },
	{ "run_code", MEMO, "memo_exec", NULL, 0 },
	{ "same_name", MEMO, "memo_same_one", NULL, 0 },
	{ "<module>", MEMO, "memo_same_name", NULL, 0 },
};
static const struct pyframe memo_same_two[] = {
	{ "<module>", "<memo-same>", NULL, NULL, 2 },
	{ "run_code", MEMO, "memo_exec", NULL, 0 },
	{ "same_name", MEMO, "memo_same_two", NULL, 0 },
	{ "<module>", MEMO, "memo_same_name", NULL, 0 },
};

Test(pyframes, memo_never_stale, .timeout = 120)
{
	char dir[256], pb[300];
	char *argv[] = { mp_test_build_path("cli/memprof"),
			 "run",
			 "--stacks",
			 "-o",
			 pb,
			 "--print",
			 "none",
			 "--",
			 PYTHON,
			 MEMO,
			 NULL };
	struct mp_profile *p = NULL;
	const char *why = NULL;
	int st;

	mp_test_tmpdir(dir, sizeof(dir), "pyframes-memo");
	snprintf(pb, sizeof(pb), "%s/t.memprof", dir);
	cr_assert_eq(unsetenv("PYTHONPATH"), 0);
	st = mp_test_run_capture(argv, out, sizeof(out));
	cr_assert_eq(st, 0, "memprof run exited %d:\n%s", st, out);
	cr_assert(strstr(out, "memo done"), "%s", out);
	cr_assert_eq(mp_profile_load(pb, &p, &why), 0, "%s: %s", pb, why ? why : "?");
	cr_assert_eq(p->tracer_path, MP_PATH_INPROCESS);

	/* the same frame, code and instruction, another line */
	expect_chain(p, site_of(p, 11 * MIB, 11 * MIB + 4096), memo_line_a, 2);
	expect_chain(p, site_of(p, 12 * MIB, 12 * MIB + 4096), memo_line_b, 2);
	/* the same frame slot, another function */
	expect_chain(p, site_of(p, 13 * MIB, 13 * MIB + 4096), memo_first, 3);
	expect_chain(p, site_of(p, 14 * MIB, 14 * MIB + 4096), memo_second, 3);
	/* the same frame slot, code address and instruction, another code
	 * object (when malloc() gave the freed one's address again: the
	 * script says) */
	expect_chain(p, site_of(p, 15 * MIB, 15 * MIB + 4096), memo_code_one, 4);
	expect_chain(p, site_of(p, 16 * MIB, 16 * MIB + 4096), memo_code_two, 4);
	if (!strstr(out, "code at the same address: True"))
		cr_log_warn("the second code object is not at the first's address: %s", out);
	/* the same again under one file name object: the names are the
	 * same objects, only the line table tells the code objects apart
	 * (the line cache's guard as well as the memo's) */
	expect_chain(p, site_of(p, 17 * MIB, 17 * MIB + 4096), memo_same_one, 4);
	expect_chain(p, site_of(p, 18 * MIB, 18 * MIB + 4096), memo_same_two, 4);
	mp_profile_free(p);
	mp_test_rmtree(dir);
}

/* A worker forked by a Python process profiled with stacks (a preforked
 * server's), attached by pid with --stacks: the worker made a ring of its
 * own at the fork (libclient/ring.c), so its allocations are seen though
 * it never marks, and its Python frames are named in its own ring's
 * string table: the frame caches the parent filled, which hold ids into
 * the parent's, are dropped in the child (pyframes.c). */
static const struct pyframe fork_worker[] = {
	{ "child_alloc", FORK, "fork_child_alloc", NULL, 0 },
	{ "worker", FORK, "fork_worker", NULL, 0 },
	{ "<module>", FORK, "fork_module", NULL, 0 },
};

Test(pyframes, forked_worker_attached_by_pid, .timeout = 180)
{
	char dir[256], pb[300], wpb[300], pidf[300], wpid[32] = { 0 };
	char *run[] = { mp_test_build_path("cli/memprof"),
			"run",
			"--stacks",
			"-o",
			pb,
			"--print",
			"none",
			"--",
			PYTHON,
			FORK,
			pidf,
			NULL };
	char *attach[] = { mp_test_build_path("cli/memprofd"),
			   "--pid",
			   wpid,
			   "--stacks",
			   "-o",
			   wpb,
			   "--print",
			   "none",
			   NULL };
	struct mp_profile *p = NULL;
	const char *why = NULL;
	int pipefd[2], st;
	pid_t parent;
	FILE *f;

	mp_test_tmpdir(dir, sizeof(dir), "pyframes-fork");
	snprintf(pb, sizeof(pb), "%s/parent.memprof", dir);
	snprintf(wpb, sizeof(wpb), "%s/worker.memprof", dir);
	snprintf(pidf, sizeof(pidf), "%s/worker.pid", dir);
	cr_assert_eq(unsetenv("PYTHONPATH"), 0);
	cr_assert_eq(pipe2(pipefd, O_CLOEXEC), 0);
	parent = mp_test_spawn(run, pipefd[1], -1);
	close(pipefd[1]);
	for (int i = 0; i < 600 && !(f = fopen(pidf, "r")); i++)
		usleep(100 * 1000);
	cr_assert_not_null(f, "no worker pid in %s after 60 s", pidf);
	cr_assert_not_null(fgets(wpid, sizeof(wpid), f));
	fclose(f);
	/* until the worker exits */
	st = mp_test_run_capture(attach, out, sizeof(out));
	cr_assert_eq(st, 0, "memprofd --pid %s exited %d:\n%s", wpid, st, out);
	st = mp_test_collect(parent, pipefd[0], script_out, sizeof(script_out));
	cr_assert_eq(st, 0, "memprof run exited %d:\n%s", st, script_out);
	cr_assert(strstr(script_out, "worker status 0"), "%s", script_out);

	cr_assert_eq(mp_profile_load(wpb, &p, &why), 0, "%s: %s", wpb, why ? why : "?");
	cr_assert_eq(p->tracer_path, MP_PATH_INPROCESS);
	expect_chain(p, site_of(p, 21 * MIB, 21 * MIB + 4096), fork_worker, 3);
	mp_profile_free(p);
	mp_test_rmtree(dir);
}
