// SPDX-License-Identifier: MIT
/* The service's control protocol: any bytes, parsed directly and received
 * through a socket as a client would send them. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "control.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct mp_ctl_msg msg;
	char why[160];
	uint64_t v;
	int sv[2], fd = -1;

	if (mp_ctl_parse(data, size, &msg) == 0) {
		mp_ctl_get(&msg, "cmd");
		mp_ctl_get_u64(&msg, "pid", UINT32_MAX, &v);
		mp_ctl_check_request(&msg, why, sizeof(why));
	}
	if (size > 200000 || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
		return 0;
	/* The socket buffer holds this much; the receiver sees EOF after. */
	if (write(sv[0], data, size) == (ssize_t)size) {
		shutdown(sv[0], SHUT_WR);
		if (mp_ctl_recv(sv[1], &msg, &fd) == 0) {
			mp_ctl_check_request(&msg, why, sizeof(why));
			if (fd >= 0)
				close(fd);
		}
	}
	close(sv[0]);
	close(sv[1]);
	return 0;
}
