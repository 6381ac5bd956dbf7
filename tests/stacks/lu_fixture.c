// SPDX-License-Identifier: MIT
/* Call chains of the in-process unwinder's test, built with -O2
 * -fomit-frame-pointer (rsp-based CFA) and sibling calls on. */
#include <string.h>

#include "lu_fixture.h"

__attribute__((noinline)) void *lu_plain(int levels)
{
	void *p;

	if (levels > 0)
		p = lu_plain(levels - 1);
	else
		p = lu_alloc(32);
	__asm__ volatile("" : : "r"(p) : "memory"); /* no tail call */
	return p;
}

__attribute__((noinline)) void *lu_tail(int levels)
{
	void *p;

	if (levels > 0) {
		p = lu_tail(levels - 1);
		__asm__ volatile("" : : "r"(p) : "memory");
		return p;
	}
	return lu_alloc(48); /* a sibling call: this frame is gone */
}

__attribute__((noinline)) void *lu_big(int levels)
{
	volatile char big[20 << 10];
	void *p;

	big[levels] = 1;
	p = levels > 0 ? lu_plain(levels - 1) : lu_alloc(64);
	big[1] = big[levels];
	__asm__ volatile("" : : "r"(p) : "memory");
	return p;
}

__attribute__((noinline)) void *lu_fp(int levels)
{
	void *p = lu_fp_frame(levels);

	__asm__ volatile("" : : "r"(p) : "memory");
	return p;
}
