// SPDX-License-Identifier: MIT
/* The executable part of the unwinder's call-chain fixture, built with
 * -O2 -fomit-frame-pointer -g: frames without frame pointers, an inlined
 * helper, a call into a shared library that recurses and calls back. */
#include <pthread.h>
#include <string.h>

#include "fixture.h"

/* Registers at the return address of this call, as a uretprobe sees them
 * (rbx, r12-r15 are not needed: the tests unwind through frames whose CFA
 * is rsp-based or rbp-based). */
__asm__(".text\n"
	".globl unwfix_capture_regs\n"
	".type unwfix_capture_regs,@function\n"
	"unwfix_capture_regs:\n"
	".cfi_startproc\n"
	"movq (%rsp), %rax\n"
	"movq %rax, 0(%rdi)\n"
	"leaq 8(%rsp), %rax\n"
	"movq %rax, 8(%rdi)\n"
	"movq %rbp, 16(%rdi)\n"
	"ret\n"
	".cfi_endproc\n"
	".size unwfix_capture_regs, .-unwfix_capture_regs\n");

static size_t stack_left(uint64_t sp)
{
	pthread_attr_t a;
	void *base;
	size_t size;

	if (pthread_getattr_np(pthread_self(), &a))
		return 0;
	pthread_attr_getstack(&a, &base, &size);
	pthread_attr_destroy(&a);
	return (uint64_t)base + size - sp;
}

__attribute__((noinline)) void chain_leaf(void *arg)
{
	struct unwfix_capture *c = arg;
	size_t n;

	unwfix_capture_regs(&c->regs);
	n = stack_left(c->regs.sp);
	c->len = n < c->cap ? n : c->cap;
	/* Byte by byte, not memcpy: a sanitizer's interceptor would refuse
	 * to read the redzones of the frames above (this file is built
	 * without instrumentation; the volatile keeps the loop a loop). */
	for (size_t i = 0; i < c->len; i++)
		((unsigned char *)c->stack)[i] = ((const volatile unsigned char *)c->regs.sp)[i];
}

static inline __attribute__((always_inline)) int chain_helper(int depth, struct unwfix_capture *c)
{
	return unwfix_recurse(depth, chain_leaf, c) * 2;
}

int unwfix_chain_sink;

__attribute__((noinline)) void chain_outer(int depth, struct unwfix_capture *c)
{
	unwfix_chain_sink = chain_helper(depth, c);
}

__attribute__((noinline)) void unwfix_run(int depth, struct unwfix_capture *c)
{
	chain_outer(depth, c);
	unwfix_chain_sink++;
}
