// SPDX-License-Identifier: MIT
#include "wrappers.h"

#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <gelf.h>
#include <libelf.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Bounds on what a target's files can make us do. */
#define MAX_OBJECTS 4096 /* objects remembered as resolved */
#define MAX_SYMBOLS (4u << 20) /* symbols read per table */

/*
 * The default list (docs/PROFILE.md "Owners"): a NULL @fn makes every
 * function of the matching objects a wrapper; a NULL @dso, any object.
 * libc10's allocator is c10::alloc_cpu behind c10::DefaultCPUAllocator's
 * allocate(), which the library does not export: the library as a whole.
 */
static const struct {
	const char *dso, *fn;
} default_list[] = {
	/* PyTorch */
	{ "libc10.so*", NULL },
	/* operator new and new[], every variant (nothrow, aligned), in
	 * libstdc++, libc++ or an allocator that replaces them */
	{ NULL, "_Znwm*" },
	{ NULL, "_Znam*" },
	/* CPython */
	{ NULL, "PyMem_RawMalloc" },
	{ NULL, "PyMem_RawCalloc" },
	{ NULL, "PyMem_RawRealloc" },
	{ NULL, "PyMem_Malloc" },
	{ NULL, "PyMem_Calloc" },
	{ NULL, "PyMem_Realloc" },
	{ NULL, "PyObject_Malloc" },
	{ NULL, "PyObject_Calloc" },
	{ NULL, "PyObject_Realloc" },
	{ NULL, "_PyObject_Malloc" },
	{ NULL, "_PyObject_Calloc" },
	{ NULL, "_PyObject_Realloc" },
	{ NULL, "_PyMem_RawMalloc" },
	{ NULL, "_PyMem_RawCalloc" },
	{ NULL, "_PyMem_RawRealloc" },
	/* jemalloc (prefixed builds and its own API) */
	{ NULL, "je_*alloc*" },
	{ NULL, "mallocx" },
	{ NULL, "rallocx" },
	/* tcmalloc */
	{ NULL, "tc_*alloc*" },
	{ NULL, "tc_new*" },
	/* mimalloc */
	{ NULL, "mi_malloc*" },
	{ NULL, "mi_zalloc*" },
	{ NULL, "mi_calloc*" },
	{ NULL, "mi_realloc*" },
	{ NULL, "mi_new*" },
	{ NULL, "mi_heap_*alloc*" },
};

struct pattern {
	const char *dso, *fn; /* fn NULL: the whole object */
	size_t prefix; /* literal characters @fn starts with */
};

struct seen {
	char *path;
	uint64_t start;
};

struct mp_wrappers {
	pid_t pid;
	struct pattern *pats;
	size_t n_pats;
	struct mp_wrap_range *ranges; /* sorted, merged */
	size_t n, cap;
	struct seen seen[MAX_OBJECTS];
	size_t n_seen;
	uint32_t functions, objects;
};

static size_t literal_prefix(const char *g)
{
	return strcspn(g, "*?[\\");
}

static int add_pattern(struct mp_wrappers *w, const char *dso, const char *fn)
{
	struct pattern *p = reallocarray(w->pats, w->n_pats + 1, sizeof(*p));

	if (!p)
		return -ENOMEM;
	w->pats = p;
	p[w->n_pats++] = (struct pattern){ dso, fn, fn ? literal_prefix(fn) : 0 };
	return 0;
}

int mp_wrappers_new(pid_t pid, const struct mp_wrappers_opts *o, struct mp_wrappers **ret)
{
	struct mp_wrappers *w = calloc(1, sizeof(*w));
	int r = 0;

	if (!w)
		return -ENOMEM;
	w->pid = pid;
	if (elf_version(EV_CURRENT) == EV_NONE)
		r = -ENOTSUP;
	for (size_t i = 0;
	     r == 0 && !o->no_default && i < sizeof(default_list) / sizeof(*default_list); i++)
		r = add_pattern(w, default_list[i].dso, default_list[i].fn);
	for (size_t i = 0; r == 0 && i < o->n_dso; i++)
		r = add_pattern(w, o->dso_globs[i], NULL);
	for (size_t i = 0; r == 0 && i < o->n_fn; i++)
		r = add_pattern(w, NULL, o->fn_globs[i]);
	if (r < 0) {
		mp_wrappers_free(w);
		return r;
	}
	*ret = w;
	return 0;
}

void mp_wrappers_reset(struct mp_wrappers *w)
{
	for (size_t i = 0; i < w->n_seen; i++)
		free(w->seen[i].path);
	w->n_seen = 0;
	w->n = 0;
	w->functions = w->objects = 0;
}

void mp_wrappers_free(struct mp_wrappers *w)
{
	if (!w)
		return;
	mp_wrappers_reset(w);
	free(w->ranges);
	free(w->pats);
	free(w);
}

static int range_cmp(const void *a, const void *b)
{
	const struct mp_wrap_range *x = a, *y = b;

	return x->lo < y->lo ? -1 : x->lo > y->lo;
}

static int range_add(struct mp_wrappers *w, uint64_t lo, uint64_t hi)
{
	if (hi <= lo)
		return 0;
	if (w->n == w->cap) {
		size_t cap = w->cap ? w->cap * 2 : 64;
		struct mp_wrap_range *r;

		if (w->n >= MP_WRAPPERS_MAX_RANGES)
			return -ENOSPC;
		r = reallocarray(w->ranges, cap, sizeof(*r));
		if (!r)
			return -ENOMEM;
		w->ranges = r;
		w->cap = cap;
	}
	w->ranges[w->n++] = (struct mp_wrap_range){ lo, hi };
	return 0;
}

/* Sorted, overlapping and touching ranges merged. */
static void ranges_normalize(struct mp_wrappers *w)
{
	size_t k = 0;

	if (!w->n)
		return;
	qsort(w->ranges, w->n, sizeof(*w->ranges), range_cmp);
	for (size_t i = 1; i < w->n; i++) {
		if (w->ranges[i].lo <= w->ranges[k].hi) {
			if (w->ranges[i].hi > w->ranges[k].hi)
				w->ranges[k].hi = w->ranges[i].hi;
		} else {
			w->ranges[++k] = w->ranges[i];
		}
	}
	w->n = k + 1;
}

static const char *base_name(const char *p)
{
	const char *s = strrchr(p, '/');

	return s ? s + 1 : p;
}

static bool is_deleted(const char *path)
{
	size_t n = strlen(path), k = strlen(" (deleted)");

	return n > k && !strcmp(path + n - k, " (deleted)");
}

/* The runtime address of file offset @off of object @path, from its
 * executable mappings; 0 when none maps it. */
static uint64_t offset_to_addr(const struct mp_procmaps *maps, const char *path, uint64_t off)
{
	for (size_t i = 0; i < maps->n; i++) {
		const struct mp_mapping *m = &maps->maps[i];

		if ((m->perms & MP_MAP_X) && off >= m->offset &&
		    off - m->offset < m->end - m->start && !strcmp(m->path, path))
			return m->start + (off - m->offset);
	}
	return 0;
}

static bool sym_matches(const struct pattern *p, size_t n, const char *name)
{
	for (size_t i = 0; i < n; i++)
		if (!strncmp(name, p[i].fn, p[i].prefix) && fnmatch(p[i].fn, name, 0) == 0)
			return true;
	return false;
}

/* Wrapper functions of symbol table @type of @elf into @w; their count
 * added to *@found. */
static int scan_table(struct mp_wrappers *w, Elf *elf, GElf_Word type, const struct pattern *p,
		      size_t np, const struct mp_procmaps *maps, const char *path, uint32_t *found)
{
	Elf_Scn *scn = NULL;
	GElf_Shdr sh;
	size_t nph;
	Elf_Data *d;

	while ((scn = elf_nextscn(elf, scn)))
		if (gelf_getshdr(scn, &sh) && sh.sh_type == type)
			break;
	if (!scn || !sh.sh_entsize || !(d = elf_getdata(scn, NULL)) || elf_getphdrnum(elf, &nph))
		return 0;
	for (size_t i = 0; i < d->d_size / sh.sh_entsize && i < MAX_SYMBOLS; i++) {
		GElf_Sym sym;
		const char *name;
		uint64_t addr = 0;
		int r;

		if (!gelf_getsym(d, (int)i, &sym))
			break;
		if (sym.st_shndx == SHN_UNDEF || !sym.st_value || !sym.st_size ||
		    (GELF_ST_TYPE(sym.st_info) != STT_FUNC &&
		     GELF_ST_TYPE(sym.st_info) != STT_GNU_IFUNC))
			continue;
		name = elf_strptr(elf, sh.sh_link, sym.st_name);
		if (!name || !sym_matches(p, np, name))
			continue;
		for (size_t j = 0; j < nph && j < 256; j++) {
			GElf_Phdr ph;

			if (gelf_getphdr(elf, (int)j, &ph) && ph.p_type == PT_LOAD &&
			    (ph.p_flags & PF_X) && sym.st_value >= ph.p_vaddr &&
			    sym.st_value - ph.p_vaddr < ph.p_memsz) {
				addr = offset_to_addr(maps, path,
						      sym.st_value - ph.p_vaddr + ph.p_offset);
				break;
			}
		}
		if (!addr || sym.st_size > (1u << 24))
			continue;
		r = range_add(w, addr, addr + sym.st_size);
		if (r < 0)
			return r;
		(*found)++;
	}
	return 0;
}

/* The wrapper functions of the object mapped at @m. */
static int scan_object(struct mp_wrappers *w, const struct mp_procmaps *maps,
		       const struct mp_mapping *m, const struct pattern *p, size_t np)
{
	char rp[PATH_MAX + 64];
	uint32_t found = 0, dyn = 0;
	size_t n0 = w->n;
	Elf *elf;
	int fd, r, len;

	if (is_deleted(m->path))
		len = snprintf(rp, sizeof(rp), "/proc/%d/map_files/%llx-%llx", (int)w->pid,
			       (unsigned long long)m->start, (unsigned long long)m->end);
	else if (w->pid)
		len = snprintf(rp, sizeof(rp), "/proc/%d/root%s", (int)w->pid, m->path);
	else
		len = snprintf(rp, sizeof(rp), "%s", m->path);
	if (len >= (int)sizeof(rp))
		return 0;
	/* O_NONBLOCK: the target may have put a FIFO where its file was. */
	fd = open(rp, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		return 0;
	{
		struct stat st;

		if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
			close(fd);
			return 0;
		}
	}
	/* Not ELF_C_READ_MMAP: the target can truncate its own files. */
	elf = elf_begin(fd, ELF_C_READ, NULL);
	r = 0;
	if (elf && elf_kind(elf) == ELF_K_ELF) {
		r = scan_table(w, elf, SHT_DYNSYM, p, np, maps, m->path, &dyn);
		if (r == 0)
			r = scan_table(w, elf, SHT_SYMTAB, p, np, maps, m->path, &found);
	}
	if (elf)
		elf_end(elf);
	close(fd);
	/* a function in both tables counts once */
	if (w->n > n0) {
		struct mp_wrap_range *a = w->ranges + n0;
		size_t k = w->n - n0, distinct = 1;

		qsort(a, k, sizeof(*a), range_cmp);
		for (size_t i = 1; i < k; i++)
			distinct += a[i].lo != a[i - 1].lo;
		w->functions += (uint32_t)distinct;
		w->objects++;
	}
	return r;
}

static bool seen(struct mp_wrappers *w, const struct mp_mapping *m)
{
	for (size_t i = 0; i < w->n_seen; i++)
		if (w->seen[i].start == m->start && !strcmp(w->seen[i].path, m->path))
			return true;
	if (w->n_seen < MAX_OBJECTS && (w->seen[w->n_seen].path = strdup(m->path)))
		w->seen[w->n_seen++].start = m->start;
	return false;
}

/* Object @m (its first mapping): a wrapper as a whole, or its wrapper
 * functions. */
static int resolve_object(struct mp_wrappers *w, const struct mp_procmaps *maps,
			  const struct mp_mapping *m)
{
	const char *base = base_name(m->path);
	struct pattern fn[64];
	size_t nfn = 0;

	for (size_t i = 0; i < w->n_pats; i++) {
		const struct pattern *p = &w->pats[i];

		if (p->dso && fnmatch(p->dso, base, 0) != 0)
			continue;
		if (!p->fn) {
			int r = 0;

			for (size_t j = 0; j < maps->n && r == 0; j++)
				if ((maps->maps[j].perms & MP_MAP_X) &&
				    !strcmp(maps->maps[j].path, m->path))
					r = range_add(w, maps->maps[j].start, maps->maps[j].end);
			w->objects++;
			return r;
		}
		if (nfn < sizeof(fn) / sizeof(*fn))
			fn[nfn++] = *p;
	}
	return nfn ? scan_object(w, maps, m, fn, nfn) : 0;
}

int mp_wrappers_update(struct mp_wrappers *w, const struct mp_procmaps *maps)
{
	size_t n0 = w->n;
	int r = 0;

	if (!maps)
		return 0;
	for (size_t i = 0; i < maps->n && r == 0; i++) {
		const struct mp_mapping *m = &maps->maps[i];

		/* an object once, at its first mapping; files only */
		if (m->path[0] != '/' || (i && !strcmp(maps->maps[i - 1].path, m->path)) ||
		    seen(w, m))
			continue;
		r = resolve_object(w, maps, m);
	}
	if (w->n != n0)
		ranges_normalize(w);
	if (r == -ENOMEM)
		return r;
	return w->n != n0;
}

bool mp_wrappers_has(const struct mp_wrappers *w, uint64_t addr)
{
	size_t lo = 0, hi = w ? w->n : 0;

	if (!hi || addr < w->ranges[0].lo || addr >= w->ranges[hi - 1].hi)
		return false;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (addr < w->ranges[mid].lo)
			hi = mid;
		else if (addr >= w->ranges[mid].hi)
			lo = mid + 1;
		else
			return true;
	}
	return false;
}

bool mp_wrappers_any(const struct mp_wrappers *w)
{
	return w && w->n;
}

size_t mp_wrappers_coarse(const struct mp_wrappers *w, struct mp_wrap_range *ret, size_t max)
{
	size_t n = w ? w->n : 0;

	if (!max || !n)
		return 0;
	memcpy(ret, w->ranges, (n < max ? n : max) * sizeof(*ret));
	if (n <= max)
		return n;
	if (max == 1) {
		ret[0].hi = w->ranges[n - 1].hi;
		return 1;
	}
	/* Start from the first max, then fold each further range in by
	 * closing the smallest gap among max + 1 ranges. */
	for (size_t i = max; i < n; i++) {
		size_t best = 0;
		uint64_t gap = UINT64_MAX;

		for (size_t j = 0; j + 1 < max; j++) {
			uint64_t g = ret[j + 1].lo - ret[j].hi;

			if (g < gap) {
				gap = g;
				best = j;
			}
		}
		/* the gap before the new range */
		if (w->ranges[i].lo - ret[max - 1].hi < gap) {
			ret[max - 1].hi = w->ranges[i].hi;
			continue;
		}
		ret[best].hi = ret[best + 1].hi;
		memmove(ret + best + 1, ret + best + 2, (max - best - 2) * sizeof(*ret));
		ret[max - 1] = w->ranges[i];
	}
	return max;
}

void mp_wrappers_counts(const struct mp_wrappers *w, uint32_t *ret_functions, uint32_t *ret_objects)
{
	*ret_functions = w ? w->functions : 0;
	*ret_objects = w ? w->objects : 0;
}
