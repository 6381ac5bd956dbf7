// SPDX-License-Identifier: MIT
/* The capture of the in-process unwinder's test, built as libmemprof's
 * stack capture is (frame pointers): the registers of its caller's frame,
 * a copy of the stack from there up (the STACK record's), and the
 * in-process unwinder's frames of the same stack (the FRAMES record's). */
#include <alloca.h>
#include <stdlib.h>

#include "local_unwind.h"
#include "lu_fixture.h"
#include "ring_writer.h"

/* libmemprof's per-thread block (ring.c), which the unwinder's cache
 * mapping marks; this test links the unwinder without the ring writer. */
__thread struct mp_alloc_tls mp_alloc_tls __attribute__((tls_model("initial-exec")));

struct lu_result *lu_cur;
bool (*lu_past_stop)(uint64_t pc);

/* The walks go through a thread's memo, as libmemprof's do. */
__thread struct mp_unwind_memo lu_memo;

__attribute__((noinline)) void lu_capture(struct lu_result *r, uint64_t caller)
{
	const uint64_t *fp = __builtin_frame_address(0);
	uint64_t regs[3] = { fp[1], (uint64_t)(uintptr_t)(fp + 2), fp[0] };
	size_t len = r->stack_end > regs[1] ? r->stack_end - regs[1] : 0;
	const unsigned char *src = (const unsigned char *)(uintptr_t)regs[1];
	unsigned char *dst = r->copy;
	size_t n;

	if (len > r->window)
		len = r->window;
	n = len;
	/* never an intercepted memcpy over other frames' redzones */
	__asm__ volatile("rep movsb" : "+D"(dst), "+S"(src), "+c"(n) : : "memory");
	r->regs[0] = regs[0];
	r->regs[1] = regs[1];
	r->regs[2] = regs[2];
	r->len = len;
	r->caller = caller;
	r->n = mp_unwind_local(regs, regs[1] + len, caller, r->depth, r->frames, &r->truncated,
			       NULL, &lu_memo);
	/* regs: lu_alloc's frame, whose return address is into it */
	r->past_n = lu_past_stop ?
			    mp_unwind_local_past(regs, regs[1] + len, 64, r->past, lu_past_stop) :
			    0;
}

__attribute__((noinline)) void *lu_alloc(size_t n)
{
	lu_capture(lu_cur, (uint64_t)(uintptr_t)__builtin_return_address(0));
	__asm__ volatile("" : : : "memory");
	return (void *)(uintptr_t)n;
}

/* rbp is the CFA's register here (the frame has a variable size). */
__attribute__((noinline)) void *lu_fp_frame(int levels)
{
	volatile char *v = alloca((size_t)levels * 16 + 16);
	void *p;

	v[0] = 1;
	p = levels > 0 ? lu_plain(levels - 1) : lu_alloc(80);
	v[1] = v[0];
	__asm__ volatile("" : : "r"(p) : "memory");
	return p;
}
