// SPDX-License-Identifier: MIT
/*
 * OTLP profiles (v1development): one Profile per sample type (alloc and
 * in-use objects and space), all sharing the request's dictionary. A
 * sample is an allocation site of the model: a one-frame stack (the
 * allocator's caller, as in the pprof export) and the attributes
 * memprof.kernel, memprof.phase, memprof.owner (strings) and thread.id.
 * Mappings carry their GNU build ID as process.executable.build_id.gnu.
 * Every dictionary table starts with its zero value, as the schema
 * requires.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "arena.h"
#include "backend_body.h"
#include "hashmap.h"
#include "otlp_profiles.pb-c.h"

enum { V_ALLOC_OBJECTS, V_ALLOC_SPACE, V_INUSE_OBJECTS, V_INUSE_SPACE, N_VALUES };
#define MAX_SAMPLE_ATTRS 4

/* The dictionary being built. Every table lives in @arena, but for the
 * maps' slots (freed by mp_be_encode_otlp()); the first failure is kept in
 * @err and later calls do nothing. */
struct enc {
	struct mp_arena arena;
	int err;
	/* Strings: borrowed, interned by content. */
	char **strs;
	uint32_t n_strs, cap_strs;
	struct mp_hashmap str_ix; /* string -> index in strs */
	struct mp_hashmap attr_ix; /* attr_keys[i] -> i */
	struct mp_hashmap fn_ix; /* (name, file) -> function index */
	uint64_t *attr_keys; /* per attribute: the key attr_ix() built */
	Memprof__Otlp__KeyValueAndUnit *attrs, **attrp;
	Memprof__Otlp__AnyValue *avals;
	uint32_t n_attrs, cap_attrs;
};

static void *alloc(struct enc *e, size_t n, size_t size)
{
	void *p = e->err ? NULL : mp_arena_alloc(&e->arena, n, size);

	if (!p && !e->err)
		e->err = -ENOMEM;
	return p;
}

static int str_grow(struct enc *e)
{
	uint32_t ncap = e->cap_strs ? e->cap_strs * 2 : 64;
	char **ns = alloc(e, ncap, sizeof(*ns));

	if (!ns)
		return -ENOMEM;
	if (e->n_strs)
		memcpy(ns, e->strs, e->n_strs * sizeof(*ns));
	e->strs = ns;
	e->cap_strs = ncap;
	return 0;
}

static bool str_eq(const void *ctx, uint32_t id, const void *key)
{
	const struct enc *e = ctx;

	return !strcmp(e->strs[id], key);
}

/* @r of a map call, or 0 for a failure, which is kept in @e (the first). */
static int map_err(struct enc *e, int r)
{
	if (r < 0 && !e->err)
		e->err = r;
	return r < 0 ? 0 : r;
}

/* The string table index of @s, added if new; 0 after a failure. */
static int32_t str_ix(struct enc *e, const char *s)
{
	uint64_t h;
	uint32_t id;

	if (!s)
		s = "";
	h = mp_hash_str(s);
	if (e->err)
		return 0;
	if (mp_hashmap_find(&e->str_ix, h, str_eq, e, s, &id) == 0)
		return (int32_t)id;
	if (e->n_strs == e->cap_strs && str_grow(e) < 0)
		return 0;
	if (map_err(e, mp_hashmap_insert(&e->str_ix, h, e->n_strs)) < 0 || e->err)
		return 0;
	e->strs[e->n_strs] = (char *)s;
	return (int32_t)e->n_strs++;
}

static bool attr_eq(const void *ctx, uint32_t id, const void *key)
{
	const struct enc *e = ctx;

	return e->attr_keys[id] == *(const uint64_t *)key;
}

/* Index of the attribute (@key, string @sv) or (@key, int @iv) in the
 * attribute table, added if new; 0 after a failure. */
static int32_t attr_ix(struct enc *e, int32_t key, const char *sv, bool is_int, int64_t iv)
{
	uint64_t k;
	uint32_t id;

	if (!is_int)
		k = (uint64_t)key << 32 | (uint64_t)(uint32_t)str_ix(e, sv);
	else
		k = 1ull << 62 | (uint64_t)key << 32 | (uint32_t)iv;
	if (e->err)
		return 0;
	if (mp_hashmap_find(&e->attr_ix, mp_hash_u64(k), attr_eq, e, &k, &id) == 0)
		return (int32_t)id;
	if (e->n_attrs == e->cap_attrs) {
		e->err = -ENOBUFS;
		return 0;
	}
	if (map_err(e, mp_hashmap_insert(&e->attr_ix, mp_hash_u64(k), e->n_attrs)) < 0 || e->err)
		return 0;
	e->attr_keys[e->n_attrs] = k;
	Memprof__Otlp__KeyValueAndUnit *a = &e->attrs[e->n_attrs];
	Memprof__Otlp__AnyValue *v = &e->avals[e->n_attrs];

	memprof__otlp__key_value_and_unit__init(a);
	memprof__otlp__any_value__init(v);
	a->key_strindex = key;
	if (is_int) {
		v->value_case = MEMPROF__OTLP__ANY_VALUE__VALUE_INT_VALUE;
		v->int_value = iv;
	} else {
		v->value_case = MEMPROF__OTLP__ANY_VALUE__VALUE_STRING_VALUE;
		v->string_value = (char *)sv;
	}
	a->value = v;
	e->attrp[e->n_attrs] = a;
	return (int32_t)e->n_attrs++;
}

static void kv_str(Memprof__Otlp__KeyValue *kv, Memprof__Otlp__AnyValue *v, const char *k,
		   const char *s)
{
	memprof__otlp__key_value__init(kv);
	memprof__otlp__any_value__init(v);
	kv->key = (char *)k;
	v->value_case = MEMPROF__OTLP__ANY_VALUE__VALUE_STRING_VALUE;
	v->string_value = (char *)s;
	kv->value = v;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static int64_t clamp(uint64_t v)
{
	return v > INT64_MAX ? INT64_MAX : (int64_t)v;
}

/* One request being encoded: the dictionary and the four profiles. */
struct otlp {
	struct enc e;
	const struct mp_profile *p;
	uint32_t n_sites, n_obj, n_loc, n_fn;
	uint64_t *callers; /* distinct, sorted: location i + 1 */
	Memprof__Otlp__Mapping *maps, **mapp;
	int32_t *map_attr;
	Memprof__Otlp__Location *locs, **locp;
	Memprof__Otlp__Line *lines, **linep;
	Memprof__Otlp__Function *fns, **fnp;
	Memprof__Otlp__Stack *stacks, **stackp;
	int32_t *stack_locs;
	int32_t *sattr; /* MAX_SAMPLE_ATTRS per site */
	size_t *n_sattr;
	Memprof__Otlp__Sample *samples, **samplep;
	int64_t *values;
	Memprof__Otlp__Profile prof[N_VALUES], *profp[N_VALUES];
	Memprof__Otlp__ValueType vt[N_VALUES], period_type;
};

/* Sizes known up front: at most 4 attributes per site, one per mapping,
 * plus the zero entry. */
static int alloc_tables(struct otlp *o)
{
	struct enc *e = &o->e;
	size_t ns = o->n_sites, nv = (size_t)N_VALUES * ns + 1;

	e->cap_attrs = 1 + o->n_sites * MAX_SAMPLE_ATTRS + o->n_obj;
	e->attrs = alloc(e, e->cap_attrs, sizeof(*e->attrs));
	e->attr_keys = alloc(e, e->cap_attrs, sizeof(*e->attr_keys));
	e->attrp = alloc(e, e->cap_attrs, sizeof(*e->attrp));
	e->avals = alloc(e, e->cap_attrs, sizeof(*e->avals));
	o->callers = alloc(e, ns + 1, sizeof(*o->callers));
	o->maps = alloc(e, o->n_obj + 1, sizeof(*o->maps));
	o->mapp = alloc(e, o->n_obj + 1, sizeof(*o->mapp));
	o->map_attr = alloc(e, o->n_obj + 1, sizeof(*o->map_attr));
	o->samples = alloc(e, nv, sizeof(*o->samples));
	o->samplep = alloc(e, nv, sizeof(*o->samplep));
	o->values = alloc(e, nv, sizeof(*o->values));
	o->sattr = alloc(e, MAX_SAMPLE_ATTRS * ns + 1, sizeof(*o->sattr));
	o->n_sattr = alloc(e, ns + 1, sizeof(*o->n_sattr));
	if (e->err)
		return e->err;
	/* attribute_table[0] must be KeyValueAndUnit{}: no value at all. */
	if (str_ix(e, "") != 0 || attr_ix(e, 0, "", true, 0) != 0 || e->err)
		return e->err ? e->err : -ENOMEM;
	e->attrs[0].value = NULL;
	return 0;
}

/* Mappings: [0] is the zero value, object i is i + 1. */
static int add_mappings(struct otlp *o)
{
	struct enc *e = &o->e;
	int32_t k_build_id = str_ix(e, "process.executable.build_id.gnu");

	memprof__otlp__mapping__init(&o->maps[0]);
	o->mapp[0] = &o->maps[0];
	for (uint32_t i = 0; i < o->n_obj; i++) {
		const struct mp_object *ob = &o->p->objects[i];
		Memprof__Otlp__Mapping *mp = &o->maps[i + 1];

		memprof__otlp__mapping__init(mp);
		mp->memory_start = ob->start;
		mp->memory_limit = ob->limit;
		mp->file_offset = ob->file_offset;
		mp->filename_strindex = str_ix(e, ob->path);
		if (ob->build_id && *ob->build_id) {
			o->map_attr[i + 1] = attr_ix(e, k_build_id, ob->build_id, false, 0);
			mp->n_attribute_indices = 1;
			mp->attribute_indices = &o->map_attr[i + 1];
		}
		o->mapp[i + 1] = mp;
	}
	return e->err;
}

static bool fn_eq(const void *ctx, uint32_t id, const void *key)
{
	const struct otlp *o = ctx;
	const Memprof__Otlp__Function *k = key;

	return o->fns[id].name_strindex == k->name_strindex &&
	       o->fns[id].filename_strindex == k->filename_strindex;
}

/* The function of (@name, @file) in the function table, added if new. */
static uint32_t function_ix(struct otlp *o, int32_t name, int32_t file)
{
	struct enc *e = &o->e;
	const Memprof__Otlp__Function key = { .name_strindex = name, .filename_strindex = file };
	uint32_t fid = o->n_fn;
	int r;

	if (e->err)
		return 0;
	r = mp_hashmap_intern(&e->fn_ix,
			      mp_hash_combine(mp_hash_u64((uint32_t)name), (uint32_t)file), fn_eq,
			      o, &key, fid, &fid);
	if (map_err(e, r) <= 0)
		return e->err ? 0 : fid;
	o->n_fn++;
	memprof__otlp__function__init(&o->fns[fid]);
	o->fns[fid].name_strindex = name;
	o->fns[fid].system_name_strindex = name;
	o->fns[fid].filename_strindex = file;
	o->fnp[fid] = &o->fns[fid];
	return fid;
}

static int alloc_locations(struct otlp *o)
{
	struct enc *e = &o->e;
	size_t n = o->n_loc + 1;

	o->locs = alloc(e, n, sizeof(*o->locs));
	o->locp = alloc(e, n, sizeof(*o->locp));
	o->lines = alloc(e, n, sizeof(*o->lines));
	o->linep = alloc(e, n, sizeof(*o->linep));
	o->fns = alloc(e, n, sizeof(*o->fns));
	o->fnp = alloc(e, n, sizeof(*o->fnp));
	o->stacks = alloc(e, n, sizeof(*o->stacks));
	o->stackp = alloc(e, n, sizeof(*o->stackp));
	o->stack_locs = alloc(e, n, sizeof(*o->stack_locs));
	if (e->err)
		return e->err;
	memprof__otlp__location__init(&o->locs[0]);
	o->locp[0] = &o->locs[0];
	memprof__otlp__function__init(&o->fns[0]);
	o->fnp[0] = &o->fns[0];
	memprof__otlp__stack__init(&o->stacks[0]);
	o->stackp[0] = &o->stacks[0];
	return 0;
}

/* Locations: one per distinct caller, sorted; [0] is the zero value. Each
 * is also a one-frame stack: the allocator's caller. */
static int add_locations(struct otlp *o)
{
	const struct mp_profile *p = o->p;
	struct enc *e = &o->e;
	int r;

	for (uint32_t i = 0; i < o->n_sites; i++)
		o->callers[i] = p->sites[i].caller;
	qsort(o->callers, o->n_sites, sizeof(*o->callers), cmp_u64);
	for (uint32_t i = 0; i < o->n_sites; i++)
		if (!o->n_loc || o->callers[o->n_loc - 1] != o->callers[i])
			o->callers[o->n_loc++] = o->callers[i];
	r = alloc_locations(o);
	if (r < 0)
		return r;
	for (uint32_t i = 0; i < o->n_loc; i++) {
		const struct mp_location *ml = mp_profile_location(p, o->callers[i]);
		Memprof__Otlp__Location *l = &o->locs[i + 1];

		memprof__otlp__location__init(l);
		l->address = o->callers[i];
		o->locp[i + 1] = l;
		memprof__otlp__stack__init(&o->stacks[i + 1]);
		o->stack_locs[i + 1] = (int32_t)(i + 1);
		o->stacks[i + 1].n_location_indices = 1;
		o->stacks[i + 1].location_indices = &o->stack_locs[i + 1];
		o->stackp[i + 1] = &o->stacks[i + 1];
		if (!ml)
			continue;
		if (ml->object < o->n_obj)
			l->mapping_index = (int32_t)ml->object + 1;
		if (ml->function) {
			int32_t name = str_ix(e, ml->function), file = str_ix(e, ml->file);

			memprof__otlp__line__init(&o->lines[i + 1]);
			o->lines[i + 1].function_index = (int32_t)function_ix(o, name, file);
			o->lines[i + 1].line = ml->line;
			o->linep[i + 1] = &o->lines[i + 1];
			l->n_lines = 1;
			l->lines = &o->linep[i + 1];
		}
	}
	return e->err;
}

/* Per-site attributes, shared by the four profiles. */
static int add_site_attrs(struct otlp *o)
{
	const struct mp_profile *p = o->p;
	struct enc *e = &o->e;
	int32_t k_kernel = str_ix(e, "memprof.kernel"), k_phase = str_ix(e, "memprof.phase"),
		k_owner = str_ix(e, "memprof.owner"), k_thread = str_ix(e, "thread.id");

	for (uint32_t i = 0; i < o->n_sites && !e->err; i++) {
		const struct mp_site *st = &p->sites[i];
		int32_t *a = &o->sattr[(size_t)i * MAX_SAMPLE_ATTRS];
		size_t na = 0;

		/* No kernel attribute outside kernels, as in the pprof. */
		if (st->name < p->n_names)
			a[na++] = attr_ix(e, k_kernel, p->names[st->name], false, 0);
		if (st->phase < p->n_phases)
			a[na++] = attr_ix(e, k_phase, p->phases[st->phase].name, false, 0);
		if (st->owner < p->n_owners)
			a[na++] = attr_ix(e, k_owner, p->owners[st->owner].name, false, 0);
		a[na++] = attr_ix(e, k_thread, NULL, true, st->tid);
		o->n_sattr[i] = na;
	}
	return e->err;
}

static uint64_t site_value(const struct mp_site *st, int t)
{
	return t == V_ALLOC_OBJECTS ? st->alloc_objects :
	       t == V_ALLOC_SPACE   ? st->alloc_space :
	       t == V_INUSE_OBJECTS ? st->inuse_objects :
				      st->inuse_space;
}

/* The four profiles; zero-valued samples are left out. */
static int add_profiles(struct otlp *o)
{
	static const char *const types[N_VALUES][2] = {
		{ "alloc_objects", "count" },
		{ "alloc_space", "bytes" },
		{ "inuse_objects", "count" },
		{ "inuse_space", "bytes" },
	};
	const struct mp_profile *p = o->p;
	struct enc *e = &o->e;

	memprof__otlp__value_type__init(&o->period_type);
	o->period_type.type_strindex = str_ix(e, "space");
	o->period_type.unit_strindex = str_ix(e, "bytes");
	for (int t = 0; t < N_VALUES; t++) {
		Memprof__Otlp__Profile *pr = &o->prof[t];
		size_t ns = 0;

		memprof__otlp__profile__init(pr);
		memprof__otlp__value_type__init(&o->vt[t]);
		o->vt[t].type_strindex = str_ix(e, types[t][0]);
		o->vt[t].unit_strindex = str_ix(e, types[t][1]);
		pr->sample_type = &o->vt[t];
		pr->period_type = &o->period_type;
		pr->period = 1;
		pr->time_unix_nano = mp_be_unix_ns(p->begin_ns);
		pr->duration_nano = p->end_ns > p->begin_ns ? p->end_ns - p->begin_ns : 0;
		pr->samples = &o->samplep[(size_t)t * o->n_sites];
		for (uint32_t i = 0; i < o->n_sites; i++) {
			const struct mp_site *st = &p->sites[i];
			uint64_t v = site_value(st, t);
			size_t k = (size_t)t * o->n_sites + ns;
			Memprof__Otlp__Sample *s = &o->samples[k];
			const uint64_t *loc;

			if (!v)
				continue;
			memprof__otlp__sample__init(s);
			loc = bsearch(&st->caller, o->callers, o->n_loc, sizeof(*o->callers),
				      cmp_u64);
			s->stack_index = (int32_t)(1 + (uint32_t)(loc - o->callers));
			s->n_attribute_indices = o->n_sattr[i];
			s->attribute_indices = &o->sattr[(size_t)i * MAX_SAMPLE_ATTRS];
			o->values[k] = clamp(v);
			s->n_values = 1;
			s->values = &o->values[k];
			o->samplep[k] = s;
			ns++;
		}
		pr->n_samples = ns;
		o->profp[t] = pr;
	}
	return e->err;
}

#define MAX_RESOURCE_ATTRS (5 + MP_BE_MAX_LABELS)

/* The resource: the profiled process. @host is the caller's buffer. */
static size_t resource_attrs(const struct mp_be_chunk *c, const char *host,
			     Memprof__Otlp__KeyValue *kv, Memprof__Otlp__AnyValue *kvv)
{
	size_t n = 0;

	kv_str(&kv[n], &kvv[n], "service.name", c->service);
	n++;
	memprof__otlp__key_value__init(&kv[n]);
	memprof__otlp__any_value__init(&kvv[n]);
	kv[n].key = "process.pid";
	kvv[n].value_case = MEMPROF__OTLP__ANY_VALUE__VALUE_INT_VALUE;
	kvv[n].int_value = c->pid;
	kv[n].value = &kvv[n];
	n++;
	if (c->exe && *c->exe) {
		const char *base = strrchr(c->exe, '/');

		kv_str(&kv[n], &kvv[n], "process.executable.name", base ? base + 1 : c->exe);
		n++;
		kv_str(&kv[n], &kvv[n], "process.executable.path", c->exe);
		n++;
	}
	kv_str(&kv[n], &kvv[n], "host.name", host);
	n++;
	for (size_t i = 0; i < c->n_labels && i < MP_BE_MAX_LABELS; i++, n++)
		kv_str(&kv[n], &kvv[n], c->label_key[i], c->label_value[i]);
	return n;
}

/* The envelope around the dictionary and profiles, packed. */
static int pack(struct otlp *o, const struct mp_be_chunk *c, uint8_t **ret, size_t *ret_len)
{
	Memprof__Otlp__ExportProfilesServiceRequest req =
		MEMPROF__OTLP__EXPORT_PROFILES_SERVICE_REQUEST__INIT;
	Memprof__Otlp__ProfilesDictionary dict = MEMPROF__OTLP__PROFILES_DICTIONARY__INIT;
	Memprof__Otlp__ResourceProfiles rp = MEMPROF__OTLP__RESOURCE_PROFILES__INIT, *rpp = &rp;
	Memprof__Otlp__Resource res = MEMPROF__OTLP__RESOURCE__INIT;
	Memprof__Otlp__ScopeProfiles sp = MEMPROF__OTLP__SCOPE_PROFILES__INIT, *spp = &sp;
	Memprof__Otlp__InstrumentationScope scope = MEMPROF__OTLP__INSTRUMENTATION_SCOPE__INIT;
	Memprof__Otlp__KeyValue kv[MAX_RESOURCE_ATTRS], *kvp[MAX_RESOURCE_ATTRS];
	Memprof__Otlp__AnyValue kvv[MAX_RESOURCE_ATTRS];
	char host[256] = "";
	size_t nkv, len;
	uint8_t *buf;

	gethostname(host, sizeof(host) - 1);
	nkv = resource_attrs(c, host, kv, kvv);
	for (size_t i = 0; i < nkv; i++)
		kvp[i] = &kv[i];
	res.n_attributes = nkv;
	res.attributes = kvp;
	scope.name = "memprofd";
	scope.version = MP_BE_VERSION;
	sp.scope = &scope;
	sp.n_profiles = N_VALUES;
	sp.profiles = o->profp;
	rp.resource = &res;
	rp.n_scope_profiles = 1;
	rp.scope_profiles = &spp;
	req.n_resource_profiles = 1;
	req.resource_profiles = &rpp;
	dict.n_mapping_table = o->n_obj + 1;
	dict.mapping_table = o->mapp;
	dict.n_location_table = o->n_loc + 1;
	dict.location_table = o->locp;
	dict.n_function_table = o->n_fn;
	dict.function_table = o->fnp;
	dict.n_string_table = o->e.n_strs;
	dict.string_table = o->e.strs;
	dict.n_attribute_table = o->e.n_attrs;
	dict.attribute_table = o->e.attrp;
	dict.n_stack_table = o->n_loc + 1;
	dict.stack_table = o->stackp;
	req.dictionary = &dict;
	len = memprof__otlp__export_profiles_service_request__get_packed_size(&req);
	buf = malloc(len ? len : 1);
	if (!buf)
		return -ENOMEM;
	memprof__otlp__export_profiles_service_request__pack(&req, buf);
	*ret = buf;
	*ret_len = len;
	return 0;
}

int mp_be_encode_otlp(const struct mp_be_chunk *c, const struct mp_profile *p, uint8_t **ret,
		      size_t *ret_len)
{
	struct otlp *o;
	struct mp_arena arena = { 0 };
	int r;

	/* The encoder's state lives in its own arena too. */
	o = mp_arena_alloc(&arena, 1, sizeof(*o));
	if (!o)
		return -ENOMEM;
	o->e.arena = arena;
	o->p = p;
	o->n_sites = p->n_sites;
	o->n_obj = p->n_objects;
	o->n_fn = 1;
	r = alloc_tables(o);
	if (r == 0)
		r = add_mappings(o);
	if (r == 0)
		r = add_locations(o);
	if (r == 0)
		r = add_site_attrs(o);
	if (r == 0)
		r = add_profiles(o);
	if (r == 0)
		r = pack(o, c, ret, ret_len);
	mp_hashmap_free(&o->e.str_ix);
	mp_hashmap_free(&o->e.attr_ix);
	mp_hashmap_free(&o->e.fn_ix);
	arena = o->e.arena;
	mp_arena_free(&arena);
	return r;
}
