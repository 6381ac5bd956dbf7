/* SPDX-License-Identifier: MIT */
/*
 * Renderers of a profile: a human table, the whole model as JSON, and
 * tf.profile's ProfileInfo object for one region.
 */
#ifndef MP_REPORT_H
#define MP_REPORT_H

#include <stdio.h>

#include "profile.h"

enum mp_report_format {
	MP_REPORT_TABLE = 1,
	MP_REPORT_JSON,
	MP_REPORT_TFJS,
	MP_REPORT_HTML, /* one self-contained page (html.h) */
};

/* "table", "json", "tfjs", "html"; -EINVAL otherwise. */
int mp_report_format_parse(const char *s, enum mp_report_format *ret);

/* Writes @p to @f. @region (see mp_profile_region(); NULL: whole profile)
 * selects what the tfjs format reports; the other formats report
 * everything. -ENOENT: no such region; -EIO: write error. */
int mp_report_write(const struct mp_profile *p, enum mp_report_format format, const char *region,
		    FILE *f);

/* Same; the tfjs format reports pool @pool (NULL: the heap) instead:
 * -ESRCH when the profile has no such pool. */
int mp_report_write_pool(const struct mp_profile *p, enum mp_report_format format,
			 const char *region, const char *pool, FILE *f);

#endif /* MP_REPORT_H */
