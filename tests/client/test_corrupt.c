/* SPDX-License-Identifier: MIT */
/* The consumer treats the ring as hostile: errors, never crashes or hangs. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

#include "ring_image.h"
#include "ring_test.h"

static struct img m;

static void setup(void)
{
	img_init(&m, 8, 4, 16, 256);
	img_str(&m, 0, 0, "?");
	img_str(&m, 1, 2, "conv");
	img_str(&m, 2, 7, "we\x7fi\tghts");
}

static void teardown(void)
{
	free(m.mem);
}

static int open_img(struct mp_consumer **c)
{
	return mp_consumer_open_mem(m.mem, m.len, c);
}

TestSuite(corrupt, .init = setup, .fini = teardown);

Test(corrupt, valid_image_reads_whole_records)
{
	struct mp_consumer *c;
	struct mp_record recs[8];
	struct mp_slot *s;

	img_put(&m, 0, MP_REC_KERNEL_BEGIN, 7, 5, 1, 1);
	s = img_put(&m, 1, MP_REC_INPUT_SHAPE, 7, 6, 1, 0);
	s->rank = 3;
	s->dims[0] = 1;
	s->dims[1] = -2;
	s->dims[2] = INT64_MAX;
	s->dims[3] = 99; /* beyond rank: not reported */
	img_put(&m, 2, MP_REC_TAG_BEGIN, 7, 7, 1, 2);
	img_put(&m, 3, MP_REC_KERNEL_END, 7, 8, 1, 0)->flags = MP_REC_F_THREAD_EXIT;
	cr_assert_eq(open_img(&c), 0);
	cr_assert_eq(mp_consumer_pid(c), 4242);
	cr_assert_eq(drain(c, recs, 8), 4);
	assert_rec(&recs[0], &(struct exp_rec)REC(MP_REC_KERNEL_BEGIN, 0, "conv"), 7, 0);
	assert_rec(&recs[1],
		   &(struct exp_rec)REC(MP_REC_INPUT_SHAPE, 0, NULL, .rank = 3,
					.dims = { 1, -2, INT64_MAX }),
		   7, 1);
	assert_rec(&recs[2], &(struct exp_rec)REC(MP_REC_TAG_BEGIN, 0, "we?i?ghts"), 7, 2);
	assert_rec(&recs[3], &(struct exp_rec)REC(MP_REC_KERNEL_END, MP_REC_F_THREAD_EXIT, NULL), 7,
		   3);
	for (int i = 0; i < 4; i++) {
		cr_assert_eq(recs[i].ts_ns, 1000 + (uint64_t)i);
		cr_assert_eq(recs[i].seq, 5 + (uint32_t)i);
	}
	/* the consumer never writes slots, only its position */
	cr_assert_eq(m.slots[8].seq, 1); /* ring 1, position 0 */
	cr_assert_eq(m.thr[1].tail, 4);
	cr_assert_eq(m.h->attached, 1);
	mp_consumer_free(c);
	cr_assert_eq(m.h->attached, 0);
}

Test(corrupt, snapshot_and_dedup_from_image)
{
	struct mp_consumer *c;
	struct mp_record recs[8];

	m.thr[2].state = 1;
	m.thr[2].tid = 9;
	m.thr[2].gen = 20; /* tseq 10 */
	m.thr[2].depth = 1000000; /* more than the stack: only 32 frames exist */
	for (int i = 0; i < 32; i++)
		m.thr[2].kernels[i] = (struct mp_frame){ .name_id = 1, .ts_ns = 50 + i };
	m.thr[2].kernels[0].ts_ns = 0; /* begun while detached */
	m.thr[2].tag_depth = 1;
	m.thr[2].tags[0] = (struct mp_frame){ .name_id = 2, .ts_ns = 60 };
	m.thr[1].gen = 7; /* odd forever: never stable, skipped */
	m.thr[1].depth = 1;
	/* the phase set last (highest order) wins, whichever thread set it */
	m.thr[0].tid = 8;
	m.thr[0].gen = 4;
	m.thr[0].phase_id = 1;
	m.thr[0].phase_ts = 40;
	m.thr[0].phase_order = 3;
	m.thr[3].phase_id = 2;
	m.thr[3].phase_order = 2;
	img_put(&m, 0, MP_REC_KERNEL_BEGIN, 9, 10, 2, 1); /* in the snapshot */
	img_put(&m, 1, MP_REC_KERNEL_END, 9, 11, 2, 1); /* after it */
	cr_assert_eq(open_img(&c), 0);
	cr_assert_eq(read_one(c, &recs[0]), 1);
	assert_rec(&recs[0], &(struct exp_rec)REC(MP_REC_PHASE, MP_REC_F_OPEN_AT_ATTACH, "conv"), 8,
		   0);
	cr_assert_eq(recs[0].ts_ns, 40);
	cr_assert_eq(recs[0].seq, 2);
	for (int i = 0; i < 32; i++) {
		cr_assert_eq(read_one(c, &recs[0]), 1);
		assert_rec(&recs[0],
			   &(struct exp_rec)REC(
				   MP_REC_KERNEL_BEGIN,
				   MP_REC_F_OPEN_AT_ATTACH | (i ? 0 : MP_REC_F_TS_UNKNOWN), "conv"),
			   9, (size_t)i);
		cr_assert_eq(recs[0].seq, 10);
		if (i)
			cr_assert_eq(recs[0].ts_ns, 50 + (uint64_t)i);
	}
	cr_assert_eq(drain(c, recs, 8), 2);
	assert_rec(&recs[0],
		   &(struct exp_rec)REC(MP_REC_TAG_BEGIN, MP_REC_F_OPEN_AT_ATTACH, "we?i?ghts"), 9,
		   0);
	cr_assert_eq(recs[0].ts_ns, 60);
	assert_rec(&recs[1], &(struct exp_rec)REC(MP_REC_KERNEL_END, 0, NULL), 9, 1);
	cr_assert_eq(recs[1].seq, 11);
	mp_consumer_free(c);
}

Test(corrupt, wrapped_indices)
{
	struct mp_consumer *c;
	struct mp_record recs[16];
	uint64_t start = UINT64_MAX - 2;

	m.thr[0].tail = start;
	/* the thread's record numbers wrap too */
	m.thr[0].gen = 2ull * (UINT32_MAX - 2);
	for (uint64_t i = 0; i < 6; i++)
		img_put(&m, start + i, MP_REC_KERNEL_BEGIN, 1, (uint32_t)(UINT32_MAX - 1 + i), 0,
			1);
	cr_assert_eq(open_img(&c), 0);
	cr_assert_eq(drain(c, recs, 16), 6);
	for (int i = 0; i < 6; i++) {
		assert_rec(&recs[i], &(struct exp_rec)REC(MP_REC_KERNEL_BEGIN, 0, "conv"), 1,
			   (size_t)i);
		cr_assert_eq(recs[i].seq, (uint32_t)(UINT32_MAX - 1 + (uint32_t)i));
	}
	cr_assert_eq(m.thr[0].tail, start + 6);
	mp_consumer_free(c);
}

/* Header corruption is refused at open with the right error. */
#define HDR_CASES(X)                                         \
	X(-EBADMSG, h->magic ^= 1)                           \
	X(-EPROTO, h->abi_version = MP_RING_ABI_VERSION + 1) \
	X(-EPROTO, h->abi_version = 0)                       \
	X(-EBADMSG, h->hdr_size = 8)                         \
	X(-EBADMSG, h->slot_size = 64)                       \
	X(-EBADMSG, h->thread_size = 0)                      \
	X(-EBADMSG, h->slot_count = 6)                       \
	X(-EBADMSG, h->slot_count = 0)                       \
	X(-EBADMSG, h->slot_count = 1u << 31)                \
	X(-EBADMSG, h->thread_count = 0)                     \
	X(-EBADMSG, h->thread_count = 1u << 30)              \
	X(-EBADMSG, h->str_max = 0)                          \
	X(-EBADMSG, h->str_max = UINT32_MAX)                 \
	X(-EBADMSG, h->blob_size = UINT32_MAX)               \
	X(-EBADMSG, h->total_size = UINT64_MAX)              \
	X(-EBADMSG, h->ring_off = UINT64_MAX - 64)           \
	X(-EBADMSG, h->ring_off = 8)                         \
	X(-EBADMSG, h->threads_off = h->ring_off)            \
	X(-EBADMSG, h->blob_off = h->strent_off)             \
	X(-EBADMSG, h->strent_off = h->total_size)           \
	X(-EBADMSG, h->strent_off += 3)                      \
	X(-EBADMSG, h->blob_off = h->total_size - 1)

static void hdr_mutate(size_t i, struct mp_ring_hdr *h)
{
	size_t n = 0;

#define X(e, body)      \
	if (i == n++) { \
		body;   \
		return; \
	}
	HDR_CASES(X)
#undef X
}

Test(corrupt, bad_headers)
{
	static const struct {
		const char *what;
		int err;
	} cases[] = {
#define X(e, body) { #body, e },
		HDR_CASES(X)
#undef X
	};
	struct mp_consumer *c;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct mp_ring_hdr saved = *m.h;
		int r;

		hdr_mutate(i, m.h);
		c = NULL;
		r = open_img(&c);
		cr_assert_eq(r, cases[i].err, "%s: got %d, expected %d", cases[i].what, r,
			     cases[i].err);
		cr_assert_null(c);
		*m.h = saved;
	}
	cr_assert_eq(mp_consumer_open_mem(m.mem, sizeof(struct mp_ring_hdr) - 1, &c), -EBADMSG);
	cr_assert_eq(mp_consumer_open_mem(m.mem, m.len - 1, &c), -EBADMSG);
}

/* Corrupted records: -EBADMSG after the valid record before them, and the
 * consumer stays failed. */
#define REC_CASES(X)                                             \
	X(MP_REC_KERNEL_BEGIN, s->name_id = 16)                  \
	X(MP_REC_KERNEL_BEGIN, s->name_id = UINT32_MAX)          \
	X(MP_REC_PHASE, s->name_id = 5) /* never published */    \
	X(MP_REC_KERNEL_END, s->type = 0)                        \
	X(MP_REC_KERNEL_END, s->type = 200)                      \
	X(MP_REC_INPUT_SHAPE, s->rank = 9)                       \
	X(MP_REC_OUTPUT_SHAPE, s->rank = 255)                    \
	X(MP_REC_KERNEL_END, s->rank = 1)                        \
	X(MP_REC_KERNEL_BEGIN, s->flags = MP_REC_F_THREAD_EXIT)  \
	X(MP_REC_KERNEL_END, s->flags = MP_REC_F_OPEN_AT_ATTACH) \
	X(MP_REC_KERNEL_END, s->flags = 0x80)                    \
	X(MP_REC_KERNEL_END, s->seq = 1 + 8 * 5) /* a later lap: ahead */

static void rec_mutate(size_t i, struct mp_slot *s)
{
	size_t n = 0;

#define X(t, body)      \
	if (i == n++) { \
		body;   \
		return; \
	}
	REC_CASES(X)
#undef X
}

Test(corrupt, bad_records)
{
	static const struct {
		const char *what;
		uint8_t type;
	} cases[] = {
#define X(t, body) { #body, t },
		REC_CASES(X)
#undef X
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct mp_consumer *c;
		struct mp_record rec;
		int r;

		memset(m.slots, 0, 8 * sizeof(struct mp_slot));
		m.thr[0].tail = 0;
		img_put(&m, 0, MP_REC_KERNEL_BEGIN, 3, 1, 0, 1);
		rec_mutate(i, img_put(&m, 1, cases[i].type, 3, 2, 0, 1));
		cr_assert_eq(open_img(&c), 0);
		cr_assert_eq(read_one(c, &rec), 1, "%s", cases[i].what);
		r = read_one(c, &rec);
		cr_assert_eq(r, -EBADMSG, "%s: got %d", cases[i].what, r);
		cr_assert_eq(read_one(c, &rec), -EBADMSG, "%s: not sticky", cases[i].what);
		mp_consumer_free(c);
	}
}

Test(corrupt, bad_string_entries)
{
	const mp_strent bad[] = {
		((uint64_t)0 << 32) | 1000, /* longer than MP_NAME_MAX */
		((uint64_t)250 << 32) | 10, /* past the blob end */
		((uint64_t)UINT32_MAX << 32) | 2, /* offset far out */
		((uint64_t)0 << 32) | 0, /* unpublished */
		((uint64_t)0 << 32) | UINT32_MAX, /* len + 1 wraps */
	};

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct mp_consumer *c;
		struct mp_record rec;

		m.thr[0].tail = 0;
		memset(m.slots, 0, 8 * sizeof(struct mp_slot));
		m.ent[3] = bad[i];
		img_put(&m, 0, MP_REC_KERNEL_BEGIN, 3, 1, 0, 3);
		cr_assert_eq(open_img(&c), 0);
		cr_assert_eq(read_one(c, &rec), -EBADMSG, "entry %zu", i);
		mp_consumer_free(c);

		/* the same id in an attach snapshot fails the open */
		memset(m.thr, 0, sizeof(struct mp_thread));
		m.thr[0].depth = 1;
		m.thr[0].kernels[0].name_id = 3;
		cr_assert_eq(open_img(&c), -EBADMSG, "snapshot entry %zu", i);
		m.thr[0].depth = 0;
	}
}

/* A record as the consumer must hand it out, whatever the ring held. */
static void assert_sane(const struct mp_record *r, int iter)
{
	cr_assert(r->type >= MP_REC_KERNEL_BEGIN && r->type <= MP_REC_TAG_END,
		  "iter %d: record type %u", iter, r->type);
	cr_assert_leq(r->rank, MP_MAX_RANK, "iter %d", iter);
	if (!r->name)
		return;
	for (size_t i = 0; r->name[i]; i++) {
		cr_assert_leq(i, MP_NAME_MAX, "iter %d: name too long", iter);
		cr_assert(r->name[i] >= 0x20 && r->name[i] < 0x7f, "iter %d: byte %#x in a name",
			  iter, (unsigned)(unsigned char)r->name[i]);
	}
}

/* Random bytes, with and without a valid header in front: never a crash,
 * an open that succeeds or refuses with -EBADMSG / -EPROTO, only sane
 * records, and every consumer runs dry within its read budget (the image
 * holds 4 rings of 8 slots and 4 thread slots of at most 32 + 16 open
 * frames and a phase). Both outcomes of the open occur. */
Test(corrupt, random_images)
{
	enum { READ_BUDGET = 4 * 8 + 4 * (32 + 16 + 1) + 1 };
	unsigned seed = 12345, opened = 0, refused = 0, records = 0;

	for (int iter = 0; iter < 3000; iter++) {
		struct mp_consumer *c;
		struct mp_record rec;
		int n, r;

		for (size_t i = 0; i < m.len; i++)
			m.mem[i] = (unsigned char)rand_r(&seed);
		if (iter % 3) {
			struct img fresh;

			img_init(&fresh, 8, 4, 16, 256);
			memcpy(m.mem, fresh.mem, iter % 2 ? sizeof(struct mp_ring_hdr) : 64);
			free(fresh.mem);
		}
		r = open_img(&c);
		cr_assert(r == 0 || r == -EBADMSG || r == -EPROTO, "iter %d: open: %d", iter, r);
		if (r < 0) {
			refused++;
			continue;
		}
		opened++;
		for (n = 0; n < READ_BUDGET; n++) {
			r = read_one(c, &rec);
			if (r <= 0)
				break;
			assert_sane(&rec, iter);
			records++;
		}
		cr_assert_lt(n, READ_BUDGET, "iter %d: the consumer never ran dry", iter);
		cr_assert(r == 0 || r == -EBADMSG, "iter %d: read: %d", iter, r);
		(void)mp_consumer_drops(c);
		mp_consumer_free(c);
	}
	cr_assert_gt(opened, 0);
	cr_assert_gt(refused, 0);
	cr_log_info("random_images: %u opened, %u refused, %u records", opened, refused, records);
}

static volatile int scribbling;

static void *scribbler(void *arg)
{
	unsigned seed = 99;

	(void)arg;
	while (scribbling) {
		size_t i = (size_t)rand_r(&seed) % m.len;

		if (i >= sizeof(struct mp_ring_hdr) || rand_r(&seed) % 8 == 0)
			m.mem[i] = (unsigned char)rand_r(&seed);
	}
	return NULL;
}

/* The producer rewrites the memory while the consumer reads it. */
Test(corrupt, concurrent_scribbling)
{
	pthread_t th;

	scribbling = 1;
	cr_assert_eq(pthread_create(&th, NULL, scribbler, NULL), 0);
	for (int iter = 0; iter < 2000; iter++) {
		struct mp_consumer *c;
		struct mp_record rec;

		for (uint64_t p = 0; p < 8; p++)
			img_put(&m, (uint64_t)iter * 8 + p, MP_REC_KERNEL_BEGIN, 1, 1, 0, 1);
		m.thr[0].tail = (uint64_t)iter * 8;
		if (open_img(&c) < 0)
			continue;
		for (int n = 0; n < 100; n++)
			if (read_one(c, &rec) <= 0)
				break;
		mp_consumer_free(c);
	}
	scribbling = 0;
	pthread_join(th, NULL);
}

/* enum mp_alloc_fn (bpf/memprof_events.h, not on this test's path) */
enum { FN_MALLOC = 0, FN_REALLOC = 2, FN_FREE = 4 };

struct rings_seen {
	struct mp_record rec[16];
	uint32_t ring[16];
	int n;
};

static int rings_cb(void *ctx, uint32_t ring, const struct mp_record *rec)
{
	struct rings_seen *s = ctx;

	cr_assert_lt(s->n, 16);
	s->rec[s->n] = *rec;
	s->ring[s->n++] = ring;
	return 0;
}

/* The daemon's fast path: each ring's records in order with their ring
 * index, a heap record after a marker carries no stale name or shape,
 * and corruption is reported after the good records, sticky. */
Test(corrupt, read_rings_by_ring_then_corruption)
{
	struct rings_seen s = { 0 };
	struct mp_consumer *c;
	struct mp_slot *sl;

	img_put(&m, 0, MP_REC_KERNEL_BEGIN, 7, 5, 1, 1);
	sl = img_put(&m, 1, MP_REC_ALLOC, 7, 5, 1, FN_MALLOC);
	sl->dims[0] = 0x1000;
	sl->dims[1] = 32;
	sl->dims[2] = 0x401000;
	sl = img_put(&m, 0, MP_REC_FREE, 9, 1, 3, FN_FREE);
	sl->dims[0] = 0x1000;
	sl = img_put(&m, 1, MP_REC_INPUT_SHAPE, 9, 2, 3, 0);
	sl->rank = 1;
	sl->dims[0] = 4;
	sl = img_put(&m, 2, MP_REC_REALLOC, 9, 2, 3, FN_REALLOC);
	sl->dims[0] = 0x2000;
	sl->dims[1] = 64;
	sl->dims[3] = 0x3000;
	img_put(&m, 3, MP_REC_KERNEL_END, 9, 3, 3, 0)->rank = 2; /* corrupt */
	cr_assert_eq(open_img(&c), 0);
	cr_assert_eq(mp_consumer_read_rings_at(c, 64, test_now_ns(), rings_cb, &s), 5);
	cr_assert_eq(s.n, 5);
	cr_assert_eq(s.ring[0], 1);
	cr_assert_eq(s.rec[0].type, MP_REC_KERNEL_BEGIN);
	cr_assert_str_eq(s.rec[0].name, "conv");
	cr_assert_eq(s.ring[1], 1);
	cr_assert_eq(s.rec[1].type, MP_REC_ALLOC);
	cr_assert_null(s.rec[1].name, "no stale name from the marker before");
	cr_assert_eq(s.rec[1].heap.addr, 0x1000);
	cr_assert_eq(s.rec[1].heap.size, 32);
	cr_assert_eq(s.rec[1].heap.caller, 0x401000);
	cr_assert_eq(s.rec[1].fn, FN_MALLOC);
	cr_assert_eq(s.ring[2], 3);
	cr_assert_eq(s.rec[2].type, MP_REC_FREE);
	cr_assert_eq(s.rec[3].rank, 1);
	cr_assert_eq(s.rec[4].type, MP_REC_REALLOC);
	cr_assert_eq(s.rec[4].rank, 0, "no stale shape from the record before");
	cr_assert_eq(s.rec[4].dims[1], 64);
	cr_assert_eq(s.rec[4].heap.old_addr, 0x3000);
	cr_assert_eq(mp_consumer_read_rings_at(c, 64, test_now_ns(), rings_cb, &s), -EBADMSG);
	cr_assert_eq(mp_consumer_read_rings_at(c, 64, test_now_ns(), rings_cb, &s), -EBADMSG,
		     "sticky");
	cr_assert(mp_consumer_corruption(c) & MP_CONSUMER_CORRUPT_RECORDS);
	mp_consumer_free(c);
}
