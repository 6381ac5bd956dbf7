/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for the profile decoder (memprof report/convert read
 * profile files someone else wrote). Whatever decodes must render and
 * re-encode without a fault: the renderers trust only what the decoder
 * validated.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "profile_pb.h"
#include "report.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void exercise(struct mp_profile *p)
{
	FILE *f = fopen("/dev/null", "w");
	uint8_t *buf;
	size_t len;

	if (f) {
		mp_report_write(p, MP_REPORT_TABLE, NULL, f);
		mp_report_write(p, MP_REPORT_JSON, NULL, f);
		mp_report_write(p, MP_REPORT_TFJS, NULL, f);
		if (p->n_names)
			mp_report_write(p, MP_REPORT_TFJS, p->names[0], f);
		fclose(f);
	}
	if (mp_profile_encode(p, &buf, &len) == 0)
		free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct mp_profile *p = NULL;

	/* Both framings: the file (header + message) and a bare message. */
	if (mp_profile_file_decode(data, size, &p, NULL) == 0) {
		exercise(p);
		mp_profile_free(p);
	}
	p = NULL;
	if (mp_profile_decode(data, size, &p, NULL) == 0) {
		exercise(p);
		mp_profile_free(p);
	}
	return 0;
}
