// SPDX-License-Identifier: MIT
/*
 * A small "model" for `memprof diff`: phase "load" runs kernel load_weights
 * (64 KiB of weights kept to the end, tag "weights"); phase "inference"
 * runs matmul (4096 blocks of 256 B, freed at its end), relu (4 KiB) and
 * legacy_pad (2 KiB). With MEMPROF_DIFF_GROW=N (1..7) it is a grown
 * model: matmul allocates 4096 * (N + 1) blocks (N MiB more), legacy_pad
 * is gone and a new kernel, attention, allocates 8 KiB. Kernel reserve
 * maps nothing, or with MEMPROF_DIFF_MAP=N (1..64) N MiB of anonymous
 * memory, kept to the end: a mapping that grows under the same heap.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <memprof.h>

#define BLOCK 256

static void *blocks[4096 * 8];

static void *touch(size_t n)
{
	void *p = malloc(n);

	if (p)
		memset(p, 1, n);
	return p;
}

static int matmul(size_t n)
{
	memprof_kernel_begin("matmul");
	for (size_t i = 0; i < n; i++)
		if (!(blocks[i] = touch(BLOCK)))
			return 1;
	for (size_t i = 0; i < n; i++)
		free(blocks[i]);
	memprof_kernel_end();
	return 0;
}

static int small_kernel(const char *name, size_t n)
{
	void *p;

	memprof_kernel_begin(name);
	p = touch(n);
	free(p);
	memprof_kernel_end();
	return p ? 0 : 1;
}

/* @mib MiB mapped and touched, never unmapped (0: nothing). */
static int reserve(int mib)
{
	void *p = MAP_FAILED;

	memprof_kernel_begin("reserve");
	if (mib) {
		p = mmap(NULL, (size_t)mib << 20, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (p != MAP_FAILED)
			memset(p, 1, (size_t)mib << 20);
	}
	memprof_kernel_end();
	return mib && p == MAP_FAILED;
}

int main(void)
{
	const char *grow = getenv("MEMPROF_DIFF_GROW"), *map = getenv("MEMPROF_DIFF_MAP");
	int grown = grow ? atoi(grow) : 0, mib = map ? atoi(map) : 0;
	void *weights;
	int r;

	if (grown < 0 || grown > 7 || mib < 0 || mib > 64)
		return 2;
	memprof_phase("load");
	memprof_kernel_begin("load_weights");
	memprof_tag_begin("weights");
	weights = touch(64 * 1024);
	memprof_tag_end();
	memprof_kernel_end();
	if (!weights)
		return 1;

	memprof_phase("inference");
	r = matmul(4096 * ((size_t)grown + 1));
	r |= small_kernel("relu", 4096);
	r |= reserve(mib);
	r |= grown ? small_kernel("attention", 8192) : small_kernel("legacy_pad", 2048);
	free(weights);
	return r;
}
