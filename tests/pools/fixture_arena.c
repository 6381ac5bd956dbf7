/* SPDX-License-Identifier: MIT */
/*
 * An arena: one 1 MiB malloc carved into slices with the pools API, reset
 * after every inference. The heap view must show the one 1 MiB block; the
 * pool view the slices, per kernel and per tag (conv's output under "act",
 * its scratch under "tmp", fc's output untagged). Expected figures in
 * test_pools_e2e.c.
 */
#include <stdlib.h>

#include "memprof.h"

#define MIB (1u << 20)

int main(void)
{
	unsigned char *arena;
	int pool;

	memprof_kernel_begin("load_arena");
	arena = malloc(MIB);
	memprof_kernel_end();
	if (!arena)
		return 1;
	pool = memprof_pool_declare("activations", MEMPROF_POOL_HOST);
	if (pool <= 0)
		return 2;
	for (int i = 0; i < 3; i++) {
		size_t off = 0;

		memprof_kernel_begin("conv");
		memprof_tag_begin("act");
		memprof_pool_alloc(pool, arena + off, 200000);
		off += 200000;
		memprof_tag_begin("tmp");
		memprof_pool_alloc(pool, arena + off, 50000);
		memprof_tag_end();
		memprof_tag_end();
		memprof_pool_free(pool, arena + off); /* tmp's, freed untagged */
		memprof_kernel_end();

		memprof_kernel_begin("fc");
		memprof_pool_alloc(pool, arena + off, 300000);
		off += 300000;
		memprof_kernel_end();

		memprof_kernel_begin("reset");
		memprof_pool_reset(pool);
		memprof_kernel_end();
	}
	free(arena);
	return 0;
}
