// SPDX-License-Identifier: MIT
/*
 * Daemon CPU per call stack: unwinding (daemon/stacks/) a real 16 KiB
 * stack slice of this process taken 12 frames deep, and deduplicating it
 * in a stack table (daemon/stacks/stacks.c), as the session does for
 * every allocation that carries a stack. Prints ns per stack, and per
 * stack without the table, fastest of 5 rounds; then the same unwind by
 * libdwfl alone (the rule cache off), the baseline of the same run, and
 * fails when the two disagree.
 *
 *   bench/bench-unwind [STACKS]
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "procmaps.h"
#include "stacks.h"
#include "unwind.h"

#define SLICE 16384

static struct mp_unwind_regs regs;
static unsigned char slice[SLICE];
static size_t slice_len;
int bench_sink;

/* ip, sp, bp where this call returns: as a uretprobe sees them. */
void bench_capture(struct mp_unwind_regs *r);
__asm__(".text\n"
	".globl bench_capture\n"
	".type bench_capture,@function\n"
	"bench_capture:\n"
	".cfi_startproc\n"
	"movq (%rsp), %rax\n"
	"movq %rax, 0(%rdi)\n"
	"leaq 8(%rsp), %rax\n"
	"movq %rax, 8(%rdi)\n"
	"movq %rbp, 16(%rdi)\n"
	"ret\n"
	".cfi_endproc\n"
	".size bench_capture, .-bench_capture\n");

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

__attribute__((noinline)) static void take(void)
{
	pthread_attr_t a;
	void *base;
	size_t size, left;

	bench_capture(&regs);
	pthread_getattr_np(pthread_self(), &a);
	pthread_attr_getstack(&a, &base, &size);
	pthread_attr_destroy(&a);
	left = (uint64_t)base + size - regs.sp;
	slice_len = left < SLICE ? left : SLICE;
	memcpy(slice, (const void *)regs.sp, slice_len);
}

__attribute__((noinline)) static void deep(int n)
{
	if (n == 0)
		take();
	else
		deep(n - 1);
	bench_sink++;
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 20000;
	uint64_t frames[MP_UNWIND_DEFAULT_DEPTH], best = UINT64_MAX, best_nt = UINT64_MAX;
	struct mp_procmaps *maps;
	struct mp_unwinder *u;
	int depth = 0;
	bool trunc;

	deep(10);
	if (mp_procmaps_read(getpid(), &maps) < 0 || mp_unwinder_new(getpid(), maps, &u) < 0)
		return 1;
	for (int round = 0; round < 5; round++) {
		struct mp_stack_table *t;
		uint64_t t0;

		if (mp_stack_table_new(&t) < 0)
			return 1;
		t0 = now_ns();
		for (long i = 0; i < n; i++) {
			depth = mp_unwind(u, &regs, slice, slice_len, MP_UNWIND_DEFAULT_DEPTH,
					  frames, &trunc);
			mp_stack_table_intern(t, frames, (uint32_t)depth, trunc);
		}
		t0 = now_ns() - t0;
		best = t0 < best ? t0 : best;
		mp_stack_table_free(t);
		t0 = now_ns();
		for (long i = 0; i < n; i++)
			depth = mp_unwind(u, &regs, slice, slice_len, MP_UNWIND_DEFAULT_DEPTH,
					  frames, &trunc);
		t0 = now_ns() - t0;
		best_nt = t0 < best_nt ? t0 : best_nt;
	}
	printf("unwind: %d frames from a %zu-byte slice: %.0f ns per stack (unwind + dedup), "
	       "%.0f ns unwind only\n",
	       depth, slice_len, (double)best / (double)n, (double)best_nt / (double)n);
	{
		uint64_t slow[MP_UNWIND_DEFAULT_DEPTH], best_slow = UINT64_MAX, nslow = n / 10 + 1;
		struct mp_unwinder *v;
		bool trunc_slow;
		int d = 0;

		if (mp_unwinder_new(getpid(), maps, &v) < 0)
			return 1;
		mp_unwinder_set_rule_cache(v, false);
		for (int round = 0; round < 5; round++) {
			uint64_t t0 = now_ns();

			for (uint64_t i = 0; i < nslow; i++)
				d = mp_unwind(v, &regs, slice, slice_len, MP_UNWIND_DEFAULT_DEPTH,
					      slow, &trunc_slow);
			t0 = now_ns() - t0;
			best_slow = t0 < best_slow ? t0 : best_slow;
		}
		printf("libdwfl alone: %.0f ns per stack unwind only; rule cache %.1fx faster\n",
		       (double)best_slow / (double)nslow,
		       ((double)best_slow / (double)nslow) / ((double)best_nt / (double)n));
		mp_unwinder_free(v);
		if (d != depth || trunc_slow != trunc ||
		    memcmp(slow, frames, sizeof(*frames) * (size_t)d)) {
			fprintf(stderr, "rule cache and libdwfl disagree\n");
			return 1;
		}
	}
	mp_unwinder_free(u);
	mp_procmaps_free(maps);
	return 0;
}
