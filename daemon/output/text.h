/* SPDX-License-Identifier: MIT */
/* What the text tables (report.c, maps_report.c, peak_report.c) share. */
#ifndef MP_TEXT_H
#define MP_TEXT_H

#include <stddef.h>
#include <stdio.h>

#include "profile.h"

/* @s in full (names are never cut), padded to @width; names may hold
 * anything, so a byte outside printable ASCII prints as '?' and cannot
 * drive a terminal. */
void mp_text_put_name(FILE *f, const char *s, int width);

/* The name column of a table: @w, or wider for a longer @s, so that the
 * other columns stay aligned under full names (at most 256: names are
 * bounded by the ring's string table). */
int mp_text_name_col(int w, const char *s);

/* A Python frame's name for the flame graphs and the Chrome trace:
 * "function (file:line)", the file's base name (@l->python set). */
const char *mp_text_python_frame(const struct mp_location *l, char *buf, size_t len);

#endif /* MP_TEXT_H */
