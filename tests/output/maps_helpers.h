/* SPDX-License-Identifier: MIT */
/*
 * Anonymous mappings in a synthetic stream (tests/profile/helpers.h): the
 * raw mmap/munmap events both allocation paths give the correlator, and an
 * RSS sample.
 */
#ifndef MP_TEST_MAPS_HELPERS_H
#define MP_TEST_MAPS_HELPERS_H

#include "helpers.h"

static __attribute__((unused)) void map_event(struct stream *s, uint32_t tid, uint32_t type,
					      uint32_t fn, uint64_t addr, uint64_t size,
					      uint64_t caller)
{
	struct mp_raw_event ev = { .type = type,
				   .fn = fn,
				   .pid = 1,
				   .tid = tid,
				   .ts_ns = tick(s),
				   .addr = addr,
				   .size = size,
				   .caller = caller };

	cr_assert_eq(mp_correlator_apply_heap(s->c, &ev, 0), 0);
}

/* An anonymous mapping of @size bytes at @addr made on thread @tid. */
static __attribute__((unused)) void map_make(struct stream *s, uint32_t tid, uint64_t addr,
					     uint64_t size)
{
	map_event(s, tid, MP_RAW_ALLOC, MP_FN_MMAP, addr, size, 0);
}

static __attribute__((unused)) void map_release(struct stream *s, uint32_t tid, uint64_t addr,
						uint64_t size)
{
	map_event(s, tid, MP_RAW_FREE, MP_FN_MUNMAP, addr, size, 0);
}

/* An RSS sample: VmRSS @rss, of which RssAnon @anon. */
static __attribute__((unused)) void rss_at(struct stream *s, uint64_t rss, uint64_t anon)
{
	struct mp_rss_sample smp = { .ts_ns = tick(s),
				     .vm_rss = rss,
				     .rss_anon = anon,
				     .rss_file = rss - anon,
				     .vm_hwm = rss,
				     .pss = MP_UNKNOWN };

	cr_assert_eq(mp_correlator_on_rss(s->c, &smp), 0);
}

#endif /* MP_TEST_MAPS_HELPERS_H */
