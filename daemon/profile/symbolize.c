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
	Dwfl *dwfl;
};

/* The distinct callers of the profile's sites, sorted. */
static int sym_callers(struct symbolization *y, const struct mp_profile *p)
{
	y->callers = malloc((size_t)(p->n_sites ? p->n_sites : 1) * sizeof(*y->callers));
	if (!y->callers)
		return -ENOMEM;
	for (uint32_t i = 0; i < p->n_sites; i++)
		y->callers[i] = p->sites[i].caller;
	qsort(y->callers, p->n_sites, sizeof(*y->callers), cmp_u64);
	for (uint32_t i = 0; i < p->n_sites; i++)
		if (!y->n || y->callers[y->n - 1] != y->callers[i])
			y->callers[y->n++] = y->callers[i];
	return 0;
}

/* Which mapping holds each caller; callers are sorted, so the callers of
 * one mapping are adjacent. */
static int sym_map_callers(struct symbolization *y, const struct mp_procmaps *maps, pid_t pid)
{
	uint32_t n = y->n;

	y->locs = calloc(n ? n : 1, sizeof(*y->locs));
	y->objs = calloc(n ? n : 1, sizeof(*y->objs));
	y->obj_of = malloc((n ? n : 1) * sizeof(*y->obj_of));
	if (!y->locs || !y->objs || !y->obj_of)
		return -ENOMEM;
	for (uint32_t i = 0; i < n; i++) {
		const struct mp_mapping *m = maps ? mp_procmaps_find(maps, y->callers[i]) : NULL;

		if (!m && !y->fresh && mp_procmaps_read(pid, &y->fresh) == -ENOMEM)
			return -ENOMEM;
		if (!m && y->fresh)
			m = mp_procmaps_find(y->fresh, y->callers[i]);
		y->locs[i] = (struct mp_location){ .addr = y->callers[i], .object = MP_NONE };
		y->obj_of[i] = MP_NONE;
		if (!m || m->path[0] != '/')
			continue;
		if (!y->n_objs || y->objs[y->n_objs - 1].map != m)
			y->objs[y->n_objs++] = (struct object){ .map = m };
		y->obj_of[i] = y->n_objs - 1;
	}
	return 0;
}

/* libdwfl over the objects: function, file and line of each caller. */
static int sym_dwfl(struct symbolization *y, pid_t pid)
{
	y->dwfl = dwfl_begin(&callbacks);
	if (!y->dwfl)
		return -ENOMEM;
	dwfl_report_begin(y->dwfl);
	for (uint32_t i = 0; i < y->n_objs; i++)
		report(y->dwfl, y->objs, i, pid);
	dwfl_report_end(y->dwfl, NULL, NULL);
	for (uint32_t i = 0; i < y->n; i++) {
		struct object *ob = y->obj_of[i] != MP_NONE ? &y->objs[y->obj_of[i]] : NULL;

		if (!ob || ob->failed || !ob->mod)
			continue;
		if (symbolize_one(ob, y->callers[i], &y->locs[i]) < 0)
			return -ENOMEM;
	}
	return 0;
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
 * locations of that mapping only. */
static void sym_link(struct symbolization *y)
{
	for (uint32_t i = 0; i < y->n_objs; i++) {
		uint32_t nl = 0, nf = 0, nln = 0;

		for (uint32_t j = 0; j < y->n; j++) {
			if (y->obj_of[j] != i)
				continue;
			y->locs[j].object = i;
			if (y->objs[i].mod && !y->objs[i].failed)
				y->locs[j].rel_addr = y->callers[j] - y->objs[i].bias;
			nl++;
			nf += y->locs[j].function != NULL;
			nln += y->locs[j].file != NULL;
		}
		y->mobjs[i].flags = (nl && nf == nl ? MP_OBJ_F_FUNCTIONS : 0) |
				    (nl && nln == nl ? MP_OBJ_F_LINES : 0);
	}
}

int mp_symbolize_profile(struct mp_profile *p, const struct mp_procmaps *maps, pid_t pid)
{
	struct symbolization y = { 0 };
	int r;

	r = sym_callers(&y, p);
	if (r == 0)
		r = sym_map_callers(&y, maps, pid);
	if (r == 0)
		r = sym_dwfl(&y, pid);
	if (r == 0)
		r = sym_objects(&y);
	if (r == 0) {
		sym_link(&y);
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
	if (y.dwfl)
		dwfl_end(y.dwfl);
	locations_free(y.locs, y.locs ? y.n : 0);
	objects_free(y.mobjs, y.n_mobjs);
	free(y.objs);
	free(y.obj_of);
	free(y.callers);
	mp_procmaps_free(y.fresh);
	return r;
}
