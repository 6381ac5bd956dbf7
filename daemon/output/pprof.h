/* SPDX-License-Identifier: MIT */
/*
 * The profile model → pprof (proto/profile.proto), read by `go tool pprof`
 * and Pyroscope. One sample per allocation site, leaf-only stacks (the
 * caller of the allocator), values in Go's heap-profile order:
 * alloc_objects/count, alloc_space/bytes, inuse_objects/count,
 * inuse_space/bytes; labels kernel, phase, owner (strings) and thread
 * (number). See docs/OUTPUT.md.
 */
#ifndef MP_PPROF_H
#define MP_PPROF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "profile.h"

/* Serializes @p as a pprof Profile message, gzip-compressed when @gzip
 * (what pprof files and Pyroscope's format=pprof carry), into a new buffer
 * the caller frees. */
int mp_pprof_encode(const struct mp_profile *p, bool gzip, uint8_t **ret_buf, size_t *ret_len);

/* Writes @p to @path as a gzip-compressed pprof file (atomically). */
int mp_pprof_save(const struct mp_profile *p, const char *path);

/* gzip (RFC 1952) of @len bytes into a new buffer the caller frees. */
int mp_gzip(const void *buf, size_t len, uint8_t **ret_buf, size_t *ret_len);

#endif /* MP_PPROF_H */
