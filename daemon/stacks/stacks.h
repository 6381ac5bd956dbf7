/* SPDX-License-Identifier: MIT */
/*
 * The stack table of one profile: call stacks deduplicated as they are
 * unwound (one id per distinct list of frames and truncation flag), so a
 * site refers to its stack by id.
 *
 * The stacks of one program share long runs of callers, so the table keeps
 * them as a prefix tree: a node is one frame and the node of its caller
 * (the outermost frame's parent is the root), interned, and a stack is the
 * node of its innermost frame and its flags, found from that node. A stack
 * costs 4 bytes, plus a node (24 bytes and an index slot) for each frame
 * that no stack stored before it has below the same callers, and 256 KiB
 * for a table (the index's front). Entries grow in chunks that never
 * move.
 *
 * Bounded (mp_stack_table_set_max()): in stacks; in frames laid out one
 * stack after the other, as mp_stack_table_export() lays them out (8 bytes
 * each); and in frames stored, tree nodes (at most 46 bytes each with
 * their index), one for every MP_STACKS_FRAMES_PER_NODE frames of the
 * bound. Past a bound a new stack gets no id and is counted.
 */
#ifndef MP_STACKS_H
#define MP_STACKS_H

#include <stdint.h>

#include "profile.h"

/* The most stacks and frames a table holds, whatever its memory. */
#define MP_STACKS_MAX MP_PROFILE_MAX_STACKS
#define MP_STACKS_MAX_FRAMES MP_PROFILE_MAX_STACK_FRAMES
/* Frames per stack: deeper stacks get no id. */
#define MP_STACKS_MAX_DEPTH MP_PROFILE_MAX_DEPTH
/* The bound in frames of a new table: what --max-memory's default gives. */
#define MP_STACKS_DEFAULT_FRAMES (1u << 25)
/* Frames of the bound per tree node the table may store, and per stack
 * when no bound in stacks is set: with 46 and 4 bytes at most for a node
 * and a stack, a table holds at most half what its frames laid out take. */
#define MP_STACKS_FRAMES_PER_NODE 12
#define MP_STACKS_FRAMES_PER_STACK 40

struct mp_stack_table;

int mp_stack_table_new(struct mp_stack_table **ret);
void mp_stack_table_free(struct mp_stack_table *t);
/* Bounds, before the first stack: at most @max_frames frames laid out
 * (<= MP_STACKS_MAX_FRAMES; 0: MP_STACKS_DEFAULT_FRAMES), of which
 * @max_frames / MP_STACKS_FRAMES_PER_NODE stored, and @max_stacks stacks
 * (<= MP_STACKS_MAX; 0: @max_frames / MP_STACKS_FRAMES_PER_STACK). */
void mp_stack_table_set_max(struct mp_stack_table *t, uint32_t max_stacks, uint64_t max_frames);

/* The last 1/MP_STACKS_RESERVE of each bound is kept for the stacks of
 * large allocations (MP_STACKS_F_LARGE, at least MP_STACKS_LARGE_BYTES): a
 * table filled by a program's start (import torch) still takes the stacks
 * of the tensors it allocates later. */
#define MP_STACKS_RESERVE 32
#define MP_STACKS_F_LARGE 0x100u
#define MP_STACKS_LARGE_BYTES (64u << 10)
/* The id (>= 1) of @frames[0..n) with @flags (MP_STACK_F_*,
 * MP_STACKS_F_LARGE), added if new; 0 when the table is full or out of
 * memory (counted). */
uint32_t mp_stack_table_intern(struct mp_stack_table *t, const uint64_t *frames, uint32_t n,
			       uint32_t flags);
/* Of the frames given to the last mp_stack_table_intern() call, how many
 * (from frames[0]) the table had stored below none of the stacks before:
 * 0 for a stack already known, or one that found no room. */
uint32_t mp_stack_table_last_new(const struct mp_stack_table *t);
/* The number of stacks in the table (the highest id). */
uint32_t mp_stack_table_count(const struct mp_stack_table *t);
/* The memory the table holds: chunks, their directories and its indexes. */
uint64_t mp_stack_table_bytes(const struct mp_stack_table *t);
/* The stack of @id, or NULL; its frames are valid until the next call. */
const struct mp_stack *mp_stack_table_get(struct mp_stack_table *t, uint32_t id);

/* Copies the table into p->stacks (replacing them) as its prefix tree,
 * p->stack_tree (mp_profile_stack_frames() reads a stack's frames), the
 * count of stacks that found no room into p->stacks_dropped and the
 * bounds into p->limits. 0 or -ENOMEM. */
int mp_stack_table_export(const struct mp_stack_table *t, struct mp_profile *p);

#endif /* MP_STACKS_H */
