/* SPDX-License-Identifier: MIT */
/*
 * Hidden functions of libmemprof shared between its source files (never
 * exported: -fvisibility=hidden and memprof.map). They keep the marker
 * path's guarantees: no lock, no malloc, no syscall after the calling
 * thread's first marker.
 */
#ifndef MEMPROF_CLIENT_INTERNAL_H
#define MEMPROF_CLIENT_INTERNAL_H

#include <stdint.h>

/* The string-table id of @name (interned on first use; 0 when the table is
 * full) in *ret_id. 0 or a negative errno (no ring, no thread slot). */
int mp__intern(const char *name, uint32_t *ret_id);

/* Writes one record into the calling thread's ring, timestamped now, with
 * @n payload words (at most MP_MAX_RANK) in the slot's dims. Nothing is
 * written while no consumer is attached (returns 0). 0, -ENOSPC (ring
 * full, counted) or the thread's first-marker error. */
int mp__ring_record(uint8_t type, uint32_t name_id, const int64_t *words, int n);

#endif /* MEMPROF_CLIENT_INTERNAL_H */
