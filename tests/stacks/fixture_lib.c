// SPDX-License-Identifier: MIT
/* The shared-library part of the unwinder's call-chain fixture: a
 * recursive function (-O2 -fomit-frame-pointer) that calls back into the
 * executable at the bottom. */
#include "fixture.h"

int unwfix_sink;

int unwfix_recurse(int n, void (*cb)(void *), void *arg)
{
	int r;

	if (n == 0) {
		cb(arg);
		return 0;
	}
	r = unwfix_recurse(n - 1, cb, arg);
	/* A store after the call: no tail call, no loop. */
	unwfix_sink = r;
	return r + 1;
}
