/* tests/peers/peak.c: a program with a known heap peak and a known leak.
 * It allocates 40 blocks of 100 000 bytes (4 000 000 bytes live: the
 * peak, each block below glibc's mmap threshold) and 3 of 300 000 (served
 * by mmap, 900 000 more: 4 900 000 live), frees them all, then allocates
 * 1000 blocks of 24 bytes, frees them, and leaks one block of 12 345
 * bytes. Peak 4 900 000 bytes, leaked 12 345. */
#include <stdlib.h>
#include <string.h>

static void *volatile keep[1000];

int main(void)
{
	void *leaked;

	for (int i = 0; i < 43; i++) {
		size_t n = i < 40 ? 100000 : 300000;

		keep[i] = malloc(n);
		if (!keep[i])
			return 1;
		memset(keep[i], i, n);
	}
	for (int i = 0; i < 43; i++)
		free(keep[i]);
	for (int i = 0; i < 1000; i++) {
		keep[i] = malloc(24);
		if (!keep[i])
			return 1;
	}
	for (int i = 0; i < 1000; i++)
		free(keep[i]);
	leaked = malloc(12345);
	if (!leaked)
		return 1;
	memset(leaked, 5, 12345);
	keep[0] = leaked;
	return 0;
}
