/* SPDX-License-Identifier: MIT */
/*
 * `memprof diff` on profiles of a real program (fixture_diff.c) taken with
 * the real `memprof run`: the same model twice passes the gate (exit 0), a
 * model grown in kernel matmul fails it (exit 1) and is named, kernels that
 * appear and vanish are named, the JSON passes validate_diff.py, sampled
 * profiles of the same model are within their noise, a mapping grown under
 * the same heap shows as such, and bad input exits 2.
 * Needs root (BPF, ptrace).
 */
#include <inttypes.h>
#include <sys/stat.h>

#include "../common/helpers.h"
#include "../output/run_helpers.h"

static char dir[128];

static void setup(void)
{
	mp_test_need_root("BPF and ptrace");
	mp_test_tmpdir(dir, sizeof(dir), "diff");
}

static void teardown(void)
{
	mp_test_rmtree(dir);
}

TestSuite(diff_real, .init = setup, .fini = teardown, .timeout = 240);

static const char *path_in(const char *name)
{
	static char buf[8][256];
	static int i;
	char *p = buf[i++ % 8];

	snprintf(p, 256, "%s/%s", dir, name);
	return p;
}

/* MEMPROF_DIFF_MAP of the next profile() (0: unset). */
static int map_mib;

/* Profiles the fixture into DIR/@name; @grow: MEMPROF_DIFF_GROW (0: the
 * base model); @sample_bytes: 0 precise, else sampled with that interval. */
static const char *profile(const char *name, int grow, unsigned sample_bytes)
{
	const char *out = path_in(name);
	char g[16], sb[32];
	char *argv[16];
	struct run r;
	int n = 0;

	argv[n++] = (char *)memprof_bin();
	argv[n++] = "run";
	argv[n++] = "-o";
	argv[n++] = (char *)out;
	argv[n++] = "--print";
	argv[n++] = "none";
	if (sample_bytes) {
		snprintf(sb, sizeof(sb), "%u", sample_bytes);
		argv[n++] = "--mode";
		argv[n++] = "sampled";
		argv[n++] = "--sample-bytes";
		argv[n++] = sb;
	}
	argv[n++] = "--";
	argv[n++] = mp_test_build_path("tests/cli/fixture-diff");
	argv[n] = NULL;
	if (grow) {
		snprintf(g, sizeof(g), "%d", grow);
		cr_assert_eq(setenv("MEMPROF_DIFF_GROW", g, 1), 0);
	} else {
		cr_assert_eq(unsetenv("MEMPROF_DIFF_GROW"), 0);
	}
	if (map_mib) {
		snprintf(g, sizeof(g), "%d", map_mib);
		cr_assert_eq(setenv("MEMPROF_DIFF_MAP", g, 1), 0);
	}
	r = run_cmd(argv, NULL);
	unsetenv("MEMPROF_DIFF_GROW");
	unsetenv("MEMPROF_DIFF_MAP");
	map_mib = 0;
	cr_assert_eq(r.status, 0, "memprof run (grow %d): %s", grow, r.err);
	run_free(&r);
	return out;
}

/* memprof diff @old @new_ [ARGS...] */
static struct run diff(const char *old, const char *new_, const char *const *args)
{
	char *argv[32];
	int n = 0;

	argv[n++] = (char *)memprof_bin();
	argv[n++] = "diff";
	argv[n++] = (char *)old;
	argv[n++] = (char *)new_;
	for (; args && *args && n < 31; args++)
		argv[n++] = (char *)*args;
	argv[n] = NULL;
	return run_cmd(argv, NULL);
}

/* validate_diff.py's verdict on @json. */
static char *validate(const char *json)
{
	const char *file = path_in("diff.json");
	char cmd[1024], line[512] = "";
	FILE *f = fopen(file, "we"), *p;

	cr_assert_not_null(f);
	cr_assert_eq(fputs(json, f) >= 0 && fclose(f) == 0, 1);
	snprintf(cmd, sizeof(cmd), "python3 '%s/tests/cli/validate_diff.py' '%s' 2>&1",
		 getenv("MEMPROF_SOURCE_ROOT"), file);
	p = popen(cmd, "r");
	cr_assert_not_null(p);
	if (!fgets(line, sizeof(line), p))
		line[0] = '\0';
	pclose(p);
	line[strcspn(line, "\n")] = '\0';
	return strdup(line);
}

static const char *const gate[] = {
	"--max-increase",
	"peak=5%",
	"--max-increase",
	"kernel:*.peak_added=10%",
	"--max-increase",
	"kernel:matmul.alloc=10%",
	NULL,
};

static const char *const gate_json[] = {
	"--format",
	"json",
	"--max-increase",
	"peak=5%",
	"--max-increase",
	"kernel:*.peak_added=10%",
	"--max-increase",
	"kernel:matmul.alloc=10%",
	NULL,
};

Test(diff_real, same_model_passes_grown_model_fails_and_is_named)
{
	const char *base = profile("base.memprof", 0, 0), *again = profile("again.memprof", 0, 0);
	const char *grown = profile("grown.memprof", 1, 0);
	struct run r;
	char *v;

	/* the same model: every heap figure is exact and equal */
	r = diff(base, again, gate);
	cr_expect_eq(r.status, 0, "%s%s", r.out, r.err);
	cr_expect(strstr(r.out, "\nlimits:\n  ok    peak=5%: held over 1 figure\n"
				"  ok    kernel:*.peak_added=10%: held over 5 figures\n"
				"  ok    kernel:matmul.alloc=10%: held over 1 figure\n"
				"result: pass, 0 of 3 limits exceeded\n"),
		  "%s", r.out);
	cr_expect_null(strstr(r.out, "appeared"), "%s", r.out);
	/* only RSS readings, which depend on timing, may differ */
	cr_expect(strstr(r.out, " unchanged"), "%s", r.out);
	cr_expect_null(strstr(r.out, "  alloc  "), "%s", r.out);
	cr_expect_null(strstr(r.out, "  peak  "), "%s", r.out);
	cr_expect_null(strstr(r.out, "  peak_added "), "%s", r.out);
	cr_expect_null(strstr(r.out, "  peak_live  "), "%s", r.out);
	cr_expect_str_empty(r.err);
	run_free(&r);

	/* matmul grown by 1 MiB, attention new, legacy_pad gone */
	r = diff(base, grown, gate);
	cr_expect_eq(r.status, 1, "%s%s", r.out, r.err);
	cr_expect(strstr(r.out, "\nappeared in NEW: kernel:attention\n"
				"vanished from NEW: kernel:legacy_pad\n"),
		  "%s", r.out);
	cr_expect(strstr(r.out, "\nFAIL          +1048576   +100.0%         1048576         2097152"
				"  alloc      kernel:matmul\n"),
		  "%s", r.out);
	cr_expect(strstr(r.out, "\nFAIL          +1048576   +100.0%         1048576         2097152"
				"  peak_added kernel:matmul\n"),
		  "%s", r.out);
	cr_expect(strstr(r.out, "\nFAIL             +8192       new               -            8192"
				"  peak_added kernel:attention\n"),
		  "%s", r.out);
	cr_expect(strstr(r.out,
			 "\n  FAIL  kernel:*.peak_added=10%: kernel:matmul +1048576 B "
			 "(+100.0%), allows +104857 B; 2 figures over it\n"
			 "  FAIL  kernel:matmul.alloc=10%: kernel:matmul +1048576 B (+100.0%), "
			 "allows +104857 B\n"
			 "result: FAIL, 3 of 3 limits exceeded\n"),
		  "%s", r.out);
	cr_expect(strstr(r.out, "\n  FAIL  peak=5%: profile +1048576 B ("), "%s", r.out);
	cr_expect_str_empty(r.err);
	run_free(&r);

	/* the same as JSON, checked against its schema */
	r = diff(base, grown, gate_json);
	cr_expect_eq(r.status, 1, "%s", r.err);
	v = validate(r.out);
	cr_expect(!strncmp(v, "ok changes=", 11) && strstr(v, " limits=3 exceeded=3 result=fail"),
		  "%s", v);
	free(v);
	cr_expect(strstr(r.out, "    {\n"
				"      \"scope\": \"kernel\",\n"
				"      \"name\": \"matmul\",\n"
				"      \"metric\": \"alloc\",\n"
				"      \"presence\": \"both\",\n"
				"      \"status\": \"fail\",\n"
				"      \"old\": 1048576,\n"
				"      \"new\": 2097152,\n"
				"      \"delta\": 1048576,\n"
				"      \"relativePercent\": 100,\n"
				"      \"stderr\": 0,\n"
				"      \"allowed\": 104857\n"
				"    },\n"),
		  "%s", r.out);
	cr_expect(strstr(r.out, "  \"appeared\": [\n    {\n      \"scope\": \"kernel\",\n"
				"      \"name\": \"attention\"\n    }\n  ],\n"
				"  \"vanished\": [\n    {\n      \"scope\": \"kernel\",\n"
				"      \"name\": \"legacy_pad\"\n    }\n  ],\n"),
		  "%s", r.out);
	run_free(&r);
	r = diff(base, again, gate_json);
	cr_expect_eq(r.status, 0, "%s", r.err);
	v = validate(r.out);
	cr_expect(!strncmp(v, "ok changes=", 11) && strstr(v, " limits=3 exceeded=0 result=pass"),
		  "%s", v);
	free(v);
	run_free(&r);
}

/* The line of @text that starts with @start ("\nNAME"), with its newline,
 * in a static buffer. */
static const char *line_of(const char *text, const char *start)
{
	static char buf[2][512];
	static int i;
	const char *a = strstr(text, start);
	char *b = buf[i++ % 2];

	cr_assert_not_null(a, "no '%s' in %s", start + 1, text);
	a++;
	snprintf(b, 512, "%.*s", (int)(strcspn(a, "\n") + 1), a);
	return b;
}

/* Kernel reserve maps 8 MiB more under the same heap: the mapping figures
 * grow by exactly that, the heap's by nothing, and a gate on the mappings'
 * peak fails while one on the heap's peak holds. */
Test(diff_real, mapping_grown_under_the_same_heap)
{
	static const char *const args[] = { "--max-increase", "peak=0", "--max-increase",
					    "maps_peak=5%", NULL };
	static const char *const args_json[] = { "--format", "json",	       "--max-increase",
						 "peak=0",   "--max-increase", "maps_peak=5%",
						 NULL };
	const char *base = profile("base.memprof", 0, 0), *mapped;
	const char *heap, *maps;
	struct run r;
	char *v;

	map_mib = 8;
	mapped = profile("mapped.memprof", 0, 0);
	r = diff(base, mapped, args);
	cr_expect_eq(r.status, 1, "%s%s", r.out, r.err);
	heap = line_of(r.out, "\nheap: peak ");
	maps = line_of(r.out, "\nmappings: reserved peak ");
	/* heap: peak A -> A B (+0), allocated B -> B B (+0) */
	cr_expect(strstr(heap, " B (+0), allocated ") && strstr(heap, " B (+0)\n"), "%s", r.out);
	cr_expect(strstr(maps, " B (+8388608), at the end ") &&
			  strstr(maps, " B (+8388608), mapped ") && strstr(maps, " B (+8388608)\n"),
		  "%s", r.out);
	cr_expect(strstr(r.out, "\n              +8388608    from 0               0         8388608"
				"  mapped     kernel:reserve\n"),
		  "%s", r.out);
	cr_expect_null(strstr(r.out, "  alloc      "), "%s", r.out);
	cr_expect_null(strstr(r.out, "  peak       "), "%s", r.out);
	cr_expect(strstr(r.out,
			 "\n  ok    peak=0: held over 1 figure\n  FAIL  maps_peak=5%: profile "
			 "+8388608 B ("),
		  "%s", r.out);
	cr_expect_str_empty(r.err);
	run_free(&r);

	r = diff(base, mapped, args_json);
	cr_expect_eq(r.status, 1, "%s", r.err);
	v = validate(r.out);
	cr_expect(!strncmp(v, "ok changes=", 11) && strstr(v, " limits=2 exceeded=1 result=fail"),
		  "%s", v);
	free(v);
	cr_expect(strstr(r.out, "      \"scope\": \"kernel\",\n"
				"      \"name\": \"reserve\",\n"
				"      \"metric\": \"mapped\",\n"
				"      \"presence\": \"both\",\n"
				"      \"status\": \"changed\",\n"
				"      \"old\": 0,\n"
				"      \"new\": 8388608,\n"
				"      \"delta\": 8388608,\n"),
		  "%s", r.out);
	run_free(&r);
}

/* Sampled at 4 KiB: the same model differs by noise only, and passes a
 * gate of no increase at all; a model grown by 3 MiB in matmul fails it.
 * Six standard errors rather than the default three: with two figures
 * checked, three would fail about once in 400 runs of the same model. */
Test(diff_real, sampled_same_model_within_noise)
{
	static const char *const g[] = { "--sigmas",
					 "6",
					 "--max-increase",
					 "peak=0",
					 "--max-increase",
					 "kernel:matmul.alloc=0",
					 NULL };
	static const char *const gj[] = { "--format",
					  "json",
					  "--sigmas",
					  "6",
					  "--max-increase",
					  "peak=0",
					  "--max-increase",
					  "kernel:matmul.alloc=0",
					  NULL };
	const char *base = profile("s-base.memprof", 0, 4096);
	const char *again = profile("s-again.memprof", 0, 4096);
	const char *grown = profile("s-grown.memprof", 3, 4096);
	struct run r;
	char *v;

	r = diff(base, again, g);
	cr_expect_eq(r.status, 0, "%s%s", r.out, r.err);
	cr_expect(strstr(r.out, "\nresult: pass, 0 of 2 limits exceeded\n"), "%s", r.out);
	cr_expect(strstr(r.out, "\nnoise: a change within 6 standard errors of the difference"),
		  "%s", r.out);
	run_free(&r);
	r = diff(base, again, gj);
	cr_expect_eq(r.status, 0, "%s", r.err);
	v = validate(r.out);
	cr_expect(!strncmp(v, "ok changes=", 11) && strstr(v, " limits=2 exceeded=0 result=pass"),
		  "%s", v);
	free(v);
	cr_expect(strstr(r.out, "\"traceMode\": \"sampled\",\n    \"sampleBytes\": 4096,\n"
				"    \"stderr\": true\n"),
		  "%s", r.out);
	run_free(&r);
	r = diff(base, grown, g);
	cr_expect_eq(r.status, 1, "%s%s", r.out, r.err);
	cr_expect(strstr(r.out, "\n  FAIL  kernel:matmul.alloc=0: kernel:matmul +"), "%s", r.out);
	cr_expect(strstr(r.out, "\nresult: FAIL, 2 of 2 limits exceeded\n"), "%s", r.out);
	run_free(&r);
}

/* A damaged copy of @src: one byte of the message flipped. */
static const char *corrupt(const char *src)
{
	const char *dst = path_in("corrupt.memprof");
	char *text;
	FILE *f;
	struct stat st;
	size_t n;

	cr_assert_eq(stat(src, &st), 0);
	n = (size_t)st.st_size;
	f = fopen(src, "re");
	cr_assert_not_null(f);
	text = malloc(n);
	cr_assert_eq(fread(text, 1, n, f), n);
	fclose(f);
	text[n - 1] ^= 0x55;
	f = fopen(dst, "we");
	cr_assert_not_null(f);
	cr_assert_eq(fwrite(text, 1, n, f), n);
	cr_assert_eq(fclose(f), 0);
	free(text);
	return dst;
}

static void expect_bad(const char *old, const char *new_, const char *const *args, const char *err)
{
	struct run r = diff(old, new_, args);

	cr_expect_eq(r.status, 2, "exit %d: %s", r.status, r.err);
	cr_expect_str_eq(r.err, err);
	cr_expect_str_empty(r.out);
	run_free(&r);
}

Test(diff_real, bad_input_exits_2)
{
	const char *base = profile("base.memprof", 0, 0);
	const char *bad = corrupt(base);
	char want[512];
	struct run r;

	snprintf(want, sizeof(want), "memprof diff: %s: No such file or directory\n",
		 path_in("missing"));
	expect_bad(base, path_in("missing"), NULL, want);
	snprintf(want, sizeof(want), "memprof diff: %s: corrupted profile (checksum mismatch)\n",
		 bad);
	expect_bad(bad, base, NULL, want);
	expect_bad(base, base, (const char *const[]){ "--max-increase", "kernel:matmul=5%", NULL },
		   "memprof diff: --max-increase 'kernel:matmul=5%': unknown metric: alloc, peak, "
		   "peak_added, peak_live, rss, mapped, maps_peak, maps_live or peak_share\n");
	expect_bad(base, base,
		   (const char *const[]){ "--max-increase", "kernel:matmull.alloc=5%", NULL },
		   "memprof diff: --max-increase 'kernel:matmull.alloc=5%': no kernel 'matmull' "
		   "in OLD or NEW\n");
	expect_bad(base, base, (const char *const[]){ "--format", "yaml", NULL },
		   "memprof diff: unknown format 'yaml' (table, json)\n");
	expect_bad(base, base, (const char *const[]){ "--sigmas", "-1", NULL },
		   "memprof diff: --sigmas takes a number of standard errors (0..100)\n");
	expect_bad(base, base, (const char *const[]){ "extra", NULL },
		   "memprof diff: expected two profiles, OLD and NEW (see --help)\n");

	/* what report reads, diff reads: a profile against itself passes */
	r = diff(base, base, (const char *const[]){ "-m", "peak=0", NULL });
	cr_expect_eq(r.status, 0, "%s", r.err);
	run_free(&r);
}
