// SPDX-License-Identifier: MIT
/* Allocator wrappers resolved from this process's own mappings: function
 * globs, object globs, the default list's absence in a C program, the
 * target's coarse filter covering every wrapper, resolution a step at a
 * time; and on the system's libraries: exact names through the hash
 * tables against a full scan and libelf, globs, corrupt hash tables. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <gelf.h>
#include <libelf.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "procmaps.h"
#include "wrappers.h"

static struct mp_wrappers *resolved(const struct mp_wrappers_opts *o)
{
	struct mp_procmaps *maps = NULL;
	struct mp_wrappers *w = NULL;

	cr_assert_eq(mp_procmaps_read(getpid(), &maps), 0);
	cr_assert_eq(mp_wrappers_new(0, o, &w), 0);
	cr_assert_eq(mp_wrappers_update(w, maps), mp_wrappers_any(w) ? 1 : 0);
	/* the same objects again: nothing new */
	cr_assert_eq(mp_wrappers_update(w, maps), 0);
	mp_procmaps_free(maps);
	return w;
}

Test(wrappers, function_glob_is_the_functions_range)
{
	/* libc's, in every build (no sanitizer intercepts it) */
	const char *fns[] = { "getppid" };
	const struct mp_wrappers_opts o = { .fn_globs = fns, .n_fn = 1, .no_default = true };
	struct mp_wrappers *w = resolved(&o);
	uint64_t m = (uint64_t)(uintptr_t)&getppid;
	uint32_t nf, no;

	cr_assert(mp_wrappers_has(w, m));
	cr_assert(mp_wrappers_has(w, m + 1));
	cr_assert_not(mp_wrappers_has(w, (uint64_t)(uintptr_t)&getpid));
	cr_assert_not(mp_wrappers_has(w, (uint64_t)(uintptr_t)&resolved));
	mp_wrappers_counts(w, &nf, &no);
	cr_assert_eq(no, 1, "getppid in libc only");
	cr_assert_eq(nf, 1);
	mp_wrappers_free(w);
}

Test(wrappers, object_glob_is_the_whole_object)
{
	const char *dsos[] = { "libc.so*" };
	const struct mp_wrappers_opts o = { .dso_globs = dsos, .n_dso = 1, .no_default = true };
	struct mp_wrappers *w = resolved(&o);
	uint32_t nf, no;

	cr_assert(mp_wrappers_has(w, (uint64_t)(uintptr_t)&getpid));
	cr_assert(mp_wrappers_has(w, (uint64_t)(uintptr_t)&getppid));
	cr_assert_not(mp_wrappers_has(w, (uint64_t)(uintptr_t)&resolved));
	mp_wrappers_counts(w, &nf, &no);
	cr_assert_eq(nf, 0);
	cr_assert_eq(no, 1);
	mp_wrappers_free(w);
}

/* The default list names no function of libc or of this program (a
 * sanitizer runtime may bring an operator new). */
Test(wrappers, default_list_leaves_libc_and_the_program)
{
	const struct mp_wrappers_opts o = { 0 };
	struct mp_wrappers *w = resolved(&o);

	cr_assert_not(mp_wrappers_has(w, (uint64_t)(uintptr_t)&getpid));
	cr_assert_not(mp_wrappers_has(w, (uint64_t)(uintptr_t)&resolved));
	mp_wrappers_free(w);
}

/* The target's filter: at most max ranges, sorted, covering every
 * wrapper function (many: libc's get* functions). */
Test(wrappers, coarse_filter_covers_every_wrapper)
{
	const char *fns[] = { "get*" };
	const struct mp_wrappers_opts o = { .fn_globs = fns, .n_fn = 1, .no_default = true };
	struct mp_wrappers *w = resolved(&o);
	struct mp_wrap_range c[4];
	/* libc's (no IFUNC, no sanitizer interceptor) */
	uint64_t probes[] = { (uintptr_t)&getpid, (uintptr_t)&getppid, (uintptr_t)&getuid,
			      (uintptr_t)&getgid, (uintptr_t)&geteuid };
	size_t n = mp_wrappers_coarse(w, c, 4);
	uint32_t nf, no;

	mp_wrappers_counts(w, &nf, &no);
	cr_assert_gt(nf, 8, "%u functions", nf);
	cr_assert_eq(n, 4);
	for (size_t i = 1; i < n; i++)
		cr_assert_gt(c[i].lo, c[i - 1].hi);
	for (size_t k = 0; k < sizeof(probes) / sizeof(*probes); k++) {
		bool in = false;

		cr_assert(mp_wrappers_has(w, probes[k]));
		for (size_t i = 0; i < n; i++)
			in |= probes[k] >= c[i].lo && probes[k] < c[i].hi;
		cr_assert(in, "probe %zu outside the filter", k);
	}
	mp_wrappers_free(w);
}

/* ---- one object: hash tables against a full scan ---- */

#define MAX_NAMES 60

struct object {
	int fd;
	Elf *elf;
	/* defined functions of .dynsym, every stride-th, and their file
	 * ranges as libelf reads them */
	char *names[MAX_NAMES];
	struct mp_wrap_range ranges[MAX_NAMES];
	size_t n;
};

/* The file offset of @vaddr in an executable segment, from libelf. */
static uint64_t file_offset(Elf *elf, uint64_t vaddr)
{
	size_t n;

	cr_assert_eq(elf_getphdrnum(elf, &n), 0);
	for (size_t i = 0; i < n; i++) {
		GElf_Phdr ph;

		if (gelf_getphdr(elf, (int)i, &ph) && ph.p_type == PT_LOAD && (ph.p_flags & PF_X) &&
		    vaddr >= ph.p_vaddr && vaddr - ph.p_vaddr < ph.p_filesz)
			return vaddr - ph.p_vaddr + ph.p_offset;
	}
	return 0;
}

/* Opens @path and picks up to MAX_NAMES defined functions of its .dynsym
 * with libelf, spread over the table. False when there is no such file. */
static bool object_open(struct object *o, const char *path)
{
	Elf_Scn *scn = NULL;
	GElf_Shdr sh;
	Elf_Data *d;
	size_t nsym, stride;

	memset(o, 0, sizeof(*o));
	o->fd = open(path, O_RDONLY | O_CLOEXEC);
	if (o->fd < 0)
		return false;
	cr_assert_neq(elf_version(EV_CURRENT), EV_NONE);
	cr_assert_not_null(o->elf = elf_begin(o->fd, ELF_C_READ, NULL), "%s", path);
	while ((scn = elf_nextscn(o->elf, scn)))
		if (gelf_getshdr(scn, &sh) && sh.sh_type == SHT_DYNSYM)
			break;
	cr_assert_not_null(scn, "%s: no .dynsym", path);
	cr_assert_not_null(d = elf_getdata(scn, NULL));
	nsym = sh.sh_size / sh.sh_entsize;
	stride = nsym / (MAX_NAMES * 2) + 1;
	for (size_t i = 0; i < nsym && o->n < MAX_NAMES; i += stride) {
		GElf_Sym s;
		const char *name;
		bool dup = false;

		/* the next defined function from i on */
		for (; i < nsym && gelf_getsym(d, (int)i, &s); i++)
			if (s.st_shndx != SHN_UNDEF && s.st_value && s.st_size &&
			    (GELF_ST_TYPE(s.st_info) == STT_FUNC ||
			     GELF_ST_TYPE(s.st_info) == STT_GNU_IFUNC))
				break;
		if (i >= nsym)
			break;
		name = elf_strptr(o->elf, sh.sh_link, s.st_name);
		cr_assert_not_null(name);
		for (size_t k = 0; k < o->n; k++)
			dup |= !strcmp(o->names[k], name);
		if (dup || strpbrk(name, "*?[\\"))
			continue;
		o->names[o->n] = strdup(name);
		o->ranges[o->n].lo = file_offset(o->elf, s.st_value);
		o->ranges[o->n].hi = o->ranges[o->n].lo + s.st_size;
		cr_assert_neq(o->ranges[o->n].lo, 0, "%s: %s in no executable segment", path, name);
		o->n++;
	}
	cr_assert_geq(o->n, 20, "%s: only %zu defined functions picked", path, o->n);
	return true;
}

static void object_close(struct object *o)
{
	for (size_t i = 0; i < o->n; i++)
		free(o->names[i]);
	elf_end(o->elf);
	close(o->fd);
}

static bool has_range(const struct mp_wrap_range *r, size_t n, const struct mp_wrap_range *x)
{
	for (size_t i = 0; i < n; i++)
		if (r[i].lo == x->lo && r[i].hi == x->hi)
			return true;
	return false;
}

#define MAX_FOUND 4096

/* The wrapper functions of @fd under @names (exact), through the hash
 * table and by a full scan: the same ranges, every name libelf found
 * among them. */
static void check_exact(int fd, const char *const *names, size_t n, const struct object *o,
			const char *what)
{
	static struct mp_wrap_range hashed[MAX_FOUND], full[MAX_FOUND];
	const char *all[MAX_NAMES + 2];
	struct mp_wrappers_scan sh, sf;
	struct mp_wrappers_opts opts = { .fn_globs = all, .no_default = true };
	struct mp_wrappers *w;
	int nh, nf;

	memcpy(all, names, n * sizeof(*names));
	all[n++] = "mp_no_such_function";
	all[n++] = "_Znwm_no_such_function";
	opts.n_fn = n;
	cr_assert_eq(mp_wrappers_new(0, &opts, &w), 0);
	nh = mp_wrappers_scan_fd(w, fd, 0, hashed, MAX_FOUND, &sh);
	nf = mp_wrappers_scan_fd(w, fd, MP_WRAPPERS_FULL_SCAN, full, MAX_FOUND, &sf);
	cr_log_info("%s: %d functions through the hash table (%u symbols scanned), %d by a scan "
		    "(%u symbols)",
		    what, nh, sh.symbols, nf, sf.symbols);
	cr_assert_gt(nf, 0, "%s", what);
	cr_assert_eq(nh, nf, "%s: %d functions through the hash table, %d by a scan", what, nh, nf);
	cr_assert_eq(memcmp(hashed, full, (size_t)nh * sizeof(*hashed)), 0, "%s", what);
	cr_assert_not(sf.hashed);
	for (size_t i = 0; o && i < o->n; i++)
		cr_assert(has_range(full, (size_t)nf, &o->ranges[i]), "%s: %s not found", what,
			  o->names[i]);
	mp_wrappers_free(w);
	if (o) {
		/* a hash table was used: no symbol scanned at all */
		cr_assert(sh.hashed, "%s: no hash table used", what);
		cr_assert_eq(sh.symbols, 0, "%s: %u symbols scanned", what, sh.symbols);
	}
}

static const char *const system_libs[] = {
	"/usr/lib/x86_64-linux-gnu/libstdc++.so.6",
	"/lib/x86_64-linux-gnu/libc.so.6",
	"/usr/lib/x86_64-linux-gnu/libpython3.11.so.1.0",
};

/* Exact names (--wrapper-fn, the default list's) through .gnu.hash find
 * what a scan of every symbol finds, on the system's own libraries, and
 * read no symbol table whole. */
Test(wrappers, hash_lookup_agrees_with_full_scan)
{
	size_t done = 0;

	for (size_t i = 0; i < sizeof(system_libs) / sizeof(*system_libs); i++) {
		struct object o;

		if (!object_open(&o, system_libs[i])) {
			cr_assert_gt(i, 1, "%s is missing", system_libs[i]);
			continue;
		}
		check_exact(o.fd, (const char *const *)o.names, o.n, &o, system_libs[i]);
		object_close(&o);
		done++;
	}
	cr_assert_geq(done, 2);
}

/* Globs still match: the default list in libstdc++ is operator new and
 * new[], every variant its .dynsym defines (counted with libelf). */
Test(wrappers, default_globs_find_operator_new)
{
	const char *path = system_libs[0];
	static struct mp_wrap_range r[MAX_FOUND];
	const struct mp_wrappers_opts opts = { 0 };
	struct mp_wrappers_scan st;
	struct mp_wrappers *w;
	Elf_Scn *scn = NULL;
	struct object o;
	GElf_Shdr sh;
	Elf_Data *d;
	int expect = 0, n;

	cr_assert(object_open(&o, path));
	while ((scn = elf_nextscn(o.elf, scn)))
		if (gelf_getshdr(scn, &sh) && sh.sh_type == SHT_DYNSYM)
			break;
	d = elf_getdata(scn, NULL);
	for (size_t i = 0; i < sh.sh_size / sh.sh_entsize; i++) {
		GElf_Sym s;
		const char *name;

		cr_assert_not_null(gelf_getsym(d, (int)i, &s));
		name = elf_strptr(o.elf, sh.sh_link, s.st_name);
		if (s.st_shndx != SHN_UNDEF && s.st_size && GELF_ST_TYPE(s.st_info) == STT_FUNC &&
		    name && (!fnmatch("_Znwm*", name, 0) || !fnmatch("_Znam*", name, 0)))
			expect++;
	}
	cr_assert_geq(expect, 4, "libstdc++ defines %d operator new", expect);
	cr_assert_eq(mp_wrappers_new(0, &opts, &w), 0);
	n = mp_wrappers_scan_fd(w, o.fd, 0, r, MAX_FOUND, &st);
	cr_assert_eq(n, expect, "%d functions found, libelf counts %d operator new", n, expect);
	cr_assert(st.hashed);
	cr_assert_not(st.symtab);
	mp_wrappers_free(w);
	object_close(&o);
}

/* A copy of @path in a memfd, with @fn applied to its .gnu.hash (@hash,
 * @len bytes). */
static int corrupted(const char *path, void (*fn)(uint32_t *hash, size_t len, uint32_t seed),
		     uint32_t seed)
{
	int in = open(path, O_RDONLY | O_CLOEXEC), fd = memfd_create("corrupt", MFD_CLOEXEC);
	struct stat st;
	uint8_t *m;
	Elf *elf;
	Elf_Scn *scn = NULL;
	GElf_Shdr sh;

	cr_assert_geq(in, 0);
	cr_assert_geq(fd, 0);
	cr_assert_eq(fstat(in, &st), 0);
	cr_assert_eq(ftruncate(fd, st.st_size), 0);
	m = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	cr_assert_neq(m, MAP_FAILED);
	cr_assert_eq(pread(in, m, (size_t)st.st_size, 0), st.st_size);
	cr_assert_not_null(elf = elf_begin(in, ELF_C_READ, NULL));
	while ((scn = elf_nextscn(elf, scn)))
		if (gelf_getshdr(scn, &sh) && sh.sh_type == SHT_GNU_HASH)
			break;
	cr_assert_not_null(scn, "%s: no .gnu.hash", path);
	fn((uint32_t *)(m + sh.sh_offset), sh.sh_size / 4, seed);
	elf_end(elf);
	munmap(m, (size_t)st.st_size);
	close(in);
	return fd;
}

static void no_buckets(uint32_t *h, size_t len, uint32_t seed)
{
	(void)len, (void)seed;
	h[0] = 0;
}

static void bloom_not_power_of_two(uint32_t *h, size_t len, uint32_t seed)
{
	(void)len, (void)seed;
	h[2] = 3;
}

static void table_past_its_end(uint32_t *h, size_t len, uint32_t seed)
{
	(void)len, (void)seed;
	h[0] = 0x40000000; /* buckets past the section */
}

static void buckets_past_dynsym(uint32_t *h, size_t len, uint32_t seed)
{
	size_t base = 4 + 2 * (size_t)h[2];

	(void)seed;
	for (size_t i = base; i < base + h[0] && i < len; i++)
		h[i] = 0x7fffffff;
}

/* every chain without its end, every hash matching nothing */
static void chains_without_end(uint32_t *h, size_t len, uint32_t seed)
{
	size_t chain = 4 + 2 * (size_t)h[2] + h[0];

	(void)seed;
	for (size_t i = chain; i < len; i++)
		h[i] &= ~1u;
	for (size_t i = 4; i < 4 + 2 * (size_t)h[2]; i++)
		h[i] = ~0u; /* the bloom filter lets every name through */
}

static void garbage(uint32_t *h, size_t len, uint32_t seed)
{
	for (size_t i = 0; i < len; i++) {
		seed = seed * 1103515245 + 12345;
		h[i] = seed >> 3;
	}
}

/* A corrupt hash table is noticed, and the names are found by a scan
 * instead; garbage that passes for a table finds nothing a scan does not.
 * Every read bounded: the test ends. */
Test(wrappers, corrupt_hash_table_falls_back_to_a_scan)
{
	static void (*const broken[])(uint32_t *, size_t,
				      uint32_t) = { no_buckets, bloom_not_power_of_two,
						    table_past_its_end, buckets_past_dynsym,
						    chains_without_end };
	static struct mp_wrap_range r[MAX_FOUND], want[MAX_FOUND];
	const char *path = system_libs[0];
	struct mp_wrappers_opts opts = { .no_default = true };
	struct mp_wrappers_scan st;
	struct mp_wrappers *w;
	struct object o;
	int nw, n;

	cr_assert(object_open(&o, path));
	opts.fn_globs = (const char *const *)o.names;
	opts.n_fn = o.n;
	cr_assert_eq(mp_wrappers_new(0, &opts, &w), 0);
	nw = mp_wrappers_scan_fd(w, o.fd, MP_WRAPPERS_FULL_SCAN, want, MAX_FOUND, NULL);
	cr_assert_geq(nw, (int)o.n);
	for (size_t i = 0; i < sizeof(broken) / sizeof(*broken); i++) {
		int fd = corrupted(path, broken[i], 0);

		n = mp_wrappers_scan_fd(w, fd, 0, r, MAX_FOUND, &st);
		cr_assert(st.hash_bad && !st.hashed, "corruption %zu not noticed", i);
		cr_assert_eq(n, nw, "corruption %zu: %d functions, a scan finds %d", i, n, nw);
		cr_assert_eq(memcmp(r, want, (size_t)n * sizeof(*r)), 0);
		close(fd);
	}
	for (uint32_t seed = 1; seed <= 20; seed++) {
		int fd = corrupted(path, garbage, seed);

		n = mp_wrappers_scan_fd(w, fd, 0, r, MAX_FOUND, &st);
		cr_assert_leq(n, nw);
		for (int k = 0; k < n; k++)
			cr_assert(has_range(want, (size_t)nw, &r[k]),
				  "seed %u: a function no scan finds", seed);
		close(fd);
	}
	mp_wrappers_free(w);
	object_close(&o);
}

/* Not ELF, or truncated: refused, nothing read past the end. */
Test(wrappers, not_elf_refused)
{
	static const char junk[] = "\177ELF\002\001\001 not really";
	struct mp_wrap_range r[4];
	const struct mp_wrappers_opts opts = { 0 };
	struct mp_wrappers *w;
	int fd = memfd_create("junk", MFD_CLOEXEC);

	cr_assert_geq(fd, 0);
	cr_assert_eq(mp_wrappers_new(0, &opts, &w), 0);
	cr_assert_eq(mp_wrappers_scan_fd(w, fd, 0, r, 4, NULL), -ENOEXEC, "an empty file");
	cr_assert_eq(write(fd, junk, sizeof(junk)), (ssize_t)sizeof(junk));
	cr_assert_eq(mp_wrappers_scan_fd(w, fd, 0, r, 4, NULL), -ENOEXEC, "a header cut short");
	mp_wrappers_free(w);
	close(fd);
}

/* Resolution a step at a time: the object holding the address given is
 * resolved in the first step, the rest follow, and the result is what a
 * whole update resolves. */
Test(wrappers, steps_resolve_what_an_update_does)
{
	const char *fns[] = { "getppid", "get*id" };
	const struct mp_wrappers_opts o = { .fn_globs = fns, .n_fn = 2, .no_default = true };
	struct mp_procmaps *maps = NULL;
	struct mp_wrappers *w, *whole = resolved(&o);
	uint64_t m = (uint64_t)(uintptr_t)&getppid;
	struct mp_wrap_range a[16], b[16];
	struct mp_wrappers_cost cost;
	uint32_t nf[2], no[2];
	int steps = 0;

	cr_assert_eq(mp_procmaps_read(getpid(), &maps), 0);
	cr_assert_eq(mp_wrappers_new(0, &o, &w), 0);
	cr_assert_eq(mp_wrappers_step(w, maps, m, 0), 1);
	cr_assert(mp_wrappers_has(w, m), "the object at the address given is resolved first");
	while (mp_wrappers_pending(w)) {
		cr_assert_geq(mp_wrappers_step(w, NULL, 0, UINT64_MAX), 0);
		cr_assert_lt(++steps, 1000);
	}
	cr_assert_eq(mp_wrappers_step(w, maps, 0, UINT64_MAX), 0, "nothing new");
	mp_wrappers_counts(w, &nf[0], &no[0]);
	mp_wrappers_counts(whole, &nf[1], &no[1]);
	cr_assert_eq(nf[0], nf[1]);
	cr_assert_eq(no[0], no[1]);
	cr_assert_eq(mp_wrappers_coarse(w, a, 16), mp_wrappers_coarse(whole, b, 16));
	cr_assert_eq(memcmp(a, b, mp_wrappers_coarse(w, a, 16) * sizeof(*a)), 0);
	mp_wrappers_cost(w, &cost);
	cr_assert_geq(cost.objects, 1);
	cr_assert_gt(cost.wall_ns, 0);
	mp_wrappers_free(whole);
	mp_wrappers_free(w);
	mp_procmaps_free(maps);
}
