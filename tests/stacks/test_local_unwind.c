// SPDX-License-Identifier: MIT
/*
 * The in-process unwinder of libmemprof (libclient/local_unwind.c) against
 * memprofd's out-of-process one (daemon/stacks): on real stacks of this
 * process, captured as libmemprof's stack capture does (lu_capture.c),
 * the frames the unwinder gives in process must be exactly those memprofd
 * takes from the copy of the same stack (mp_stack_collect_ring(): the
 * frames from the allocating function on, the same depth bound and the
 * same truncation mark), through -O2 frames without frame pointers, a
 * frame with rbp as CFA, a 20 KiB frame, a sibling call, a thread's
 * outermost frame and the depth bound; and it must give up (the caller
 * then sends the copy) where it cannot be sure: a frame of code without
 * unwind info (JIT), a signal frame.
 */
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "collect.h"
#include "local_unwind.h"
#include "lu_fixture.h"
#include "procmaps.h"

#define WINDOW (64u << 10)

static void result_init(struct lu_result *r, uint32_t depth)
{
	pthread_attr_t a;
	void *base;
	size_t size;

	memset(r, 0, sizeof(*r));
	r->depth = depth;
	r->window = WINDOW;
	r->copy = malloc(WINDOW);
	cr_assert_not_null(r->copy);
	cr_assert_eq(pthread_getattr_np(pthread_self(), &a), 0);
	cr_assert_eq(pthread_attr_getstack(&a, &base, &size), 0);
	pthread_attr_destroy(&a);
	r->stack_end = (uint64_t)(uintptr_t)base + size;
	lu_cur = r;
}

/* The stack id memprofd gives the copy, and the one it gives the frames
 * unwound in process: equal (the table keys frames and the truncation
 * mark), and the frames themselves, for the message. Returns how many. */
static uint32_t same_as_daemon(struct lu_result *r)
{
	struct mp_stack_collector *c;
	struct mp_procmaps *maps;
	struct mp_collect_target t;
	const uint64_t *f;
	uint32_t remote, local, n;

	cr_assert_gt(r->n, 0, "the in-process walk gave up");
	cr_assert_eq(r->frames[0], r->caller, "frame 0 is the allocating function's");
	cr_assert_eq(mp_procmaps_read(getpid(), &maps), 0);
	t = (struct mp_collect_target){ .maps = maps };
	cr_assert_eq(mp_stack_collector_new(getpid(), true, r->depth, &c), 0);
	remote = mp_stack_collect_ring(
		c, &t,
		&(struct mp_unwind_regs){ .ip = r->regs[0], .sp = r->regs[1], .bp = r->regs[2] },
		r->copy, (uint32_t)r->len, r->caller);
	cr_assert_neq(remote, 0);
	n = mp_stack_collect_frames(c, remote, &f);
	cr_assert_gt(n, 1, "memprofd unwound the copy no further than the caller");
	cr_assert_eq((uint32_t)r->n, n, "in process %d frames, memprofd %u", r->n, n);
	for (uint32_t i = 0; i < n; i++)
		cr_assert_eq(r->frames[i], f[i], "frame %u: %#lx in process, %#lx memprofd", i,
			     (unsigned long)r->frames[i], (unsigned long)f[i]);
	local = mp_stack_collect_given(c, &t, r->frames, (uint32_t)r->n, r->truncated);
	cr_assert_eq(local, remote, "same frames, another truncation mark (in process: %d)",
		     r->truncated);
	mp_stack_collector_free(c);
	mp_procmaps_free(maps);
	free(r->copy);
	return n;
}

Test(local_unwind, plain_chain_complete)
{
	struct lu_result r;

	result_init(&r, 64);
	lu_plain(5);
	/* main thread: the walk reaches _start, whose return address is
	 * undefined: the stack is complete */
	cr_assert_geq(same_as_daemon(&r), 7);
	cr_assert(!r.truncated);
}

Test(local_unwind, depth_bound_truncates)
{
	struct lu_result r;

	result_init(&r, 16);
	lu_plain(40);
	cr_assert_eq(same_as_daemon(&r), 16);
	cr_assert(r.truncated);
}

Test(local_unwind, sibling_call)
{
	struct lu_result r;

	result_init(&r, 64);
	lu_tail(3);
	cr_assert_geq(same_as_daemon(&r), 4);
}

Test(local_unwind, big_frame)
{
	struct lu_result r;

	result_init(&r, 64);
	lu_big(3);
	cr_assert_geq(same_as_daemon(&r), 5);
}

Test(local_unwind, frame_pointer_frame)
{
	struct lu_result r;

	result_init(&r, 64);
	lu_fp(0);
	cr_assert_geq(same_as_daemon(&r), 3);
	result_init(&r, 64);
	lu_fp(4);
	cr_assert_geq(same_as_daemon(&r), 7);
}

static void *thread_main(void *arg)
{
	struct lu_result *r = arg;

	result_init(r, 64);
	lu_plain(2);
	return NULL;
}

Test(local_unwind, thread_outermost_frame)
{
	struct lu_result r;
	pthread_t th;

	cr_assert_eq(pthread_create(&th, NULL, thread_main, &r), 0);
	cr_assert_eq(pthread_join(th, NULL), 0);
	same_as_daemon(&r);
	cr_assert(!r.truncated, "clone3's frame ends a thread's stack");
}

Test(local_unwind, copy_window_bounds_reads)
{
	struct lu_result r;

	/* the 20 KiB frame's return address lies beyond a 16 KiB copy: the
	 * walk must not read past it, and gives up */
	result_init(&r, 64);
	r.window = 16 << 10;
	lu_big(0);
	cr_assert_eq(r.n, -1);
	free(r.copy);
}

/* ---- where it must give up ---- */

static void jit_target(void)
{
	lu_alloc(16);
}

Test(local_unwind, no_unwind_info_falls_back)
{
	/* sub $8,%rsp; movabs $jit_target,%rax; call *%rax; add $8,%rsp; ret */
	unsigned char code[] = { 0x48, 0x83, 0xec, 0x08, 0x48, 0xb8, 0,	   0,	 0,    0,   0,
				 0,    0,    0,	   0xff, 0xd0, 0x48, 0x83, 0xc4, 0x08, 0xc3 };
	uint64_t target = (uint64_t)(uintptr_t)jit_target;
	struct lu_result r;
	void *m;

	memcpy(code + 6, &target, 8);
	m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	cr_assert_neq(m, MAP_FAILED);
	memcpy(m, code, sizeof(code));
	cr_assert_eq(mprotect(m, 4096, PROT_READ | PROT_EXEC), 0);
	cr_assert_eq(mp_unwind_rule_kind((uint64_t)(uintptr_t)m + 16), MP_LU_NOFDE);
	result_init(&r, 64);
	((void (*)(void))m)();
	cr_assert_eq(r.n, -1, "a frame without unwind info must send the copy");
	cr_assert_neq(r.caller, 0);
	free(r.copy);
	munmap(m, 4096);
}

static struct lu_result sig_r;

static void on_signal(int sig)
{
	(void)sig;
	lu_plain(1);
}

Test(local_unwind, signal_frame_falls_back)
{
	struct sigaction sa = { .sa_handler = on_signal };

	result_init(&sig_r, 64);
	cr_assert_eq(sigaction(SIGUSR1, &sa, NULL), 0);
	raise(SIGUSR1);
	cr_assert_eq(sig_r.n, -1, "a signal frame must send the copy");
	free(sig_r.copy);
}

Test(local_unwind, rules_and_forget)
{
	struct lu_result r;

	cr_assert_eq(mp_unwind_rule_kind((uint64_t)(uintptr_t)lu_plain + 1), MP_LU_STEP);
	/* cached, then forgotten (dlclose): the same walk again */
	result_init(&r, 64);
	lu_plain(3);
	same_as_daemon(&r);
	mp_unwind_forget();
	result_init(&r, 64);
	lu_plain(3);
	same_as_daemon(&r);
}

/* The executable segment of the object holding @addr. */
static void text_of(const void *addr, uint64_t *lo, uint64_t *hi)
{
	struct link_map *lm = NULL;
	const ElfW(Ehdr) * eh;
	const ElfW(Phdr) * ph;
	Dl_info info;

	cr_assert_neq(dladdr1(addr, &info, (void **)&lm, RTLD_DL_LINKMAP), 0);
	eh = info.dli_fbase;
	ph = (const ElfW(Phdr) *)((const char *)eh + eh->e_phoff);
	*lo = *hi = 0;
	for (unsigned i = 0; i < eh->e_phnum; i++)
		if (ph[i].p_type == PT_LOAD && (ph[i].p_flags & PF_X)) {
			*lo = lm->l_addr + ph[i].p_vaddr;
			*hi = *lo + ph[i].p_memsz;
		}
	cr_assert_gt(*hi, *lo);
}

/* A big runtime's code has more return addresses than the cache's first
 * slots: past half of them it grows (four times), and every rule it
 * gives is still the one of its pc, before and after. */
Test(local_unwind, cache_grows_with_the_code, .timeout = 60)
{
	enum { N = 60000 };
	static uint8_t kind[N];
	uint64_t lo, hi, step;
	uint32_t first = mp_unwind_cache_slots();
	struct lu_result r;

	text_of((const void *)(uintptr_t)&malloc, &lo, &hi);
	step = (hi - lo) / N;
	cr_assert_geq(step, 1, "libc's code is smaller than %d bytes", N);
	for (uint32_t i = 0; i < N; i++)
		kind[i] = (uint8_t)mp_unwind_rule_kind(lo + i * step);
	cr_assert_gt(mp_unwind_cache_slots(), first, "%u slots for %d pcs", first, N);
	for (uint32_t i = 0; i < N; i++)
		cr_assert_eq(mp_unwind_rule_kind(lo + i * step), kind[i], "pc %u", i);
	result_init(&r, 64);
	lu_plain(3);
	same_as_daemon(&r);
}

/* Two callers of the same chain with the same frame (so the chain's
 * frames sit at the same addresses under either), told apart by what they
 * write. */
static volatile int outer_seen[2];

static __attribute__((noinline, noipa)) void *outer_a(int levels)
{
	void *p = lu_plain(levels);

	outer_seen[0]++;
	return p;
}

static __attribute__((noinline, noipa)) void *outer_b(int levels)
{
	void *p = lu_plain(levels);

	outer_seen[1] += 2;
	return p;
}

/* Walk after walk on one thread, each through the memo of the one before:
 * deeper, shallower, through other chains and under another caller at the
 * same addresses (the memo's words then differ: the walk looks again).
 * Every walk gives exactly the frames memprofd takes from the copy, and
 * the memo spared most of the lookups. */
Test(local_unwind, memo_replays_only_what_holds, .timeout = 120)
{
	void *(*chain[])(int) = { lu_plain, lu_tail, lu_big, lu_fp, outer_a, outer_b };
	uint32_t rng = 7, frames = 0;
	struct lu_result r;

	for (int i = 0; i < 300; i++) {
		int c, levels;

		rng = rng * 1103515245u + 12345u;
		c = (int)((rng >> 16) % 6);
		levels = 1 + (int)((rng >> 8) % 6);
		result_init(&r, i % 7 == 0 ? 3 : 64);
		chain[c](levels);
		frames += same_as_daemon(&r);
	}
	cr_log_info("%u frames in 300 walks, %llu replayed from the memo", frames,
		    (unsigned long long)lu_memo.replayed);
	cr_assert_gt(lu_memo.replayed, frames / 4, "%llu of %u frames replayed",
		     (unsigned long long)lu_memo.replayed, frames);
	cr_assert_gt(outer_seen[0] + outer_seen[1], 0);
}

/* The pcs the wrappers of past_wrappers_as_the_walk_says hold. */
static uint64_t wrap_pcs[64];
static int n_wrap_pcs;

static bool outside_wraps(uint64_t pc)
{
	for (int i = 0; i < n_wrap_pcs; i++)
		if (wrap_pcs[i] == pc)
			return false;
	return true;
}

/* A wrapped allocation's walk from the wrapper's own frame (lu_alloc's,
 * as the interposed function's frame record gives it) reaches the frame
 * the whole walk has after the wrappers: each chain cut after each of its
 * first frames, those frames' return addresses the wrappers (the whole
 * walk, then the cut one, from the same call). */
Test(local_unwind, past_wrappers_as_the_walk_says, .timeout = 60)
{
	void *(*chain[])(int) = { lu_plain, lu_tail, lu_big, lu_fp };
	uint32_t checked = 0;

	for (size_t c = 0; c < sizeof(chain) / sizeof(chain[0]); c++) {
		for (int levels = 1; levels <= 4; levels++) {
			for (int t = 1; t < 8; t++) {
				struct lu_result whole, r;
				bool skip = false;

				for (int pass = 0; pass < 2 && !skip; pass++) {
					lu_past_stop = pass ? outside_wraps : NULL;
					result_init(pass ? &r : &whole, 64);
					chain[c](levels);
					lu_past_stop = NULL;
					if (pass)
						break;
					cr_assert_gt(whole.n, 2, "chain %zu: %d frames", c,
						     whole.n);
					skip = t >= whole.n;
					/* the cut's frame, the first past the wrappers */
					for (int i = 0; i < t && !skip; i++)
						skip = whole.frames[i] == whole.frames[t];
					memcpy(wrap_pcs, whole.frames,
					       (size_t)t * sizeof(uint64_t));
					n_wrap_pcs = t;
				}
				free(whole.copy);
				if (skip)
					continue;
				/* the chain's frames alike (the test's own call of it
				 * may be two: the compiler peels the pass loop) */
				cr_assert_eq(r.n, whole.n);
				for (int i = 0; i <= t && !skip; i++)
					skip = r.frames[i] != whole.frames[i];
				if (skip) {
					free(r.copy);
					continue;
				}
				cr_assert_eq(r.past_n, t + 2, "chain %zu, cut %d: %d frames", c, t,
					     r.past_n);
				cr_assert_eq(r.past[0], r.regs[0]);
				cr_assert_arr_eq(r.past + 1, whole.frames,
						 (size_t)(t + 1) * sizeof(uint64_t));
				free(r.copy);
				checked++;
			}
		}
	}
	cr_assert_geq(checked, 16, "%u cuts", checked);
}
