/* SPDX-License-Identifier: MIT */
/*
 * The stack table of one profile: call stacks deduplicated as they are
 * unwound (one id per distinct list of frames and truncation flag), so a
 * site refers to its stack by id. Bounded: beyond MP_STACKS_MAX stacks or
 * MP_STACKS_MAX_FRAMES frames in all, new stacks get no id.
 */
#ifndef MP_STACKS_H
#define MP_STACKS_H

#include <stdint.h>

#include "profile.h"

#define MP_STACKS_MAX MP_PROFILE_MAX_STACKS
#define MP_STACKS_MAX_FRAMES (1u << 23) /* the default; mp_stack_table_set_max() */

struct mp_stack_table;

int mp_stack_table_new(struct mp_stack_table **ret);
void mp_stack_table_free(struct mp_stack_table *t);
/* Lower bounds than the defaults (0: keep one), before the first stack:
 * at most @max_stacks stacks (<= MP_STACKS_MAX) and @max_frames frames. */
void mp_stack_table_set_max(struct mp_stack_table *t, uint32_t max_stacks, uint64_t max_frames);

/* The id (>= 1) of @frames[0..n) with @flags (MP_STACK_F_*), added if new;
 * 0 when the table is full or out of memory (counted). */
uint32_t mp_stack_table_intern(struct mp_stack_table *t, const uint64_t *frames, uint32_t n,
			       uint32_t flags);
/* The number of stacks in the table (the highest id). */
uint32_t mp_stack_table_count(const struct mp_stack_table *t);
/* The stack of @id, or NULL. */
const struct mp_stack *mp_stack_table_get(const struct mp_stack_table *t, uint32_t id);

/* Copies the table into p->stacks (replacing them) and the count of stacks
 * that found no room into p->stacks_dropped. 0 or -ENOMEM. */
int mp_stack_table_export(const struct mp_stack_table *t, struct mp_profile *p);

#endif /* MP_STACKS_H */
