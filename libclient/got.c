/* SPDX-License-Identifier: MIT */
/*
 * Injection (inject.h has the contract of memprof__inject): libmemprof was
 * dlopen'ed into a running process, out of its global scope, so no call of
 * the program reaches its malloc. This points the GOT slots of the malloc
 * family (JUMP_SLOT and GLOB_DAT relocations) of every loaded object at
 * libmemprof's definitions, which forward to the process's own allocator,
 * and hooks dlopen the same way so that the objects loaded later, with
 * RTLD_DEEPBIND too, are patched when their dlopen returns.
 *
 * Preloaded (or linked ahead of the allocator), libmemprof's malloc is the
 * process's and every object binds to it, but one loaded with
 * RTLD_DEEPBIND binds the allocator of its own scope (libc's) first. The
 * library's dlopen passes every other call straight to libc's (a jump: the
 * loader sees the program's call site, whose RUNPATH it searches) and,
 * after a deep-bound load, patches the new objects' slots that hold the
 * allocator libmemprof forwards to.
 *
 * Rules: never allocate (the allocator may be unusable when this runs), no
 * lock of our own but one flag that keeps two scans apart, no log, no
 * abort; read an object's tables only within its loaded segments and the
 * sizes its dynamic section gives; write a slot only when it holds the
 * function we forward to (or is a lazy slot still pointing into its own
 * object): a slot bound elsewhere (an object with its own allocator, a
 * deep-bound one next to another allocator) is left alone, because blocks
 * its allocator already handed out would reach ours.
 */
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <limits.h>
#include <link.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <unistd.h>

#include "inject.h"

#define LOAD(p, mo) __atomic_load_n((p), __ATOMIC_##mo)
#define STORE(p, v, mo) __atomic_store_n((p), (v), __ATOMIC_##mo)

#if defined(__x86_64__)
#define R_JUMP_SLOT R_X86_64_JUMP_SLOT
#define R_GLOB_DAT R_X86_64_GLOB_DAT
#elif defined(__aarch64__)
#define R_JUMP_SLOT R_AARCH64_JUMP_SLOT
#define R_GLOB_DAT R_AARCH64_GLOB_DAT
#else
#define NO_GOT 1 /* memprof__inject: -ENOTSUP */
#define R_JUMP_SLOT UINT32_MAX
#define R_GLOB_DAT UINT32_MAX
#endif

/* The hooked names; the allocator's come first. */
enum {
	H_MALLOC,
	H_FREE,
	H_CALLOC,
	H_REALLOC,
	H_REALLOCARRAY,
	H_POSIX_MEMALIGN,
	H_ALIGNED_ALLOC,
	H_MEMALIGN,
	H_VALLOC,
	H_PVALLOC,
	H_MALLOC_USABLE_SIZE,
	H_ALLOC_N,
	H_DLOPEN = H_ALLOC_N,
	H_DLCLOSE,
	H_N
};

static const char *const hook_name[H_N] = {
	"malloc",	 "free",     "calloc", "realloc", "reallocarray",	"posix_memalign",
	"aligned_alloc", "memalign", "valloc", "pvalloc", "malloc_usable_size", "dlopen",
	"dlclose",
};

/* Set once by the first memprof__inject, or the first deep-bound dlopen
 * of a process whose malloc is ours (preloaded), before any slot is
 * written. */
static bool ready;
static bool preloaded;
static uintptr_t ours[H_N];
/* The process's first definition of each name: what a slot to patch holds;
 * and where a non-PIE executable takes its address, that executable's PLT
 * entry, which the other objects' GLOB_DAT slots hold (0: none). */
static uintptr_t theirs[H_N], theirs_plt[H_N];
/* What our dlopen hook and dlclose call: libc's, the next after us in our
 * own scope. A slot holding it is patched too (a deep-bound object's). */
static uintptr_t libc_dl[H_N];
static void *(*libc_dlopen)(const char *, int);
static void *self_lm;
static uintptr_t vdso;
static uintptr_t page_size;

MP_HIDDEN uint64_t mp_inject_objects;
MP_HIDDEN uint64_t mp_inject_slots;
MP_HIDDEN uint64_t mp_inject_foreign;

/* ---- the objects patched so far ---- */

/* Keyed by load address and dynamic section. Forgotten when an object was
 * unloaded since (another may now sit at its address); full, a scan still
 * patches every object, it only parses them again next time. */
#define KNOWN_MAX 1024
static struct known {
	uintptr_t base, dyn;
	uint32_t slots;
} known[KNOWN_MAX];
static unsigned known_n;
static unsigned long long seen_adds, seen_subs;

/* One scan at a time (scan_busy); a dlopen returning while another thread
 * scans sets scan_pending and leaves its objects to that scan. */
static int scan_busy, scan_pending;

/* ---- reading an object within its segments ---- */

/* Whether [@a, @a + @len) lies in one loaded segment with @flag. */
static bool within(const struct dl_phdr_info *info, uintptr_t a, size_t len, ElfW(Word) flag)
{
	for (size_t i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		uintptr_t lo = info->dlpi_addr + ph->p_vaddr;

		if (ph->p_type == PT_LOAD && (ph->p_flags & flag) && a >= lo &&
		    a - lo <= ph->p_memsz && len <= ph->p_memsz - (a - lo))
			return true;
	}
	return false;
}

/* A d_ptr of the object's dynamic section, @len bytes readable there:
 * glibc relocates them in place (not in the vDSO, not on every
 * architecture), so either the value or the value plus the load address;
 * 0 when neither lies in the object. */
static uintptr_t dyn_ptr(const struct dl_phdr_info *info, uintptr_t v, size_t len)
{
	if (!v)
		return 0;
	if (within(info, v, len, PF_R))
		return v;
	if (within(info, v + info->dlpi_addr, len, PF_R))
		return v + info->dlpi_addr;
	return 0;
}

struct dyninfo {
	const ElfW(Sym) * sym;
	size_t nsym; /* 0: unknown, each symbol checked */
	const char *str;
	size_t strsz;
	const ElfW(Rela) * rel[2];
	size_t nrel[2];
};

/* The number of dynamic symbols, from DT_HASH's chain count or from the
 * highest index DT_GNU_HASH reaches; 0 when neither can be read. */
static size_t count_syms(const struct dl_phdr_info *info, uintptr_t hash, uintptr_t gnu)
{
	const uint32_t *g, *bucket, *chain;
	uint32_t nbucket, off, nbloom, max = 0;

	if ((hash = dyn_ptr(info, hash, 8)))
		return ((const uint32_t *)hash)[1];
	if (!(gnu = dyn_ptr(info, gnu, 16)))
		return 0;
	g = (const uint32_t *)gnu;
	nbucket = g[0];
	off = g[1];
	nbloom = g[2];
	bucket = (const uint32_t *)(gnu + 16 + (uintptr_t)nbloom * sizeof(ElfW(Addr)));
	if (nbucket > (1u << 24) || nbloom > (1u << 24) ||
	    !within(info, (uintptr_t)bucket, (size_t)nbucket * 4, PF_R))
		return 0;
	for (uint32_t i = 0; i < nbucket; i++)
		if (bucket[i] > max)
			max = bucket[i];
	if (max < off)
		return off;
	chain = bucket + nbucket;
	for (;;) {
		if (!within(info, (uintptr_t)&chain[max - off], 4, PF_R))
			return 0;
		if (chain[max - off] & 1)
			return (size_t)max + 1;
		if (++max == 0)
			return 0;
	}
}

/* The tables of the object's dynamic section @ph; false when they cannot
 * be read (no symbols, or REL rather than RELA relocations). */
static bool read_dynamic(const struct dl_phdr_info *info, const ElfW(Phdr) * ph, struct dyninfo *d)
{
	const ElfW(Dyn) *dyn = (const ElfW(Dyn) *)(info->dlpi_addr + ph->p_vaddr);
	size_t n = ph->p_memsz / sizeof(*dyn), relasz = 0, pltsz = 0, relacount = 0;
	uintptr_t symtab = 0, strtab = 0, rela = 0, jmprel = 0, hash = 0, gnu = 0;
	bool plt_rela = true;

	memset(d, 0, sizeof(*d));
	if (!within(info, (uintptr_t)dyn, n * sizeof(*dyn), PF_R))
		return false;
	for (size_t i = 0; i < n && dyn[i].d_tag != DT_NULL; i++) {
		uintptr_t v = dyn[i].d_un.d_ptr;

		switch (dyn[i].d_tag) {
		case DT_SYMTAB:
			symtab = v;
			break;
		case DT_STRTAB:
			strtab = v;
			break;
		case DT_STRSZ:
			d->strsz = v;
			break;
		case DT_RELA:
			rela = v;
			break;
		case DT_RELASZ:
			relasz = v;
			break;
		case DT_RELACOUNT:
			relacount = v;
			break;
		case DT_JMPREL:
			jmprel = v;
			break;
		case DT_PLTRELSZ:
			pltsz = v;
			break;
		case DT_PLTREL:
			plt_rela = v == DT_RELA;
			break;
		case DT_HASH:
			hash = v;
			break;
		case DT_GNU_HASH:
			gnu = v;
			break;
		case DT_SYMENT:
			if (v != sizeof(ElfW(Sym)))
				return false;
			break;
		case DT_RELAENT:
			if (v != sizeof(ElfW(Rela)))
				return false;
			break;
		default:
			break;
		}
	}
	d->str = (const char *)dyn_ptr(info, strtab, d->strsz);
	d->sym = (const ElfW(Sym) *)dyn_ptr(info, symtab, sizeof(ElfW(Sym)));
	if (!d->str || !d->sym)
		return false;
	d->nsym = count_syms(info, hash, gnu);
	if (d->nsym && !within(info, (uintptr_t)d->sym, d->nsym * sizeof(ElfW(Sym)), PF_R))
		d->nsym = 0;
	/* the relative relocations come first: DT_RELACOUNT of them */
	relasz /= sizeof(ElfW(Rela));
	if (relacount > relasz)
		relacount = relasz;
	d->rel[0] = (const ElfW(Rela) *)dyn_ptr(info, rela, relasz * sizeof(ElfW(Rela)));
	d->nrel[0] = d->rel[0] ? relasz - relacount : 0;
	if (d->rel[0])
		d->rel[0] += relacount;
	pltsz /= sizeof(ElfW(Rela));
	d->rel[1] = plt_rela ?
			    (const ElfW(Rela) *)dyn_ptr(info, jmprel, pltsz * sizeof(ElfW(Rela))) :
			    NULL;
	d->nrel[1] = d->rel[1] ? pltsz : 0;
	return true;
}

/* The hook of symbol @i, -1 when none. */
static int hook_of(const struct dl_phdr_info *info, const struct dyninfo *d, size_t i)
{
	const ElfW(Sym) *s = &d->sym[i];
	const char *name;
	size_t room;

	if (d->nsym ? i >= d->nsym : !within(info, (uintptr_t)s, sizeof(*s), PF_R))
		return -1;
	if (s->st_name >= d->strsz)
		return -1;
	name = d->str + s->st_name;
	room = d->strsz - s->st_name;
	/* every hooked name starts with one of these */
	if (!name[0] || !strchr("acdfmprv", name[0]))
		return -1;
	for (int h = 0; h < H_N; h++) {
		size_t len = strlen(hook_name[h]);

		if (len < room && !memcmp(name, hook_name[h], len + 1))
			return h;
	}
	return -1;
}

/* ---- patching one object ---- */

struct obj {
	const struct dl_phdr_info *info;
	uintptr_t relro_lo, relro_hi; /* the pages glibc made read-only */
	bool foreign; /* its allocator slots bind to another allocator */
	uint32_t slots; /* slots pointing to us */
	int err;
};

enum { S_LEAVE, S_OURS, S_PATCH, S_FOREIGN };

static int classify(const struct obj *o, int h, uintptr_t v, uint32_t type)
{
	if (!v)
		return S_LEAVE; /* an undefined weak reference */
	if (v == ours[h])
		return S_OURS;
	if (v == theirs[h] || (theirs_plt[h] && v == theirs_plt[h]) ||
	    (libc_dl[h] && v == libc_dl[h]))
		return S_PATCH;
	/* lazy binding: not yet resolved, back into its own PLT */
	if (type == R_JUMP_SLOT && within(o->info, v, 1, PF_X))
		return S_PATCH;
	return S_FOREIGN;
}

static int write_slot(const struct obj *o, uintptr_t *slot, uintptr_t v)
{
	uintptr_t page = (uintptr_t)slot & ~(page_size - 1);
	bool ro = page >= o->relro_lo && page < o->relro_hi;

	if (ro && mprotect((void *)page, page_size, PROT_READ | PROT_WRITE))
		return -errno;
	STORE(slot, v, RELAXED);
	if (ro)
		mprotect((void *)page, page_size, PROT_READ);
	return 0;
}

/* Pass 0 finds whether the object's allocator slots are bound to another
 * allocator; pass 1 writes. */
static void walk(struct obj *o, const struct dyninfo *d, int pass)
{
	const struct dl_phdr_info *info = o->info;

	for (int t = 0; t < 2; t++) {
		for (size_t i = 0; i < d->nrel[t]; i++) {
			const ElfW(Rela) *r = &d->rel[t][i];
			uint32_t type = ELF64_R_TYPE(r->r_info);
			uintptr_t *slot;
			int h, c;

			if (type != R_JUMP_SLOT && type != R_GLOB_DAT)
				continue;
			if ((h = hook_of(info, d, ELF64_R_SYM(r->r_info))) < 0)
				continue;
			slot = (uintptr_t *)(info->dlpi_addr + r->r_offset);
			if ((uintptr_t)slot % sizeof(*slot) ||
			    !within(info, (uintptr_t)slot, sizeof(*slot), PF_W))
				continue;
			c = classify(o, h, LOAD(slot, RELAXED), type);
			if (pass == 0) {
				if (c == S_FOREIGN && h < H_ALLOC_N)
					o->foreign = true;
				continue;
			}
			if (c == S_OURS) {
				o->slots++;
			} else if (c == S_PATCH && !(o->foreign && h < H_ALLOC_N)) {
				int e = write_slot(o, slot, ours[h]);

				if (e)
					o->err = e;
				else
					o->slots++;
			}
		}
	}
}

static void patch_object(struct obj *o, const ElfW(Phdr) * dyn, const ElfW(Phdr) * relro)
{
	struct dyninfo d;

	if (relro) {
		uintptr_t a = o->info->dlpi_addr + relro->p_vaddr;

		o->relro_lo = a & ~(page_size - 1);
		o->relro_hi = (a + relro->p_memsz) & ~(page_size - 1);
	}
	if (!read_dynamic(o->info, dyn, &d))
		return;
	walk(o, &d, 0);
	walk(o, &d, 1);
}

/* ---- the scan of every loaded object ---- */

struct scan {
	bool quick; /* stop at once when nothing was loaded or unloaded */
	bool first;
	bool unchanged;
	uint64_t objects, slots, foreign;
};

/* Whether the object is in the base namespace, the one the process's
 * allocator serves: an object of a dlmopen namespace has its own libc and
 * heap. The list only changes under the lock dl_iterate_phdr holds. */
static bool base_namespace(uintptr_t base, uintptr_t dyn)
{
	for (const struct link_map *l = _r_debug.r_map; l; l = l->l_next)
		if (l->l_addr == base && (uintptr_t)l->l_ld == dyn)
			return true;
	return false;
}

static struct known *known_find(uintptr_t base, uintptr_t dyn)
{
	for (unsigned i = 0; i < known_n; i++)
		if (known[i].base == base && known[i].dyn == dyn)
			return &known[i];
	return NULL;
}

static int scan_object(struct dl_phdr_info *info, size_t size, void *data)
{
	struct scan *sc = data;
	const ElfW(Phdr) *dyn = NULL, *relro = NULL;
	struct obj o = { .info = info };
	uintptr_t dyn_addr;
	struct known *k;

	if (sc->first) {
		bool counted =
			size >= offsetof(struct dl_phdr_info, dlpi_subs) + sizeof(info->dlpi_subs);

		sc->first = false;
		if (counted && sc->quick && info->dlpi_adds == seen_adds &&
		    info->dlpi_subs == seen_subs) {
			sc->unchanged = true;
			return 1;
		}
		if (!counted || info->dlpi_subs != seen_subs)
			known_n = 0;
		if (counted) {
			seen_adds = info->dlpi_adds;
			seen_subs = info->dlpi_subs;
		}
	}
	for (size_t i = 0; i < info->dlpi_phnum; i++) {
		if (info->dlpi_phdr[i].p_type == PT_DYNAMIC)
			dyn = &info->dlpi_phdr[i];
		else if (info->dlpi_phdr[i].p_type == PT_GNU_RELRO)
			relro = &info->dlpi_phdr[i];
	}
	if (!dyn)
		return 0;
	dyn_addr = info->dlpi_addr + dyn->p_vaddr;
	/* libmemprof itself, the vDSO */
	if (within(info, ours[H_MALLOC], 1, PF_X) || (vdso && within(info, vdso, 1, PF_R)))
		return 0;
	if (!base_namespace(info->dlpi_addr, dyn_addr))
		return 0;
	if ((k = known_find(info->dlpi_addr, dyn_addr))) {
		sc->objects += k->slots > 0;
		sc->slots += k->slots;
		return 0;
	}
	patch_object(&o, dyn, relro);
	sc->objects += o.slots > 0;
	sc->slots += o.slots;
	sc->foreign += o.foreign;
	/* an object a write failed in is parsed again next time */
	if (!o.err && known_n < KNOWN_MAX)
		known[known_n++] = (struct known){ info->dlpi_addr, dyn_addr, o.slots };
	return 0;
}

/* With scan_busy held. */
static uint64_t scan(bool quick)
{
	struct scan sc = { .quick = quick, .first = true };
	int saved = errno;

	dl_iterate_phdr(scan_object, &sc);
	errno = saved;
	if (sc.unchanged)
		return LOAD(&mp_inject_slots, RELAXED);
	STORE(&mp_inject_objects, sc.objects, RELAXED);
	STORE(&mp_inject_foreign, sc.foreign, RELAXED);
	STORE(&mp_inject_slots, sc.slots, RELAXED);
	return sc.slots;
}

static bool try_busy(void)
{
	int b = 0;

	return __atomic_compare_exchange_n(&scan_busy, &b, 1, false, __ATOMIC_ACQUIRE,
					   __ATOMIC_RELAXED);
}

/* After a dlopen: patch what it loaded. No thread waits on another: one
 * that finds a scan under way leaves its objects to it (scan_pending),
 * which scans again before it lets go; such a dlopen may then return a
 * moment before its objects are patched (their first calls unrecorded,
 * still served by the same allocator). */
static void rescan(void)
{
	/* nothing to patch for until a setup succeeded */
	if (!LOAD(&ready, ACQUIRE))
		return;
	STORE(&scan_pending, 1, RELEASE);
	while (LOAD(&scan_pending, ACQUIRE)) {
		if (!try_busy())
			return;
		while (__atomic_exchange_n(&scan_pending, 0, __ATOMIC_ACQ_REL))
			scan(true);
		STORE(&scan_busy, 0, RELEASE);
	}
}

/* ---- dlopen, as the program calls it ---- */

/* glibc's dlopen searches the calling object's RPATH and RUNPATH for a
 * bare name, and the caller of libc's dlopen is now this library. So the
 * directories the program's caller would search (RTLD_DI_SERINFO), up to
 * the last one this library would not, are tried first, in its order. */
static bool serinfo(void *lm, Dl_serinfo *si, size_t room)
{
	Dl_serinfo size;

	if (dlinfo(lm, RTLD_DI_SERINFOSIZE, &size) || size.dls_size > room)
		return false;
	si->dls_size = size.dls_size;
	si->dls_cnt = size.dls_cnt;
	return dlinfo(lm, RTLD_DI_SERINFO, si) == 0;
}

static bool searched(const Dl_serinfo *si, const char *dir)
{
	for (unsigned i = 0; i < si->dls_cnt; i++)
		if (!strcmp(si->dls_serpath[i].dls_name, dir))
			return true;
	return false;
}

#define SERINFO_ROOM 4096

static void *open_as(const void *caller, const char *file, int mode)
{
	union {
		Dl_serinfo si;
		char room[SERINFO_ROOM];
	} theirs_, ours_;
	char path[PATH_MAX];
	Dl_info di;
	void *lm = NULL, *h;
	size_t flen;
	int last = -1;

	if (!file || strchr(file, '/'))
		return libc_dlopen(file, mode);
	if ((h = libc_dlopen(file, mode | RTLD_NOLOAD)))
		return h;
	(void)dlerror();
	if (!dladdr1(caller, &di, &lm, RTLD_DL_LINKMAP) || !lm || lm == self_lm ||
	    !serinfo(lm, &theirs_.si, sizeof(theirs_)) ||
	    !serinfo(self_lm, &ours_.si, sizeof(ours_)))
		return libc_dlopen(file, mode);
	for (unsigned i = 0; i < theirs_.si.dls_cnt; i++)
		if (!searched(&ours_.si, theirs_.si.dls_serpath[i].dls_name))
			last = (int)i;
	flen = strlen(file);
	for (int i = 0; i <= last; i++) {
		const char *dir = theirs_.si.dls_serpath[i].dls_name;
		size_t dlen = strlen(dir);

		if (dlen + 1 + flen >= sizeof(path))
			continue;
		memcpy(path, dir, dlen);
		path[dlen] = '/';
		memcpy(path + dlen + 1, file, flen + 1);
		if (access(path, F_OK))
			continue;
		if ((h = libc_dlopen(path, mode)))
			return h;
		(void)dlerror();
	}
	return libc_dlopen(file, mode);
}

/* What the patched dlopen slots point to. */
static void *hook_dlopen(const char *file, int mode)
{
	void *h = open_as(__builtin_return_address(0), file, mode);

	if (h)
		rescan();
	return h;
}

/* ---- dlopen, exported: where libmemprof is first in lookup order ---- */

MP_HIDDEN void *mp_next_dlopen;
MP_HIDDEN void *mp_dlopen_deep(const char *file, int mode);
static int setup_preloaded(void);

#if defined(__x86_64__)
/* Every call but a deep-bound one jumps to libc's dlopen with the caller's
 * return address in place; a deep-bound one, or one before libc's is
 * known, jumps to mp_dlopen_deep(), which finds the caller there too. */
_Static_assert(RTLD_DEEPBIND == 8, "the test below");
__asm__(".text\n"
	".globl dlopen\n"
	".type dlopen, @function\n"
	"dlopen:\n"
	".cfi_startproc\n"
	"	testl $8, %esi\n"
	"	jnz mp_dlopen_deep\n"
	"	movq mp_next_dlopen(%rip), %rax\n"
	"	testq %rax, %rax\n"
	"	jz mp_dlopen_deep\n"
	"	jmp *%rax\n"
	".cfi_endproc\n"
	".size dlopen, .-dlopen\n");
#endif

/* libc's dlopen, known before the program's first call where libmemprof
 * is preloaded or linked (a constructor that runs earlier takes the slow
 * way once). */
__attribute__((constructor)) static void got_load(void)
{
	void *f = dlsym(RTLD_NEXT, "dlopen");

	if (f) {
		STORE(&libc_dlopen, (void *(*)(const char *, int))f, RELEASE);
		STORE(&mp_next_dlopen, f, RELEASE);
	}
}

MP_HIDDEN void *mp_dlopen_deep(const char *file, int mode)
{
	const void *caller = __builtin_return_address(0);
	void *h;

	if (!LOAD(&libc_dlopen, ACQUIRE)) {
		void *f = dlsym(RTLD_NEXT, "dlopen");

		if (!f)
			return NULL;
		STORE(&libc_dlopen, (void *(*)(const char *, int))f, RELEASE);
		STORE(&mp_next_dlopen, f, RELEASE);
	}
	h = open_as(caller, file, mode);
	if (!h || !(mode & RTLD_DEEPBIND))
		return h;
	/* injected: the slots that reach here are already patched ones */
	if (LOAD(&ready, ACQUIRE) && !LOAD(&preloaded, RELAXED))
		return h;
	if (!try_busy()) {
		rescan();
		return h;
	}
	/* a process whose malloc is not ours (another allocator ahead of a
	 * linked libmemprof, not injected) gets nothing patched */
	if (LOAD(&ready, ACQUIRE) || setup_preloaded() == 0)
		scan(true);
	STORE(&scan_busy, 0, RELEASE);
	rescan();
	return h;
}

/* ---- the entry point ---- */

/* What both uses share: our definitions, libc's dlopen and dlclose. */
static int setup_common(void)
{
	static const void *const own[H_N] = {
		(void *)mp_own_malloc,
		(void *)mp_own_free,
		(void *)mp_own_calloc,
		(void *)mp_own_realloc,
		(void *)mp_own_reallocarray,
		(void *)mp_own_posix_memalign,
		(void *)mp_own_aligned_alloc,
		(void *)mp_own_memalign,
		(void *)mp_own_valloc,
		(void *)mp_own_pvalloc,
		(void *)mp_own_malloc_usable_size,
		(void *)hook_dlopen,
		(void *)mp_own_dlclose,
	};
	void *dl = dlsym(RTLD_NEXT, "dlopen");
	Dl_info di;

#ifdef NO_GOT
	return -ENOTSUP;
#endif
	for (int h = 0; h < H_N; h++)
		ours[h] = (uintptr_t)own[h];
	if (!dl || !dladdr1((void *)memprof__inject, &di, &self_lm, RTLD_DL_LINKMAP))
		return -ENOENT;
	STORE(&libc_dlopen, (void *(*)(const char *, int))dl, RELEASE);
	STORE(&mp_next_dlopen, dl, RELEASE);
	libc_dl[H_DLOPEN] = (uintptr_t)dl;
	libc_dl[H_DLCLOSE] = (uintptr_t)dlsym(RTLD_NEXT, "dlclose");
	vdso = getauxval(AT_SYSINFO_EHDR);
	page_size = (uintptr_t)sysconf(_SC_PAGESIZE);
	return 0;
}

/* Injected: the slots to patch hold the process's first definitions. */
static int setup(void)
{
	int r;

	if (dlsym(RTLD_DEFAULT, "malloc") == (void *)mp_own_malloc)
		return -EALREADY;
	if ((r = setup_common()))
		return r;
	for (int h = 0; h < H_N; h++) {
		void *d = dlsym(RTLD_DEFAULT, hook_name[h]), *f = mp_default_sym(hook_name[h]);

		/* a canonical PLT entry standing for nothing we can find */
		if (d && !f)
			return -ENOTSUP;
		theirs[h] = (uintptr_t)f;
		theirs_plt[h] = d != f ? (uintptr_t)d : 0;
	}
	if ((r = mp_interpose_inject()) < 0)
		return r;
	STORE(&ready, true, RELEASE);
	return 0;
}

/* Preloaded: the slots to patch hold what the interposer forwards to, the
 * definitions after libmemprof in lookup order (an allocator without one
 * of the functions forwards it to its own memalign: such a slot is another
 * allocator's, left alone). With scan_busy held. */
static int setup_preloaded(void)
{
	Dl_info m, f;
	int r = setup_common();

	if (r)
		return r;
	if (dlsym(RTLD_DEFAULT, "malloc") != (void *)mp_own_malloc)
		return -ENOENT;
	theirs[H_MALLOC] = (uintptr_t)dlsym(RTLD_NEXT, "malloc");
	if (!theirs[H_MALLOC] || !dladdr((void *)theirs[H_MALLOC], &m))
		return -ENOENT;
	for (int h = H_FREE; h < H_ALLOC_N; h++) {
		void *d = dlsym(RTLD_NEXT, hook_name[h]);

		if (d && dladdr(d, &f) && f.dli_fbase == m.dli_fbase)
			theirs[h] = (uintptr_t)d;
	}
	STORE(&preloaded, true, RELAXED);
	STORE(&ready, true, RELEASE);
	return 0;
}

__attribute__((visibility("default"))) int memprof__inject(void)
{
	uint64_t n;
	int r = 0;

	if (!try_busy())
		return -EAGAIN;
	if (!LOAD(&ready, ACQUIRE))
		r = setup();
	if (r == 0) {
		n = scan(false);
		r = n > INT_MAX ? INT_MAX : (int)n;
	}
	STORE(&scan_busy, 0, RELEASE);
	return r;
}
