// SPDX-License-Identifier: MIT
/* The screen of `memprof top` as text (top_view.h). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "top_view.h"

static const struct {
	char key;
	const char *name;
} sorts[] = {
	[MP_TOP_BY_LIVE] = { 'l', "live" },	[MP_TOP_BY_PEAK] = { 'p', "peak" },
	[MP_TOP_BY_CALLS] = { 'c', "calls" },	[MP_TOP_BY_ALLOC] = { 'a', "alloc" },
	[MP_TOP_BY_MAPPED] = { 'm', "mapped" }, [MP_TOP_BY_NAME] = { 'n', "name" },
};

int mp_top_sort_of_key(int ch, enum mp_top_sort *ret)
{
	for (size_t i = 0; i < sizeof(sorts) / sizeof(sorts[0]); i++)
		if (sorts[i].key == ch) {
			*ret = (enum mp_top_sort)i;
			return 0;
		}
	return -EINVAL;
}

const char *mp_top_sort_name(enum mp_top_sort by)
{
	return (size_t)by < sizeof(sorts) / sizeof(sorts[0]) ? sorts[by].name : "?";
}

/* qsort has no context argument: the rows carry their key. */
struct keyed_row {
	struct mp_top_row row;
	uint64_t key;
	uint32_t index;
};

static int cmp_u64_desc(uint64_t a, uint64_t b)
{
	return a > b ? -1 : a < b;
}

static int cmp_rows(const void *pa, const void *pb)
{
	const struct keyed_row *a = pa, *b = pb;
	int c = cmp_u64_desc(a->key, b->key);

	if (c == 0)
		c = strcmp(a->row.name, b->row.name);
	if (c == 0)
		c = a->index < b->index ? -1 : a->index > b->index;
	return c;
}

static uint64_t key_of(const struct mp_top_row *r, enum mp_top_sort by)
{
	switch (by) {
	case MP_TOP_BY_LIVE:
		return r->live;
	case MP_TOP_BY_PEAK:
		return r->peak;
	case MP_TOP_BY_CALLS:
		return r->calls;
	case MP_TOP_BY_ALLOC:
		return r->alloc;
	case MP_TOP_BY_MAPPED:
		return r->mapped;
	case MP_TOP_BY_NAME:
		break;
	}
	return 0; /* by name: the tie-break is the order */
}

int mp_top_rows(const struct mp_profile *p, enum mp_top_sort by, struct mp_top_row **ret_rows,
		uint32_t *ret_n)
{
	struct keyed_row *k;
	struct mp_top_row *rows;
	uint32_t n = p ? p->n_kernels : 0;

	if (!n) {
		*ret_rows = NULL;
		*ret_n = 0;
		return 0;
	}
	k = calloc(n, sizeof(*k));
	rows = calloc(n, sizeof(*rows));
	if (!k || !rows) {
		free(k);
		free(rows);
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < n; i++) {
		const struct mp_kernel *kn = &p->kernels[i];
		struct mp_top_row *r = &k[i].row;

		r->name = kn->name < p->n_names && p->names[kn->name] ? p->names[kn->name] : "?";
		r->calls = kn->calls;
		r->live = kn->retained_bytes;
		r->peak = kn->peak_added;
		r->alloc = kn->incl.alloc_bytes;
		r->mapped = kn->maps.alloc_bytes;
		k[i].key = key_of(r, by);
		k[i].index = i;
	}
	qsort(k, n, sizeof(*k), cmp_rows);
	for (uint32_t i = 0; i < n; i++)
		rows[i] = k[i].row;
	free(k);
	*ret_rows = rows;
	*ret_n = n;
	return 0;
}

static int copy_tables(const struct mp_profile *p, struct mp_profile *q)
{
	q->names = calloc(p->n_names ? p->n_names : 1, sizeof(*q->names));
	q->kernels = calloc(p->n_kernels ? p->n_kernels : 1, sizeof(*q->kernels));
	if (!q->names || !q->kernels)
		return -ENOMEM;
	for (; q->n_names < p->n_names; q->n_names++)
		if (p->names[q->n_names] && !(q->names[q->n_names] = strdup(p->names[q->n_names])))
			return -ENOMEM;
	for (; q->n_kernels < p->n_kernels; q->n_kernels++) {
		struct mp_kernel *k = &q->kernels[q->n_kernels];

		*k = p->kernels[q->n_kernels];
		k->n_owners = k->n_tags = k->n_pools = k->n_pool_tags = 0;
		k->owners = k->tags = NULL;
		k->pools = NULL;
		k->pool_tags = NULL;
	}
	if (p->n_rss && p->rss) {
		q->rss = malloc(sizeof(*q->rss));
		if (!q->rss)
			return -ENOMEM;
		q->rss[0] = p->rss[p->n_rss - 1];
		q->n_rss = 1;
	}
	return 0;
}

int mp_top_view_copy(const struct mp_profile *p, struct mp_profile **ret)
{
	struct mp_profile *q = mp_profile_new();
	int r;

	if (!q)
		return -ENOMEM;
	r = mp_profile_set_process(q, p->pid, p->exe, NULL, NULL);
	if (r == 0)
		r = copy_tables(p, q);
	if (r < 0) {
		mp_profile_free(q);
		return r;
	}
	q->begin_ns = p->begin_ns;
	q->end_ns = p->end_ns;
	q->trace_mode = p->trace_mode;
	q->sample_bytes = p->sample_bytes;
	q->tracer_path = p->tracer_path;
	q->drops_ring = p->drops_ring;
	q->drops_bpf = p->drops_bpf;
	q->drops_heap = p->drops_heap;
	q->mem = p->mem;
	q->peak_bytes = p->peak_bytes;
	q->peak_tensors = p->peak_tensors;
	q->rss_peak = p->rss_peak;
	q->rss_samples = p->rss_samples;
	q->vm_hwm = p->vm_hwm;
	q->truncated = p->truncated;
	q->maps = p->maps;
	q->maps_resident_peak = p->maps_resident_peak;
	q->maps_recorded = p->maps_recorded;
	*ret = q;
	return 0;
}

/* Bytes for a narrow column: "512 B", "1.5 KiB", "12.0 MiB"; @neg puts
 * a minus before @mag. */
static void fmt_mag(char *buf, size_t len, uint64_t mag, bool neg)
{
	static const char *const units[] = { "KiB", "MiB", "GiB", "TiB", "PiB", "EiB" };
	double d = (double)mag / 1024;
	size_t u = 0;

	if (mag < 1024) {
		snprintf(buf, len, "%s%" PRIu64 " B", neg ? "-" : "", mag);
		return;
	}
	while (d >= 1024 && u + 1 < sizeof(units) / sizeof(units[0])) {
		d /= 1024;
		u++;
	}
	snprintf(buf, len, "%s%.1f %s", neg ? "-" : "", d, units[u]);
}

static void fmt_bytes(char *buf, size_t len, uint64_t v)
{
	fmt_mag(buf, len, v, false);
}

/* A net figure, which a clamped account could leave below zero. */
static void fmt_net(char *buf, size_t len, int64_t v)
{
	fmt_mag(buf, len, v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v, v < 0);
}

/* The screen being written: lines are counted against the height. */
struct screen {
	FILE *f;
	const struct mp_top_view *v;
	unsigned width, height, lines;
};

static bool room(const struct screen *s)
{
	return s->lines < s->height;
}

static void put_sane(FILE *f, const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		fputc(s[i] >= 0x20 && s[i] < 0x7f ? s[i] : '?', f);
}

/* One line: @a (our own text) then @b (NULL, or the target's text: a
 * name, a path), fitted to the width with an ellipsis, padded to it when
 * @pad. Nothing once the screen is full. */
static void put_line(struct screen *s, const char *a, const char *b, bool pad)
{
	const char *ell = s->v->utf8 ? "\xe2\x80\xa6" : "...";
	size_t la = strlen(a), lb = b ? strlen(b) : 0, w = s->width, ell_cols = s->v->utf8 ? 1 : 3;
	size_t cols = la + lb;

	if (!room(s))
		return;
	if (cols > w) {
		size_t keep = w > ell_cols ? w - ell_cols : 0;

		put_sane(s->f, a, la < keep ? la : keep);
		if (keep > la)
			put_sane(s->f, b, keep - la);
		if (s->v->utf8)
			fputs(ell, s->f);
		else
			fwrite(ell, 1, w < ell_cols ? w : ell_cols, s->f);
		cols = w;
	} else {
		put_sane(s->f, a, la);
		put_sane(s->f, b, lb);
	}
	for (; pad && cols < w; cols++)
		fputc(' ', s->f);
	fputc('\n', s->f);
	s->lines++;
}

static const char *mode_text(const struct mp_profile *p)
{
	switch (p->trace_mode) {
	case MP_TRACE_PRECISE:
		return "precise";
	case MP_TRACE_SAMPLED:
		return "sampled (heap figures are estimates)";
	case MP_TRACE_RSS:
		return "rss (no allocator probes: heap figures are the break (brk))";
	default:
		return "unknown";
	}
}

/* The anonymous mappings the program made, apart from the heap: reserved
 * bytes now and at their peak, and the bound on their resident bytes. */
static void put_maps(struct screen *s, const struct mp_profile *p)
{
	char a[256], live[32], peak[32], res[32];

	if (!p->maps_recorded) {
		put_line(s, "mappings: unknown (this profile has no mapping figures)", NULL, false);
		return;
	}
	fmt_bytes(live, sizeof(live), p->maps.live_bytes);
	fmt_bytes(peak, sizeof(peak), p->maps.peak_bytes);
	if (p->maps_resident_peak == MP_UNKNOWN)
		snprintf(res, sizeof(res), "unknown");
	else
		fmt_bytes(res, sizeof(res), p->maps_resident_peak);
	snprintf(a, sizeof(a), "mappings: reserved %s, peak %s; resident peak <= %s (not in heap)",
		 live, peak, res);
	put_line(s, a, NULL, false);
}

/* Process, mode and window, heap, mappings and RSS. */
static void put_totals(struct screen *s, const struct mp_profile *p)
{
	char a[512], live[32], peak[32], rss[32], rss_peak[32];
	uint64_t win = p->end_ns > p->begin_ns ? p->end_ns - p->begin_ns : 0;
	const char *path = p->tracer_path == MP_PATH_INPROCESS ? ", in-process path" :
			   p->tracer_path == MP_PATH_BPF       ? ", eBPF path" :
								 "";

	snprintf(a, sizeof(a), "memprof top: pid %" PRId32 " (%s) ", p->pid,
		 s->v->via ? s->v->via : "?");
	put_line(s, a, p->exe ? p->exe : "?", false);
	if (p->drops_ring || p->drops_bpf || p->drops_heap)
		snprintf(a, sizeof(a),
			 "window %.1f s; drops: ring %" PRIu64 ", bpf %" PRIu64 ", heap %" PRIu64
			 "; mode %s%s",
			 win / 1e9, p->drops_ring, p->drops_bpf, p->drops_heap, mode_text(p), path);
	else
		snprintf(a, sizeof(a), "window %.1f s; mode %s%s", win / 1e9, mode_text(p), path);
	put_line(s, a, NULL, false);
	fmt_net(live, sizeof(live), p->mem.bytes_added);
	fmt_bytes(peak, sizeof(peak), p->peak_bytes);
	if (p->n_rss && p->rss) {
		fmt_bytes(rss, sizeof(rss), p->rss[p->n_rss - 1].vm_rss);
		fmt_bytes(rss_peak, sizeof(rss_peak), p->rss_peak);
		snprintf(a, sizeof(a),
			 "heap: live %s in %" PRId64 " blocks, peak %s; rss: %s, peak %s", live,
			 p->mem.tensors_added, peak, rss, rss_peak);
	} else {
		snprintf(a, sizeof(a),
			 "heap: live %s in %" PRId64 " blocks, peak %s; rss: no samples", live,
			 p->mem.tensors_added, peak);
	}
	put_line(s, a, NULL, false);
	put_maps(s, p);
}

static void put_keys(struct screen *s)
{
	char a[256];

	snprintf(a, sizeof(a),
		 "sorted by %s; keys: l live, p peak, c calls, a alloc, m mapped, n name, q quit",
		 mp_top_sort_name(s->v->by));
	put_line(s, a, NULL, false);
}

/* The column header, the sorted column marked with '*'. */
static void put_header(struct screen *s)
{
	static const char *const cols[] = { "CALLS", "LIVE", "PEAK", "ALLOC", "MAPPED" };
	static const enum mp_top_sort by[] = { MP_TOP_BY_CALLS, MP_TOP_BY_LIVE, MP_TOP_BY_PEAK,
					       MP_TOP_BY_ALLOC, MP_TOP_BY_MAPPED };
	char a[128], h[16];
	size_t n = 0;

	for (size_t i = 0; i < sizeof(cols) / sizeof(cols[0]); i++) {
		snprintf(h, sizeof(h), "%s%s", s->v->by == by[i] ? "*" : "", cols[i]);
		n += (size_t)snprintf(a + n, sizeof(a) - n, "%11s", h);
	}
	snprintf(a + n, sizeof(a) - n, "  %sKERNEL", s->v->by == MP_TOP_BY_NAME ? "*" : "");
	put_line(s, a, NULL, true);
}

static void put_rows(struct screen *s, const struct mp_top_row *rows, uint32_t n)
{
	char a[192], live[32], peak[32], alloc[32], mapped[32];
	uint32_t fit = s->height - s->lines, shown = n <= fit ? n : (fit ? fit - 1 : 0);

	if (!n) {
		put_line(s, "no kernels yet (the target names them with memprof_kernel_begin)",
			 NULL, false);
		return;
	}
	for (uint32_t i = 0; i < shown; i++) {
		fmt_bytes(live, sizeof(live), rows[i].live);
		fmt_bytes(peak, sizeof(peak), rows[i].peak);
		fmt_bytes(alloc, sizeof(alloc), rows[i].alloc);
		fmt_bytes(mapped, sizeof(mapped), rows[i].mapped);
		snprintf(a, sizeof(a), "%11" PRIu64 "%11s%11s%11s%11s  ", rows[i].calls, live, peak,
			 alloc, mapped);
		put_line(s, a, rows[i].name, false);
	}
	if (shown < n) {
		snprintf(a, sizeof(a),
			 "... %" PRIu32 " more kernel%s (a taller terminal shows them)", n - shown,
			 n - shown == 1 ? "" : "s");
		put_line(s, a, NULL, false);
	}
}

int mp_top_render(const struct mp_profile *p, const struct mp_top_view *v, char **ret_text,
		  size_t *ret_len, uint32_t *ret_header)
{
	struct screen s = { .v = v,
			    .width = v->width ? v->width : 80,
			    .height = v->height ? v->height : 24 };
	struct mp_top_row *rows = NULL;
	uint32_t n = 0, header = UINT32_MAX;
	char *text = NULL, a[128];
	size_t len = 0;
	int r = mp_top_rows(p, v->by, &rows, &n);

	if (r < 0)
		return r;
	s.f = open_memstream(&text, &len);
	if (!s.f) {
		free(rows);
		return -ENOMEM;
	}
	if (p) {
		put_totals(&s, p);
	} else {
		snprintf(a, sizeof(a), "memprof top: pid %" PRId32 " (%s)", v->pid,
			 v->via ? v->via : "?");
		put_line(&s, a, NULL, false);
		put_line(&s, "waiting for the first snapshot", NULL, false);
		put_line(&s, "", NULL, false);
	}
	put_keys(&s);
	put_line(&s, "", v->status, false);
	if (room(&s))
		header = s.lines;
	put_header(&s);
	if (p && room(&s))
		put_rows(&s, rows, n);
	free(rows);
	if (fclose(s.f) != 0) {
		free(text);
		return -ENOMEM;
	}
	*ret_text = text;
	*ret_len = len;
	*ret_header = header;
	return 0;
}
