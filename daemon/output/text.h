/* SPDX-License-Identifier: MIT */
/* What the text tables (report.c, maps_report.c, peak_report.c) share. */
#ifndef MP_TEXT_H
#define MP_TEXT_H

#include <stdio.h>

/* @s in full (names are never cut), padded to @width; names may hold
 * anything, so a byte outside printable ASCII prints as '?' and cannot
 * drive a terminal. */
void mp_text_put_name(FILE *f, const char *s, int width);

/* The name column of a table: @w, or wider for a longer @s, so that the
 * other columns stay aligned under full names (at most 256: names are
 * bounded by the ring's string table). */
int mp_text_name_col(int w, const char *s);

#endif /* MP_TEXT_H */
