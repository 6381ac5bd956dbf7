// SPDX-License-Identifier: MIT
/*
 * A lying target: a thread of fixture-hostile forges heap records
 * (impossible sizes, stamps, thread ids, an over-long call stack) and
 * markers of other threads into its own ring, or leaves its ring stuck,
 * under the real `memprof run` (sanitized in the sanitizer build), on the
 * allocation path of MEMPROF_TEST_TRACER (meson runs this suite once per
 * path). The daemon must finish normally, count each refused record by
 * reason, say so in the table's first lines, and keep every forged byte out
 * of the figures: the heap figures are the honest part's. Also: an exec
 * releases the old image's live blocks.
 */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../common/helpers.h"
#include "profile.h"
#include "profile_pb.h"

/* the fixture's figures (fixture_forge.h) */
#define HONEST_LIVE (12ull << 20)
#define FORGED_MIN (64ull << 20)
#define FORGE_N 16
#define FORGE_SIZE (2 * FORGE_N)
#define FORGE_TIME (4 * FORGE_N)
#define FORGE_THREAD (3 * FORGE_N)
#define FORGE_FREE (2 * FORGE_N)
#define FORGE_HEAP (FORGE_SIZE + FORGE_TIME + 2 * FORGE_N + FORGE_FREE)
#define FORGE_FREES (3 * FORGE_N)

static char tmpdir[256];

static void setup(void)
{
	mp_test_need_root("BPF and ptrace");
	mp_test_tmpdir(tmpdir, sizeof(tmpdir), "forge");
}

static void cleanup(void)
{
	mp_test_rmtree(tmpdir);
	tmpdir[0] = '\0';
}

static bool bpf_path(void)
{
	const char *t = getenv("MEMPROF_TEST_TRACER");

	return t && !strcmp(t, "bpf");
}

/* `memprof run -o FILE -- fixture-hostile @how after` to its end; the
 * profile, and the table `memprof report` prints of it in @table. */
static struct mp_profile *run(const char *how, char *table, size_t cap)
{
	char path[300];
	char *argv[] = { mp_test_build_path("cli/memprof"),
			 "run",
			 "-o",
			 path,
			 "--print",
			 "none",
			 "--",
			 mp_test_build_path("tests/hostile/fixture-hostile"),
			 (char *)how,
			 "after",
			 NULL };
	char *rargv[] = { mp_test_build_path("cli/memprof"), "report", path, NULL };
	struct mp_profile *p = NULL;
	const char *why = NULL;
	int status;
	pid_t pid;

	cr_assert_lt((size_t)snprintf(path, sizeof(path), "%s/profile.mpf", tmpdir), sizeof(path));
	pid = mp_test_spawn(argv, -1, -1);
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "memprof run: status 0x%x",
		  status);
	cr_assert_eq(mp_test_run_capture(rargv, table, cap), 0, "memprof report");
	cr_assert_eq(mp_profile_load(path, &p, &why), 0, "loading %s: %s", path, why ? why : "");
	return p;
}

/* The table says so before its first figure. */
static void assert_said_first(const char *table, const char *what)
{
	const char *c = strstr(table, "CORRUPTION:"), *heap = strstr(table, "\nheap:");

	cr_assert_not_null(c, "no CORRUPTION line in:\n%s", table);
	cr_assert(!heap || c < heap, "the CORRUPTION line comes after the figures:\n%s", table);
	if (what) {
		const char *eol = strchr(c, '\n');
		const char *w = strstr(c, what);

		cr_assert(w && (!eol || w < eol), "\"%s\" not on the CORRUPTION line:\n%s", what,
			  table);
	}
}

/* Nothing forged reached a heap figure: the honest part kept HONEST_LIVE
 * live (plus what libc allocates for itself), each forged record would
 * have added FORGED_MIN at least. */
static void assert_honest_heap(const struct mp_profile *p)
{
	cr_assert_geq(p->mem.bytes_added, (int64_t)HONEST_LIVE, "new bytes %" PRId64,
		      p->mem.bytes_added);
	cr_assert_lt(p->mem.bytes_added, (int64_t)(HONEST_LIVE + (2u << 20)), "new bytes %" PRId64,
		     p->mem.bytes_added);
	cr_assert_lt(p->peak_bytes, HONEST_LIVE + (2u << 20), "peak %" PRIu64, p->peak_bytes);
	cr_assert_lt(p->mem.alloc_bytes, HONEST_LIVE + (4u << 20), "allocated %" PRIu64,
		     p->mem.alloc_bytes);
	for (uint32_t i = 0; i < p->n_invocations; i++)
		cr_assert_lt(p->invocations[i].peak_bytes, HONEST_LIVE + (2u << 20));
}

Test(forge, heap_records_rejected_by_reason, .init = setup, .fini = cleanup)
{
	char table[16384];
	struct mp_profile *p = run("heap", table, sizeof(table));

	cr_assert(p->corruption & MP_CORRUPT_RECORDS_REJECTED, "corruption 0x%x", p->corruption);
	/* the ring itself stays readable: every forged record is skipped */
	cr_assert_eq(p->corruption & (MP_CORRUPT_RING_RECORDS | MP_CORRUPT_RING_STUCK), 0,
		     "corruption 0x%x", p->corruption);
	cr_assert_eq(p->rejected[MP_REJECT_STACK], 1);
	if (bpf_path()) {
		/* the interposer was never on: every heap record is a lie */
		cr_assert_eq(p->rejected[MP_REJECT_MODE], FORGE_HEAP);
		cr_assert_eq(p->rejected[MP_REJECT_THREAD], FORGE_N);
		cr_assert_eq(p->rejected[MP_REJECT_SIZE], 0);
		cr_assert_eq(p->rejected[MP_REJECT_TIME], 0);
		assert_said_first(table, "mode");
	} else {
		cr_assert_eq(p->rejected[MP_REJECT_SIZE], FORGE_SIZE);
		cr_assert_eq(p->rejected[MP_REJECT_TIME], FORGE_TIME);
		cr_assert_eq(p->rejected[MP_REJECT_THREAD], FORGE_THREAD);
		cr_assert_eq(p->rejected[MP_REJECT_FREE], FORGE_FREE);
		cr_assert_eq(p->rejected[MP_REJECT_MODE], 0);
		assert_said_first(table, "size");
	}
	assert_honest_heap(p);
	/* the honest kernels after the forgery were read */
	cr_assert_gt(p->n_invocations, 400);
	mp_profile_free(p);
}

/* Frees of blocks never allocated at addresses below 2^56: misaligned
 * ones and ones where nothing is mapped are refused by reason; aligned
 * ones inside the heap pass as unknown frees (nothing can tell them from
 * blocks allocated before the attach) and change no figure either. */
Test(forge, plausible_frees_rejected_by_reason, .init = setup, .fini = cleanup)
{
	char table[16384];
	struct mp_profile *p = run("frees", table, sizeof(table));

	cr_assert(p->corruption & MP_CORRUPT_RECORDS_REJECTED, "corruption 0x%x", p->corruption);
	cr_assert_eq(p->corruption & (MP_CORRUPT_RING_RECORDS | MP_CORRUPT_RING_STUCK), 0,
		     "corruption 0x%x", p->corruption);
	if (bpf_path()) {
		cr_assert_eq(p->rejected[MP_REJECT_MODE], FORGE_FREES);
		cr_assert_eq(p->rejected[MP_REJECT_FREE_MISALIGNED], 0);
		cr_assert_eq(p->rejected[MP_REJECT_FREE_UNMAPPED], 0);
		assert_said_first(table, "mode");
	} else {
		cr_assert_eq(p->rejected[MP_REJECT_FREE_MISALIGNED], FORGE_N);
		cr_assert_eq(p->rejected[MP_REJECT_FREE_UNMAPPED], FORGE_N);
		cr_assert_eq(p->rejected[MP_REJECT_MODE], 0);
		cr_assert_geq(p->unknown_frees, FORGE_N, "unknown frees %" PRIu64,
			      p->unknown_frees);
		assert_said_first(table, "freeMisaligned");
		assert_said_first(table, "freeUnmapped");
	}
	for (int i = 0; i < MP_REJECT_COUNT; i++)
		if (i != MP_REJECT_MODE && i != MP_REJECT_FREE_MISALIGNED &&
		    i != MP_REJECT_FREE_UNMAPPED)
			cr_assert_eq(p->rejected[i], 0, "rejected[%d] = %" PRIu64, i,
				     p->rejected[i]);
	assert_honest_heap(p);
	cr_assert_gt(p->n_invocations, 400);
	mp_profile_free(p);
}

static void check_stuck(const char *how)
{
	char table[16384];
	struct mp_profile *p = run(how, table, sizeof(table));

	cr_assert(p->corruption & MP_CORRUPT_RING_STUCK, "corruption 0x%x", p->corruption);
	cr_assert_eq(p->stuck_rings, 1);
	assert_said_first(table, "stuck");
	assert_honest_heap(p);
	/* the other rings went on: the main thread's kernels after it */
	cr_assert_gt(p->n_invocations, 400);
	mp_profile_free(p);
}

Test(forge, head_past_unpublished_records_is_stuck, .init = setup, .fini = cleanup)
{
	check_stuck("stuck");
}

Test(forge, sequence_word_going_back_is_stuck, .init = setup, .fini = cleanup)
{
	check_stuck("seqback");
}

Test(forge, exec_releases_the_old_image_blocks, .init = setup, .fini = cleanup)
{
	char table[16384];
	struct mp_profile *p = run("exec", table, sizeof(table));
	bool seen = false;

	cr_assert_eq(p->corruption, 0, "corruption 0x%x", p->corruption);
	cr_assert_eq(p->n_execs, 1);
	cr_assert_geq(p->execs[0].released_bytes, HONEST_LIVE, "released %" PRIu64,
		      p->execs[0].released_bytes);
	cr_assert_geq(p->execs[0].released_blocks, 4);
	for (uint32_t i = 0; i < p->n_kernels; i++) {
		if (strcmp(p->names[p->kernels[i].name], "after_exec"))
			continue;
		seen = true;
		/* the new image's 1 MiB and its libc's, not the old 12 MiB */
		cr_assert_geq(p->kernels[i].peak_bytes, 1u << 20);
		cr_assert_lt(p->kernels[i].peak_bytes, 4u << 20, "after_exec PEAK_LIVE %" PRIu64,
			     p->kernels[i].peak_bytes);
	}
	cr_assert(seen, "no after_exec kernel");
	cr_assert_lt(p->mem.bytes_added, (int64_t)(4u << 20), "new bytes %" PRId64,
		     p->mem.bytes_added);
	mp_profile_free(p);
}
