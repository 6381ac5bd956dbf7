/* SPDX-License-Identifier: MIT */
/*
 * The source frames of one machine frame: the functions inlined at an
 * address, innermost first, then the function they were inlined into (as
 * addr2line -i and pprof show them), from the DWARF scopes of the address
 * (dwarf_getscopes) and the line table.
 */
#ifndef MP_UNWIND_INLINE_H
#define MP_UNWIND_INLINE_H

#include <elfutils/libdwfl.h>
#include <stdint.h>

#include "profile.h"

#define MP_MAX_INLINE MP_PROFILE_MAX_INLINE

/* Strings are borrowed from libdwfl (valid while its Dwfl lives);
 * @function, @file and @comp_dir may be NULL, @line 0 when unknown. A
 * relative @file is relative to @comp_dir. */
struct mp_sym_frame {
	const char *function;
	const char *file;
	const char *comp_dir;
	int line;
};

/*
 * Frames at @pc (an address inside the instruction, i.e. a return address
 * minus one) of module @mod, innermost first, at most @max. The outermost
 * frame's function is the ELF symbol at @pc (so stripped files still name
 * it); inlined frames need DWARF. Returns the number of frames: 1 without
 * inlining or without DWARF, 0 when nothing at all is known.
 */
int mp_sym_frames(Dwfl_Module *mod, uint64_t pc, struct mp_sym_frame *ret, int max);

#endif /* MP_UNWIND_INLINE_H */
