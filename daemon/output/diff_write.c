/* SPDX-License-Identifier: MIT */
/* `memprof diff` as a table and as JSON (docs/OUTPUT.md "memprof diff"). */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <string.h>

#include "diff.h"
#include "json.h"

int mp_diff_format_parse(const char *s, enum mp_diff_format *ret)
{
	if (s && !strcmp(s, "table"))
		*ret = MP_DIFF_TABLE;
	else if (s && !strcmp(s, "json"))
		*ret = MP_DIFF_JSON;
	else
		return -EINVAL;
	return 0;
}

/* Whether @p carries the standard errors of sampled mode (a sampled file
 * written before they were recorded has none). */
static bool has_stderr(const struct mp_profile *p)
{
	return p->trace_mode == MP_TRACE_SAMPLED &&
	       (p->peak_bias_bound > 0 || p->mem.alloc_var > 0 || p->peak_var > 0);
}

static bool diff_sampled(const struct mp_diff *d)
{
	return has_stderr(d->old) || has_stderr(d->new_);
}

static uint64_t stderr_bytes(double sd)
{
	return sd > 0 ? (uint64_t)llround(sd) : 0;
}

/* ---- warnings: what makes a comparison less than exact ---- */

#define MAX_WARNINGS 12

struct warnings {
	unsigned n;
	char text[MAX_WARNINGS][384];
};

static void __attribute__((format(printf, 2, 3))) warn(struct warnings *w, const char *fmt, ...)
{
	va_list ap;

	if (w->n == MAX_WARNINGS)
		return;
	va_start(ap, fmt);
	vsnprintf(w->text[w->n++], sizeof(w->text[0]), fmt, ap);
	va_end(ap);
}

static void profile_warnings(struct warnings *w, const char *which, const struct mp_profile *p)
{
	static const char *const sep = ", ";
	char why[256] = "";
	size_t n = 0;
	const struct {
		bool on;
		const char *what;
	} reasons[] = {
		{ p->drops_ring, "markers dropped by the ring" },
		{ p->drops_bpf, "BPF events dropped" },
		{ p->drops_heap, "heap records dropped" },
		{ p->dropped_markers, "markers beyond the caps" },
		{ p->marker_gaps, "markers lost" },
		{ p->corruption, "marker ring corrupted" },
		{ p->probe_hits_unmatched, "probe hits not the target's" },
		{ p->truncated, "kernels open at the end" },
		{ p->duty_period_ns, "duty cycle (heap figures cover part of the run)" },
	};

	for (size_t i = 0; i < sizeof(reasons) / sizeof(reasons[0]); i++)
		if (reasons[i].on && n < sizeof(why))
			n += (size_t)snprintf(why + n, sizeof(why) - n, "%s%s", n ? sep : "",
					      reasons[i].what);
	if (n)
		warn(w, "%s: figures may be incomplete: %s", which, why);
	if (p->trace_mode == MP_TRACE_SAMPLED && !has_stderr(p))
		warn(w, "%s is sampled but carries no standard errors: its figures count as exact",
		     which);
}

static void collect_warnings(const struct mp_diff *d, struct warnings *w)
{
	w->n = 0;
	if (d->maps && !d->old->maps_recorded)
		warn(w, "OLD was written before mappings were recorded: its mapping figures are "
			"unknown, and its heap figures may include mappings");
	if (d->maps && !d->new_->maps_recorded)
		warn(w, "NEW was written before mappings were recorded: its mapping figures are "
			"unknown, and its heap figures may include mappings");
	if (d->parts && !d->old->peak_parts)
		warn(w, "OLD was written before peaks were broken down: who held them is unknown");
	if (d->parts && !d->new_->peak_parts)
		warn(w, "NEW was written before peaks were broken down: who held them is unknown");
	if (d->old->trace_mode != d->new_->trace_mode)
		warn(w,
		     "OLD was traced in mode %s and NEW in mode %s: their heap figures are not "
		     "measured alike",
		     mp_trace_mode_name(d->old->trace_mode),
		     mp_trace_mode_name(d->new_->trace_mode));
	profile_warnings(w, "OLD", d->old);
	profile_warnings(w, "NEW", d->new_);
}

/* ---- table ---- */

/* Names come from the profiled process: print them so that they cannot
 * drive a terminal, and whole. */
static void put_text(FILE *f, const char *s)
{
	for (; s && *s; s++)
		fputc(*s >= 0x20 && *s < 0x7f ? *s : '?', f);
}

/* As a limit names it: "profile", "kernel:NAME", ... */
static void put_where(FILE *f, const struct mp_diff_row *r)
{
	fputs(mp_diff_scope_name(r->scope), f);
	if (r->scope != MP_DIFF_PROFILE) {
		fputc(':', f);
		put_text(f, r->name);
	}
}

static void fmt_relative(char *buf, size_t n, const struct mp_diff_row *r)
{
	if (!r->known)
		snprintf(buf, n, "?");
	else if (r->presence == MP_DIFF_APPEARED && r->delta)
		snprintf(buf, n, "new");
	else if (!r->old_v)
		snprintf(buf, n, r->delta ? "from 0" : "0%%");
	else
		snprintf(buf, n, "%+.1f%%", 100.0 * (double)r->delta / fabs((double)r->old_v));
}

static const char *status_word(enum mp_diff_status s)
{
	switch (s) {
	case MP_DIFF_UNKNOWN:
		return "?";
	case MP_DIFF_NOISE:
		return "noise";
	case MP_DIFF_OK:
		return "ok";
	case MP_DIFF_FAIL:
		return "FAIL";
	default:
		return "";
	}
}

/* A figure, or "-" on the side where the entity is absent. */
static void fmt_fig(char *buf, size_t n, const struct mp_diff_row *r, bool new_side)
{
	if (!r->known)
		snprintf(buf, n, "?");
	else if (r->presence == (new_side ? MP_DIFF_VANISHED : MP_DIFF_APPEARED))
		snprintf(buf, n, "-");
	else
		snprintf(buf, n, "%" PRId64, new_side ? r->new_v : r->old_v);
}

static bool row_shown(const struct mp_diff_row *r)
{
	return r->known ? r->delta != 0 : r->limited;
}

static void table_row(const struct mp_diff_row *r, bool sampled, FILE *f)
{
	char delta[32], rel[32], o[32], n[32];

	if (r->known)
		snprintf(delta, sizeof(delta), "%+" PRId64, r->delta);
	else
		snprintf(delta, sizeof(delta), "?");
	fmt_relative(rel, sizeof(rel), r);
	fmt_fig(o, sizeof(o), r, false);
	fmt_fig(n, sizeof(n), r, true);
	fprintf(f, "%-6s %15s", status_word(r->status), delta);
	if (sampled)
		fprintf(f, " ±%12" PRIu64, stderr_bytes(r->stderr_));
	fprintf(f, " %9s %15s %15s  %-10s ", rel, o, n, mp_diff_metric_name(r->metric));
	put_where(f, r);
	fputc('\n', f);
}

/* One row per entity: its alloc row, or a peak part's only one. */
static bool entity_row(const struct mp_diff_row *r)
{
	if (r->scope == MP_DIFF_PHASE_OWNER || r->scope == MP_DIFF_PHASE_TAG)
		return r->metric == MP_DIFF_PEAK_SHARE;
	/* a line: its alloc row (peak_share needs the peak recorded) */
	return r->metric == MP_DIFF_ALLOC;
}

static void table_presence(const struct mp_diff *d, enum mp_diff_presence which, const char *title,
			   FILE *f)
{
	bool any = false;

	for (uint32_t i = 0; i < d->n_rows; i++) {
		const struct mp_diff_row *r = &d->rows[i];

		if (!entity_row(r) || r->presence != which)
			continue;
		fputs(any ? ", " : title, f);
		put_where(f, r);
		any = true;
	}
	if (any)
		fputc('\n', f);
}

static void table_limit(const struct mp_diff *d, uint32_t i, FILE *f)
{
	const struct mp_diff_check *c = &d->checks[i];
	uint32_t checked = c->matched - c->unknown;

	fprintf(f, "  %-5s ", c->failed ? "FAIL" : !c->matched ? "?" : checked ? "ok" : "?");
	put_text(f, d->limits[i].spec);
	if (c->failed) {
		const struct mp_diff_row *r = &d->rows[c->first_failed];
		char rel[32];

		fmt_relative(rel, sizeof(rel), r);
		fputs(": ", f);
		put_where(f, r);
		fprintf(f, " %+" PRId64 " B (%s), allows %+.0f B", r->delta, rel,
			floor(r->allowed));
		if (r->stderr_ > 0)
			fprintf(f, " (± %" PRIu64 " B)", stderr_bytes(r->stderr_));
		if (c->failed > 1)
			fprintf(f, "; %" PRIu32 " figures over it", c->failed);
	} else if (!c->matched) {
		fputs(": matches nothing", f);
	} else {
		fprintf(f, ": held over %" PRIu32 " figure%s", checked, checked == 1 ? "" : "s");
	}
	if (c->unknown)
		fprintf(f, "; %" PRIu32 " not checked (%s)", c->unknown,
			mp_diff_metric_is_maps(d->limits[i].metric) ? "mappings not recorded" :
			d->limits[i].metric == MP_DIFF_PEAK_SHARE   ? "peak parts not recorded" :
								      "RSS unknown");
	fputc('\n', f);
}

static void table_header(const char *tag, const char *label, const struct mp_profile *p, FILE *f)
{
	fprintf(f, "%s: ", tag);
	put_text(f, label);
	fprintf(f, ": pid %" PRId32 " ", p->pid);
	put_text(f, p->exe ? p->exe : "?");
	fprintf(f, ", %s", mp_trace_mode_name(p->trace_mode));
	if (p->trace_mode == MP_TRACE_SAMPLED)
		fprintf(f, " every %" PRIu64 " B", p->sample_bytes);
	fputc('\n', f);
}

/* The whole profile's figure @m, or NULL. */
static const struct mp_diff_row *profile_row(const struct mp_diff *d, enum mp_diff_metric m)
{
	for (uint32_t i = 0; i < d->n_rows; i++)
		if (d->rows[i].scope == MP_DIFF_PROFILE && d->rows[i].metric == m)
			return &d->rows[i];
	return NULL;
}

static void put_total(FILE *f, const struct mp_diff *d, const char *sep, const char *what,
		      enum mp_diff_metric m)
{
	const struct mp_diff_row *r = profile_row(d, m);

	if (!r)
		return;
	fprintf(f, "%s%s ", sep, what);
	if (r->known)
		fprintf(f, "%" PRId64 " -> %" PRId64 " B (%+" PRId64 ")", r->old_v, r->new_v,
			r->delta);
	else
		fputs("unknown", f);
}

/* The heap and the mappings, apart, changed or not: a mapping that grew
 * under an unchanged heap reads as such. Only when mappings are compared. */
static void table_totals(const struct mp_diff *d, FILE *f)
{
	if (!d->maps)
		return;
	fputc('\n', f);
	put_total(f, d, "heap: ", "peak", MP_DIFF_PEAK);
	put_total(f, d, ", ", "allocated", MP_DIFF_ALLOC);
	fputc('\n', f);
	put_total(f, d, "mappings: ", "reserved peak", MP_DIFF_MAPPED_PEAK);
	put_total(f, d, ", ", "at the end", MP_DIFF_MAPPED_LIVE);
	put_total(f, d, ", ", "mapped", MP_DIFF_MAPPED);
	fputc('\n', f);
}

/* Why the unknown figures are unknown. */
static void put_unknown(FILE *f, uint32_t rss, uint32_t maps, uint32_t parts)
{
	if (!rss && !maps && !parts)
		return;
	fprintf(f, ", %" PRIu32 " unknown (", rss + maps + parts);
	if (rss)
		fputs("RSS without samples", f);
	if (maps)
		fprintf(f, "%smappings not recorded", rss ? ", " : "");
	if (parts)
		fprintf(f, "%speak parts not recorded", rss || maps ? ", " : "");
	fputc(')', f);
}

static int write_table(const struct mp_diff *d, const char *old_label, const char *new_label,
		       FILE *f)
{
	bool sampled = diff_sampled(d);
	uint32_t unchanged = 0, unknown = 0, unknown_maps = 0, unknown_parts = 0, shown = 0;
	struct warnings w;

	table_header("old", old_label, d->old, f);
	table_header("new", new_label, d->new_, f);
	collect_warnings(d, &w);
	for (unsigned i = 0; i < w.n; i++)
		fprintf(f, "warning: %s\n", w.text[i]);
	table_presence(d, MP_DIFF_APPEARED, "appeared in NEW: ", f);
	table_presence(d, MP_DIFF_VANISHED, "vanished from NEW: ", f);
	table_totals(d, f);
	for (uint32_t i = 0; i < d->n_rows; i++) {
		const struct mp_diff_row *r = &d->rows[i];

		if (row_shown(r)) {
			if (!shown++) {
				fprintf(f, "\n%-6s %15s%s %9s %15s %15s  %-10s %s\n", "STATUS",
					"DELTA", sampled ? "       ±STDERR" : "", "RELATIVE", "OLD",
					"NEW", "METRIC", "WHERE");
			}
			table_row(r, sampled, f);
		} else if (r->known) {
			unchanged++;
		} else if (mp_diff_metric_is_maps(r->metric)) {
			unknown_maps++;
		} else if (r->metric == MP_DIFF_PEAK_SHARE) {
			unknown_parts++;
		} else {
			unknown++;
		}
	}
	fprintf(f, "\n%" PRIu32 " figure%s changed, %" PRIu32 " unchanged", shown,
		shown == 1 ? "" : "s", unchanged);
	put_unknown(f, unknown, unknown_maps, unknown_parts);
	fputs("\n", f);
	if (sampled)
		fprintf(f,
			"noise: a change within %g standard errors of the difference is noise, "
			"and fails no limit unless the increase passes it by more than that\n",
			d->sigmas);
	if (d->n_limits) {
		fputs("\nlimits:\n", f);
		for (uint32_t i = 0; i < d->n_limits; i++)
			table_limit(d, i, f);
		fprintf(f, "result: %s, %" PRIu32 " of %" PRIu32 " limits exceeded\n",
			d->exceeded ? "FAIL" : "pass", d->exceeded, d->n_limits);
	}
	return ferror(f) ? -EIO : 0;
}

/* ---- json ---- */

static const char *presence_name(enum mp_diff_presence p)
{
	return p == MP_DIFF_APPEARED ? "appeared" : p == MP_DIFF_VANISHED ? "vanished" : "both";
}

static const char *status_name(enum mp_diff_status s)
{
	static const char *const names[] = {
		[MP_DIFF_UNCHANGED] = "unchanged",
		[MP_DIFF_CHANGED] = "changed",
		[MP_DIFF_UNKNOWN] = "unknown",
		[MP_DIFF_NOISE] = "noise",
		[MP_DIFF_OK] = "ok",
		[MP_DIFF_FAIL] = "fail",
	};

	return (unsigned)s < sizeof(names) / sizeof(names[0]) ? names[s] : "unknown";
}

static void json_profile(struct mp_json *j, const char *key, const char *label,
			 const struct mp_profile *p)
{
	mp_json_object_begin(j, key);
	mp_json_str(j, "file", label);
	mp_json_i64(j, "pid", p->pid);
	mp_json_str(j, "exe", p->exe);
	mp_json_str(j, "traceMode", mp_trace_mode_name(p->trace_mode));
	mp_json_u64(j, "sampleBytes", p->sample_bytes);
	mp_json_bool(j, "stderr", has_stderr(p));
	mp_json_object_end(j);
}

static void json_where(struct mp_json *j, const struct mp_diff_row *r)
{
	mp_json_str(j, "scope", mp_diff_scope_name(r->scope));
	mp_json_str(j, "name", r->scope == MP_DIFF_PROFILE ? NULL : r->name);
}

static void json_relative(struct mp_json *j, const struct mp_diff_row *r)
{
	if (r->known && r->old_v)
		mp_json_f64(j, "relativePercent",
			    100.0 * (double)r->delta / fabs((double)r->old_v));
	else
		mp_json_null(j, "relativePercent");
}

static void json_row(struct mp_json *j, const struct mp_diff_row *r)
{
	mp_json_object_begin(j, NULL);
	json_where(j, r);
	mp_json_str(j, "metric", mp_diff_metric_name(r->metric));
	mp_json_str(j, "presence", presence_name(r->presence));
	mp_json_str(j, "status", status_name(r->status));
	if (r->known) {
		mp_json_i64(j, "old", r->old_v);
		mp_json_i64(j, "new", r->new_v);
		mp_json_i64(j, "delta", r->delta);
	} else {
		mp_json_null(j, "old");
		mp_json_null(j, "new");
		mp_json_null(j, "delta");
	}
	json_relative(j, r);
	mp_json_u64(j, "stderr", stderr_bytes(r->stderr_));
	if (r->allowed >= 0)
		mp_json_u64(j, "allowed", (uint64_t)floor(r->allowed));
	else
		mp_json_null(j, "allowed");
	mp_json_object_end(j);
}

static void json_presence(struct mp_json *j, const struct mp_diff *d, const char *key,
			  enum mp_diff_presence which)
{
	mp_json_array_begin(j, key);
	for (uint32_t i = 0; i < d->n_rows; i++) {
		const struct mp_diff_row *r = &d->rows[i];

		if (!entity_row(r) || r->presence != which)
			continue;
		mp_json_object_begin(j, NULL);
		json_where(j, r);
		mp_json_object_end(j);
	}
	mp_json_array_end(j);
}

static void json_limit(struct mp_json *j, const struct mp_diff *d, uint32_t i)
{
	const struct mp_diff_limit *l = &d->limits[i];
	const struct mp_diff_check *c = &d->checks[i];

	mp_json_object_begin(j, NULL);
	mp_json_str(j, "limit", l->spec);
	mp_json_str(j, "scope", mp_diff_scope_name(l->scope));
	mp_json_str(j, "name", l->pattern);
	mp_json_str(j, "metric", mp_diff_metric_name(l->metric));
	if (l->percent)
		mp_json_f64(j, "percent", l->value);
	else
		mp_json_u64(j, "bytes", (uint64_t)l->value);
	mp_json_u64(j, "matched", c->matched);
	mp_json_u64(j, "unknown", c->unknown);
	mp_json_u64(j, "failed", c->failed);
	mp_json_bool(j, "exceeded", c->failed > 0);
	if (c->failed) {
		const struct mp_diff_row *r = &d->rows[c->first_failed];

		mp_json_object_begin(j, "worst");
		json_where(j, r);
		mp_json_i64(j, "delta", r->delta);
		json_relative(j, r);
		mp_json_u64(j, "stderr", stderr_bytes(r->stderr_));
		mp_json_u64(j, "allowed", (uint64_t)floor(r->allowed));
		mp_json_object_end(j);
	} else {
		mp_json_null(j, "worst");
	}
	mp_json_object_end(j);
}

static int write_json(const struct mp_diff *d, const char *old_label, const char *new_label,
		      FILE *f)
{
	struct mp_json j;
	struct warnings w;

	mp_json_init(&j, f, true);
	mp_json_object_begin(&j, NULL);
	mp_json_str(&j, "format", "memprof-diff");
	mp_json_u64(&j, "version", 1);
	json_profile(&j, "old", old_label, d->old);
	json_profile(&j, "new", new_label, d->new_);
	mp_json_f64(&j, "sigmas", d->sigmas);
	collect_warnings(d, &w);
	mp_json_array_begin(&j, "warnings");
	for (unsigned i = 0; i < w.n; i++)
		mp_json_str(&j, NULL, w.text[i]);
	mp_json_array_end(&j);
	json_presence(&j, d, "appeared", MP_DIFF_APPEARED);
	json_presence(&j, d, "vanished", MP_DIFF_VANISHED);
	mp_json_array_begin(&j, "changes");
	for (uint32_t i = 0; i < d->n_rows; i++)
		json_row(&j, &d->rows[i]);
	mp_json_array_end(&j);
	mp_json_array_begin(&j, "limits");
	for (uint32_t i = 0; i < d->n_limits; i++)
		json_limit(&j, d, i);
	mp_json_array_end(&j);
	mp_json_u64(&j, "exceeded", d->exceeded);
	mp_json_str(&j, "result", d->exceeded ? "fail" : "pass");
	mp_json_object_end(&j);
	return mp_json_finish(&j);
}

int mp_diff_write(const struct mp_diff *d, enum mp_diff_format format, const char *old_label,
		  const char *new_label, FILE *f)
{
	switch (format) {
	case MP_DIFF_TABLE:
		return write_table(d, old_label, new_label, f);
	case MP_DIFF_JSON:
		return write_json(d, old_label, new_label, f);
	}
	return -EINVAL;
}
