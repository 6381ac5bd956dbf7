// SPDX-License-Identifier: MIT
/* A library whose constructor takes 3 s (tests/inject): a dlopen() the
 * injector makes of it does not return within its bound. */
#include <unistd.h>

__attribute__((constructor)) static void slow_init(void)
{
	sleep(3);
}
