// SPDX-License-Identifier: MIT
#include <unistd.h>

void mp_test_die_lib_ref(void);

int main(void)
{
	mp_test_die_lib_ref();
	return 0;
}
