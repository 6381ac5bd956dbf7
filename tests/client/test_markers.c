/* SPDX-License-Identifier: MIT */
/* Whole-record checks of a known marker sequence through the real ring. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "memprof.h"
#include "ring_test.h"

#define S(...) .rank = sizeof((int64_t[]){ __VA_ARGS__ }) / sizeof(int64_t), .dims = { __VA_ARGS__ }

static bool ring_lazy(void)
{
	const char *lazy = getenv("MEMPROF_RING_LAZY");

	return lazy && lazy[0] == '1';
}

Test(markers, sequence)
{
	static const int64_t in0[] = { 2, 3 }, in1[] = { 4 };
	static const int64_t out[] = { 1, 2, 3, 4, 5, 6, 7, 8 };
	const struct exp_rec exp[] = {
		REC(MP_REC_PHASE, MP_REC_F_OPEN_AT_ATTACH, "load"),
		REC(MP_REC_KERNEL_BEGIN, 0, "outer"),
		REC(MP_REC_INPUT_SHAPE, 0, NULL, S(2, 3)),
		REC(MP_REC_INPUT_SHAPE, 0, NULL, S(4)),
		REC(MP_REC_KERNEL_BEGIN, 0, "inner ? name"),
		REC(MP_REC_OUTPUT_SHAPE, 0, NULL, .rank = 0),
		REC(MP_REC_KERNEL_END, 0, NULL),
		REC(MP_REC_TAG_BEGIN, 0, "weights"),
		REC(MP_REC_KERNEL_BEGIN, 0, "outer"),
		REC(MP_REC_KERNEL_END, 0, NULL),
		REC(MP_REC_TAG_END, 0, NULL),
		REC(MP_REC_OUTPUT_SHAPE, 0, NULL, S(1, 2, 3, 4, 5, 6, 7, 8)),
		REC(MP_REC_KERNEL_END, 0, NULL),
		REC(MP_REC_PHASE, 0, "inference"),
		REC(MP_REC_KERNEL_BEGIN, 0, "scoped"),
		REC(MP_REC_KERNEL_END, 0, NULL),
	};
	const size_t n_exp = sizeof(exp) / sizeof(exp[0]);
	struct mp_record recs[64];
	struct mp_consumer *c;
	char inner[] = "inner \x01 name";
	uint64_t t0, t1;
	size_t n;

	/* Before any marker: with MEMPROF_RING_LAZY=1 (how meson runs this)
	 * there is no ring yet; otherwise it exists from load time on, empty. */
	if (ring_lazy()) {
		cr_assert_eq(mp_consumer_open_pid(getpid(), &c), -ENOENT);
	} else {
		cr_assert_eq(mp_consumer_open_pid(getpid(), &c), 0);
		cr_assert_eq(read_one(c, &recs[0]), 0);
		mp_consumer_free(c);
	}
	t0 = test_now_ns();
	cr_assert_eq(memprof_phase("load"), 0);
	cr_assert_eq(mp_consumer_open_pid(getpid(), &c), 0);
	cr_assert_eq(mp_consumer_pid(c), getpid());

	cr_assert_eq(memprof_kernel_begin("outer"), 0);
	cr_assert_eq(memprof_kernel_input_shape(in0, 2), 0);
	cr_assert_eq(memprof_kernel_input_shape(in1, 1), 0);
	cr_assert_eq(memprof_kernel_begin(inner), 0);
	cr_assert_eq(memprof_kernel_output_shape(NULL, 0), 0);
	cr_assert_eq(memprof_kernel_end(), 0);
	cr_assert_eq(memprof_tag_begin("weights"), 0);
	cr_assert_eq(memprof_kernel_begin("outer"), 0);
	cr_assert_eq(memprof_kernel_end(), 0);
	cr_assert_eq(memprof_tag_end(), 0);
	cr_assert_eq(memprof_kernel_output_shape(out, 8), 0);
	cr_assert_eq(memprof_kernel_end(), 0);
	cr_assert_eq(memprof_phase("inference"), 0);
	{
		MEMPROF_KERNEL("scoped");
	}
	t1 = test_now_ns();

	n = drain(c, recs, 64);
	cr_assert_eq(n, n_exp, "got %zu records, expected %zu", n, n_exp);
	for (size_t i = 0; i < n; i++) {
		assert_rec(&recs[i], &exp[i], (uint32_t)gettid(), i);
		cr_assert(recs[i].ts_ns >= t0 && recs[i].ts_ns <= t1, "record %zu: ts out of range",
			  i);
		if (i > 0) {
			cr_assert_geq(recs[i].ts_ns, recs[i - 1].ts_ns, "record %zu: ts goes back",
				      i);
			/* one record number per marker, none lost */
			cr_assert_eq(recs[i].seq, recs[i - 1].seq + 1, "record %zu: seq", i);
		}
	}
	/* the name buffer changes under the same pointer: the cache notices */
	inner[0] = 'X';
	cr_assert_eq(memprof_kernel_begin(inner), 0);
	cr_assert_eq(memprof_kernel_end(), 0);
	n = drain(c, recs, 64);
	cr_assert_eq(n, 2);
	assert_rec(&recs[0], &(struct exp_rec)REC(MP_REC_KERNEL_BEGIN, 0, "Xnner ? name"),
		   (uint32_t)gettid(), 0);
	assert_rec(&recs[1], &(struct exp_rec)REC(MP_REC_KERNEL_END, 0, NULL), (uint32_t)gettid(),
		   1);
	cr_assert_eq(mp_consumer_drops(c), 0);
	cr_assert_eq(memprof_dropped(), 0);
	mp_consumer_free(c);
}

Test(markers, errors_record_nothing)
{
	int64_t dims[MEMPROF_MAX_RANK + 1] = { 0 };
	struct mp_record rec;
	struct mp_consumer *c;

	cr_assert_eq(memprof_kernel_end(), -EINVAL);
	cr_assert_eq(mp_consumer_open_pid(getpid(), &c), 0);
	cr_assert_eq(memprof_kernel_begin(NULL), -EINVAL);
	cr_assert_eq(memprof_tag_begin(NULL), -EINVAL);
	cr_assert_eq(memprof_phase(NULL), -EINVAL);
	cr_assert_eq(memprof_tag_end(), -EINVAL);
	cr_assert_eq(memprof_kernel_input_shape(dims, 1), -EINVAL); /* no open kernel */
	cr_assert_eq(memprof_kernel_begin("k"), 0);
	cr_assert_eq(memprof_kernel_input_shape(dims, MEMPROF_MAX_RANK + 1), -E2BIG);
	cr_assert_eq(memprof_kernel_input_shape(dims, -1), -EINVAL);
	cr_assert_eq(memprof_kernel_output_shape(NULL, 2), -EINVAL);
	cr_assert_eq(memprof_kernel_end(), 0);
	cr_assert_eq(memprof_kernel_end(), -EINVAL);
	cr_assert_eq(read_one(c, &rec), 1);
	assert_rec(&rec, &(struct exp_rec)REC(MP_REC_KERNEL_BEGIN, 0, "k"), (uint32_t)gettid(), 0);
	cr_assert_eq(read_one(c, &rec), 1);
	assert_rec(&rec, &(struct exp_rec)REC(MP_REC_KERNEL_END, 0, NULL), (uint32_t)gettid(), 1);
	cr_assert_eq(read_one(c, &rec), 0);
	mp_consumer_free(c);
}

Test(markers, version_and_strerror)
{
	cr_assert_str_eq(memprof_version(), "0.1.0");
	cr_assert_str_eq(memprof_strerror(-ENOSPC), "ring full, record dropped and counted");
	cr_assert_str_eq(memprof_strerror(-E2BIG), "shape rank larger than MEMPROF_MAX_RANK");
	cr_assert_str_eq(memprof_strerror(-12345), "unknown error");
	cr_assert_str_eq(mp_record_type_name(MP_REC_TAG_END), "tag_end");
	cr_assert_str_eq(mp_record_type_name(99), "unknown");
	cr_assert_eq(mp_consumer_open_pid(0x3fffffff, &(struct mp_consumer *){ NULL }), -ESRCH);
}

Test(markers, long_names_are_truncated)
{
	char name[400];
	struct mp_record rec;
	struct mp_consumer *c;

	memset(name, 'a', sizeof(name) - 1);
	name[sizeof(name) - 1] = '\0';
	cr_assert_eq(memprof_phase("p"), 0);
	cr_assert_eq(mp_consumer_open_pid(getpid(), &c), 0);
	cr_assert_eq(read_one(c, &rec), 1); /* open-at-attach phase */
	for (int i = 0; i < 3; i++) {
		cr_assert_eq(memprof_kernel_begin(name), 0);
		cr_assert_eq(memprof_kernel_end(), 0);
		cr_assert_eq(read_one(c, &rec), 1);
		cr_assert_eq(rec.type, MP_REC_KERNEL_BEGIN);
		cr_assert_eq(strlen(rec.name), 255);
		cr_assert_eq(strncmp(rec.name, name, 255), 0);
		cr_assert_eq(read_one(c, &rec), 1);
		cr_assert_eq(rec.type, MP_REC_KERNEL_END);
	}
	mp_consumer_free(c);
}

/* The first marker of a thread registers it (syscalls) but leaves errno
 * alone. */
Test(markers, first_marker_keeps_errno)
{
	errno = 4242;
	cr_assert_eq(memprof_kernel_begin("k"), 0);
	cr_assert_eq(errno, 4242);
	cr_assert_eq(memprof_kernel_end(), 0);
	cr_assert_eq(errno, 4242);
}

/* One begin/end pair named by the bytes at @name now: the consumer must
 * see exactly those bytes. */
static void check_name(struct mp_consumer *c, const char *name)
{
	struct mp_record recs[4];
	char want[64];

	snprintf(want, sizeof(want), "%s", name);
	cr_assert_eq(memprof_kernel_begin(name), 0);
	cr_assert_eq(memprof_kernel_end(), 0);
	cr_assert_eq(drain(c, recs, 4), 2);
	cr_assert_eq(recs[0].type, MP_REC_KERNEL_BEGIN);
	cr_assert_str_eq(recs[0].name, want, "name of %zu bytes at offset %zu", strlen(want),
			 (size_t)((uintptr_t)name & 7));
}

/* A cached short name is compared a word at a time: at every alignment and
 * length, a name whose NUL is within 8 bytes of an unreadable page is read
 * without a fault, and a change of one byte, a shorter and a longer string
 * under the same pointer are all seen. */
Test(markers, cached_names_every_alignment)
{
	size_t pg = (size_t)sysconf(_SC_PAGESIZE);
	char *map = mmap(NULL, 2 * pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	struct mp_record rec;
	struct mp_consumer *c;

	cr_assert_neq(map, MAP_FAILED);
	cr_assert_eq(mprotect(map + pg, pg, PROT_NONE), 0);
	cr_assert_eq(memprof_phase("p"), 0);
	cr_assert_eq(mp_consumer_open_pid(getpid(), &c), 0);
	cr_assert_eq(read_one(c, &rec), 1); /* open-at-attach phase */
	for (size_t len = 0; len <= 20; len++) {
		for (size_t k = 0; k < 8; k++) {
			/* at the page's end, then in its middle (room to grow) */
			char *at[2] = { map + pg - 1 - k - len, map + 256 + k };

			for (int w = 0; w < 2; w++) {
				char *p = at[w];

				for (size_t i = 0; i < len; i++)
					p[i] = (char)('a' + (i + k) % 26);
				p[len] = '\0';
				check_name(c, p);
				check_name(c, p); /* the cached entry */
				if (len) {
					p[len / 2] = 'Z';
					check_name(c, p);
					p[len - 1] = '\0';
					check_name(c, p);
					p[len - 1] = 'Y';
				}
				if (w == 1) {
					p[len] = 'X';
					p[len + 1] = '\0';
					check_name(c, p);
				}
			}
		}
	}
	cr_assert_eq(mp_consumer_drops(c), 0);
	mp_consumer_free(c);
	munmap(map, 2 * pg);
}
