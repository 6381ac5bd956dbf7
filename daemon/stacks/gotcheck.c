// SPDX-License-Identifier: MIT
/*
 * Which objects call the allocator past the in-process interposer: the
 * allocator entry points an object imports are reached through its GOT
 * slots (JUMP_SLOT, GLOB_DAT relocations), and libmemprof sees a call only
 * when the slot holds its own function. The object's file says where its
 * slots are; the process's memory (/proc/PID/mem) says what they hold, and
 * the object a slot points into says whether that is a definition of the
 * function. The files and the memory are the target's: every count and
 * offset is bounded.
 */
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "gotcheck.h"
#include "modules.h"

/* Relocations of one object past this are not read (a large C++ library
 * has some 10^5), nor slots of allocator entry points past MAX_SLOTS (a
 * real object has a handful; each is a read of the process's memory). */
#define MAX_RELOCS (4u << 20)
#define MAX_SLOTS 256

/* The entry points whose calls the interposer (or a probe) takes, and glibc's own
 * names of its allocator (a call to those is never the interposer's). */
static const char *const entry_points[] = {
	"malloc",	  "free",	   "calloc",	    "realloc",	      "reallocarray",
	"posix_memalign", "aligned_alloc", "memalign",	    "valloc",	      "pvalloc",
	"__libc_malloc",  "__libc_free",   "__libc_calloc", "__libc_realloc", "__libc_memalign",
};

static bool is_entry_point(const char *name)
{
	for (size_t i = 0; i < sizeof(entry_points) / sizeof(entry_points[0]); i++)
		if (!strcmp(name, entry_points[i]))
			return true;
	return false;
}

static const char *base_name(const char *p)
{
	const char *s = strrchr(p, '/');

	return s ? s + 1 : p;
}

/* Whether @v lies in a mapping of the object @m belongs to (same file),
 * as an unbound lazy slot points back into its own PLT. */
static bool in_object(const struct mp_procmaps *maps, const struct mp_mapping *m, uint64_t v)
{
	const struct mp_mapping *t = mp_procmaps_find(maps, v);

	return t && t->inode == m->inode && t->dev_major == m->dev_major &&
	       t->dev_minor == m->dev_minor && !strcmp(t->path, m->path);
}

/* Whether @v is where object @t (a mapping of process @pid) defines a
 * function: not so for the PLT entry of an executable that takes a
 * function's address (its canonical address, which every GOT then holds,
 * and which goes on through the executable's own slot). An object that
 * cannot be read is taken to define it. */
static bool defines(pid_t pid, const struct mp_mapping *t, uint64_t v)
{
	char opened[PATH_MAX + 32];
	Elf_Scn *scn = NULL;
	bool found = true;
	uint64_t bias;
	Elf *elf;
	int fd;

	fd = mp_object_open(t, pid, opened, sizeof(opened));
	if (fd < 0)
		return true;
	elf = elf_begin(fd, ELF_C_READ_MMAP, NULL);
	if (!elf || elf_kind(elf) != ELF_K_ELF || mp_mapping_bias(elf, t, &bias) < 0)
		goto out;
	while ((scn = elf_nextscn(elf, scn))) {
		GElf_Shdr sh;
		Elf_Data *d;

		if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_DYNSYM || !sh.sh_entsize ||
		    !(d = elf_getdata(scn, NULL)))
			continue;
		found = false;
		for (size_t i = 0; i < d->d_size / sh.sh_entsize && i < MAX_RELOCS; i++) {
			GElf_Sym sym;

			if (!gelf_getsym(d, (int)i, &sym))
				break;
			if (sym.st_shndx != SHN_UNDEF && sym.st_value &&
			    (GELF_ST_TYPE(sym.st_info) == STT_FUNC ||
			     GELF_ST_TYPE(sym.st_info) == STT_GNU_IFUNC) &&
			    bias + sym.st_value == v) {
				found = true;
				break;
			}
		}
		break;
	}
out:
	if (elf)
		elf_end(elf);
	close(fd);
	return found;
}

/* One relocation section: the first slot holding neither ours, nor the
 * object's own code, nor 0 (an undefined weak reference). */
static int check_section(const struct mp_gotcheck *g, Elf *elf, Elf_Scn *scn, const GElf_Shdr *sh,
			 uint64_t bias, const struct mp_mapping *m, char *ret, size_t cap)
{
	Elf_Data *d = elf_getdata(scn, NULL);
	Elf_Scn *symscn = elf_getscn(elf, sh->sh_link);
	GElf_Shdr symsh;
	Elf_Data *syms;
	size_t n, slots = 0;

	if (!d || !symscn || !gelf_getshdr(symscn, &symsh) || symsh.sh_type != SHT_DYNSYM ||
	    !(syms = elf_getdata(symscn, NULL)) || !sh->sh_entsize)
		return 0;
	n = d->d_size / sh->sh_entsize;
	if (n > MAX_RELOCS)
		return -E2BIG;
	for (size_t i = 0; i < n; i++) {
		const struct mp_mapping *t;
		GElf_Rela r;
		GElf_Sym sym;
		const char *name;
		uint64_t slot, v = 0;
		uint32_t type;

		if (!gelf_getrela(d, (int)i, &r))
			break;
		type = (uint32_t)GELF_R_TYPE(r.r_info);
		if ((type != R_X86_64_JUMP_SLOT && type != R_X86_64_GLOB_DAT) ||
		    !gelf_getsym(syms, (int)GELF_R_SYM(r.r_info), &sym) ||
		    !(name = elf_strptr(elf, symsh.sh_link, sym.st_name)) || !is_entry_point(name))
			continue;
		if (++slots > MAX_SLOTS)
			return -E2BIG;
		if (__builtin_add_overflow(bias, r.r_offset, &slot) || slot > INT64_MAX ||
		    pread(g->memfd, &v, sizeof(v), (off_t)slot) != (ssize_t)sizeof(v))
			continue;
		if (!v || in_object(g->maps, m, v))
			continue;
		t = mp_procmaps_find(g->maps, v);
		if (t && (g->ours(g->ctx, t) || (t->path[0] == '/' && !defines(g->pid, t, v))))
			continue;
		snprintf(ret, cap, "%s -> %s", name,
			 t && t->path[0] ? base_name(t->path) : "(unmapped)");
		return 1;
	}
	return 0;
}

int mp_gotcheck(const struct mp_gotcheck *g, const struct mp_mapping *m, char *ret, size_t cap)
{
	char opened[PATH_MAX + 32];
	Elf_Scn *scn = NULL;
	uint64_t bias;
	Elf *elf;
	int fd, r = 0;

	if (elf_version(EV_CURRENT) == EV_NONE)
		return -ENOEXEC;
	fd = mp_object_open(m, g->pid, opened, sizeof(opened));
	if (fd < 0)
		return fd;
	elf = elf_begin(fd, ELF_C_READ_MMAP, NULL);
	if (!elf || elf_kind(elf) != ELF_K_ELF || mp_mapping_bias(elf, m, &bias) < 0) {
		r = -ENOEXEC;
		goto out;
	}
	while (r == 0 && (scn = elf_nextscn(elf, scn))) {
		GElf_Shdr sh;

		if (gelf_getshdr(scn, &sh) && sh.sh_type == SHT_RELA)
			r = check_section(g, elf, scn, &sh, bias, m, ret, cap);
	}
out:
	if (elf)
		elf_end(elf);
	close(fd);
	return r;
}
