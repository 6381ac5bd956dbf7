// SPDX-License-Identifier: MIT
/* Launched by test_launch: proves main ran by creating argv[1], then exits
 * with argv[2]. Built dynamic PIE, dynamic non-PIE and static. */
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	int fd;

	if (argc < 3)
		return 100;
	fd = open(argv[1], O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
	if (fd < 0)
		return 101;
	close(fd);
	return atoi(argv[2]);
}
