/* SPDX-License-Identifier: MIT */
/*
 * A minimal streaming JSON writer. Strings are escaped for any byte value
 * (names come from the profiled process): control characters and bytes
 * that are not valid UTF-8 are written as \u escapes, so the output is
 * always valid JSON.
 */
#ifndef MP_JSON_H
#define MP_JSON_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#define MP_JSON_MAX_DEPTH 32

struct mp_json {
	FILE *f;
	bool pretty;
	unsigned depth;
	bool first[MP_JSON_MAX_DEPTH];
	unsigned flat_from; /* pretty: no line breaks at this depth and deeper; 0 none */
	int err;
};

void mp_json_init(struct mp_json *j, FILE *f, bool pretty);
/* @key is NULL for values inside arrays and for the top-level value. */
void mp_json_object_begin(struct mp_json *j, const char *key);
void mp_json_object_end(struct mp_json *j);
void mp_json_array_begin(struct mp_json *j, const char *key);
void mp_json_array_end(struct mp_json *j);
/* An array written on one line even when pretty (shapes, short lists). */
void mp_json_array_begin_flat(struct mp_json *j, const char *key);
void mp_json_str(struct mp_json *j, const char *key, const char *v); /* NULL: null */
void mp_json_u64(struct mp_json *j, const char *key, uint64_t v);
void mp_json_i64(struct mp_json *j, const char *key, int64_t v);
void mp_json_bool(struct mp_json *j, const char *key, bool v);
void mp_json_null(struct mp_json *j, const char *key);
/* 10 significant digits; null when not finite. */
void mp_json_f64(struct mp_json *j, const char *key, double v);
/* Ends the document with a newline; 0 or -EIO / -EINVAL (unbalanced). */
int mp_json_finish(struct mp_json *j);

struct mp_shape;
/* @key: an array of @n shapes, each a flat array of its dimensions. */
void mp_json_shapes(struct mp_json *j, const char *key, const struct mp_shape *s, uint32_t n);

/* Writes @s as a JSON string literal (with quotes). */
void mp_json_write_string(FILE *f, const char *s);

#endif /* MP_JSON_H */
