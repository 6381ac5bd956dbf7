/* SPDX-License-Identifier: MIT */
/*
 * The screen of `memprof top`: a profile's kernels as rows sorted by a
 * key, and the whole screen as plain text fitted to a terminal's size.
 * Pure (no terminal, no clock): cli/top.c draws what this returns.
 */
#ifndef MP_TOP_VIEW_H
#define MP_TOP_VIEW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "profile.h"

enum mp_top_sort {
	MP_TOP_BY_LIVE, /* key l */
	MP_TOP_BY_PEAK, /* key p */
	MP_TOP_BY_CALLS, /* key c */
	MP_TOP_BY_ALLOC, /* key a */
	MP_TOP_BY_MAPPED, /* key m */
	MP_TOP_BY_NAME, /* key n */
};

/* One kernel name's figures (docs/OUTPUT.md "memprof top"). */
struct mp_top_row {
	const char *name; /* points into the profile; "?" for a bad index */
	uint64_t calls;
	uint64_t live; /* its own blocks still live (retained_bytes) */
	uint64_t peak; /* the most one call held above its start (peak_added) */
	uint64_t alloc; /* bytes allocated, nested kernels included */
	/* bytes of anonymous mappings made, nested kernels included (apart
	 * from the heap: maps.alloc_bytes) */
	uint64_t mapped;
};

/* The sort of key @ch: 'l', 'p', 'c', 'a', 'm' or 'n'; -EINVAL for any
 * other. */
int mp_top_sort_of_key(int ch, enum mp_top_sort *ret);
/* "live", "peak", "calls", "alloc", "mapped", "name". */
const char *mp_top_sort_name(enum mp_top_sort by);

/* One row per kernel of @p in *@ret_rows (free() it; NULL when there is
 * none), sorted by @by: figures from the highest, names in byte order;
 * ties by name, then by first begin. The rows point into @p. -ENOMEM. */
int mp_top_rows(const struct mp_profile *p, enum mp_top_sort by, struct mp_top_row **ret_rows,
		uint32_t *ret_n);

/* The part of @p the screen shows, in *@ret (free it with
 * mp_profile_free()): process, window, mode, drops, heap and mapping
 * totals, the last RSS point, names and kernel aggregates without their
 * breakdowns; no
 * invocations, sites or stacks. It renders as @p does, and a screen that
 * keeps it between snapshots holds a fraction of the profile. -ENOMEM. */
int mp_top_view_copy(const struct mp_profile *p, struct mp_profile **ret);

/* What the screen shows besides the profile. */
struct mp_top_view {
	unsigned width, height; /* the terminal's columns and lines (0: 80 x 24) */
	enum mp_top_sort by;
	bool utf8; /* the ellipsis as U+2026, else "..." */
	int32_t pid; /* the target, shown before the first profile */
	const char *via; /* how the profile is taken ("direct", "memprofd") */
	const char *status; /* one line of state or the last log line; NULL: none */
};

/* The screen for @p (NULL: no profile yet) as text: at most @height lines,
 * each ended by '\n' and at most @width columns wide (a longer line ends
 * in an ellipsis, never cut silently), printable ASCII only besides the
 * ellipsis (names come from the target: other bytes become '?'). Rows that
 * do not fit are counted on the last line. *@ret_header is the index of
 * the column header line, padded to @width (UINT32_MAX: not shown).
 * *@ret_text is NUL-terminated; free() it. -ENOMEM. */
int mp_top_render(const struct mp_profile *p, const struct mp_top_view *v, char **ret_text,
		  size_t *ret_len, uint32_t *ret_header);

#endif /* MP_TOP_VIEW_H */
