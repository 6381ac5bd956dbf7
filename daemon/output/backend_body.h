/* SPDX-License-Identifier: MIT */
/*
 * Request bodies of the profile backends, one per protocol:
 *   pyroscope.c  Pyroscope push API (push.v1.PushRequest) and the legacy
 *                /ingest query
 *   parca.c      Parca WriteRawRequest in a gRPC-Web frame
 *   otlp.c       OTLP ExportProfilesServiceRequest (v1development)
 * All return a new buffer the caller frees, or a negative errno. Sending
 * them is daemon/transport/'s business.
 */
#ifndef MP_OUTPUT_BACKEND_BODY_H
#define MP_OUTPUT_BACKEND_BODY_H

#include <stddef.h>
#include <stdint.h>

#include "profile.h"

#define MP_BE_MAX_LABELS 16
#define MP_BE_MAX_TEXT 128

/* What a body says besides the profile: which process, which chunk. */
struct mp_be_chunk {
	const char *service; /* service_name / service.name */
	size_t n_labels; /* static labels / resource attributes */
	const char *label_key[MP_BE_MAX_LABELS], *label_value[MP_BE_MAX_LABELS];
	uint64_t target_id, sequence;
	int32_t pid;
	const char *exe; /* NULL or "" if unknown */
	uint64_t window_begin_ns, window_end_ns; /* CLOCK_MONOTONIC */
};

/* The service name: @configured if set, else the executable's base name,
 * else "unknown". */
const char *mp_be_service_name(const char *configured, const char *exe);

/* Monotonic (the profile's clock) to Unix nanoseconds. */
uint64_t mp_be_unix_ns(uint64_t mono_ns);

/* "?name=...&from=...&until=...&format=pprof" of the legacy /ingest. */
int mp_be_ingest_query(const struct mp_be_chunk *c, char *out, size_t cap);

int mp_be_encode_pyroscope(const struct mp_be_chunk *c, const uint8_t *pprof, size_t pprof_len,
			   uint8_t **ret, size_t *ret_len);
int mp_be_encode_parca(const struct mp_be_chunk *c, const uint8_t *pprof, size_t pprof_len,
		       uint8_t **ret, size_t *ret_len);
int mp_be_encode_otlp(const struct mp_be_chunk *c, const struct mp_profile *p, uint8_t **ret,
		      size_t *ret_len);

#endif /* MP_OUTPUT_BACKEND_BODY_H */
