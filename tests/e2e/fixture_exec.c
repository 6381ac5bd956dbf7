// SPDX-License-Identifier: MIT
/*
 * Calls exec with a kernel open. First image: kernel "before_exec" opens,
 * 1000 bytes are allocated in it, then the program execs itself with
 * argument "after". Second image: waits until the daemon reads its new
 * ring (and so traces its allocator again), allocates 5000 bytes outside any kernel, then 300 bytes in
 * kernel "after_exec", and exits.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <memprof.h>

#include "../hostile/own_ring.h"

int main(int argc, char **argv)
{
	struct own_ring r;
	void *a, *b;

	(void)argc;
	memprof_phase(argc > 1 ? "second" : "first"); /* creates the ring */
	if (own_ring_map(&r) < 0 || !own_ring_wait_attached(&r))
		return 3;
	memprof_phase(argc > 1 ? "second" : "first");
	if (!own_ring_wait_read(&r))
		return 3;
	if (argc > 1 && !strcmp(argv[1], "after")) {
		a = malloc(5000);
		memprof_kernel_begin("after_exec");
		b = malloc(300);
		memprof_kernel_end();
		free(b);
		free(a);
		return 0;
	}
	memprof_kernel_begin("before_exec");
	if (!malloc(1000))
		return 1;
	execl("/proc/self/exe", argv[0], "after", (char *)NULL);
	return 2;
}
