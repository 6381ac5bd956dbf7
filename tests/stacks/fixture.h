/* SPDX-License-Identifier: MIT */
/* Call-chain fixture of the unwinder tests (see fixture_chain.c). */
#ifndef UNWFIX_H
#define UNWFIX_H

#include <stddef.h>
#include <stdint.h>

/* Registers as the tracer captures them where an allocator returns: @ip
 * the return address into the caller, @sp the caller's stack pointer. */
struct unwfix_regs {
	uint64_t ip, sp, bp;
};

struct unwfix_capture {
	struct unwfix_regs regs;
	unsigned char *stack;
	size_t len; /* bytes copied from regs.sp */
	size_t cap;
};

int unwfix_recurse(int n, void (*cb)(void *), void *arg);
/* Runs chain_entry -> chain_outer -> chain_helper (inlined) ->
 * unwfix_recurse x (depth + 1) -> chain_leaf, which captures. */
void unwfix_run(int depth, struct unwfix_capture *c);
void unwfix_capture_regs(struct unwfix_regs *r);
void chain_leaf(void *arg);
void chain_outer(int depth, struct unwfix_capture *c);

#endif
