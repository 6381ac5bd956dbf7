/* SPDX-License-Identifier: MIT */
/*
 * The capture of a call stack for the in-process path's STACK records
 * (type 24): the registers of the caller of mp_stack_put() at the call
 * and a copy of the thread's stack from there up, for memprofd to unwind
 * out of process exactly as the eBPF path's copies; or, where the
 * consumer asked for it and the in-process unwinder (local_unwind.c) can walk
 * that copy as memprofd would, the frames alone (FRAMES, type 25). Compiled with frame
 * pointers (meson.build): this function's frame record is where its
 * caller's rbp and return address are, whatever the rest of the library
 * was compiled with.
 */
#include <stdint.h>

#include <errno.h>

#include "expand.h"
#include "stack_capture.h"
#include "local_unwind.h"

/* The frame expander (expand.h): fn is stored last, with lo and hi
 * before it. */
static struct {
	uint64_t lo, hi;
	memprof_expand_fn fn;
} expander;

MP_EXPAND_API int memprof__frame_expander(uint64_t lo, uint64_t hi, memprof_expand_fn fn)
{
	if (fn && lo >= hi)
		return -EINVAL;
	__atomic_store_n(&expander.fn, NULL, __ATOMIC_RELEASE);
	__atomic_store_n(&expander.lo, lo, __ATOMIC_RELAXED);
	__atomic_store_n(&expander.hi, hi, __ATOMIC_RELAXED);
	__atomic_store_n(&expander.fn, fn, __ATOMIC_RELEASE);
	return 0;
}

/* @frames (@n of them) with the expander's frames for those in its range,
 * at most @depth: in @out, their number returned (*@trunc set when some
 * were cut); 0 when there is no expander or nothing for it. */
static int expand(const uint64_t *frames, int n, uint32_t depth, uint64_t *out, bool *trunc)
{
	memprof_expand_fn fn = __atomic_load_n(&expander.fn, __ATOMIC_ACQUIRE);
	uint64_t lo, hi;
	int i, m, max = (int)(depth < MP_FRAMES_MAX ? depth : MP_FRAMES_MAX);

	if (__builtin_expect(!fn, 1))
		return 0;
	lo = __atomic_load_n(&expander.lo, __ATOMIC_RELAXED);
	hi = __atomic_load_n(&expander.hi, __ATOMIC_RELAXED);
	for (i = 0; i < n && (frames[i] < lo || frames[i] >= hi); i++)
		;
	if (i == n)
		return 0;
	m = fn(frames, n, out, max);
	if (m <= 0 || m > max)
		return 0;
	/* cut where the expanded stack would have gone on */
	if (m == max)
		*trunc = true;
	return m;
}

/* The registers of the caller's frame from the interposed function's
 * frame record @entry_fp (its caller's rbp, the return address): false
 * when there is none, or it is not on this stack, or not the caller's
 * (@caller). */
static bool entry_regs(const uint64_t *entry_fp, uint64_t caller, uint64_t stack_lo,
		       uint64_t stack_end, uint64_t regs[3])
{
	uint64_t fp = (uint64_t)(uintptr_t)entry_fp;

	if (!entry_fp || fp < stack_lo || fp >= stack_end || stack_end - fp < 16 || (fp & 7) ||
	    entry_fp[1] != caller)
		return false;
	regs[0] = entry_fp[1];
	regs[1] = fp + 16;
	regs[2] = entry_fp[0];
	return true;
}

/* The record of a wrapped allocation charged to the first caller past
 * the wrappers, walking from the interposed function's frame record
 * @entry_fp: 0, or -1 when that walk cannot say (no record, a record
 * that is not the caller's, no frame past the wrappers found). */
static int past_wrappers(uint8_t type, uint8_t flags, uint32_t name_id, const uint64_t *w,
			 unsigned nw, enum mp_rw_wait wait, uint64_t stack_lo, uint64_t stack_end,
			 uint32_t depth, bool (*stop)(uint64_t pc), const uint64_t *entry_fp)
{
	uint64_t frames[MP_WRAP_FRAMES], regs[3];
	int n;

	if (!entry_regs(entry_fp, w[2], stack_lo, stack_end, regs))
		return -1;
	n = mp_unwind_local_past(regs, stack_end, depth < MP_WRAP_FRAMES ? depth : MP_WRAP_FRAMES,
				 frames, stop);
	if (n < 2)
		return -1;
	{
		uint64_t cw[4] = { w[0], w[1], frames[n - 1], nw > 3 ? w[3] : 0 };

		mp_ring_write(type, flags | MP_REC_F_PAST_WRAPPER, name_id, cw, nw, wait);
	}
	return 0;
}

MP_HIDDEN __attribute__((noinline)) int
mp_stack_put(uint8_t type, uint8_t flags, uint32_t name_id, const uint64_t *w, unsigned nw,
	     enum mp_rw_wait wait, uint64_t stack_lo, uint64_t stack_end, uint32_t max,
	     uint32_t depth, bool (*stop)(uint64_t pc), const uint64_t *entry_fp)
{
	/* [fp] the caller's rbp, [fp + 8] the return address into it, and
	 * its stack pointer after the return is fp + 16. */
	const uint64_t *fp = __builtin_frame_address(0);
	uint64_t regs[3] = { fp[1], (uint64_t)(uintptr_t)(fp + 2), fp[0] };
	/* Only on the thread's own stack: a handler running on a signal
	 * stack would have the copy run off its end. */
	uint64_t len = regs[1] >= stack_lo && regs[1] < stack_end ? stack_end - regs[1] : 0;

	/* a wrapped allocation, the interposed function's frame record at
	 * hand (on this stack, its return address the caller's): the walk
	 * begins at the wrapper's frame */
	if (stop && depth && len &&
	    past_wrappers(type, flags, name_id, w, nw, wait, stack_lo, stack_end, depth, stop,
			  entry_fp) == 0)
		return 0;
	/* the walk reads the whole stack up to its end, not only the part
	 * a copy would carry: a stack deeper than @max is not cut there */
	if (depth && len) {
		uint64_t frames[MP_FRAMES_MAX], er[3];
		bool trunc;
		/* from the caller's own frame where its record says where it
		 * is (libmemprof's frames not climbed), else from ours */
		int n = mp_unwind_local(
			!stop && entry_regs(entry_fp, w[2], stack_lo, stack_end, er) ? er : regs,
			stack_end, w[2], depth, frames, &trunc, stop, mp_rw_unwind_memo());

		/* a wrapped allocation reached the first caller outside the
		 * wrappers: charged to it in the record itself */
		if (stop && n >= 2 && stop(frames[n - 1])) {
			uint64_t cw[4] = { w[0], w[1], frames[n - 1], nw > 3 ? w[3] : 0 };

			return mp_ring_write(type, flags | MP_REC_F_PAST_WRAPPER, name_id, cw, nw,
					     wait);
		}
		if (n > 0) {
			uint64_t ex[MP_FRAMES_MAX];
			int m = expand(frames, n, depth, ex, &trunc);

			return mp_ring_write_frames(type, flags, name_id, w, nw, wait,
						    m ? ex : frames, (uint32_t)(m ? m : n), trunc);
		}
	}
	if (len > max)
		len = max;
	return mp_ring_write_stacked(type, flags, name_id, w, nw, wait, regs,
				     (const void *)(uintptr_t)regs[1], (uint32_t)len);
}
