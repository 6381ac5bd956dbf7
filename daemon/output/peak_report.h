/* SPDX-License-Identifier: MIT */
/*
 * Who held the peak (docs/PROFILE.md "Who held the peak") in the table and
 * JSON reports (report.c): the bytes each owner and each tag held at the
 * process's peak and at each phase's.
 */
#ifndef MP_PEAK_REPORT_H
#define MP_PEAK_REPORT_H

#include <stdio.h>

#include "json.h"
#include "profile.h"

/* Rows of one peak in the table before the rest is summed into one
 * "(N others)" row. */
#define MP_PEAK_TABLE_ROWS 10

/* The table's PEAK sections, by owner and (when the program tagged
 * anything) by tag: the process's peak, then each phase's; nothing for a
 * file that does not record them. */
void mp_peak_table(const struct mp_profile *p, FILE *f);
/* @key: an array of {name, bytes}, the most bytes first, of phase @phase's
 * peak (MP_NONE: the process's) by owner or tag (@tags). Nothing for a file
 * that does not record them. -ENOMEM. */
int mp_peak_json(struct mp_json *j, const struct mp_profile *p, const char *key, uint32_t phase,
		 bool tags);
/* The profile's "peak" object: its bytes, owners and tags. */
int mp_peak_json_profile(struct mp_json *j, const struct mp_profile *p);

#endif /* MP_PEAK_REPORT_H */
