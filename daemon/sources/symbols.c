// SPDX-License-Identifier: MIT
#include "symbols.h"

#include <errno.h>
#include <fnmatch.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "procmaps.h"

#define MP_MAX_OBJECTS 4096
#define MP_MAX_ENV (1 << 20)

struct mp_object {
	char *path; /* as the target sees it */
	char *root_path; /* /proc/PID/root + path */
	int fd;
	uint64_t size; /* of the file when opened */
	Elf *elf; /* NULL if not an ELF file we can read */
	const char *soname;
};

struct mp_symbols {
	pid_t pid;
	struct mp_object *objs; /* candidates, then reordered */
	size_t n;
	size_t missing_needed;
};

static const char *base_name(const char *p)
{
	const char *s = strrchr(p, '/');

	return s ? s + 1 : p;
}

#define DELETED_SUFFIX " (deleted)"

static bool is_deleted(const char *path)
{
	size_t n = strlen(path), k = strlen(DELETED_SUFFIX);

	return n > k && !strcmp(path + n - k, DELETED_SUFFIX);
}

/* Takes over @fd (closed by object_close). */
static void object_load(struct mp_object *o, int fd)
{
	struct stat st;

	o->fd = fd;
	if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
		return; /* vanished or unreadable: never matches */
	o->size = (uint64_t)st.st_size;
	/* Not ELF_C_READ_MMAP: the target can truncate its own files, and
	 * touching a mapping past the new end is a SIGBUS in the daemon. */
	o->elf = elf_begin(fd, ELF_C_READ, NULL);
	if (o->elf && elf_kind(o->elf) != ELF_K_ELF) {
		elf_end(o->elf);
		o->elf = NULL;
	}
}

static int object_open(struct mp_object *o, pid_t pid, const struct mp_mapping *m)
{
	const char *path = m->path;
	char rp[PATH_MAX + 64];
	int n;

	o->fd = -1;
	o->path = strdup(path);
	/* A file deleted or replaced since it was mapped (a service after a
	 * package upgrade) is reachable only through its mapping. */
	if (is_deleted(path))
		n = snprintf(rp, sizeof(rp), "/proc/%d/map_files/%llx-%llx", (int)pid,
			     (unsigned long long)m->start, (unsigned long long)m->end);
	else
		n = snprintf(rp, sizeof(rp), "/proc/%d/root%s", (int)pid, path);
	if (n >= (int)sizeof(rp))
		return -ENAMETOOLONG;
	o->root_path = strdup(rp);
	if (!o->path || !o->root_path)
		return -ENOMEM;
	/* O_NONBLOCK: the target may have put a FIFO where its file was. */
	object_load(o, open(rp, O_RDONLY | O_CLOEXEC | O_NONBLOCK));
	return 0;
}

static void object_close(struct mp_object *o)
{
	if (o->elf)
		elf_end(o->elf);
	if (o->fd >= 0)
		close(o->fd);
	free(o->path);
	free(o->root_path);
}

void mp_symbols_free(struct mp_symbols *s)
{
	if (!s)
		return;
	for (size_t i = 0; i < s->n; i++)
		object_close(&s->objs[i]);
	free(s->objs);
	free(s);
}

static Elf_Scn *find_section(Elf *elf, GElf_Word type, GElf_Shdr *ret_sh)
{
	Elf_Scn *scn = NULL;

	while ((scn = elf_nextscn(elf, scn))) {
		if (gelf_getshdr(scn, ret_sh) && ret_sh->sh_type == type)
			return scn;
	}
	return NULL;
}

/* Calls @cb for every DT_NEEDED (soname == false) or the DT_SONAME. */
static void dynamic_strings(Elf *elf, bool soname, void (*cb)(void *ctx, const char *s), void *ctx)
{
	GElf_Shdr sh;
	Elf_Scn *scn = find_section(elf, SHT_DYNAMIC, &sh);
	Elf_Data *d;
	size_t n;

	if (!scn || !sh.sh_entsize)
		return;
	d = elf_getdata(scn, NULL);
	if (!d)
		return;
	n = d->d_size / sh.sh_entsize;
	for (size_t i = 0; i < n && i < 65536; i++) {
		GElf_Dyn dyn;
		const char *str;

		if (!gelf_getdyn(d, (int)i, &dyn) || dyn.d_tag == DT_NULL)
			break;
		if (dyn.d_tag != (soname ? DT_SONAME : DT_NEEDED))
			continue;
		str = elf_strptr(elf, sh.sh_link, dyn.d_un.d_val);
		if (str)
			cb(ctx, str);
	}
}

static void set_soname(void *ctx, const char *str)
{
	((struct mp_object *)ctx)->soname = str;
}

static void object_set_soname(struct mp_object *o)
{
	if (o->elf)
		dynamic_strings(o->elf, true, set_soname, o);
}

struct order {
	size_t missing; /* DT_NEEDED names no mapped object matched */
	struct mp_symbols *s;
	bool *placed;
	size_t *out;
	size_t n_out;
};

static void place(struct order *o, size_t i)
{
	if (o->placed[i])
		return;
	o->placed[i] = true;
	o->out[o->n_out++] = i;
}

static bool place_name_exact(struct order *o, const char *name);

/* Loader matching: a name with a slash is a path, as the loader opened it
 * (maybe through a symlink such as libfoo.so.0 or a "..": the mapping
 * shows the file's real path, so that is compared too); otherwise a soname
 * (or the file name of an object without one). */
static bool place_name(struct order *o, const char *name)
{
	char full[PATH_MAX], real[PATH_MAX], root[64], *in;
	size_t rl;

	if (place_name_exact(o, name))
		return true;
	if (name[0] != '/')
		return false;
	snprintf(root, sizeof(root), "/proc/%d/root", (int)o->s->pid);
	if ((size_t)snprintf(full, sizeof(full), "%s%s", root, name) >= sizeof(full) ||
	    !realpath(full, real))
		return false;
	/* the target's root as we see it, then the path inside it */
	in = real;
	if (realpath(root, full) && (rl = strlen(full)) > 1 && !strncmp(real, full, rl) &&
	    real[rl] == '/')
		in = real + rl;
	return place_name_exact(o, in);
}

static bool place_name_exact(struct order *o, const char *name)
{
	for (size_t i = 0; i < o->s->n; i++) {
		struct mp_object *ob = &o->s->objs[i];

		if (strchr(name, '/') ? !strcmp(ob->path, name) :
					(ob->soname && !strcmp(ob->soname, name)) ||
						!strcmp(base_name(ob->path), name)) {
			place(o, i);
			return true;
		}
	}
	return false;
}

static void place_needed(void *ctx, const char *name)
{
	struct order *o = ctx;

	if (!place_name(o, name))
		o->missing++;
}

static void place_list(struct order *o, char *list)
{
	char *save = NULL;

	for (char *t = strtok_r(list, " :\t\n", &save); t; t = strtok_r(NULL, " :\t\n", &save))
		place_name(o, t);
}

static char *read_small(const char *path, size_t max, size_t *ret_len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	char *buf;
	size_t len = 0;

	if (fd < 0)
		return NULL;
	buf = malloc(max + 1);
	if (!buf) {
		close(fd);
		return NULL;
	}
	while (len < max) {
		ssize_t r = read(fd, buf + len, max - len);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		len += (size_t)r;
	}
	close(fd);
	buf[len] = '\0';
	*ret_len = len;
	return buf;
}

static void place_preload(struct order *o, pid_t pid)
{
	char path[PATH_MAX];
	size_t len;
	char *env, *f;

	snprintf(path, sizeof(path), "/proc/%d/environ", (int)pid);
	env = read_small(path, MP_MAX_ENV, &len);
	if (env) {
		for (size_t i = 0; i < len; i += strlen(env + i) + 1) {
			if (!strncmp(env + i, "LD_PRELOAD=", 11)) {
				place_list(o, env + i + 11);
				break;
			}
		}
		free(env);
	}
	snprintf(path, sizeof(path), "/proc/%d/root/etc/ld.so.preload", (int)pid);
	f = read_small(path, 65536, &len);
	if (f) {
		place_list(o, f);
		free(f);
	}
}

static int build_order(struct mp_symbols *s, const char *exe)
{
	struct order o = { .s = s };
	struct mp_object *sorted;

	o.placed = calloc(s->n ? s->n : 1, sizeof(*o.placed));
	o.out = calloc(s->n ? s->n : 1, sizeof(*o.out));
	sorted = calloc(s->n ? s->n : 1, sizeof(*sorted));
	if (!o.placed || !o.out || !sorted) {
		free(o.placed);
		free(o.out);
		free(sorted);
		return -ENOMEM;
	}
	place_name(&o, exe);
	if (s->pid > 0)
		place_preload(&o, s->pid);
	/* Breadth-first over DT_NEEDED: o.out grows while we walk it. */
	for (size_t q = 0; q < o.n_out; q++) {
		struct mp_object *ob = &s->objs[o.out[q]];

		if (ob->elf)
			dynamic_strings(ob->elf, false, place_needed, &o);
	}
	s->missing_needed = o.missing;
	for (size_t i = 0; i < s->n; i++)
		place(&o, i);
	for (size_t i = 0; i < s->n; i++)
		sorted[i] = s->objs[o.out[i]];
	free(s->objs);
	s->objs = sorted;
	free(o.placed);
	free(o.out);
	return 0;
}

int mp_symbols_new(pid_t pid, struct mp_symbols **ret)
{
	struct mp_procmaps *pm = NULL;
	struct mp_symbols *s;
	char link[64], exe[PATH_MAX];
	ssize_t n;
	int r;

	if (elf_version(EV_CURRENT) == EV_NONE)
		return -ENOTSUP;
	snprintf(link, sizeof(link), "/proc/%d/exe", (int)pid);
	n = readlink(link, exe, sizeof(exe) - 1);
	if (n < 0)
		return -errno;
	exe[n] = '\0';
	r = mp_procmaps_read(pid, &pm);
	if (r < 0)
		return r;
	s = calloc(1, sizeof(*s));
	if (!s) {
		r = -ENOMEM;
		goto out;
	}
	s->pid = pid;
	s->objs = calloc(pm->n ? pm->n : 1, sizeof(*s->objs));
	if (!s->objs) {
		r = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < pm->n && s->n < MP_MAX_OBJECTS; i++) {
		const struct mp_mapping *m = &pm->maps[i];
		bool dup = false;

		if (m->path[0] != '/' || !m->inode)
			continue;
		for (size_t j = 0; j < s->n && !dup; j++)
			dup = !strcmp(s->objs[j].path, m->path);
		if (dup)
			continue;
		r = object_open(&s->objs[s->n++], pid, m);
		if (r < 0)
			goto out;
		object_set_soname(&s->objs[s->n - 1]);
	}
	r = build_order(s, exe);
	if (r < 0)
		goto out;
	*ret = s;
	s = NULL;
out:
	mp_symbols_free(s);
	mp_procmaps_free(pm);
	return r;
}

int mp_symbols_new_from_fds(const int *fds, const char *const *paths, size_t n,
			    struct mp_symbols **ret)
{
	struct mp_symbols *s = NULL;
	size_t i = 0;
	int r = -EINVAL;

	if (elf_version(EV_CURRENT) == EV_NONE) {
		r = -ENOTSUP;
		goto out;
	}
	if (!n || n > MP_MAX_OBJECTS)
		goto out;
	r = -ENOMEM;
	s = calloc(1, sizeof(*s));
	if (!s || !(s->objs = calloc(n, sizeof(*s->objs))))
		goto out;
	for (; i < n; i++) {
		struct mp_object *o = &s->objs[s->n++];

		object_load(o, fds[i]);
		o->path = strdup(paths[i]);
		o->root_path = strdup(paths[i]);
		if (!o->path || !o->root_path) {
			i++;
			goto out;
		}
		object_set_soname(o);
	}
	r = build_order(s, paths[0]);
	if (r < 0)
		goto out;
	*ret = s;
	return 0;
out:
	mp_symbols_free(s);
	/* The objects own fds[0, i). */
	for (; i < n; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	return r;
}

size_t mp_symbols_count(const struct mp_symbols *s)
{
	return s->n;
}

bool mp_symbols_complete(const struct mp_symbols *s)
{
	return s->n && s->missing_needed == 0;
}

const char *mp_symbols_object(const struct mp_symbols *s, size_t i)
{
	return i < s->n ? s->objs[i].path : NULL;
}

static bool object_matches(const struct mp_object *o, const char *want)
{
	const char *b = base_name(o->path);

	/* "libcudart.so*": a glob on the file name */
	return !strcmp(o->path, want) || !strcmp(b, want) || !strncmp(b, want, strlen(want)) ||
	       (strpbrk(want, "*?[") && fnmatch(want, b, 0) == 0);
}

/* Only into segments the file holds: the offset goes to the uprobe and to
 * mp_symbols_read_code. */
static int vaddr_to_offset(Elf *elf, uint64_t file_size, uint64_t vaddr, uint64_t *ret)
{
	size_t n;

	if (elf_getphdrnum(elf, &n))
		return -EINVAL;
	for (size_t i = 0; i < n && i < INT_MAX; i++) {
		GElf_Phdr ph;

		if (!gelf_getphdr(elf, (int)i, &ph) || ph.p_type != PT_LOAD ||
		    !(ph.p_flags & PF_X) || ph.p_offset > file_size ||
		    ph.p_filesz > file_size - ph.p_offset)
			continue;
		if (vaddr >= ph.p_vaddr && vaddr - ph.p_vaddr < ph.p_filesz) {
			*ret = vaddr - ph.p_vaddr + ph.p_offset;
			return 0;
		}
	}
	return -ENOENT;
}

static int find_in(Elf *elf, GElf_Word type, int sym_type, const char *name, GElf_Sym *ret)
{
	GElf_Shdr sh;
	Elf_Scn *scn = find_section(elf, type, &sh);
	Elf_Data *d;
	size_t n;

	if (!scn || !sh.sh_entsize)
		return -ENOENT;
	d = elf_getdata(scn, NULL);
	if (!d)
		return -ENOENT;
	n = d->d_size / sh.sh_entsize;
	for (size_t i = 0; i < n && i < INT_MAX; i++) {
		GElf_Sym sym;
		const char *sn;
		int bind;

		if (!gelf_getsym(d, (int)i, &sym))
			break;
		bind = GELF_ST_BIND(sym.st_info);
		if (sym.st_shndx == SHN_UNDEF || GELF_ST_TYPE(sym.st_info) != sym_type ||
		    (bind != STB_GLOBAL && bind != STB_WEAK) || !sym.st_value)
			continue;
		sn = elf_strptr(elf, sh.sh_link, sym.st_name);
		if (sn && !strcmp(sn, name)) {
			*ret = sym;
			return 0;
		}
	}
	return -ENOENT;
}

int mp_symbols_lookup(struct mp_symbols *s, const char *name, const char *object,
		      struct mp_symbol *ret_sym)
{
	for (size_t i = 0; i < s->n; i++) {
		struct mp_object *o = &s->objs[i];
		GElf_Sym sym;
		uint64_t off;

		if (!o->elf || (object && !object_matches(o, object)))
			continue;
		if (find_in(o->elf, SHT_DYNSYM, STT_FUNC, name, &sym) < 0 &&
		    (i != 0 || find_in(o->elf, SHT_SYMTAB, STT_FUNC, name, &sym) < 0))
			continue;
		if (vaddr_to_offset(o->elf, o->size, sym.st_value, &off) < 0)
			continue;
		*ret_sym = (struct mp_symbol){
			.path = o->path,
			.root_path = o->root_path,
			.vaddr = sym.st_value,
			.size = sym.st_size,
			.offset = off,
			.object = i,
		};
		return 0;
	}
	return -ENOENT;
}

int mp_symbols_lookup_data(struct mp_symbols *s, const char *name, const char *object,
			   struct mp_symbol *ret_sym)
{
	for (size_t i = 0; i < s->n; i++) {
		struct mp_object *o = &s->objs[i];
		GElf_Sym sym;

		if (!o->elf || (object && !object_matches(o, object)))
			continue;
		if (find_in(o->elf, SHT_DYNSYM, STT_OBJECT, name, &sym) < 0)
			continue;
		*ret_sym = (struct mp_symbol){
			.path = o->path,
			.root_path = o->root_path,
			.vaddr = sym.st_value,
			.size = sym.st_size,
			.object = i,
		};
		return 0;
	}
	return -ENOENT;
}

int mp_symbols_read_code(struct mp_symbols *s, const struct mp_symbol *sym, uint8_t *buf,
			 size_t len, size_t *ret_len)
{
	ssize_t n;

	if (sym->object >= s->n || s->objs[sym->object].fd < 0)
		return -EBADF;
	if (sym->offset > INT64_MAX)
		return -EINVAL;
	if (sym->size && sym->size < len)
		len = sym->size;
	n = pread(s->objs[sym->object].fd, buf, len, (off_t)sym->offset);
	if (n < 0)
		return -errno;
	*ret_len = (size_t)n;
	return 0;
}
