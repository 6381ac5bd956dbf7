// SPDX-License-Identifier: MIT
/*
 * The unwinder on real stacks of this process: a known call chain (an
 * executable at -O2 -fomit-frame-pointer with an inlined helper, a shared
 * library with a recursive function; built with CFI, or in the -fp variant
 * with frame pointers and no CFI at all) must unwind to exactly that chain,
 * inlined frame included; depth and slice limits mark the stack truncated;
 * random registers and stack bytes never crash it.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fixture.h"
#include "inline.h"
#include "modules.h"
#include "symtab.h"
#include "procmaps.h"
#include "unwind.h"

#define STACK_CAP (256 << 10)

/* gcc inlines the recursion into itself: with DWARF each level is an
 * inlined frame; the -fp library has no debug info (symbols only), so its
 * one machine frame is one source frame. */
#ifdef UNWFIX_NO_DEBUG
#define EXPECTED_CHAIN "chain_leaf;unwfix_recurse;chain_helper;chain_outer;unwfix_run;capture;"
#else
#define EXPECTED_CHAIN                                                                         \
	"chain_leaf;unwfix_recurse;unwfix_recurse;unwfix_recurse;unwfix_recurse;chain_helper;" \
	"chain_outer;unwfix_run;capture;"
#endif

struct symtab {
	struct mp_procmaps *maps;
	Dwfl *dwfl;
};

static void symtab_init(struct symtab *s)
{
	cr_assert_eq(mp_procmaps_read(getpid(), &s->maps), 0);
	s->dwfl = dwfl_begin(&mp_dwfl_callbacks);
	cr_assert_not_null(s->dwfl);
	dwfl_report_begin(s->dwfl);
	for (size_t i = 0; i < s->maps->n; i++) {
		const struct mp_mapping *m = &s->maps->maps[i];
		Dwfl_Module *mod;
		uint64_t bias;

		if (mp_mapping_is_code(m) && !dwfl_addrmodule(s->dwfl, m->start))
			mp_dwfl_report_mapping(s->dwfl, m, getpid(), (unsigned int)i, &mod, &bias);
	}
	dwfl_report_end(s->dwfl, NULL, NULL);
}

static void symtab_fini(struct symtab *s)
{
	mp_dwfl_end(s->dwfl);
	mp_procmaps_free(s->maps);
}

/* "f1;f2;..." of every source frame (inlined ones expanded). */
static void names(struct symtab *s, const uint64_t *frames, int n, char *out, size_t size)
{
	size_t off = 0;

	out[0] = 0;
	for (int i = 0; i < n; i++) {
		struct mp_sym_frame sf[MP_MAX_INLINE];
		Dwfl_Module *mod = dwfl_addrmodule(s->dwfl, frames[i] - 1);
		int k = mod ? mp_sym_frames(mod, frames[i] - 1, sf, MP_MAX_INLINE) : 0;

		if (k == 0)
			off += (size_t)snprintf(out + off, size - off, "?;");
		for (int j = 0; j < k && off < size; j++)
			off += (size_t)snprintf(out + off, size - off, "%s;",
						sf[j].function ? sf[j].function : "?");
		if (off >= size)
			break;
	}
}

static struct unwfix_capture *capture(int depth)
{
	struct unwfix_capture *c = calloc(1, sizeof(*c));

	cr_assert_not_null(c);
	c->stack = malloc(STACK_CAP);
	c->cap = STACK_CAP;
	cr_assert_not_null(c->stack);
	unwfix_run(depth, c);
	cr_assert_gt(c->len, 64);
	return c;
}

static void capture_free(struct unwfix_capture *c)
{
	free(c->stack);
	free(c);
}

Test(unwind, exact_chain)
{
	struct unwfix_capture *c = capture(3);
	struct mp_unwind_regs regs = { c->regs.ip, c->regs.sp, c->regs.bp };
	uint64_t frames[MP_UNWIND_DEFAULT_DEPTH];
	struct mp_unwinder *u;
	struct symtab s;
	char got[4096];
	bool trunc = true;
	int n;

	symtab_init(&s);
	cr_assert_eq(mp_unwinder_new(getpid(), s.maps, &u), 0);
	n = mp_unwind(u, &regs, c->stack, c->len, MP_UNWIND_DEFAULT_DEPTH, frames, &trunc);
	cr_assert_gt(n, 8);
	cr_assert_eq(frames[0], c->regs.ip);
	names(&s, frames, n, got, sizeof(got));
	/* The whole chain, to the entry point: the main thread's stack ends
	 * at _start, whose CFI marks the end (the criterion frames between
	 * have no symbols). */
	cr_assert(!strncmp(got, EXPECTED_CHAIN, strlen(EXPECTED_CHAIN)), "got %s", got);
	cr_assert(!strcmp(got + strlen(got) - strlen(";_start;"), ";_start;"), "got %s", got);
	cr_assert(!trunc, "got %s", got);
	mp_unwinder_free(u);
	symtab_fini(&s);
	capture_free(c);
}

/* The cached-rule walk gives exactly libdwfl's frames and truncation, for
 * every depth limit and every slice length, and takes the stacks of the
 * chain (-O2 code with CFI) without libdwfl. */
Test(unwind, rule_cache_same_as_libdwfl)
{
	struct unwfix_capture *c = capture(3);
	struct mp_unwind_regs regs = { c->regs.ip, c->regs.sp, c->regs.bp };
	uint64_t a[MP_UNWIND_DEFAULT_DEPTH], b[MP_UNWIND_DEFAULT_DEPTH], fast, slow;
	struct mp_unwinder *u, *v;
	struct symtab s;

	symtab_init(&s);
	cr_assert_eq(mp_unwinder_new(getpid(), s.maps, &u), 0);
	cr_assert_eq(mp_unwinder_new(getpid(), s.maps, &v), 0);
	mp_unwinder_set_rule_cache(v, false);
	for (uint32_t depth = 1; depth <= MP_UNWIND_DEFAULT_DEPTH; depth += 3) {
		for (size_t len = 0; len <= c->len; len += len < 256 ? 8 : 64) {
			bool ta = false, tb = true;
			int na = mp_unwind(u, &regs, c->stack, len, depth, a, &ta);
			int nb = mp_unwind(v, &regs, c->stack, len, depth, b, &tb);

			cr_assert_eq(na, nb, "depth %u len %zu: %d frames, libdwfl %d", depth, len,
				     na, nb);
			cr_assert_arr_eq(a, b, (size_t)na * sizeof(a[0]), "depth %u len %zu", depth,
					 len);
			cr_assert_eq(ta, tb, "depth %u len %zu: truncated %d, libdwfl %d", depth,
				     len, ta, tb);
		}
	}
	mp_unwinder_stats(u, &fast, &slow);
	/* with CFI, and without (the -fp library: frame pointers) */
	cr_assert_gt(fast, 0);
	mp_unwinder_stats(v, &fast, NULL);
	cr_assert_eq(fast, 0);
	mp_unwinder_free(u);
	mp_unwinder_free(v);
	symtab_fini(&s);
	capture_free(c);
}

/* The rule cache past its bound (a full table looks new rules up each
 * time) and across its growth: the walk still gives libdwfl's
 * frames, for captures of several depths (recursion) and with random
 * code addresses churning the table in between. */
Test(unwind, rule_cache_full_same_as_libdwfl)
{
	struct unwfix_capture *cs[3] = { capture(1), capture(4), capture(9) };
	uint64_t a[MP_UNWIND_DEFAULT_DEPTH], b[MP_UNWIND_DEFAULT_DEPTH], fills_small, fills_big;
	struct mp_unwinder *small, *big, *ref;
	struct mp_procmaps *maps;

	cr_assert_eq(mp_procmaps_read(getpid(), &maps), 0);
	cr_assert_eq(mp_unwinder_new(getpid(), maps, &small), 0);
	cr_assert_eq(mp_unwinder_new(getpid(), maps, &big), 0);
	cr_assert_eq(mp_unwinder_new(getpid(), maps, &ref), 0);
	mp_unwinder_set_rule_slots(small, 8);
	mp_unwinder_set_rule_cache(ref, false);
	srandom(5);
	for (int round = 0; round < 30; round++) {
		struct unwfix_capture *c = cs[round % 3];
		struct mp_unwind_regs regs = { c->regs.ip, c->regs.sp, c->regs.bp };
		struct mp_unwinder *us[2] = { small, big };

		for (int k = 0; k < 2; k++) {
			bool ta = false, tb = true;
			int na = mp_unwind(us[k], &regs, c->stack, c->len, MP_UNWIND_DEFAULT_DEPTH,
					   a, &ta);
			int nb = mp_unwind(ref, &regs, c->stack, c->len, MP_UNWIND_DEFAULT_DEPTH, b,
					   &tb);

			cr_assert_eq(na, nb, "round %d: %d frames, libdwfl %d", round, na, nb);
			cr_assert_arr_eq(a, b, (size_t)na * sizeof(a[0]), "round %d", round);
			cr_assert_eq(ta, tb, "round %d", round);
		}
		/* other code addresses into both caches (the big one grows
		 * past its first 4,096 slots: half full, it grows) */
		for (int i = 0; i < 80; i++) {
			struct mp_unwind_regs r = { c->regs.ip + (uint64_t)(random() % 65536) -
							    32768,
						    c->regs.sp, c->regs.bp };
			bool t;

			mp_unwind(small, &r, c->stack, 64, 2, a, &t);
			mp_unwind(big, &r, c->stack, 64, 2, a, &t);
		}
	}
	fills_small = mp_unwinder_rule_fills(small);
	fills_big = mp_unwinder_rule_fills(big);
	/* the small cache looked rules up again */
	cr_assert_gt(fills_small, fills_big);
	cr_assert_gt(fills_big, 2048);
	mp_unwinder_free(small);
	mp_unwinder_free(big);
	mp_unwinder_free(ref);
	mp_procmaps_free(maps);
	for (int i = 0; i < 3; i++)
		capture_free(cs[i]);
}

Test(unwind, depth_limit_truncates)
{
	struct unwfix_capture *c = capture(5);
	struct mp_unwind_regs regs = { c->regs.ip, c->regs.sp, c->regs.bp };
	uint64_t frames[4], all[MP_UNWIND_DEFAULT_DEPTH];
	struct mp_unwinder *u;
	struct mp_procmaps *maps;
	bool trunc = false;
	int n, na;

	cr_assert_eq(mp_procmaps_read(getpid(), &maps), 0);
	cr_assert_eq(mp_unwinder_new(getpid(), maps, &u), 0);
	n = mp_unwind(u, &regs, c->stack, c->len, 4, frames, &trunc);
	cr_assert_eq(n, 4);
	cr_assert(trunc);
	na = mp_unwind(u, &regs, c->stack, c->len, MP_UNWIND_DEFAULT_DEPTH, all, &trunc);
	cr_assert_gt(na, 4);
	cr_assert(!trunc);
	cr_assert_arr_eq(frames, all, sizeof(frames));
	mp_unwinder_free(u);
	mp_procmaps_free(maps);
	capture_free(c);
}

Test(unwind, short_slice_truncates)
{
	struct unwfix_capture *c = capture(3);
	struct mp_unwind_regs regs = { c->regs.ip, c->regs.sp, c->regs.bp };
	uint64_t frames[MP_UNWIND_DEFAULT_DEPTH], all[MP_UNWIND_DEFAULT_DEPTH];
	struct mp_unwinder *u;
	struct mp_procmaps *maps;
	bool trunc = false;
	int n, na;

	cr_assert_eq(mp_procmaps_read(getpid(), &maps), 0);
	cr_assert_eq(mp_unwinder_new(getpid(), maps, &u), 0);
	na = mp_unwind(u, &regs, c->stack, c->len, MP_UNWIND_DEFAULT_DEPTH, all, &trunc);
	/* 256 bytes hold a few frames of the chain, not the whole stack. */
	n = mp_unwind(u, &regs, c->stack, 256, MP_UNWIND_DEFAULT_DEPTH, frames, &trunc);
	cr_assert_geq(n, 1);
	cr_assert_lt(n, na);
	cr_assert(trunc);
	cr_assert_arr_eq(frames, all, (size_t)n * sizeof(*frames));
	/* No stack at all: the innermost frame only. */
	n = mp_unwind(u, &regs, NULL, 0, MP_UNWIND_DEFAULT_DEPTH, frames, &trunc);
	cr_assert_geq(n, 1);
	cr_assert_eq(frames[0], regs.ip);
	cr_assert(trunc);
	mp_unwinder_free(u);
	mp_procmaps_free(maps);
	capture_free(c);
}

Test(unwind, hostile_input)
{
	struct unwfix_capture *c = capture(2);
	uint64_t frames[MP_UNWIND_DEFAULT_DEPTH];
	unsigned char *junk = malloc(4096);
	struct mp_unwinder *u;
	struct mp_procmaps *maps;
	bool trunc;

	cr_assert_not_null(junk);
	cr_assert_eq(mp_procmaps_read(getpid(), &maps), 0);
	cr_assert_eq(mp_unwinder_new(getpid(), maps, &u), 0);
	srandom(11);
	for (int i = 0; i < 20000; i++) {
		struct mp_unwind_regs r;
		int n;

		for (size_t j = 0; j < 4096; j++)
			junk[j] = (unsigned char)random();
		/* Real code addresses, real stack addresses and garbage. */
		r.ip = i % 3 ? c->regs.ip + (uint64_t)(random() % 4096) - 2048 :
			       (uint64_t)random() << 20 ^ (uint64_t)random();
		r.sp = i % 2 ? c->regs.sp : ~0ull - (uint64_t)(random() % 8192);
		r.bp = i % 5 ? r.sp + (uint64_t)(random() % 8192) : (uint64_t)random();
		if (i % 7 == 0)
			memcpy(junk, c->stack, 4096);
		for (size_t j = 0; i % 4 == 0 && j + 8 <= 4096; j += 64)
			memcpy(junk + j, &c->regs.ip, 8);
		n = mp_unwind(u, &r, junk, 4096, MP_UNWIND_DEFAULT_DEPTH, frames, &trunc);
		cr_assert(n >= 0 && n <= MP_UNWIND_DEFAULT_DEPTH);
	}
	cr_assert_eq(mp_unwind(u, &(struct mp_unwind_regs){ 1, 2, 3 }, NULL, 0, 0, frames, &trunc),
		     -EINVAL);
	mp_unwinder_free(u);
	mp_procmaps_free(maps);
	capture_free(c);
	free(junk);
}
