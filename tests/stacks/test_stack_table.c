// SPDX-License-Identifier: MIT
/* daemon/stacks/stacks.c: the stack table's ids (first sight order, one
 * per distinct frames and flags), its bounds, its prefix sharing and its
 * export. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <unistd.h>

#include "collect.h"
#include "procmaps.h"
#include "ring_abi.h"
#include "stacks.h"

Test(stack_table, ids_and_export)
{
	uint64_t a[] = { 0x10, 0x20, 0x30 }, b[] = { 0x40, 0x30 }, buf[MP_PROFILE_MAX_DEPTH];
	struct mp_profile p = { 0 };
	struct mp_stack_table *t;
	const struct mp_stack *s;

	cr_assert_eq(mp_stack_table_new(&t), 0);
	cr_assert_eq(mp_stack_table_intern(t, a, 3, 0), 1);
	cr_assert_eq(mp_stack_table_intern(t, b, 2, 0), 2);
	cr_assert_eq(mp_stack_table_intern(t, a, 3, MP_STACK_F_TRUNCATED), 3);
	cr_assert_eq(mp_stack_table_intern(t, a, 0, 0), 4);
	cr_assert_eq(mp_stack_table_intern(t, b, 2, 0), 2);
	cr_assert_eq(mp_stack_table_intern(t, a, 3, 0), 1);
	cr_assert_eq(mp_stack_table_intern(t, a, 3, MP_STACK_F_TRUNCATED), 3);
	cr_assert_eq(mp_stack_table_intern(t, NULL, 0, 0), 4);
	/* a suffix of a known stack (its callers) is a stack of its own */
	cr_assert_eq(mp_stack_table_intern(t, a + 1, 2, 0), 5);
	cr_assert_null(mp_stack_table_get(t, 0));
	cr_assert_null(mp_stack_table_get(t, 6));
	for (int round = 0; round < 2; round++) {
		s = mp_stack_table_get(t, 2);
		cr_assert_eq(s->n_frames, 2);
		cr_assert_arr_eq(s->frames, b, sizeof(b));
		cr_assert_eq(mp_stack_table_get(t, 2), s);
		s = mp_stack_table_get(t, 3);
		cr_assert_eq(s->n_frames, 3);
		cr_assert_eq(s->flags, MP_STACK_F_TRUNCATED);
		cr_assert_arr_eq(s->frames, a, sizeof(a));
	}
	cr_assert_eq(mp_stack_table_export(t, &p), 0);
	cr_assert_eq(p.n_stacks, 5);
	cr_assert_eq(p.stacks_dropped, 0);
	cr_assert_eq(p.limits.reached, 0);
	cr_assert_eq(p.stacks[0].n_frames, 3);
	cr_assert_eq(p.stacks[0].flags, 0);
	cr_assert_arr_eq(mp_profile_stack_frames(&p, 0, buf), a, sizeof(a));
	cr_assert_eq(p.stacks[1].n_frames, 2);
	cr_assert_arr_eq(mp_profile_stack_frames(&p, 1, buf), b, sizeof(b));
	cr_assert_eq(p.stacks[2].n_frames, 3);
	cr_assert_eq(p.stacks[2].flags, MP_STACK_F_TRUNCATED);
	cr_assert_arr_eq(mp_profile_stack_frames(&p, 2, buf), a, sizeof(a));
	cr_assert_eq(p.stacks[3].n_frames, 0);
	cr_assert_eq(p.stacks[4].n_frames, 2);
	cr_assert_arr_eq(mp_profile_stack_frames(&p, 4, buf), a + 1, 2 * sizeof(*a));
	mp_profile_stacks_free(&p);
	mp_stack_table_free(t);
	mp_stack_table_free(NULL);
}

/* How many of a stack's frames the table stored for the first time (the
 * collector looks only those up in the maps): the innermost ones, below
 * callers it already holds. */
Test(stack_table, frames_stored_first)
{
	uint64_t a[] = { 0x10, 0x20, 0x30 }, b[] = { 0x40, 0x50, 0x20, 0x30 };
	struct mp_stack_table *t;

	cr_assert_eq(mp_stack_table_new(&t), 0);
	cr_assert_eq(mp_stack_table_intern(t, a, 3, 0), 1);
	cr_assert_eq(mp_stack_table_last_new(t), 3);
	cr_assert_eq(mp_stack_table_intern(t, b, 4, 0), 2);
	cr_assert_eq(mp_stack_table_last_new(t), 2);
	cr_assert_eq(mp_stack_table_intern(t, a, 3, 0), 1);
	cr_assert_eq(mp_stack_table_last_new(t), 0);
	/* new stacks of known nodes: a suffix, and a flag */
	cr_assert_eq(mp_stack_table_intern(t, b + 2, 2, 0), 3);
	cr_assert_eq(mp_stack_table_last_new(t), 0);
	cr_assert_eq(mp_stack_table_intern(t, a, 3, MP_STACK_F_TRUNCATED), 4);
	cr_assert_eq(mp_stack_table_last_new(t), 0);
	mp_stack_table_free(t);
}

/* A program's stacks: DEPTH frames, the outer ones the same callers, the
 * inner SPREAD a path through a tree of fan-out 8 picked by @i. */
#define N_STACKS 300000u /* more than 2^18 */
#define DEPTH 32u
#define SPREAD 7u

static void program_stack(uint32_t i, uint64_t *f)
{
	for (uint32_t j = 0; j < DEPTH; j++)
		f[j] = 0x7f0000001000ull + j * 0x100 + (j < SPREAD ? (i >> (3 * j) & 7) * 8 : 0);
	/* the innermost frame sets the stacks of one path apart */
	f[0] += (uint64_t)(i >> (3 * SPREAD)) << 20;
}

/* More than 2^18 distinct stacks, each read back as interned, with the
 * same id on every sight; far less memory than their frames laid out. */
Test(stack_table, many_stacks_exact_and_shared, .timeout = 60)
{
	struct mp_profile p = { 0 };
	struct mp_stack_table *t;
	uint64_t f[DEPTH], flat = (uint64_t)N_STACKS * DEPTH * sizeof(uint64_t), bytes;
	uint64_t buf[MP_PROFILE_MAX_DEPTH];

	cr_assert_eq(mp_stack_table_new(&t), 0);
	for (uint32_t i = 0; i < N_STACKS; i++) {
		program_stack(i, f);
		cr_assert_eq(mp_stack_table_intern(t, f, DEPTH, i % 5 == 0), i + 1, "stack %u", i);
	}
	cr_assert_eq(mp_stack_table_count(t), N_STACKS);
	for (uint32_t i = 0; i < N_STACKS; i += 7) {
		const struct mp_stack *s;

		program_stack(i, f);
		cr_assert_eq(mp_stack_table_intern(t, f, DEPTH, i % 5 == 0), i + 1, "stack %u", i);
		s = mp_stack_table_get(t, i + 1);
		cr_assert_eq(s->n_frames, DEPTH);
		cr_assert_eq(s->flags, i % 5 == 0 ? MP_STACK_F_TRUNCATED : 0);
		cr_assert_arr_eq(s->frames, f, sizeof(f), "stack %u", i);
	}
	bytes = mp_stack_table_bytes(t);
	cr_log_info("%u stacks of %u frames: %llu bytes (%.1f a stack), laid out %llu", N_STACKS,
		    DEPTH, (unsigned long long)bytes, (double)bytes / N_STACKS,
		    (unsigned long long)flat);
	/* a node per frame would take more than the frames laid out: sharing
	 * is what keeps the table at a fraction of them */
	cr_assert_lt(bytes * 4, flat, "%llu bytes for %llu laid out", (unsigned long long)bytes,
		     (unsigned long long)flat);
	cr_assert_eq(mp_stack_table_export(t, &p), 0);
	cr_assert_eq(p.n_stacks, N_STACKS);
	cr_assert_eq(p.stacks_dropped, 0);
	cr_assert_not_null(p.stack_tree);
	for (uint32_t i = 0; i < N_STACKS; i++) {
		program_stack(i, f);
		cr_assert_eq(p.stacks[i].n_frames, DEPTH);
		cr_assert_eq(p.stacks[i].flags, i % 5 == 0 ? MP_STACK_F_TRUNCATED : 0);
		cr_assert_arr_eq(mp_profile_stack_frames(&p, i, buf), f, sizeof(f), "stack %u", i);
	}
	mp_profile_stacks_free(&p);
	mp_stack_table_free(t);
}

/* Exports @t into @p and checks the drops are counted and named. */
static void expect_dropped(struct mp_stack_table *t, uint32_t kept, uint64_t dropped)
{
	struct mp_profile p = { 0 };

	cr_assert_eq(mp_stack_table_count(t), kept);
	cr_assert_eq(mp_stack_table_export(t, &p), 0);
	cr_assert_eq(p.n_stacks, kept);
	cr_assert_eq(p.stacks_dropped, dropped);
	cr_assert_eq(p.limits.reached, MP_LIMIT_STACKS);
	mp_profile_stacks_free(&p);
	mp_stack_table_free(t);
}

/* Past its bound in stacks a new stack gets no id and is counted; known
 * stacks keep theirs. */
Test(stack_table, bound_in_stacks)
{
	struct mp_stack_table *t;
	uint64_t f;

	cr_assert_eq(mp_stack_table_new(&t), 0);
	mp_stack_table_set_max(t, 1000, 0);
	for (uint32_t i = 0; i < 1000; i++) {
		f = 0x1000 + i;
		cr_assert_eq(mp_stack_table_intern(t, &f, 1, MP_STACKS_F_LARGE), i + 1);
	}
	f = 0x9000;
	cr_assert_eq(mp_stack_table_intern(t, &f, 1, MP_STACKS_F_LARGE), 0);
	cr_assert_eq(mp_stack_table_intern(t, &f, 1, 0), 0);
	f = 0x1007;
	cr_assert_eq(mp_stack_table_intern(t, &f, 1, 0), 8);
	expect_dropped(t, 1000, 2);
}

/* The last 1/MP_STACKS_RESERVE of a bound is for large allocations' new
 * stacks: a small one's is dropped there, a large one's still added. */
Test(stack_table, reserve_for_large_allocations)
{
	const uint32_t max = 1024, small = max - max / MP_STACKS_RESERVE;
	struct mp_stack_table *t;
	uint64_t f;

	cr_assert_eq(mp_stack_table_new(&t), 0);
	mp_stack_table_set_max(t, max, 0);
	for (uint32_t i = 0; i < small; i++) {
		f = 0x1000 + i;
		cr_assert_eq(mp_stack_table_intern(t, &f, 1, 0), i + 1);
	}
	f = 0x9000;
	cr_assert_eq(mp_stack_table_intern(t, &f, 1, 0), 0);
	/* known stacks are found whatever the size */
	f = 0x1000;
	cr_assert_eq(mp_stack_table_intern(t, &f, 1, 0), 1);
	for (uint32_t i = small; i < max; i++) {
		f = 0x9000 + i;
		cr_assert_eq(mp_stack_table_intern(t, &f, 1, MP_STACKS_F_LARGE), i + 1);
	}
	f = 0x20000;
	cr_assert_eq(mp_stack_table_intern(t, &f, 1, MP_STACKS_F_LARGE), 0);
	expect_dropped(t, max, 2);
}

/* The memory bound: stacks sharing nothing reach the bound on stored
 * frames (tree nodes), stacks sharing their callers the bound on frames
 * laid out; neither lets the table past what its bound in frames gives. */
Test(stack_table, bound_in_frames)
{
	const uint64_t max = DEPTH * 100; /* 266 nodes */
	struct mp_stack_table *t;
	uint64_t f[DEPTH];
	uint32_t i;

	cr_assert_eq(mp_stack_table_new(&t), 0);
	mp_stack_table_set_max(t, 1000, max);
	for (i = 0; i < 100; i++) {
		for (uint32_t j = 0; j < DEPTH; j++)
			f[j] = (uint64_t)i << 16 | j;
		if (!mp_stack_table_intern(t, f, DEPTH, MP_STACKS_F_LARGE))
			break;
	}
	cr_assert_eq(i, max / MP_STACKS_FRAMES_PER_NODE / DEPTH, "%u stacks sharing nothing", i);
	cr_assert_eq(mp_stack_table_intern(t, f, DEPTH, MP_STACKS_F_LARGE), 0);
	expect_dropped(t, i, 2);

	cr_assert_eq(mp_stack_table_new(&t), 0);
	mp_stack_table_set_max(t, 1000, max);
	for (i = 0; i < 1000; i++) {
		program_stack(i, f);
		if (!mp_stack_table_intern(t, f, DEPTH, MP_STACKS_F_LARGE))
			break;
	}
	cr_assert_eq(i, 100, "%u stacks sharing their callers", i);
	expect_dropped(t, 100, 1);
}

/* Deeper stacks than a profile holds get no id. */
Test(stack_table, too_deep_dropped)
{
	uint64_t f[MP_STACKS_MAX_DEPTH + 1] = { 0 };
	struct mp_stack_table *t;

	cr_assert_eq(mp_stack_table_new(&t), 0);
	cr_assert_eq(mp_stack_table_intern(t, f, MP_STACKS_MAX_DEPTH, 0), 1);
	cr_assert_eq(mp_stack_table_get(t, 1)->n_frames, MP_STACKS_MAX_DEPTH);
	cr_assert_eq(mp_stack_table_intern(t, f, MP_STACKS_MAX_DEPTH + 1, 0), 0);
	expect_dropped(t, 1, 1);
}

/* Random stacks of a small program (few frames to pick from, so that
 * stacks share callers, repeat, extend and cut each other short, with
 * and without the truncation mark) against a plain list of those seen:
 * the same id on every sight, new ids in order of first sight, and the
 * frames given back exactly. */
Test(stack_table, random_stacks_as_a_list_says, .timeout = 60)
{
	enum { ROUNDS = 20000, MAXN = 12, KEEP = 4096 };
	static uint64_t seen[KEEP][MAXN];
	static uint32_t seen_n[KEEP], seen_flags[KEEP];
	uint64_t f[MAXN], prev[MAXN] = { 0 }, buf[MP_PROFILE_MAX_DEPTH];
	uint32_t n_seen = 0, prev_n = 0, rng = 12345;
	struct mp_profile p = { 0 };
	struct mp_stack_table *t;

	cr_assert_eq(mp_stack_table_new(&t), 0);
	for (uint32_t r = 0; r < ROUNDS && n_seen < KEEP; r++) {
		uint32_t n, flags, id, want = 0;

		rng = rng * 1103515245u + 12345u;
		n = (rng >> 16) % (MAXN + 1);
		/* often the outer frames of the stack before, then others */
		for (uint32_t d = 0; d < n; d++) {
			rng = rng * 1103515245u + 12345u;
			f[n - 1 - d] = d < prev_n && (rng >> 16) % 4 ?
					       prev[prev_n - 1 - d] :
					       0x1000 + ((rng >> 20) % 5) * 0x10;
		}
		rng = rng * 1103515245u + 12345u;
		flags = (rng >> 16) % 5 == 0 ? MP_STACK_F_TRUNCATED : 0;
		for (uint32_t i = 0; i < n_seen && !want; i++)
			if (seen_n[i] == n && seen_flags[i] == flags &&
			    !memcmp(seen[i], f, n * sizeof(*f)))
				want = i + 1;
		if (!want) {
			memcpy(seen[n_seen], f, n * sizeof(*f));
			seen_n[n_seen] = n;
			seen_flags[n_seen] = flags;
			want = ++n_seen;
		}
		id = mp_stack_table_intern(t, f, n, flags);
		cr_assert_eq(id, want, "round %u: id %u, a list says %u", r, id, want);
		memcpy(prev, f, n * sizeof(*f));
		prev_n = n;
	}
	cr_assert_gt(n_seen, 1000, "only %u distinct stacks", n_seen);
	cr_assert_eq(mp_stack_table_count(t), n_seen);
	cr_assert_eq(mp_stack_table_export(t, &p), 0);
	for (uint32_t i = 0; i < n_seen; i++) {
		cr_assert_eq(p.stacks[i].n_frames, seen_n[i]);
		cr_assert_eq(p.stacks[i].flags, seen_flags[i]);
		cr_assert_arr_eq(mp_profile_stack_frames(&p, i, buf), seen[i],
				 seen_n[i] * sizeof(uint64_t), "stack %u", i);
	}
	mp_profile_stacks_free(&p);
	mp_stack_table_free(t);
}

/* What a target that lies in its FRAMES records' Python frames (ids the
 * ring's table never had, far past it) does to the collector: no name,
 * no array sized by the id; a name the ring has is asked for once. */
static unsigned asked;

static const char *ring_names(void *ctx, uint32_t id)
{
	(void)ctx;
	asked++;
	return id == 3 ? "forward@/src/model.py" : NULL;
}

Test(stack_table, python_frames_of_a_lying_target)
{
	const struct mp_collect_target t = { .maps = NULL, .exited = true };
	const uint64_t frames[] = { 0x401000, MP_PYFRAME(3, 12), MP_PYFRAME(0xffffffffu, 1),
				    MP_PYFRAME(900000, 7), MP_PYFRAME(3, 14) };
	struct mp_stack_collector *c;
	uint32_t id;

	cr_assert_eq(mp_stack_collector_new(getpid(), true, 64, &c), 0);
	mp_stack_collect_set_pynames(c, ring_names, NULL);
	id = mp_stack_collect_given(c, &t, frames, 5, false);
	cr_assert_neq(id, 0);
	cr_assert(mp_stack_collect_last_python(c));
	cr_assert_str_eq(mp_stack_collect_pyname(c, 3), "forward@/src/model.py");
	cr_assert_null(mp_stack_collect_pyname(c, 0xffffffffu));
	cr_assert_null(mp_stack_collect_pyname(c, 900000));
	/* 3 once (two frames of it), 900000 asked and refused by the ring,
	 * 0xffffffff never asked (past any ring) */
	cr_assert_eq(asked, 2, "%u names asked", asked);
	/* the same stack again: known, nothing asked */
	cr_assert_eq(mp_stack_collect_given(c, &t, frames, 5, false), id);
	cr_assert_eq(asked, 2);
	/* a native stack is no Python one */
	mp_stack_collect_given(c, &t, frames, 1, false);
	cr_assert_not(mp_stack_collect_last_python(c));
	mp_stack_collector_free(c);
}

/* The mappings the frames of stored stacks were found in, while the
 * target ran, are remembered (the symbolizer opens their files ahead):
 * by start and inode, Python frames in none, and none once it exited. */
Test(stack_table, mappings_holding_frames)
{
	static const char txt[] =
		"7f0000000000-7f0000100000 r-xp 00000000 08:01 11 /usr/lib/liba.so\n"
		"7f0001000000-7f0001100000 r-xp 00000000 08:01 12 /usr/lib/libb.so\n"
		"7f0002000000-7f0002100000 r-xp 00000000 08:01 13 /usr/lib/libc.so\n";
	const uint64_t outer[] = { 0x7f0002000100, MP_PYFRAME(3, 12), 0x7f0000000200 };
	const uint64_t inner[] = { 0x7f0000000300, 0x7f0002000100, MP_PYFRAME(3, 12),
				   0x7f0000000200 };
	const uint64_t late[] = { 0x7f0001000400 };
	struct mp_collect_target t = { .exited = false };
	struct mp_stack_collector *c;
	struct mp_procmaps *maps;
	struct mp_mapping other;

	cr_assert_eq(mp_procmaps_parse(txt, sizeof(txt) - 1, &maps), 0);
	cr_assert_eq(maps->n, 3);
	t.maps = maps;
	cr_assert_eq(mp_stack_collector_new(getpid(), true, 64, &c), 0);
	cr_assert_not(mp_stack_collect_holds_frames(c, &maps->maps[0]));
	cr_assert_neq(mp_stack_collect_given(c, &t, outer, 3, false), 0);
	cr_assert_neq(mp_stack_collect_given(c, &t, inner, 4, false), 0);
	cr_assert(mp_stack_collect_holds_frames(c, &maps->maps[0]));
	cr_assert_not(mp_stack_collect_holds_frames(c, &maps->maps[1]));
	cr_assert(mp_stack_collect_holds_frames(c, &maps->maps[2]));
	other = maps->maps[2];
	other.inode = 99;
	cr_assert_not(mp_stack_collect_holds_frames(c, &other), "another file at that start");
	/* stored once the target is gone: not looked up */
	t.exited = true;
	cr_assert_neq(mp_stack_collect_given(c, &t, late, 1, false), 0);
	cr_assert_not(mp_stack_collect_holds_frames(c, &maps->maps[1]));
	cr_assert_not(mp_stack_collect_holds_frames(NULL, &maps->maps[0]));
	mp_stack_collector_free(c);
	mp_procmaps_free(maps);
}

/* A target makes its own maps: of 2,100 code mappings each holding a
 * frame, the first 2,048 are remembered and the rest not, the daemon's
 * table staying its fixed size. */
Test(stack_table, mappings_holding_frames_are_bounded)
{
	enum { N = 2100 };
	struct mp_collect_target t = { .exited = false };
	struct mp_stack_collector *c;
	struct mp_procmaps *maps;
	char *txt = NULL;
	size_t cap = 0, held = 0;
	FILE *f = open_memstream(&txt, &cap);

	cr_assert_not_null(f);
	for (int i = 0; i < N; i++)
		fprintf(f, "%llx-%llx r-xp 00000000 08:01 %d /usr/lib/lib%d.so\n",
			0x7f0000000000ull + (unsigned long long)i * 0x100000,
			0x7f0000000000ull + (unsigned long long)i * 0x100000 + 0x1000, 100 + i, i);
	fclose(f);
	cr_assert_eq(mp_procmaps_parse(txt, strlen(txt), &maps), 0);
	cr_assert_eq(maps->n, N);
	t.maps = maps;
	cr_assert_eq(mp_stack_collector_new(getpid(), true, 64, &c), 0);
	for (int i = 0; i < N; i++) {
		const uint64_t frame[2] = { maps->maps[i].start + 0x10, 0x7f0000000000ull + 0x20 };

		cr_assert_neq(mp_stack_collect_given(c, &t, frame, 2, false), 0);
	}
	for (int i = 0; i < N; i++)
		held += mp_stack_collect_holds_frames(c, &maps->maps[i]);
	cr_assert_eq(held, 2048, "%zu mappings remembered", held);
	cr_assert_not(mp_stack_collect_holds_frames(c, &maps->maps[N - 1]));
	mp_stack_collector_free(c);
	mp_procmaps_free(maps);
	free(txt);
}
