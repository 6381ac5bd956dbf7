// SPDX-License-Identifier: MIT
/* fixture-toy's shared libraries: an op that allocates and frees a block in
 * its own object (so both calls are bound through this object's GOT, to
 * one allocator even where RTLD_DEEPBIND binds them to libc's own).
 * TOY_NAME names the function, TOY_SIZE the block. */
#include <stdlib.h>

void TOY_NAME(void);

void TOY_NAME(void)
{
	void *volatile p = malloc(TOY_SIZE);

	free(p);
}
