/* SPDX-License-Identifier: MIT */
/*
 * Helper process for the lifecycle tests. Each step prints one line to stdout
 * and then waits for one line on stdin.
 *   ring-helper hold NAME      begin kernel NAME, "ready", wait, exit
 *   ring-helper idle           "ready" without any marker, wait, exit
 *   ring-helper exec           begin "before-exec", "ready1", wait,
 *                              exec itself as "after-exec"
 *   ring-helper after-exec     "ready2" (no marker yet), wait, begin
 *                              "after-exec", "ready3", wait, exit
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "memprof.h"

static void step(const char *line)
{
	char buf[64];

	printf("%s\n", line);
	fflush(stdout);
	if (!fgets(buf, sizeof(buf), stdin))
		_exit(3);
}

int main(int argc, char **argv)
{
	if (argc == 3 && !strcmp(argv[1], "hold")) {
		if (memprof_kernel_begin(argv[2]) < 0)
			return 2;
		step("ready");
		return 0;
	}
	if (argc == 2 && !strcmp(argv[1], "idle")) {
		step("ready");
		return 0;
	}
	if (argc == 2 && !strcmp(argv[1], "exec")) {
		char *args[] = { argv[0], "after-exec", NULL };

		if (memprof_kernel_begin("before-exec") < 0)
			return 2;
		step("ready1");
		execv("/proc/self/exe", args);
		return 4;
	}
	if (argc == 2 && !strcmp(argv[1], "after-exec")) {
		step("ready2");
		if (memprof_kernel_begin("after-exec") < 0)
			return 2;
		step("ready3");
		return 0;
	}
	fprintf(stderr, "usage: ring-helper hold NAME | idle | exec\n");
	return 1;
}
