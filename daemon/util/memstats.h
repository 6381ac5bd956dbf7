/* SPDX-License-Identifier: MIT */
/*
 * The daemon's own memory, split into the parts that move independently
 * (docs/BENCHMARKS.md section 6): what the kernel counts in its RSS
 * (/proc/self/status: anonymous memory, file pages — the BPF ring buffers,
 * mapped twice —, shared memory — the targets' marker rings), and what the
 * allocator counts inside the anonymous part: bytes in use, and bytes it
 * holds free in its arenas (resident until trimmed, or not).
 *
 * And the allocator policy of a long-running service: glibc raises its
 * mmap threshold to the size of the largest mmapped block freed so far (up
 * to 32 MiB). One BTF parse at attach (~11 MiB) is enough for every later
 * profile copy, encoding buffer and growing table to be carved from the
 * per-thread arenas, where freed memory stays resident; mp_heap_setup()
 * pins the threshold, mp_heap_trim() returns free arena pages.
 */
#ifndef MEMPROF_MEMSTATS_H
#define MEMPROF_MEMSTATS_H

#include <stdbool.h>
#include <stdint.h>

/* Blocks from this size up get a mapping of their own, unmapped at free. */
#define MP_HEAP_MMAP_THRESHOLD (128u << 10)

struct mp_memstats {
	/* /proc/self/status, bytes (0 when unreadable). */
	uint64_t vm_rss, rss_anon, rss_file, rss_shmem;
	/* The allocator's counts, bytes: handed out and not freed (under
	 * ASan, the sanitizer allocator's count); of those, in blocks with a
	 * mapping of their own (glibc only); free inside glibc's arenas. */
	uint64_t heap_in_use, heap_mmapped, heap_free;
	/* mp_heap_trim() calls so far. */
	uint64_t trims;
};

/* Fills @ret; never fails (unknown parts stay 0). */
void mp_memstats_read(struct mp_memstats *ret);
/* The anonymous memory the daemon really holds, for its memory budget:
 * RssAnon; in the ASan build the sanitizer allocator's bytes in use
 * instead, since its RssAnon also counts shadow memory and the quarantine
 * of freed blocks, which a real build does not hold. */
uint64_t mp_self_anon_held(void);
/* The allocator's bytes in use alone (cheaper than mp_memstats_read). */
uint64_t mp_heap_in_use(void);
/* Once, at the start of a long-running service: a fixed mmap threshold
 * (MP_HEAP_MMAP_THRESHOLD), which also keeps glibc's trim threshold at its
 * default. Returns 0 or -EINVAL if the allocator refused it. */
int mp_heap_setup(void);
/* Returns free arena pages to the kernel (malloc_trim); counted. */
void mp_heap_trim(void);

#endif
