/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <inttypes.h>
#include <math.h>

#include "json.h"
#include "profile.h"

void mp_json_init(struct mp_json *j, FILE *f, bool pretty)
{
	*j = (struct mp_json){ .f = f, .pretty = pretty };
	j->first[0] = true;
}

/* Length of the valid UTF-8 sequence at @s, 0 if invalid. */
static int utf8_len(const unsigned char *s)
{
	int n;
	uint32_t cp;

	if (s[0] < 0x80)
		return 1;
	if ((s[0] & 0xe0) == 0xc0) {
		n = 2;
		cp = s[0] & 0x1f;
	} else if ((s[0] & 0xf0) == 0xe0) {
		n = 3;
		cp = s[0] & 0x0f;
	} else if ((s[0] & 0xf8) == 0xf0) {
		n = 4;
		cp = s[0] & 0x07;
	} else {
		return 0;
	}
	for (int i = 1; i < n; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		cp = cp << 6 | (s[i] & 0x3f);
	}
	/* Overlong forms, surrogates and values past U+10FFFF are invalid. */
	if ((n == 2 && cp < 0x80) || (n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) ||
	    cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	return n;
}

void mp_json_write_string(FILE *f, const char *str)
{
	const unsigned char *s = (const unsigned char *)str;

	fputc('"', f);
	while (*s) {
		int n;

		switch (*s) {
		case '"':
			fputs("\\\"", f);
			s++;
			continue;
		case '\\':
			fputs("\\\\", f);
			s++;
			continue;
		case '\n':
			fputs("\\n", f);
			s++;
			continue;
		case '\t':
			fputs("\\t", f);
			s++;
			continue;
		case '\r':
			fputs("\\r", f);
			s++;
			continue;
		default:
			break;
		}
		if (*s < 0x20 || *s == 0x7f) {
			fprintf(f, "\\u%04x", *s);
			s++;
			continue;
		}
		n = utf8_len(s);
		if (n == 0) {
			/* Not UTF-8: keep the byte's value, as Latin-1. */
			fprintf(f, "\\u%04x", *s);
			s++;
			continue;
		}
		fwrite(s, 1, n, f);
		s += n;
	}
	fputc('"', f);
}

static void indent(struct mp_json *j)
{
	if (!j->pretty || (j->flat_from && j->depth >= j->flat_from))
		return;
	fputc('\n', j->f);
	for (unsigned i = 0; i < j->depth; i++)
		fputs("  ", j->f);
}

static void value_prefix(struct mp_json *j, const char *key)
{
	if (!j->first[j->depth])
		fputs(j->pretty && j->flat_from && j->depth >= j->flat_from ? ", " : ",", j->f);
	j->first[j->depth] = false;
	if (j->depth > 0)
		indent(j);
	if (key) {
		mp_json_write_string(j->f, key);
		fputs(j->pretty ? ": " : ":", j->f);
	}
}

static void open_(struct mp_json *j, const char *key, char ch)
{
	value_prefix(j, key);
	fputc(ch, j->f);
	if (j->depth + 1 >= MP_JSON_MAX_DEPTH) {
		j->err = -EINVAL;
		return;
	}
	j->depth++;
	j->first[j->depth] = true;
}

static void close_(struct mp_json *j, char ch)
{
	bool empty, flat;

	if (j->depth == 0) {
		j->err = -EINVAL;
		return;
	}
	empty = j->first[j->depth];
	flat = j->flat_from && j->depth >= j->flat_from;
	j->depth--;
	if (!empty && !flat)
		indent(j);
	if (j->flat_from > j->depth)
		j->flat_from = 0;
	fputc(ch, j->f);
}

void mp_json_object_begin(struct mp_json *j, const char *key)
{
	open_(j, key, '{');
}

void mp_json_object_end(struct mp_json *j)
{
	close_(j, '}');
}

void mp_json_array_begin(struct mp_json *j, const char *key)
{
	open_(j, key, '[');
}

void mp_json_array_begin_flat(struct mp_json *j, const char *key)
{
	open_(j, key, '[');
	if (!j->flat_from)
		j->flat_from = j->depth;
}

void mp_json_array_end(struct mp_json *j)
{
	close_(j, ']');
}

void mp_json_str(struct mp_json *j, const char *key, const char *v)
{
	value_prefix(j, key);
	if (v)
		mp_json_write_string(j->f, v);
	else
		fputs("null", j->f);
}

void mp_json_u64(struct mp_json *j, const char *key, uint64_t v)
{
	value_prefix(j, key);
	fprintf(j->f, "%" PRIu64, v);
}

void mp_json_i64(struct mp_json *j, const char *key, int64_t v)
{
	value_prefix(j, key);
	fprintf(j->f, "%" PRId64, v);
}

void mp_json_bool(struct mp_json *j, const char *key, bool v)
{
	value_prefix(j, key);
	fputs(v ? "true" : "false", j->f);
}

void mp_json_null(struct mp_json *j, const char *key)
{
	value_prefix(j, key);
	fputs("null", j->f);
}

void mp_json_f64(struct mp_json *j, const char *key, double v)
{
	value_prefix(j, key);
	if (isfinite(v))
		fprintf(j->f, "%.10g", v);
	else
		fputs("null", j->f);
}

int mp_json_finish(struct mp_json *j)
{
	fputc('\n', j->f);
	if (j->err)
		return j->err;
	if (j->depth)
		return -EINVAL;
	return ferror(j->f) ? -EIO : 0;
}

void mp_json_shapes(struct mp_json *j, const char *key, const struct mp_shape *s, uint32_t n)
{
	mp_json_array_begin_flat(j, key);
	for (uint32_t i = 0; i < n; i++) {
		mp_json_array_begin(j, NULL);
		for (uint32_t d = 0; d < s[i].rank && d < MP_PROFILE_MAX_RANK; d++)
			mp_json_i64(j, NULL, s[i].dims[d]);
		mp_json_array_end(j);
	}
	mp_json_array_end(j);
}
