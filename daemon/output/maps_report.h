/* SPDX-License-Identifier: MIT */
/*
 * Anonymous mappings in the table and JSON reports (report.c): a view
 * apart from the heap (docs/PROFILE.md "Mappings").
 */
#ifndef MP_MAPS_REPORT_H
#define MP_MAPS_REPORT_H

#include <stdbool.h>
#include <stdio.h>

#include "json.h"
#include "profile.h"

/* Whether any mapping was made or released in @m. */
bool mp_maps_any(const struct mp_map_stats *m);
/* The table's header line ("mappings: ..."), under the heap's. */
void mp_maps_table_head(const struct mp_profile *p, FILE *f);
/* The table's MAPPINGS sections: kernels, phases, owners and tags that
 * made or released a mapping; nothing when none did. */
void mp_maps_table(const struct mp_profile *p, FILE *f);
/* @key: an object of @m's figures (live and peak: the holder's own for
 * the profile, an owner, a tag; the process's for an invocation, a kernel,
 * a phase). */
void mp_maps_json(struct mp_json *j, const char *key, const struct mp_map_stats *m);
/* The profile's "anonMaps" object, with the resident bound. */
void mp_maps_json_profile(struct mp_json *j, const struct mp_profile *p);

#endif /* MP_MAPS_REPORT_H */
