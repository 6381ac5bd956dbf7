// SPDX-License-Identifier: MIT
/* A DT_NEEDED library whose constructor ends the process: the loader runs it
 * before the executable's entry point, so mp_launch sees a child that never
 * reaches its entry. */
#include <unistd.h>

void mp_test_die_lib_ref(void);

__attribute__((constructor)) static void die_early(void)
{
	_exit(42);
}

void mp_test_die_lib_ref(void)
{
}
