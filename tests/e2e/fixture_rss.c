// SPDX-License-Identifier: MIT
/*
 * Kernel "touch" maps 64 MiB of fresh anonymous memory (through malloc) and
 * writes every page. Prints the exact number of bytes of pages it touched
 * ("touched=N") so the test can assert exact rss_stat attribution.
 * Transparent huge pages are disabled for the block so the page count is
 * deterministic. The process rests 250 ms before and after the kernel so
 * that RSS samples (100 Hz by default) see it before and after, even when
 * a loaded machine delays the sampler by tens of milliseconds.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <memprof.h>

#define SIZE (64u << 20)

static void rest(void)
{
	struct timespec ts = { .tv_nsec = 250 * 1000 * 1000 };

	nanosleep(&ts, NULL);
}

int main(void)
{
	uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE), first, last;
	unsigned char *p;

	rest();
	memprof_kernel_begin("touch");
	p = malloc(SIZE);
	if (!p)
		return 1;
	madvise((void *)((uintptr_t)p & ~(page - 1)), SIZE + page, MADV_NOHUGEPAGE);
	memset(p, 1, SIZE);
	memprof_kernel_end();
	rest();

	first = (uintptr_t)p & ~(page - 1);
	last = ((uintptr_t)p + SIZE - 1) & ~(page - 1);
	printf("touched=%lu\n", (unsigned long)(last - first + page));
	fflush(stdout);
	free(p);
	return 0;
}
