/* SPDX-License-Identifier: MIT */
/*
 * The profile model <-> memprof.proto (proto/memprof.proto). A profile file
 * is one serialized memprof.Profile message.
 *
 * Decoding treats its input as hostile: anything protobuf-c refuses, any
 * index out of range, any length beyond the model's bounds yields -EBADMSG
 * and a static message saying what was wrong; a file from a newer,
 * incompatible format version yields -EPROTONOSUPPORT.
 */
#ifndef MP_PROFILE_PB_H
#define MP_PROFILE_PB_H

#include <stddef.h>
#include <stdint.h>

#include "profile.h"

/* Largest profile file mp_profile_load() reads. */
#define MP_PROFILE_MAX_FILE (1u << 30)

/* A profile file: a fixed header, then one memprof.Profile message. The
 * header makes truncation and corruption detectable, which a bare protobuf
 * message is not (any prefix ending on a field boundary parses).
 *   0  8 bytes  magic "MEMPROF\0"
 *   8  u32 LE   container version (1)
 *  12  u32 LE   CRC-32 (zlib) of the message
 *  16  u64 LE   message length; the file ends right after the message */
#define MP_PROFILE_FILE_MAGIC "MEMPROF\0"
#define MP_PROFILE_FILE_VERSION 1
#define MP_PROFILE_FILE_HEADER 24

/* Serializes @p as a bare memprof.Profile message (streams carry these,
 * length-delimited) into a new buffer the caller frees. */
int mp_profile_encode(const struct mp_profile *p, uint8_t **ret_buf, size_t *ret_len);
/* Same, with @room bytes left free before the message (the file header):
 * the message is *@ret_len bytes at *@ret_buf + @room. */
int mp_profile_encode_room(const struct mp_profile *p, size_t room, uint8_t **ret_buf,
			   size_t *ret_len);
/* The buffer mp_profile_encode_with() writes into, asked for once: @len
 * bytes and @slack writable past them (which it may scribble on), in
 * *@ret; 0 or a negative errno (*@ret then NULL, or the caller's to
 * release as after a failed encode). */
typedef int (*mp_profile_room_fn)(void *ctx, size_t len, size_t slack, uint8_t **ret);
/* mp_profile_encode_room() into a buffer @get gives (a file's mapping):
 * the message is *@ret_len bytes at *@ret_buf + @room. On failure
 * *@ret_buf is the buffer @get gave, if any, for the caller to release. */
int mp_profile_encode_with(const struct mp_profile *p, size_t room, mp_profile_room_fn get,
			   void *ctx, uint8_t **ret_buf, size_t *ret_len);
/* Parses a bare message; on failure *@ret_why (if not NULL) explains. */
int mp_profile_decode(const void *buf, size_t len, struct mp_profile **ret, const char **ret_why);

/* The file header (MP_PROFILE_FILE_HEADER bytes) of the bare message
 * @msg: a file is the header followed by the message. */
void mp_profile_file_header(const uint8_t *msg, size_t len, uint8_t *hdr);

/* Same for the file format (header + message). */
int mp_profile_file_encode(const struct mp_profile *p, uint8_t **ret_buf, size_t *ret_len);
int mp_profile_file_decode(const void *buf, size_t len, struct mp_profile **ret,
			   const char **ret_why);

/* Reads a profile file of at most MP_PROFILE_MAX_FILE bytes. */
int mp_profile_load(const char *path, struct mp_profile **ret, const char **ret_why);

#endif /* MP_PROFILE_PB_H */
