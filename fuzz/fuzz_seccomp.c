// SPDX-License-Identifier: MIT
/*
 * fuzz-seccomp: daemon/sources/seccomp_eval.c over arbitrary programs and
 * system call data. The injector runs a target's seccomp filters, which
 * the target installed: whatever they hold, the evaluation ends within the
 * program's length, reads nothing outside it or the data, and a return
 * value it gives is one the program computed.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "seccomp_eval.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct sock_filter prog[BPF_MAXINSNS];
	struct seccomp_data d;
	size_t n;
	uint32_t ret = 0;

	if (size < sizeof(d))
		return 0;
	memcpy(&d, data, sizeof(d));
	data += sizeof(d);
	size -= sizeof(d);
	n = size / sizeof(prog[0]);
	if (n > BPF_MAXINSNS)
		n = BPF_MAXINSNS;
	memcpy(prog, data, n * sizeof(prog[0]));
	if (mp_seccomp_eval(prog, n, &d, &ret) == 0)
		(void)mp_seccomp_allows(ret);
	return 0;
}
