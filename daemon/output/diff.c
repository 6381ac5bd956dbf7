/* SPDX-License-Identifier: MIT */
/* Comparing two profiles: the figures of every entity in both, and the
 * limits of a gate (diff.h). Rendering is in diff_write.c. */
#include <ctype.h>
#include <errno.h>
#include <fnmatch.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "diff.h"
#include "hashmap.h"

/* Figures are clamped to this, so a difference never overflows (a file
 * can hold any value). */
#define FIG_MAX (INT64_MAX / 4)
/* Bounds of a limit's value: bytes and percent. */
#define LIMIT_MAX_BYTES ((double)(1ull << 62))
#define LIMIT_MAX_PERCENT 1e6

static const char *const metric_names[MP_DIFF_N_METRICS] = {
	[MP_DIFF_ALLOC] = "alloc",
	[MP_DIFF_PEAK] = "peak",
	[MP_DIFF_PEAK_ADDED] = "peak_added",
	[MP_DIFF_PEAK_LIVE] = "peak_live",
	[MP_DIFF_RSS] = "rss",
	[MP_DIFF_MAPPED] = "mapped",
	[MP_DIFF_MAPPED_PEAK] = "maps_peak",
	[MP_DIFF_MAPPED_LIVE] = "maps_live",
	[MP_DIFF_PEAK_SHARE] = "peak_share",
};

static const char *const scope_names[MP_DIFF_N_SCOPES] = {
	[MP_DIFF_PROFILE] = "profile",
	[MP_DIFF_KERNEL] = "kernel",
	[MP_DIFF_PHASE] = "phase",
	[MP_DIFF_OWNER] = "owner",
	[MP_DIFF_TAG] = "tag",
	[MP_DIFF_PHASE_OWNER] = "phase_owner",
	[MP_DIFF_PHASE_TAG] = "phase_tag",
	[MP_DIFF_LINE] = "line",
};

#define M(x) (1u << (x))
#define MAPS_ALL (M(MP_DIFF_MAPPED) | M(MP_DIFF_MAPPED_PEAK) | M(MP_DIFF_MAPPED_LIVE))
/* The metrics each scope has. */
static const unsigned scope_metrics[MP_DIFF_N_SCOPES] = {
	[MP_DIFF_PROFILE] = M(MP_DIFF_ALLOC) | M(MP_DIFF_PEAK) | M(MP_DIFF_RSS) | MAPS_ALL,
	[MP_DIFF_KERNEL] = M(MP_DIFF_ALLOC) | M(MP_DIFF_PEAK_ADDED) | M(MP_DIFF_PEAK_LIVE) |
			   M(MP_DIFF_RSS) | M(MP_DIFF_MAPPED) | M(MP_DIFF_MAPPED_PEAK),
	[MP_DIFF_PHASE] = M(MP_DIFF_ALLOC) | M(MP_DIFF_PEAK_LIVE) | M(MP_DIFF_RSS) |
			  M(MP_DIFF_MAPPED) | M(MP_DIFF_MAPPED_PEAK),
	[MP_DIFF_OWNER] =
		M(MP_DIFF_ALLOC) | M(MP_DIFF_PEAK_LIVE) | MAPS_ALL | M(MP_DIFF_PEAK_SHARE),
	[MP_DIFF_TAG] = M(MP_DIFF_ALLOC) | M(MP_DIFF_PEAK_LIVE) | MAPS_ALL | M(MP_DIFF_PEAK_SHARE),
	[MP_DIFF_PHASE_OWNER] = M(MP_DIFF_PEAK_SHARE),
	[MP_DIFF_PHASE_TAG] = M(MP_DIFF_PEAK_SHARE),
	[MP_DIFF_LINE] = M(MP_DIFF_ALLOC) | M(MP_DIFF_PEAK_SHARE),
};

static const char *const scope_metrics_why[MP_DIFF_N_SCOPES] = {
	[MP_DIFF_PROFILE] = "the whole profile's metrics are alloc, peak, rss, mapped, "
			    "maps_peak and maps_live (peak_added and peak_live need a "
			    "scope: kernel:NAME.peak_added)",
	[MP_DIFF_KERNEL] = "a kernel's metrics are alloc, peak_added, peak_live, rss, mapped "
			   "and maps_peak (peak is the whole profile's heap peak)",
	[MP_DIFF_PHASE] = "a phase's metrics are alloc, peak_live, rss, mapped and maps_peak",
	[MP_DIFF_OWNER] = "an owner's metrics are alloc, peak_live, mapped, maps_peak, "
			  "maps_live and peak_share",
	[MP_DIFF_TAG] = "a tag's metrics are alloc, peak_live, mapped, maps_peak, "
			"maps_live and peak_share",
	[MP_DIFF_PHASE_OWNER] = "a phase_owner:PHASE/OWNER's metric is peak_share",
	[MP_DIFF_PHASE_TAG] = "a phase_tag:PHASE/TAG's metric is peak_share",
	[MP_DIFF_LINE] = "a line:'FUNCTION FILE:LINE''s metrics are alloc and peak_share",
};

bool mp_diff_metric_is_maps(enum mp_diff_metric m)
{
	return (unsigned)m < MP_DIFF_N_METRICS && (MAPS_ALL & M(m));
}

const char *mp_diff_metric_name(enum mp_diff_metric m)
{
	return (unsigned)m < MP_DIFF_N_METRICS ? metric_names[m] : "?";
}

const char *mp_diff_scope_name(enum mp_diff_scope s)
{
	return (unsigned)s < MP_DIFF_N_SCOPES ? scope_names[s] : "?";
}

/* ---- the limit grammar ---- */

#define WHY(msg)                  \
	do {                      \
		*ret_why = (msg); \
		return -EINVAL;   \
	} while (0)

/* A decimal number without sign or exponent: "5", "2.5", ".5". */
static int parse_number(const char **s, double *ret, const char **ret_why)
{
	const char *p = *s;
	double v = 0, scale = 1;
	int digits = 0;

	for (; isdigit((unsigned char)*p); p++, digits++) {
		if (digits >= 20)
			WHY("value too large");
		v = v * 10 + (*p - '0');
	}
	if (*p == '.') {
		for (p++; isdigit((unsigned char)*p); p++, digits++) {
			if (scale < 1e-12)
				continue; /* beyond what a byte count can hold */
			scale /= 10;
			v += (*p - '0') * scale;
		}
	}
	if (!digits)
		WHY("the value is not a number: write N% (a percentage of OLD) or bytes "
		    "(512, 64K, 1.5M, 2G)");
	*s = p;
	*ret = v;
	return 0;
}

static int parse_value(const char *s, struct mp_diff_limit *l, const char **ret_why)
{
	static const struct {
		const char *suffix;
		double scale;
	} units[] = {
		{ "", 1 },
		{ "B", 1 },
		{ "K", 1024.0 },
		{ "KiB", 1024.0 },
		{ "M", 1024.0 * 1024 },
		{ "MiB", 1024.0 * 1024 },
		{ "G", 1024.0 * 1024 * 1024 },
		{ "GiB", 1024.0 * 1024 * 1024 },
	};
	double v;
	int r;

	r = parse_number(&s, &v, ret_why);
	if (r < 0)
		return r;
	if (!strcmp(s, "%")) {
		if (v > LIMIT_MAX_PERCENT)
			WHY("a percentage above 1000000%");
		l->percent = true;
		l->value = v;
		return 0;
	}
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
		if (strcmp(s, units[i].suffix))
			continue;
		if (v * units[i].scale > LIMIT_MAX_BYTES)
			WHY("more bytes than a profile can hold");
		l->percent = false;
		l->value = floor(v * units[i].scale);
		return 0;
	}
	WHY("unknown unit: a value is N% or bytes with an optional unit B, K (KiB), "
	    "M (MiB) or G (GiB), powers of 1024");
}

static int parse_metric(const char *s, size_t len, enum mp_diff_metric *ret)
{
	for (unsigned m = 0; m < MP_DIFF_N_METRICS; m++) {
		if (strlen(metric_names[m]) == len && !memcmp(s, metric_names[m], len)) {
			*ret = (enum mp_diff_metric)m;
			return 0;
		}
	}
	return -EINVAL;
}

/* "kernel:NAME" (up to @end) into @l. */
static int parse_scope(const char *s, const char *end, struct mp_diff_limit *l,
		       const char **ret_why)
{
	const char *colon = memchr(s, ':', (size_t)(end - s));

	if (!colon)
		WHY("a scope is kernel:NAME, phase:NAME, owner:NAME, tag:NAME, "
		    "phase_owner:PHASE/OWNER, phase_tag:PHASE/TAG or line:'FUNCTION FILE:LINE', "
		    "as in kernel:matmul.alloc=10%");
	for (unsigned i = MP_DIFF_KERNEL; i < MP_DIFF_N_SCOPES; i++) {
		size_t n = strlen(scope_names[i]);

		if ((size_t)(colon - s) == n && !memcmp(s, scope_names[i], n)) {
			if (colon + 1 == end)
				WHY("the scope's NAME is empty (kernel:NAME.METRIC=VALUE)");
			l->scope = (enum mp_diff_scope)i;
			l->pattern = strndup(colon + 1, (size_t)(end - colon - 1));
			if (!l->pattern)
				WHY("out of memory");
			return 0;
		}
	}
	WHY("unknown scope: kernel:NAME, phase:NAME, owner:NAME, tag:NAME, "
	    "phase_owner:PHASE/OWNER, phase_tag:PHASE/TAG or line:'FUNCTION FILE:LINE'");
}

/* [SCOPE:NAME.]METRIC=VALUE. NAME may hold dots and '=' (the metric is
 * after the last dot before the last '='; a value holds neither). */
int mp_diff_limit_parse(const char *spec, struct mp_diff_limit *ret, const char **ret_why)
{
	struct mp_diff_limit l = { .scope = MP_DIFF_PROFILE };
	const char *eq = strrchr(spec, '='), *dot = NULL, *metric = spec;
	int r;

	if (!eq || eq == spec)
		WHY("expected [SCOPE:NAME.]METRIC=VALUE, as in peak=5% or kernel:matmul.alloc=1M");
	for (const char *p = spec; p < eq; p++)
		if (*p == '.')
			dot = p;
	if (dot)
		metric = dot + 1;
	if (parse_metric(metric, (size_t)(eq - metric), &l.metric) < 0)
		WHY("unknown metric: alloc, peak, peak_added, peak_live, rss, mapped, maps_peak, "
		    "maps_live or peak_share");
	r = parse_value(eq + 1, &l, ret_why);
	if (r < 0)
		return r;
	if (dot) {
		r = parse_scope(spec, dot, &l, ret_why);
		if (r < 0)
			return r;
	}
	if (!(scope_metrics[l.scope] & M(l.metric))) {
		free(l.pattern);
		WHY(scope_metrics_why[l.scope]);
	}
	l.spec = strdup(spec);
	if (!l.spec) {
		free(l.pattern);
		WHY("out of memory");
	}
	*ret = l;
	return 0;
}

void mp_diff_limit_release(struct mp_diff_limit *l)
{
	if (!l)
		return;
	free(l->spec);
	free(l->pattern);
	l->spec = l->pattern = NULL;
}

/* ---- entities: what is named the same in both profiles ---- */

struct ent {
	enum mp_diff_scope scope;
	const char *name;
	const void *x[2]; /* in OLD, in NEW; NULL: absent */
};

struct ents {
	struct ent *v;
	uint32_t n, cap;
	struct mp_hashmap map;
};

struct ent_key {
	enum mp_diff_scope scope;
	const char *name;
};

static uint64_t ent_hash(enum mp_diff_scope scope, const char *name)
{
	return mp_hash_combine(mp_hash_str(name), (uint64_t)scope);
}

static bool ent_eq(const void *ctx, uint32_t id, const void *key)
{
	const struct ent *e = &((const struct ents *)ctx)->v[id];
	const struct ent_key *k = key;

	return e->scope == k->scope && !strcmp(e->name, k->name);
}

/* Entity @x of profile @side (0 OLD, 1 NEW) named @name. A name twice in
 * one profile (only a damaged file has that) keeps the first. */
static int ents_add_id(struct ents *es, enum mp_diff_scope scope, const char *name, const void *x,
		       int side, uint32_t *ret_id)
{
	struct ent_key key = { scope, name ? name : "" };
	uint32_t id;
	int r;

	if (es->n == es->cap) {
		uint32_t cap = es->cap ? es->cap * 2 : 64;
		struct ent *v = reallocarray(es->v, cap, sizeof(*v));

		if (!v)
			return -ENOMEM;
		es->v = v;
		es->cap = cap;
	}
	r = mp_hashmap_intern(&es->map, ent_hash(scope, key.name), ent_eq, es, &key, es->n, &id);
	if (r < 0)
		return r;
	if (r == 1)
		es->v[es->n++] = (struct ent){ .scope = scope, .name = key.name };
	if (!es->v[id].x[side])
		es->v[id].x[side] = x;
	if (ret_id)
		*ret_id = id;
	return r;
}

static int ents_add(struct ents *es, enum mp_diff_scope scope, const char *name, const void *x,
		    int side)
{
	int r = ents_add_id(es, scope, name, x, side, NULL);

	return r < 0 ? r : 0;
}

/* The innermost Python frame of heap site @s's stack, NULL: none. */
static const struct mp_location *site_line(const struct mp_profile *p, const struct mp_site *s)
{
	uint64_t buf[MP_PROFILE_MAX_DEPTH];
	const uint64_t *frames;

	if (!s->stack || s->stack > p->n_stacks || s->pool || (s->flags & MP_SITE_F_OTHER))
		return NULL;
	frames = mp_profile_stack_frames(p, s->stack - 1, buf);
	for (uint32_t i = 0; i < p->stacks[s->stack - 1].n_frames; i++) {
		const struct mp_location *l = mp_profile_location(p, frames[i]);

		if (l && l->python)
			return l;
	}
	return NULL;
}

/* The Python lines of @p's heap sites (docs/PROFILE.md "Python frames"),
 * their figures in d->lines[@side]; a new name is kept in @d->names. */
static int ents_lines(struct ents *es, struct mp_diff *d, const struct mp_profile *p, int side)
{
	struct mp_diff_line *v;
	uint32_t n = 0;

	if (!p->n_locations || !p->n_stacks)
		return 0;
	v = calloc(p->n_sites ? p->n_sites : 1, sizeof(*v));
	if (!v)
		return -ENOMEM;
	d->lines[side] = v;
	for (uint32_t i = 0; i < p->n_sites; i++) {
		const struct mp_site *s = &p->sites[i];
		const struct mp_location *l = site_line(p, s);
		struct mp_diff_line *f;
		char **names, *name;
		uint32_t id;
		int r;

		if (!l)
			continue;
		names = reallocarray(d->names, d->n_names + 1, sizeof(*names));
		if (!names)
			return -ENOMEM;
		d->names = names;
		if (asprintf(&name, "%s %s:%u", l->function ? l->function : "??",
			     l->file ? l->file : "??", l->line) < 0)
			return -ENOMEM;
		r = ents_add_id(es, MP_DIFF_LINE, name, &v[n], side, &id);
		if (r < 0) {
			free(name);
			return r;
		}
		if (r == 1)
			d->names[d->n_names++] = name;
		else
			free(name);
		f = (struct mp_diff_line *)es->v[id].x[side];
		if (f == &v[n])
			*f = (struct mp_diff_line){ .peak_known = true }, n++;
		f->alloc += s->alloc_space;
		if (s->peak_space == MP_UNKNOWN)
			f->peak_known = false;
		else
			f->peak += s->peak_space;
	}
	return 0;
}

/* Owners and tags are listed whether or not they allocated or mapped
 * anything. */
static bool pool_active(const struct mp_pool *o)
{
	return o->mem.alloc_count || o->mem.alloc_bytes || o->peak_bytes || o->maps.alloc_count ||
	       o->maps.free_count || o->maps.peak_bytes;
}

/* Phase @ph's parts (@n of @v, of @pools) as entities "PHASE/NAME" of
 * @scope; a new name is kept in @d->names. */
static int ents_parts(struct ents *es, struct mp_diff *d, enum mp_diff_scope scope,
		      const struct mp_phase *ph, const struct mp_peak_part *v, uint32_t n,
		      const struct mp_pool *pools, int side)
{
	for (uint32_t i = 0; i < n; i++) {
		char **names, *name;
		uint32_t before = es->n;
		int r;

		names = reallocarray(d->names, d->n_names + 1, sizeof(*names));
		if (!names)
			return -ENOMEM;
		d->names = names;
		if (asprintf(&name, "%s/%s", ph->name ? ph->name : "",
			     pools[v[i].id].name ? pools[v[i].id].name : "") < 0)
			return -ENOMEM;
		r = ents_add(es, scope, name, &v[i], side);
		if (r < 0 || es->n == before) {
			free(name);
			if (r < 0)
				return r;
			continue;
		}
		d->names[d->n_names++] = name;
	}
	return 0;
}

static int ents_collect(struct ents *es, struct mp_diff *d, const struct mp_profile *p, int side)
{
	int r = 0;

	for (uint32_t i = 0; i < p->n_kernels && r >= 0; i++) {
		const struct mp_kernel *k = &p->kernels[i];

		r = ents_add(es, MP_DIFF_KERNEL, k->name < p->n_names ? p->names[k->name] : NULL, k,
			     side);
	}
	for (uint32_t i = 0; i < p->n_phases && r >= 0; i++)
		r = ents_add(es, MP_DIFF_PHASE, p->phases[i].name, &p->phases[i], side);
	for (uint32_t i = 0; i < p->n_owners && r >= 0; i++)
		if (pool_active(&p->owners[i]))
			r = ents_add(es, MP_DIFF_OWNER, p->owners[i].name, &p->owners[i], side);
	for (uint32_t i = 0; i < p->n_tags && r >= 0; i++)
		if (pool_active(&p->tags[i]))
			r = ents_add(es, MP_DIFF_TAG, p->tags[i].name, &p->tags[i], side);
	for (uint32_t i = 0; i < p->n_phases && p->peak_parts && r >= 0; i++) {
		const struct mp_phase *ph = &p->phases[i];

		r = ents_parts(es, d, MP_DIFF_PHASE_OWNER, ph, ph->peak_owners, ph->n_peak_owners,
			       p->owners, side);
		if (r >= 0)
			r = ents_parts(es, d, MP_DIFF_PHASE_TAG, ph, ph->peak_tags, ph->n_peak_tags,
				       p->tags, side);
	}
	if (r >= 0)
		r = ents_lines(es, d, p, side);
	return r;
}

/* ---- figures ---- */

struct fig {
	int64_t v;
	double var;
	bool known;
};

static int64_t clamp_u(uint64_t v)
{
	return v > (uint64_t)FIG_MAX ? FIG_MAX : (int64_t)v;
}

static int64_t clamp_i(int64_t v)
{
	return v > FIG_MAX ? FIG_MAX : v < -FIG_MAX ? -FIG_MAX : v;
}

static double var_of(double v)
{
	return isfinite(v) && v > 0 ? v : 0;
}

static struct fig fig_u(uint64_t v, double var)
{
	return (struct fig){ clamp_u(v), var_of(var), true };
}

/* A mapping figure of @ms: bytes mapped, reserved peak, reserved at the
 * end. */
static struct fig fig_maps(const struct mp_map_stats *ms, enum mp_diff_metric m)
{
	switch (m) {
	case MP_DIFF_MAPPED:
		return fig_u(ms->alloc_bytes, 0);
	case MP_DIFF_MAPPED_PEAK:
		return fig_u(ms->peak_bytes, 0);
	case MP_DIFF_MAPPED_LIVE:
		return fig_u(ms->live_bytes, 0);
	default:
		return (struct fig){ 0 };
	}
}

static struct fig fig_profile(const struct mp_profile *p, enum mp_diff_metric m)
{
	if (mp_diff_metric_is_maps(m))
		return fig_maps(&p->maps, m);
	switch (m) {
	case MP_DIFF_ALLOC:
		return fig_u(p->mem.alloc_bytes, p->mem.alloc_var);
	case MP_DIFF_PEAK:
		return fig_u(p->peak_bytes, p->peak_var);
	case MP_DIFF_RSS:
		return (struct fig){ clamp_u(p->rss_peak), 0, p->rss_samples > 0 };
	default:
		return (struct fig){ 0 };
	}
}

static struct fig fig_kernel(const struct mp_kernel *k, enum mp_diff_metric m)
{
	if (mp_diff_metric_is_maps(m))
		return fig_maps(&k->maps, m);
	switch (m) {
	case MP_DIFF_ALLOC:
		return fig_u(k->incl.alloc_bytes, k->incl.alloc_var);
	case MP_DIFF_PEAK_ADDED:
		return fig_u(k->peak_added, k->peak_added_var);
	case MP_DIFF_PEAK_LIVE:
		return fig_u(k->peak_bytes, k->peak_var);
	case MP_DIFF_RSS:
		return (struct fig){ clamp_i(k->rss_delta_sum), 0, k->rss_calls > 0 };
	default:
		return (struct fig){ 0 };
	}
}

static struct fig fig_phase(const struct mp_profile *p, const struct mp_phase *ph,
			    enum mp_diff_metric m)
{
	if (mp_diff_metric_is_maps(m))
		return fig_maps(&ph->maps, m);
	switch (m) {
	case MP_DIFF_ALLOC:
		return fig_u(ph->mem.alloc_bytes, ph->mem.alloc_var);
	case MP_DIFF_PEAK_LIVE:
		return fig_u(ph->peak_bytes, ph->peak_var);
	case MP_DIFF_RSS:
		/* no sample while it was current: unknown */
		return (struct fig){ clamp_u(ph->rss_peak), 0, p->rss_samples && ph->rss_peak };
	default:
		return (struct fig){ 0 };
	}
}

static struct fig fig_pool(const struct mp_pool *o, enum mp_diff_metric m)
{
	if (mp_diff_metric_is_maps(m))
		return fig_maps(&o->maps, m);
	switch (m) {
	case MP_DIFF_ALLOC:
		return fig_u(o->mem.alloc_bytes, o->mem.alloc_var);
	case MP_DIFF_PEAK_LIVE:
		return fig_u(o->peak_bytes, o->peak_var);
	case MP_DIFF_PEAK_SHARE:
		return fig_u(o->peak_share, 0);
	default:
		return (struct fig){ 0 };
	}
}

/* Figure @m of entity @x of @p; an absent entity has 0, exactly. The
 * mapping figures of a file written before they were recorded are unknown,
 * never 0. */
static struct fig figure(const struct mp_profile *p, enum mp_diff_scope s, const void *x,
			 enum mp_diff_metric m)
{
	if (mp_diff_metric_is_maps(m) && !p->maps_recorded)
		return (struct fig){ 0 };
	if (m == MP_DIFF_PEAK_SHARE && !p->peak_parts)
		return (struct fig){ 0 };
	if (!x)
		return (struct fig){ 0, 0, true };
	switch (s) {
	case MP_DIFF_PROFILE:
		return fig_profile(p, m);
	case MP_DIFF_KERNEL:
		return fig_kernel(x, m);
	case MP_DIFF_PHASE:
		return fig_phase(p, x, m);
	case MP_DIFF_OWNER:
	case MP_DIFF_TAG:
		return fig_pool(x, m);
	case MP_DIFF_PHASE_OWNER:
	case MP_DIFF_PHASE_TAG:
		return fig_u(((const struct mp_peak_part *)x)->bytes, 0);
	case MP_DIFF_LINE: {
		const struct mp_diff_line *l = x;

		if (m == MP_DIFF_PEAK_SHARE)
			return l->peak_known ? fig_u(l->peak, 0) : (struct fig){ 0 };
		return fig_u(l->alloc, 0);
	}
	default:
		return (struct fig){ 0 };
	}
}

/* ---- rows ---- */

static void row_fill(struct mp_diff *d, const struct ent *e, enum mp_diff_metric m,
		     struct mp_diff_row *r)
{
	struct fig a = figure(d->old, e->scope, e->x[0], m);
	struct fig b = figure(d->new_, e->scope, e->x[1], m);

	*r = (struct mp_diff_row){
		.scope = e->scope,
		.name = e->scope == MP_DIFF_PROFILE ? NULL : e->name,
		.metric = m,
		.presence = !e->x[0] ? MP_DIFF_APPEARED :
			    !e->x[1] ? MP_DIFF_VANISHED :
				       MP_DIFF_IN_BOTH,
		.allowed = -1,
	};
	if (!a.known || !b.known) {
		r->status = MP_DIFF_UNKNOWN;
		return;
	}
	r->known = true;
	r->old_v = a.v;
	r->new_v = b.v;
	r->delta = b.v - a.v;
	r->stderr_ = sqrt(a.var + b.var);
	if (!r->delta)
		r->status = MP_DIFF_UNCHANGED;
	else if ((double)llabs(r->delta) <= d->sigmas * r->stderr_)
		r->status = MP_DIFF_NOISE;
	else
		r->status = MP_DIFF_CHANGED;
}

static int row_cmp(const void *pa, const void *pb)
{
	const struct mp_diff_row *a = pa, *b = pb;
	int64_t da = llabs(a->delta), db = llabs(b->delta);
	int c;

	if (a->known != b->known)
		return a->known ? -1 : 1;
	if (da != db)
		return da > db ? -1 : 1;
	if (a->scope != b->scope)
		return a->scope < b->scope ? -1 : 1;
	if (a->name && b->name) {
		c = strcmp(a->name, b->name);
		if (c)
			return c;
	}
	return (a->metric > b->metric) - (a->metric < b->metric);
}

/* The metrics of @s compared here: no mapping rows when neither profile
 * recorded mappings. */
static unsigned metrics_of(const struct mp_diff *d, enum mp_diff_scope s)
{
	return scope_metrics[s] & (d->maps ? ~0u : ~MAPS_ALL) &
	       (d->parts ? ~0u : ~M(MP_DIFF_PEAK_SHARE));
}

static int rows_build(struct mp_diff *d, const struct ents *es)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < es->n; i++)
		n += (uint32_t)__builtin_popcount(metrics_of(d, es->v[i].scope));
	d->rows = calloc(n ? n : 1, sizeof(*d->rows));
	if (!d->rows)
		return -ENOMEM;
	for (uint32_t i = 0; i < es->n; i++)
		for (unsigned m = 0; m < MP_DIFF_N_METRICS; m++)
			if (metrics_of(d, es->v[i].scope) & M(m))
				row_fill(d, &es->v[i], (enum mp_diff_metric)m,
					 &d->rows[d->n_rows++]);
	qsort(d->rows, d->n_rows, sizeof(*d->rows), row_cmp);
	return 0;
}

/* ---- limits ---- */

static bool limit_matches(const struct mp_diff_limit *l, const struct mp_diff_row *r)
{
	if (l->scope != r->scope || l->metric != r->metric)
		return false;
	return l->scope == MP_DIFF_PROFILE || fnmatch(l->pattern, r->name, 0) == 0;
}

/* Checks limit @i on every row it names. The increase must pass what it
 * allows by more than the noise margin to fail it. */
static void limit_check(struct mp_diff *d, uint32_t i)
{
	const struct mp_diff_limit *l = &d->limits[i];
	struct mp_diff_check *c = &d->checks[i];

	for (uint32_t k = 0; k < d->n_rows; k++) {
		struct mp_diff_row *r = &d->rows[k];
		double allowed, excess;

		if (!limit_matches(l, r))
			continue;
		c->matched++;
		r->limited = true;
		if (!r->known) {
			c->unknown++;
			continue;
		}
		allowed = l->percent ? l->value / 100 * fabs((double)r->old_v) : l->value;
		if (r->allowed < 0 || allowed < r->allowed)
			r->allowed = allowed;
		excess = (double)r->delta - allowed;
		if (excess > d->sigmas * r->stderr_) {
			if (!c->failed++)
				c->first_failed = k;
			r->status = MP_DIFF_FAIL;
		} else if (r->status != MP_DIFF_FAIL) {
			if (excess > 0)
				r->status = MP_DIFF_NOISE;
			else if (r->status != MP_DIFF_NOISE)
				r->status = MP_DIFF_OK;
		}
	}
	if (c->failed)
		d->exceeded++;
}

int mp_diff_new(const struct mp_profile *old, const struct mp_profile *new_,
		const struct mp_diff_limit *limits, uint32_t n_limits, double sigmas,
		struct mp_diff **ret)
{
	struct ents es = { 0 };
	struct mp_diff *d = calloc(1, sizeof(*d));
	int r;

	if (!d)
		return -ENOMEM;
	*d = (struct mp_diff){ .old = old,
			       .new_ = new_,
			       .sigmas = isfinite(sigmas) && sigmas > 0 ? sigmas : 0,
			       .maps = old->maps_recorded || new_->maps_recorded,
			       .parts = old->peak_parts || new_->peak_parts,
			       .limits = limits,
			       .n_limits = n_limits };
	/* a limit on a mapping figure is checked, or said to be unknown */
	for (uint32_t i = 0; i < n_limits; i++)
		if (mp_diff_metric_is_maps(limits[i].metric))
			d->maps = true;
		else if (limits[i].metric == MP_DIFF_PEAK_SHARE)
			d->parts = true;
	d->checks = calloc(n_limits ? n_limits : 1, sizeof(*d->checks));
	r = d->checks ? 0 : -ENOMEM;
	if (r >= 0)
		r = ents_add(&es, MP_DIFF_PROFILE, NULL, old, 0);
	if (r >= 0)
		r = ents_add(&es, MP_DIFF_PROFILE, NULL, new_, 1);
	if (r >= 0)
		r = ents_collect(&es, d, old, 0);
	if (r >= 0)
		r = ents_collect(&es, d, new_, 1);
	if (r >= 0)
		r = rows_build(d, &es);
	free(es.v);
	mp_hashmap_free(&es.map);
	if (r < 0) {
		mp_diff_free(d);
		return r;
	}
	for (uint32_t i = 0; i < n_limits; i++)
		limit_check(d, i);
	*ret = d;
	return 0;
}

void mp_diff_free(struct mp_diff *d)
{
	if (!d)
		return;
	free(d->rows);
	free(d->checks);
	for (uint32_t i = 0; i < d->n_names; i++)
		free(d->names[i]);
	free(d->names);
	free(d->lines[0]);
	free(d->lines[1]);
	free(d);
}
