/* SPDX-License-Identifier: MIT */
/*
 * The attach with the interposer on (docs/RING.md "Per-thread state and late
 * attach"): the mode goes on before the snapshot of the open kernels, so no
 * kernel begins between the two with its markers recorded and its
 * allocations not; heap records written before the snapshot are told apart
 * by their record number (tseq): those numbered below the snapshot's were
 * written under a stack the profile never sees and are skipped, those
 * numbered as the snapshot came after the last marker it reflects (under
 * the stack it took) and are kept. Ring images built by hand, and one
 * consumer racing a writer thread.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

#include "ring_image.h"
#include "ring_test.h"

/* enum mp_alloc_fn (bpf/memprof_events.h, not on this test's path) */
enum { FN_MALLOC = 0, FN_FREE = 4 };

static struct img m;

static void setup(void)
{
	img_init(&m, 16, 2, 16, 256);
	img_str(&m, 0, 0, "?");
	img_str(&m, 1, 2, "k");
	img_str(&m, 2, 4, "gone");
}

static void teardown(void)
{
	free(m.mem);
}

TestSuite(snapshot, .init = setup, .fini = teardown);

static void put_heap(uint64_t pos, uint8_t type, uint32_t tseq, uint64_t addr)
{
	struct mp_slot *s =
		img_put(&m, pos, type, 9, tseq, 0, type == MP_REC_ALLOC ? FN_MALLOC : FN_FREE);

	s->dims[0] = (int64_t)addr;
	s->dims[1] = type == MP_REC_ALLOC ? 32 : 0;
}

/* Thread slot 0 (tid 9) at record number 5 with kernel "k" open, after
 * "gone" began (3) and ended (4), and "k" began (5): the ring still holds
 * all of it, each with the heap records its thread wrote meanwhile. */
static void before_and_after(void)
{
	m.thr[0].state = 1;
	m.thr[0].tid = 9;
	m.thr[0].gen = 10; /* tseq 5 */
	m.thr[0].depth = 1;
	m.thr[0].kernels[0] = (struct mp_frame){ .name_id = 1, .ts_ns = 1004 };
	img_put(&m, 0, MP_REC_KERNEL_BEGIN, 9, 3, 0, 2); /* "gone" */
	put_heap(1, MP_REC_ALLOC, 3, 0xa0); /* inside "gone": before */
	img_put(&m, 2, MP_REC_KERNEL_END, 9, 4, 0, 0);
	put_heap(3, MP_REC_FREE, 4, 0xa0); /* between the two: before */
	img_put(&m, 4, MP_REC_KERNEL_BEGIN, 9, 5, 0, 1); /* "k": in the snapshot */
	put_heap(5, MP_REC_ALLOC, 5, 0xb0); /* inside "k": kept */
	put_heap(6, MP_REC_FREE, 5, 0xb0);
	img_put(&m, 7, MP_REC_KERNEL_END, 9, 6, 0, 0); /* after the snapshot */
	put_heap(8, MP_REC_ALLOC, 6, 0xc0);
}

/* A heap record of thread 9: its type and block. */
static void assert_heap(const struct mp_record *r, uint32_t type, uint64_t addr, size_t i)
{
	cr_assert_eq(r->type, type, "record %zu: %s, expected %s", i, mp_record_type_name(r->type),
		     mp_record_type_name(type));
	cr_assert_eq(r->tid, 9, "record %zu", i);
	cr_assert_eq(r->flags, 0, "record %zu", i);
	cr_assert_eq(r->heap.addr, addr, "record %zu: block %#llx, expected %#llx", i,
		     (unsigned long long)r->heap.addr, (unsigned long long)addr);
}

static void assert_after(const struct mp_record *recs, size_t n)
{
	cr_assert_eq(n, 5, "got %zu records", n);
	assert_rec(&recs[0],
		   &(struct exp_rec)REC(MP_REC_KERNEL_BEGIN, MP_REC_F_OPEN_AT_ATTACH, "k"), 9, 0);
	cr_assert_eq(recs[0].ts_ns, 1004);
	assert_heap(&recs[1], MP_REC_ALLOC, 0xb0, 1);
	assert_heap(&recs[2], MP_REC_FREE, 0xb0, 2);
	assert_rec(&recs[3], &(struct exp_rec)REC(MP_REC_KERNEL_END, 0, NULL), 9, 3);
	assert_heap(&recs[4], MP_REC_ALLOC, 0xc0, 4);
}

Test(snapshot, heap_records_before_it_skipped_under_its_stack_kept)
{
	struct mp_record recs[16];
	struct mp_consumer *c;

	before_and_after();
	cr_assert_eq(mp_consumer_open_mem(m.mem, m.len, &c), 0);
	assert_after(recs, drain(c, recs, 16));
	mp_consumer_free(c);
}

static int collect_cb(void *ctx, uint32_t ring, const struct mp_record *rec)
{
	struct mp_record *recs = ctx;
	size_t i = 0;

	(void)ring;
	while (recs[i].type)
		i++;
	recs[i] = *rec;
	return 0;
}

/* The daemon's reader applies the same rule, also to a heap record that
 * comes with its call stack (STACK record and continuation slots). */
Test(snapshot, the_same_straight_from_the_slots_and_with_stacks)
{
	struct mp_record recs[16] = { 0 };
	struct mp_consumer *c;
	struct mp_slot *s;

	before_and_after();
	/* "gone"'s allocation with a stack of 8 bytes: STACK at 1, one
	 * continuation slot at 2, the ALLOC at 3; the rest two further on */
	for (uint64_t pos = 8; pos >= 1; pos--)
		m.slots[pos + 2] = m.slots[pos], m.slots[pos + 2].seq = pos + 3;
	s = img_put(&m, 1, MP_REC_STACK, 9, 3, 0, 0);
	s->dims[0] = 0x400000;
	s->dims[3] = 8;
	img_put(&m, 2, 0, 0, 0, 0, 0);
	put_heap(3, MP_REC_ALLOC, 3, 0xa0);
	cr_assert_eq(mp_consumer_open_mem(m.mem, m.len, &c), 0);
	cr_assert_eq(mp_consumer_read_rings_at(c, 64, test_now_ns(), collect_cb, recs), 5);
	assert_after(recs, 5);
	mp_consumer_free(c);
}

/* With the options, the interposer is on (mode, interval, stacks, a new
 * epoch) before the snapshot is taken, and nothing is written into the
 * ring before the caller's before_attach has run. A writer thread holds
 * thread slot 0 odd (a marker in progress) until it sees the attach, and
 * then notes what the header says, and writes a heap record under the
 * snapshot's stack: the open kernel's synthesised begin (begun while
 * detached: no time) comes before it. */
static uint32_t seen_mode, seen_stack;
static uint64_t heap_ts;

static void *writer(void *arg)
{
	(void)arg;
	while (!__atomic_load_n(&m.h->attached, __ATOMIC_ACQUIRE))
		;
	seen_mode = __atomic_load_n(&m.h->alloc_mode, __ATOMIC_ACQUIRE);
	seen_stack = __atomic_load_n(&m.h->alloc_stack_bytes, __ATOMIC_RELAXED);
	/* the snapshot is still spinning on our odd gen: a heap record now
	 * is one the snapshot precedes only in time, not in stack */
	heap_ts = test_now_ns();
	put_heap(0, MP_REC_ALLOC, 5, 0xd0);
	m.slots[0].ts_ns = heap_ts;
	__atomic_store_n(&m.thr[0].gen, 10, __ATOMIC_RELEASE);
	return NULL;
}

static int before_calls;

static int before(void *ctx, struct mp_consumer *c)
{
	cr_assert_eq(ctx, &m);
	cr_assert_not_null(c);
	cr_assert_eq(m.h->attached, 0, "attached before before_attach");
	cr_assert_eq(m.h->alloc_mode, MP_ALLOC_OFF, "interposer on before before_attach");
	before_calls++;
	return 0;
}

Test(snapshot, interposer_on_before_it)
{
	struct mp_consumer_opts o = { .alloc_mode = MP_ALLOC_SAMPLED,
				      .alloc_sample_bytes = 4096,
				      .alloc_stack_bytes = 512,
				      .before_attach = before,
				      .ctx = &m };
	struct mp_record recs[16];
	struct mp_consumer *c;
	pthread_t th;
	size_t n = 0;

	/* The snapshot waits for the odd slot a bounded time (thousands of
	 * spins and 256 yields): on a loaded machine the writer may not run
	 * meanwhile, and the slot is then left out (got one record). */
	for (int attempt = 0; attempt < 50 && n != 2; attempt++) {
		if (attempt) {
			mp_consumer_free(c);
			teardown();
			setup();
		}
		m.thr[0].state = 1;
		m.thr[0].tid = 9;
		m.thr[0].gen = 9; /* a marker in progress: "k" is being begun */
		m.thr[0].depth = 1;
		m.thr[0].kernels[0] = (struct mp_frame){ .name_id = 1, .ts_ns = 0 };
		before_calls = 0;
		cr_assert_eq(pthread_create(&th, NULL, writer, NULL), 0);
		cr_assert_eq(mp_consumer_open_mem_opts(m.mem, m.len, &o, &c), 0);
		cr_assert_eq(pthread_join(th, NULL), 0);
		cr_assert_eq(before_calls, 1);
		cr_assert_eq(seen_mode, MP_ALLOC_SAMPLED, "the interposer was off at the attach");
		cr_assert_eq(seen_stack, 512);
		cr_assert_eq(m.h->alloc_sample_bytes, 4096);
		cr_assert_eq(m.h->alloc_epoch, 1);
		n = drain(c, recs, 16);
	}
	cr_assert_eq(n, 2, "got %zu records", n);
	assert_rec(&recs[0],
		   &(struct exp_rec)REC(MP_REC_KERNEL_BEGIN,
					MP_REC_F_OPEN_AT_ATTACH | MP_REC_F_TS_UNKNOWN, "k"),
		   9, 0);
	assert_heap(&recs[1], MP_REC_ALLOC, 0xd0, 1);
	cr_assert_lt(recs[0].ts_ns, recs[1].ts_ns, "the kernel begins at %llu, after %llu",
		     (unsigned long long)recs[0].ts_ns, (unsigned long long)recs[1].ts_ns);
	mp_consumer_free(c);
	cr_assert_eq(m.h->alloc_mode, MP_ALLOC_OFF, "the interposer still on after the consumer");
}

static int refuse(void *ctx, struct mp_consumer *c)
{
	(void)ctx;
	(void)c;
	return -EPERM;
}

/* Bad options and a failing before_attach write nothing into the ring. */
Test(snapshot, bad_options_leave_the_ring_alone)
{
	struct mp_consumer_opts bad[] = {
		{ .alloc_mode = 3 },
		{ .alloc_mode = MP_ALLOC_SAMPLED },
		{ .alloc_mode = MP_ALLOC_PRECISE, .alloc_stack_bytes = MP_RING_STACK_MAX + 1 },
	};
	struct mp_consumer_opts fail = { .alloc_mode = MP_ALLOC_PRECISE, .before_attach = refuse };
	struct mp_consumer *c = NULL;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		cr_assert_eq(mp_consumer_open_mem_opts(m.mem, m.len, &bad[i], &c), -EINVAL, "%zu",
			     i);
	cr_assert_eq(mp_consumer_open_mem_opts(m.mem, m.len, &fail, &c), -EPERM);
	cr_assert_null(c);
	cr_assert_eq(m.h->attached, 0);
	cr_assert_eq(m.h->alloc_mode, MP_ALLOC_OFF);
	cr_assert_eq(m.h->alloc_stack_bytes, 0);
	cr_assert_eq(m.h->alloc_epoch, 0);
}
