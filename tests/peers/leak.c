/* tests/peers/leak.c: a program that leaks a known number of bytes through
 * malloc, calloc and realloc, and frees blocks of posix_memalign and
 * aligned_alloc. 100 blocks of 1000 + i bytes: the even ones are freed,
 * the odd ones leaked (50 000 + 2 500 = 52 500 bytes); a calloc'd block
 * of 64 x 8 bytes grown by realloc to 1024 bytes, leaked; an aligned block
 * of 4096 bytes from posix_memalign and one of 256 from aligned_alloc,
 * both freed. Leaked in all: 52 500 + 1024 = 53 524 bytes. */
#include <stdlib.h>
#include <string.h>

static void *volatile keep[101];

int main(void)
{
	void *a = NULL, *b;
	char *c;

	for (int i = 0; i < 100; i++) {
		keep[i] = malloc(1000 + i);
		if (!keep[i])
			return 1;
		memset(keep[i], i, 1000 + i);
	}
	for (int i = 0; i < 100; i += 2)
		free(keep[i]);
	c = calloc(64, 8);
	if (!c)
		return 1;
	c = realloc(c, 1024);
	if (!c)
		return 1;
	keep[100] = c;
	if (posix_memalign(&a, 64, 4096) != 0)
		return 1;
	b = aligned_alloc(256, 256);
	if (!b)
		return 1;
	memset(a, 2, 4096);
	memset(b, 3, 256);
	free(a);
	free(b);
	return 0;
}
