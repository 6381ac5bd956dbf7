// SPDX-License-Identifier: MIT
/* libFuzzer target: the allocator wrappers' resolver (daemon/sources/
 * wrappers.c) over a hostile ELF object (a container chooses the files its
 * process maps). The input is one file: its symbol tables are scanned for
 * the default list and for an exact name, a short glob and a match-all
 * glob, once through the hash tables and once by a full scan, and then
 * resolved as a process maps it (twice, at two addresses). Checked: every
 * range lies in the file and in order, a hash lookup finds nothing a full
 * scan does not, and the resolved ranges lie in the mappings. */
#include <inttypes.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz_memfd.h"
#include "procmaps.h"
#include "wrappers.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_FOUND 1024
#define MAP_SIZE ((uint64_t)0x100000)

static const uint64_t starts[] = { 0x7f0000000000, 0x7f0000400000 };

static size_t scan(const struct mp_wrappers *w, int fd, unsigned flags, struct mp_wrap_range *r,
		   size_t size)
{
	struct mp_wrappers_scan st;
	int n = mp_wrappers_scan_fd(w, fd, flags, r, MAX_FOUND, &st);

	if (n < 0)
		return 0;
	if ((size_t)n > MAX_FOUND)
		n = MAX_FOUND;
	if (st.hashed && st.hash_bad)
		__builtin_trap();
	if (st.symbols > size) /* a symbol is 24 bytes of the file */
		__builtin_trap();
	for (int i = 0; i < n; i++) {
		if (r[i].lo >= r[i].hi || r[i].lo >= size || r[i].hi - r[i].lo > (1u << 24))
			__builtin_trap();
		if (i &&
		    (r[i].lo < r[i - 1].lo || (r[i].lo == r[i - 1].lo && r[i].hi <= r[i - 1].hi)))
			__builtin_trap();
	}
	return (size_t)n;
}

static bool contains(const struct mp_wrap_range *r, size_t n, const struct mp_wrap_range *x)
{
	for (size_t i = 0; i < n; i++)
		if (r[i].lo == x->lo && r[i].hi == x->hi)
			return true;
	return false;
}

/* The object mapped twice, as a process maps it, and resolved. */
static void resolve(const struct mp_wrappers_opts *o, int fd)
{
	struct mp_wrap_range c[4];
	struct mp_procmaps *maps;
	struct mp_wrappers *w;
	char path[64], txt[512];
	struct stat sb;
	int n = 0;

	if (fstat(fd, &sb) < 0)
		__builtin_trap();
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	for (int i = 0; i < 2; i++)
		n += snprintf(txt + n, sizeof(txt) - (size_t)n,
			      "%" PRIx64 "-%" PRIx64 " r-xp 00000000 00:00 %" PRIu64 " %s\n"
			      "%" PRIx64 "-%" PRIx64 " rw-p 00000000 00:00 0\n",
			      starts[i], starts[i] + MAP_SIZE, (uint64_t)sb.st_ino, path,
			      starts[i] + MAP_SIZE, starts[i] + 2 * MAP_SIZE);
	if (mp_procmaps_parse(txt, strlen(txt), &maps) < 0)
		__builtin_trap();
	if (mp_wrappers_new(0, o, &w) < 0)
		__builtin_trap();
	if (mp_wrappers_update(w, maps) < 0 || mp_wrappers_pending(w))
		__builtin_trap();
	n = (int)mp_wrappers_coarse(w, c, 4);
	/* code of the two mappings, a function running at most 16 MiB on */
	for (int i = 0; i < n; i++)
		if (c[i].lo >= c[i].hi || c[i].lo < starts[0] || c[i].lo >= starts[1] + MAP_SIZE ||
		    c[i].hi > starts[1] + MAP_SIZE + (1u << 24) || !mp_wrappers_has(w, c[i].lo))
			__builtin_trap();
	/* the same object again: nothing new */
	if (mp_wrappers_update(w, maps) != 0)
		__builtin_trap();
	mp_wrappers_free(w);
	mp_procmaps_free(maps);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct mp_wrap_range hashed[MAX_FOUND], full[MAX_FOUND];
	const char *fns[] = { "malloc", "f", "g?*", "*" };
	const struct mp_wrappers_opts opts[] = {
		{ 0 },
		{ .fn_globs = fns, .n_fn = 4, .no_default = true },
	};
	int fd = mp_fuzz_memfd("fuzz-wrappers", data, size);

	for (size_t k = 0; k < sizeof(opts) / sizeof(*opts); k++) {
		struct mp_wrappers *w;
		size_t nh, nf;

		if (mp_wrappers_new(0, &opts[k], &w) < 0)
			__builtin_trap();
		nh = scan(w, fd, 0, hashed, size);
		nf = scan(w, fd, MP_WRAPPERS_FULL_SCAN, full, size);
		/* a name found through the hash table is one a scan finds */
		for (size_t i = 0; nf < MAX_FOUND && i < nh; i++)
			if (!contains(full, nf, &hashed[i]))
				__builtin_trap();
		mp_wrappers_free(w);
		resolve(&opts[k], fd);
	}
	close(fd);
	return 0;
}
