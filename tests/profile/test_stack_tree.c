/* SPDX-License-Identifier: MIT */
/*
 * Call stacks in memprof.proto: a profile with more than 2^18 stacks
 * survives write -> read exactly, in far fewer bytes than its frames; files of the list encoding still read; a prefix tree that
 * breaks the rules (a parent after its child, which is what a cycle needs,
 * an index out of range, a stack too deep) is refused with -EBADMSG and a
 * reason.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "memprof.pb-c.h"
#include "profile_pb.h"
#include "stacks.h"

#define N_STACKS 300000u
#define DEPTH 40u

/* Stack @i of a program: outer callers shared, inner frames a path of a
 * tree of fan-out 8 picked by @i, the innermost frame its own. */
static void program_stack(uint32_t i, uint64_t *f, uint32_t *n)
{
	*n = DEPTH - i % 9;
	for (uint32_t j = 0; j < *n; j++)
		f[j] = 0x7f3a00001000ull + j * 0x340 + (j < 7 ? (i >> (3 * j) & 7) * 16 : 0);
	f[0] += (uint64_t)(i >> 21) << 24;
}

static struct mp_profile *many_stacks(void)
{
	struct mp_profile *p = mp_profile_new();
	uint64_t total = 0, f[DEPTH], off = 0;
	uint32_t n;

	cr_assert_not_null(p);
	for (uint32_t i = 0; i < N_STACKS; i++) {
		program_stack(i, f, &n);
		total += n;
	}
	cr_assert_eq(mp_profile_stacks_alloc(p, N_STACKS, total), 0);
	p->n_stacks = N_STACKS;
	for (uint32_t i = 0; i < N_STACKS; i++) {
		struct mp_stack *s = &p->stacks[i];

		program_stack(i, f, &n);
		s->frames = p->stack_frames + off;
		s->n_frames = n;
		s->flags = i % 3 == 0 ? MP_STACK_F_TRUNCATED : 0;
		memcpy(s->frames, f, n * sizeof(*f));
		off += n;
	}
	p->stack_depth = DEPTH;
	p->stacks_dropped = 7;
	return p;
}

Test(stack_tree, many_stacks_round_trip_compact, .timeout = 120)
{
	struct mp_profile *p = many_stacks(), *q = NULL;
	const char *why = NULL;
	uint64_t frames = 0;
	uint8_t *buf;
	size_t len;

	for (uint32_t i = 0; i < p->n_stacks; i++)
		frames += p->stacks[i].n_frames;
	cr_assert_eq(mp_profile_file_encode(p, &buf, &len), 0);
	cr_log_info("%u stacks, %llu frames: %zu bytes (%.2f a frame)", p->n_stacks,
		    (unsigned long long)frames, len, (double)len / (double)frames);
	/* a list of frames takes 5 to 6 bytes for each of these addresses */
	cr_assert_lt(len, frames / 4, "%zu bytes for %llu frames", len, (unsigned long long)frames);
	cr_assert_eq(mp_profile_file_decode(buf, len, &q, &why), 0, "%s", why ? why : "?");
	cr_assert_eq(q->format_version, MP_PROFILE_FORMAT_STACK_TREE);
	cr_assert_eq(q->n_stacks, N_STACKS);
	cr_assert_eq(q->stack_depth, DEPTH);
	cr_assert_eq(q->stacks_dropped, 7);
	for (uint32_t i = 0; i < N_STACKS; i++) {
		cr_assert_eq(q->stacks[i].n_frames, p->stacks[i].n_frames, "stack %u", i);
		cr_assert_eq(q->stacks[i].flags, p->stacks[i].flags, "stack %u", i);
		cr_assert_arr_eq(q->stacks[i].frames, p->stacks[i].frames,
				 p->stacks[i].n_frames * sizeof(uint64_t), "stack %u", i);
	}
	free(buf);
	mp_profile_free(q);
	mp_profile_free(p);
}

/* The daemon's stack table hands its prefix tree to the profile as it is
 * (no stack laid out): the file is the same, byte for byte, as the one
 * written from the same stacks laid out, also from a clone, and it reads
 * back to the same frames. */
Test(stack_tree, table_tree_written_as_it_is, .timeout = 120)
{
	struct mp_profile *p = many_stacks(), *t = mp_profile_new(), *c = NULL, *q = NULL;
	struct mp_stack_table *tab;
	uint8_t *want, *got, *got_clone;
	size_t want_len, got_len, clone_len;
	uint64_t buf[MP_PROFILE_MAX_DEPTH];
	const char *why = NULL;

	cr_assert_not_null(t);
	cr_assert_eq(mp_stack_table_new(&tab), 0);
	for (uint32_t i = 0; i < p->n_stacks; i++)
		cr_assert_eq(mp_stack_table_intern(tab, p->stacks[i].frames, p->stacks[i].n_frames,
						   p->stacks[i].flags),
			     i + 1);
	cr_assert_eq(mp_stack_table_export(tab, t), 0);
	cr_assert_not_null(t->stack_tree);
	cr_assert_null(t->stack_frames);
	t->stack_depth = p->stack_depth;
	t->stacks_dropped = p->stacks_dropped;
	p->limits = t->limits;
	p->format_version = t->format_version;
	for (uint32_t i = 0; i < p->n_stacks; i += 97) {
		cr_assert_eq(t->stacks[i].n_frames, p->stacks[i].n_frames);
		cr_assert_arr_eq(mp_profile_stack_frames(t, i, buf), p->stacks[i].frames,
				 p->stacks[i].n_frames * sizeof(uint64_t), "stack %u", i);
	}
	cr_assert_eq(mp_profile_file_encode(p, &want, &want_len), 0);
	cr_assert_eq(mp_profile_file_encode(t, &got, &got_len), 0);
	cr_assert_eq(got_len, want_len);
	cr_assert_arr_eq(got, want, want_len);
	cr_assert_eq(mp_profile_clone(t, &c), 0);
	cr_assert_not_null(c->stack_tree);
	cr_assert_eq(mp_profile_file_encode(c, &got_clone, &clone_len), 0);
	cr_assert_eq(clone_len, want_len);
	cr_assert_arr_eq(got_clone, want, want_len);
	cr_assert_eq(mp_profile_file_decode(got, got_len, &q, &why), 0, "%s", why ? why : "?");
	cr_assert_eq(q->n_stacks, p->n_stacks);
	for (uint32_t i = 0; i < p->n_stacks; i++)
		cr_assert_arr_eq(q->stacks[i].frames, p->stacks[i].frames,
				 p->stacks[i].n_frames * sizeof(uint64_t), "stack %u", i);
	free(want);
	free(got);
	free(got_clone);
	mp_profile_free(q);
	mp_profile_free(c);
	mp_profile_free(t);
	mp_profile_free(p);
	mp_stack_table_free(tab);
}

/* Only the stacks sites name are kept, renumbered, with only the nodes on
 * their paths: every site keeps its frames, a site without a stack (or
 * naming none the profile has) has none, and the file reads back. */
Test(stack_tree, prune_to_the_sites_stacks, .timeout = 120)
{
	struct mp_profile *p = many_stacks(), *t = mp_profile_new(), *q = NULL;
	uint64_t buf[MP_PROFILE_MAX_DEPTH];
	struct mp_stack_table *tab;
	const uint32_t n_sites = N_STACKS / 3 + 3;
	uint32_t nodes, kept = 0, *seen = calloc(N_STACKS, sizeof(*seen));
	const char *why = NULL;
	uint8_t *file;
	size_t len;

	cr_assert(t && seen);
	cr_assert_eq(mp_stack_table_new(&tab), 0);
	for (uint32_t i = 0; i < p->n_stacks; i++)
		mp_stack_table_intern(tab, p->stacks[i].frames, p->stacks[i].n_frames,
				      p->stacks[i].flags);
	cr_assert_eq(mp_stack_table_export(tab, t), 0);
	nodes = t->stack_tree->n_nodes;
	t->sites = calloc(n_sites, sizeof(*t->sites));
	t->owners = calloc(1, sizeof(*t->owners));
	cr_assert(t->sites && t->owners);
	t->owners[0].name = strdup("(unknown)");
	t->n_owners = 1;
	t->n_sites = n_sites;
	for (uint32_t i = 0; i < n_sites; i++)
		t->sites[i].name = t->sites[i].phase = MP_NONE;
	/* every 7th stack but the odd ones among them, twice each; a site
	 * without a stack, and one naming none the profile has */
	for (uint32_t i = 0; i + 3 < n_sites; i++) {
		uint32_t k = (i / 2) * 7 % N_STACKS;

		if (k % 2)
			k--;
		t->sites[i].stack = k + 1;
		t->sites[i].caller = k;
		kept += !seen[k]++;
	}
	t->sites[n_sites - 3].stack = 0;
	t->sites[n_sites - 2].stack = N_STACKS + 1;
	t->sites[n_sites - 1].stack = 1;
	t->sites[n_sites - 1].caller = 0;
	kept += !seen[0]++;
	cr_assert_eq(mp_profile_stacks_prune(t), 0);
	cr_assert_eq(t->n_stacks, kept);
	cr_assert_lt(t->stack_tree->n_nodes, nodes);
	for (uint32_t v = 1; v <= t->stack_tree->n_nodes; v++)
		cr_assert_lt(t->stack_tree->parent[v - 1], v, "node %u", v);
	cr_assert_eq(t->sites[n_sites - 3].stack, 0);
	cr_assert_eq(t->sites[n_sites - 2].stack, 0);
	for (uint32_t i = 0; i < n_sites; i++) {
		const struct mp_site *st = &t->sites[i];
		const struct mp_stack *want;

		if (i == n_sites - 3 || i == n_sites - 2)
			continue;
		want = &p->stacks[st->caller];
		cr_assert(st->stack && st->stack <= t->n_stacks, "site %u", i);
		cr_assert_eq(t->stacks[st->stack - 1].n_frames, want->n_frames, "site %u", i);
		cr_assert_eq(t->stacks[st->stack - 1].flags, want->flags, "site %u", i);
		cr_assert_arr_eq(mp_profile_stack_frames(t, st->stack - 1, buf), want->frames,
				 want->n_frames * sizeof(uint64_t), "site %u", i);
	}
	cr_assert_eq(mp_profile_file_encode(t, &file, &len), 0);
	cr_assert_eq(mp_profile_file_decode(file, len, &q, &why), 0, "%s", why ? why : "?");
	cr_assert_eq(q->n_stacks, kept);
	free(file);
	free(seen);
	mp_profile_free(q);
	mp_profile_free(t);
	mp_profile_free(p);
	mp_stack_table_free(tab);
}

/* A bare message; the decoder's verdict and its reason. */
static int decode_msg(const Memprof__Profile *m, const char **why)
{
	size_t len = memprof__profile__get_packed_size(m);
	uint8_t *buf = malloc(len + 1);
	struct mp_profile *q = NULL;
	int r;

	*why = NULL;
	memprof__profile__pack(m, buf);
	r = mp_profile_decode(buf, len, &q, why);
	if (r == 0) {
		cr_assert_eq(q->n_stacks, m->n_stack_leaves + m->n_stacks);
		for (uint32_t i = 0; i < q->n_stacks; i++)
			cr_assert_leq(q->stacks[i].n_frames, MP_PROFILE_MAX_DEPTH);
	}
	free(buf);
	mp_profile_free(q);
	return r;
}

/* Format version 2 files list every stack's frames: still read. */
Test(stack_tree, list_encoding_still_reads)
{
	uint64_t fa[] = { 0x10, 0x20 }, fb[] = { 0x30 };
	Memprof__Stack a = MEMPROF__STACK__INIT, b = MEMPROF__STACK__INIT, *sv[] = { &a, &b };
	Memprof__Profile m = MEMPROF__PROFILE__INIT;
	size_t len;
	uint8_t *buf;
	struct mp_profile *q = NULL;
	const char *why = NULL;

	a.n_frames = 2;
	a.frames = fa;
	b.n_frames = 1;
	b.frames = fb;
	b.truncated = true;
	m.format_version = 2;
	m.n_stacks = 2;
	m.stacks = sv;
	len = memprof__profile__get_packed_size(&m);
	buf = malloc(len);
	memprof__profile__pack(&m, buf);
	cr_assert_eq(mp_profile_decode(buf, len, &q, &why), 0, "%s", why ? why : "?");
	cr_assert_eq(q->n_stacks, 2);
	cr_assert_arr_eq(q->stacks[0].frames, fa, sizeof(fa));
	cr_assert_eq(q->stacks[0].flags, 0);
	cr_assert_arr_eq(q->stacks[1].frames, fb, sizeof(fb));
	cr_assert_eq(q->stacks[1].flags, MP_STACK_F_TRUNCATED);
	free(buf);
	mp_profile_free(q);
}

#define N_NODES (MP_PROFILE_MAX_DEPTH + 1)

Test(stack_tree, malformed_tree_refused)
{
	static uint32_t up[N_NODES], node_addrs[N_NODES];
	uint64_t addrs[] = { 0x1000, 0x10 }; /* 0x1000, 0x1010 */
	uint32_t leaves[] = { 3 << 1 | 1, 1 << 1 };
	uint64_t fr[] = { 1 };
	Memprof__Stack st = MEMPROF__STACK__INIT, *sv[] = { &st };
	Memprof__Profile m = MEMPROF__PROFILE__INIT;
	const char *why;

	/* a chain 1 <- 2 <- 3 <- ...: node i's parent is i - 1 */
	for (uint32_t i = 0; i < N_NODES; i++) {
		up[i] = 1;
		node_addrs[i] = i % 2;
	}
	m.format_version = 3;
	m.n_stack_addrs = 2;
	m.stack_addrs = addrs;
	m.n_stack_node_up = m.n_stack_node_addrs = 3;
	m.stack_node_up = up;
	m.stack_node_addrs = node_addrs;
	m.n_stack_leaves = 2;
	m.stack_leaves = leaves;
	cr_assert_eq(decode_msg(&m, &why), 0, "%s", why);

	/* what it reads as: stack 1 is 3 frames, innermost first */
	{
		size_t len = memprof__profile__get_packed_size(&m);
		uint8_t *buf = malloc(len);
		struct mp_profile *q = NULL;
		uint64_t want[] = { 0x1000, 0x1010, 0x1000 };

		memprof__profile__pack(&m, buf);
		cr_assert_eq(mp_profile_decode(buf, len, &q, &why), 0);
		cr_assert_eq(q->stacks[0].n_frames, 3);
		cr_assert_eq(q->stacks[0].flags, MP_STACK_F_TRUNCATED);
		cr_assert_arr_eq(q->stacks[0].frames, want, sizeof(want));
		cr_assert_eq(q->stacks[1].n_frames, 1);
		cr_assert_eq(q->stacks[1].frames[0], 0x1000);
		free(buf);
		mp_profile_free(q);
	}

	/* a node that is its own parent (a cycle) or whose parent comes later */
	up[1] = 0;
	cr_expect_eq(decode_msg(&m, &why), -EBADMSG);
	cr_expect_str_eq(why, "stack node whose parent does not come before it");
	up[1] = 3;
	cr_expect_eq(decode_msg(&m, &why), -EBADMSG);
	cr_expect_str_eq(why, "stack node whose parent does not come before it");
	up[1] = 1;

	node_addrs[2] = 2;
	cr_expect_eq(decode_msg(&m, &why), -EBADMSG);
	cr_expect_str_eq(why, "stack node refers to no address");
	node_addrs[2] = 0;

	leaves[1] = 4 << 1;
	cr_expect_eq(decode_msg(&m, &why), -EBADMSG);
	cr_expect_str_eq(why, "empty stack or one that refers to no node");
	leaves[1] = 0;
	cr_expect_eq(decode_msg(&m, &why), -EBADMSG);
	cr_expect_str_eq(why, "empty stack or one that refers to no node");
	leaves[1] = 1 << 1;

	m.n_stack_node_addrs = 2;
	cr_expect_eq(decode_msg(&m, &why), -EBADMSG);
	cr_expect_str_eq(why, "stack nodes without an address or a parent, or more than memprofd "
			      "writes");
	m.n_stack_node_addrs = 3;

	/* a chain one frame deeper than a stack may be */
	m.n_stack_node_up = m.n_stack_node_addrs = N_NODES;
	cr_expect_eq(decode_msg(&m, &why), -EBADMSG);
	cr_expect_str_eq(why, "stack deeper than memprofd writes");
	m.n_stack_node_up = m.n_stack_node_addrs = N_NODES - 1;
	leaves[0] = (N_NODES - 1) << 1;
	cr_expect_eq(decode_msg(&m, &why), 0, "%s", why);
	leaves[0] = 3 << 1;

	st.n_frames = 1;
	st.frames = fr;
	m.n_stacks = 1;
	m.stacks = sv;
	cr_expect_eq(decode_msg(&m, &why), -EBADMSG);
	cr_expect_str_eq(why, "stacks both as a list and as a tree");
	m.n_stacks = 0;

	m.format_version = MP_PROFILE_FORMAT_STACK_TREE + 1;
	cr_expect_eq(decode_msg(&m, &why), -EPROTONOSUPPORT);
}

/* A profile of one stack (frames 0xb then 0xa) in a tree of @nodes nodes:
 * 1 = 0xa, 2 = 0xb under it, 3 = 0xc under 1 (on no stack's path), its
 * site naming it. */
static struct mp_profile *one_named_stack(uint32_t nodes, bool complete)
{
	static const uint64_t frame[3] = { 0xa, 0xb, 0xc };
	static const uint32_t parent[3] = { 0, 1, 1 };
	struct mp_profile *p = mp_profile_new();
	struct mp_stack_tree *t = calloc(1, sizeof(*t));

	cr_assert(p && t);
	t->n_nodes = nodes;
	t->frame = malloc(sizeof(frame));
	t->parent = malloc(sizeof(parent));
	t->leaf = malloc(sizeof(uint32_t));
	cr_assert(t->frame && t->parent && t->leaf);
	memcpy(t->frame, frame, sizeof(frame));
	memcpy(t->parent, parent, sizeof(parent));
	t->leaf[0] = 2;
	t->complete = complete;
	p->stack_tree = t;
	p->stacks = calloc(1, sizeof(*p->stacks));
	p->sites = calloc(1, sizeof(*p->sites));
	cr_assert(p->stacks && p->sites);
	p->stacks[0].n_frames = 2;
	p->n_stacks = 1;
	p->sites[0].stack = 1;
	p->sites[0].name = p->sites[0].phase = MP_NONE;
	p->n_sites = 1;
	return p;
}

/* Every stack named by a site: a tree the stack table made whole (every
 * node on a stack's path, as its export says) is left as it is; a tree
 * not known to be whole (one read from a file) still loses a node on no
 * stack's path. */
Test(stack_tree, prune_with_every_stack_named)
{
	/* nodes, whole, nodes after: the orphan stays only in a tree that
	 * says it has none, which is what the flag means */
	static const struct {
		uint32_t nodes;
		bool complete;
		uint32_t after;
	} cases[] = { { 2, true, 2 }, { 3, false, 2 }, { 3, true, 3 } };
	uint64_t buf[MP_PROFILE_MAX_DEPTH];
	const uint64_t want[2] = { 0xb, 0xa };
	struct mp_stack_table *tab;
	struct mp_profile *p;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		p = one_named_stack(cases[i].nodes, cases[i].complete);
		cr_assert_eq(mp_profile_stacks_prune(p), 0);
		cr_assert_eq(p->n_stacks, 1);
		cr_assert_eq(p->sites[0].stack, 1);
		cr_assert_eq(p->stack_tree->n_nodes, cases[i].after, "case %zu: %u nodes", i,
			     p->stack_tree->n_nodes);
		cr_assert_arr_eq(mp_profile_stack_frames(p, 0, buf), want, sizeof(want));
		mp_profile_free(p);
	}
	p = mp_profile_new();
	cr_assert_eq(mp_stack_table_new(&tab), 0);
	cr_assert(mp_stack_table_intern(tab, want, 2, 0));
	cr_assert_eq(mp_stack_table_export(tab, p), 0);
	cr_assert(p->stack_tree->complete, "a table that dropped no stack makes a whole tree");
	mp_profile_free(p);
	mp_stack_table_free(tab);
}
