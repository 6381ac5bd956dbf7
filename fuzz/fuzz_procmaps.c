// SPDX-License-Identifier: MIT
/* libFuzzer target: /proc/PID/maps is hostile input (paths are chosen by the
 * target). */
#include <stddef.h>
#include <stdint.h>

#include "procmaps.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct mp_procmaps *pm;

	if (mp_procmaps_parse((const char *)data, size, &pm) < 0)
		return 0;
	for (size_t i = 0; i < pm->n; i++) {
		const struct mp_mapping *m = &pm->maps[i];

		if (mp_procmaps_find(pm, m->start) != m || mp_procmaps_find(pm, m->end - 1) != m)
			__builtin_trap();
	}
	mp_procmaps_free(pm);
	return 0;
}
