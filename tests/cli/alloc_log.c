// SPDX-License-Identifier: MIT
/*
 * LD_PRELOAD allocator interposer for test_demo: appends one line per heap
 * call made directly by the main executable ("malloc 1728", "free 1728") to
 * the file named by $MP_ALLOC_LOG. Calls from libraries (libc, ld.so,
 * libmemprof) are forwarded without logging, so only the demo's own calls
 * are checked. Never allocates itself.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void *__libc_malloc(size_t size);
void *__libc_calloc(size_t nmemb, size_t size);
void *__libc_realloc(void *p, size_t size);
void *__libc_memalign(size_t align, size_t size);
void __libc_free(void *p);

void *malloc(size_t size);
void *calloc(size_t nmemb, size_t size);
void *realloc(void *p, size_t size);
void free(void *p);
void *aligned_alloc(size_t align, size_t size);
void *memalign(size_t align, size_t size);
int posix_memalign(void **ret, size_t align, size_t size);

static int log_fd = -1;
static struct {
	void *p;
	size_t size;
} live[1024];

static int from_main_exe(const void *ret_addr)
{
	struct link_map *lm = NULL;
	Dl_info info;

	/* the main program is the first object of the link map */
	return dladdr1(ret_addr, &info, (void **)&lm, RTLD_DL_LINKMAP) && lm && !lm->l_prev;
}

static void log_line(const char *what, size_t size)
{
	char line[64];
	int n;

	if (log_fd < 0) {
		const char *path = getenv("MP_ALLOC_LOG");

		if (!path)
			return;
		log_fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
		if (log_fd < 0)
			return;
	}
	n = snprintf(line, sizeof(line), "%s %zu\n", what, size);
	if (write(log_fd, line, (size_t)n) != n)
		abort();
}

static void track(void *p, size_t size)
{
	for (size_t i = 0; p && i < sizeof(live) / sizeof(live[0]); i++)
		if (!live[i].p) {
			live[i].p = p;
			live[i].size = size;
			return;
		}
}

static size_t untrack(void *p)
{
	for (size_t i = 0; i < sizeof(live) / sizeof(live[0]); i++)
		if (live[i].p == p) {
			live[i].p = NULL;
			return live[i].size;
		}
	return (size_t)-1;
}

#define CALLER __builtin_extract_return_addr(__builtin_return_address(0))

void *malloc(size_t size)
{
	void *p = __libc_malloc(size);

	if (from_main_exe(CALLER)) {
		log_line("malloc", size);
		track(p, size);
	}
	return p;
}

void *calloc(size_t nmemb, size_t size)
{
	void *p = __libc_calloc(nmemb, size);

	if (from_main_exe(CALLER)) {
		log_line("calloc", nmemb * size);
		track(p, nmemb * size);
	}
	return p;
}

void *realloc(void *old, size_t size)
{
	void *p = __libc_realloc(old, size);

	if (from_main_exe(CALLER))
		log_line("realloc", size);
	return p;
}

void free(void *p)
{
	if (p && from_main_exe(CALLER))
		log_line("free", untrack(p));
	__libc_free(p);
}

void *aligned_alloc(size_t align, size_t size)
{
	if (from_main_exe(CALLER))
		log_line("aligned_alloc", size);
	return __libc_memalign(align, size);
}

void *memalign(size_t align, size_t size)
{
	if (from_main_exe(CALLER))
		log_line("memalign", size);
	return __libc_memalign(align, size);
}

int posix_memalign(void **ret, size_t align, size_t size)
{
	void *p;

	if (from_main_exe(CALLER))
		log_line("posix_memalign", size);
	if (align < sizeof(void *) || (align & (align - 1)))
		return EINVAL;
	p = __libc_memalign(align, size);
	if (!p)
		return ENOMEM;
	*ret = p;
	return 0;
}
