/* SPDX-License-Identifier: MIT */
/*
 * The pools API through the real ring: every record read back whole, the
 * argument checks, and nothing written while no consumer is attached.
 */
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "memprof.h"
#include "../client/ring_test.h"

static void expect_pool_rec(const struct mp_record *r, uint32_t type, const char *name,
			    uint32_t kind, uint64_t addr, uint64_t size)
{
	cr_assert_eq(r->type, type, "type %s, want %s", mp_record_type_name(r->type),
		     mp_record_type_name(type));
	cr_assert_str_eq(r->name, name);
	cr_assert_eq(r->tid, (uint32_t)gettid());
	cr_assert_eq(r->flags, 0);
	cr_assert_eq(r->rank, 0);
	cr_assert_eq(r->pool.kind, kind);
	cr_assert_eq(r->pool.addr, addr);
	cr_assert_eq(r->pool.size, size);
	/* the caller is this test, never libmemprof */
	if (type != MP_REC_POOL_DECLARE)
		cr_assert_neq(r->pool.caller, 0);
	else
		cr_assert_eq(r->pool.caller, 0);
}

Test(pools_ring, records_read_back_whole)
{
	static char arena[4096];
	struct mp_record recs[16];
	struct mp_consumer *c;
	int host, dev;

	/* nothing attached: accepted, nothing written */
	host = memprof_pool_declare("arena", MEMPROF_POOL_HOST);
	cr_assert_gt(host, 0);
	cr_assert_eq(memprof_pool_alloc(host, arena, 16), 0);
	cr_assert_eq(mp_consumer_open_pid(getpid(), &c), 0);
	cr_assert_eq(drain(c, recs, 16), 0);

	cr_assert_eq(memprof_pool_declare("arena", MEMPROF_POOL_HOST), host);
	dev = memprof_pool_declare("gpu0", MEMPROF_POOL_DEVICE);
	cr_assert_gt(dev, 0);
	cr_assert_neq(dev, host);
	cr_assert_eq(memprof_kernel_begin("k"), 0);
	cr_assert_eq(memprof_pool_alloc(host, arena + 64, 100), 0);
	cr_assert_eq(memprof_pool_alloc(dev, (void *)0x7f0000001000ull, 1ull << 33), 0);
	cr_assert_eq(memprof_pool_free(host, arena + 64), 0);
	cr_assert_eq(memprof_pool_free(host, NULL), 0); /* like free(NULL): nothing */
	cr_assert_eq(memprof_pool_reset(dev), 0);
	cr_assert_eq(memprof_kernel_end(), 0);

	cr_assert_eq(drain(c, recs, 16), 8);
	expect_pool_rec(&recs[0], MP_REC_POOL_DECLARE, "arena", MP_POOL_KIND_HOST, 0, 0);
	expect_pool_rec(&recs[1], MP_REC_POOL_DECLARE, "gpu0", MP_POOL_KIND_DEVICE, 0, 0);
	cr_assert_eq(recs[2].type, MP_REC_KERNEL_BEGIN);
	expect_pool_rec(&recs[3], MP_REC_POOL_ALLOC, "arena", MP_POOL_KIND_HOST,
			(uint64_t)(uintptr_t)(arena + 64), 100);
	expect_pool_rec(&recs[4], MP_REC_POOL_ALLOC, "gpu0", MP_POOL_KIND_DEVICE, 0x7f0000001000ull,
			1ull << 33);
	expect_pool_rec(&recs[5], MP_REC_POOL_FREE, "arena", MP_POOL_KIND_HOST,
			(uint64_t)(uintptr_t)(arena + 64), 0);
	expect_pool_rec(&recs[6], MP_REC_POOL_RESET, "gpu0", MP_POOL_KIND_DEVICE, 0, 0);
	cr_assert_eq(recs[7].type, MP_REC_KERNEL_END);
	for (int i = 1; i < 8; i++)
		cr_assert_geq(recs[i].ts_ns, recs[i - 1].ts_ns);
	mp_consumer_free(c);
}

Test(pools_ring, bad_arguments)
{
	int host = memprof_pool_declare("p", MEMPROF_POOL_HOST);
	char x;

	cr_assert_gt(host, 0);
	cr_assert_eq(memprof_pool_declare(NULL, MEMPROF_POOL_HOST), -EINVAL);
	cr_assert_eq(memprof_pool_declare("p", 2), -EINVAL);
	cr_assert_eq(memprof_pool_declare("p", -1), -EINVAL);
	cr_assert_eq(memprof_pool_alloc(host, NULL, 1), -EINVAL);
	cr_assert_eq(memprof_pool_alloc(0, &x, 1), -EINVAL);
	cr_assert_eq(memprof_pool_alloc(-5, &x, 1), -EINVAL);
	cr_assert_eq(memprof_pool_alloc(host | (2 << 24), &x, 1), -EINVAL);
	cr_assert_eq(memprof_pool_alloc(1 << 24, &x, 1), -EINVAL); /* no name */
	cr_assert_eq(memprof_pool_free(0, &x), -EINVAL);
	cr_assert_eq(memprof_pool_reset(-1), -EINVAL);
	cr_assert_str_eq(memprof_strerror(-EINVAL), "invalid argument or no open kernel/tag");
}
