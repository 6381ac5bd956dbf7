/* SPDX-License-Identifier: MIT */
#include <elfutils/libdwfl.h>
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "inline.h"
#include "modules.h"
#include "symtab.h"
#include "symbolize.h"
#include "ring_abi.h"

/* Objects reported to one Dwfl: distinct file mappings holding callers. */
struct object {
	const struct mp_mapping *map; /* the executable mapping with callers */
	Dwfl_Module *mod; /* NULL when the file could not be used */
	uint64_t bias; /* process address - ELF virtual address, in this mapping */
	uint64_t mod_bias; /* the module's: its address of A is A - bias + mod_bias */
	uint32_t same; /* an earlier object of the same file, or MP_NONE */
	uint32_t lo, hi; /* its callers: [lo, hi) of the sorted callers */
	int err; /* why the file could not be used */
};

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static bool same_file(const struct mp_mapping *a, const struct mp_mapping *b)
{
	return a->inode == b->inode && a->dev_major == b->dev_major &&
	       a->dev_minor == b->dev_minor && !strcmp(a->path, b->path);
}

/* Each file is reported once: every mapping of a file (one load has
 * several; dlmopen loads it again elsewhere; V8 maps node's builtins a
 * second time from the executable) is looked up in the one module, through
 * its own bias. Object @i's earlier object of the same file, if any. */
static void find_same(struct object *objs, uint32_t i)
{
	struct object *ob = &objs[i];

	ob->same = MP_NONE;
	for (uint32_t j = 0; j < i && ob->same == MP_NONE; j++)
		if (objs[j].same == MP_NONE && same_file(objs[j].map, ob->map))
			ob->same = j;
}

static void report(Dwfl *dwfl, struct object *objs, uint32_t i, pid_t pid)
{
	struct object *ob = &objs[i];

	ob->err = mp_dwfl_report_file(dwfl, ob->map, pid, i, &ob->mod, &ob->mod_bias, &ob->bias);
	if (ob->err < 0)
		ob->mod = NULL;
}

/* After dwfl_report_end: the objects sharing an earlier one's module. */
static void share(struct object *objs, uint32_t i)
{
	struct object *ob = &objs[i], *first;
	Dwarf_Addr b;

	if (ob->same == MP_NONE)
		return;
	first = &objs[ob->same];
	ob->err = first->err;
	if (!first->mod)
		return;
	ob->err = mp_mapping_bias(dwfl_module_getelf(first->mod, &b), ob->map, &ob->bias);
	if (ob->err == 0) {
		ob->mod = first->mod;
		ob->mod_bias = first->mod_bias;
	}
}

static char *hex(const unsigned char *bits, int n)
{
	char *s = malloc((size_t)n * 2 + 1);

	if (!s)
		return NULL;
	for (int i = 0; i < n; i++)
		snprintf(s + 2 * i, 3, "%02x", bits[i]);
	return s;
}

static int dup_opt(const char *s, char **ret)
{
	*ret = NULL;
	if (!s || !*s)
		return 0;
	*ret = strdup(s);
	return *ret ? 0 : -ENOMEM;
}

static int dup_path(const char *file, const char *dir, char **ret)
{
	*ret = NULL;
	if (!file || !*file)
		return 0;
	/* Relative names are relative to the compilation directory. */
	if (file[0] != '/' && dir && *dir)
		return asprintf(ret, "%s/%s", dir, file) < 0 ? (*ret = NULL, -ENOMEM) : 0;
	return dup_opt(file, ret);
}

/* Symbol of the call that returns to @addr: looked up at @addr - 1, since
 * a return address can be the first byte of the next line or function.
 * Inlined functions are expanded (innermost first). */
static int symbolize_one(const struct object *ob, uint64_t addr, struct mp_location *loc)
{
	struct mp_sym_frame f[MP_MAX_INLINE];
	int n = mp_sym_frames(ob->mod, addr - ob->bias + ob->mod_bias - 1, f, MP_MAX_INLINE);

	if (n <= 0)
		return 0;
	/* An ELF symbol's version (malloc@@GLIBC_2.2.5) is not its name. */
	if (f[n - 1].function && strchr(f[n - 1].function, '@') && f[n - 1].function[0] != '@') {
		loc->function = strndup(f[n - 1].function, strcspn(f[n - 1].function, "@"));
		if (!loc->function)
			return -ENOMEM;
	} else if (dup_opt(f[n - 1].function, &loc->function) < 0) {
		return -ENOMEM;
	}
	if (dup_path(f[n - 1].file, f[n - 1].comp_dir, &loc->file) < 0)
		return -ENOMEM;
	loc->line = loc->file ? (uint32_t)f[n - 1].line : 0;
	if (n == 1)
		return 0;
	loc->inlined = calloc((size_t)n - 1, sizeof(*loc->inlined));
	if (!loc->inlined)
		return -ENOMEM;
	loc->n_inlined = (uint32_t)n - 1;
	for (int i = 0; i < n - 1; i++) {
		struct mp_inline_frame *in = &loc->inlined[i];

		if (dup_opt(f[i].function, &in->function) < 0 ||
		    dup_path(f[i].file, f[i].comp_dir, &in->file) < 0)
			return -ENOMEM;
		in->line = in->file ? (uint32_t)f[i].line : 0;
	}
	return 0;
}

static void locations_free(struct mp_location *l, uint32_t n)
{
	if (!l)
		return;
	for (uint32_t i = 0; i < n; i++) {
		free(l[i].function);
		free(l[i].file);
		for (uint32_t j = 0; j < l[i].n_inlined; j++) {
			free(l[i].inlined[j].function);
			free(l[i].inlined[j].file);
		}
		free(l[i].inlined);
	}
	free(l);
}

static void objects_free(struct mp_object *o, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		free(o[i].path);
		free(o[i].build_id);
	}
	free(o);
}

/* The state of one symbolization, phase after phase. */
struct symbolization {
	uint64_t *callers; /* distinct, sorted */
	uint32_t n;
	struct mp_location *locs; /* one per caller */
	uint32_t *obj_of; /* object of each caller, or MP_NONE */
	struct object *objs;
	uint32_t n_objs;
	struct mp_object *mobjs; /* the model's objects */
	uint32_t n_mobjs;
	struct mp_procmaps *fresh; /* maps reread for callers the snapshot lacks */
	Dwfl **dwfls; /* one per file: [i] for object i that has no same */
	/* sym_dwfl(): the files in the order they are taken, the next one */
	uint32_t *order;
	uint32_t n_order, next;
	pid_t pid;
	mp_symbolize_pyname_fn pyname;
	void *pyctx;
	struct mp_symbolize_warm *warm; /* NULL: none */
};

/* Python frame @addr's location: its code's function and file, its line. */
static int sym_python(const struct symbolization *y, uint64_t addr, struct mp_location *loc)
{
	const char *name = y->pyname ? y->pyname(y->pyctx, MP_PYFRAME_NAME(addr)) : NULL;
	const char *at = name ? strchr(name, '@') : NULL;

	*loc = (struct mp_location){
		.addr = addr, .object = MP_NONE, .line = MP_PYFRAME_LINE(addr), .python = true
	};
	if (!at) {
		loc->function = strdup("(Python code not named)");
		return loc->function ? 0 : -ENOMEM;
	}
	loc->function = strndup(name, (size_t)(at - name));
	loc->file = at[1] ? strdup(at + 1) : NULL;
	return loc->function && (loc->file || !at[1]) ? 0 : -ENOMEM;
}

/* A set of addresses while they are collected (open addressing, at most
 * half full; 0 is kept apart, as the empty slot's mark). */
struct addr_set {
	uint64_t *slot;
	size_t cap, n;
	bool zero;
};

static size_t addr_home(uint64_t a, size_t cap)
{
	return (size_t)((a * 0x9e3779b97f4a7c15ull) >> 32) & (cap - 1);
}

static int addr_add(struct addr_set *set, uint64_t a)
{
	size_t j;

	if (!a) {
		set->zero = true;
		return 0;
	}
	if (2 * (set->n + 1) > set->cap) {
		size_t cap = set->cap ? set->cap * 2 : 4096;
		uint64_t *t = calloc(cap, sizeof(*t));

		if (!t)
			return -ENOMEM;
		for (size_t i = 0; i < set->cap; i++) {
			if (!set->slot[i])
				continue;
			for (j = addr_home(set->slot[i], cap); t[j]; j = (j + 1) & (cap - 1))
				;
			t[j] = set->slot[i];
		}
		free(set->slot);
		set->slot = t;
		set->cap = cap;
	}
	for (j = addr_home(a, set->cap); set->slot[j]; j = (j + 1) & (set->cap - 1))
		if (set->slot[j] == a)
			return 0;
	set->slot[j] = a;
	set->n++;
	return 0;
}

/* The distinct callers of the profile's sites and the frames of their
 * stacks, sorted: the stacks of a big program hold millions of frames
 * and some tens of thousands of addresses, so they are deduplicated
 * before they are sorted. */
static int sym_callers(struct symbolization *y, const struct mp_profile *p)
{
	struct addr_set set = { 0 };
	int r = 0;

	for (uint32_t i = 0; i < p->n_sites && r == 0; i++)
		r = addr_add(&set, p->sites[i].caller);
	if (p->stack_tree)
		for (uint32_t i = 0; i < p->stack_tree->n_nodes && r == 0; i++)
			r = addr_add(&set, p->stack_tree->frame[i]);
	else
		for (uint32_t i = 0; i < p->n_stacks && r == 0; i++)
			for (uint32_t j = 0; j < p->stacks[i].n_frames && r == 0; j++)
				r = addr_add(&set, p->stacks[i].frames[j]);
	if (r == 0)
		y->callers = malloc((set.n + 1) * sizeof(*y->callers));
	if (r < 0 || !y->callers) {
		free(set.slot);
		return -ENOMEM;
	}
	if (set.zero)
		y->callers[y->n++] = 0;
	for (size_t i = 0; i < set.cap; i++)
		if (set.slot[i])
			y->callers[y->n++] = set.slot[i];
	free(set.slot);
	qsort(y->callers, y->n, sizeof(*y->callers), cmp_u64);
	return 0;
}

/* Which mapping holds each caller; callers are sorted, so the callers of
 * one mapping are adjacent. */
static int sym_map_callers(struct symbolization *y, const struct mp_procmaps *maps,
			   const struct mp_procmaps *later, pid_t pid)
{
	uint32_t n = y->n;

	y->locs = calloc(n ? n : 1, sizeof(*y->locs));
	y->objs = calloc(n ? n : 1, sizeof(*y->objs));
	y->obj_of = malloc((n ? n : 1) * sizeof(*y->obj_of));
	if (!y->locs || !y->objs || !y->obj_of)
		return -ENOMEM;
	for (uint32_t i = 0; i < n; i++) {
		const struct mp_mapping *m;

		y->obj_of[i] = MP_NONE;
		if (MP_PYFRAME_IS(y->callers[i])) {
			if (sym_python(y, y->callers[i], &y->locs[i]) < 0)
				return -ENOMEM;
			continue;
		}
		m = maps ? mp_procmaps_find(maps, y->callers[i]) : NULL;
		if (!m && later)
			m = mp_procmaps_find(later, y->callers[i]);

		if (!m && !y->fresh && mp_procmaps_read(pid, &y->fresh) == -ENOMEM)
			return -ENOMEM;
		if (!m && y->fresh)
			m = mp_procmaps_find(y->fresh, y->callers[i]);
		y->locs[i] = (struct mp_location){ .addr = y->callers[i], .object = MP_NONE };
		y->obj_of[i] = MP_NONE;
		if (!m || m->path[0] != '/')
			continue;
		if (!y->n_objs || y->objs[y->n_objs - 1].map != m)
			y->objs[y->n_objs++] = (struct object){ .map = m, .lo = i };
		y->obj_of[i] = y->n_objs - 1;
		y->objs[y->n_objs - 1].hi = i + 1;
	}
	return 0;
}

/* ---- debug files opened ahead (mp_symbolize_warm_start()) ---- */

/* Files opened ahead at most: a PyTorch process maps 324 with code, ~90
 * of them holding frames. A target's maps are its own to make: one with
 * thousands of code mappings would have the daemon hold as many files
 * open (and their debug info loaded); past these, files are opened when
 * looked up, as without. */
#define WARM_MAX 256u

/* A code mapping's file in a Dwfl of its own, as sym_file() reports it,
 * its DWARF and symbol table loaded; taken by sym_file() (dwfl NULL). */
struct warm_ent {
	struct mp_mapping map;
	Dwfl *dwfl;
	Dwfl_Module *mod;
	uint64_t mod_bias, bias;
	int err;
};

struct mp_symbolize_warm {
	pthread_t th;
	bool running;
	pid_t pid;
	struct warm_ent *ents;
	uint32_t n;
	char *strings; /* the paths */
	/* The symbolization's Dwfls, ended with the rest by the thread
	 * mp_symbolize_warm_retire() starts (reaping: it runs). */
	Dwfl **spent;
	uint32_t n_spent;
	pthread_t reaper;
	bool reaping;
};

static void *warm_thread(void *arg)
{
	struct mp_symbolize_warm *w = arg;

	for (uint32_t i = 0; i < w->n; i++) {
		struct warm_ent *e = &w->ents[i];
		Dwarf_Addr b;

		if (!(e->dwfl = dwfl_begin(&mp_dwfl_symbolize_callbacks)))
			break;
		dwfl_report_begin(e->dwfl);
		e->err = mp_dwfl_report_file(e->dwfl, &e->map, w->pid, 0, &e->mod, &e->mod_bias,
					     &e->bias);
		if (e->err < 0)
			e->mod = NULL;
		dwfl_report_end(e->dwfl, NULL, NULL);
		/* what the lookups would load: the debug file found and its
		 * sections inflated, the symbol table read and indexed */
		if (e->mod) {
			(void)dwfl_module_getdwarf(e->mod, &b);
			(void)dwfl_module_getsymtab(e->mod);
			mp_symtab_prepare(e->mod);
		}
	}
	mp_dwfl_net_end();
	return NULL;
}

/* The code mappings of @pm that @want wants and @w has not yet (one per
 * file and start), from the highest, with their paths copied after @at
 * bytes of w->strings. */
static int warm_add(struct mp_symbolize_warm *w, const struct mp_procmaps *pm,
		    mp_symbolize_warm_want_fn want, const void *ctx, size_t *at)
{
	for (size_t k = pm ? pm->n : 0; k > 0; k--) {
		const struct mp_mapping *m = &pm->maps[k - 1];
		size_t len = strlen(m->path) + 1;
		uint32_t j = 0;
		char *st;

		if (!mp_mapping_is_code(m) || (want && !want(ctx, m)))
			continue;
		if (w->n >= WARM_MAX)
			break;
		/* (paths are offsets into w->strings until all are in) */
		while (j < w->n &&
		       !(w->ents[j].map.start == m->start && w->ents[j].map.inode == m->inode &&
			 !strcmp(w->strings + (uintptr_t)w->ents[j].map.path, m->path)))
			j++;
		if (j < w->n)
			continue;
		st = realloc(w->strings, *at + len);
		if (!st)
			return -ENOMEM;
		w->strings = st;
		memcpy(st + *at, m->path, len);
		w->ents[w->n] = (struct warm_ent){ .map = *m };
		w->ents[w->n++].map.path = (const char *)(uintptr_t)*at;
		*at += len;
	}
	return 0;
}

int mp_symbolize_warm_start(const struct mp_procmaps *maps, const struct mp_procmaps *later,
			    pid_t pid, mp_symbolize_warm_want_fn want, const void *ctx,
			    struct mp_symbolize_warm **ret)
{
	struct mp_symbolize_warm *w = calloc(1, sizeof(*w));
	size_t at = 0, cap = WARM_MAX;

	*ret = NULL;
	if (!w || !(w->ents = calloc(cap ? cap : 1, sizeof(*w->ents))) ||
	    warm_add(w, maps, want, ctx, &at) < 0 || warm_add(w, later, want, ctx, &at) < 0) {
		mp_symbolize_warm_free(w);
		return -ENOMEM;
	}
	/* the paths where they are now */
	for (uint32_t i = 0; i < w->n; i++)
		w->ents[i].map.path = w->strings + (uintptr_t)w->ents[i].map.path;
	w->pid = pid;
	w->running = w->n && pthread_create(&w->th, NULL, warm_thread, w) == 0;
	if (!w->running) {
		mp_symbolize_warm_free(w);
		return -EAGAIN;
	}
	*ret = w;
	return 0;
}

void mp_symbolize_warm_wait(struct mp_symbolize_warm *w)
{
	if (w && w->running) {
		pthread_join(w->th, NULL);
		w->running = false;
	}
}

/* Every Dwfl @w holds, ended. */
static void *warm_end(void *arg)
{
	struct mp_symbolize_warm *w = arg;

	for (uint32_t i = 0; w->ents && i < w->n; i++) {
		mp_dwfl_end(w->ents[i].dwfl);
		w->ents[i].dwfl = NULL;
	}
	for (uint32_t i = 0; i < w->n_spent; i++)
		mp_dwfl_end(w->spent[i]);
	free(w->spent);
	w->spent = NULL;
	w->n_spent = 0;
	return NULL;
}

void mp_symbolize_warm_retire(struct mp_symbolize_warm *w)
{
	if (!w || w->reaping)
		return;
	mp_symbolize_warm_wait(w);
	w->reaping = pthread_create(&w->reaper, NULL, warm_end, w) == 0;
}

void mp_symbolize_warm_free(struct mp_symbolize_warm *w)
{
	if (!w)
		return;
	mp_symbolize_warm_wait(w);
	if (w->reaping)
		pthread_join(w->reaper, NULL);
	warm_end(w);
	free(w->ents);
	free(w->strings);
	free(w);
}

/* Object @ob's file as opened ahead for its mapping, into @ob; NULL when
 * it was not. */
static Dwfl *warm_take(struct mp_symbolize_warm *w, struct object *ob)
{
	for (uint32_t i = 0; w && i < w->n; i++) {
		struct warm_ent *e = &w->ents[i];
		Dwfl *d = e->dwfl;

		if (!d || e->map.start != ob->map->start || e->map.end != ob->map->end ||
		    e->map.offset != ob->map->offset || !same_file(&e->map, ob->map))
			continue;
		ob->mod = e->mod;
		ob->mod_bias = e->mod_bias;
		ob->bias = e->bias;
		ob->err = e->err;
		e->dwfl = NULL;
		return d;
	}
	return NULL;
}

/* File @f (an object without same) in a Dwfl of its own: function, file
 * and line of the callers of every object of the file. */
static int sym_file(struct symbolization *y, uint32_t f)
{
	Dwfl *dwfl = warm_take(y->warm, &y->objs[f]);

	if (!dwfl) {
		if (!(dwfl = dwfl_begin(&mp_dwfl_symbolize_callbacks)))
			return -ENOMEM;
		dwfl_report_begin(dwfl);
		report(dwfl, y->objs, f, y->pid);
		dwfl_report_end(dwfl, NULL, NULL);
	}
	y->dwfls[f] = dwfl;
	for (uint32_t i = f; i < y->n_objs; i++) {
		struct object *ob = &y->objs[i];

		if (i != f && ob->same != f)
			continue;
		share(y->objs, i);
		if (!ob->mod)
			continue;
		for (uint32_t j = ob->lo; j < ob->hi; j++)
			if (y->obj_of[j] == i && symbolize_one(ob, y->callers[j], &y->locs[j]) < 0)
				return -ENOMEM;
	}
	return 0;
}

/* Files taken one at a time until none is left (or one failed). */
static int sym_files(struct symbolization *y)
{
	uint32_t k;
	int r = 0;

	while (r == 0 && (k = __atomic_fetch_add(&y->next, 1, __ATOMIC_RELAXED)) < y->n_order)
		if ((r = sym_file(y, y->order[k])) < 0)
			__atomic_store_n(&y->next, y->n_order, __ATOMIC_RELAXED);
	mp_dwfl_net_end();
	return r;
}

const char *mp_symbolize_net_hint(void)
{
	return mp_dwfl_net_enabled() ? "" : " (debug files by build-id: --debuginfod)";
}

static void *sym_files_thread(void *arg)
{
	return (void *)(intptr_t)sym_files(arg);
}

static int cmp_callers_desc(const void *a, const void *b, void *ctx)
{
	const uint32_t *w = ctx;
	uint32_t x = w[*(const uint32_t *)a], v = w[*(const uint32_t *)b];

	return x < v ? 1 : x > v ? -1 : 0;
}

/*
 * libdwfl over the objects: function, file and line of each caller. The
 * files are independent (a Dwfl each), so two threads take them, the
 * files with the most callers first: one file can cost far more than its
 * callers say (libc's DWARF from libc6-dbg, inflated first: ~50 ms here
 * for 90 callers, as long as every other file of a PyTorch process
 * together), and both CPUs are free once the target is gone.
 */
static int sym_dwfl(struct symbolization *y, pid_t pid)
{
	uint32_t *weight;
	pthread_t th;
	bool threaded;
	void *tr = NULL;
	int r;

	y->pid = pid;
	mp_symbolize_warm_wait(y->warm);
	y->dwfls = calloc(y->n_objs ? y->n_objs : 1, sizeof(*y->dwfls));
	y->order = malloc((y->n_objs ? y->n_objs : 1) * sizeof(*y->order));
	weight = calloc(y->n_objs ? y->n_objs : 1, sizeof(*weight));
	if (!y->dwfls || !y->order || !weight) {
		free(weight);
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < y->n_objs; i++) {
		find_same(y->objs, i);
		weight[y->objs[i].same == MP_NONE ? i : y->objs[i].same] +=
			y->objs[i].hi - y->objs[i].lo;
		if (y->objs[i].same == MP_NONE)
			y->order[y->n_order++] = i;
	}
	qsort_r(y->order, y->n_order, sizeof(*y->order), cmp_callers_desc, weight);
	free(weight);
	threaded = y->n_order > 1 && pthread_create(&th, NULL, sym_files_thread, y) == 0;
	r = sym_files(y);
	if (threaded) {
		pthread_join(th, &tr);
		if (r == 0)
			r = (int)(intptr_t)tr;
	}
	return r;
}

/* The model's objects: the mappings that hold callers. */
static int sym_objects(struct symbolization *y)
{
	y->mobjs = calloc(y->n_objs ? y->n_objs : 1, sizeof(*y->mobjs));
	if (!y->mobjs)
		return -ENOMEM;
	for (uint32_t i = 0; i < y->n_objs; i++) {
		struct object *ob = &y->objs[i];
		struct mp_object *mo = &y->mobjs[y->n_mobjs++];
		const unsigned char *bits;
		GElf_Addr vaddr, bias;
		int nb;

		*mo = (struct mp_object){ .start = ob->map->start,
					  .limit = ob->map->end,
					  .file_offset = ob->map->offset };
		mo->path = strdup(ob->map->path);
		if (!mo->path)
			return -ENOMEM;
		if (ob->mod && dwfl_module_getelf(ob->mod, &bias)) {
			nb = dwfl_module_build_id(ob->mod, &bits, &vaddr);
			if (nb > 0 && nb <= 64 && !(mo->build_id = hex(bits, nb)))
				return -ENOMEM;
		}
	}
	return 0;
}

/* Locations point at their objects; per-object flags count the
 * locations of that mapping only. One pass over the callers: a big
 * program has ~100 objects and ~100,000 callers. */
static int sym_link(struct symbolization *y)
{
	uint32_t(*cnt)[3] = calloc(y->n_objs ? y->n_objs : 1, sizeof(*cnt));

	if (!cnt)
		return -ENOMEM;
	for (uint32_t j = 0; j < y->n; j++) {
		uint32_t i = y->obj_of[j];

		if (i == MP_NONE)
			continue;
		y->locs[j].object = i;
		/* In a file that cannot be read, the offset in the file
		 * (what the mapping says) */
		if (y->objs[i].mod)
			y->locs[j].rel_addr = y->callers[j] - y->objs[i].bias;
		else
			y->locs[j].rel_addr =
				y->callers[j] - y->objs[i].map->start + y->objs[i].map->offset;
		cnt[i][0]++;
		cnt[i][1] += y->locs[j].function != NULL;
		cnt[i][2] += y->locs[j].file != NULL;
	}
	for (uint32_t i = 0; i < y->n_objs; i++)
		y->mobjs[i].flags = (cnt[i][0] && cnt[i][1] == cnt[i][0] ? MP_OBJ_F_FUNCTIONS : 0) |
				    (cnt[i][0] && cnt[i][2] == cnt[i][0] ? MP_OBJ_F_LINES : 0);
	free(cnt);
	return 0;
}

static void sym_count(const struct symbolization *y, struct mp_symbolize_stats *st)
{
	*st = (struct mp_symbolize_stats){ .frames = y->n, .objects = y->n_objs };
	for (uint32_t i = 0; i < y->n; i++) {
		if (y->locs[i].function)
			continue;
		st->unsymbolized++;
		st->anonymous += y->obj_of[i] == MP_NONE;
	}
	for (uint32_t i = 0; i < y->n_objs; i++)
		st->objects_unreadable += !y->objs[i].mod;
}

int mp_symbolize(struct mp_profile *p, const struct mp_procmaps *maps,
		 const struct mp_procmaps *later, pid_t pid, struct mp_symbolize_stats *ret_stats)
{
	return mp_symbolize_python(p, maps, later, pid, NULL, NULL, ret_stats);
}

int mp_symbolize_python(struct mp_profile *p, const struct mp_procmaps *maps,
			const struct mp_procmaps *later, pid_t pid, mp_symbolize_pyname_fn pyname,
			void *ctx, struct mp_symbolize_stats *ret_stats)
{
	return mp_symbolize_warmed(p, maps, later, pid, pyname, ctx, NULL, ret_stats);
}

int mp_symbolize_warmed(struct mp_profile *p, const struct mp_procmaps *maps,
			const struct mp_procmaps *later, pid_t pid, mp_symbolize_pyname_fn pyname,
			void *ctx, struct mp_symbolize_warm *warm,
			struct mp_symbolize_stats *ret_stats)
{
	struct symbolization y = { .pyname = pyname, .pyctx = ctx };
	int r;

	/* files being closed are no one's */
	if (warm && warm->reaping)
		warm = NULL;
	y.warm = warm;

	r = sym_callers(&y, p);
	if (r == 0)
		r = sym_map_callers(&y, maps, later, pid);
	if (r == 0)
		r = sym_dwfl(&y, pid);
	if (r == 0)
		r = sym_objects(&y);
	if (r == 0)
		r = sym_link(&y);
	if (r == 0) {
		if (ret_stats)
			sym_count(&y, ret_stats);
		locations_free(p->locations, p->n_locations);
		objects_free(p->objects, p->n_objects);
		p->locations = y.locs;
		p->n_locations = y.n;
		p->objects = y.mobjs;
		p->n_objects = y.n_mobjs;
		y.locs = NULL;
		y.mobjs = NULL;
		y.n_mobjs = 0;
	}
	/* ended with the files opened ahead (mp_symbolize_warm_retire()):
	 * libc's inflated DWARF is ~20 ms of munmap */
	if (warm && !warm->reaping && !warm->spent && y.dwfls) {
		warm->spent = y.dwfls;
		warm->n_spent = y.n_objs;
		y.dwfls = NULL;
	}
	for (uint32_t i = 0; y.dwfls && i < y.n_objs; i++)
		mp_dwfl_end(y.dwfls[i]);
	free(y.dwfls);
	free(y.order);
	locations_free(y.locs, y.locs ? y.n : 0);
	objects_free(y.mobjs, y.n_mobjs);
	free(y.objs);
	free(y.obj_of);
	free(y.callers);
	mp_procmaps_free(y.fresh);
	return r;
}

int mp_symbolize_profile(struct mp_profile *p, const struct mp_procmaps *maps, pid_t pid)
{
	return mp_symbolize(p, maps, NULL, pid, NULL);
}
