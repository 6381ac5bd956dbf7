// SPDX-License-Identifier: MIT
/*
 * The process whose RSS tests/proc measures. A separate executable built
 * without sanitizers: a forked copy of the sanitized test would map ASan
 * shadow for the pages it touches (8 MiB per 64 MiB), and the growth the
 * test expects would depend on the build.
 *
 * Commands on stdin, one byte each, acked on stdout: 't' touches 64 MiB of
 * fresh anonymous pages, 'q' exits 0. With argument "leaderless" the main
 * thread calls pthread_exit() and a second thread serves the commands.
 */
#include <pthread.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define TOUCH_BYTES (64ul << 20)

static void *serve(void *arg)
{
	char c;

	(void)arg;
	while (read(0, &c, 1) == 1) {
		if (c == 't') {
			volatile char *p = mmap(NULL, TOUCH_BYTES, PROT_READ | PROT_WRITE,
						MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

			if (p == MAP_FAILED)
				_exit(2);
			for (size_t i = 0; i < TOUCH_BYTES; i += 4096)
				p[i] = 1;
		}
		if (write(1, &c, 1) != 1)
			_exit(3);
		if (c == 'q')
			_exit(0);
	}
	_exit(1);
}

int main(int argc, char **argv)
{
	pthread_t t;

	if (argc > 1 && !strcmp(argv[1], "leaderless")) {
		if (pthread_create(&t, NULL, serve, NULL) != 0)
			return 4;
		pthread_exit(NULL);
	}
	serve(NULL);
	return 1;
}
