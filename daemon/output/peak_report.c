/* SPDX-License-Identifier: MIT */
/* Who held the peak in the table and JSON reports. */
#include "peak_report.h"
#include "text.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

static void put_row(FILE *f, const char *peak, int wp, const char *name, int wn, uint64_t bytes,
		    uint64_t total)
{
	mp_text_put_name(f, peak, wp);
	fputc(' ', f);
	mp_text_put_name(f, name, wn);
	fprintf(f, " %14" PRIu64 " %6.1f%%\n", bytes, total ? 100.0 * (double)bytes / total : 0.0);
}

/* One peak's rows: its first MP_PEAK_TABLE_ROWS parts, the rest summed. */
static int table_peak(const struct mp_profile *p, uint32_t phase, bool tags, int wp, int wn,
		      FILE *f)
{
	const struct mp_pool *v = tags ? p->tags : p->owners;
	const char *peak = phase == MP_NONE ? "(process)" : p->phases[phase].name;
	struct mp_peak_part *a;
	uint64_t total, rest = 0;
	uint32_t n;
	char other[48];
	int r;

	r = mp_profile_peak_parts(p, phase, tags, &a, &n, &total);
	if (r < 0)
		return r;
	for (uint32_t i = 0; i < n; i++) {
		if (i < MP_PEAK_TABLE_ROWS || n == MP_PEAK_TABLE_ROWS + 1)
			put_row(f, peak, wp, v[a[i].id].name, wn, a[i].bytes, total);
		else
			rest += a[i].bytes;
	}
	if (n > MP_PEAK_TABLE_ROWS + 1) {
		snprintf(other, sizeof(other), "(%u others)", n - MP_PEAK_TABLE_ROWS);
		put_row(f, peak, wp, other, wn, rest, total);
	}
	free(a);
	return 0;
}

void mp_peak_table(const struct mp_profile *p, FILE *f)
{
	if (!p->peak_parts || !p->peak_bytes)
		return;
	for (int t = 0; t < 2; t++) {
		const struct mp_pool *v = t ? p->tags : p->owners;
		uint32_t nv = t ? p->n_tags : p->n_owners;
		int wp = 32, wn = 32;

		/* tags only when the program opened any */
		if (t && nv < 2)
			return;
		for (uint32_t i = 0; i < p->n_phases; i++)
			wp = mp_text_name_col(wp, p->phases[i].name);
		for (uint32_t i = 0; i < nv; i++)
			if (v[i].peak_share || v[i].mem.alloc_count)
				wn = mp_text_name_col(wn, v[i].name);
		fprintf(f, "\n%-*s %-*s %14s %7s\n", wp, "PEAK", wn, t ? "TAG" : "OWNER", "BYTES",
			"SHARE");
		if (table_peak(p, MP_NONE, t, wp, wn, f) < 0)
			return;
		for (uint32_t i = 0; i < p->n_phases; i++)
			if (table_peak(p, i, t, wp, wn, f) < 0)
				return;
	}
}

int mp_peak_json(struct mp_json *j, const struct mp_profile *p, const char *key, uint32_t phase,
		 bool tags)
{
	const struct mp_pool *v = tags ? p->tags : p->owners;
	struct mp_peak_part *a;
	uint64_t total;
	uint32_t n;
	int r;

	r = mp_profile_peak_parts(p, phase, tags, &a, &n, &total);
	if (r == -ENOENT)
		return 0;
	if (r < 0)
		return r;
	mp_json_array_begin(j, key);
	for (uint32_t i = 0; i < n; i++) {
		mp_json_object_begin(j, NULL);
		mp_json_str(j, "name", v[a[i].id].name);
		mp_json_u64(j, "bytes", a[i].bytes);
		mp_json_object_end(j);
	}
	mp_json_array_end(j);
	free(a);
	return 0;
}

int mp_peak_json_profile(struct mp_json *j, const struct mp_profile *p)
{
	int r;

	if (!p->peak_parts)
		return 0;
	mp_json_object_begin(j, "peak");
	mp_json_u64(j, "bytes", p->peak_bytes);
	r = mp_peak_json(j, p, "owners", MP_NONE, false);
	if (r == 0)
		r = mp_peak_json(j, p, "tags", MP_NONE, true);
	mp_json_object_end(j);
	return r;
}
