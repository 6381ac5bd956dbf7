// SPDX-License-Identifier: MIT
/* The daemon's memory by part, and its allocator policy (memstats.h). */
#include <errno.h>
#include <malloc.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "memstats.h"

#if defined(__SANITIZE_ADDRESS__)
#define MP_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MP_ASAN 1
#endif
#endif

#ifdef MP_ASAN
/* <sanitizer/allocator_interface.h>, which gcc 12 does not ship. */
size_t __sanitizer_get_current_allocated_bytes(void);
#endif

static atomic_uint_fast64_t trims;

static void read_status(struct mp_memstats *m)
{
	static const struct {
		const char *key;
		size_t off;
	} keys[] = {
		{ "VmRSS:", offsetof(struct mp_memstats, vm_rss) },
		{ "RssAnon:", offsetof(struct mp_memstats, rss_anon) },
		{ "RssFile:", offsetof(struct mp_memstats, rss_file) },
		{ "RssShmem:", offsetof(struct mp_memstats, rss_shmem) },
	};
	FILE *f = fopen("/proc/self/status", "re");
	char line[256];

	while (f && fgets(line, sizeof(line), f)) {
		for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
			size_t n = strlen(keys[i].key);
			unsigned long long kib;

			if (!strncmp(line, keys[i].key, n) && sscanf(line + n, "%llu", &kib) == 1)
				*(uint64_t *)((char *)m + keys[i].off) = (uint64_t)kib << 10;
		}
	}
	if (f)
		fclose(f);
}

uint64_t mp_heap_in_use(void)
{
#ifdef MP_ASAN
	return __sanitizer_get_current_allocated_bytes();
#else
	struct mallinfo2 mi = mallinfo2();

	return mi.uordblks + mi.hblkhd;
#endif
}

uint64_t mp_self_anon_held(void)
{
#ifdef MP_ASAN
	return mp_heap_in_use();
#else
	struct mp_memstats m = { 0 };

	read_status(&m);
	return m.rss_anon;
#endif
}

void mp_memstats_read(struct mp_memstats *ret)
{
	/* glibc's own arenas; under ASan they serve next to nothing. */
	struct mallinfo2 mi = mallinfo2();

	memset(ret, 0, sizeof(*ret));
	read_status(ret);
	ret->heap_in_use = mp_heap_in_use();
#ifndef MP_ASAN
	ret->heap_mmapped = mi.hblkhd;
#endif
	ret->heap_free = mi.fordblks + mi.fsmblks;
	ret->trims = atomic_load(&trims);
}

int mp_heap_setup(void)
{
#ifdef MP_ASAN
	/* The sanitizer's allocator has no such policy (its mallopt is a
	 * stub that fails). */
	return 0;
#else
	return mallopt(M_MMAP_THRESHOLD, MP_HEAP_MMAP_THRESHOLD) == 1 ? 0 : -EINVAL;
#endif
}

void mp_heap_trim(void)
{
	malloc_trim(0);
	atomic_fetch_add(&trims, 1);
}
