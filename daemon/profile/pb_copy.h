/* SPDX-License-Identifier: MIT */
/* Field copies between the model and memprof.proto messages that have the
 * same counters under the same names, for the encoder (profile_enc.c) and
 * the decoder (profile_pb.c). */
#ifndef MP_PB_COPY_H
#define MP_PB_COPY_H

#define COPY_COUNTS(d, s)                          \
	do {                                       \
		(d).alloc_bytes = (s).alloc_bytes; \
		(d).alloc_count = (s).alloc_count; \
		(d).free_bytes = (s).free_bytes;   \
		(d).free_count = (s).free_count;   \
	} while (0)
#define COPY_LIVE(d, s)                          \
	do {                                     \
		(d).live_bytes = (s).live_bytes; \
		(d).live_count = (s).live_count; \
		(d).peak_bytes = (s).peak_bytes; \
	} while (0)

#endif /* MP_PB_COPY_H */
