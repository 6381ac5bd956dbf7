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

/* Separate debug info only from the local build-id tree: never from the
 * network (debuginfod), whatever the daemon's environment says. */
static int find_debuginfo(Dwfl_Module *mod, void **userdata, const char *modname, Dwarf_Addr base,
			  const char *file_name, const char *debuglink_file,
			  GElf_Word debuglink_crc, char **debuginfo_file_name)
{
	const unsigned char *bits;
	GElf_Addr vaddr;
	char path[PATH_MAX];
	int n, off, fd;

	(void)userdata, (void)modname, (void)base, (void)file_name, (void)debuglink_file,
		(void)debuglink_crc;
	n = dwfl_module_build_id(mod, &bits, &vaddr);
	if (n < 2 || n > 64)
		return -1;
	off = snprintf(path, sizeof(path), "/usr/lib/debug/.build-id/%02x/", bits[0]);
	for (int i = 1; i < n; i++)
		off += snprintf(path + off, sizeof(path) - off, "%02x", bits[i]);
	snprintf(path + off, sizeof(path) - off, ".debug");
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	*debuginfo_file_name = strdup(path);
	return fd;
}

static const Dwfl_Callbacks callbacks = {
	.find_elf = dwfl_build_id_find_elf,
	.find_debuginfo = find_debuginfo,
};

/* Opens the file of @m as the process sees it: through /proc/PID/root while
 * the process lives, else by the same path if it is the same inode. */
static int open_object(const struct mp_mapping *m, pid_t pid)
{
	char path[PATH_MAX + 64];
	const char *deleted;
	size_t len = strlen(m->path);
	struct stat st;
	int fd;

	deleted = len > 10 ? strstr(m->path + len - 10, " (deleted)") : NULL;
	if (deleted)
		return -ENOENT; /* replaced on disk: its symbols are gone */
	if (snprintf(path, sizeof(path), "/proc/%d/root%s", (int)pid, m->path) >= (int)sizeof(path))
		return -ENAMETOOLONG;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		fd = open(m->path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || (m->inode && st.st_ino != m->inode)) {
		close(fd);
		return -ESTALE;
	}
	return fd;
}

/* The load bias of the ELF file @fd mapped by @m: the PT_LOAD segment
 * holding the mapping's file offset says which virtual address it is. */
static int load_bias(int fd, const struct mp_mapping *m, uint64_t *ret_bias, bool *ret_exec)
{
	Elf *elf = elf_begin(fd, ELF_C_READ_MMAP, NULL);
	GElf_Ehdr eh;
	size_t n;
	int r = -ENOEXEC;

	if (!elf)
		return -ENOEXEC;
	if (elf_kind(elf) != ELF_K_ELF || !gelf_getehdr(elf, &eh) || elf_getphdrnum(elf, &n) < 0)
		goto out;
	*ret_exec = eh.e_type == ET_EXEC;
	for (size_t i = 0; i < n; i++) {
		GElf_Phdr ph;

		if (!gelf_getphdr(elf, i, &ph) || ph.p_type != PT_LOAD)
			continue;
		if (m->offset < (ph.p_offset & ~(uint64_t)4095) ||
		    m->offset >= ph.p_offset + ph.p_filesz)
			continue;
		*ret_bias = m->start - m->offset + ph.p_offset - ph.p_vaddr;
		r = 0;
		break;
	}
out:
	elf_end(elf);
	return r;
}

/* Reports @objs[@i] to @dwfl, or shares the module of an earlier object of
 * the same file at the same bias (one load of a file can have several
 * executable mappings; dlmopen can load it again elsewhere). */
static void report(Dwfl *dwfl, struct object *objs, uint32_t i, pid_t pid)
{
	struct object *ob = &objs[i];
	const char *base = strrchr(ob->map->path, '/');
	bool exec = false;
	int fd;

	fd = open_object(ob->map, pid);
	if (fd < 0 || load_bias(fd, ob->map, &ob->bias, &exec) < 0) {
		if (fd >= 0)
			close(fd);
		ob->failed = true;
		return;
	}
	if (exec)
		ob->bias = 0;
	for (uint32_t j = 0; j < i; j++) {
		if (objs[j].mod && objs[j].bias == ob->bias &&
		    !strcmp(objs[j].map->path, ob->map->path)) {
			close(fd);
			ob->mod = objs[j].mod;
			return;
		}
	}
	/* add_p_vaddr: the base is the bias added to the file's addresses.
	 * On success libdwfl owns the descriptor. */
	ob->mod = dwfl_report_elf(dwfl, base ? base + 1 : ob->map->path, ob->map->path, fd,
				  ob->bias, true);
	if (!ob->mod) {
		close(fd);
		ob->failed = true;
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

/* Symbol of the call that returns to @addr: looked up at @addr - 1, since
 * a return address can be the first byte of the next line or function. */
static int symbolize_one(const struct object *ob, uint64_t addr, struct mp_location *loc)
{
	GElf_Addr pc = addr - 1, off;
	GElf_Sym sym;
	const char *name, *file;
	Dwfl_Line *line;
	int lineno = 0;

	name = dwfl_module_addrinfo(ob->mod, pc, &off, &sym, NULL, NULL, NULL);
	/* Past the end of a sized symbol is not in it (a stripped file's
	 * nearest dynamic symbol can be far below the address). */
	if (name && sym.st_size && off >= sym.st_size)
		name = NULL;
	if (dup_opt(name, &loc->function) < 0)
		return -ENOMEM;
	line = dwfl_module_getsrc(ob->mod, pc);
	file = line ? dwfl_lineinfo(line, NULL, &lineno, NULL, NULL, NULL) : NULL;
	if (file && lineno > 0) {
		const char *dir = file[0] != '/' ? dwfl_line_comp_dir(line) : NULL;

		/* Relative names are relative to the compilation directory. */
		if (dir && *dir) {
			if (asprintf(&loc->file, "%s/%s", dir, file) < 0) {
				loc->file = NULL;
				return -ENOMEM;
			}
		} else if (dup_opt(file, &loc->file) < 0) {
			return -ENOMEM;
		}
		loc->line = (uint32_t)lineno;
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
	Dwfl *dwfl = NULL;
	int r = -ENOMEM;

	callers = malloc((size_t)(p->n_sites ? p->n_sites : 1) * sizeof(*callers));
	if (!callers)
		goto out;
	for (uint32_t i = 0; i < p->n_sites; i++)
		callers[i] = p->sites[i].caller;
	qsort(callers, p->n_sites, sizeof(*callers), cmp_u64);
	for (uint32_t i = 0; i < p->n_sites; i++)
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

	dwfl = dwfl_begin(&callbacks);
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
