// SPDX-License-Identifier: MIT
/* Unit tests of the check of frees of blocks never seen allocated
 * (daemon/proc/freecheck.h): maps and the clock injected. */
#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>

#include "freecheck.h"

#define MS (1000 * 1000ull)

/* At the attach: the heap, an anonymous arena, a file's .data, a shared
 * mapping, code, the main stack. */
static const char at_attach[] =
	"55d0c0a00000-55d0c0a02000 r--p 00000000 fe:01 1311 /usr/bin/cat\n"
	"55d0c0a02000-55d0c0a07000 r-xp 00002000 fe:01 1311 /usr/bin/cat\n"
	"55d0c0a08000-55d0c0a09000 rw-p 00008000 fe:01 1311 /usr/bin/cat\n"
	"55d0c1c6d000-55d0c1c8e000 rw-p 00000000 00:00 0 [heap]\n"
	"7f3a4c000000-7f3a4c021000 rw-s 00000000 00:05 77 /dev/shm/x (deleted)\n"
	"7f3a4c100000-7f3a4c200000 rw-p 00000000 00:00 0 \n"
	"7f3a4c200000-7f3a4c228000 r-xp 00028000 fe:01 2888 /usr/lib/a.so\n"
	"7ffc10000000-7ffc10021000 rw-p 00000000 00:00 0 [stack]\n";

/* Later: the arena is gone, a new one at 0x7f3a50000000. */
static const char later[] = "55d0c1c6d000-55d0c1c8e000 rw-p 00000000 00:00 0 [heap]\n"
			    "7f3a50000000-7f3a50100000 rw-p 00000000 00:00 0 \n";

struct src {
	const char *text; /* what a read returns; NULL: it fails */
	uint64_t now, read_cost; /* the clock, and what a read adds to it */
	int reads;
};

static int src_read(void *ctx, struct mp_procmaps **ret)
{
	struct src *s = ctx;

	s->reads++;
	s->now += s->read_cost;
	if (!s->text)
		return -ENOENT;
	return mp_procmaps_parse(s->text, strlen(s->text), ret);
}

static uint64_t src_clock(void *ctx)
{
	return ((struct src *)ctx)->now;
}

static struct mp_freecheck *checker(struct src *s, const char *attach)
{
	struct mp_procmaps *m = NULL;
	struct mp_freecheck *fc;

	if (attach)
		cr_assert_eq(mp_procmaps_parse(attach, strlen(attach), &m), 0);
	cr_assert_eq(mp_freecheck_new(1, m, s->now, &fc), 0);
	mp_procmaps_free(m);
	mp_freecheck_set_source(fc, src_read, src_clock, s);
	return fc;
}

Test(freecheck, writable_private_mappings_at_attach_pass_without_a_read)
{
	struct src s = { .text = at_attach, .now = 1000 * MS };
	struct mp_freecheck *fc = checker(&s, at_attach);

	cr_assert(mp_freecheck_mapped(fc, 0x55d0c1c6d010, s.now)); /* [heap] */
	cr_assert(mp_freecheck_mapped(fc, 0x55d0c1c8dff0, s.now));
	cr_assert(mp_freecheck_mapped(fc, 0x7f3a4c1ffff0, s.now)); /* anonymous */
	cr_assert(mp_freecheck_mapped(fc, 0x55d0c0a08100, s.now)); /* .data */
	cr_assert_eq(s.reads, 0);
	mp_freecheck_free(fc);
}

Test(freecheck, code_shared_stack_and_holes_are_refused)
{
	struct src s = { .text = at_attach, .now = 1000 * MS };
	struct mp_freecheck *fc = checker(&s, at_attach);
	/* the free is older than the attach snapshot: no read helps */
	uint64_t ts = s.now - 1;

	cr_assert_not(mp_freecheck_mapped(fc, 0x55d0c0a03000, ts)); /* code */
	cr_assert_not(mp_freecheck_mapped(fc, 0x7f3a4c000010, ts)); /* shared */
	cr_assert_not(mp_freecheck_mapped(fc, 0x7ffc10000100, ts)); /* [stack] */
	cr_assert_not(mp_freecheck_mapped(fc, 0x55d0c1c8e000, ts)); /* past [heap] */
	cr_assert_not(mp_freecheck_mapped(fc, 0x300000000000, ts)); /* a hole */
	cr_assert_not(mp_freecheck_mapped(fc, 0x7f3a4c228000, ts));
	cr_assert_eq(s.reads, 0);
	mp_freecheck_free(fc);
}

Test(freecheck, a_miss_newer_than_the_last_look_reads_the_maps_again)
{
	struct src s = { .text = later, .now = 1000 * MS, .read_cost = 1 * MS };
	struct mp_freecheck *fc = checker(&s, at_attach);

	s.now += 50 * MS;
	/* a new arena: found at the read a miss makes */
	cr_assert(mp_freecheck_mapped(fc, 0x7f3a50000040, s.now - 1));
	cr_assert_eq(s.reads, 1);
	/* the attach snapshot still counts: blocks from before the attach */
	cr_assert(mp_freecheck_mapped(fc, 0x7f3a4c100040, s.now));
	/* found in the latest look: no read */
	cr_assert(mp_freecheck_mapped(fc, 0x7f3a500fffc0, s.now));
	cr_assert_eq(s.reads, 1);
	mp_freecheck_free(fc);
}

Test(freecheck, reads_are_rate_bounded)
{
	struct src s = { .text = later, .now = 1000 * MS, .read_cost = 3 * MS };
	struct mp_freecheck *fc = checker(&s, at_attach);
	uint64_t t0;

	s.now += 50 * MS;
	cr_assert_not(mp_freecheck_mapped(fc, 0x300000000000, s.now));
	cr_assert_eq(s.reads, 1);
	t0 = s.now;
	/* a flood of misses, each newer than the last look: the next read
	 * waits ten times the last one's 3 ms (above the 10 ms floor) */
	for (int i = 0; i < 1000; i++) {
		s.now += 20 * 1000; /* 20 us */
		cr_assert_not(mp_freecheck_mapped(fc, 0x300000000000 + 16 * (uint64_t)i, s.now));
	}
	cr_assert_eq(s.now - t0, 20 * MS);
	cr_assert_eq(s.reads, 1, "%d reads in 20 ms", s.reads);
	s.now = t0 + 30 * MS;
	cr_assert_not(mp_freecheck_mapped(fc, 0x300000000000, s.now));
	cr_assert_eq(s.reads, 2);
	cr_assert_eq(mp_freecheck_reads(fc), 2);
	mp_freecheck_free(fc);
}

Test(freecheck, a_look_taken_after_the_free_is_final)
{
	struct src s = { .text = later, .now = 1000 * MS, .read_cost = 1 * MS };
	struct mp_freecheck *fc = checker(&s, at_attach);

	s.now += 50 * MS;
	cr_assert(mp_freecheck_mapped(fc, 0x7f3a50000040, s.now));
	cr_assert_eq(s.reads, 1);
	/* a free stamped before that look, in no mapping then: refused
	 * without a read however long ago the look was */
	s.now += 5000 * MS;
	cr_assert_not(mp_freecheck_mapped(fc, 0x300000000000, s.now - 5002 * MS));
	cr_assert_eq(s.reads, 1);
	mp_freecheck_free(fc);
}

Test(freecheck, exec_starts_over_from_the_new_image)
{
	struct src s = { .text = later, .now = 1000 * MS, .read_cost = 1 * MS };
	struct mp_freecheck *fc = checker(&s, at_attach);

	s.now += 1 * MS;
	mp_freecheck_exec(fc);
	/* the old image's arena is gone with it: a read, which is the new
	 * image's attach snapshot */
	cr_assert_not(mp_freecheck_mapped(fc, 0x7f3a4c100040, s.now));
	cr_assert_eq(s.reads, 1);
	cr_assert(mp_freecheck_mapped(fc, 0x7f3a50000040, s.now));
	s.text = at_attach;
	s.now += 100 * MS;
	/* kept as the attach snapshot when the latest look moves on */
	cr_assert(mp_freecheck_mapped(fc, 0x7f3a4c100040, s.now));
	cr_assert_eq(s.reads, 2);
	cr_assert(mp_freecheck_mapped(fc, 0x7f3a500fffc0, s.now));
	mp_freecheck_free(fc);
}

Test(freecheck, a_failed_read_judges_by_what_was_read)
{
	struct src s = { .text = NULL, .now = 1000 * MS, .read_cost = 1 * MS };
	struct mp_freecheck *fc = checker(&s, at_attach);

	s.now += 50 * MS;
	cr_assert(mp_freecheck_mapped(fc, 0x55d0c1c6d010, s.now));
	cr_assert_not(mp_freecheck_mapped(fc, 0x7f3a50000040, s.now));
	cr_assert_eq(s.reads, 1);
	mp_freecheck_free(fc);
}

Test(freecheck, the_snapshot_at_the_attach_joins_the_first)
{
	struct src s = { .text = later, .now = 1000 * MS, .read_cost = 1 * MS };
	struct mp_freecheck *fc = checker(&s, at_attach);

	cr_assert_eq(mp_freecheck_snapshot(fc), 0);
	cr_assert_eq(s.reads, 1);
	/* both snapshots' mappings, without a read, whenever the free */
	cr_assert(mp_freecheck_mapped(fc, 0x7f3a4c100040, 0));
	cr_assert(mp_freecheck_mapped(fc, 0x7f3a50000040, 0));
	cr_assert(mp_freecheck_mapped(fc, 0x55d0c1c6d010, 0));
	cr_assert_not(mp_freecheck_mapped(fc, 0x7f3a4c000010, 0));
	cr_assert_eq(s.reads, 1);
	/* after an exec, the new image's snapshot replaces them */
	mp_freecheck_exec(fc);
	cr_assert_eq(mp_freecheck_snapshot(fc), 0);
	s.text = NULL;
	s.now += 100 * MS;
	cr_assert(mp_freecheck_mapped(fc, 0x7f3a50000040, s.now));
	cr_assert_not(mp_freecheck_mapped(fc, 0x7f3a4c100040, s.now));
	/* a failed read changes nothing */
	cr_assert_eq(mp_freecheck_snapshot(fc), -ENOENT);
	cr_assert(mp_freecheck_mapped(fc, 0x7f3a50000040, 0));
	mp_freecheck_free(fc);
}

/* A free in a mapping made after the last read, of a process gone before
 * the next: not found, and not judged either (the eBPF path counts it as
 * an unknown free); one a later read saw unmapped is judged. */
Test(freecheck, a_free_no_read_followed_is_not_judged)
{
	struct src s = { .text = at_attach, .now = 1000 * MS };
	struct mp_freecheck *fc = checker(&s, at_attach);
	uint64_t t = s.now + 100 * MS;

	s.now = t + 200 * MS;
	s.text = NULL; /* gone */
	cr_assert_not(mp_freecheck_mapped(fc, 0x7f3a50000100, t));
	cr_assert_not(mp_freecheck_judged(fc, t));
	/* alive again for the test's sake: a read after @t sees no mapping there */
	s.text = later;
	s.now += 2000 * MS;
	cr_assert_not(mp_freecheck_mapped(fc, 0x7f3a60000100, t));
	cr_assert(mp_freecheck_judged(fc, t));
	mp_freecheck_free(fc);
}
