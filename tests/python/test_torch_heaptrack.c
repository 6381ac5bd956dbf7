// SPDX-License-Identifier: MIT
/*
 * Heap is the malloc family (docs/PROFILE.md "Heap and mappings"): on
 * Debian's PyTorch, the five-pass CNN script of bench/python.py, the heap
 * peak of `memprof run` is within 10% of heaptrack's "peak heap memory
 * consumption" on the same script, measured here in the same test (both
 * count the malloc family only; the interpreter's pymalloc arenas, the
 * libraries' bss and the threads' stacks are anonymous mappings, which
 * heaptrack does not trace and memprof reports apart). Needs root,
 * heaptrack (scripts/install-deps) and python3-torch.
 */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "profile.h"
#include "profile_pb.h"
#include "../common/helpers.h"

#ifndef SRC_ROOT
#error "SRC_ROOT must name the source tree"
#endif

#define PYTHON "/usr/bin/python3"
#define SCRIPT SRC_ROOT "/bench/python.py"

static char out[1 << 20];

/* heaptrack_print's "peak heap memory consumption: 130.53M" in bytes
 * (its units are powers of 1000: K, M, G). */
static double heaptrack_peak(const char *text)
{
	const char *p = strstr(text, "peak heap memory consumption: ");
	char unit = 0;
	double v = 0;

	cr_assert_not_null(p, "no peak heap line in heaptrack_print's output:\n%s", text);
	cr_assert_eq(sscanf(p + strlen("peak heap memory consumption: "), "%lf%c", &v, &unit), 2);
	switch (unit) {
	case 'G':
		return v * 1e9;
	case 'M':
		return v * 1e6;
	case 'K':
		return v * 1e3;
	case 'B':
		return v;
	}
	cr_assert_fail("unit %c in %s", unit, p);
	return 0;
}

Test(torch_heaptrack, heap_peak_lines_up_with_heaptrack, .timeout = 1500)
{
	char dir[256], pb[300], ht[300], zst[310];
	char *mrun[] = { mp_test_build_path("cli/memprof"),
			 "run",
			 "--print",
			 "none",
			 "-o",
			 pb,
			 "--",
			 PYTHON,
			 SCRIPT,
			 "cnn",
			 NULL };
	char *htrun[] = { "/usr/bin/heaptrack", "-o", ht, PYTHON, SCRIPT, "cnn", NULL };
	/* the summary alone: the backtraces would be hundreds of KiB */
	char *htprint[] = { "/usr/bin/heaptrack_print",
			    "--print-peaks=0",
			    "--print-allocators=0",
			    "--print-temporary=0",
			    "-f",
			    zst,
			    NULL };
	struct mp_profile *p = NULL;
	const char *why = NULL;
	double theirs, ours;
	int st;

	mp_test_need_root("BPF and ptrace");
	cr_assert_eq(access("/usr/bin/heaptrack", X_OK), 0,
		     "heaptrack is not installed (scripts/install-deps installs it)");
	mp_test_tmpdir(dir, sizeof(dir), "torch-ht");
	snprintf(pb, sizeof(pb), "%s/cnn.memprof", dir);
	snprintf(ht, sizeof(ht), "%s/cnn", dir);
	snprintf(zst, sizeof(zst), "%s/cnn.zst", dir);

	st = mp_test_run_capture(mrun, out, sizeof(out));
	cr_assert_eq(st, 0, "memprof run exited %d:\n%s", st, out);
	cr_assert_eq(mp_profile_load(pb, &p, &why), 0, "%s: %s", pb, why ? why : "?");
	/* On a machine too loaded for the daemon to keep up, heap records
	 * past the producer's 1 s wait are dropped (docs/RING.md): the peak
	 * is then a lower bound, said beside the figures below. */
	ours = (double)p->peak_bytes;

	st = mp_test_run_capture(htrun, out, sizeof(out));
	cr_assert_eq(st, 0, "heaptrack exited %d:\n%s", st, out);
	st = mp_test_run_capture(htprint, out, sizeof(out));
	cr_assert_eq(st, 0, "heaptrack_print exited %d", st);
	theirs = heaptrack_peak(out);

	fprintf(stderr,
		"heap peak: memprof %.0f B, heaptrack %.0f B (%+.1f%%); mappings: reserved peak "
		"%" PRIu64 " B; heap records dropped %" PRIu64 "\n",
		ours, theirs, (ours - theirs) / theirs * 100, p->maps.peak_bytes, p->drops_heap);
	cr_expect_leq(fabs(ours - theirs), theirs * 0.10,
		      "memprof's heap peak %.0f B is not within 10%% of heaptrack's %.0f B", ours,
		      theirs);
	/* the interpreter's arenas and the libraries' bss are there, apart */
	cr_expect_gt(p->maps.peak_bytes, 10u << 20, "mappings: reserved peak %" PRIu64,
		     p->maps.peak_bytes);
	mp_profile_free(p);
	mp_test_rmtree(dir);
}
