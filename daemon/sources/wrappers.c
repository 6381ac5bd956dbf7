// SPDX-License-Identifier: MIT
#include "wrappers.h"

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Bounds on what a target's files can make us do. */
#define MAX_OBJECTS 4096 /* objects remembered as resolved */
#define MAX_SYMBOLS (1u << 20) /* symbols read per table */
#define MAX_STRTAB (64u << 20) /* bytes of a string table read */
#define MAX_HASH (64u << 20) /* bytes of a hash table read */
#define MAX_NAME 4096 /* longest symbol name matched */
#define MAX_PHDRS 256
#define MAX_SHDRS 8192
#define MAX_FN_SIZE (1u << 24) /* a function's size */
#define MAX_FN_PATTERNS 64 /* symbol patterns applied to one object */
#define MAX_EXEC_MAPS 16 /* executable mappings of one object kept */
#define SYM_CHUNK 4096 /* symbols read at once */

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
	bool exact; /* @fn is a name, no glob */
};

/* An object of the target queued for resolution: its executable
 * mappings (the run of mappings of one file at one place). */
struct object {
	char *path;
	struct mp_mapping exec[MAX_EXEC_MAPS];
	size_t n_exec;
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
	struct object *queue; /* objects seen, not resolved yet */
	size_t n_queue, cap_queue;
	uint64_t next_slice_ns;
	struct mp_wrappers_cost cost;
	uint32_t functions, objects;
};

static size_t literal_prefix(const char *g)
{
	return strcspn(g, "*?[\\");
}

static int add_pattern(struct mp_wrappers *w, const char *dso, const char *fn)
{
	struct pattern *p = reallocarray(w->pats, w->n_pats + 1, sizeof(*p));
	size_t k = fn ? literal_prefix(fn) : 0;

	if (!p)
		return -ENOMEM;
	w->pats = p;
	p[w->n_pats++] = (struct pattern){ dso, fn, k, fn && !fn[k] };
	return 0;
}

int mp_wrappers_new(pid_t pid, const struct mp_wrappers_opts *o, struct mp_wrappers **ret)
{
	struct mp_wrappers *w = calloc(1, sizeof(*w));
	int r = 0;

	if (!w)
		return -ENOMEM;
	w->pid = pid;
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

static void queue_clear(struct mp_wrappers *w)
{
	for (size_t i = 0; i < w->n_queue; i++)
		free(w->queue[i].path);
	w->n_queue = 0;
}

void mp_wrappers_reset(struct mp_wrappers *w)
{
	for (size_t i = 0; i < w->n_seen; i++)
		free(w->seen[i].path);
	queue_clear(w);
	w->n_seen = 0;
	w->n = 0;
	w->functions = w->objects = 0;
}

void mp_wrappers_free(struct mp_wrappers *w)
{
	if (!w)
		return;
	mp_wrappers_reset(w);
	free(w->queue);
	free(w->ranges);
	free(w->pats);
	free(w);
}

static int range_cmp(const void *a, const void *b)
{
	const struct mp_wrap_range *x = a, *y = b;

	if (x->lo != y->lo)
		return x->lo < y->lo ? -1 : 1;
	return x->hi < y->hi ? -1 : x->hi > y->hi;
}

/* A growing array of ranges, at most MP_WRAPPERS_MAX_RANGES. */
static int ranges_push(struct mp_wrap_range **a, size_t *n, size_t *cap, uint64_t lo, uint64_t hi)
{
	if (hi <= lo)
		return 0;
	if (*n == *cap) {
		size_t c = *cap ? *cap * 2 : 64;
		struct mp_wrap_range *r;

		if (*n >= MP_WRAPPERS_MAX_RANGES)
			return -ENOSPC;
		r = reallocarray(*a, c, sizeof(*r));
		if (!r)
			return -ENOMEM;
		*a = r;
		*cap = c;
	}
	(*a)[(*n)++] = (struct mp_wrap_range){ lo, hi };
	return 0;
}

static int range_add(struct mp_wrappers *w, uint64_t lo, uint64_t hi)
{
	return ranges_push(&w->ranges, &w->n, &w->cap, lo, hi);
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

static uint64_t clock_ns(clockid_t id)
{
	struct timespec t;

	clock_gettime(id, &t);
	return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static uint64_t now_ns(void)
{
	return clock_ns(CLOCK_MONOTONIC);
}

/* ---- an ELF object read with pread(2), every read bounded ---- */

struct table {
	uint64_t off, size; /* in the file */
	bool ok;
};

struct elf_obj {
	int fd;
	uint64_t fsize;
	Elf64_Phdr load[MAX_PHDRS]; /* executable PT_LOAD segments */
	size_t n_load;
	struct table dynsym, dynstr, symtab, strtab, gnu_hash, sysv_hash;
};

/* @len bytes at @off of the file, all of them, or -EIO. */
static int read_at(const struct elf_obj *e, void *buf, uint64_t len, uint64_t off)
{
	uint64_t done = 0;

	if (off > e->fsize || len > e->fsize - off)
		return -EIO;
	while (done < len) {
		ssize_t k = pread(e->fd, (char *)buf + done, len - done, (off_t)(off + done));

		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return -EIO;
		done += (uint64_t)k;
	}
	return 0;
}

/* A table of section @sh, inside the file. */
static struct table table_of(const struct elf_obj *e, const Elf64_Shdr *sh)
{
	struct table t = { sh->sh_offset, sh->sh_size, false };

	t.ok = sh->sh_type != SHT_NOBITS && t.off <= e->fsize && t.size <= e->fsize - t.off;
	return t;
}

/* The symbol table of type @type, its string table and (.dynsym) hash
 * tables, from section headers @sh. */
static void find_tables(struct elf_obj *e, const Elf64_Shdr *sh, size_t n)
{
	size_t dyn = n;

	for (size_t i = 0; i < n; i++) {
		bool sym = sh[i].sh_type == SHT_DYNSYM || sh[i].sh_type == SHT_SYMTAB;
		struct table *t = sh[i].sh_type == SHT_DYNSYM ? &e->dynsym : &e->symtab;
		struct table *s = sh[i].sh_type == SHT_DYNSYM ? &e->dynstr : &e->strtab;

		if (!sym || t->ok || sh[i].sh_entsize != sizeof(Elf64_Sym) || sh[i].sh_link >= n ||
		    sh[sh[i].sh_link].sh_type != SHT_STRTAB)
			continue;
		*t = table_of(e, &sh[i]);
		*s = table_of(e, &sh[sh[i].sh_link]);
		if (!t->ok || !s->ok)
			t->ok = s->ok = false;
		else if (sh[i].sh_type == SHT_DYNSYM)
			dyn = i;
	}
	for (size_t i = 0; i < n && dyn < n; i++) {
		if (sh[i].sh_link != dyn)
			continue;
		if (sh[i].sh_type == SHT_GNU_HASH && !e->gnu_hash.ok)
			e->gnu_hash = table_of(e, &sh[i]);
		else if (sh[i].sh_type == SHT_HASH && !e->sysv_hash.ok)
			e->sysv_hash = table_of(e, &sh[i]);
	}
}

static int elf_open(struct elf_obj *e, int fd)
{
	static const unsigned char ident[] = {
		ELFMAG0,
		ELFMAG1,
		ELFMAG2,
		ELFMAG3,
		ELFCLASS64,
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
		ELFDATA2LSB
#else
		ELFDATA2MSB
#endif
	};
	Elf64_Ehdr eh;
	Elf64_Shdr *sh;
	struct stat st;
	size_t n;

	memset(e, 0, sizeof(*e));
	e->fd = fd;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
		return -ENOEXEC;
	e->fsize = (uint64_t)st.st_size;
	if (read_at(e, &eh, sizeof(eh), 0) < 0 || memcmp(eh.e_ident, ident, sizeof(ident)))
		return -ENOEXEC;
	if (eh.e_phentsize == sizeof(Elf64_Phdr)) {
		Elf64_Phdr ph[MAX_PHDRS];

		n = eh.e_phnum < MAX_PHDRS ? eh.e_phnum : MAX_PHDRS;
		if (read_at(e, ph, n * sizeof(*ph), eh.e_phoff) < 0)
			n = 0;
		for (size_t i = 0; i < n; i++)
			if (ph[i].p_type == PT_LOAD && (ph[i].p_flags & PF_X) &&
			    ph[i].p_offset <= e->fsize &&
			    ph[i].p_filesz <= e->fsize - ph[i].p_offset)
				e->load[e->n_load++] = ph[i];
	}
	n = eh.e_shnum < MAX_SHDRS ? eh.e_shnum : MAX_SHDRS;
	if (eh.e_shentsize != sizeof(Elf64_Shdr) || !n)
		return 0;
	sh = malloc(n * sizeof(*sh));
	if (!sh)
		return -ENOMEM;
	if (read_at(e, sh, n * sizeof(*sh), eh.e_shoff) == 0)
		find_tables(e, sh, n);
	free(sh);
	return 0;
}

/* The file offset of code at @vaddr, in an executable segment (inside the
 * file); 0: none. */
static uint64_t code_offset(const struct elf_obj *e, uint64_t vaddr)
{
	for (size_t i = 0; i < e->n_load; i++) {
		const Elf64_Phdr *p = &e->load[i];

		if (vaddr >= p->p_vaddr && vaddr - p->p_vaddr < p->p_filesz)
			return vaddr - p->p_vaddr + p->p_offset;
	}
	return 0;
}

/* ---- symbol patterns against one object ---- */

struct matcher {
	const struct pattern *p[MAX_FN_PATTERNS];
	size_t n;
	/* bit i: pattern i can match a name starting with this byte (any
	 * byte: @any1), and with this second byte (any: @any2) */
	uint64_t first[256], second[256], any1, any2;
};

static void matcher_add(struct matcher *m, const struct pattern *p)
{
	uint64_t bit;

	if (m->n >= MAX_FN_PATTERNS)
		return;
	bit = 1ull << m->n;
	m->p[m->n++] = p;
	if (!p->prefix)
		m->any1 |= bit;
	else
		m->first[(unsigned char)p->fn[0]] |= bit;
	if (p->prefix < 2)
		m->any2 |= bit;
	else
		m->second[(unsigned char)p->fn[1]] |= bit;
}

/* The patterns of @m that may match a name starting with @name's first
 * two bytes (@name: NUL-terminated). */
static uint64_t matcher_candidates(const struct matcher *m, const char *name)
{
	uint64_t c = m->first[(unsigned char)name[0]] | m->any1;

	if (c && name[0])
		c &= m->second[(unsigned char)name[1]] | m->any2;
	return c;
}

/* Whether @name (NUL-terminated) matches one of candidates @c of @m. */
static bool matcher_match(const struct matcher *m, uint64_t c, const char *name)
{
	while (c) {
		const struct pattern *p = m->p[__builtin_ctzll(c)];

		c &= c - 1;
		if (strncmp(name, p->fn, p->prefix))
			continue;
		if (p->exact ? !name[p->prefix] : fnmatch(p->fn, name, 0) == 0)
			return true;
	}
	return false;
}

/* Functions found in one object, as file ranges. */
struct found {
	struct mp_wrap_range *a;
	size_t n, cap;
};

static int found_sym(const struct elf_obj *e, const Elf64_Sym *s, struct found *f)
{
	uint64_t off;
	int t = ELF64_ST_TYPE(s->st_info);

	if (s->st_shndx == SHN_UNDEF || !s->st_value || !s->st_size || s->st_size > MAX_FN_SIZE ||
	    (t != STT_FUNC && t != STT_GNU_IFUNC))
		return 0;
	off = code_offset(e, s->st_value);
	if (!off || off > UINT64_MAX - s->st_size)
		return 0;
	return ranges_push(&f->a, &f->n, &f->cap, off, off + s->st_size);
}

/* Whether symbol @s might be a wrapper function (the cheap tests first). */
static bool sym_defined_fn(const Elf64_Sym *s)
{
	int t = ELF64_ST_TYPE(s->st_info);

	return s->st_shndx != SHN_UNDEF && s->st_value && s->st_size &&
	       (t == STT_FUNC || t == STT_GNU_IFUNC);
}

/* String table @t, read whole (at most MAX_STRTAB bytes), NUL-terminated
 * past its end so that every name in it ends. */
static char *read_strtab(const struct elf_obj *e, const struct table *t, uint64_t *ret_len)
{
	uint64_t len = t->size < MAX_STRTAB ? t->size : MAX_STRTAB;
	char *buf = malloc(len + 1);

	if (!buf)
		return NULL;
	if (read_at(e, buf, len, t->off) < 0)
		len = 0;
	buf[len] = 0;
	*ret_len = len;
	return buf;
}

/* Every function of symbol table @t (names in @strs) that @m matches into
 * @f; the symbols read added to *@count. */
static int scan_table(const struct elf_obj *e, const struct table *t, const struct table *strs,
		      const struct matcher *m, struct found *f, uint32_t *count)
{
	uint64_t n = t->size / sizeof(Elf64_Sym), len;
	Elf64_Sym *chunk;
	char *names;
	int r = 0;

	if (!t->ok || !m->n)
		return 0;
	if (n > MAX_SYMBOLS)
		n = MAX_SYMBOLS;
	chunk = malloc(SYM_CHUNK * sizeof(*chunk));
	names = chunk ? read_strtab(e, strs, &len) : NULL;
	for (uint64_t i = 0; names && i < n && r == 0; i += SYM_CHUNK) {
		uint64_t k = n - i < SYM_CHUNK ? n - i : SYM_CHUNK;

		if (read_at(e, chunk, k * sizeof(*chunk), t->off + i * sizeof(*chunk)) < 0)
			break;
		*count += (uint32_t)k;
		for (uint64_t j = 0; j < k && r == 0; j++) {
			const Elf64_Sym *s = &chunk[j];
			uint64_t c;

			if (!sym_defined_fn(s) || s->st_name >= len ||
			    !(c = matcher_candidates(m, names + s->st_name)))
				continue;
			/* names longer than MAX_NAME are never matched */
			if (!memchr(names + s->st_name, 0,
				    len - s->st_name < MAX_NAME ? len - s->st_name + 1 : MAX_NAME))
				continue;
			if (matcher_match(m, c, names + s->st_name))
				r = found_sym(e, s, f);
		}
	}
	if (!names && chunk)
		r = -ENOMEM;
	free(names);
	free(chunk);
	return r == -ENOSPC ? 0 : r;
}

/* ---- exact names through the hash tables ---- */

struct hash_table {
	uint32_t *w; /* the section, as 32-bit words */
	uint64_t n; /* words */
	uint64_t nsyms; /* symbols in .dynsym */
	bool gnu;
};

static uint32_t gnu_hash(const char *s)
{
	uint32_t h = 5381;

	for (; *s; s++)
		h = h * 33 + (unsigned char)*s;
	return h;
}

static uint32_t sysv_hash(const char *s)
{
	uint32_t h = 0;

	for (; *s; s++) {
		h = (h << 4) + (unsigned char)*s;
		h ^= (h >> 24) & 0xf0;
	}
	return h & 0x0fffffff;
}

/* Symbol @i of .dynsym, if its name is @name: 1; 0 when another; <0 when
 * it cannot be read. */
static int dynsym_is(const struct elf_obj *e, uint64_t i, const char *name, Elf64_Sym *s)
{
	size_t len = strlen(name) + 1;
	char buf[MAX_NAME];

	if (i >= e->dynsym.size / sizeof(*s) ||
	    read_at(e, s, sizeof(*s), e->dynsym.off + i * sizeof(*s)) < 0)
		return -EIO;
	if (len > sizeof(buf) || s->st_name >= e->dynstr.size || len > e->dynstr.size - s->st_name)
		return 0;
	if (read_at(e, buf, len, e->dynstr.off + s->st_name) < 0)
		return -EIO;
	return !memcmp(buf, name, len);
}

/* The functions named @name in .gnu.hash @h into @f; -EBADMSG when the
 * table is inconsistent. */
static int gnu_lookup(const struct elf_obj *e, const struct hash_table *h, const char *name,
		      struct found *f)
{
	uint32_t nb = h->w[0], symoff = h->w[1], nbloom = h->w[2], shift = h->w[3];
	uint32_t hv = gnu_hash(name);
	uint64_t bloom, base = 4 + 2ull * nbloom, chain = base + nb, i;
	int r;

	if (!nb || !nbloom || (nbloom & (nbloom - 1)) || shift >= 32 || chain > h->n ||
	    symoff > h->nsyms)
		return -EBADMSG;
	bloom = (uint64_t)h->w[4 + 2 * ((hv / 64) & (nbloom - 1))] |
		(uint64_t)h->w[5 + 2 * ((hv / 64) & (nbloom - 1))] << 32;
	if (!((bloom >> (hv % 64)) & (bloom >> ((hv >> shift) % 64)) & 1))
		return 0;
	i = h->w[base + hv % nb];
	if (!i)
		return 0;
	if (i < symoff)
		return -EBADMSG;
	for (; i < h->nsyms; i++) {
		uint32_t c;
		Elf64_Sym s;

		if (chain + (i - symoff) >= h->n)
			return -EBADMSG;
		c = h->w[chain + (i - symoff)];
		if ((c | 1) == (hv | 1)) {
			r = dynsym_is(e, i, name, &s);
			if (r < 0)
				return -EBADMSG;
			if (r > 0 && (r = found_sym(e, &s, f)) < 0)
				return r;
		}
		if (c & 1)
			return 0;
	}
	return -EBADMSG; /* a chain without its end */
}

/* The same in a SysV .hash table. */
static int sysv_lookup(const struct elf_obj *e, const struct hash_table *h, const char *name,
		       struct found *f)
{
	uint32_t nb = h->w[0], nc = h->w[1];
	uint64_t i, steps = 0;
	int r;

	if (!nb || 2ull + nb + nc > h->n)
		return -EBADMSG;
	for (i = h->w[2 + sysv_hash(name) % nb]; i != STN_UNDEF; i = h->w[2 + nb + i]) {
		Elf64_Sym s;

		if (i >= nc || ++steps > nc)
			return -EBADMSG;
		r = dynsym_is(e, i, name, &s);
		if (r < 0)
			return -EBADMSG;
		if (r > 0 && (r = found_sym(e, &s, f)) < 0)
			return r;
	}
	return 0;
}

/* .dynsym's hash table, read whole; false when there is none usable. */
static bool hash_open(const struct elf_obj *e, struct hash_table *h)
{
	const struct table *t = e->gnu_hash.ok ? &e->gnu_hash : &e->sysv_hash;

	memset(h, 0, sizeof(*h));
	if (!t->ok || !e->dynsym.ok || t->size < 16 || t->size > MAX_HASH)
		return false;
	h->gnu = t == &e->gnu_hash;
	h->n = t->size / 4;
	h->nsyms = e->dynsym.size / sizeof(Elf64_Sym);
	h->w = malloc(h->n * 4);
	if (!h->w || read_at(e, h->w, h->n * 4, t->off) < 0) {
		free(h->w);
		h->w = NULL;
		return false;
	}
	return true;
}

/* The exact names of @m looked up in @e's hash table: those found are
 * added to @f and their bit set in *@ret_found. -EBADMSG: no usable
 * table (@f unchanged). */
static int lookup_exact(const struct elf_obj *e, const struct matcher *m, struct found *f,
			uint64_t *ret_found, bool *ret_bad)
{
	struct hash_table h;
	size_t n0 = f->n;
	int r = 0;

	*ret_bad = false;
	if (!hash_open(e, &h))
		return -EBADMSG;
	for (size_t i = 0; i < m->n && i < MAX_FN_PATTERNS && r == 0; i++) {
		size_t k = f->n;

		if (!m->p[i]->exact)
			continue;
		r = h.gnu ? gnu_lookup(e, &h, m->p[i]->fn, f) : sysv_lookup(e, &h, m->p[i]->fn, f);
		if (f->n > k)
			*ret_found |= 1ull << i;
	}
	free(h.w);
	if (r == -EBADMSG) {
		f->n = n0;
		*ret_found = 0;
		*ret_bad = true;
	}
	return r == -ENOSPC ? 0 : r;
}

/* ---- one object ---- */

/* The functions of @e matching @m into @f: exact names through the hash
 * table (unless @flags says MP_WRAPPERS_FULL_SCAN), globs and what the
 * table could not answer by a scan of .dynsym; .symtab only for globs and
 * the names .dynsym lacks. */
static int scan_elf(const struct elf_obj *e, const struct matcher *m, unsigned flags,
		    struct found *f, struct mp_wrappers_scan *st)
{
	struct matcher rest = { .n = 0 };
	uint64_t exact = 0, found = 0;
	int r = 0;

	for (size_t i = 0; i < m->n && i < MAX_FN_PATTERNS; i++)
		exact |= (uint64_t)m->p[i]->exact << i;
	if (exact && !(flags & MP_WRAPPERS_FULL_SCAN)) {
		r = lookup_exact(e, m, f, &found, &st->hash_bad);
		st->hashed = r == 0;
		if (r < 0 && r != -EBADMSG)
			return r;
	}
	/* .dynsym: the globs, and the exact names when no table answered */
	for (size_t i = 0; i < m->n && i < MAX_FN_PATTERNS; i++)
		if (!m->p[i]->exact || !st->hashed)
			matcher_add(&rest, m->p[i]);
	r = scan_table(e, &e->dynsym, &e->dynstr, &rest, f, &st->symbols);
	if (r < 0)
		return r;
	/* .symtab: the globs and the exact names .dynsym does not hold */
	if (st->hashed) {
		memset(&rest, 0, sizeof(rest));
		for (size_t i = 0; i < m->n && i < MAX_FN_PATTERNS; i++)
			if (!(found >> i & 1))
				matcher_add(&rest, m->p[i]);
	}
	if (e->symtab.ok && rest.n) {
		st->symtab = true;
		r = scan_table(e, &e->symtab, &e->strtab, &rest, f, &st->symbols);
	}
	return r;
}

/* The symbol patterns of @w that apply to objects named @base. */
static void matcher_for(const struct mp_wrappers *w, const char *base, struct matcher *m)
{
	memset(m, 0, sizeof(*m));
	for (size_t i = 0; i < w->n_pats; i++)
		if (w->pats[i].fn && (!w->pats[i].dso || fnmatch(w->pats[i].dso, base, 0) == 0))
			matcher_add(m, &w->pats[i]);
}

/* Sorted; a function in both tables once. Returns the distinct ones. */
static size_t found_sort(struct found *f)
{
	size_t k = 0;

	if (!f->n)
		return 0;
	qsort(f->a, f->n, sizeof(*f->a), range_cmp);
	for (size_t i = 1; i < f->n; i++)
		if (f->a[i].lo != f->a[k].lo || f->a[i].hi != f->a[k].hi)
			f->a[++k] = f->a[i];
	f->n = k + 1;
	return f->n;
}

int mp_wrappers_scan_fd(const struct mp_wrappers *w, int fd, unsigned flags,
			struct mp_wrap_range *ret, size_t max, struct mp_wrappers_scan *st)
{
	struct mp_wrappers_scan dummy;
	struct found f = { 0 };
	struct elf_obj *e = malloc(sizeof(*e));
	struct matcher m;
	int r;

	if (!st)
		st = &dummy;
	memset(st, 0, sizeof(*st));
	if (!e)
		return -ENOMEM;
	r = elf_open(e, fd);
	if (r == 0) {
		matcher_for(w, "", &m);
		r = scan_elf(e, &m, flags, &f, st);
	}
	if (r == 0) {
		r = (int)found_sort(&f);
		if (f.n)
			memcpy(ret, f.a, (f.n < max ? f.n : max) * sizeof(*ret));
	}
	free(f.a);
	free(e);
	return r;
}

/* ---- the target's objects ---- */

/* The path @o is read through. */
static bool object_path(const struct mp_wrappers *w, const struct object *o, char *buf, size_t n)
{
	int len;

	if (is_deleted(o->path))
		len = snprintf(buf, n, "/proc/%d/map_files/%llx-%llx", (int)w->pid,
			       (unsigned long long)o->exec[0].start,
			       (unsigned long long)o->exec[0].end);
	else if (w->pid)
		len = snprintf(buf, n, "/proc/%d/root%s", (int)w->pid, o->path);
	else
		len = snprintf(buf, n, "%s", o->path);
	return len >= 0 && (size_t)len < n;
}

/* The runtime ranges of file ranges @f of object @o. */
static int object_add(struct mp_wrappers *w, const struct object *o, const struct found *f)
{
	int r = 0;

	for (size_t i = 0; i < f->n && r == 0; i++) {
		for (size_t j = 0; j < o->n_exec; j++) {
			const struct mp_mapping *m = &o->exec[j];
			uint64_t off = f->a[i].lo;

			if (off >= m->offset && off - m->offset < m->end - m->start) {
				r = range_add(w, m->start + (off - m->offset),
					      m->start + (off - m->offset) + (f->a[i].hi - off));
				break;
			}
		}
	}
	return r == -ENOSPC ? 0 : r;
}

/* The wrapper functions of queued object @o. */
static int object_scan(struct mp_wrappers *w, const struct object *o, const struct matcher *m)
{
	char rp[PATH_MAX + 64];
	struct mp_wrappers_scan st;
	struct found f = { 0 };
	struct elf_obj *e;
	int fd, r;

	if (!object_path(w, o, rp, sizeof(rp)))
		return 0;
	/* O_NONBLOCK: the target may have put a FIFO where its file was;
	 * pread(2), not mmap: the target can truncate its own files. */
	fd = open(rp, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		return 0;
	e = malloc(sizeof(*e));
	r = e ? elf_open(e, fd) : -ENOMEM;
	memset(&st, 0, sizeof(st));
	if (r == 0)
		r = scan_elf(e, m, 0, &f, &st);
	if (r == 0 && found_sort(&f)) {
		w->functions += (uint32_t)f.n;
		w->objects++;
		r = object_add(w, o, &f);
	}
	free(f.a);
	free(e);
	close(fd);
	return r == -ENOEXEC ? 0 : r;
}

/* Object @o: a wrapper as a whole, or its wrapper functions. */
static int object_resolve(struct mp_wrappers *w, const struct object *o)
{
	const char *base = base_name(o->path);
	struct matcher m;
	int r = 0;

	for (size_t i = 0; i < w->n_pats; i++) {
		const struct pattern *p = &w->pats[i];

		if (p->fn || fnmatch(p->dso, base, 0) != 0)
			continue;
		for (size_t j = 0; j < o->n_exec && r == 0; j++)
			r = range_add(w, o->exec[j].start, o->exec[j].end);
		w->objects++;
		return r == -ENOSPC ? 0 : r;
	}
	matcher_for(w, base, &m);
	return m.n ? object_scan(w, o, &m) : 0;
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

/* The objects of @maps not seen yet, queued: each run of mappings of one
 * file, once it has executable code (a file mapped but not yet made
 * executable is looked at again on the next update). */
static int queue_new(struct mp_wrappers *w, const struct mp_procmaps *maps)
{
	for (size_t i = 0; maps && i < maps->n;) {
		const struct mp_mapping *m = &maps->maps[i];
		struct object o = { 0 };
		size_t j = i;

		for (; j < maps->n && !strcmp(maps->maps[j].path, m->path); j++)
			if ((maps->maps[j].perms & MP_MAP_X) && o.n_exec < MAX_EXEC_MAPS)
				o.exec[o.n_exec++] = maps->maps[j];
		i = j;
		if (m->path[0] != '/' || !o.n_exec || seen(w, m))
			continue;
		if (w->n_queue == w->cap_queue) {
			size_t cap = w->cap_queue ? w->cap_queue * 2 : 64;
			struct object *q = reallocarray(w->queue, cap, sizeof(*q));

			if (!q)
				return -ENOMEM;
			w->queue = q;
			w->cap_queue = cap;
		}
		o.path = strdup(m->path);
		if (!o.path)
			return -ENOMEM;
		for (size_t k = 0; k < o.n_exec; k++)
			o.exec[k].path = NULL; /* maps' strings are not ours */
		w->queue[w->n_queue++] = o;
	}
	return 0;
}

/* Resolves queued object @i and takes it off the queue. */
static int resolve_queued(struct mp_wrappers *w, size_t i)
{
	struct object o = w->queue[i];
	uint64_t t0 = now_ns(), c0 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
	int r;

	memmove(w->queue + i, w->queue + i + 1, (w->n_queue - i - 1) * sizeof(*w->queue));
	w->n_queue--;
	r = object_resolve(w, &o);
	free(o.path);
	w->cost.wall_ns += now_ns() - t0;
	w->cost.cpu_ns += clock_ns(CLOCK_THREAD_CPUTIME_ID) - c0;
	w->cost.objects++;
	return r;
}

/* The queued object with code at @addr, or n_queue. */
static size_t queued_at(const struct mp_wrappers *w, uint64_t addr)
{
	for (size_t i = 0; addr && i < w->n_queue; i++)
		for (size_t j = 0; j < w->queue[i].n_exec; j++)
			if (addr - w->queue[i].exec[j].start <
			    w->queue[i].exec[j].end - w->queue[i].exec[j].start)
				return i;
	return w->n_queue;
}

static int step(struct mp_wrappers *w, const struct mp_procmaps *maps, uint64_t first, uint64_t now,
		uint64_t slice)
{
	size_t n0 = w->n, i;
	uint64_t t0 = now_ns();
	int r = queue_new(w, maps);

	if (r == 0 && (i = queued_at(w, first)) < w->n_queue)
		r = resolve_queued(w, i);
	if (r == 0 && w->n_queue && now >= w->next_slice_ns) {
		uint64_t end = t0 + slice;

		while (r == 0 && w->n_queue && (slice == UINT64_MAX || now_ns() < end))
			r = resolve_queued(w, 0);
		w->next_slice_ns = now_ns() + MP_WRAPPERS_GAP_NS;
	}
	if (w->n != n0)
		ranges_normalize(w);
	t0 = now_ns() - t0;
	if (slice != UINT64_MAX && t0 > w->cost.max_step_ns)
		w->cost.max_step_ns = t0;
	if (r == -ENOMEM)
		return r;
	return w->n != n0;
}

int mp_wrappers_update(struct mp_wrappers *w, const struct mp_procmaps *maps)
{
	w->next_slice_ns = 0;
	return step(w, maps, 0, 0, UINT64_MAX);
}

int mp_wrappers_step(struct mp_wrappers *w, const struct mp_procmaps *maps, uint64_t first,
		     uint64_t now_ns)
{
	if (!maps && !w->n_queue)
		return 0;
	return step(w, maps, first, now_ns, MP_WRAPPERS_SLICE_NS);
}

size_t mp_wrappers_pending(const struct mp_wrappers *w)
{
	return w ? w->n_queue : 0;
}

void mp_wrappers_cost(const struct mp_wrappers *w, struct mp_wrappers_cost *ret)
{
	*ret = w ? w->cost : (struct mp_wrappers_cost){ 0 };
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
