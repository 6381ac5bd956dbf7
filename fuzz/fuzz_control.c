// SPDX-License-Identifier: MIT
/* The service's control protocol: any bytes, parsed directly and received
 * through a socket as a client would send them; the values of a request
 * checked by the option table, as the service does for attach. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "control.h"
#include "option_table.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Every field whose key is in the table, as a request and as a line of the
 * configuration file would give it. */
static void check_values(const struct mp_ctl_msg *m)
{
	struct mp_opt_value v;
	char hint[160];

	for (size_t i = 0; i < m->n; i++) {
		const struct mp_option *o = mp_opt_by_key(m->f[i].key);

		if (!o)
			continue;
		mp_opt_parse(o, MP_OPT_REQUEST, m->f[i].value, &v);
		mp_opt_parse(o, MP_OPT_FILE, m->f[i].value, &v);
		mp_opt_hint(o, MP_OPT_REQUEST, hint, sizeof(hint));
	}
}

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
		check_values(&msg);
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
