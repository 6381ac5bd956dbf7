/* SPDX-License-Identifier: MIT */
/*
 * The forging ways of fixture-hostile (see fixture_hostile.c): a second
 * thread takes a thread slot, waits until the daemon reads it, then writes
 * forged records into its own ring the way libmemprof publishes them (the
 * slot's words, then its sequence word, then the thread slot's head) and
 * blocks for good, so that the library never writes there again. The main
 * thread meanwhile keeps HONEST_LIVE bytes live and marks kernels; every
 * forged record would add at least FORGED_MIN bytes to the heap figures.
 *
 * The counts each way forges are in FORGE_* below; test_hostile.c checks
 * the profile's rejected counts against them.
 */
#ifndef MP_TEST_FIXTURE_FORGE_H
#define MP_TEST_FIXTURE_FORGE_H

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>
#include <unistd.h>

#include <memprof.h>

#include "own_ring.h"

#define HONEST_BLOCKS 4
#define HONEST_BLOCK (3u << 20)
#define HONEST_LIVE ((uint64_t)HONEST_BLOCKS * HONEST_BLOCK)
#define FORGED_MIN (64ull << 20)
/* records of each kind the heap way forges */
#define FORGE_N 16
/* sizes: 2^62 and 2^57 */
#define FORGE_SIZE (2 * FORGE_N)
/* stamps: 0, ~0, an hour ahead, a random 64-bit value */
#define FORGE_TIME (4 * FORGE_N)
/* heap records of a tid Linux cannot have, of another thread than the
 * slot's owner; KERNEL_ENDs of a tid Linux cannot have */
#define FORGE_THREAD (3 * FORGE_N)
/* frees of addresses no allocator hands out: past 2^56 */
#define FORGE_FREE (2 * FORGE_N)
#define FORGE_HEAP (FORGE_SIZE + FORGE_TIME + 2 * FORGE_N + FORGE_FREE)
/* The "frees" way: frees of blocks never allocated at plausible addresses
 * (below 2^56): misaligned ones inside the heap, aligned ones where
 * nothing is mapped, and aligned ones inside the heap, which no check can
 * tell from frees of blocks allocated before the attach. */
#define FORGE_FREE_MISALIGNED FORGE_N
#define FORGE_FREE_UNMAPPED FORGE_N
#define FORGE_FREE_PLAUSIBLE FORGE_N
#define FORGE_FREES (FORGE_FREE_MISALIGNED + FORGE_FREE_UNMAPPED + FORGE_FREE_PLAUSIBLE)
/* a STACK record of 40,000 bytes (with its continuation slots and ALLOC) */
#define FORGE_STACK 1
#define FORGE_STACK_LEN 40000u

struct forger {
	const char *how;
	int go[2]; /* the forger tells main it is done */
	int ok;
};

static uint64_t forge_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Publishes @s at position @pos of ring @i (its words first, then seq). */
static void forge_put(const struct own_ring *r, uint32_t i, uint64_t pos, const struct mp_slot *s)
{
	struct mp_slot *dst = own_slot(r, i, pos);

	memcpy((char *)dst + 8, (const char *)s + 8, sizeof(*s) - 8);
	__atomic_store_n(&dst->seq, pos + 1, __ATOMIC_RELEASE);
}

/* Publishes @s at the head of ring @i and moves the head on. */
static void forge_push(const struct own_ring *r, uint32_t i, struct mp_thread *t,
		       const struct mp_slot *s)
{
	uint64_t head = __atomic_load_n(&t->head, __ATOMIC_RELAXED);

	forge_put(r, i, head, s);
	__atomic_store_n(&t->head, head + 1, __ATOMIC_RELEASE);
}

/* An ALLOC record of @size bytes at @addr, stamped now by this thread. */
static struct mp_slot forge_alloc(const struct mp_thread *t, uint64_t addr, uint64_t size)
{
	struct mp_slot s;

	memset(&s, 0, sizeof(s));
	s.type = 8; /* MP_REC_ALLOC */
	s.name_id = 0; /* malloc */
	s.tid = t->tid;
	s.tseq = (uint32_t)(t->gen >> 1);
	s.ts_ns = forge_now();
	s.dims[0] = (int64_t)addr;
	s.dims[1] = (int64_t)size;
	s.dims[2] = (int64_t)(uintptr_t)&forge_now;
	return s;
}

/* A STACK record of FORGE_STACK_LEN bytes, its continuation slots and its
 * ALLOC, published as libmemprof does: the STACK record last. */
static void forge_long_stack(const struct own_ring *r, uint32_t i, struct mp_thread *t)
{
	uint64_t k = (FORGE_STACK_LEN + MP_STACK_SLOT_BYTES - 1) / MP_STACK_SLOT_BYTES;
	uint64_t head = __atomic_load_n(&t->head, __ATOMIC_RELAXED);
	struct mp_slot s;

	memset(&s, 0, sizeof(s));
	for (uint64_t j = 0; j < k; j++)
		forge_put(r, i, head + 1 + j, &s);
	s = forge_alloc(t, 0x200000000000ull, FORGED_MIN);
	forge_put(r, i, head + 1 + k, &s);
	memset(&s, 0, sizeof(s));
	s.type = 24; /* MP_REC_STACK */
	s.tid = t->tid;
	s.tseq = (uint32_t)(t->gen >> 1);
	s.ts_ns = forge_now();
	s.dims[3] = FORGE_STACK_LEN;
	forge_put(r, i, head, &s);
	__atomic_store_n(&t->head, head + k + 2, __ATOMIC_RELEASE);
}

static void forge_heap(const struct own_ring *r, uint32_t i, struct mp_thread *t)
{
	static const uint64_t bad_ts[4] = { 0, ~0ull, 0, 0x9e3779b97f4a7c15ull };
	uint64_t addr = 0x100000000000ull;
	struct mp_slot s;

	for (int n = 0; n < FORGE_N; n++) {
		s = forge_alloc(t, addr += 1u << 20, 1ull << 62);
		forge_push(r, i, t, &s);
		s = forge_alloc(t, addr += 1u << 20, 1ull << 57);
		forge_push(r, i, t, &s);
		for (int k = 0; k < 4; k++) {
			s = forge_alloc(t, addr += 1u << 20, FORGED_MIN);
			s.ts_ns = k == 2 ? forge_now() + 3600ull * 1000000000ull : bad_ts[k];
			forge_push(r, i, t, &s);
		}
		s = forge_alloc(t, addr += 1u << 20, FORGED_MIN);
		s.tid = 0x7fffffffu;
		forge_push(r, i, t, &s);
		/* a tid below this thread's own: the main thread's, say */
		s = forge_alloc(t, addr += 1u << 20, FORGED_MIN);
		s.tid = t->tid - 1;
		forge_push(r, i, t, &s);
		s = forge_alloc(t, ~0ull - 7, 0);
		s.type = 9; /* MP_REC_FREE */
		forge_push(r, i, t, &s);
		s = forge_alloc(t, 1ull << 60, 0);
		s.type = 9;
		forge_push(r, i, t, &s);
		memset(&s, 0, sizeof(s));
		s.type = 2; /* MP_REC_KERNEL_END */
		s.tid = 0x7fffffffu;
		s.tseq = (uint32_t)(t->gen >> 1);
		s.ts_ns = forge_now();
		forge_push(r, i, t, &s);
	}
	forge_long_stack(r, i, t);
}

/* An address with nothing mapped at it: msync() says ENOMEM. */
static bool forge_unmapped(uint64_t a)
{
	return msync((void *)(uintptr_t)(a & ~4095ull), 4096, MS_ASYNC) < 0 && errno == ENOMEM;
}

/* Frees of never allocated blocks at plausible addresses: inside @live
 * (a live honest block of HONEST_BLOCK bytes, which these frees must not
 * release) and in holes of the address space. */
static bool forge_frees(const struct own_ring *r, uint32_t i, struct mp_thread *t, uint64_t live)
{
	uint64_t hole = 0x300000000000ull;
	struct mp_slot s;

	for (int n = 0; n < FORGE_N; n++) {
		s = forge_alloc(t, live + 4096 + 64 * (uint64_t)n + 4, 0);
		s.type = 9; /* MP_REC_FREE */
		s.name_id = 4; /* MP_FN_FREE */
		forge_push(r, i, t, &s);
		while (!forge_unmapped(hole))
			hole += 1ull << 30;
		s = forge_alloc(t, hole + 16 * (uint64_t)n, 0);
		s.type = 9;
		s.name_id = 4;
		forge_push(r, i, t, &s);
		s = forge_alloc(t, live + 8192 + 64 * (uint64_t)n, 0);
		s.type = 9;
		s.name_id = 4;
		forge_push(r, i, t, &s);
	}
	return true;
}

static void **honest_keep(void);

static void *forger_main(void *arg)
{
	struct forger *f = arg;
	struct own_ring r;
	struct mp_thread *t;
	uint32_t i;
	char c = 1;

	/* a thread slot of our own; the daemon reads it past its snapshot */
	memprof_kernel_begin("good9");
	memprof_kernel_end();
	if (own_ring_map(&r) < 0 || !own_ring_wait_attached(&r) || !own_ring_wait_read(&r))
		goto out;
	memprof_kernel_begin("good9");
	memprof_kernel_end();
	if (!own_ring_wait_read(&r) || !(t = own_thread(&r, &i)))
		goto out;
	if (!strcmp(f->how, "heap")) {
		forge_heap(&r, i, t);
	} else if (!strcmp(f->how, "frees")) {
		forge_frees(&r, i, t, (uintptr_t)honest_keep()[0]);
	} else if (!strcmp(f->how, "stuck")) {
		__atomic_store_n(&t->head, t->head + 5, __ATOMIC_RELEASE);
	} else { /* seqback: the slot at head gets its own position as seq */
		uint64_t head = __atomic_load_n(&t->head, __ATOMIC_RELAXED);

		__atomic_store_n(&own_slot(&r, i, head)->seq, head, __ATOMIC_RELEASE);
	}
	f->ok = 1;
out:
	if (write(f->go[1], &c, 1) != 1)
		return NULL;
	/* never back into the library on this thread: block for good */
	for (;;)
		pause();
	return NULL;
}

static bool forge_way(const char *how)
{
	return !strcmp(how, "heap") || !strcmp(how, "frees") || !strcmp(how, "stuck") ||
	       !strcmp(how, "seqback");
}

static void honest_kernels(int rounds)
{
	char name[16];

	for (int i = 0; i < rounds; i++) {
		void *p;

		snprintf(name, sizeof(name), "good%d", i % 10);
		memprof_kernel_begin(name);
		p = malloc(16);
		free(p);
		memprof_kernel_end();
	}
}

/* The honest blocks, allocated once the daemon reads the ring (the first
 * call). */
static void **honest_keep(void)
{
	static void *keep[HONEST_BLOCKS];

	if (keep[0])
		return keep;
	memprof_kernel_begin("good0");
	for (int k = 0; k < HONEST_BLOCKS; k++) {
		keep[k] = malloc(HONEST_BLOCK);
		if (keep[k])
			memset(keep[k], 1, 4096);
	}
	memprof_kernel_end();
	return keep;
}

static int forge_main(const char *how)
{
	struct forger f = { .how = how };
	pthread_attr_t attr;
	struct own_ring r;
	pthread_t th;
	char c;

	memprof_phase("hostile");
	honest_kernels(10);
	if (own_ring_map(&r) < 0 || pipe(f.go) < 0)
		return 3;
	if (!own_ring_wait_attached(&r))
		return 5;
	memprof_phase("hostile");
	if (!own_ring_wait_read(&r))
		return 5;
	honest_keep();
	/* a small stack: its mapping counts among the honest bytes */
	if (pthread_attr_init(&attr) || pthread_attr_setstacksize(&attr, 512u << 10) ||
	    pthread_create(&th, &attr, forger_main, &f))
		return 6;
	if (read(f.go[0], &c, 1) != 1 || !f.ok)
		return 7;
	honest_kernels(400);
	/* longer than the consumer's stall time (100 ms by default) many
	 * times over, so that a stuck ring is seen stuck; the honest kernels
	 * after the forgery must still be read */
	for (int k = 0; k < 10; k++) {
		usleep(60 * 1000);
		honest_kernels(10);
	}
	return 0;
}

/* exec: the old image's blocks are live when it execs. */
static int exec_way(const char *self)
{
	struct own_ring r;

	memprof_phase("hostile");
	if (own_ring_map(&r) < 0 || !own_ring_wait_attached(&r))
		return 5;
	memprof_kernel_begin("good1");
	memprof_kernel_end();
	if (!own_ring_wait_read(&r))
		return 5;
	honest_keep();
	honest_kernels(10);
	/* every record read before the image goes */
	if (!own_ring_wait_read(&r))
		return 5;
	execl(self, self, "execd", (char *)NULL);
	return 8;
}

static int execd(void)
{
	struct own_ring r;
	void *p;

	if (own_ring_map(&r) < 0 || !own_ring_wait_attached(&r))
		return 5;
	memprof_kernel_begin("good2");
	memprof_kernel_end();
	if (!own_ring_wait_read(&r))
		return 5;
	memprof_kernel_begin("after_exec");
	p = malloc(1u << 20);
	if (p)
		memset(p, 1, 4096);
	memprof_kernel_end();
	if (!own_ring_wait_read(&r))
		return 5;
	usleep(100 * 1000);
	return p ? 0 : 9;
}

#endif /* MP_TEST_FIXTURE_FORGE_H */
