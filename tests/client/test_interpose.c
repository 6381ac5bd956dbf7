// SPDX-License-Identifier: MIT
/*
 * The allocator interposer of libmemprof (libclient/interpose.c) in this
 * process: dormant until a consumer turns it on, then ALLOC / REALLOC /
 * FREE records in the calling thread's ring; in sampled mode unbiased
 * estimates and free records only for sampled blocks. Its functions are
 * called through libmemprof's own definitions (dlsym on its handle), so the
 * test means the same in a sanitizer build, whose runtime's malloc comes
 * first in this process.
 */
#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "memprof.h"
#include "ring_abi.h"
#include "ring_test.h"

static void *(*ip_malloc)(size_t);
static void *(*ip_realloc)(void *, size_t);
static void *(*ip_calloc)(size_t, size_t);
static void (*ip_free)(void *);

/* libmemprof's own allocator functions (the program's calls may reach
 * another allocator first: ASan's) */
static void setup_fns(void)
{
	void *h = dlopen("libmemprof.so.0", RTLD_NOW | RTLD_NOLOAD);

	cr_assert_not_null(h, "libmemprof not loaded: %s", dlerror());
	ip_malloc = (void *(*)(size_t))dlsym(h, "malloc");
	ip_realloc = (void *(*)(void *, size_t))dlsym(h, "realloc");
	ip_free = (void (*)(void *))dlsym(h, "free");
	ip_calloc = (void *(*)(size_t, size_t))dlsym(h, "calloc");
	cr_assert(ip_malloc && ip_realloc && ip_free && ip_calloc);
}

static struct mp_consumer *setup(void)
{
	struct mp_consumer *c = NULL;

	setup_fns();
	/* the ring exists from the first marker on (MEMPROF_RING_LAZY=1) */
	cr_assert_eq(memprof_kernel_begin("k"), 0);
	cr_assert_eq(memprof_kernel_end(), 0);
	cr_assert_eq(mp_consumer_open_pid(getpid(), &c), 0);
	return c;
}

static bool mine(void *const *set, size_t n, uint64_t addr)
{
	for (size_t i = 0; i < n; i++)
		if ((uint64_t)(uintptr_t)set[i] == addr)
			return true;
	return false;
}

Test(interpose, precise_records_then_dormant)
{
	struct mp_consumer *c = setup();
	struct mp_record r;
	void *p, *q, *d;
	int seen = 0;

	cr_assert_eq(mp_consumer_set_alloc_mode(c, MP_ALLOC_PRECISE, 0), 0);
	p = ip_malloc(123);
	q = ip_realloc(p, 456);
	ip_free(q);
	ip_free(NULL);
	cr_assert_eq(mp_consumer_set_alloc_mode(c, MP_ALLOC_OFF, 0), 0);
	d = ip_malloc(77);
	ip_free(d);
	while (read_one(c, &r) == 1) {
		if (r.type < MP_REC_ALLOC || r.type > MP_REC_REALLOC)
			continue;
		cr_assert_eq(r.tid, (uint32_t)gettid());
		cr_assert_neq(r.heap.caller, 0);
		cr_assert_neq(r.heap.addr, (uint64_t)(uintptr_t)d, "a record while dormant");
		if (r.type == MP_REC_ALLOC && r.heap.addr == (uint64_t)(uintptr_t)p) {
			cr_assert_eq(seen, 0);
			cr_assert(r.fn == 0 && r.heap.size == 123 && !r.flags);
			seen = 1;
		} else if (r.type == MP_REC_REALLOC && r.heap.old_addr == (uint64_t)(uintptr_t)p) {
			cr_assert_eq(seen, 1);
			cr_assert(r.fn == 2 && r.heap.size == 456 &&
				  r.heap.addr == (uint64_t)(uintptr_t)q);
			seen = 2;
		} else if (r.type == MP_REC_FREE && r.heap.addr == (uint64_t)(uintptr_t)q) {
			cr_assert_eq(seen, 2);
			cr_assert_eq(r.fn, 4);
			seen = 3;
		}
	}
	cr_assert_eq(seen, 3, "records seen in order: %d of 3", seen);
	cr_assert_eq(mp_consumer_alloc_drops(c), 0);
	mp_consumer_free(c);
}

/* Whether the stack copy of @r holds its caller's return address: the
 * word the call into malloc pushed lies above the captured sp, so an
 * honest copy of the thread's stack has it (the daemon's unwinder finds
 * the caller's frame there). */
static bool stack_holds_caller(const struct mp_record *r, uint32_t max)
{
	const struct mp_rec_stack *st = r->stack;

	cr_assert_not_null(st, "no stack with record %s", mp_record_type_name(r->type));
	cr_assert(st->len > 0 && st->len <= max, "len %u", st->len);
	cr_assert(st->ip && st->sp % 8 == 0);
	for (uint32_t off = 0; off + 8 <= st->len; off += 8) {
		uint64_t w;

		memcpy(&w, st->bytes + off, 8);
		if (w == r->heap.caller)
			return true;
	}
	return false;
}

static void *alloc_in_thread(void *arg)
{
	void **ret = arg;
	pthread_attr_t a;
	void *lo;
	size_t size;

	*ret = ip_malloc(321);
	/* the copy ends at this thread's stack end */
	cr_assert_eq(pthread_getattr_np(pthread_self(), &a), 0);
	cr_assert_eq(pthread_attr_getstack(&a, &lo, &size), 0);
	pthread_attr_destroy(&a);
	ret[1] = (char *)lo + size;
	return NULL;
}

static void *on_altstack;

static void alloc_on_signal(int sig)
{
	(void)sig;
	on_altstack = ip_malloc(99);
}

/* A block allocated by a handler on a signal stack gets a STACK record
 * with the registers alone: the copy goes up the thread's own stack only,
 * and a signal stack's end is not known. */
Test(interpose, stack_record_on_a_signal_stack_copies_nothing)
{
	static char altstack[64 << 10] __attribute__((aligned(16)));
	stack_t ss = { .ss_sp = altstack, .ss_size = sizeof(altstack) };
	struct sigaction sa = { .sa_handler = alloc_on_signal, .sa_flags = SA_ONSTACK };
	struct mp_consumer *c = setup();
	struct mp_record r;
	int seen = 0;

	cr_assert_eq(sigaltstack(&ss, NULL), 0);
	cr_assert_eq(sigaction(SIGUSR1, &sa, NULL), 0);
	cr_assert_eq(mp_consumer_set_alloc_stacks(c, 4096), 0);
	cr_assert_eq(mp_consumer_set_alloc_mode(c, MP_ALLOC_PRECISE, 0), 0);
	cr_assert_eq(raise(SIGUSR1), 0);
	cr_assert_not_null(on_altstack);
	while (read_one(c, &r) == 1) {
		if (r.type != MP_REC_ALLOC || r.heap.addr != (uint64_t)(uintptr_t)on_altstack)
			continue;
		cr_assert_not_null(r.stack);
		cr_assert_eq(r.stack->len, 0);
		cr_assert(r.stack->sp >= (uintptr_t)altstack &&
			  r.stack->sp < (uintptr_t)altstack + sizeof(altstack));
		seen++;
	}
	cr_assert_eq(seen, 1);
	ip_free(on_altstack);
	mp_consumer_free(c);
}

/* Call stacks on: each new block's record carries a STACK record (type
 * 24) with the thread's stack, bounded by the asked size and by the
 * thread's stack end, on the main thread and on another; frees none; and
 * stacks off again: none. */
Test(interpose, stack_records)
{
	struct mp_consumer *c = setup();
	struct mp_record r;
	void *p, *q, *t[2], *d;
	pthread_t th;
	int seen = 0;

	cr_assert_eq(mp_consumer_set_alloc_stacks(c, 4096), 0);
	cr_assert_eq(mp_consumer_set_alloc_stacks(c, MP_RING_STACK_MAX + 1), -EINVAL);
	cr_assert_eq(mp_consumer_set_alloc_mode(c, MP_ALLOC_PRECISE, 0), 0);
	p = ip_malloc(123);
	q = ip_realloc(p, 456);
	cr_assert_eq(pthread_create(&th, NULL, alloc_in_thread, t), 0);
	cr_assert_eq(pthread_join(th, NULL), 0);
	while (read_one(c, &r) == 1) {
		if (r.type == MP_REC_ALLOC && r.heap.addr == (uint64_t)(uintptr_t)p) {
			cr_assert(stack_holds_caller(&r, 4096));
			seen |= 1;
		} else if (r.type == MP_REC_REALLOC && r.heap.addr == (uint64_t)(uintptr_t)q) {
			cr_assert(stack_holds_caller(&r, 4096));
			seen |= 2;
		} else if (r.type == MP_REC_ALLOC && r.heap.addr == (uint64_t)(uintptr_t)t[0]) {
			cr_assert(stack_holds_caller(&r, 4096));
			cr_assert_leq(r.stack->sp + r.stack->len, (uint64_t)(uintptr_t)t[1]);
			seen |= 4;
		}
	}
	cr_assert_eq(seen, 7, "records with stacks: %#x of 0x7", seen);
	cr_assert_eq(mp_consumer_set_alloc_stacks(c, 0), 0);
	d = ip_malloc(55);
	ip_free(d);
	ip_free(q);
	ip_free(t[0]);
	while (read_one(c, &r) == 1)
		cr_assert_null(r.stack, "a stack with %s", mp_record_type_name(r.type));
	cr_assert_eq(mp_consumer_alloc_drops(c), 0);
	mp_consumer_free(c);
}

/* An allocation through malloc or through realloc(NULL, n), from one
 * function: the call sites differ, the callers above them do not. */
static __attribute__((noinline)) void *alloc_via(int how, size_t n)
{
	void *p = how ? ip_realloc(NULL, n) : ip_malloc(n);

	__asm__ volatile("" : : "r"(p) : "memory"); /* not a tail call */
	return p;
}

/* With stacks, malloc's walk begins at its caller's frame (the frame
 * record malloc_traced() keeps), realloc's at libmemprof's own and climbs
 * to the caller: the two give the same frames above the call sites. */
Test(interpose, frames_from_the_callers_frame_as_from_ours)
{
	struct mp_consumer *c = setup();
	uint64_t f[2][64];
	uint32_t n[2] = { 0, 0 };
	struct mp_record r;
	void *p[2];

	cr_assert_eq(mp_consumer_set_alloc_stacks(c, 4096), 0);
	cr_assert_eq(mp_consumer_set_alloc_stack_depth(c, 64), 0);
	cr_assert_eq(mp_consumer_set_alloc_mode(c, MP_ALLOC_PRECISE, 0), 0);
	/* one call site for both (a volatile count: not unrolled) */
	for (volatile int i = 0; i < 2; i++)
		p[i] = alloc_via(i, 40);
	while (read_one(c, &r) == 1) {
		for (int i = 0; i < 2; i++) {
			if (r.type == MP_REC_FREE || r.heap.addr != (uint64_t)(uintptr_t)p[i])
				continue;
			cr_assert_not_null(r.stack);
			cr_assert_not_null(r.stack->frames, "%s sent a copy",
					   i ? "realloc" : "malloc");
			cr_assert_eq(r.stack->frames[0], r.heap.caller);
			n[i] = r.stack->n_frames < 64 ? r.stack->n_frames : 64;
			memcpy(f[i], r.stack->frames, n[i] * sizeof(uint64_t));
		}
	}
	cr_assert_gt(n[0], 2, "%u frames", n[0]);
	cr_assert_eq(n[0], n[1], "malloc %u frames, realloc %u", n[0], n[1]);
	cr_assert_neq(f[0][0], f[1][0]);
	cr_assert_arr_eq(f[0] + 1, f[1] + 1, (n[0] - 1) * sizeof(uint64_t));
	ip_free(p[0]);
	ip_free(p[1]);
	cr_assert_eq(mp_consumer_set_alloc_mode(c, MP_ALLOC_OFF, 0), 0);
	mp_consumer_free(c);
}

/* An allocator wrapper of this test: its call into malloc is the
 * allocation's caller. */
static __attribute__((noinline)) void *wrapper_alloc(size_t n)
{
	void *p = ip_malloc(n);

	__asm__ volatile("" : : "r"(p) : "memory"); /* not a tail call */
	return p;
}

/* A wrapper of that wrapper. */
static __attribute__((noinline)) void *wrapper_outer(size_t n)
{
	void *p = wrapper_alloc(n);

	__asm__ volatile("" : : "r"(p) : "memory");
	return p;
}

/* Whether @pc is in one of the @n ranges @lohi. */
static bool in_ranges(const uint64_t *lohi, int n, uint64_t pc)
{
	for (int i = 0; i < n; i++)
		if (pc >= lohi[2 * i] && pc < lohi[2 * i + 1])
			return true;
	return false;
}

/* Whether @ret is the return address of a direct call (e8 rel32) to @fn. */
static bool returns_from_call_to(uint64_t ret, uint64_t fn)
{
	const uint8_t *p = (const uint8_t *)(uintptr_t)(ret - 5);
	int32_t rel;

	if (p[0] != 0xe8)
		return false;
	memcpy(&rel, p + 1, sizeof(rel));
	return ret + (uint64_t)(int64_t)rel == fn;
}

/* Stacks off, the caller an allocator wrapper: a consumer that says how
 * deep it reads FRAMES gets the allocation charged here, in the record
 * itself, to the first caller outside the wrappers (through one wrapper
 * and through two: the call of the outermost), flagged, without frames;
 * one that does not gets the stack copy. */
Test(interpose, wrapped_allocation_charged_past_wrappers)
{
	struct mp_consumer *c = setup();
	uint64_t in = (uint64_t)(uintptr_t)wrapper_alloc, out = (uint64_t)(uintptr_t)wrapper_outer;
	uint64_t a = in < out ? in : out, b = in < out ? out : in;
	/* sorted by their start, as the consumer publishes them: the first
	 * wrapper up to the second, the second's first 256 bytes */
	uint64_t lohi[4] = { a, b, b, b + 256 }, wrap_in[2] = { in, in == a ? b : in + 256 };
	struct mp_record r;
	void *p[3];

	cr_assert_eq(mp_consumer_set_wrappers(c, lohi, 2, 2048), 0);
	cr_assert_eq(mp_consumer_set_alloc_mode(c, MP_ALLOC_PRECISE, 0), 0);
	for (int i = 0; i < 3; i++) {
		int seen = 0;

		cr_assert_eq(mp_consumer_set_alloc_stack_depth(c, i == 1 ? 0 : 64), 0);
		p[i] = i == 2 ? wrapper_outer(77) : wrapper_alloc(77);
		while (read_one(c, &r) == 1) {
			if (r.type != MP_REC_ALLOC || r.heap.addr != (uint64_t)(uintptr_t)p[i])
				continue;
			if (i == 1) {
				cr_assert(in_ranges(wrap_in, 1, r.heap.caller));
				cr_assert_not_null(r.stack);
				cr_assert_null(r.stack->frames);
				cr_assert(stack_holds_caller(&r, 2048));
				cr_assert_not(r.flags & MP_REC_F_PAST_WRAPPER);
			} else {
				cr_assert_null(r.stack, "a record with a stack (%u frames)",
					       r.stack->n_frames);
				cr_assert(r.flags & MP_REC_F_PAST_WRAPPER);
				cr_assert(!in_ranges(lohi, 2, r.heap.caller));
				cr_assert(returns_from_call_to(r.heap.caller, i == 2 ? out : in),
					  "round %d: caller %#lx is not the call of the outermost "
					  "wrapper",
					  i, (unsigned long)r.heap.caller);
			}
			seen++;
		}
		cr_assert_eq(seen, 1, "round %d", i);
		ip_free(p[i]);
	}
	cr_assert_eq(mp_consumer_set_alloc_mode(c, MP_ALLOC_OFF, 0), 0);
	mp_consumer_free(c);
}

#define N 20000
#define SIZE 64
#define INTERVAL 4096

static void *blocks[N];

/* 20,000 blocks of 64 bytes at a 4,096-byte interval, from malloc or
 * (@use_calloc) calloc: ~312 samples, the estimate's relative standard
 * error ~6%; the bound is 5 of them. Only the sampled blocks have their
 * frees recorded. */
static void sampled_estimate_unbiased(bool use_calloc)
{
	struct mp_consumer *c = setup();
	struct mp_record r;
	double est = 0, p = -expm1(-(double)SIZE / INTERVAL);
	uint64_t allocs = 0, frees = 0;

	cr_assert_eq(mp_consumer_set_alloc_mode(c, MP_ALLOC_SAMPLED, INTERVAL), 0);
	for (int i = 0; i < N; i++)
		blocks[i] = use_calloc ? ip_calloc(SIZE / 8, 8) : ip_malloc(SIZE);
	for (int i = 0; i < N; i++)
		ip_free(blocks[i]);
	cr_assert_eq(mp_consumer_set_alloc_mode(c, MP_ALLOC_OFF, 0), 0);
	while (read_one(c, &r) == 1) {
		if (r.type == MP_REC_ALLOC && mine(blocks, N, r.heap.addr)) {
			if (use_calloc)
				cr_assert_eq(r.fn, 1); /* calloc */
			cr_assert_eq(r.heap.size, SIZE);
			cr_assert_eq(r.flags, MP_REC_F_SCALED);
			est += SIZE / p;
			allocs++;
		} else if (r.type == MP_REC_FREE && mine(blocks, N, r.heap.addr)) {
			frees++;
		}
	}
	cr_assert_gt(allocs, 0);
	cr_assert_eq(frees, allocs, "free records %lu for %lu sampled blocks", (unsigned long)frees,
		     (unsigned long)allocs);
	cr_assert(fabs(est - (double)N * SIZE) < 0.30 * N * SIZE, "estimate %.0f of %d bytes", est,
		  N * SIZE);
	cr_assert_eq(mp_consumer_alloc_drops(c), 0);
	mp_consumer_free(c);
}

Test(interpose, sampled_estimate_unbiased_and_only_sampled_frees)
{
	sampled_estimate_unbiased(false);
}

#define SET_THREADS 4
#define SET_LIVE 400
#define SET_LAPS 5

static void *set_blocks[SET_THREADS][SET_LIVE];
static unsigned int set_failed;

static void *set_churn(void *arg)
{
	void **b = arg;

	for (int lap = 0; lap < SET_LAPS; lap++) {
		for (int i = 0; i < SET_LIVE; i++) {
			b[i] = ip_malloc(16 + (size_t)(i % 7) * 16);
			if (!b[i])
				__atomic_fetch_add(&set_failed, 1, __ATOMIC_RELAXED);
		}
		for (int i = 0; i < SET_LIVE; i++)
			ip_free(b[i]);
	}
	return NULL;
}

#define RACE_THREADS 8
#define RACE_BLOCKS 1000

static pthread_barrier_t race_start;
static unsigned int race_failed;

static void *race_first_calls(void *arg)
{
	void *b[RACE_BLOCKS];

	(void)arg;
	pthread_barrier_wait(&race_start);
	for (int i = 0; i < RACE_BLOCKS; i++)
		if (!(b[i] = ip_malloc(256)))
			__atomic_fetch_add(&race_failed, 1, __ATOMIC_RELAXED);
	for (int i = 0; i < RACE_BLOCKS; i++)
		ip_free(b[i]);
	return NULL;
}

/* Threads racing into their first calls while one of them resolves the
 * next allocator (libmemprof's first malloc in this process is theirs
 * under ASan, whose malloc the program's own calls reach first; elsewhere
 * it was resolved at startup): the others wait for it, and none gets a
 * NULL the next allocator would not have given, however much they ask
 * meanwhile (8 threads, 256 KiB each: four times the bootstrap arena). */
Test(interpose, first_calls_racing_the_resolution_never_fail)
{
	pthread_t th[RACE_THREADS];

	setup_fns();
	cr_assert_eq(pthread_barrier_init(&race_start, NULL, RACE_THREADS), 0);
	for (int i = 0; i < RACE_THREADS; i++)
		cr_assert_eq(pthread_create(&th[i], NULL, race_first_calls, NULL), 0);
	for (int i = 0; i < RACE_THREADS; i++)
		cr_assert_eq(pthread_join(th[i], NULL), 0);
	cr_assert_eq(race_failed, 0, "%u of %d malloc calls failed", race_failed,
		     RACE_THREADS * RACE_BLOCKS);
}

/* Every block sampled (interval 1), threads inserting and removing
 * sampled blocks side by side, each a bucket's count going to 0 and back
 * while others' do: every free of a sampled block is recorded (the bit a
 * free reads is never left clear with its count nonzero). */
Test(interpose, every_sampled_free_recorded_across_threads)
{
	struct mp_consumer *c = setup();
	pthread_t th[SET_THREADS];
	struct mp_record r;
	uint64_t allocs = 0, frees = 0;

	cr_assert_eq(mp_consumer_set_alloc_mode(c, MP_ALLOC_SAMPLED, 1), 0);
	for (int i = 0; i < SET_THREADS; i++)
		cr_assert_eq(pthread_create(&th[i], NULL, set_churn, set_blocks[i]), 0);
	for (int i = 0; i < SET_THREADS; i++)
		cr_assert_eq(pthread_join(th[i], NULL), 0);
	cr_assert_eq(mp_consumer_set_alloc_mode(c, MP_ALLOC_OFF, 0), 0);
	/* none failed: not even where the threads' first calls are the
	 * process's first of libmemprof's malloc (under ASan, the program's
	 * calls go to ASan's), racing the one that resolves the next
	 * allocator */
	cr_assert_eq(set_failed, 0, "%u of the threads' malloc calls failed", set_failed);
	cr_assert_eq(mp_consumer_alloc_drops(c), 0);
	/* the blocks of set_churn()'s malloc calls (pthread_create's own are
	 * calloc'd, and freed after the mode is off) */
	while (read_one(c, &r) == 1) {
		allocs += r.type == MP_REC_ALLOC && r.fn == 0;
		frees += r.type == MP_REC_FREE;
	}
	cr_assert_eq(allocs, SET_THREADS * SET_LIVE * SET_LAPS,
		     "%lu allocations recorded, %lu frees", (unsigned long)allocs,
		     (unsigned long)frees);
	cr_assert_eq(frees, allocs, "%lu frees recorded for %lu sampled blocks",
		     (unsigned long)frees, (unsigned long)allocs);
	mp_consumer_free(c);
}

/* Heap records are stamped with the TSC where the machine trusts it
 * (docs/RING.md "Clocks"), markers with CLOCK_MONOTONIC: converted by the
 * consumer, an allocation lies between the markers written 10 ms before
 * and after it (a raw TSC count, or a conversion off by a rate or an
 * offset, lands far outside). */
Test(interpose, heap_stamps_between_clock_monotonic_markers)
{
	struct timespec ms10 = { .tv_nsec = 10 * 1000 * 1000 };
	struct mp_consumer *c = setup();
	uint64_t begin = 0, alloc = 0, end = 0;
	struct mp_record r;
	void *p;

	cr_assert_eq(mp_consumer_set_alloc_mode(c, MP_ALLOC_PRECISE, 0), 0);
	cr_assert_eq(memprof_kernel_begin("around"), 0);
	nanosleep(&ms10, NULL);
	p = ip_malloc(99);
	nanosleep(&ms10, NULL);
	cr_assert_eq(memprof_kernel_end(), 0);
	ip_free(p);
	cr_assert_eq(mp_consumer_set_alloc_mode(c, MP_ALLOC_OFF, 0), 0);
	while (read_one(c, &r) == 1) {
		if (r.type == MP_REC_KERNEL_BEGIN && strcmp(r.name, "around") == 0)
			begin = r.ts_ns;
		else if (r.type == MP_REC_ALLOC && r.heap.addr == (uint64_t)(uintptr_t)p)
			alloc = r.ts_ns;
		else if (r.type == MP_REC_KERNEL_END && begin && !end)
			end = r.ts_ns;
	}
	cr_assert(begin && alloc && end, "records missing: %llu %llu %llu",
		  (unsigned long long)begin, (unsigned long long)alloc, (unsigned long long)end);
	cr_assert(begin < alloc && alloc < end, "alloc at %llu, kernel [%llu, %llu]",
		  (unsigned long long)alloc, (unsigned long long)begin, (unsigned long long)end);
	mp_consumer_free(c);
}

/* The record path never touches errno (on_alloc() and on_free() make no
 * call that could set it): in both modes, sampled or not, a successful
 * call leaves the caller's errno as it was. Sampled mode at an interval of
 * a few bytes samples about every block, at a large one about none: both
 * paths of the inlined decision. calloc goes through it as malloc does:
 * its sampled estimate holds too. */
Test(interpose, errno_kept_in_every_mode)
{
	static const struct {
		uint32_t mode;
		uint64_t interval;
	} modes[] = {
		{ MP_ALLOC_PRECISE, 0 },
		{ MP_ALLOC_SAMPLED, 16 },
		{ MP_ALLOC_SAMPLED, 1u << 30 },
	};
	struct mp_consumer *c = setup();
	struct mp_record r;

	for (size_t m = 0; m < sizeof(modes) / sizeof(modes[0]); m++) {
		cr_assert_eq(mp_consumer_set_alloc_mode(c, modes[m].mode, modes[m].interval), 0);
		for (int i = 0; i < 1000; i++) {
			void *p, *q;

			errno = 4242;
			p = ip_malloc(24);
			q = ip_calloc(3, 8);
			cr_assert(p && q);
			cr_assert_eq(errno, 4242, "mode %zu: errno %d after malloc/calloc", m,
				     errno);
			ip_free(p);
			ip_free(q);
			cr_assert_eq(errno, 4242, "mode %zu: errno %d after free", m, errno);
		}
		cr_assert_eq(mp_consumer_set_alloc_mode(c, MP_ALLOC_OFF, 0), 0);
		while (read_one(c, &r) == 1)
			;
	}
	cr_assert_eq(mp_consumer_alloc_drops(c), 0);
	mp_consumer_free(c);
}

Test(interpose, sampled_calloc_estimate_unbiased)
{
	sampled_estimate_unbiased(true);
}

/* This process's ring, mapped again read-only from its memfd. */
static const struct mp_ring_hdr *ring_map(void)
{
	char path[64], name[256];
	void *p = MAP_FAILED;
	struct stat st;

	for (int fd = 0; fd < 1024 && p == MAP_FAILED; fd++) {
		ssize_t n;

		snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
		n = readlink(path, name, sizeof(name) - 1);
		if (n <= 0)
			continue;
		name[n] = 0;
		if (!strstr(name, "/memfd:" MP_RING_MEMFD_NAME) || fstat(fd, &st) < 0)
			continue;
		p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
	}
	cr_assert_neq(p, MAP_FAILED, "no ring memfd in this process");
	return p;
}

/* Pages of thread slot @i's ring in memory (written, or mapped ahead); a
 * ring need not start on a page. */
static unsigned ring_resident(const struct mp_ring_hdr *h, uint32_t i)
{
	size_t len = (size_t)h->slot_count * h->slot_size, page = 4096;
	uintptr_t a = (uintptr_t)h + h->ring_off + (size_t)i * len, b = a + len;
	static unsigned char vec[(32768u * 128u) / 4096u + 2];
	size_t pages;
	unsigned n = 0;

	a &= ~(page - 1);
	b = (b + page - 1) & ~(page - 1);
	pages = (b - a) / page;
	cr_assert_leq(pages, sizeof(vec), "ring of %u slots", h->slot_count);
	cr_assert_eq(mincore((void *)a, b - a, vec), 0, "mincore: %s", strerror(errno));
	for (size_t k = 0; k < pages; k++)
		n += vec[k] & 1;
	return n;
}

static uint32_t slot_of(const struct mp_ring_hdr *h, uint32_t tid)
{
	const struct mp_thread *th = (const void *)((const char *)h + h->threads_off);

	for (uint32_t i = 0; i < h->thread_count; i++)
		if (th[i].state == 1 && th[i].tid == tid)
			return i;
	cr_assert_fail("thread %u has no slot", tid);
	return 0;
}

#define LAP_PAIRS 200 /* 400 records: 12.5 pages of 32 slots */

struct lap {
	const struct mp_ring_hdr *h;
	unsigned first, all;
};

static void *first_lap(void *arg)
{
	struct lap *l = arg;
	uint32_t i;

	ip_free(ip_malloc(40));
	i = slot_of(l->h, (uint32_t)gettid());
	l->first = ring_resident(l->h, i);
	for (int k = 1; k < LAP_PAIRS; k++)
		ip_free(ip_malloc(40));
	l->all = ring_resident(l->h, i);
	return NULL;
}

/* A thread slot's first lap: the records' pages are mapped ahead of the
 * writer in chunks (libclient/memprof.c ring_populate()), 4 pages at the
 * first record rather than a page fault per 32 records, and never more
 * than one chunk, at most as large as what was written, beyond them. */
Test(interpose, first_lap_pages_mapped_ahead)
{
	struct mp_consumer *c = setup();
	const struct mp_ring_hdr *h = ring_map();
	unsigned written = (2 * LAP_PAIRS * 128 + 4095) / 4096;
	struct lap l = { .h = h };
	struct mp_record r;
	pthread_t th;
	int n = 0;

	cr_assert_eq(h->slot_size, 128);
	cr_assert_eq(mp_consumer_set_alloc_mode(c, MP_ALLOC_PRECISE, 0), 0);
	cr_assert_eq(pthread_create(&th, NULL, first_lap, &l), 0);
	cr_assert_eq(pthread_join(th, NULL), 0);
	cr_assert_eq(mp_consumer_set_alloc_mode(c, MP_ALLOC_OFF, 0), 0);
	cr_assert_geq(l.first, 4, "%u page(s) mapped after the thread's first records", l.first);
	cr_assert_geq(l.all, written);
	cr_assert_leq(l.all, 2 * written, "%u pages mapped for %u written", l.all, written);
	while (read_one(c, &r) == 1)
		n += r.type == MP_REC_ALLOC || r.type == MP_REC_FREE;
	cr_assert_geq(n, 2 * LAP_PAIRS);
	cr_assert_eq(mp_consumer_alloc_drops(c), 0);
	mp_consumer_free(c);
}

/* Heap records leave the last slots of a ring to markers (docs/RING.md
 * "Waiting for space"): a writer that filled its ring with heap records
 * (sampled at 1 byte: every call, never waiting) still records the
 * kernel that follows, while the next heap record is dropped. */
Test(interpose, heap_records_leave_room_for_markers)
{
	struct mp_consumer *c = setup();
	struct mp_record r;
	uint64_t drops0 = mp_consumer_drops(c);
	int spins = 0, begins = 0, ends = 0;

	cr_assert_eq(mp_consumer_set_alloc_mode(c, MP_ALLOC_SAMPLED, 1), 0);
	while (mp_consumer_alloc_drops(c) == 0) {
		ip_free(ip_malloc(16));
		cr_assert_lt(++spins, 1 << 22, "the ring never filled");
	}
	cr_assert_eq(memprof_kernel_begin("after_full"), 0);
	cr_assert_eq(memprof_kernel_end(), 0);
	ip_free(ip_malloc(16));
	cr_assert_eq(mp_consumer_set_alloc_mode(c, MP_ALLOC_OFF, 0), 0);
	/* every drop was a heap record's */
	cr_assert_eq(mp_consumer_drops(c) - drops0, mp_consumer_alloc_drops(c));
	cr_assert_geq(mp_consumer_alloc_drops(c), 2);
	while (read_one(c, &r) == 1) {
		begins += r.type == MP_REC_KERNEL_BEGIN;
		ends += r.type == MP_REC_KERNEL_END;
	}
	cr_assert_eq(begins, 1, "the kernel after the full ring: %d begins", begins);
	cr_assert_eq(ends, 1);
	mp_consumer_free(c);
}
