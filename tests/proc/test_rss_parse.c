// SPDX-License-Identifier: MIT
/* Parsers of /proc/PID/status and smaps_rollup on real and hostile text. */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "rss.h"

#define KB(x) ((uint64_t)(x)*1024u)
#define NONE UINT64_MAX

/* The sentinel an untouched output keeps. */
static const struct mp_rss_sample poison = { 1, 2, 3, 4, 5, 6, 7, 8 };

static void expect_sample(const struct mp_rss_sample *got, const struct mp_rss_sample *want)
{
	cr_expect(eq(u64, got->ts_ns, want->ts_ns));
	cr_expect(eq(u64, got->vm_rss, want->vm_rss));
	cr_expect(eq(u64, got->rss_anon, want->rss_anon));
	cr_expect(eq(u64, got->rss_file, want->rss_file));
	cr_expect(eq(u64, got->rss_shmem, want->rss_shmem));
	cr_expect(eq(u64, got->vm_hwm, want->vm_hwm));
	cr_expect(eq(u64, got->vm_swap, want->vm_swap));
	cr_expect(eq(u64, got->pss, want->pss));
	/* and nothing else: the struct has no padding */
	cr_expect(eq(int, memcmp(got, want, sizeof(*got)), 0));
}

static void check_status(const char *text, size_t len, int want_r, const struct mp_rss_sample *want)
{
	struct mp_rss_sample got = poison;
	int r = mp_rss_parse_status(text, len, &got);

	cr_expect(eq(int, r, want_r), "parse of %zu bytes returned %d", len, r);
	expect_sample(&got, want_r == 0 ? want : &poison);
}

#define STATUS(text, want_r, ...)                                     \
	do {                                                          \
		const struct mp_rss_sample want_ = __VA_ARGS__;       \
		check_status(text, sizeof(text) - 1, want_r, &want_); \
	} while (0)

static const char real_status[] = "Name:\tcat\n"
				  "Umask:\t0022\n"
				  "State:\tR (running)\n"
				  "Tgid:\t2107\n"
				  "Pid:\t2107\n"
				  "Groups:\t0 1 2 3 4 6 10 \n"
				  "VmPeak:\t    3776 kB\n"
				  "VmSize:\t    3760 kB\n"
				  "VmLck:\t       0 kB\n"
				  "VmPin:\t       0 kB\n"
				  "VmHWM:\t    2132 kB\n"
				  "VmRSS:\t    2124 kB\n"
				  "RssAnon:\t     144 kB\n"
				  "RssFile:\t    1976 kB\n"
				  "RssShmem:\t       4 kB\n"
				  "VmData:\t     292 kB\n"
				  "VmStk:\t     132 kB\n"
				  "VmExe:\t     144 kB\n"
				  "VmLib:\t    1956 kB\n"
				  "VmPTE:\t      48 kB\n"
				  "VmSwap:\t      12 kB\n"
				  "HugetlbPages:\t       0 kB\n"
				  "Threads:\t1\n"
				  "SigQ:\t0/31161\n";

static const struct mp_rss_sample real_want = {
	.ts_ns = 0,
	.vm_rss = KB(2124),
	.rss_anon = KB(144),
	.rss_file = KB(1976),
	.rss_shmem = KB(4),
	.vm_hwm = KB(2132),
	.vm_swap = KB(12),
	.pss = NONE,
};

Test(rss_parse, real_status)
{
	check_status(real_status, sizeof(real_status) - 1, 0, &real_want);
}

Test(rss_parse, live_self_status)
{
	/* whatever this kernel prints must parse, with every counter present */
	char buf[8192];
	struct mp_rss_sample got = poison;
	FILE *f = fopen("/proc/self/status", "r");
	size_t n;

	cr_assert_not_null(f);
	n = fread(buf, 1, sizeof(buf), f);
	fclose(f);
	cr_assert(eq(int, mp_rss_parse_status(buf, n, &got), 0));
	cr_expect(eq(u64, got.ts_ns, 0));
	cr_expect(eq(u64, got.pss, NONE));
	cr_expect(ne(u64, got.vm_rss, NONE));
	cr_expect(ne(u64, got.rss_anon, NONE));
	cr_expect(ne(u64, got.rss_file, NONE));
	cr_expect(ne(u64, got.rss_shmem, NONE));
	cr_expect(ne(u64, got.vm_swap, NONE));
	cr_expect(ge(u64, got.vm_hwm, got.vm_rss));
	cr_expect(eq(u64, got.vm_rss % 1024, 0));
}

Test(rss_parse, zombie_and_empty)
{
	const struct mp_rss_sample none = { 0, NONE, NONE, NONE, NONE, NONE, NONE, NONE };

	STATUS("Name:\tdefunct\nState:\tZ (zombie)\nTgid:\t5\nThreads:\t1\n", 0,
	       { 0, NONE, NONE, NONE, NONE, NONE, NONE, NONE });
	check_status("", 0, 0, &none);
	check_status(NULL, 0, 0, &none);
}

Test(rss_parse, partial_and_no_final_newline)
{
	STATUS("VmRSS:\t10 kB\nRssAnon:\t7 kB\nVmSwap:\t0 kB", 0,
	       { 0, KB(10), KB(7), NONE, NONE, NONE, 0, NONE });
	/* spaces instead of tabs, trailing blanks, maximal value that fits */
	STATUS("VmRSS:   18014398509481983 kB  \nVmHWM:1 kB\n", 0,
	       { 0, 18014398509481983ull * 1024, NONE, NONE, NONE, KB(1), NONE, NONE });
}

Test(rss_parse, keys_match_whole_names_at_line_start)
{
	STATUS("VmRSSX:\t1 kB\nRssAnonymous:\t2 kB\n VmRSS:\t3 kB\nxVmHWM:\t4 kB\nVmRSS:\t5 kB\n",
	       0, { 0, KB(5), NONE, NONE, NONE, NONE, NONE, NONE });
}

Test(rss_parse, hostile_name)
{
	/* The kernel escapes a newline in the name as the two characters \n. */
	STATUS("Name:\tevil\\nVmRSS:\t1 kB\\n\nVmRSS:\t2 kB\n", 0,
	       { 0, KB(2), NONE, NONE, NONE, NONE, NONE, NONE });
	/* Were a raw newline to get through, the repeated key is refused. */
	STATUS("Name:\tevil\nVmRSS:\t1 kB\nState:\tS\nVmRSS:\t2 kB\n", -EBADMSG, { 0 });
	/* Bytes the kernel never prints do not derail the parser. */
	STATUS("Name:\t\xff\x01\x7f\nVmHWM:\t9 kB\n", 0,
	       { 0, NONE, NONE, NONE, NONE, KB(9), NONE, NONE });
}

Test(rss_parse, malformed_values)
{
	STATUS("VmRSS:\t abc kB\n", -EBADMSG, { 0 });
	STATUS("VmRSS:\t kB\n", -EBADMSG, { 0 });
	STATUS("VmRSS:\t12 MB\n", -EBADMSG, { 0 });
	STATUS("VmRSS:\t12\n", -EBADMSG, { 0 });
	STATUS("VmRSS:\t12", -EBADMSG, { 0 });
	STATUS("VmRSS:\t12 k", -EBADMSG, { 0 });
	STATUS("VmRSS:\t12 kB x\n", -EBADMSG, { 0 });
	STATUS("VmRSS:\t12 kB\r\n", -EBADMSG, { 0 });
	STATUS("VmRSS:\t-12 kB\n", -EBADMSG, { 0 });
	STATUS("VmRSS:\t1\0002 kB\n", -EBADMSG, { 0 });
	STATUS("VmRSS:", -EBADMSG, { 0 });
	/* a good line before a bad one does not leak into the output */
	STATUS("VmHWM:\t4 kB\nVmSwap:\tnope\n", -EBADMSG, { 0 });
}

Test(rss_parse, overflow)
{
	STATUS("VmRSS:\t18446744073709551616 kB\n", -ERANGE, { 0 });
	STATUS("VmRSS:\t99999999999999999999999999 kB\n", -ERANGE, { 0 });
	/* fits in 64 bits as kB, not as bytes */
	STATUS("VmRSS:\t18014398509481984 kB\n", -ERANGE, { 0 });
}

static const char real_rollup[] =
	"558183327000-7fffcfc7c000 ---p 00000000 00:00 0                          [rollup]\n"
	"Rss:                1692 kB\n"
	"Pss:                 452 kB\n"
	"Pss_Dirty:           112 kB\n"
	"Pss_Anon:            112 kB\n"
	"Pss_File:            340 kB\n"
	"Pss_Shmem:             0 kB\n"
	"SwapPss:               0 kB\n"
	"Locked:                0 kB\n";

static void check_rollup(const char *text, size_t len, int want_r, uint64_t want)
{
	uint64_t got = 77;
	int r = mp_rss_parse_smaps_rollup(text, len, &got);

	cr_expect(eq(int, r, want_r));
	cr_expect(eq(u64, got, want_r == 0 ? want : 77));
}

#define ROLLUP(text, want_r, want) check_rollup(text, sizeof(text) - 1, want_r, want)

Test(rss_parse, smaps_rollup)
{
	check_rollup(real_rollup, sizeof(real_rollup) - 1, 0, KB(452));
	ROLLUP("Pss_Anon:\t5 kB\nSwapPss:\t6 kB\nPss:\t7 kB", 0, KB(7));
	ROLLUP("Pss_Anon:\t5 kB\nSwapPss:\t6 kB\n", -ENODATA, 0);
	check_rollup("", 0, -ENODATA, 0);
	ROLLUP("Pss:\t1 kB\nPss:\t1 kB\n", -EBADMSG, 0);
	ROLLUP("Pss:\t1 MB\n", -EBADMSG, 0);
	ROLLUP("Pss:\t18014398509481984 kB\n", -ERANGE, 0);
}

Test(rss_parse, live_self_smaps_rollup)
{
	char buf[8192];
	uint64_t pss = 0;
	FILE *f = fopen("/proc/self/smaps_rollup", "r");
	size_t n;

	cr_assert_not_null(f);
	n = fread(buf, 1, sizeof(buf), f);
	fclose(f);
	cr_assert(eq(int, mp_rss_parse_smaps_rollup(buf, n, &pss), 0));
	cr_expect(gt(u64, pss, 0));
	cr_expect(eq(u64, pss % 1024, 0));
}
