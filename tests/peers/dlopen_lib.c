/* tests/peers/dlopen_lib.c: the library tests/peers/dlopen_main.c loads
 * with RTLD_DEEPBIND: a string copied with strdup (whose malloc is libc's
 * own call) and a block of 10 bytes from the library's own malloc, both
 * freed. */
#include <stdlib.h>
#include <string.h>

void peers_lib_work(void);

void peers_lib_work(void)
{
	static const char text[] = "a string the deep-bound library copies";
	char *s = strdup(text);
	char *p = malloc(10);

	if (s && p)
		memcpy(p, s, 10);
	free(s);
	free(p);
}
