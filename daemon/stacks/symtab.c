// SPDX-License-Identifier: MIT
#include <errno.h>
#include <gelf.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "symtab.h"

#define INDEX_MAGIC 0x6d7073796d746162ull /* "mpsymtab" */
/* Symbols holding one address (aliases, nested symbols) looked at before
 * libdwfl's own lookup answers instead. */
#define MAX_HOLDERS 64

/* One symbol that can name an address: in a section, named, not a
 * section, file or TLS symbol. Sorted by address, then by table index. */
struct ent {
	uint64_t value, size;
	const char *name; /* libdwfl's, valid while the module lives */
	uint32_t shndx;
	uint32_t ndx;
	uint8_t bind; /* libdwfl's ranking: global 3, weak 2, local 1 */
};

/* The symbols of one part of the table, as libdwfl searches it: the
 * globals first, the locals only when the globals have nothing. */
struct part {
	struct ent *e;
	uint64_t *max_end; /* max(value + size) over e[0..i] */
	int32_t *prev_sizeless; /* the last entry at or before i of size 0, or -1 */
	uint32_t n;
};

struct index {
	uint64_t magic;
	struct part part[2]; /* globals, locals */
	bool failed; /* no memory when built: libdwfl answers */
};

/* The state of one lookup, as libdwfl keeps it across the two parts. */
struct found {
	const struct ent *sized, *sizeless;
	uint64_t min_label;
	size_t addr_shndx; /* (size_t)-1 until looked up */
};

static int bind_rank(unsigned char info)
{
	switch (GELF_ST_BIND(info)) {
	case STB_GLOBAL:
		return 3;
	case STB_WEAK:
		return 2;
	case STB_LOCAL:
		return 1;
	default:
		return 0;
	}
}

/* Sorts @e[0..n), given in ascending ndx (part_build()), by value and
 * ndx: by value, stably, an LSD radix sort of the bytes in
 * which the values differ (three or four for a library). qsort() with a
 * call per comparison took ~20 ms on the symbols of libtorch_cpu at the
 * end of a run. -ENOMEM. */
static int sort_ents(struct ent *e, uint32_t n)
{
	uint64_t any = 0, all = ~0ull;
	struct ent *tmp, *src = e, *dst;

	for (uint32_t i = 0; i < n; i++) {
		any |= e[i].value;
		all &= e[i].value;
	}
	if (n < 2 || any == all)
		return 0;
	tmp = malloc((size_t)n * sizeof(*tmp));
	if (!tmp)
		return -ENOMEM;
	dst = tmp;
	for (unsigned shift = 0; shift < 64; shift += 8) {
		uint32_t count[256] = { 0 }, at = 0;
		struct ent *t;

		if (!(((any ^ all) >> shift) & 0xff))
			continue;
		for (uint32_t i = 0; i < n; i++)
			count[(src[i].value >> shift) & 0xff]++;
		for (unsigned d = 0; d < 256; d++) {
			uint32_t c = count[d];

			count[d] = at;
			at += c;
		}
		for (uint32_t i = 0; i < n; i++)
			dst[count[(src[i].value >> shift) & 0xff]++] = src[i];
		t = src;
		src = dst;
		dst = t;
	}
	if (src != e)
		memcpy(e, src, (size_t)n * sizeof(*e));
	free(tmp);
	return 0;
}

static void part_free(struct part *p)
{
	free(p->e);
	free(p->max_end);
	free(p->prev_sizeless);
}

static int part_build(Dwfl_Module *mod, int from, int to, struct part *p)
{
	uint64_t end = 0;
	int32_t last = -1;

	*p = (struct part){ 0 };
	if (to <= from)
		return 0;
	p->e = malloc((size_t)(to - from) * sizeof(*p->e));
	if (!p->e)
		return -ENOMEM;
	for (int i = from; i < to; i++) {
		GElf_Sym sym;
		GElf_Addr addr;
		GElf_Word shndx;
		const char *name = dwfl_module_getsym_info(mod, i, &sym, &addr, &shndx, NULL, NULL);

		if (!name || !name[0] || sym.st_shndx == SHN_UNDEF ||
		    GELF_ST_TYPE(sym.st_info) == STT_SECTION ||
		    GELF_ST_TYPE(sym.st_info) == STT_FILE || GELF_ST_TYPE(sym.st_info) == STT_TLS)
			continue;
		p->e[p->n++] = (struct ent){ .value = addr,
					     .size = sym.st_size,
					     .name = name,
					     .shndx = shndx,
					     .ndx = (uint32_t)i,
					     .bind = (uint8_t)bind_rank(sym.st_info) };
	}
	if (sort_ents(p->e, p->n) < 0)
		return -ENOMEM;
	p->max_end = malloc((p->n ? p->n : 1) * sizeof(*p->max_end));
	p->prev_sizeless = malloc((p->n ? p->n : 1) * sizeof(*p->prev_sizeless));
	if (!p->max_end || !p->prev_sizeless)
		return -ENOMEM;
	for (uint32_t i = 0; i < p->n; i++) {
		/* a symbol that wraps around ends at the top */
		uint64_t e = p->e[i].value + p->e[i].size;

		if (e < p->e[i].value)
			e = UINT64_MAX;
		if (e > end)
			end = e;
		if (!p->e[i].size)
			last = (int32_t)i;
		p->max_end[i] = end;
		p->prev_sizeless[i] = last;
	}
	return 0;
}

static void index_free(struct index *x)
{
	if (!x)
		return;
	part_free(&x->part[0]);
	part_free(&x->part[1]);
	free(x);
}

static struct index *index_of(Dwfl_Module *mod)
{
	void **slot = NULL;
	struct index *x;
	int n, first;

	if (!dwfl_module_info(mod, &slot, NULL, NULL, NULL, NULL, NULL, NULL) || !slot)
		return NULL;
	x = *slot;
	if (x)
		return x->magic == INDEX_MAGIC && !x->failed ? x : NULL;
	x = calloc(1, sizeof(*x));
	if (!x)
		return NULL;
	x->magic = INDEX_MAGIC;
	*slot = x;
	n = dwfl_module_getsymtab(mod);
	first = n > 0 ? dwfl_module_getsymtab_first_global(mod) : 0;
	if (n > 0 && (first < 0 || first > n))
		first = 0;
	/* libdwfl: the globals are [first, n) (all of [1, n) when first is
	 * 0), the locals [1, first) */
	if (n > 0 && (part_build(mod, first > 0 ? first : 1, n, &x->part[0]) < 0 ||
		      part_build(mod, 1, first > 1 ? first : 1, &x->part[1]) < 0)) {
		part_free(&x->part[0]);
		part_free(&x->part[1]);
		memset(x->part, 0, sizeof(x->part));
		x->failed = true;
		return NULL;
	}
	return x;
}

void mp_symtab_prepare(Dwfl_Module *mod)
{
	(void)index_of(mod);
}

/* The number of entries at or below @addr. */
static uint32_t upto(const struct part *p, uint64_t addr)
{
	uint32_t lo = 0, hi = p->n;

	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;

		if (p->e[mid].value <= addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* libdwfl's preference between the symbol it holds and the next one in
 * table order, both holding the address with a size: the higher start,
 * else the stronger binding, else at the same start the smaller one
 * (dwfl_module_addrsym.c, try_sym_value). */
static bool replaces(const struct ent *cur, const struct ent *e)
{
	if (!cur || cur->value < e->value || cur->bind < e->bind)
		return true;
	return cur->value == e->value && ((cur->size > e->size && cur->bind <= e->bind) ||
					  (cur->size >= e->size && cur->bind < e->bind));
}

/* The section of the module's file holding @addr (its end included
 * unless the next one starts there), or SHN_UNDEF: libdwfl's test of a
 * label's section. */
static size_t section_at(Dwfl_Module *mod, uint64_t addr)
{
	Dwarf_Addr a = addr, bias;
	Elf_Scn *scn = dwfl_module_address_section(mod, &a, &bias);

	return scn ? elf_ndxscn(scn) : SHN_UNDEF;
}

static int ndx_cmp(const void *a, const void *b)
{
	const struct ent *x = *(const struct ent *const *)a, *y = *(const struct ent *const *)b;

	return x->ndx < y->ndx ? -1 : x->ndx > y->ndx;
}

/*
 * One part of the table searched for @addr as libdwfl's scan does, into
 * @f: min_label, the highest end of a symbol at or below @addr; of the
 * symbols with a size holding @addr, the one libdwfl's rules keep in
 * table order; of the labels without a size, the last in table order at
 * min_label (a label below it is inside a symbol, and libdwfl replaces
 * its label by any later one). Returns -1 when more symbols hold @addr
 * than are looked at (libdwfl then answers).
 */
static int search(Dwfl_Module *mod, const struct part *p, uint64_t addr, struct found *f)
{
	const struct ent *held[MAX_HOLDERS], *label = NULL;
	uint32_t k = upto(p, addr), nh = 0;

	if (!k)
		return 0;
	if (p->max_end[k - 1] > f->min_label)
		f->min_label = p->max_end[k - 1];
	/* Only entries whose prefix reaches past @addr can hold it. */
	for (uint32_t j = k; j-- > 0 && p->max_end[j] > addr;) {
		const struct ent *e = &p->e[j];

		if (!e->size || addr - e->value >= e->size)
			continue;
		if (nh == MAX_HOLDERS)
			return -1;
		held[nh++] = e;
	}
	qsort(held, nh, sizeof(*held), ndx_cmp);
	for (uint32_t i = 0; i < nh; i++)
		if (replaces(f->sized, held[i]))
			f->sized = held[i];
	if (f->sized)
		return 0;
	/* Labels at min_label, absolute ones only at @addr itself: the last
	 * in table order, which replaces any of a part searched before. */
	for (int32_t j = p->prev_sizeless[k - 1]; j >= 0 && p->e[j].value == f->min_label;
	     j = j ? p->prev_sizeless[j - 1] : -1) {
		const struct ent *e = &p->e[j];

		if (label && label->ndx > e->ndx)
			continue;
		if (e->shndx >= SHN_LORESERVE ?
			    e->value == addr :
			    (f->addr_shndx == (size_t)-1 ?
				     (f->addr_shndx = section_at(mod, addr)) :
				     f->addr_shndx) == section_at(mod, e->value))
			label = e;
	}
	if (label)
		f->sizeless = label;
	return 0;
}

const char *mp_symtab_lookup(Dwfl_Module *mod, uint64_t addr, uint64_t *ret_off, uint64_t *ret_size)
{
	struct index *x = index_of(mod);
	struct found f = { .addr_shndx = (size_t)-1 };
	const struct ent *e;

	if (!x || search(mod, &x->part[0], addr, &f) < 0 ||
	    /* the locals, unless a global holds @addr (or a label is
	     * right there) */
	    (!f.sized && x->part[1].n && !(f.sizeless && f.sizeless->value == addr) &&
	     search(mod, &x->part[1], addr, &f) < 0)) {
		GElf_Off off;
		GElf_Sym sym;
		const char *name = dwfl_module_addrinfo(mod, addr, &off, &sym, NULL, NULL, NULL);

		*ret_off = off;
		*ret_size = name ? sym.st_size : 0;
		return name;
	}
	e = f.sized;
	if (!e && f.sizeless && f.sizeless->value >= f.min_label)
		e = f.sizeless;
	if (!e)
		return NULL;
	*ret_off = addr - e->value;
	*ret_size = e->size;
	return e->name;
}

static int free_index(Dwfl_Module *mod, void **userdata, const char *name, Dwarf_Addr start,
		      void *arg)
{
	struct index *x = *userdata;

	(void)mod, (void)name, (void)start, (void)arg;
	if (x && x->magic == INDEX_MAGIC) {
		index_free(x);
		*userdata = NULL;
	}
	return DWARF_CB_OK;
}

void mp_dwfl_end(Dwfl *dwfl)
{
	if (!dwfl)
		return;
	dwfl_getmodules(dwfl, free_index, NULL, 0);
	dwfl_end(dwfl);
}
