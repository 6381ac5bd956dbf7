// SPDX-License-Identifier: MIT
#include <elfutils/debuginfod.h>
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>
#include <zlib.h>

#include "modules.h"

/* Debug files larger than this are not checked (nor used). */
#define MAX_DEBUG_FILE (1ull << 32)

/* @path for reading, if it is a regular file (with inode @ino unless 0).
 * The path is the target's to choose: it is checked on an O_PATH
 * descriptor, as opening a FIFO blocks and opening a device acts, and the
 * file checked is the one reopened. -ESTALE when it is another file. */
static int open_regular(const char *path, uint64_t ino)
{
	char self[64];
	struct stat st;
	int pfd, fd;

	pfd = open(path, O_PATH | O_CLOEXEC);
	if (pfd < 0)
		return -errno;
	if (fstat(pfd, &st) < 0 || !S_ISREG(st.st_mode) || (ino && st.st_ino != ino)) {
		close(pfd);
		return -ESTALE;
	}
	snprintf(self, sizeof(self), "/proc/self/fd/%d", pfd);
	fd = open(self, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		fd = -errno;
	close(pfd);
	return fd;
}

static int open_build_id_debug(Dwfl_Module *mod, char **ret_path)
{
	const unsigned char *bits;
	GElf_Addr vaddr;
	char path[PATH_MAX];
	int n, off, fd;

	n = dwfl_module_build_id(mod, &bits, &vaddr);
	if (n < 2 || n > 64)
		return -1;
	off = snprintf(path, sizeof(path), "/usr/lib/debug/.build-id/%02x/", bits[0]);
	for (int i = 1; i < n; i++)
		off += snprintf(path + off, sizeof(path) - off, "%02x", bits[i]);
	snprintf(path + off, sizeof(path) - off, ".debug");
	fd = open_regular(path, 0);
	if (fd < 0)
		return -1;
	*ret_path = strdup(path);
	if (!*ret_path) {
		close(fd);
		return -1;
	}
	return fd;
}

/* Whether the file @fd has the CRC-32 the debuglink names. */
static bool crc_matches(int fd, uint32_t want)
{
	unsigned char buf[65536];
	uLong crc = crc32(0, NULL, 0);
	uint64_t total = 0;
	ssize_t n;

	while ((n = pread(fd, buf, sizeof(buf), (off_t)total)) > 0) {
		crc = crc32(crc, buf, (uInt)n);
		total += (uint64_t)n;
		if (total > MAX_DEBUG_FILE)
			return false;
	}
	return n == 0 && (uint32_t)crc == want;
}

/* .gnu_debuglink: the named file beside the object or in its .debug/
 * folder (as objcopy --add-gnu-debuglink and Debian's dh_strip place it),
 * accepted only with the CRC the link records. */
static int open_debuglink(const char *file_name, const char *link, uint32_t crc, char **ret_path)
{
	const char *slash;
	char path[PATH_MAX];
	int dirlen;

	if (!file_name || !link || !*link || strchr(link, '/'))
		return -1;
	slash = strrchr(file_name, '/');
	dirlen = slash ? (int)(slash - file_name) : 0;
	for (int i = 0; i < 2; i++) {
		int fd;

		if (snprintf(path, sizeof(path), "%.*s%s%s", dirlen, file_name,
			     i ? "/.debug/" : "/", link) >= (int)sizeof(path))
			return -1;
		if (!strcmp(path, file_name))
			continue;
		fd = open_regular(path, 0);
		if (fd < 0)
			continue;
		if (crc_matches(fd, crc)) {
			*ret_path = strdup(path);
			if (*ret_path)
				return fd;
		}
		close(fd);
	}
	return -1;
}

static int find_debuginfo(Dwfl_Module *mod, void **userdata, const char *modname, Dwarf_Addr base,
			  const char *file_name, const char *debuglink_file,
			  GElf_Word debuglink_crc, char **debuginfo_file_name)
{
	int fd;

	(void)userdata, (void)modname, (void)base;
	fd = open_build_id_debug(mod, debuginfo_file_name);
	if (fd >= 0)
		return fd;
	return open_debuglink(file_name, debuglink_file, debuglink_crc, debuginfo_file_name);
}

const Dwfl_Callbacks mp_dwfl_callbacks = {
	.find_elf = dwfl_build_id_find_elf,
	.find_debuginfo = find_debuginfo,
};

/* The calling thread's debuginfod client, made at its first lookup. */
static __thread debuginfod_client *net;
static __thread bool net_tried;

static bool net_on;

void mp_dwfl_set_net(bool on)
{
	__atomic_store_n(&net_on, on, __ATOMIC_RELAXED);
}

/* Whether the front-end asked for the network (--debuginfod) and the
 * environment names debuginfod servers (as gdb and perf read it). */
bool mp_dwfl_net_enabled(void)
{
	const char *urls = getenv("DEBUGINFOD_URLS");

	return __atomic_load_n(&net_on, __ATOMIC_RELAXED) && urls && *urls;
}

/* The debug file of @mod's build-id from the servers of DEBUGINFOD_URLS,
 * into (or from) the client's cache; -1 when none. */
static int find_debuginfo_net(Dwfl_Module *mod, char **ret_path)
{
	const unsigned char *bits;
	GElf_Addr vaddr;
	struct stat st;
	char *path = NULL;
	int n, fd;

	n = dwfl_module_build_id(mod, &bits, &vaddr);
	if (n < 2 || n > 64)
		return -1;
	if (!net_tried) {
		net_tried = true;
		net = debuginfod_begin();
	}
	if (!net)
		return -1;
	fd = debuginfod_find_debuginfo(net, bits, n, &path);
	if (fd < 0) {
		free(path);
		return -1;
	}
	/* a file of the client's cache: only a regular one of sane size */
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size > MAX_DEBUG_FILE) {
		close(fd);
		free(path);
		return -1;
	}
	*ret_path = path;
	return fd;
}

static int find_debuginfo_or_net(Dwfl_Module *mod, void **userdata, const char *modname,
				 Dwarf_Addr base, const char *file_name, const char *debuglink_file,
				 GElf_Word debuglink_crc, char **debuginfo_file_name)
{
	int fd = find_debuginfo(mod, userdata, modname, base, file_name, debuglink_file,
				debuglink_crc, debuginfo_file_name);

	if (fd >= 0 || !mp_dwfl_net_enabled())
		return fd;
	return find_debuginfo_net(mod, debuginfo_file_name);
}

const Dwfl_Callbacks mp_dwfl_symbolize_callbacks = {
	.find_elf = dwfl_build_id_find_elf,
	.find_debuginfo = find_debuginfo_or_net,
};

void mp_dwfl_net_end(void)
{
	if (net)
		debuginfod_end(net);
	net = NULL;
	net_tried = false;
}

bool mp_mapping_is_code(const struct mp_mapping *m)
{
	return (m->perms & MP_MAP_X) && m->path[0] == '/';
}

int mp_object_open(const struct mp_mapping *m, pid_t pid, char *path, size_t size)
{
	size_t len = strlen(m->path);
	int fd = -ENOENT;

	if (len > 10 && strstr(m->path + len - 10, " (deleted)"))
		return -ENOENT; /* replaced on disk: its symbols are gone */
	if (snprintf(path, size, "/proc/%d/root%s", (int)pid, m->path) >= (int)size)
		return -ENAMETOOLONG;
	if (pid > 0)
		fd = open_regular(path, m->inode);
	if (fd < 0 && fd != -ESTALE) {
		snprintf(path, size, "%s", m->path);
		fd = open_regular(path, m->inode);
	}
	return fd;
}

int mp_mapping_bias(Elf *elf, const struct mp_mapping *m, uint64_t *ret_bias)
{
	size_t n;

	if (!elf || elf_kind(elf) != ELF_K_ELF || elf_getphdrnum(elf, &n) < 0)
		return -ENOEXEC;
	for (size_t i = 0; i < n; i++) {
		GElf_Phdr ph;

		if (!gelf_getphdr(elf, i, &ph) || ph.p_type != PT_LOAD)
			continue;
		if (m->offset < (ph.p_offset & ~(uint64_t)4095) ||
		    m->offset >= ph.p_offset + ph.p_filesz)
			continue;
		*ret_bias = m->start - m->offset + ph.p_offset - ph.p_vaddr;
		return 0;
	}
	return -ENOEXEC;
}

/* Where libdwfl is to place the ELF file @fd of mapping @m (the bias of
 * its addresses; an ET_EXEC file is never relocated), and the bias the
 * mapping itself implies. */
static int load_bias(int fd, const struct mp_mapping *m, uint64_t *ret_mod_bias,
		     uint64_t *ret_map_bias)
{
	Elf *elf = elf_begin(fd, ELF_C_READ_MMAP, NULL);
	GElf_Ehdr eh;
	uint64_t bias;
	int r = -ENOEXEC;

	if (!elf)
		return -ENOEXEC;
	if (elf_kind(elf) == ELF_K_ELF && gelf_getehdr(elf, &eh) &&
	    (eh.e_type == ET_EXEC || eh.e_type == ET_DYN))
		r = mp_mapping_bias(elf, m, &bias);
	if (r == 0) {
		*ret_mod_bias = eh.e_type == ET_EXEC ? 0 : bias;
		*ret_map_bias = bias;
	}
	elf_end(elf);
	return r;
}

/* Reports the file of @m under a name unique in @dwfl; with @placed, only
 * when the file lies where the mapping is (-EADDRNOTAVAIL otherwise). */
static int report(Dwfl *dwfl, const struct mp_mapping *m, pid_t pid, unsigned int id, bool placed,
		  Dwfl_Module **ret_mod, uint64_t *ret_mod_bias, uint64_t *ret_map_bias)
{
	char path[PATH_MAX + 64], name[PATH_MAX + 32];
	uint64_t mod_bias = 0, map_bias = 0;
	Dwfl_Module *mod;
	int fd, r;

	fd = mp_object_open(m, pid, path, sizeof(path));
	if (fd < 0)
		return fd;
	r = load_bias(fd, m, &mod_bias, &map_bias);
	if (r == 0 && placed && mod_bias != map_bias)
		r = -EADDRNOTAVAIL;
	if (r < 0) {
		close(fd);
		return r;
	}
	/* libdwfl takes a module reported under the name and addresses of
	 * one it already has for that module, and when the file differs
	 * marks the first one for removal at dwfl_report_end, which frees
	 * it under whoever holds it (two mappings of one ET_EXEC file, as
	 * V8 makes of node's builtins): the caller's number keeps every
	 * name distinct. add_p_vaddr: the base is the bias added to the
	 * file's addresses. On success libdwfl owns the descriptor. */
	snprintf(name, sizeof(name), "%s#%u", m->path, id);
	mod = dwfl_report_elf(dwfl, name, path, fd, mod_bias, true);
	if (!mod) {
		close(fd);
		return -ENOEXEC;
	}
	*ret_mod = mod;
	*ret_mod_bias = mod_bias;
	*ret_map_bias = map_bias;
	return 0;
}

int mp_dwfl_report_file(Dwfl *dwfl, const struct mp_mapping *m, pid_t pid, unsigned int id,
			Dwfl_Module **ret_mod, uint64_t *ret_mod_bias, uint64_t *ret_map_bias)
{
	return report(dwfl, m, pid, id, false, ret_mod, ret_mod_bias, ret_map_bias);
}

int mp_dwfl_report_mapping(Dwfl *dwfl, const struct mp_mapping *m, pid_t pid, unsigned int id,
			   Dwfl_Module **ret_mod, uint64_t *ret_bias)
{
	uint64_t map_bias;

	return report(dwfl, m, pid, id, true, ret_mod, ret_bias, &map_bias);
}

/* Segments of a loaded object past this are not believed. */
#define MAX_LOAD_SEGMENTS 32
/* Nor addresses or sizes past a user address space (47 bits). */
#define MAX_LOAD_VADDR (1ull << 47)

int mp_object_mappings(pid_t pid, const char *path, uint64_t bias, struct mp_procmaps **ret)
{
	const struct mp_mapping want = { .path = path };
	uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
	struct mp_procmaps *pm = NULL;
	char opened[PATH_MAX + 32];
	struct stat st;
	Elf *elf = NULL;
	size_t n = 0;
	int fd, r = -ENOEXEC;

	if (path[0] != '/' || elf_version(EV_CURRENT) == EV_NONE)
		return -EINVAL;
	fd = mp_object_open(&want, pid, opened, sizeof(opened));
	if (fd < 0)
		return fd;
	if (fstat(fd, &st) < 0 || !(elf = elf_begin(fd, ELF_C_READ_MMAP, NULL)) ||
	    elf_kind(elf) != ELF_K_ELF || elf_getphdrnum(elf, &n) < 0 || !n ||
	    n > MAX_LOAD_SEGMENTS)
		goto out;
	pm = calloc(1, sizeof(*pm));
	if (!pm || !(pm->maps = calloc(n, sizeof(*pm->maps))) || !(pm->strings = strdup(path))) {
		r = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		struct mp_mapping *m = &pm->maps[pm->n];
		GElf_Phdr ph;
		uint64_t lo, hi;

		if (!gelf_getphdr(elf, (int)i, &ph) || ph.p_type != PT_LOAD)
			continue;
		/* as the loader maps it: whole pages, the file's and the rest */
		if (ph.p_vaddr > MAX_LOAD_VADDR || ph.p_memsz > MAX_LOAD_VADDR ||
		    __builtin_add_overflow(bias, ph.p_vaddr & ~(page - 1), &lo) ||
		    __builtin_add_overflow(bias, ph.p_vaddr + ph.p_memsz + page - 1, &hi))
			goto out;
		*m = (struct mp_mapping){ .start = lo,
					  .end = hi & ~(page - 1),
					  .offset = ph.p_offset & ~(page - 1),
					  .inode = st.st_ino,
					  .dev_major = major(st.st_dev),
					  .dev_minor = minor(st.st_dev),
					  .perms = (ph.p_flags & PF_R ? MP_MAP_R : 0) |
						   (ph.p_flags & PF_W ? MP_MAP_W : 0) |
						   (ph.p_flags & PF_X ? MP_MAP_X : 0),
					  .path = pm->strings };
		/* sorted and apart, as the ELF specification has them */
		if (m->end <= m->start || (pm->n && m->start < pm->maps[pm->n - 1].end))
			goto out;
		pm->n++;
	}
	if (pm->n) {
		*ret = pm;
		pm = NULL;
		r = 0;
	}
out:
	mp_procmaps_free(pm);
	if (elf)
		elf_end(elf);
	close(fd);
	return r;
}
