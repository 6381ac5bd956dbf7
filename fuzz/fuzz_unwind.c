// SPDX-License-Identifier: MIT
/*
 * libFuzzer target: the unwinder (daemon/stacks/) over hostile registers
 * and stack bytes, as a target's BPF event or ring record could carry
 * them, against the real code mappings of this process (so CFI is found
 * and followed). Input: ip, sp, bp (8 bytes each), then the stack slice.
 * The first word is folded into this process's code half the time so the
 * unwinder gets past the first frame.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "procmaps.h"
#include "unwind.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct mp_unwinder *unwinder;
static uint64_t code_start, code_size;

static void setup(void)
{
	struct mp_procmaps *maps;

	if (mp_procmaps_read(getpid(), &maps) < 0)
		abort();
	for (size_t i = 0; i < maps->n; i++) {
		if ((maps->maps[i].perms & MP_MAP_X) && maps->maps[i].path[0] == '/') {
			code_start = maps->maps[i].start;
			code_size = maps->maps[i].end - maps->maps[i].start;
			break;
		}
	}
	if (mp_unwinder_new(getpid(), maps, &unwinder) < 0)
		abort();
	mp_procmaps_free(maps);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint64_t frames[MP_UNWIND_DEFAULT_DEPTH];
	struct mp_unwind_regs r;
	bool trunc;
	int n;

	if (!unwinder)
		setup();
	if (size < sizeof(r))
		return 0;
	memcpy(&r, data, sizeof(r));
	if ((r.ip & 1) && code_size)
		r.ip = code_start + (r.ip >> 1) % code_size;
	n = mp_unwind(unwinder, &r, data + sizeof(r), size - sizeof(r), MP_UNWIND_DEFAULT_DEPTH,
		      frames, &trunc);
	if (n < 0 || n > MP_UNWIND_DEFAULT_DEPTH)
		abort();
	return 0;
}
