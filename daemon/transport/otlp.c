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

#include "encode.h"
#include "otlp_profiles.pb-c.h"

enum { V_ALLOC_OBJECTS, V_ALLOC_SPACE, V_INUSE_OBJECTS, V_INUSE_SPACE, N_VALUES };
#define MAX_SAMPLE_ATTRS 4

/* Open addressing from a 64-bit key to an index; key 0 is free, so keys
 * are stored + 1. */
struct imap {
	uint64_t *keys;
	uint32_t *vals;
	uint32_t cap, n;
};

static uint64_t mix(uint64_t v)
{
	v ^= v >> 33;
	v *= 0xff51afd7ed558ccdull;
	v ^= v >> 33;
	return v;
}

static int imap_grow(struct imap *m)
{
	uint32_t ncap = m->cap ? m->cap * 2 : 64;
	uint64_t *k = calloc(ncap, sizeof(*k));
	uint32_t *v = calloc(ncap, sizeof(*v));

	if (!k || !v) {
		free(k);
		free(v);
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < m->cap; i++) {
		uint32_t j;

		if (!m->keys[i])
			continue;
		for (j = (uint32_t)mix(m->keys[i]) & (ncap - 1); k[j]; j = (j + 1) & (ncap - 1))
			;
		k[j] = m->keys[i];
		v[j] = m->vals[i];
	}
	free(m->keys);
	free(m->vals);
	m->keys = k;
	m->vals = v;
	m->cap = ncap;
	return 0;
}

/* The slot of @key (+1 stored): *@found says whether it was there. */
static int imap_slot(struct imap *m, uint64_t key, bool *found, uint32_t *ret)
{
	uint32_t j;

	if ((m->n + 1) * 2 > m->cap && imap_grow(m) < 0)
		return -ENOMEM;
	key++;
	for (j = (uint32_t)mix(key) & (m->cap - 1); m->keys[j]; j = (j + 1) & (m->cap - 1)) {
		if (m->keys[j] == key) {
			*found = true;
			*ret = j;
			return 0;
		}
	}
	*found = false;
	*ret = j;
	return 0;
}

static void imap_free(struct imap *m)
{
	free(m->keys);
	free(m->vals);
}

struct enc {
	/* Strings: borrowed, interned by content through a hash. */
	char **strs;
	uint32_t n_strs, cap_strs;
	struct imap str_ix; /* hash → first index; collisions chained below */
	uint32_t *str_next;
	struct imap attr_ix, fn_ix;
	Memprof__Otlp__KeyValueAndUnit *attrs, **attrp;
	Memprof__Otlp__AnyValue *avals;
	uint32_t n_attrs, cap_attrs;
};

static uint64_t hash_str(const char *s)
{
	uint64_t h = 1469598103934665603ull;

	for (; *s; s++)
		h = (h ^ (uint8_t)*s) * 1099511628211ull;
	return h & ((1ull << 62) - 1);
}

static int64_t str_ix(struct enc *e, const char *s)
{
	uint64_t h;
	uint32_t slot;
	bool found;

	if (!s)
		s = "";
	h = hash_str(s);
	if (imap_slot(&e->str_ix, h, &found, &slot) < 0)
		return -ENOMEM;
	if (found) {
		for (uint32_t i = e->str_ix.vals[slot]; i != UINT32_MAX; i = e->str_next[i])
			if (!strcmp(e->strs[i], s))
				return i;
	}
	if (e->n_strs == e->cap_strs) {
		uint32_t ncap = e->cap_strs ? e->cap_strs * 2 : 64;
		char **ns = reallocarray(e->strs, ncap, sizeof(*ns));
		uint32_t *nn;

		if (!ns)
			return -ENOMEM;
		e->strs = ns;
		nn = reallocarray(e->str_next, ncap, sizeof(*nn));
		if (!nn)
			return -ENOMEM;
		e->str_next = nn;
		e->cap_strs = ncap;
	}
	e->strs[e->n_strs] = (char *)s;
	e->str_next[e->n_strs] = found ? e->str_ix.vals[slot] : UINT32_MAX;
	if (!found) {
		e->str_ix.keys[slot] = h + 1;
		e->str_ix.n++;
	}
	e->str_ix.vals[slot] = e->n_strs;
	return e->n_strs++;
}

#define S(str)                               \
	({                                   \
		int64_t s_ = str_ix(e, str); \
		if (s_ < 0) {                \
			r = -ENOMEM;         \
			goto out;            \
		}                            \
		(int32_t) s_;                \
	})

/* Index of the attribute (@key, string @sv) or (@key, int @iv) in the
 * attribute table, added if new. */
static int64_t attr_ix(struct enc *e, int32_t key, const char *sv, bool is_int, int64_t iv)
{
	uint64_t k;
	int64_t vs = 0;
	uint32_t slot;
	bool found;

	if (!is_int) {
		vs = str_ix(e, sv);
		if (vs < 0)
			return -ENOMEM;
		k = (uint64_t)key << 32 | (uint64_t)vs;
	} else {
		k = 1ull << 62 | (uint64_t)key << 32 | (uint32_t)iv;
	}
	if (imap_slot(&e->attr_ix, k, &found, &slot) < 0)
		return -ENOMEM;
	if (found)
		return e->attr_ix.vals[slot];
	if (e->n_attrs == e->cap_attrs)
		return -ENOBUFS;
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
	e->attr_ix.keys[slot] = k + 1;
	e->attr_ix.vals[slot] = e->n_attrs;
	e->attr_ix.n++;
	return e->n_attrs++;
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

int mp_be_encode_otlp(const struct mp_backend_url *u, const struct mp_chunk_meta *m,
		      const struct mp_profile *p, uint8_t **ret, size_t *ret_len)
{
	static const char *const types[N_VALUES][2] = {
		{ "alloc_objects", "count" },
		{ "alloc_space", "bytes" },
		{ "inuse_objects", "count" },
		{ "inuse_space", "bytes" },
	};
	Memprof__Otlp__ExportProfilesServiceRequest req =
		MEMPROF__OTLP__EXPORT_PROFILES_SERVICE_REQUEST__INIT;
	Memprof__Otlp__ProfilesDictionary dict = MEMPROF__OTLP__PROFILES_DICTIONARY__INIT;
	Memprof__Otlp__ResourceProfiles rp = MEMPROF__OTLP__RESOURCE_PROFILES__INIT, *rpp = &rp;
	Memprof__Otlp__Resource res = MEMPROF__OTLP__RESOURCE__INIT;
	Memprof__Otlp__ScopeProfiles sp = MEMPROF__OTLP__SCOPE_PROFILES__INIT, *spp = &sp;
	Memprof__Otlp__InstrumentationScope scope = MEMPROF__OTLP__INSTRUMENTATION_SCOPE__INIT;
	Memprof__Otlp__Profile prof[N_VALUES], *profp[N_VALUES];
	Memprof__Otlp__ValueType vt[N_VALUES], period_type = MEMPROF__OTLP__VALUE_TYPE__INIT;
	Memprof__Otlp__KeyValue kv[5 + MP_BE_MAX_LABELS], *kvp[5 + MP_BE_MAX_LABELS];
	Memprof__Otlp__AnyValue kvv[5 + MP_BE_MAX_LABELS];
	struct enc ee = { 0 }, *e = &ee;
	uint32_t n_sites = p->n_sites, n_loc = 0, n_fn = 1, n_obj = p->n_objects;
	uint64_t *callers = NULL;
	Memprof__Otlp__Mapping *maps = NULL, **mapp = NULL;
	Memprof__Otlp__Location *locs = NULL, **locp = NULL;
	Memprof__Otlp__Line *lines = NULL, **linep = NULL;
	Memprof__Otlp__Function *fns = NULL, **fnp = NULL;
	Memprof__Otlp__Stack *stacks = NULL, **stackp = NULL;
	int32_t *stack_locs = NULL, *map_attr = NULL, *sattr = NULL;
	size_t *n_sattr = NULL;
	Memprof__Otlp__Sample *samples = NULL, **samplep = NULL;
	int64_t *values = NULL;
	char host[256] = "";
	int64_t pid_attr;
	size_t nkv = 0, len;
	uint8_t *buf = NULL;
	int r = 0;

	/* Sizes known up front: at most 4 attributes per site, one per
	 * mapping, plus the zero entry. */
	e->cap_attrs = 1 + n_sites * MAX_SAMPLE_ATTRS + n_obj;
	e->attrs = calloc(e->cap_attrs, sizeof(*e->attrs));
	e->attrp = calloc(e->cap_attrs, sizeof(*e->attrp));
	e->avals = calloc(e->cap_attrs, sizeof(*e->avals));
	callers = calloc(n_sites + 1, sizeof(*callers));
	maps = calloc(n_obj + 1, sizeof(*maps));
	mapp = calloc(n_obj + 1, sizeof(*mapp));
	map_attr = calloc(n_obj + 1, sizeof(*map_attr));
	samples = calloc((size_t)N_VALUES * n_sites + 1, sizeof(*samples));
	samplep = calloc((size_t)N_VALUES * n_sites + 1, sizeof(*samplep));
	values = calloc((size_t)N_VALUES * n_sites + 1, sizeof(*values));
	sattr = calloc((size_t)MAX_SAMPLE_ATTRS * n_sites + 1, sizeof(*sattr));
	n_sattr = calloc(n_sites + 1, sizeof(*n_sattr));
	if (!e->attrs || !e->attrp || !e->avals || !callers || !maps || !mapp || !map_attr ||
	    !samples || !samplep || !values || !sattr || !n_sattr) {
		r = -ENOMEM;
		goto out;
	}
	if (S("") != 0 || attr_ix(e, 0, "", true, 0) != 0) {
		r = -ENOMEM;
		goto out;
	}
	/* attribute_table[0] must be KeyValueAndUnit{}: no value at all. */
	e->attrs[0].value = NULL;

	/* Mappings: [0] is the zero value, object i is i + 1. */
	int32_t k_build_id = S("process.executable.build_id.gnu");
	memprof__otlp__mapping__init(&maps[0]);
	mapp[0] = &maps[0];
	for (uint32_t i = 0; i < n_obj; i++) {
		const struct mp_object *ob = &p->objects[i];
		Memprof__Otlp__Mapping *mp = &maps[i + 1];

		memprof__otlp__mapping__init(mp);
		mp->memory_start = ob->start;
		mp->memory_limit = ob->limit;
		mp->file_offset = ob->file_offset;
		mp->filename_strindex = S(ob->path);
		if (ob->build_id && *ob->build_id) {
			int64_t a = attr_ix(e, k_build_id, ob->build_id, false, 0);

			if (a < 0) {
				r = (int)a;
				goto out;
			}
			map_attr[i + 1] = (int32_t)a;
			mp->n_attribute_indices = 1;
			mp->attribute_indices = &map_attr[i + 1];
		}
		mapp[i + 1] = mp;
	}

	/* Locations: one per distinct caller, sorted; [0] is the zero value. */
	for (uint32_t i = 0; i < n_sites; i++)
		callers[i] = p->sites[i].caller;
	qsort(callers, n_sites, sizeof(*callers), cmp_u64);
	for (uint32_t i = 0; i < n_sites; i++)
		if (!n_loc || callers[n_loc - 1] != callers[i])
			callers[n_loc++] = callers[i];
	locs = calloc(n_loc + 1, sizeof(*locs));
	locp = calloc(n_loc + 1, sizeof(*locp));
	lines = calloc(n_loc + 1, sizeof(*lines));
	linep = calloc(n_loc + 1, sizeof(*linep));
	fns = calloc(n_loc + 1, sizeof(*fns));
	fnp = calloc(n_loc + 1, sizeof(*fnp));
	stacks = calloc(n_loc + 1, sizeof(*stacks));
	stackp = calloc(n_loc + 1, sizeof(*stackp));
	stack_locs = calloc(n_loc + 1, sizeof(*stack_locs));
	if (!locs || !locp || !lines || !linep || !fns || !fnp || !stacks || !stackp ||
	    !stack_locs) {
		r = -ENOMEM;
		goto out;
	}
	memprof__otlp__location__init(&locs[0]);
	locp[0] = &locs[0];
	memprof__otlp__function__init(&fns[0]);
	fnp[0] = &fns[0];
	memprof__otlp__stack__init(&stacks[0]);
	stackp[0] = &stacks[0];
	for (uint32_t i = 0; i < n_loc; i++) {
		const struct mp_location *ml = mp_profile_location(p, callers[i]);
		Memprof__Otlp__Location *l = &locs[i + 1];

		memprof__otlp__location__init(l);
		l->address = callers[i];
		locp[i + 1] = l;
		/* A one-frame stack per location: the allocator's caller. */
		memprof__otlp__stack__init(&stacks[i + 1]);
		stack_locs[i + 1] = (int32_t)(i + 1);
		stacks[i + 1].n_location_indices = 1;
		stacks[i + 1].location_indices = &stack_locs[i + 1];
		stackp[i + 1] = &stacks[i + 1];
		if (!ml)
			continue;
		if (ml->object < n_obj)
			l->mapping_index = (int32_t)ml->object + 1;
		if (ml->function) {
			int32_t name = S(ml->function), file = S(ml->file);
			uint64_t key = (uint64_t)(uint32_t)name << 32 | (uint32_t)file;
			uint32_t slot, fid;
			bool found;

			if (imap_slot(&e->fn_ix, key, &found, &slot) < 0) {
				r = -ENOMEM;
				goto out;
			}
			if (found) {
				fid = e->fn_ix.vals[slot];
			} else {
				fid = n_fn++;
				memprof__otlp__function__init(&fns[fid]);
				fns[fid].name_strindex = name;
				fns[fid].system_name_strindex = name;
				fns[fid].filename_strindex = file;
				fnp[fid] = &fns[fid];
				e->fn_ix.keys[slot] = key + 1;
				e->fn_ix.vals[slot] = fid;
				e->fn_ix.n++;
			}
			memprof__otlp__line__init(&lines[i + 1]);
			lines[i + 1].function_index = (int32_t)fid;
			lines[i + 1].line = ml->line;
			linep[i + 1] = &lines[i + 1];
			l->n_lines = 1;
			l->lines = &linep[i + 1];
		}
	}

	/* Per-site attributes, shared by the four profiles. */
	int32_t k_kernel = S("memprof.kernel"), k_phase = S("memprof.phase"),
		k_owner = S("memprof.owner"), k_thread = S("thread.id");
	for (uint32_t i = 0; i < n_sites; i++) {
		const struct mp_site *st = &p->sites[i];
		int32_t *a = &sattr[(size_t)i * MAX_SAMPLE_ATTRS];
		size_t na = 0;
		int64_t x;

		/* No kernel attribute outside kernels, as in the pprof. */
		if (st->name < p->n_names) {
			x = attr_ix(e, k_kernel, p->names[st->name], false, 0);
			if (x < 0)
				goto attr_fail;
			a[na++] = (int32_t)x;
		}
		if (st->phase < p->n_phases) {
			x = attr_ix(e, k_phase, p->phases[st->phase].name, false, 0);
			if (x < 0)
				goto attr_fail;
			a[na++] = (int32_t)x;
		}
		if (st->owner < p->n_owners) {
			x = attr_ix(e, k_owner, p->owners[st->owner].name, false, 0);
			if (x < 0)
				goto attr_fail;
			a[na++] = (int32_t)x;
		}
		x = attr_ix(e, k_thread, NULL, true, st->tid);
		if (x < 0)
			goto attr_fail;
		a[na++] = (int32_t)x;
		n_sattr[i] = na;
		continue;
attr_fail:
		r = (int)x;
		goto out;
	}

	/* The four profiles; zero-valued samples are left out. */
	memprof__otlp__value_type__init(&period_type);
	period_type.type_strindex = S("space");
	period_type.unit_strindex = S("bytes");
	for (int t = 0; t < N_VALUES; t++) {
		Memprof__Otlp__Profile *pr = &prof[t];
		size_t ns = 0;

		memprof__otlp__profile__init(pr);
		memprof__otlp__value_type__init(&vt[t]);
		vt[t].type_strindex = S(types[t][0]);
		vt[t].unit_strindex = S(types[t][1]);
		pr->sample_type = &vt[t];
		pr->period_type = &period_type;
		pr->period = 1;
		pr->time_unix_nano = mp_be_unix_ns(p->begin_ns);
		pr->duration_nano = p->end_ns > p->begin_ns ? p->end_ns - p->begin_ns : 0;
		pr->samples = &samplep[(size_t)t * n_sites];
		for (uint32_t i = 0; i < n_sites; i++) {
			const struct mp_site *st = &p->sites[i];
			uint64_t v = t == V_ALLOC_OBJECTS ? st->alloc_objects :
				     t == V_ALLOC_SPACE	  ? st->alloc_space :
				     t == V_INUSE_OBJECTS ? st->inuse_objects :
							    st->inuse_space;
			size_t k = (size_t)t * n_sites + ns;
			Memprof__Otlp__Sample *s = &samples[k];

			if (!v)
				continue;
			memprof__otlp__sample__init(s);
			s->stack_index =
				(int32_t)(1 + (uint32_t)((uint64_t *)bsearch(
								 &st->caller, callers, n_loc,
								 sizeof(*callers), cmp_u64) -
							 callers));
			s->n_attribute_indices = n_sattr[i];
			s->attribute_indices = &sattr[(size_t)i * MAX_SAMPLE_ATTRS];
			values[k] = clamp(v);
			s->n_values = 1;
			s->values = &values[k];
			samplep[k] = s;
			ns++;
		}
		pr->n_samples = ns;
		profp[t] = pr;
	}

	/* The resource: the profiled process. */
	gethostname(host, sizeof(host) - 1);
	pid_attr = m->pid;
	kv_str(&kv[nkv], &kvv[nkv], "service.name", mp_be_service_name(u, m));
	nkv++;
	memprof__otlp__key_value__init(&kv[nkv]);
	memprof__otlp__any_value__init(&kvv[nkv]);
	kv[nkv].key = "process.pid";
	kvv[nkv].value_case = MEMPROF__OTLP__ANY_VALUE__VALUE_INT_VALUE;
	kvv[nkv].int_value = pid_attr;
	kv[nkv].value = &kvv[nkv];
	nkv++;
	if (m->exe && *m->exe) {
		const char *base = strrchr(m->exe, '/');

		kv_str(&kv[nkv], &kvv[nkv], "process.executable.name", base ? base + 1 : m->exe);
		nkv++;
		kv_str(&kv[nkv], &kvv[nkv], "process.executable.path", m->exe);
		nkv++;
	}
	kv_str(&kv[nkv], &kvv[nkv], "host.name", host);
	nkv++;
	for (size_t i = 0; i < u->n_labels; i++, nkv++)
		kv_str(&kv[nkv], &kvv[nkv], u->label_key[i], u->label_value[i]);
	for (size_t i = 0; i < nkv; i++)
		kvp[i] = &kv[i];
	res.n_attributes = nkv;
	res.attributes = kvp;
	scope.name = "memprofd";
	scope.version = MP_BE_VERSION;
	sp.scope = &scope;
	sp.n_profiles = N_VALUES;
	sp.profiles = profp;
	rp.resource = &res;
	rp.n_scope_profiles = 1;
	rp.scope_profiles = &spp;
	req.n_resource_profiles = 1;
	req.resource_profiles = &rpp;

	dict.n_mapping_table = n_obj + 1;
	dict.mapping_table = mapp;
	dict.n_location_table = n_loc + 1;
	dict.location_table = locp;
	dict.n_function_table = n_fn;
	dict.function_table = fnp;
	dict.n_string_table = e->n_strs;
	dict.string_table = e->strs;
	dict.n_attribute_table = e->n_attrs;
	dict.attribute_table = e->attrp;
	dict.n_stack_table = n_loc + 1;
	dict.stack_table = stackp;
	req.dictionary = &dict;

	len = memprof__otlp__export_profiles_service_request__get_packed_size(&req);
	buf = malloc(len ? len : 1);
	if (!buf) {
		r = -ENOMEM;
		goto out;
	}
	memprof__otlp__export_profiles_service_request__pack(&req, buf);
	*ret = buf;
	*ret_len = len;
out:
	free(e->strs);
	free(e->str_next);
	imap_free(&e->str_ix);
	imap_free(&e->attr_ix);
	imap_free(&e->fn_ix);
	free(e->attrs);
	free(e->attrp);
	free(e->avals);
	free(callers);
	free(maps);
	free(mapp);
	free(map_attr);
	free(locs);
	free(locp);
	free(lines);
	free(linep);
	free(fns);
	free(fnp);
	free(stacks);
	free(stackp);
	free(stack_locs);
	free(samples);
	free(samplep);
	free(values);
	free(sattr);
	free(n_sattr);
	return r;
}
