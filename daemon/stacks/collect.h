/* SPDX-License-Identifier: MIT */
/*
 * Call stacks of one target's allocations, as they arrive: the registers
 * and the bounded copy of the thread's stack that a source carries
 * (hostile input) are unwound at once, while the copy is valid, and
 * deduplicated into stack ids; and the unwinder's view of the target's
 * code answers where an address is (fn:/src: owner rules).
 *
 * The unwinder is built at its first use over the caller's maps snapshot
 * (events are often unwound after the target exited, when its maps are
 * gone) and rebuilt over /proc/PID/maps when an address is in code it
 * does not know (dlopen, exec), at most every MP_COLLECT_MAPS_REREAD_NS
 * and never once the target has exited.
 */
#ifndef MP_COLLECT_H
#define MP_COLLECT_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "inline.h"
#include "procmaps.h"
#include "profile.h"
#include "unwind.h"

#define MP_COLLECT_MAPS_REREAD_NS (100 * 1000 * 1000ull)
/* An in-process capture's unwind goes through at most this many frames
 * beyond the depth (libmemprof's own, dropped); libmemprof's unwinder
 * walks as many (MP_FRAMES_OWN_MAX). */
#define MP_COLLECT_RING_SKIP 8

struct mp_stack_collector;

/* For process @pid; with a stack table when @stacks, of stacks at most
 * @depth frames deep (0: MP_UNWIND_DEFAULT_DEPTH; -EINVAL beyond
 * MP_UNWIND_MAX_DEPTH). -ENOMEM. Without a stack table, only the
 * unwinder's view of the code (mp_stack_collect_src_frames()). */
int mp_stack_collector_new(pid_t pid, bool stacks, uint32_t depth, struct mp_stack_collector **ret);
void mp_stack_collector_free(struct mp_stack_collector *c);
/* The stack table's bounds (mp_stack_table_set_max()), before the first
 * stack; nothing without stacks. */
void mp_stack_collector_set_max(struct mp_stack_collector *c, uint32_t max_stacks,
				uint64_t max_frames);

/* Where the target is: its maps as last read (NULL: none), and whether it
 * has exited. */
struct mp_collect_target {
	const struct mp_procmaps *maps;
	bool exited;
};

/* The stack id of a BPF event's capture (@regs, @len bytes of stack at
 * @bytes); 0: none (no stack table, nothing unwound). */
uint32_t mp_stack_collect_event(struct mp_stack_collector *c, const struct mp_collect_target *t,
				const struct mp_unwind_regs *regs, const void *bytes, uint32_t len);
/* The stack id of an in-process heap record's capture, taken inside
 * libmemprof: from the frame returning into the allocating function
 * (@caller, the record's) on, as on the eBPF path. */
uint32_t mp_stack_collect_ring(struct mp_stack_collector *c, const struct mp_collect_target *t,
			       const struct mp_unwind_regs *regs, const void *bytes, uint32_t len,
			       uint64_t caller);

/* The stack id of frames unwound by the target itself (a FRAMES record:
 * @n return addresses, innermost first, hostile values), cut to the
 * collector's depth; 0: none. */
uint32_t mp_stack_collect_given(struct mp_stack_collector *c, const struct mp_collect_target *t,
				const uint64_t *frames, uint32_t n, bool truncated);

/* The bytes of the allocation whose stack is interned next, and of every
 * later one until set again (UINT64_MAX at first: as large): past seven
 * eighths of the stack table, only large ones' stacks are added
 * (MP_STACKS_LARGE_BYTES, stacks.h). */
void mp_stack_collect_set_bytes(struct mp_stack_collector *c, uint64_t bytes);
/* Where the names of Python frames' code come from (the target's string
 * table, by id; NULL when it has none): asked once per name as stacks
 * holding it are first stored. */
typedef const char *(*mp_pyname_src_fn)(void *ctx, uint32_t id);
void mp_stack_collect_set_pynames(struct mp_stack_collector *c, mp_pyname_src_fn fn, void *ctx);
/* Whether the last mp_stack_collect_given() had Python frames. */
bool mp_stack_collect_last_python(const struct mp_stack_collector *c);
/* "qualname@file" of Python frame code @id (MP_PYFRAME_NAME()), NULL when
 * unknown; @collector is a struct mp_stack_collector (NULL: none). */
const char *mp_stack_collect_pyname(void *collector, uint32_t id);

/* The frames of a capture without interning them (allocator wrappers:
 * the first caller outside them), into @ret, at most @max, innermost
 * first; for an in-process capture (@caller nonzero) from the frame
 * returning to @caller on. *@ret_truncated as mp_unwind(). Returns how
 * many (0: not unwound up to @caller). Works without a stack table. */
int mp_stack_collect_unwind(struct mp_stack_collector *c, const struct mp_collect_target *t,
			    const struct mp_unwind_regs *regs, const void *bytes, uint32_t len,
			    uint64_t caller, uint64_t *ret, uint32_t max, bool *ret_truncated);

/* The source frames at @addr, innermost first, file names made absolute
 * (valid until the next call on this thread); 0 when unknown. */
int mp_stack_collect_src_frames(struct mp_stack_collector *c, const struct mp_collect_target *t,
				uint64_t addr, struct mp_sym_frame *ret, int max);
/* The frames of stack @id; 0 when unknown. */
uint32_t mp_stack_collect_frames(const struct mp_stack_collector *c, uint32_t id,
				 const uint64_t **ret_frames);
/* The stack table into @p (nothing without one). */
int mp_stack_collect_export(const struct mp_stack_collector *c, struct mp_profile *p);
/* The last /proc/PID/maps the unwinder was built from (NULL when none was
 * read): it can hold code mapped after the caller's own snapshot. */
const struct mp_procmaps *mp_stack_collect_maps(const struct mp_stack_collector *c);
/* Whether a frame of the stacks stored so far was found in mapping @m
 * (the same start and inode) while the target ran (@collector: a struct
 * mp_stack_collector; the first 2,048 such mappings are remembered):
 * mp_symbolize_warm_want_fn. */
bool mp_stack_collect_holds_frames(const void *collector, const struct mp_mapping *m);

#endif /* MP_COLLECT_H */
