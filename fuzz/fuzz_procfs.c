// SPDX-License-Identifier: MIT
/* libFuzzer target for the /proc/PID/status and smaps_rollup parsers. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rss.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_field(uint64_t v)
{
	/* every reported value came from a whole number of kB */
	if (v != UINT64_MAX && v % 1024 != 0)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* an exact-size heap copy lets ASan catch any read past the end */
	char *buf = malloc(size ? size : 1);
	struct mp_rss_sample s, untouched;
	uint64_t pss = 3;

	if (!buf)
		return 0;
	memcpy(buf, data, size);
	memset(&s, 0x5a, sizeof(s));
	untouched = s;
	if (mp_rss_parse_status(buf, size, &s) == 0) {
		if (s.ts_ns != 0 || s.pss != UINT64_MAX)
			abort();
		check_field(s.vm_rss);
		check_field(s.rss_anon);
		check_field(s.rss_file);
		check_field(s.rss_shmem);
		check_field(s.vm_hwm);
		check_field(s.vm_swap);
	} else if (memcmp(&s, &untouched, sizeof(s)) != 0) {
		abort();
	}
	if (mp_rss_parse_smaps_rollup(buf, size, &pss) == 0) {
		if (pss % 1024 != 0)
			abort();
	} else if (pss != 3) {
		abort();
	}
	free(buf);
	return 0;
}
