/* SPDX-License-Identifier: MIT */
/*
 * Internal to libmemprof (hidden): the capture of the caller's stack for
 * the interposer's STACK records (stack_capture.c, built with frame
 * pointers), which hands them to the heap record writer below it.
 */
#ifndef MEMPROF_STACK_CAPTURE_H
#define MEMPROF_STACK_CAPTURE_H

#include <stdint.h>

#include "ring_writer.h"

/* mp_ring_write_stacked() with the registers of the caller at this call
 * and the bytes of its stack from its stack pointer up to @stack_end, at
 * most @max; none when the stack pointer is outside [@stack_lo,
 * @stack_end) (a signal stack). With @depth nonzero, the frames of the
 * stack from the caller w[2] on, at most @depth (mp_ring_write_frames()),
 * wherever the in-process unwinder can walk them (reading up to
 * @stack_end) as memprofd would walk a copy; with @stop, up to the first
 * frame past the caller's that @stop says ends the walk
 * (mp_unwind_local()). */
MP_HIDDEN int mp_stack_put(uint8_t type, uint8_t flags, uint32_t name_id, const uint64_t *w,
			   unsigned nw, enum mp_rw_wait wait, uint64_t stack_lo, uint64_t stack_end,
			   uint32_t max, uint32_t depth, bool (*stop)(uint64_t pc),
			   const uint64_t *entry_fp);

#endif /* MEMPROF_STACK_CAPTURE_H */
