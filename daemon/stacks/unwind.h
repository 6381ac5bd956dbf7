/* SPDX-License-Identifier: MIT */
/*
 * Out-of-process unwinding of one allocation's call stack (x86-64): from
 * the registers and a bounded copy of the thread's stack taken at the
 * allocation, and the target's ELF files, to the return addresses of its
 * frames. libdwfl's unwinder does the work (DWARF CFI from .eh_frame or
 * .debug_frame, and its frame-pointer fallback for code without CFI),
 * driven by callbacks that serve memory from the copied slice only: the
 * copy and the registers come from the target and are hostile, so an
 * unwind never reads the target's memory, never faults and ends within
 * @max_depth frames.
 */
#ifndef MP_UNWIND_H
#define MP_UNWIND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "procmaps.h"
#include "profile.h"

#define MP_UNWIND_DEFAULT_DEPTH 64
#define MP_UNWIND_MAX_DEPTH MP_PROFILE_MAX_DEPTH

/* User registers at the capture point. The capture is taken where the
 * allocator function has just returned (uretprobe): @ip is the return
 * address into the allocating function and the frame is that function's,
 * with its callee-saved registers restored. */
struct mp_unwind_regs {
	uint64_t ip, sp, bp;
};

struct mp_unwinder;

/* An unwinder for process @pid (its files are opened through
 * /proc/@pid/root; pid 0: by path) with the code mappings of @maps.
 * -ENOMEM, or -EINVAL for an empty maps snapshot. */
int mp_unwinder_new(pid_t pid, const struct mp_procmaps *maps, struct mp_unwinder **ret);
void mp_unwinder_free(struct mp_unwinder *u);

/* Replaces the known code mappings (after dlopen, exec). */
int mp_unwinder_set_maps(struct mp_unwinder *u, const struct mp_procmaps *maps);

/* Whether @addr lies in a code mapping the unwinder knows. */
bool mp_unwinder_knows(const struct mp_unwinder *u, uint64_t addr);

/*
 * Unwinds from @regs, with @stack holding the @len bytes of the thread's
 * stack that started at regs->sp. Fills @ret_frames with at most
 * @max_depth (<= MP_UNWIND_MAX_DEPTH) addresses, innermost first:
 * ret_frames[0] is regs->ip, every address is a return address (the call
 * is the instruction before it). *@ret_truncated is set when the stack
 * goes on beyond what was returned: the depth limit was reached, the
 * copied slice ended, or a frame could not be unwound (no CFI and no
 * frame pointer). Returns the number of frames (>= 1 when regs->ip is not
 * 0), or a negative errno.
 */
int mp_unwind(struct mp_unwinder *u, const struct mp_unwind_regs *regs, const void *stack,
	      size_t len, uint32_t max_depth, uint64_t *ret_frames, bool *ret_truncated);

/* The rule cache (on by default): frames whose CFI has the simple rules
 * of compiled code are walked with rules cached per address, and libdwfl
 * unwinds only the stacks with a frame that needs more (no CFI, DWARF
 * expressions, a read outside the slice). Off: libdwfl unwinds every
 * stack (tests and bench/ compare the two). *@ret_fast / *@ret_slow
 * (either may be NULL) count the stacks each way. */
void mp_unwinder_set_rule_cache(struct mp_unwinder *u, bool on);
void mp_unwinder_stats(const struct mp_unwinder *u, uint64_t *ret_fast, uint64_t *ret_slow);
/* The rule cache's bound in slots (rounded up to a power of two, at
 * least 8; by default 2^20); empties it. For tests: a full cache looks
 * the rules it has no room for up at every frame. */
void mp_unwinder_set_rule_slots(struct mp_unwinder *u, uint32_t max);
/* How many times a frame's rules were looked up in the CFI (a miss of
 * the cache). */
uint64_t mp_unwinder_rule_fills(const struct mp_unwinder *u);

struct mp_sym_frame;
/* The source frames of the return address @addr (inline.h), from the
 * unwinder's modules; 0 when @addr is in none. */
int mp_unwinder_sym_frames(struct mp_unwinder *u, uint64_t addr, struct mp_sym_frame *ret, int max);

#endif /* MP_UNWIND_H */
