// SPDX-License-Identifier: MIT
/*
 * Fixture of the mappings test (test_maps_e2e.c): heap blocks and an
 * anonymous mapping of known sizes, in kernels.
 *
 *   alloc   malloc 1000 (kept) and 200000 (freed; glibc serves it with an
 *           mmap of its own, inside malloc: a heap block, not a mapping)
 *   map     mmap 4 MiB anonymous, 1 MiB of it touched, held for 300 ms
 *           (RSS samples see it resident)
 *   unmap   munmap of the 4 MiB
 *
 * Heap: 201000 B allocated, peak 201000 B, 1000 B live at the end.
 * Mappings: 4 MiB reserved, at least 1 MiB of it resident.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include <memprof.h>

#define MAP_BYTES (4u << 20)
#define TOUCH_BYTES (1u << 20)

int main(void)
{
	struct timespec hold = { .tv_nsec = 300 * 1000 * 1000 };
	void *keep, *big;
	char *m;

	memprof_phase("inference");
	memprof_kernel_begin("alloc");
	keep = malloc(1000);
	big = malloc(200000);
	free(big);
	memprof_kernel_end();

	memprof_kernel_begin("map");
	m = mmap(NULL, MAP_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED)
		return 1;
	memset(m, 1, TOUCH_BYTES);
	nanosleep(&hold, NULL);
	memprof_kernel_end();

	memprof_kernel_begin("unmap");
	munmap(m, MAP_BYTES);
	memprof_kernel_end();
	return keep && big ? 0 : 1;
}
