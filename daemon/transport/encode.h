/* SPDX-License-Identifier: MIT */
/*
 * Request bodies of the profile backends, one per protocol:
 *   pyroscope.c  Pyroscope push API (push.v1.PushRequest) and the legacy
 *                /ingest query
 *   parca.c      Parca WriteRawRequest in a gRPC-Web frame
 *   otlp.c       OTLP ExportProfilesServiceRequest (v1development)
 * All return a new buffer the caller frees, or a negative errno.
 */
#ifndef MP_STREAM_ENCODE_H
#define MP_STREAM_ENCODE_H

#include <stddef.h>
#include <stdint.h>

#include "profile.h"
#include "stream.h"
#include "url.h"

/* The value of service_name / service.name: the URL's, else the
 * executable's base name, else "unknown". */
const char *mp_be_service_name(const struct mp_backend_url *u, const struct mp_chunk_meta *m);

/* Monotonic (the profile's clock) to Unix nanoseconds. */
uint64_t mp_be_unix_ns(uint64_t mono_ns);

/* "?name=...&from=...&until=...&format=pprof" of the legacy /ingest. */
int mp_be_ingest_query(const struct mp_chunk_meta *m, char *out, size_t cap);

int mp_be_encode_pyroscope(const struct mp_backend_url *u, const struct mp_chunk_meta *m,
			   const uint8_t *pprof, size_t pprof_len, uint8_t **ret, size_t *ret_len);
int mp_be_encode_parca(const struct mp_backend_url *u, const struct mp_chunk_meta *m,
		       const uint8_t *pprof, size_t pprof_len, uint8_t **ret, size_t *ret_len);
int mp_be_encode_otlp(const struct mp_backend_url *u, const struct mp_chunk_meta *m,
		      const struct mp_profile *p, uint8_t **ret, size_t *ret_len);

#endif /* MP_STREAM_ENCODE_H */
