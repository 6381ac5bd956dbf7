// SPDX-License-Identifier: MIT
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "release.h"

#define KEEP_MAX 1024

static int cmp_int(const void *a, const void *b)
{
	int x = *(const int *)a, y = *(const int *)b;

	return (x > y) - (x < y);
}

/* The grandchild: every fd but @keep (sorted) closed, then @ready's write
 * end, then it waits for @go's EOF and exits. Async-signal-safe calls only:
 * the caller has threads. */
static void __attribute__((noreturn)) hold(const int *keep, size_t n, int ready, int go)
{
	unsigned int lo = 0;
	char c;

	for (size_t i = 0; i < n; i++) {
		if ((unsigned int)keep[i] > lo)
			syscall(SYS_close_range, lo, (unsigned int)keep[i] - 1, 0);
		lo = (unsigned int)keep[i] + 1;
	}
	syscall(SYS_close_range, lo, ~0u, 0);
	close(ready);
	while (read(go, &c, 1) < 0 && errno == EINTR)
		;
	_exit(0);
}

int mp_release_in_child(const int *fds, size_t n)
{
	int keep[KEEP_MAX + 2], go[2], ready[2];
	pid_t mid;
	char c;

	if (!n || n > KEEP_MAX || pipe2(go, O_CLOEXEC) < 0)
		return -1;
	if (pipe2(ready, O_CLOEXEC) < 0) {
		close(go[0]);
		close(go[1]);
		return -1;
	}
	memcpy(keep, fds, n * sizeof(*fds));
	keep[n++] = go[0];
	keep[n++] = ready[1];
	qsort(keep, n, sizeof(*keep), cmp_int);
	mid = fork();
	if (mid == 0) {
		if (fork() != 0)
			_exit(0);
		hold(keep, n, ready[1], go[0]);
	}
	close(go[0]);
	close(ready[1]);
	if (mid > 0) {
		while (waitpid(mid, NULL, 0) < 0 && errno == EINTR)
			;
		/* EOF once the grandchild holds nothing but @fds (or is gone:
		 * a grandchild that failed to start took its copies along) */
		while (read(ready[0], &c, 1) < 0 && errno == EINTR)
			;
	}
	close(ready[0]);
	if (mid < 0) {
		close(go[1]);
		return -1;
	}
	return go[1];
}
