// SPDX-License-Identifier: MIT
/* daemon/stacks/stacks.c: the stack table's ids (first sight order, one
 * per distinct frames and flags), its bound and its export. */
#include <criterion/criterion.h>
#include <stdlib.h>

#include "stacks.h"

Test(stack_table, ids_and_export)
{
	static const uint64_t a[] = { 0x401000, 0x402000, 0x403000 };
	static const uint64_t b[] = { 0x401000, 0x402000 };
	struct mp_stack_table *t;
	struct mp_profile p = { 0 };

	cr_assert_eq(mp_stack_table_new(&t), 0);
	cr_assert_eq(mp_stack_table_intern(t, a, 3, 0), 1);
	cr_assert_eq(mp_stack_table_intern(t, b, 2, 0), 2);
	cr_assert_eq(mp_stack_table_intern(t, a, 3, MP_STACK_F_TRUNCATED), 3);
	cr_assert_eq(mp_stack_table_intern(t, a, 0, 0), 4);
	cr_assert_eq(mp_stack_table_intern(t, b, 2, 0), 2);
	cr_assert_eq(mp_stack_table_intern(t, a, 3, 0), 1);
	cr_assert_eq(mp_stack_table_intern(t, a, 3, MP_STACK_F_TRUNCATED), 3);
	cr_assert_eq(mp_stack_table_intern(t, NULL, 0, 0), 4);
	cr_assert_null(mp_stack_table_get(t, 0));
	cr_assert_null(mp_stack_table_get(t, 5));
	cr_assert_eq(mp_stack_table_get(t, 2)->n_frames, 2);
	cr_assert_eq(mp_stack_table_export(t, &p), 0);
	cr_assert_eq(p.n_stacks, 4);
	cr_assert_eq(p.stacks_dropped, 0);
	cr_assert_eq(p.stacks[0].n_frames, 3);
	cr_assert_eq(p.stacks[0].flags, 0);
	cr_assert_arr_eq(p.stacks[0].frames, a, sizeof(a));
	cr_assert_eq(p.stacks[1].n_frames, 2);
	cr_assert_arr_eq(p.stacks[1].frames, b, sizeof(b));
	cr_assert_eq(p.stacks[2].n_frames, 3);
	cr_assert_eq(p.stacks[2].flags, MP_STACK_F_TRUNCATED);
	cr_assert_arr_eq(p.stacks[2].frames, a, sizeof(a));
	cr_assert_eq(p.stacks[3].n_frames, 0);
	for (uint32_t i = 0; i < p.n_stacks; i++)
		free(p.stacks[i].frames);
	free(p.stacks);
	mp_stack_table_free(t);
	mp_stack_table_free(NULL);
}

/* Past MP_STACKS_MAX stacks a new stack gets no id and is counted; known
 * stacks keep theirs. */
Test(stack_table, bound)
{
	struct mp_stack_table *t;
	struct mp_profile p = { 0 };
	uint64_t f;

	cr_assert_eq(mp_stack_table_new(&t), 0);
	for (uint32_t i = 0; i < MP_STACKS_MAX; i++) {
		f = 0x400000 + i;
		cr_assert_eq(mp_stack_table_intern(t, &f, 1, 0), i + 1);
	}
	f = 0x300000;
	cr_assert_eq(mp_stack_table_intern(t, &f, 1, 0), 0);
	cr_assert_eq(mp_stack_table_intern(t, &f, 1, 0), 0);
	f = 0x400000 + 7;
	cr_assert_eq(mp_stack_table_intern(t, &f, 1, 0), 8);
	cr_assert_eq(mp_stack_table_export(t, &p), 0);
	cr_assert_eq(p.n_stacks, MP_STACKS_MAX);
	cr_assert_eq(p.stacks_dropped, 2);
	for (uint32_t i = 0; i < p.n_stacks; i++)
		free(p.stacks[i].frames);
	free(p.stacks);
	mp_stack_table_free(t);
}
