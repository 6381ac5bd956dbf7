/* SPDX-License-Identifier: MIT */
/* Fixture of the in-process unwinder's test (test_local_unwind.c): call
 * chains that end in an allocator stand-in (lu_alloc) whose capture
 * (lu_capture.c) does what libmemprof's stack capture does. */
#ifndef LU_FIXTURE_H
#define LU_FIXTURE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct lu_result {
	/* in */
	uint32_t depth;
	size_t window; /* bytes of stack copied (at most) */
	uint64_t stack_end;
	/* out: the registers and the copy of the stack, as a STACK record */
	uint64_t regs[3];
	unsigned char *copy;
	size_t len;
	uint64_t caller; /* the return address into lu_alloc's caller */
	/* and what the in-process unwinder made of the same stack */
	int n;
	bool truncated;
	uint64_t frames[256];
	/* with lu_past_stop set: the walk of a wrapped allocation from
	 * lu_alloc's frame (mp_unwind_local_past()), lu_alloc the wrapper */
	int past_n;
	uint64_t past[64];
};
extern bool (*lu_past_stop)(uint64_t pc);

/* The allocator stand-in: captures into the current result. */
void *lu_alloc(size_t n);
/* The capture below it (frame pointers, as libmemprof's). */
void lu_capture(struct lu_result *r, uint64_t caller);
extern struct lu_result *lu_cur;
/* The memo of the walks lu_capture() makes on this thread. */
struct mp_unwind_memo;
extern __thread struct mp_unwind_memo lu_memo;

/* Chains (lu_fixture.c, -O2 -fomit-frame-pointer): */
void *lu_plain(int levels); /* recursion, then lu_alloc */
void *lu_tail(int levels); /* recursion, then a sibling call to lu_alloc */
void *lu_big(int levels); /* a frame of 20 KiB on the way */
void *lu_fp(int levels); /* through a frame with rbp as CFA (lu_capture.c) */
void *lu_fp_frame(int levels); /* that frame */

#endif
