/* SPDX-License-Identifier: MIT */
#include <elfutils/libdwfl.h>
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "inline.h"
#include "modules.h"
#include "symbolize.h"

/* Objects reported to one Dwfl: distinct file mappings holding callers. */
struct object {
	const struct mp_mapping *map; /* the executable mapping with callers */
	Dwfl_Module *mod;
	uint64_t bias; /* process address - ELF virtual address */
	bool failed;
};

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* Reports @objs[@i] to @dwfl, or shares the module of an earlier object of
 * the same file at the same bias (one load of a file can have several
 * executable mappings; dlmopen can load it again elsewhere). */
static void report(Dwfl *dwfl, struct object *objs, uint32_t i, pid_t pid)
{
	struct object *ob = &objs[i];

	for (uint32_t j = 0; j < i; j++) {
		if (objs[j].mod &&
		    objs[j].map->start - objs[j].map->offset == ob->map->start - ob->map->offset &&
		    !strcmp(objs[j].map->path, ob->map->path)) {
			ob->mod = objs[j].mod;
			ob->bias = objs[j].bias;
			return;
		}
	}
	if (mp_dwfl_report_mapping(dwfl, ob->map, pid, &ob->mod, &ob->bias) < 0)
		ob->failed = true;
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
	int n = mp_sym_frames(ob->mod, addr - 1, f, MP_MAX_INLINE);

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

int mp_symbolize_profile(struct mp_profile *p, const struct mp_procmaps *maps, pid_t pid)
{
	struct mp_procmaps *fresh = NULL;
	struct mp_location *locs = NULL;
	struct mp_object *mobjs = NULL;
	struct object *objs = NULL;
	uint64_t *callers = NULL;
	uint32_t *obj_of = NULL;
	uint32_t n = 0, n_objs = 0, n_mobjs = 0;
	size_t total, k;
	Dwfl *dwfl = NULL;
	int r = -ENOMEM;

	/* Every address to symbolize: the sites' callers and every frame of
	 * their stacks. */
	total = p->n_sites;
	for (uint32_t i = 0; i < p->n_stacks; i++)
		total += p->stacks[i].n_frames;
	callers = malloc((total ? total : 1) * sizeof(*callers));
	if (!callers)
		goto out;
	for (uint32_t i = 0; i < p->n_sites; i++)
		callers[i] = p->sites[i].caller;
	k = p->n_sites;
	for (uint32_t i = 0; i < p->n_stacks; i++)
		for (uint32_t j = 0; j < p->stacks[i].n_frames; j++)
			callers[k++] = p->stacks[i].frames[j];
	qsort(callers, total, sizeof(*callers), cmp_u64);
	for (size_t i = 0; i < total; i++)
		if (!n || callers[n - 1] != callers[i])
			callers[n++] = callers[i];

	locs = calloc(n ? n : 1, sizeof(*locs));
	objs = calloc(n ? n : 1, sizeof(*objs));
	obj_of = malloc((n ? n : 1) * sizeof(*obj_of));
	if (!locs || !objs || !obj_of)
		goto out;
	/* Which mapping holds each caller; callers are sorted, so the
	 * callers of one mapping are adjacent. */
	for (uint32_t i = 0; i < n; i++) {
		const struct mp_mapping *m = maps ? mp_procmaps_find(maps, callers[i]) : NULL;

		if (!m && !fresh && mp_procmaps_read(pid, &fresh) == -ENOMEM)
			goto out;
		if (!m && fresh)
			m = mp_procmaps_find(fresh, callers[i]);
		locs[i] = (struct mp_location){ .addr = callers[i], .object = MP_NONE };
		obj_of[i] = MP_NONE;
		if (!m || m->path[0] != '/')
			continue;
		if (!n_objs || objs[n_objs - 1].map != m)
			objs[n_objs++] = (struct object){ .map = m };
		obj_of[i] = n_objs - 1;
	}

	dwfl = dwfl_begin(&mp_dwfl_callbacks);
	if (!dwfl)
		goto out;
	dwfl_report_begin(dwfl);
	for (uint32_t i = 0; i < n_objs; i++)
		report(dwfl, objs, i, pid);
	dwfl_report_end(dwfl, NULL, NULL);
	for (uint32_t i = 0; i < n; i++) {
		struct object *ob = obj_of[i] != MP_NONE ? &objs[obj_of[i]] : NULL;

		if (!ob || ob->failed || !ob->mod)
			continue;
		if (symbolize_one(ob, callers[i], &locs[i]) < 0)
			goto out;
	}

	/* The model's objects: the mappings that hold callers. */
	mobjs = calloc(n_objs ? n_objs : 1, sizeof(*mobjs));
	if (!mobjs)
		goto out;
	for (uint32_t i = 0; i < n_objs; i++) {
		struct object *ob = &objs[i];
		struct mp_object *mo = &mobjs[n_mobjs++];
		const unsigned char *bits;
		GElf_Addr vaddr, bias;
		int nb;

		*mo = (struct mp_object){ .start = ob->map->start,
					  .limit = ob->map->end,
					  .file_offset = ob->map->offset };
		mo->path = strdup(ob->map->path);
		if (!mo->path)
			goto out;
		if (ob->mod && dwfl_module_getelf(ob->mod, &bias)) {
			nb = dwfl_module_build_id(ob->mod, &bits, &vaddr);
			if (nb > 0 && nb <= 64 && !(mo->build_id = hex(bits, nb)))
				goto out;
		}
	}
	/* Per-object flags count the locations of that mapping only. */
	for (uint32_t i = 0; i < n_objs; i++) {
		uint32_t nl = 0, nf = 0, nln = 0;

		for (uint32_t j = 0; j < n; j++) {
			if (obj_of[j] != i)
				continue;
			locs[j].object = i;
			if (objs[i].mod && !objs[i].failed)
				locs[j].rel_addr = callers[j] - objs[i].bias;
			nl++;
			nf += locs[j].function != NULL;
			nln += locs[j].file != NULL;
		}
		mobjs[i].flags = (nl && nf == nl ? MP_OBJ_F_FUNCTIONS : 0) |
				 (nl && nln == nl ? MP_OBJ_F_LINES : 0);
	}

	locations_free(p->locations, p->n_locations);
	objects_free(p->objects, p->n_objects);
	p->locations = locs;
	p->n_locations = n;
	p->objects = mobjs;
	p->n_objects = n_mobjs;
	locs = NULL;
	mobjs = NULL;
	n_mobjs = 0;
	r = 0;
out:
	if (dwfl)
		dwfl_end(dwfl);
	locations_free(locs, n);
	objects_free(mobjs, n_mobjs);
	free(objs);
	free(obj_of);
	free(callers);
	mp_procmaps_free(fresh);
	return r;
}
