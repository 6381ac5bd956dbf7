/* SPDX-License-Identifier: MIT */
/*
 * `memprof convert` on synthetic profile files: the output is exactly what
 * the renderers write, and every bad input or option ends with a clear
 * message and a non-zero exit, never a crash. Also the option errors of
 * `memprof run` and `memprof attach` (one table, one message).
 */
#include <stdlib.h>

#include "helpers.h"
#include "../output/helpers_chrome.h"
#include "outfile.h"
#include "profile_pb.h"
#include "../output/run_helpers.h"

static char dir[] = "/tmp/memprof-convert-XXXXXX";
static char file[128];

static void setup(void)
{
	struct stream s;
	struct mp_profile *p;
	struct block b;

	cr_assert_not_null(mkdtemp(dir));
	snprintf(file, sizeof(file), "%s/p.memprof", dir);
	stream_init(&s, NULL);
	phase(&s, "warmup");
	kbegin(&s, 1, "outer");
	b = alloc(&s, 1, 100);
	kbegin(&s, 1, "in\"ner\x01");
	alloc(&s, 2, 28);
	kend(&s, 1);
	release(&s, 1, &b);
	kend(&s, 1);
	p = finish(&s);
	cr_assert_eq(mp_profile_set_process(p, 77, "/opt/app", NULL, "app --x"), 0);
	cr_assert_eq(mp_profile_save(p, file), 0);
	mp_profile_free(p);
}

static void teardown(void)
{
	char cmd[256];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	cr_expect_eq(system(cmd), 0);
}

TestSuite(convert, .init = setup, .fini = teardown);

static struct mp_profile *loaded(void)
{
	struct mp_profile *p = NULL;
	const char *why = NULL;

	cr_assert_eq(mp_profile_load(file, &p, &why), 0, "%s", why ? why : "");
	return p;
}

Test(convert, chrome_and_json_are_the_renderers_output)
{
	struct mp_profile *p = loaded();
	char *chrome = chrome_render(p), *json = render(p, MP_REPORT_JSON, NULL), out[160], *got,
	     *val;
	struct run r;

	r = run_cmd((char *[]){ (char *)memprof_bin(), "convert", file, "--to", "chrome", NULL },
		    NULL);
	cr_expect_eq(r.status, 0);
	cr_expect_str_empty(r.err);
	cr_expect_str_eq(r.out, chrome);
	val = validate_text(r.out);
	cr_expect_str_eq(val, "ok X=2 C=4 M=2 i=1 threads=1");
	free(val);
	run_free(&r);

	r = run_cmd((char *[]){ (char *)memprof_bin(), "convert", "--to=json", file, NULL }, NULL);
	cr_expect_eq(r.status, 0);
	cr_expect_str_empty(r.err);
	cr_expect_str_eq(r.out, json);
	run_free(&r);

	snprintf(out, sizeof(out), "%s/t.json", dir);
	r = run_cmd((char *[]){ (char *)memprof_bin(), "convert", file, "-t", "chrome", "-o", out,
				NULL },
		    NULL);
	cr_expect_eq(r.status, 0);
	cr_expect_str_empty(r.err);
	cr_expect_str_empty(r.out);
	got = read_whole(out);
	cr_expect_str_eq(got, chrome);
	free(got);
	run_free(&r);
	free(chrome);
	free(json);
	mp_profile_free(p);
}

static void write_file(const char *path, const void *buf, size_t len)
{
	FILE *f = fopen(path, "we");

	cr_assert_not_null(f);
	cr_assert_eq(fwrite(buf, 1, len, f), len);
	cr_assert_eq(fclose(f), 0);
}

static void expect_refused(const char *path, const char *want_err)
{
	char want[512];
	struct run r;

	r = run_cmd((char *[]){ (char *)memprof_bin(), "convert", (char *)path, "--to", "chrome",
				NULL },
		    NULL);
	snprintf(want, sizeof(want), "memprof convert: %s: %s\n", path, want_err);
	cr_expect_eq(r.status, 1, "%s", path);
	cr_expect_str_eq(r.err, want);
	cr_expect_str_empty(r.out);
	run_free(&r);
}

/* Truncated, corrupted, empty, foreign and missing files are refused with
 * the decoder's reason. */
Test(convert, bad_files_refused_with_reason)
{
	char *buf = read_whole(file), path[160];
	size_t len;
	FILE *f = fopen(file, "re");

	cr_assert_not_null(f);
	fseek(f, 0, SEEK_END);
	len = (size_t)ftell(f);
	fclose(f);
	cr_assert_gt(len, MP_PROFILE_FILE_HEADER + 10);

	snprintf(path, sizeof(path), "%s/truncated", dir);
	write_file(path, buf, len - 7);
	expect_refused(path, "truncated profile (shorter than its header says)");

	snprintf(path, sizeof(path), "%s/flipped", dir);
	buf[len - 5] ^= 0x10;
	write_file(path, buf, len);
	expect_refused(path, "corrupted profile (checksum mismatch)");
	buf[len - 5] ^= 0x10;

	snprintf(path, sizeof(path), "%s/header-only", dir);
	write_file(path, buf, 10);
	expect_refused(path, "not a memprof profile (bad magic)");

	snprintf(path, sizeof(path), "%s/trace.json", dir);
	write_file(path, "{\"traceEvents\":[]}\n", 19);
	expect_refused(path, "not a memprof profile (bad magic)");

	snprintf(path, sizeof(path), "%s/empty", dir);
	write_file(path, "", 0);
	expect_refused(path, "not a memprof profile (bad magic)");

	snprintf(path, sizeof(path), "%s/missing", dir);
	expect_refused(path, "No such file or directory");
	expect_refused(dir, "not a regular file of at most 1 GiB");
	free(buf);
}

static void expect_usage_error(char **argv, int status, const char *want_err)
{
	struct run r = run_cmd(argv, NULL);

	cr_expect_eq(r.status, status, "%s", want_err);
	cr_expect_str_eq(r.err, want_err);
	cr_expect_str_empty(r.out);
	run_free(&r);
}

Test(convert, bad_options_refused)
{
	char *m = (char *)memprof_bin();

	expect_usage_error((char *[]){ m, "convert", file, "--to", "svg", NULL }, 2,
			   "memprof convert: unknown format 'svg' (pprof, chrome, json)\n");
	expect_usage_error((char *[]){ m, "convert", file, NULL }, 2,
			   "memprof convert: --to pprof|chrome|json is required\n");
	expect_usage_error((char *[]){ m, "convert", "--to", "json", NULL }, 2,
			   "memprof convert: expected exactly one FILE (see --help)\n");
	expect_usage_error((char *[]){ m, "convert", file, file, "--to", "json", NULL }, 2,
			   "memprof convert: expected exactly one FILE (see --help)\n");
}

/* run and attach check a value against the same bound of the option
 * table (the service and its configuration file too: tests/service), and
 * say what would be valid. */
Test(options, one_bound_and_message_for_run_and_attach)
{
	char *m = (char *)memprof_bin();

	expect_usage_error((char *[]){ m, "run", "--sample-bytes", "0", "--", "true", NULL }, 2,
			   "memprof run: invalid --sample-bytes '0' (1 to 1099511627776, suffix "
			   "K, M or G; see --help)\n");
	expect_usage_error((char *[]){ m, "attach", "1", "--sample-bytes", "1025G", NULL }, 2,
			   "memprof attach: invalid --sample-bytes '1025G' (1 to 1099511627776, "
			   "suffix K, M or G; see --help)\n");
	expect_usage_error((char *[]){ m, "attach", "1", "--mode", "fast", NULL }, 2,
			   "memprof attach: invalid --mode 'fast' (precise, sampled or rss; see "
			   "--help)\n");
	expect_usage_error(
		(char *[]){ m, "run", "--stream", "tcp://127.0.0.1:1", "--", "true", NULL }, 2,
		"memprof run: --stream is an option of memprofd --pid and memprof "
		"attach only (see --help)\n");
	expect_usage_error((char *[]){ m, "detach", "1", "--stacks", NULL }, 2,
			   "memprof detach: invalid option --stacks for detach (see --help)\n");
}

Test(convert, unwritable_output_reported)
{
	char out[160], want[256];
	struct run r;

	snprintf(out, sizeof(out), "%s/no/such/dir/t.json", dir);
	r = run_cmd((char *[]){ (char *)memprof_bin(), "convert", file, "--to", "json", "-o", out,
				NULL },
		    NULL);
	snprintf(want, sizeof(want),
		 "memprof convert: cannot create %s: No such file or directory\n", out);
	cr_expect_eq(r.status, 1);
	cr_expect_str_eq(r.err, want);
	run_free(&r);

	/* A full device: the write error is reported and nothing is left. */
	r = run_cmd((char *[]){ (char *)memprof_bin(), "convert", file, "--to", "chrome", NULL },
		    "/dev/full");
	cr_expect_eq(r.status, 1);
	cr_expect_str_eq(r.err,
			 "memprof convert: writing standard output: No space left on device\n");
	run_free(&r);
}

Test(convert, help)
{
	struct run r =
		run_cmd((char *[]){ (char *)memprof_bin(), "convert", "--help", NULL }, NULL);

	cr_expect_eq(r.status, 0);
	cr_expect_str_empty(r.err);
	{
		static const char first[] =
			"Usage: memprof convert FILE --to pprof|chrome|json [-o OUT]\n";

		cr_expect(!strncmp(r.out, first, sizeof(first) - 1), "%s", r.out);
	}
	run_free(&r);
	r = run_cmd((char *[]){ (char *)memprof_bin(), "--help", NULL }, NULL);
	cr_expect_eq(r.status, 0);
	cr_expect(strstr(r.out, "  convert FILE --to pprof|chrome|json [-o OUT]\n"), "%s", r.out);
	run_free(&r);
}

/* pprof is binary: never written to a terminal. */
Test(convert, pprof_not_written_to_a_terminal)
{
	int master = posix_openpt(O_RDWR | O_NOCTTY);
	struct run r;

	cr_assert_geq(master, 0);
	cr_assert_eq(grantpt(master), 0);
	cr_assert_eq(unlockpt(master), 0);
	r = run_cmd((char *[]){ (char *)memprof_bin(), "convert", file, "--to", "pprof", NULL },
		    ptsname(master));
	cr_expect_eq(r.status, 2);
	cr_expect_str_eq(r.err, "memprof convert: pprof is binary: not writing it to a terminal "
				"(use -o FILE or a redirection)\n");
	run_free(&r);
	close(master);
}
