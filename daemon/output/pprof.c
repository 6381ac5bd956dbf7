/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "hashmap.h"
#include "outfile.h"
#include "pprof.h"
#include "profile.pb-c.h"
#include "util.h"

/* Sample values, in the order of Go's heap profiles; sampled mode adds the
 * variances of the two space figures (docs/OUTPUT.md "Sampled sites"). */
enum {
	V_ALLOC_OBJECTS,
	V_ALLOC_SPACE,
	V_INUSE_OBJECTS,
	V_INUSE_SPACE,
	N_VALUES,
	V_ALLOC_SPACE_VAR = N_VALUES,
	V_INUSE_SPACE_VAR,
	N_VALUES_SAMPLED
};
/* Anonymous mappings (docs/OUTPUT.md "pprof"): three more values after
 * those, only in a profile where the program made or released some; the
 * heap samples have 0 there, the mapping samples 0 in the heap's. */
enum { M_OBJECTS, M_SPACE, M_INUSE_SPACE, N_MAP_VALUES };
#define N_VALUES_ALL (N_VALUES_SAMPLED + N_MAP_VALUES)
#define MAX_LABELS 5

/* The string table: model strings are borrowed, interned by content. */
struct strtab {
	const char **s;
	uint32_t n, cap;
	struct mp_hashmap ids;
};

static bool strtab_eq(const void *ctx, uint32_t id, const void *key)
{
	const struct strtab *t = ctx;

	return strcmp(t->s[id], key) == 0;
}

/* Index of @s (NULL means ""), or -ENOMEM. */
static int64_t strtab_get(struct strtab *t, const char *s)
{
	uint32_t id;
	int r;

	if (!s)
		s = "";
	if (t->n == t->cap) {
		uint32_t ncap = t->cap ? t->cap * 2 : 64;
		const char **ns = reallocarray(t->s, ncap, sizeof(*ns));

		if (!ns)
			return -ENOMEM;
		t->s = ns;
		t->cap = ncap;
	}
	r = mp_hashmap_intern(&t->ids, mp_hash_str(s), strtab_eq, t, s, t->n, &id);
	if (r < 0)
		return -ENOMEM;
	if (r == 1)
		t->s[t->n++] = s;
	return id;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* Everything the message points to, freed together. */
struct build {
	struct strtab st;
	struct mp_hashmap funcs_by_name; /* index into funcs by (name, filename) */
	uint64_t *callers; /* sorted, unique */
	uint32_t n_callers;
	Perftools__Profiles__ValueType vt[N_VALUES_ALL + 1], *vtp[N_VALUES_ALL];
	uint32_t n_values; /* N_VALUES, or N_VALUES_SAMPLED with the variances */
	uint32_t map_values; /* index of M_OBJECTS, 0: no mapping values */
	Perftools__Profiles__Sample *samples, **samplep;
	int64_t *values;
	uint64_t *loc_ids;
	Perftools__Profiles__Label *labels, **labelp;
	Perftools__Profiles__Location *locs, **locp;
	Perftools__Profiles__Line *lines, **linep;
	Perftools__Profiles__Function *funcs, **funcp;
	Perftools__Profiles__Mapping *maps, **mapp;
	char (*tids)[12]; /* the thread labels' text, one per sample */
	int64_t comments[8]; /* exe, path, pools, sampled, limits (3), mappings */
	char path_note[96];
	/* Limits: the "(other sites)" samples' location id (0: none), and
	 * the comments naming each bound reached. */
	uint64_t other_loc;
	Perftools__Profiles__Line other_line, *other_linep;
	Perftools__Profiles__Function other_func;
	char limit_note[3][256];
	/* The mapping samples' location id (0: none) and its function. */
	uint64_t maps_loc;
	Perftools__Profiles__Line maps_line, *maps_linep;
	Perftools__Profiles__Function maps_func;
	/* Python functions' names as pprof shows them (py_name()), owned */
	char **py_names;
	uint32_t n_py_names;
};

static bool has_maps(const struct mp_profile *p)
{
	return p->maps.alloc_count || p->maps.free_count;
}

static void build_free(struct build *b)
{
	free(b->st.s);
	mp_hashmap_free(&b->st.ids);
	mp_hashmap_free(&b->funcs_by_name);
	free(b->callers);
	free(b->samples);
	free(b->samplep);
	free(b->values);
	free(b->loc_ids);
	free(b->labels);
	free(b->labelp);
	free(b->tids);
	free(b->locs);
	free(b->locp);
	free(b->lines);
	free(b->linep);
	free(b->funcs);
	free(b->funcp);
	free(b->maps);
	free(b->mapp);
	for (uint32_t i = 0; i < b->n_py_names; i++)
		free(b->py_names[i]);
	free(b->py_names);
}

/* A Python function's name with "<" and ">" as "(" and ")": pprof takes
 * what is between angle brackets for C++ template arguments and drops it
 * ("<module>", "<lambda>", "f.<locals>.g"). Kept until @b is freed; NULL
 * when out of memory. */
static const char *py_name(struct build *b, const char *name)
{
	char **t, *s;

	if (!strpbrk(name, "<>"))
		return name;
	t = reallocarray(b->py_names, b->n_py_names + 1, sizeof(*t));
	if (!t)
		return NULL;
	b->py_names = t;
	s = strdup(name);
	if (!s)
		return NULL;
	for (char *c = s; *c; c++)
		*c = *c == '<' ? '(' : *c == '>' ? ')' : *c;
	b->py_names[b->n_py_names++] = s;
	return s;
}

#define S(str)                                        \
	({                                            \
		int64_t s_ = strtab_get(&b->st, str); \
		if (s_ < 0)                           \
			return -ENOMEM;               \
		s_;                                   \
	})

static int build_value_types(struct build *b, const struct mp_profile *p,
			     Perftools__Profiles__Profile *o)
{
	/* Variances, not standard errors: pprof sums a value over the
	 * samples it merges (by function, by label), and the variance of a
	 * sum of independent estimates is the sum of their variances. */
	static const char *const types_var[2][2] = {
		{ "alloc_space_var", "bytes_squared" },
		{ "inuse_space_var", "bytes_squared" },
	};
	static const char *const types_exact[N_VALUES][2] = {
		{ "alloc_objects", "count" },
		{ "alloc_space", "bytes" },
		{ "inuse_objects", "count" },
		{ "inuse_space", "bytes" },
	};

	static const char *const types_map[N_MAP_VALUES][2] = {
		{ "mapped_objects", "count" },
		{ "mapped_space", "bytes" },
		{ "mapped_inuse_space", "bytes" },
	};

	b->n_values = p->site_vars ? N_VALUES_SAMPLED : N_VALUES;
	if (has_maps(p)) {
		b->map_values = b->n_values;
		b->n_values += N_MAP_VALUES;
	}
	for (uint32_t i = 0; i < b->n_values; i++) {
		const char *const *t = b->map_values && i >= b->map_values ?
					       types_map[i - b->map_values] :
				       i < N_VALUES ? types_exact[i] :
						      types_var[i - N_VALUES];

		perftools__profiles__value_type__init(&b->vt[i]);
		b->vt[i].type = S(t[0]);
		b->vt[i].unit = S(t[1]);
		b->vtp[i] = &b->vt[i];
	}
	o->n_sample_type = b->n_values;
	o->sample_type = b->vtp;
	/* Every figure is exact or already an unbiased estimate (sampled
	 * mode scales each sampled block): nothing for pprof to scale. */
	perftools__profiles__value_type__init(&b->vt[N_VALUES_ALL]);
	b->vt[N_VALUES_ALL].type = S("space");
	b->vt[N_VALUES_ALL].unit = S("bytes");
	o->period_type = &b->vt[N_VALUES_ALL];
	o->period = 1;
	o->default_sample_type = b->vt[V_INUSE_SPACE].type;
	return 0;
}

static int build_mappings(struct build *b, const struct mp_profile *p,
			  Perftools__Profiles__Profile *o)
{
	b->maps = calloc(p->n_objects, sizeof(*b->maps));
	b->mapp = calloc(p->n_objects, sizeof(*b->mapp));
	if (p->n_objects && (!b->maps || !b->mapp))
		return -ENOMEM;
	for (uint32_t i = 0; i < p->n_objects; i++) {
		const struct mp_object *ob = &p->objects[i];
		Perftools__Profiles__Mapping *m = &b->maps[i];

		perftools__profiles__mapping__init(m);
		m->id = i + 1;
		m->memory_start = ob->start;
		m->memory_limit = ob->limit;
		m->file_offset = ob->file_offset;
		m->filename = S(ob->path);
		m->build_id = S(ob->build_id);
		/* Set flags stop pprof from symbolizing again from the file. */
		m->has_functions = !!(ob->flags & MP_OBJ_F_FUNCTIONS);
		m->has_filenames = !!(ob->flags & MP_OBJ_F_LINES);
		m->has_line_numbers = !!(ob->flags & MP_OBJ_F_LINES);
		b->mapp[i] = m;
	}
	o->n_mapping = p->n_objects;
	o->mapping = b->mapp;
	return 0;
}

/* Functions are unique per (name, file) string pair. */
struct fun_key {
	int64_t name, file;
};

static bool fun_eq(const void *ctx, uint32_t id, const void *key)
{
	const Perftools__Profiles__Function *fn = &((const struct build *)ctx)->funcs[id];
	const struct fun_key *k = key;

	return fn->name == k->name && fn->filename == k->file;
}

/* The id of the function @fname in @file in *@ret_id, added to the table
 * if new. 0 or -ENOMEM. The table has room for every line's function. */
static int function_id(struct build *b, const char *fname, const char *file, uint32_t *nf,
		       uint64_t *ret_id)
{
	struct fun_key k = { S(fname), S(file) };
	uint32_t i;
	int r;

	r = mp_hashmap_intern(&b->funcs_by_name, mp_hash_combine(mp_hash_u64(k.name), k.file),
			      fun_eq, b, &k, *nf, &i);
	if (r < 0)
		return r;
	if (r == 1) {
		Perftools__Profiles__Function *fn = &b->funcs[i];

		perftools__profiles__function__init(fn);
		fn->id = i + 1;
		fn->name = k.name;
		fn->system_name = k.name;
		fn->filename = k.file;
		b->funcp[(*nf)++] = fn;
	}
	*ret_id = i + 1;
	return 0;
}

/* Limits: the location of the "(other sites)" samples, after the @n
 * others, with a function of that name and no address, when a site
 * table bound was reached. */
static int other_location(struct build *b, const struct mp_profile *p, uint32_t n, uint32_t *nf)
{
	Perftools__Profiles__Location *l = &b->locs[n];
	bool any = false;

	for (uint32_t i = 0; i < p->n_sites && !any; i++)
		any = (p->sites[i].flags & MP_SITE_F_OTHER) != 0;
	if (!any)
		return 0;
	perftools__profiles__function__init(&b->other_func);
	b->other_func.id = *nf + 1;
	b->other_func.name = S("(other sites)");
	b->other_func.system_name = b->other_func.name;
	b->funcp[(*nf)++] = &b->other_func;
	perftools__profiles__line__init(&b->other_line);
	b->other_line.function_id = b->other_func.id;
	b->other_linep = &b->other_line;
	perftools__profiles__location__init(l);
	l->id = n + 1;
	l->n_line = 1;
	l->line = &b->other_linep;
	b->locp[n] = l;
	b->other_loc = l->id;
	return 0;
}

/* The location of the mapping samples: a function of its own, as the
 * "(other sites)" one (mappings come from syscalls, without a stack). */
static int maps_location(struct build *b, const struct mp_profile *p, uint32_t n, uint32_t *nf)
{
	Perftools__Profiles__Location *l = &b->locs[n];

	if (!has_maps(p))
		return 0;
	perftools__profiles__function__init(&b->maps_func);
	b->maps_func.id = *nf + 1;
	b->maps_func.name = S("(anonymous mappings)");
	b->maps_func.system_name = b->maps_func.name;
	b->funcp[(*nf)++] = &b->maps_func;
	perftools__profiles__line__init(&b->maps_line);
	b->maps_line.function_id = b->maps_func.id;
	b->maps_linep = &b->maps_line;
	perftools__profiles__location__init(l);
	l->id = n + 1;
	l->n_line = 1;
	l->line = &b->maps_linep;
	b->locp[n] = l;
	b->maps_loc = l->id;
	return 0;
}

/* One location per distinct address (sites' callers and stack frames), id
 * = index + 1; inlined functions are extra lines, innermost first, as
 * profile.proto defines. */
static int build_locations(struct build *b, const struct mp_profile *p,
			   Perftools__Profiles__Profile *o)
{
	uint32_t n = 0, nf = 0;
	size_t total = p->n_sites, nlines = 0, li = 0;
	int r;

	if (p->stack_tree)
		total += p->stack_tree->n_nodes;
	else
		for (uint32_t i = 0; i < p->n_stacks; i++)
			total += p->stacks[i].n_frames;
	b->callers = malloc((total ? total : 1) * sizeof(*b->callers));
	if (!b->callers)
		return -ENOMEM;
	total = 0;
	for (uint32_t i = 0; i < p->n_sites; i++)
		if (!(p->sites[i].flags & MP_SITE_F_OTHER))
			b->callers[total++] = p->sites[i].caller;
	if (p->stack_tree)
		for (uint32_t i = 0; i < p->stack_tree->n_nodes; i++)
			b->callers[total++] = p->stack_tree->frame[i];
	else
		for (uint32_t i = 0; i < p->n_stacks; i++)
			for (uint32_t j = 0; j < p->stacks[i].n_frames; j++)
				b->callers[total++] = p->stacks[i].frames[j];
	qsort(b->callers, total, sizeof(*b->callers), cmp_u64);
	for (size_t i = 0; i < total; i++)
		if (!n || b->callers[n - 1] != b->callers[i])
			b->callers[n++] = b->callers[i];
	b->n_callers = n;
	for (uint32_t i = 0; i < n; i++) {
		const struct mp_location *ml = mp_profile_location(p, b->callers[i]);

		nlines += 1 + (ml ? ml->n_inlined : 0);
	}

	/* room for the "(other sites)" and mapping locations and functions */
	b->locs = calloc(n + 2, sizeof(*b->locs));
	b->locp = calloc(n + 2, sizeof(*b->locp));
	b->lines = calloc(nlines ? nlines : 1, sizeof(*b->lines));
	b->linep = calloc(nlines ? nlines : 1, sizeof(*b->linep));
	b->funcs = calloc(nlines ? nlines : 1, sizeof(*b->funcs));
	b->funcp = calloc(nlines + 2, sizeof(*b->funcp));
	if (!b->locs || !b->locp || !b->lines || !b->linep || !b->funcs || !b->funcp)
		return -ENOMEM;
	for (uint32_t i = 0; i < n; i++) {
		const struct mp_location *ml = mp_profile_location(p, b->callers[i]);
		Perftools__Profiles__Location *l = &b->locs[i];
		size_t first = li;

		perftools__profiles__location__init(l);
		l->id = i + 1;
		l->address = b->callers[i];
		b->locp[i] = l;
		if (!ml)
			continue;
		if (ml->object < p->n_objects)
			l->mapping_id = ml->object + 1;
		for (uint32_t j = 0; j < ml->n_inlined; j++) {
			const struct mp_inline_frame *in = &ml->inlined[j];

			perftools__profiles__line__init(&b->lines[li]);
			r = function_id(b, in->function ? in->function : "??", in->file, &nf,
					&b->lines[li].function_id);
			if (r < 0)
				return r;
			b->lines[li].line = in->line;
			b->linep[li] = &b->lines[li];
			li++;
		}
		if (ml->function || ml->n_inlined) {
			const char *fname = ml->function ? ml->function : "??";

			if (ml->python && !(fname = py_name(b, fname)))
				return -ENOMEM;
			perftools__profiles__line__init(&b->lines[li]);
			r = function_id(b, fname, ml->file, &nf, &b->lines[li].function_id);
			if (r < 0)
				return r;
			b->lines[li].line = ml->line;
			b->linep[li] = &b->lines[li];
			li++;
		}
		l->n_line = li - first;
		l->line = l->n_line ? &b->linep[first] : NULL;
	}
	r = other_location(b, p, n, &nf);
	if (r == 0)
		r = maps_location(b, p, n + (b->other_loc != 0), &nf);
	if (r < 0)
		return r;
	o->n_location = n + (b->other_loc != 0) + (b->maps_loc != 0);
	o->location = b->locp;
	o->n_function = nf;
	o->function = b->funcp;
	return 0;
}

static uint64_t location_id(const struct build *b, uint64_t caller)
{
	uint32_t lo = 0, hi = b->n_callers;

	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;

		if (b->callers[mid] < caller)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo + 1;
}

static int64_t clamp(uint64_t v)
{
	return v > INT64_MAX ? INT64_MAX : (int64_t)v;
}

/* A variance rounded to a whole bytes², within int64. */
static int64_t clamp_var(double v)
{
	if (!(v > 0))
		return 0;
	return v >= 9.2e18 ? INT64_MAX : (int64_t)llround(v);
}

/* Owners that made or released a mapping: one sample each. */
static uint32_t map_owners(const struct build *b, const struct mp_profile *p)
{
	uint32_t n = 0;

	for (uint32_t i = 0; b->map_values && i < p->n_owners; i++)
		n += p->owners[i].maps.alloc_count || p->owners[i].maps.free_count;
	return n;
}

/* The mapping samples, after the sites' @first: per owner, labels owner
 * and mapping=anonymous, the mapping values only. */
static int map_samples(struct build *b, const struct mp_profile *p, size_t first, size_t id)
{
	int64_t k_owner = S("owner"), k_mapping = S("mapping"), anon = S("anonymous");
	size_t k = first;

	for (uint32_t i = 0; b->map_values && i < p->n_owners; i++) {
		const struct mp_map_stats *m = &p->owners[i].maps;
		Perftools__Profiles__Sample *s = &b->samples[k];
		Perftools__Profiles__Label *lb = &b->labels[k * MAX_LABELS];
		Perftools__Profiles__Label **lp = &b->labelp[k * MAX_LABELS];
		int64_t *v = &b->values[k * b->n_values];

		if (!m->alloc_count && !m->free_count)
			continue;
		perftools__profiles__sample__init(s);
		b->loc_ids[id] = b->maps_loc;
		s->location_id = &b->loc_ids[id++];
		s->n_location_id = 1;
		v[b->map_values + M_OBJECTS] = clamp(m->alloc_count);
		v[b->map_values + M_SPACE] = clamp(m->alloc_bytes);
		v[b->map_values + M_INUSE_SPACE] = clamp(m->live_bytes);
		s->n_value = b->n_values;
		s->value = v;
		perftools__profiles__label__init(&lb[0]);
		lb[0].key = k_owner;
		lb[0].str = S(p->owners[i].name);
		perftools__profiles__label__init(&lb[1]);
		lb[1].key = k_mapping;
		lb[1].str = anon;
		lp[0] = &lb[0];
		lp[1] = &lb[1];
		s->n_label = 2;
		s->label = lp;
		b->samplep[k++] = s;
	}
	return (int)(k - first);
}

/* The samples' arrays: one sample per site and per mapping owner. */
static int samples_alloc(struct build *b, const struct mp_profile *p)
{
	size_t n = p->n_sites + map_owners(b, p), n_ids = map_owners(b, p);

	if (!n)
		n = 1;
	b->samples = calloc(n, sizeof(*b->samples));
	b->samplep = calloc(n, sizeof(*b->samplep));
	b->values = calloc(n * b->n_values, sizeof(*b->values));
	for (uint32_t i = 0; i < p->n_sites; i++) {
		const struct mp_site *st = &p->sites[i];

		n_ids += st->stack && st->stack <= p->n_stacks ? p->stacks[st->stack - 1].n_frames :
								 1;
	}
	b->loc_ids = calloc(n_ids ? n_ids : 1, sizeof(*b->loc_ids));
	b->labels = calloc(n * MAX_LABELS, sizeof(*b->labels));
	b->labelp = calloc(n * MAX_LABELS, sizeof(*b->labelp));
	b->tids = calloc(n, sizeof(*b->tids));
	if (!b->samples || !b->samplep || !b->values || !b->loc_ids || !b->labels || !b->labelp ||
	    !b->tids)
		return -ENOMEM;
	return 0;
}

static int build_samples(struct build *b, const struct mp_profile *p,
			 Perftools__Profiles__Profile *o)
{
	int64_t k_kernel = S("kernel"), k_phase = S("phase"), k_owner = S("owner"),
		k_thread = S("thread"), k_pool = S("pool");
	size_t id = 0;
	int r = samples_alloc(b, p);

	if (r < 0)
		return r;
	for (uint32_t i = 0; i < p->n_sites; i++) {
		const struct mp_site *st = &p->sites[i];
		Perftools__Profiles__Sample *s = &b->samples[i];
		Perftools__Profiles__Label *lb = &b->labels[(size_t)i * MAX_LABELS];
		Perftools__Profiles__Label **lp = &b->labelp[(size_t)i * MAX_LABELS];
		int64_t *v = &b->values[(size_t)i * b->n_values];
		size_t nl = 0;

		perftools__profiles__sample__init(s);
		/* The whole call stack, leaf first, when there is one. */
		s->location_id = &b->loc_ids[id];
		if ((st->flags & MP_SITE_F_OTHER) && b->other_loc) {
			b->loc_ids[id++] = b->other_loc;
			s->n_location_id = 1;
		} else if (st->stack && st->stack <= p->n_stacks &&
			   p->stacks[st->stack - 1].n_frames) {
			const struct mp_stack *sk = &p->stacks[st->stack - 1];
			uint64_t buf[MP_PROFILE_MAX_DEPTH];
			const uint64_t *fr = mp_profile_stack_frames(p, st->stack - 1, buf);

			for (uint32_t j = 0; j < sk->n_frames; j++)
				b->loc_ids[id++] = location_id(b, fr[j]);
			s->n_location_id = sk->n_frames;
		} else {
			b->loc_ids[id++] = location_id(b, st->caller);
			s->n_location_id = 1;
		}
		v[V_ALLOC_OBJECTS] = clamp(st->alloc_objects);
		v[V_ALLOC_SPACE] = clamp(st->alloc_space);
		v[V_INUSE_OBJECTS] = clamp(st->inuse_objects);
		v[V_INUSE_SPACE] = clamp(st->inuse_space);
		if (p->site_vars) {
			v[V_ALLOC_SPACE_VAR] = clamp_var(p->site_vars[i].alloc_space);
			v[V_INUSE_SPACE_VAR] = clamp_var(p->site_vars[i].inuse_space);
		}
		s->n_value = b->n_values;
		s->value = v;
		/* Allocations outside any kernel (phase) carry no such label,
		 * so -tagfocus=kernel=X selects exactly kernel X. */
		if (st->name < p->n_names) {
			perftools__profiles__label__init(&lb[nl]);
			lb[nl].key = k_kernel;
			lb[nl++].str = S(p->names[st->name]);
		}
		if (st->phase < p->n_phases) {
			perftools__profiles__label__init(&lb[nl]);
			lb[nl].key = k_phase;
			lb[nl++].str = S(p->phases[st->phase].name);
		}
		if (st->owner < p->n_owners) {
			perftools__profiles__label__init(&lb[nl]);
			lb[nl].key = k_owner;
			lb[nl++].str = S(p->owners[st->owner].name);
		}
		perftools__profiles__label__init(&lb[nl]);
		/* A string: pprof would scale a number by -unit. */
		snprintf(b->tids[i], sizeof(b->tids[i]), "%u", st->tid);
		lb[nl].key = k_thread;
		lb[nl++].str = S(b->tids[i]);
		/* Pool slices: a view apart from the heap (an arena's slices
		 * are inside its malloc'd block); only they have the label. */
		if (st->pool && st->pool <= p->n_mempools) {
			perftools__profiles__label__init(&lb[nl]);
			lb[nl].key = k_pool;
			lb[nl++].str = S(p->mempools[st->pool - 1].name);
		}
		for (size_t j = 0; j < nl; j++)
			lp[j] = &lb[j];
		s->n_label = nl;
		s->label = lp;
		b->samplep[i] = s;
	}
	r = map_samples(b, p, p->n_sites, id);
	if (r < 0)
		return r;
	o->n_sample = p->n_sites + (size_t)r;
	o->sample = b->samplep;
	return 0;
}

/* Limits (docs/PROFILE.md "Limits"): a comment per bound reached. */
static int limit_comments(struct build *b, const struct mp_profile *p,
			  Perftools__Profiles__Profile *o)
{
	const struct mp_limits *l = &p->limits;
	uint32_t k = 0;

	if (p->sites_dropped)
		snprintf(b->limit_note[k++], sizeof(b->limit_note[0]),
			 "memprofd: limit reached: sites (max_sites %u): %llu allocations are in "
			 "the \"(other sites)\" samples (%llu sites evicted); a site listed lacks "
			 "at most %llu bytes",
			 l->sites, (unsigned long long)p->sites_dropped,
			 (unsigned long long)l->sites_evicted,
			 (unsigned long long)l->site_error_bytes);
	if (l->reached & MP_LIMIT_LIVE)
		snprintf(b->limit_note[k++], sizeof(b->limit_note[0]),
			 "memprofd: limit reached: live table (%llu blocks, max_memory %llu MiB): "
			 "%llu new blocks counted but not tracked; heap figures are lower bounds",
			 (unsigned long long)l->live_blocks, (unsigned long long)(l->memory >> 20),
			 (unsigned long long)l->untracked_allocs);
	if (p->stacks_dropped)
		snprintf(b->limit_note[k++], sizeof(b->limit_note[0]),
			 "memprofd: limit reached: stacks (max_stacks %u): %llu allocations keep "
			 "their caller alone",
			 l->stacks, (unsigned long long)p->stacks_dropped);
	for (uint32_t i = 0; i < k; i++)
		b->comments[o->n_comment++] = S(b->limit_note[i]);
	return 0;
}

static int build_profile(struct build *b, const struct mp_profile *p,
			 Perftools__Profiles__Profile *o)
{
	int r;

	perftools__profiles__profile__init(o);
	if (S("") != 0)
		return -EINVAL; /* string_table[0] must be "" */
	r = build_value_types(b, p, o);
	if (r == 0)
		r = build_mappings(b, p, o);
	if (r == 0)
		r = build_locations(b, p, o);
	if (r == 0)
		r = build_samples(b, p, o);
	if (r < 0)
		return r;
	o->duration_nanos = p->end_ns > p->begin_ns ? clamp(p->end_ns - p->begin_ns) : 0;
	if (p->exe)
		b->comments[o->n_comment++] = S(p->exe);
	if (p->tracer_path) {
		snprintf(b->path_note, sizeof(b->path_note), "memprofd: tracer path %s",
			 mp_tracer_path_name(p->tracer_path));
		b->comments[o->n_comment++] = S(b->path_note);
	}
	if (p->n_mempools)
		b->comments[o->n_comment++] =
			S("memprofd: samples labelled pool=NAME are pool slices, a view apart "
			  "from the heap samples (no pool label): -tagignore=pool=. for the heap "
			  "alone, -tagfocus=pool=NAME for one pool");
	if (b->map_values)
		b->comments[o->n_comment++] =
			S("memprofd: samples labelled mapping=anonymous are the anonymous "
			  "mappings each owner made (mapped_objects, mapped_space; "
			  "mapped_inuse_space still mapped at the end), a view apart from the heap "
			  "samples: -sample_index=mapped_space");
	if (p->site_vars)
		b->comments[o->n_comment++] =
			S("memprofd: sampled mode: alloc_space and inuse_space are unbiased "
			  "estimates; alloc_space_var and inuse_space_var their variances "
			  "(standard error = square root; they add like the estimates)");
	r = limit_comments(b, p, o);
	if (r < 0)
		return r;
	o->comment = b->comments;
	o->n_string_table = b->st.n;
	o->string_table = (char **)b->st.s;
	return 0;
}

int mp_gzip(const void *buf, size_t len, uint8_t **ret_buf, size_t *ret_len)
{
	z_stream z = { 0 };
	uint8_t *out;
	size_t cap;
	int r;

	if (deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) !=
	    Z_OK)
		return -ENOMEM;
	cap = deflateBound(&z, len) + 64;
	out = malloc(cap);
	if (!out) {
		deflateEnd(&z);
		return -ENOMEM;
	}
	z.next_in = (Bytef *)buf;
	z.next_out = out;
	/* deflate takes uInt lengths: feed large inputs in pieces. */
	do {
		size_t in_left = len - (size_t)((const uint8_t *)z.next_in - (const uint8_t *)buf);
		size_t out_left = cap - (size_t)(z.next_out - out);

		z.avail_in = in_left > (1u << 30) ? (1u << 30) : (uInt)in_left;
		z.avail_out = out_left > (1u << 30) ? (1u << 30) : (uInt)out_left;
		r = deflate(&z, z.avail_in == in_left ? Z_FINISH : Z_NO_FLUSH);
	} while (r == Z_OK);
	deflateEnd(&z);
	if (r != Z_STREAM_END) {
		free(out);
		return -EIO;
	}
	*ret_buf = out;
	*ret_len = z.total_out;
	return 0;
}

int mp_pprof_encode(const struct mp_profile *p, bool gzip, uint8_t **ret_buf, size_t *ret_len)
{
	Perftools__Profiles__Profile o;
	struct build b = { 0 };
	uint8_t *buf = NULL;
	size_t len = 0;
	int r;

	r = build_profile(&b, p, &o);
	if (r == 0) {
		len = perftools__profiles__profile__get_packed_size(&o);
		buf = malloc(len ? len : 1);
		if (!buf)
			r = -ENOMEM;
	}
	if (r == 0)
		perftools__profiles__profile__pack(&o, buf);
	build_free(&b);
	if (r < 0) {
		free(buf);
		return r;
	}
	if (gzip) {
		uint8_t *z;
		size_t zlen;

		r = mp_gzip(buf, len, &z, &zlen);
		free(buf);
		if (r < 0)
			return r;
		buf = z;
		len = zlen;
	}
	*ret_buf = buf;
	*ret_len = len;
	return 0;
}

int mp_pprof_save(const struct mp_profile *p, const char *path)
{
	uint8_t *buf;
	size_t len;
	int r;

	r = mp_pprof_encode(p, true, &buf, &len);
	if (r < 0)
		return r;
	r = mp_output_write(path, buf, len);
	free(buf);
	return r;
}
