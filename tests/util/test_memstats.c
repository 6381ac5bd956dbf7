// SPDX-License-Identifier: MIT
/* daemon/util/memstats.c: the allocator's count follows what is allocated
 * and freed (glibc's, or ASan's in the sanitizer build), the kernel's parts
 * add up, trims are counted. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "memstats.h"

Test(memstats, heap_in_use_follows_malloc_and_free)
{
	const size_t big = 4u << 20, small = 64u << 10;
	uint64_t base = mp_heap_in_use(), with;
	char *a, *b;

	cr_assert_eq(mp_heap_setup(), 0);
	/* One block above the mmap threshold, one below. */
	a = malloc(big);
	b = malloc(small);
	cr_assert(a && b);
	memset(a, 1, big);
	memset(b, 1, small);
	with = mp_heap_in_use();
	cr_assert_geq(with, base + big + small, "%lu -> %lu", (unsigned long)base,
		      (unsigned long)with);
	free(a);
	free(b);
	cr_assert_lt(mp_heap_in_use(), with - big - small / 2);
}

Test(memstats, rss_parts_add_up_and_trims_are_counted)
{
	struct mp_memstats m, n;

	mp_memstats_read(&m);
	cr_assert_gt(m.vm_rss, 0);
	cr_assert_gt(m.rss_anon, 0);
	cr_assert_eq(m.vm_rss, m.rss_anon + m.rss_file + m.rss_shmem);
	cr_assert_gt(m.heap_in_use, 0);
	mp_heap_trim();
	mp_memstats_read(&n);
	cr_assert_eq(n.trims, m.trims + 1);
}
