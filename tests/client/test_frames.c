/* SPDX-License-Identifier: MIT */
/*
 * FRAMES records (type 25, docs/RING.md "Frames records"), read from ring
 * images written by hand: the frames reach the heap record they precede,
 * innermost first, with their truncation mark, and are counted apart from
 * copies; more frames than the consumer asked for are stepped over and
 * counted as a rejected stack; flags it does not know are corruption.
 */
#include <errno.h>
#include <stdlib.h>

#include "ring_image.h"
#include "ring_test.h"

enum { FN_MALLOC = 0 };

static struct img m;

static void setup(void)
{
	img_init(&m, 8, 3, 16, 256);
	img_str(&m, 0, 0, "?");
}

static void teardown(void)
{
	free(m.mem);
}

TestSuite(frames, .init = setup, .fini = teardown);

struct seen {
	int n;
	struct mp_record rec;
	uint64_t frames[8];
	uint32_t n_frames;
	bool truncated, had_stack;
};

static int keep_cb(void *ctx, uint32_t ring, const struct mp_record *rec)
{
	struct seen *s = ctx;

	(void)ring;
	s->n++;
	s->rec = *rec;
	s->had_stack = rec->stack != NULL;
	if (rec->stack && rec->stack->frames) {
		s->n_frames = rec->stack->n_frames;
		s->truncated = rec->stack->truncated;
		for (uint32_t i = 0; i < rec->stack->n_frames && i < 8; i++)
			s->frames[i] = rec->stack->frames[i];
	}
	return 0;
}

/* A FRAMES unit at @pos of ring 1: the record, one continuation slot with
 * @n addresses, the ALLOC. */
static void put_frames(uint64_t pos, uint64_t n, uint8_t flags, uint64_t addr)
{
	struct mp_slot *s = img_put(&m, pos, MP_REC_FRAMES, 8, 1, 1, 0);
	uint64_t f[15];

	s->flags = flags;
	s->dims[0] = (int64_t)n;
	s = img_put(&m, pos + 1, 0, 0, 0, 1, 0);
	for (uint64_t i = 0; i < 15; i++)
		f[i] = 0x400000 + 0x10 * i;
	memcpy((unsigned char *)s + sizeof(s->seq), f, sizeof(f));
	s = img_put(&m, pos + 2, MP_REC_ALLOC, 8, 1, 1, FN_MALLOC);
	s->dims[0] = (int64_t)addr;
	s->dims[1] = 32;
	s->dims[2] = 0x400000;
}

Test(frames, frames_reach_their_heap_record)
{
	struct mp_consumer_opts o = { .alloc_stack_depth = 8 };
	struct seen s = { 0 };
	struct mp_consumer *c;
	uint64_t unwound, copied;

	cr_assert_eq(mp_consumer_open_mem_opts(m.mem, m.len, &o, &c), 0);
	put_frames(0, 3, MP_FRAMES_F_TRUNCATED, 0x1000);
	cr_assert_eq(mp_consumer_read_rings_at(c, 64, 1, keep_cb, &s), 1);
	cr_assert_eq(s.rec.type, MP_REC_ALLOC);
	cr_assert_eq(s.rec.heap.addr, 0x1000);
	cr_assert(s.had_stack);
	cr_assert_eq(s.n_frames, 3);
	cr_assert(s.truncated);
	cr_assert_eq(s.frames[0], 0x400000);
	cr_assert_eq(s.frames[1], 0x400010);
	cr_assert_eq(s.frames[2], 0x400020);
	mp_consumer_stack_counts(c, &unwound, &copied);
	cr_assert_eq(unwound, 1);
	cr_assert_eq(copied, 0);
	mp_consumer_free(c);
}

Test(frames, deeper_than_asked_is_stepped_over)
{
	struct mp_consumer_opts o = { .alloc_stack_depth = 2 };
	struct seen s = { 0 };
	struct mp_consumer *c;
	uint64_t unwound, copied;

	cr_assert_eq(mp_consumer_open_mem_opts(m.mem, m.len, &o, &c), 0);
	put_frames(0, 3, 0, 0x1000);
	img_put(&m, 3, MP_REC_ALLOC, 8, 1, 1, FN_MALLOC)->dims[0] = 0x2000;
	cr_assert_eq(mp_consumer_read_rings_at(c, 64, 1, keep_cb, &s), 1);
	cr_assert_eq(s.rec.heap.addr, 0x2000, "the unit of 3 frames is stepped over whole");
	cr_assert(!s.had_stack);
	mp_consumer_stack_counts(c, &unwound, &copied);
	cr_assert_eq(unwound, 0);
	mp_consumer_free(c);
}

Test(frames, none_is_stepped_over)
{
	struct seen s = { 0 };
	struct mp_consumer *c;

	cr_assert_eq(mp_consumer_open_mem(m.mem, m.len, &c), 0);
	put_frames(0, 0, 0, 0x1000);
	img_put(&m, 2, MP_REC_ALLOC, 8, 1, 1, FN_MALLOC)->dims[0] = 0x2000;
	cr_assert_eq(mp_consumer_read_rings_at(c, 64, 1, keep_cb, &s), 1);
	cr_assert_eq(s.rec.heap.addr, 0x2000);
	mp_consumer_free(c);
}

Test(frames, unknown_flags_are_corruption)
{
	struct seen s = { 0 };
	struct mp_consumer *c;

	cr_assert_eq(mp_consumer_open_mem(m.mem, m.len, &c), 0);
	put_frames(0, 3, 0x2, 0x1000);
	cr_assert_eq(mp_consumer_read_rings_at(c, 64, 1, keep_cb, &s), -EBADMSG);
	cr_assert_eq(s.n, 0);
	mp_consumer_free(c);
}

/* MP_REC_F_PAST_WRAPPER: a caller libmemprof charged past the wrappers.
 * A target may set it on any allocation (it only counts one more
 * allocation charged past a wrapper, docs/RING.md); on a free, or beside
 * a flag no one defined, the record is corruption. */
Test(frames, past_wrapper_flag_on_allocations_only)
{
	static const struct {
		uint8_t type, flags;
		int want;
	} cases[] = {
		{ MP_REC_ALLOC, MP_REC_F_PAST_WRAPPER, 1 },
		{ MP_REC_REALLOC, MP_REC_F_PAST_WRAPPER, 1 },
		{ MP_REC_ALLOC, MP_REC_F_PAST_WRAPPER | MP_REC_F_SCALED, 1 },
		{ MP_REC_FREE, MP_REC_F_PAST_WRAPPER, -EBADMSG },
		{ MP_REC_ALLOC, MP_REC_F_PAST_WRAPPER << 1, -EBADMSG },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct seen s = { 0 };
		struct mp_consumer *c;
		struct mp_slot *sl;

		/* a fresh image each time: a consumer moves its ring's tail */
		teardown();
		setup();
		sl = img_put(&m, 0, cases[i].type, 8, 1, 1, FN_MALLOC);
		sl->flags = cases[i].flags;
		sl->dims[0] = 0x2000;
		sl->dims[1] = cases[i].type == MP_REC_FREE ? 0 : 32;
		sl->dims[2] = 0x400123;
		cr_assert_eq(mp_consumer_open_mem(m.mem, m.len, &c), 0);
		{
			int r = mp_consumer_read_rings_at(c, 64, 1, keep_cb, &s);

			cr_assert_eq(r, cases[i].want, "case %zu: %d", i, r);
		}
		if (cases[i].want == 1) {
			cr_assert_eq(s.rec.flags, cases[i].flags, "case %zu", i);
			cr_assert_eq(s.rec.heap.caller, 0x400123);
			cr_assert(!s.had_stack);
		}
		mp_consumer_free(c);
	}
}
