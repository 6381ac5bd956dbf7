// SPDX-License-Identifier: MIT
/* Parca: WriteRawRequest, framed for gRPC-Web (a flag byte 0 and the
 * message length, big-endian, before the message). */
#include <errno.h>
#include <stdlib.h>

#include "backend_body.h"
#include "parca_profilestore.pb-c.h"

int mp_be_encode_parca(const struct mp_be_chunk *m, const uint8_t *pprof, size_t pprof_len,
		       uint8_t **ret, size_t *ret_len)
{
	Parca__Profilestore__V1alpha1__WriteRawRequest req =
		PARCA__PROFILESTORE__V1ALPHA1__WRITE_RAW_REQUEST__INIT;
	Parca__Profilestore__V1alpha1__RawProfileSeries
		series = PARCA__PROFILESTORE__V1ALPHA1__RAW_PROFILE_SERIES__INIT,
		*sp = &series;
	Parca__Profilestore__V1alpha1__LabelSet set =
		PARCA__PROFILESTORE__V1ALPHA1__LABEL_SET__INIT;
	Parca__Profilestore__V1alpha1__RawSample
		sample = PARCA__PROFILESTORE__V1ALPHA1__RAW_SAMPLE__INIT,
		*smp = &sample;
	Parca__Profilestore__V1alpha1__Label lab[3 + MP_BE_MAX_LABELS], *labp[3 + MP_BE_MAX_LABELS];
	const char *fixed[3][2] = { { "__name__", "memory" },
				    { "service_name", m->service },
				    { "__delta__", "false" } };
	size_t n = 0, len;
	uint8_t *buf;

	for (size_t i = 0; i < 3; i++, n++) {
		parca__profilestore__v1alpha1__label__init(&lab[n]);
		lab[n].name = (char *)fixed[i][0];
		lab[n].value = (char *)fixed[i][1];
	}
	for (size_t i = 0; i < m->n_labels; i++, n++) {
		parca__profilestore__v1alpha1__label__init(&lab[n]);
		lab[n].name = (char *)m->label_key[i];
		lab[n].value = (char *)m->label_value[i];
	}
	for (size_t i = 0; i < n; i++)
		labp[i] = &lab[i];
	set.n_labels = n;
	set.labels = labp;
	series.labels = &set;
	sample.raw_profile.data = (uint8_t *)pprof;
	sample.raw_profile.len = pprof_len;
	series.n_samples = 1;
	series.samples = &smp;
	req.n_series = 1;
	req.series = &sp;
	req.normalized = false;
	len = parca__profilestore__v1alpha1__write_raw_request__get_packed_size(&req);
	if (len > UINT32_MAX)
		return -E2BIG;
	buf = malloc(5 + len);
	if (!buf)
		return -ENOMEM;
	buf[0] = 0; /* uncompressed data frame */
	buf[1] = (uint8_t)(len >> 24);
	buf[2] = (uint8_t)(len >> 16);
	buf[3] = (uint8_t)(len >> 8);
	buf[4] = (uint8_t)len;
	parca__profilestore__v1alpha1__write_raw_request__pack(&req, buf + 5);
	*ret = buf;
	*ret_len = 5 + len;
	return 0;
}
