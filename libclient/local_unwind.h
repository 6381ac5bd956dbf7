/* SPDX-License-Identifier: MIT */
/*
 * Internal to libmemprof (hidden): the in-process unwinder of the
 * interposer's FRAMES records (x86-64). It walks the calling thread's
 * stack with the DWARF CFI of the loaded objects (.eh_frame, found with
 * _dl_find_object()) and gives the same frames as memprofd's
 * out-of-process unwinder on a copy of that stack, or says it cannot
 * (the caller then sends the copy). Never allocates, takes no lock, makes
 * no syscall but the one mmap of its rule cache.
 */
#ifndef MEMPROF_LOCAL_UNWIND_H
#define MEMPROF_LOCAL_UNWIND_H

#include <stdbool.h>
#include <stdint.h>

#include "ring_writer.h"

/* A thread's last walk, frame by frame, for its next one (the memo): the
 * registers at each frame, the kind of its rule, and where the step to
 * the next frame read the return address and rbp (offsets from the next
 * frame's sp, the CFA; MP_UNWIND_MEMO_NONE: no read, or a step the memo
 * cannot replay). A walk that reaches a frame of the last walk with the
 * same registers replays that walk from there instead of looking the
 * rules up again, for as long as each step's stack words still hold what
 * they held: from the same registers over the same words, the walk is
 * the same. The program's outer callers, under every stack, cost two
 * loads a frame. Two buffers: the walk reads the last one and writes the
 * other. */
#define MP_UNWIND_MEMO_FRAMES (MP_FRAMES_MAX + 1)
#define MP_UNWIND_MEMO_NONE INT16_MIN
struct mp_unwind_memo_frame {
	uint64_t pc, sp, bp;
	int16_t ra_off, rbp_off;
	uint8_t kind; /* enum mp_lu_kind */
	uint8_t bp_known;
};
struct mp_unwind_memo {
	uint32_t busy; /* a walk is using it: a signal handler's walk does not */
	uint32_t gen; /* of the rule cache the last walk saw (mp_unwind_forget()) */
	uint32_t cur; /* the buffer of the last walk */
	uint32_t n[2];
	uint64_t replayed; /* frames taken from the memo (for tests) */
	struct mp_unwind_memo_frame f[2][MP_UNWIND_MEMO_FRAMES];
};

/* Outcome of one rule lookup (exported for the tests). */
enum mp_lu_kind {
	MP_LU_STEP = 1, /* CFA = rsp or rbp + off, RA at CFA + off */
	MP_LU_LAST = 2, /* the return address is undefined: outermost */
	MP_LU_HARD = 3, /* an FDE whose rules are not simple */
	MP_LU_NOFDE = 4, /* no unwind info at all (JIT code, stripped) */
};

/*
 * From the registers @regs (ip, sp, bp) of a frame inside libmemprof, the
 * return addresses of the frames from the one returning into the
 * allocating function (@caller) on, innermost first: at most @depth into
 * @ret_frames, *@ret_truncated when the stack goes on beyond them. Every
 * stack read lies in [regs[1], @lim) (the thread's stack end). The walk is
 * the one memprofd does on a copy of [regs[1], @lim) (daemon/stacks/unwind.c fast_unwind() and
 * collect.c mp_stack_collect_ring(): at most @depth + MP_FRAMES_OWN_MAX
 * frames in all). Returns how many frames (>= 1), or -1 when it cannot
 * give that walk's result (no unwind info, rules that are not simple, a
 * read outside the bounds, @caller not reached): the caller then sends
 * the copy. With @stop, the walk ends early at the first frame past the
 * caller's for which @stop(return address) is true, that frame kept and
 * the stack marked truncated (an allocator wrapper's caller: the frames
 * beyond it are not wanted). @memo: the calling thread's memo (above), or
 * NULL.
 */
MP_HIDDEN int mp_unwind_local(const uint64_t regs[3], uint64_t lim, uint64_t caller, uint32_t depth,
			      uint64_t *ret_frames, bool *ret_truncated, bool (*stop)(uint64_t pc),
			      struct mp_unwind_memo *memo);

/*
 * A wrapped allocation's walk, from the frame that @regs (ip, sp, bp)
 * describe: the wrapper's, ip the return address into it (the frame
 * record of the interposed function the wrapper called). Every frame's
 * rule is its call's (pc - 1). Returns how many frames (>= 2) it put into
 * @ret_frames up to and with the first one past the first for which
 * @stop(return address) is true, or -1 when the walk cannot say (a rule
 * it cannot follow, a read out of [regs[1], @lim), @depth frames all in
 * the wrappers). Without libmemprof's own frames to climb first, nor a
 * memo.
 */
MP_HIDDEN int mp_unwind_local_past(const uint64_t regs[3], uint64_t lim, uint32_t depth,
				   uint64_t *ret_frames, bool (*stop)(uint64_t pc));

/* Forgets every cached rule (a library was unloaded: another one may be
 * mapped where it was). */
MP_HIDDEN void mp_unwind_forget(void);

/* For tests: the kind of the rule of @pc (looked up as for a frame's own
 * pc, no -1), bypassing nothing (the cache is used). */
MP_HIDDEN enum mp_lu_kind mp_unwind_rule_kind(uint64_t pc);
/* For tests: the slots of the rule cache in use (it grows with the code
 * it has seen). */
MP_HIDDEN uint32_t mp_unwind_cache_slots(void);

#endif /* MEMPROF_LOCAL_UNWIND_H */
