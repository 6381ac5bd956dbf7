// SPDX-License-Identifier: MIT
/*
 * The cost of one allocation's call stack on the in-process path, both
 * sides, in this process (linked with libmemprof, whose interposer is then
 * this process's malloc): malloc(4037)+free pairs in precise mode from a
 * 12-frame chain of -O2 code under a 14 KiB frame (the copy is then
 * nearly the whole 16 KiB, as in a real program's deeper stacks), with --stacks' defaults (16 KiB, depth 64),
 * the stack sent as a copy (STACK record, what memprofd asked for before
 * the in-process unwinder; alloc_stack_depth 0) or as the frames
 * libmemprof unwinds (FRAMES record). Rows:
 *   - producer: thread CPU time per pair (the records drained untimed);
 *   - consumer: thread CPU time per stacked record of reading it and
 *     making its stack id as the session does (mp_stack_collect_ring()
 *     on the copy, mp_stack_collect_given() on the frames).
 * All as ratios to the pair without stacks of the same run; it fails if
 * the two ways give different stacks.
 *
 *   bench-stack-producer [ROUNDS]
 */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "collect.h"
#include "consumer.h"
#include "memprof.h"
#include "procmaps.h"
#include "ring_abi.h"
#include "util.h"

#define PAIRS 100 /* with 127-slot copies: 40 % of the default ring, no wait */
#define CHAIN 12
/* a size the consumer's own allocations (recorded too) do not have */
#define SIZE 4037

#define STR_(x) #x
#define STR(x) STR_(x)

static void *volatile sink;

static uint64_t cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

__attribute__((noinline)) static void chain(int n)
{
	if (n > 0) {
		chain(n - 1);
		__asm__ volatile("" ::: "memory");
		return;
	}
	for (int i = 0; i < PAIRS; i++) {
		sink = malloc(SIZE);
		free(sink);
	}
}

/* The chain under a 14 KiB frame. */
__attribute__((noinline)) static void deep_chain(int n)
{
	volatile char pad[14 << 10];

	pad[0] = 1;
	chain(n);
	pad[1] = pad[0];
}

struct drain_ctx {
	struct mp_stack_collector *col;
	struct mp_collect_target t;
	uint64_t stacks, records;
	uint32_t first_id; /* the stack id of the chain's first allocation */
	int bad;
};

static int on_rec(void *ctx, uint32_t ring, const struct mp_record *rec)
{
	struct drain_ctx *d = ctx;
	uint32_t id = 0;

	(void)ring;
	d->records++;
	if (!rec->stack || rec->heap.size != SIZE)
		return 0;
	d->stacks++;
	if (!d->col)
		return 0;
	if (rec->stack->frames)
		id = mp_stack_collect_given(d->col, &d->t, rec->stack->frames, rec->stack->n_frames,
					    rec->stack->truncated);
	else
		id = mp_stack_collect_ring(d->col, &d->t,
					   &(struct mp_unwind_regs){ .ip = rec->stack->ip,
								     .sp = rec->stack->sp,
								     .bp = rec->stack->bp },
					   rec->stack->bytes, rec->stack->len, rec->heap.caller);
	if (!d->first_id)
		d->first_id = id;
	else if (id != d->first_id)
		d->bad++;
	return 0;
}

/* ns per pair (producer), ns per stacked record (consumer); @depth of
 * run_row(): -1 no stacks, 0 copies, else frames of that depth. */
struct row {
	double prod, cons;
};

static struct row run_row(struct mp_consumer *c, struct drain_ctx *d, int depth, int rounds)
{
	struct row best = { 1e30, 1e30 };

	mp_consumer_set_alloc_stacks(c, depth < 0 ? 0 : 16384);
	mp_consumer_set_alloc_stack_depth(c, depth > 0 ? (uint32_t)depth : 0);
	for (int r = 0; r < rounds; r++) {
		uint64_t t0 = cpu_ns(), t1, t2, s0;

		deep_chain(CHAIN);
		t1 = cpu_ns();
		s0 = d->stacks;
		while (mp_consumer_read_rings_at(c, 1u << 16, mp_now_ns(), on_rec, d) > 0)
			;
		t2 = cpu_ns();
		if ((t1 - t0) / (double)PAIRS < best.prod)
			best.prod = (t1 - t0) / (double)PAIRS;
		if (d->stacks > s0 && (t2 - t1) / (double)(d->stacks - s0) < best.cons)
			best.cons = (t2 - t1) / (double)(d->stacks - s0);
	}
	return best;
}

int main(int argc, char **argv)
{
	int rounds = argc > 1 ? atoi(argv[1]) : 500;
	struct drain_ctx d[2] = { 0 };
	struct row none = { 1e30, 1e30 }, copy = none, frames = none, v;
	struct mp_procmaps *maps;
	struct mp_consumer *c;
	uint64_t unwound, copied;

	if (rounds < 1)
		rounds = 1;
	memprof_kernel_begin("bench");
	memprof_kernel_end();
	if (mp_consumer_open_pid(getpid(), &c) < 0 || mp_procmaps_read(getpid(), &maps) < 0) {
		fprintf(stderr, "bench-stack-producer: cannot open this process's ring\n");
		return 1;
	}
	for (int i = 0; i < 2; i++) {
		if (mp_stack_collector_new(getpid(), true, 64, &d[i].col) < 0)
			return 1;
		d[i].t.maps = maps;
	}
	while (mp_consumer_read_rings_at(c, 1u << 16, mp_now_ns(), on_rec, &d[0]) > 0)
		;
	d[0].first_id = 0;
	if (mp_consumer_set_alloc_mode(c, MP_ALLOC_PRECISE, 0) < 0)
		return 1;
	/* interleaved: a load spike hits every row alike */
	for (int k = 0; k < 15; k++) {
		/* one call site: the stacks of both ways are the same */
		struct drain_ctx plain = { 0 };
		struct row *w = k % 3 == 0 ? &none : k % 3 == 1 ? &copy : &frames;

		v = run_row(c, k % 3 ? &d[k % 3 - 1] : &plain,
			    k % 3 == 0 ? -1 :
			    k % 3 == 1 ? 0 :
					 64,
			    rounds / 5 + 1);
		w->prod = v.prod < w->prod ? v.prod : w->prod;
		w->cons = v.cons < w->cons ? v.cons : w->cons;
	}
	mp_consumer_stack_counts(c, &unwound, &copied);
	mp_consumer_set_alloc_mode(c, MP_ALLOC_OFF, 0);
	{
		const uint64_t *f0, *f1;
		uint32_t n0 = mp_stack_collect_frames(d[0].col, d[0].first_id, &f0);
		uint32_t n1 = mp_stack_collect_frames(d[1].col, d[1].first_id, &f1);

		if (!n0 || n0 != n1 || memcmp(f0, f1, n0 * sizeof(*f0)) || d[0].bad || d[1].bad) {
			fprintf(stderr,
				"bench-stack-producer: copies and frames disagree (%u, %u frames; "
				"%d, %d other stacks)\n",
				n0, n1, d[0].bad, d[1].bad);
			for (uint32_t i = 0; i < n0 && i < n1; i++)
				fprintf(stderr, "  %#" PRIx64 " %#" PRIx64 "\n", f0[i], f1[i]);
			return 1;
		}
		printf("bench-stack-producer: %d malloc(" STR(
			       SIZE) ")+free pairs from a %d-frame chain "
				     "(stacks of %u frames), precise, fastest of %d rounds, thread CPU time; "
				     "%" PRIu64 " stacks unwound in process, %" PRIu64 " copied\n",
		       PAIRS, CHAIN, n0, rounds, unwound, copied);
	}
	printf("%-36s %10s %10s %14s %10s\n", "", "producer", "x no stack", "consumer/stack",
	       "x copy");
	printf("%-36s %8.1f ns %9.2fx\n", "no stack", none.prod, 1.0);
	printf("%-36s %8.1f ns %9.2fx %11.1f ns %9.2fx\n", "stack copied (~15 KiB, 127 slots)",
	       copy.prod, copy.prod / none.prod, copy.cons, 1.0);
	printf("%-36s %8.1f ns %9.2fx %11.1f ns %9.2fx\n", "frames unwound in process", frames.prod,
	       frames.prod / none.prod, frames.cons, frames.cons / copy.cons);
	printf("%-36s %8.2fx\n", "producer: copy / frames", copy.prod / frames.prod);
	mp_consumer_free(c);
	return 0;
}
