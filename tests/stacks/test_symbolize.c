// SPDX-License-Identifier: MIT
/*
 * The symbolizer over address spaces that break the usual assumptions,
 * built from maps text so every case is exact: an ET_EXEC file mapped a
 * second time elsewhere (V8 does so with node's builtins; it once freed
 * the module under the lookups), two ET_EXEC files of one name, and files
 * that cannot be read as the ELF file mapped (truncated, garbage, gone,
 * replaced, a FIFO, a directory) beside JIT code in anonymous memory. The
 * readable frames keep their names, the others their addresses and file
 * offsets, and the counts say which is which.
 */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../common/helpers.h"
#include "modules.h"
#include "procmaps.h"
#include "profile.h"
#include "symbolize.h"
#include "unwind.h"

static const char *fixture(const char *name)
{
	return mp_test_build_path(name);
}

/* The value of symbol @sym of @elf (nm). */
static uint64_t nm_value(const char *elf, const char *sym)
{
	char cmd[4400], line[512];
	uint64_t v = 0;
	FILE *f;

	snprintf(cmd, sizeof(cmd), "nm -P '%s'", elf);
	cr_assert_not_null(f = popen(cmd, "r"));
	while (fgets(line, sizeof(line), f)) {
		char name[256], type;
		unsigned long long val;

		if (sscanf(line, "%255s %c %llx", name, &type, &val) == 3 && !strcmp(name, sym))
			v = val;
	}
	cr_assert_eq(pclose(f), 0);
	cr_assert_neq(v, 0, "%s not in %s", sym, elf);
	return v;
}

/* The executable PT_LOAD of @elf: its page-aligned vaddr and offset, and
 * its size. */
struct text {
	uint64_t vaddr, offset, size;
};

static struct text text_of(const char *elf)
{
	int fd = open(elf, O_RDONLY);
	struct text t = { 0 };
	size_t n;
	Elf *e;

	cr_assert_geq(fd, 0);
	cr_assert_neq(elf_version(EV_CURRENT), EV_NONE);
	cr_assert_not_null(e = elf_begin(fd, ELF_C_READ, NULL));
	cr_assert_eq(elf_getphdrnum(e, &n), 0);
	for (size_t i = 0; i < n; i++) {
		GElf_Phdr ph;

		cr_assert_not_null(gelf_getphdr(e, i, &ph));
		if (ph.p_type == PT_LOAD && (ph.p_flags & PF_X)) {
			t.vaddr = ph.p_vaddr & ~4095ull;
			t.offset = ph.p_offset & ~4095ull;
			t.size = (ph.p_vaddr + ph.p_filesz - t.vaddr + 4095) & ~4095ull;
		}
	}
	elf_end(e);
	close(fd);
	cr_assert_neq(t.size, 0);
	return t;
}

/* One maps line: @path's text at @start (inode and device of @path when
 * it exists, else @ino). */
static void map_line(FILE *f, uint64_t start, uint64_t size, uint64_t offset, const char *path,
		     uint64_t ino)
{
	struct stat st;
	unsigned int ma = 0, mi = 0;

	if (path[0] == '/' && stat(path, &st) == 0) {
		ino = ino ? ino : st.st_ino;
		ma = major(st.st_dev);
		mi = minor(st.st_dev);
	}
	fprintf(f, "%" PRIx64 "-%" PRIx64 " r-xp %08" PRIx64 " %02x:%02x %" PRIu64 " %s\n", start,
		start + size, offset, ma, mi, ino, path);
}

/* A profile whose sites' callers are @callers. */
static struct mp_profile *profile_of(const uint64_t *callers, uint32_t n)
{
	struct mp_profile *p = mp_profile_new();

	cr_assert_not_null(p);
	p->n_sites = n;
	cr_assert_not_null(p->sites = calloc(n, sizeof(*p->sites)));
	for (uint32_t i = 0; i < n; i++)
		p->sites[i] = (struct mp_site){ .caller = callers[i], .alloc_objects = 1 };
	return p;
}

/* A profile whose sites' callers are @callers, symbolized against @maps
 * as after the process exited. */
static struct mp_profile *symbolize(const char *maps_txt, const uint64_t *callers, uint32_t n,
				    struct mp_symbolize_stats *st)
{
	struct mp_profile *p = profile_of(callers, n);
	struct mp_procmaps *maps;

	cr_assert_eq(mp_procmaps_parse(maps_txt, strlen(maps_txt), &maps), 0, "%s", maps_txt);
	/* pid 0 has no /proc entry: as if the process were gone. */
	cr_assert_eq(mp_symbolize(p, maps, NULL, 0, st), 0);
	mp_procmaps_free(maps);
	return p;
}

static const struct mp_location *loc(const struct mp_profile *p, uint64_t addr)
{
	const struct mp_location *l = mp_profile_location(p, addr);

	cr_assert_not_null(l, "no location for %#" PRIx64, addr);
	cr_assert_eq(l->addr, addr);
	return l;
}

static void expect_named(const struct mp_profile *p, uint64_t addr, const char *fn,
			 uint64_t rel_addr, const char *path)
{
	const struct mp_location *l = loc(p, addr);

	cr_assert_not_null(l->function, "%#" PRIx64 ": no function", addr);
	cr_expect_str_eq(l->function, fn, "%#" PRIx64, addr);
	cr_expect_eq(l->rel_addr, rel_addr, "%#" PRIx64 ": rel %#" PRIx64 ", want %#" PRIx64, addr,
		     l->rel_addr, rel_addr);
	cr_assert_lt(l->object, p->n_objects);
	cr_expect_str_eq(p->objects[l->object].path, path);
	cr_expect_not_null(p->objects[l->object].build_id);
}

/* V8 maps node's embedded builtins a second time, from the executable
 * (ET_EXEC), next to its code range: both copies symbolize, through the
 * one module of the file. */
Test(symbolize, exec_mapped_twice)
{
	const char *exe = fixture("tests/stacks/symfix-nopie");
	struct text t = text_of(exe);
	uint64_t a = nm_value(exe, "symfix_alpha"), b = nm_value(exe, "symfix_beta");
	const uint64_t copy = 0x7f0000200000;
	struct mp_symbolize_stats st;
	char *txt = NULL;
	size_t cap = 0;
	FILE *f = open_memstream(&txt, &cap);

	cr_assert_lt(t.vaddr, copy, "the fixture is not a non-PIE executable");
	map_line(f, t.vaddr, t.size, t.offset, exe, 0);
	map_line(f, copy, t.size, t.offset, exe, 0);
	fclose(f);
	const uint64_t callers[] = { a + 2, copy + (b - t.vaddr) + 2, b + 2,
				     copy + (a - t.vaddr) + 2 };
	struct mp_profile *p = symbolize(txt, callers, 4, &st);

	expect_named(p, callers[0], "symfix_alpha", a + 2, exe);
	expect_named(p, callers[1], "symfix_beta", b + 2, exe);
	expect_named(p, callers[2], "symfix_beta", b + 2, exe);
	expect_named(p, callers[3], "symfix_alpha", a + 2, exe);
	cr_expect_eq(p->n_objects, 2);
	cr_expect_eq(st.frames, 4);
	cr_expect_eq(st.unsymbolized, 0);
	cr_expect_eq(st.objects, 2);
	cr_expect_eq(st.objects_unreadable, 0);
	mp_profile_free(p);
	free(txt);
}

/* Two ET_EXEC files of one name: libdwfl would take the second for the
 * first (same name, same addresses) and drop the first. */
Test(symbolize, two_exec_files_one_name)
{
	const char *exe = fixture("tests/stacks/symfix-nopie");
	struct text t = text_of(exe);
	uint64_t a = nm_value(exe, "symfix_alpha");
	char dir[128], other[256], cmd[1024];
	const uint64_t copy = 0x7f0000400000;
	struct mp_symbolize_stats st;
	char *txt = NULL;
	size_t cap = 0;
	FILE *f;

	mp_test_tmpdir(dir, sizeof(dir), "symbolize");
	snprintf(other, sizeof(other), "%s/symfix-nopie", dir);
	snprintf(cmd, sizeof(cmd), "cp '%s' '%s'", exe, other);
	cr_assert_eq(system(cmd), 0);
	f = open_memstream(&txt, &cap);
	map_line(f, t.vaddr, t.size, t.offset, exe, 0);
	map_line(f, copy, t.size, t.offset, other, 0);
	fclose(f);
	const uint64_t callers[] = { a + 2, copy + (a - t.vaddr) + 2 };
	struct mp_profile *p = symbolize(txt, callers, 2, &st);

	expect_named(p, callers[0], "symfix_alpha", a + 2, exe);
	expect_named(p, callers[1], "symfix_alpha", a + 2, other);
	cr_expect_eq(st.unsymbolized, 0);
	mp_profile_free(p);
	free(txt);
	mp_test_rmtree(dir);
}

/* Many files, several mappings of some (each file is symbolized in a
 * Dwfl of its own, by whichever of two threads takes it): every caller is
 * named, at its file's offset, in the object of its own mapping. */
Test(symbolize, many_files_each_caller_in_its_own)
{
	const char *pie = fixture("tests/stacks/symfix-pie");
	struct text t = text_of(pie);
	uint64_t a = nm_value(pie, "symfix_alpha"), b = nm_value(pie, "symfix_beta");
	enum { FILES = 24, MAPS = 2 * FILES };
	static char path[FILES][256];
	static uint64_t callers[2 * MAPS];
	struct mp_symbolize_stats st;
	char dir[128], cmd[1024];
	char *txt = NULL;
	size_t cap = 0;
	FILE *f;

	mp_test_tmpdir(dir, sizeof(dir), "symbolize");
	f = open_memstream(&txt, &cap);
	for (int i = 0; i < FILES; i++) {
		snprintf(path[i], sizeof(path[i]), "%s/lib%02d.so", dir, i);
		snprintf(cmd, sizeof(cmd), "cp '%s' '%s'", pie, path[i]);
		cr_assert_eq(system(cmd), 0);
	}
	/* file i at two places: the second mapping after every first one */
	for (int m = 0; m < MAPS; m++) {
		uint64_t base = 0x7f0000000000 + (uint64_t)m * 0x1000000;

		map_line(f, base, t.size, t.offset, path[m % FILES], 0);
		callers[2 * m] = base + (a - t.vaddr) + 2;
		callers[2 * m + 1] = base + (b - t.vaddr) + 2;
	}
	fclose(f);
	struct mp_profile *p = symbolize(txt, callers, 2 * MAPS, &st);

	for (int m = 0; m < MAPS; m++) {
		const struct mp_location *l = loc(p, callers[2 * m]);

		expect_named(p, callers[2 * m], "symfix_alpha", a + 2, path[m % FILES]);
		expect_named(p, callers[2 * m + 1], "symfix_beta", b + 2, path[m % FILES]);
		cr_expect_eq(p->objects[l->object].start, 0x7f0000000000 + (uint64_t)m * 0x1000000);
	}
	cr_expect_eq(p->n_objects, MAPS);
	cr_expect_eq(st.frames, 2 * MAPS);
	cr_expect_eq(st.unsymbolized, 0);
	cr_expect_eq(st.objects_unreadable, 0);
	mp_profile_free(p);
	free(txt);
	mp_test_rmtree(dir);
}

/* Debug files opened ahead (mp_symbolize_warm_start()): a symbolization
 * takes each file opened for its very mapping, also when the file is gone
 * from disk since, and opens the others itself; every caller is named as
 * without them. */
Test(symbolize, files_opened_ahead_are_the_ones_looked_up)
{
	const char *pie = fixture("tests/stacks/symfix-pie");
	struct text t = text_of(pie);
	uint64_t a = nm_value(pie, "symfix_alpha"), b = nm_value(pie, "symfix_beta");
	const uint64_t base[3] = { 0x7f0000000000, 0x7f0001000000, 0x7f0002000000 };
	char dir[128], path[3][256], cmd[1024];
	struct mp_procmaps *maps, *later, *ahead;
	struct mp_symbolize_stats st;
	struct mp_symbolize_warm *w;
	uint64_t callers[6];
	char *txt[3] = { NULL, NULL, NULL };
	size_t cap;
	FILE *f;

	mp_test_tmpdir(dir, sizeof(dir), "symbolize");
	for (int i = 0; i < 3; i++) {
		snprintf(path[i], sizeof(path[i]), "%s/lib%d.so", dir, i);
		snprintf(cmd, sizeof(cmd), "cp '%s' '%s'", pie, path[i]);
		cr_assert_eq(system(cmd), 0);
		callers[2 * i] = base[i] + (a - t.vaddr) + 2;
		callers[2 * i + 1] = base[i] + (b - t.vaddr) + 2;
	}
	/* the snapshots: file 0 at first, file 1 later; opened ahead: both,
	 * and file 2 at another address than it is looked up at */
	f = open_memstream(&txt[0], &cap);
	map_line(f, base[0], t.size, t.offset, path[0], 0);
	fclose(f);
	f = open_memstream(&txt[1], &cap);
	map_line(f, base[0], t.size, t.offset, path[0], 0);
	map_line(f, base[1], t.size, t.offset, path[1], 0);
	map_line(f, base[2], t.size, t.offset, path[2], 0);
	fclose(f);
	f = open_memstream(&txt[2], &cap);
	map_line(f, base[1] - 0x100000, t.size, t.offset, path[2], 0);
	fclose(f);
	cr_assert_eq(mp_procmaps_parse(txt[0], strlen(txt[0]), &maps), 0);
	cr_assert_eq(mp_procmaps_parse(txt[1], strlen(txt[1]), &later), 0);
	cr_assert_eq(mp_procmaps_parse(txt[2], strlen(txt[2]), &ahead), 0);
	{
		/* files 0 and 1 ahead from the snapshots, file 2 elsewhere
		 * (and once freed at once: its thread joined) */
		struct mp_procmaps one = { .maps = later->maps, .n = 2 };

		cr_assert_eq(mp_symbolize_warm_start(maps, &one, 0, NULL, NULL, &w), 0);
		mp_symbolize_warm_free(w);
		cr_assert_eq(mp_symbolize_warm_start(&one, ahead, 0, NULL, NULL, &w), 0);
	}
	mp_symbolize_warm_wait(w);
	/* file 1 replaced since it was opened: only its opened copy names it */
	cr_assert_eq(unlink(path[1]), 0);
	{
		struct mp_profile *p = profile_of(callers, 6);

		cr_assert_eq(mp_symbolize_warmed(p, maps, later, 0, NULL, NULL, w, &st), 0);
		for (int i = 0; i < 3; i++) {
			expect_named(p, callers[2 * i], "symfix_alpha", a + 2, path[i]);
			expect_named(p, callers[2 * i + 1], "symfix_beta", b + 2, path[i]);
		}
		cr_expect_eq(st.unsymbolized, 0);
		cr_expect_eq(st.objects_unreadable, 0);
		mp_profile_free(p);
	}
	/* retired (its files being closed by a thread of its own), it is
	 * used no more: file 1 is gone */
	mp_symbolize_warm_retire(w);
	{
		struct mp_profile *p = profile_of(callers, 6);

		cr_assert_eq(mp_symbolize_warmed(p, maps, later, 0, NULL, NULL, w, &st), 0);
		cr_expect_eq(st.objects_unreadable, 1);
		mp_profile_free(p);
	}
	mp_symbolize_warm_free(w);
	{
		/* without them, file 1 is gone */
		struct mp_profile *p = profile_of(callers, 6);

		cr_assert_eq(mp_symbolize(p, maps, later, 0, &st), 0);
		cr_expect_eq(st.objects_unreadable, 1);
		cr_expect_eq(st.unsymbolized, 2);
		mp_profile_free(p);
	}
	mp_procmaps_free(maps);
	mp_procmaps_free(later);
	mp_procmaps_free(ahead);
	for (int i = 0; i < 3; i++)
		free(txt[i]);
	mp_test_rmtree(dir);
}

static int open_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	int n = 0;

	cr_assert_not_null(d);
	while (readdir(d))
		n++;
	closedir(d);
	return n;
}

/* A target's maps are its own to make: of 400 code mappings, the files
 * of at most 256 are opened ahead (and held open until symbolized). */
Test(symbolize, files_opened_ahead_are_bounded)
{
	const char *pie = fixture("tests/stacks/symfix-pie");
	struct text t = text_of(pie);
	struct mp_symbolize_warm *w;
	struct mp_procmaps *maps;
	char *txt = NULL;
	size_t cap = 0;
	int before;
	FILE *f = open_memstream(&txt, &cap);

	for (int m = 0; m < 400; m++)
		map_line(f, 0x7f0000000000 + (uint64_t)m * 0x1000000, t.size, t.offset, pie, 0);
	fclose(f);
	cr_assert_eq(mp_procmaps_parse(txt, strlen(txt), &maps), 0);
	before = open_fds();
	cr_assert_eq(mp_symbolize_warm_start(maps, NULL, 0, NULL, NULL, &w), 0);
	mp_symbolize_warm_wait(w);
	cr_expect_gt(open_fds() - before, 200, "the files are held open until symbolized");
	cr_expect_leq(open_fds() - before, 256, "%d files open", open_fds() - before);
	/* closed by the thread retiring them, joined by the free */
	mp_symbolize_warm_retire(w);
	mp_symbolize_warm_free(w);
	cr_expect_eq(open_fds(), before);
	mp_procmaps_free(maps);
	free(txt);
}

/* Every mapping but the one starting at *@ctx. */
static bool all_but(const void *ctx, const struct mp_mapping *m)
{
	return m->start != *(const uint64_t *)ctx;
}

/* Of more code mappings than are opened ahead, the highest (a process's
 * first libraries: libc) are, and of them only those the caller says
 * hold frames: a file deleted once opened ahead is still named through
 * its opened copy, and only then. */
Test(symbolize, files_opened_ahead_hold_frames_highest_first)
{
	const char *pie = fixture("tests/stacks/symfix-pie");
	struct text t = text_of(pie);
	const uint64_t a = nm_value(pie, "symfix_alpha"), top = 0x7f0000000000 + 399ull * 0x1000000;
	uint64_t caller = top + (a - t.vaddr) + 2;
	char dir[128], low[256], high[256], cmd[1024];
	struct mp_symbolize_stats st;
	struct mp_symbolize_warm *w;
	struct mp_procmaps *maps;

	mp_test_tmpdir(dir, sizeof(dir), "symbolize");
	snprintf(low, sizeof(low), "%s/liblow.so", dir);
	snprintf(high, sizeof(high), "%s/libhigh.so", dir);
	for (int pass = 0; pass < 2; pass++) {
		char *txt = NULL;
		size_t cap = 0;
		FILE *f = open_memstream(&txt, &cap);
		struct mp_profile *p = profile_of(&caller, 1);

		snprintf(cmd, sizeof(cmd), "cp '%s' '%s' && cp '%s' '%s'", pie, low, pie, high);
		cr_assert_eq(system(cmd), 0);
		/* 399 mappings of one file, the 400th (the highest) of another */
		for (int m = 0; m < 400; m++)
			map_line(f, 0x7f0000000000 + (uint64_t)m * 0x1000000, t.size, t.offset,
				 m < 399 ? low : high, 0);
		fclose(f);
		cr_assert_eq(mp_procmaps_parse(txt, strlen(txt), &maps), 0);
		cr_assert_eq(
			mp_symbolize_warm_start(maps, NULL, 0, pass ? all_but : NULL, &top, &w), 0);
		mp_symbolize_warm_wait(w);
		cr_assert_eq(unlink(high), 0);
		cr_assert_eq(mp_symbolize_warmed(p, maps, NULL, 0, NULL, NULL, w, &st), 0);
		if (pass) {
			cr_expect_eq(st.objects_unreadable, 1, "not wanted: not opened ahead");
		} else {
			expect_named(p, caller, "symfix_alpha", a + 2, high);
			cr_expect_eq(st.objects_unreadable, 0);
		}
		mp_symbolize_warm_free(w);
		mp_profile_free(p);
		mp_procmaps_free(maps);
		free(txt);
	}
	mp_test_rmtree(dir);
}

static void write_file(const char *path, const void *data, size_t n)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);

	cr_assert_geq(fd, 0, "%s", path);
	cr_assert_eq(write(fd, data, n), (ssize_t)n);
	close(fd);
}

/* The first @n bytes of @src in @dst. */
static void copy_head(const char *src, const char *dst, size_t n)
{
	char *buf = malloc(n);
	int fd = open(src, O_RDONLY);
	ssize_t k;

	cr_assert(buf && fd >= 0);
	k = read(fd, buf, n);
	cr_assert_gt(k, 0);
	write_file(dst, buf, (size_t)k);
	close(fd);
	free(buf);
}

/* Files that cannot be read as the ELF file mapped give their frames the
 * address and the offset in the file, beside a readable one that keeps
 * its names; nothing blocks on a FIFO. */
Test(symbolize, unreadable_files_degrade_to_offsets)
{
	const char *pie = fixture("tests/stacks/symfix-pie");
	struct text t = text_of(pie);
	uint64_t a = nm_value(pie, "symfix_alpha");
	char dir[128], path[8][256], garbage[8192];
	struct stat st_pie;
	struct mp_symbolize_stats st;
	char *txt = NULL;
	size_t cap = 0;
	FILE *f;
	const char *names[] = { "head",	    "half",    "garbage", "gone",
				"replaced", "deleted", "fifo",	  "dir" };
	enum { N = 8 };
	uint64_t base[N], callers[N + 2];
	const uint64_t good = 0x7f0000000000, anon = 0x7f0001000000;

	cr_assert_eq(stat(pie, &st_pie), 0);
	mp_test_tmpdir(dir, sizeof(dir), "symbolize");
	for (int i = 0; i < N; i++)
		snprintf(path[i], sizeof(path[i]), "%s/%s.so", dir, names[i]);
	copy_head(pie, path[0], 64); /* the ELF header only */
	copy_head(pie, path[1], (size_t)st_pie.st_size / 2);
	memset(garbage, 0x7f, sizeof(garbage));
	memcpy(garbage, "\177ELF\2\1\1", 7);
	write_file(path[2], garbage, sizeof(garbage));
	copy_head(pie, path[3], (size_t)st_pie.st_size);
	copy_head(pie, path[4], (size_t)st_pie.st_size);
	cr_assert_eq(mkfifo(path[6], 0600), 0);
	cr_assert_eq(mkdir(path[7], 0700), 0);

	f = open_memstream(&txt, &cap);
	map_line(f, good, t.size, t.offset, pie, 0);
	for (int i = 0; i < N; i++) {
		base[i] = 0x7f0000100000 + (uint64_t)i * 0x100000;
		if (i == 4) /* another inode than the mapped file's */
			map_line(f, base[i], t.size, t.offset, path[i], 1);
		else if (i == 5)
			fprintf(f,
				"%" PRIx64 "-%" PRIx64 " r-xp %08" PRIx64
				" fe:00 77 %s (deleted)\n",
				base[i], base[i] + t.size, t.offset, pie);
		else
			map_line(f, base[i], t.size, t.offset, path[i], 0);
		callers[i] = base[i] + 0x123;
	}
	/* JIT code: an anonymous executable mapping */
	fprintf(f, "%" PRIx64 "-%" PRIx64 " rwxp 00000000 00:00 0 \n", anon, anon + 0x10000);
	fclose(f);
	cr_assert_eq(unlink(path[3]), 0); /* removed after it was mapped */
	callers[N] = good + (a - t.vaddr) + 2;
	callers[N + 1] = anon + 0x40;
	struct mp_profile *p = symbolize(txt, callers, N + 2, &st);

	expect_named(p, callers[N], "symfix_alpha", a + 2, pie);
	for (int i = 0; i < N; i++) {
		const struct mp_location *l = loc(p, callers[i]);

		/* half a file may still name something from its dynamic
		 * symbols; the others have nothing to read */
		if (i != 1)
			cr_expect_null(l->function, "%s: %s", names[i], l->function);
		cr_assert_lt(l->object, p->n_objects, "%s", names[i]);
		cr_expect_eq(p->objects[l->object].start, base[i], "%s", names[i]);
		if (i != 1)
			cr_expect_null(p->objects[l->object].build_id, "%s", names[i]);
		if (i != 1)
			cr_expect_eq(l->rel_addr, t.offset + 0x123, "%s: %#" PRIx64, names[i],
				     l->rel_addr);
	}
	const struct mp_location *j = loc(p, callers[N + 1]);

	cr_expect_eq(j->object, MP_NONE);
	cr_expect_null(j->function);
	cr_expect_eq(st.frames, N + 2);
	cr_expect_geq(st.unsymbolized, N);
	cr_expect_leq(st.unsymbolized, N + 1);
	cr_expect_eq(st.anonymous, 1);
	cr_expect_eq(st.objects, N + 1);
	cr_expect_geq(st.objects_unreadable, N - 1);
	mp_profile_free(p);
	free(txt);
	mp_test_rmtree(dir);
}

/* The unwinder over the same address space: the copy of the ET_EXEC file
 * is not reported where the file does not lie, and the module of the file
 * where it does survives (the unwinder's machine comes from it). */
Test(symbolize, unwinder_exec_mapped_twice)
{
	const char *exe = fixture("tests/stacks/symfix-nopie");
	struct text t = text_of(exe);
	const uint64_t copy = 0x7f0000200000;
	struct mp_procmaps *maps;
	struct mp_unwinder *u;
	char *txt = NULL;
	size_t cap = 0;
	FILE *f = open_memstream(&txt, &cap);

	map_line(f, t.vaddr, t.size, t.offset, exe, 0);
	map_line(f, copy, t.size, t.offset, exe, 0);
	fclose(f);
	cr_assert_eq(mp_procmaps_parse(txt, strlen(txt), &maps), 0);
	cr_assert_eq(mp_unwinder_new(0, maps, &u), 0);
	cr_expect(mp_unwinder_knows(u, t.vaddr + 16));
	cr_expect(mp_unwinder_knows(u, copy + 16));
	mp_unwinder_free(u);
	mp_procmaps_free(maps);
	free(txt);
}

/* ---- debug files from a debuginfod server ---- */

extern char **environ;

/* The GNU build-id of @elf in hex (readelf -n). */
static void build_id_of(const char *elf, char *out, size_t size)
{
	char cmd[4400], line[512];
	FILE *f;

	out[0] = '\0';
	snprintf(cmd, sizeof(cmd), "readelf -n '%s'", elf);
	cr_assert_not_null(f = popen(cmd, "r"));
	while (fgets(line, sizeof(line), f)) {
		const char *k = strstr(line, "Build ID: ");

		if (k)
			snprintf(out, size, "%.*s", (int)strcspn(k + 10, " \n"), k + 10);
	}
	cr_assert_eq(pclose(f), 0);
	cr_assert_neq(out[0], '\0', "%s has no build-id", elf);
}

/* The HTTP status of GET @path on 127.0.0.1:@port, 0 when none came. */
static int http_status(int port, const char *path)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	char req[512], resp[64] = { 0 };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), code = 0;
	size_t got = 0;
	ssize_t n;

	cr_assert_geq(fd, 0);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0) {
		snprintf(req, sizeof(req), "GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n", path);
		if (write(fd, req, strlen(req)) == (ssize_t)strlen(req))
			while (got < sizeof(resp) - 1 &&
			       (n = read(fd, resp + got, sizeof(resp) - 1 - got)) > 0)
				got += (size_t)n;
		sscanf(resp, "HTTP/%*s %d", &code);
	}
	close(fd);
	return code;
}

/* elfutils' debuginfod serving the ELF/DWARF files of @srv on a loopback
 * port (its database and log in @dir), once it serves @build_id's
 * debuginfo: its pid, the port in *@ret_port. */
static pid_t debuginfod_start(const char *srv, const char *dir, const char *build_id, int *ret_port)
{
	char db[512], log_path[512], port_s[16], path[256];

	cr_assert_neq(DEBUGINFOD[0], '\0',
		      "no debuginfod program: install the Debian package debuginfod "
		      "(scripts/install-deps)");
	snprintf(db, sizeof(db), "%s/db.sqlite", dir);
	snprintf(log_path, sizeof(log_path), "%s/debuginfod.log", dir);
	snprintf(path, sizeof(path), "/buildid/%s/debuginfo", build_id);
	for (int attempt = 0; attempt < 20; attempt++) {
		int port = 20000 + (int)((getpid() * 7 + attempt * 131) % 30000), status;
		char *argv[] = { DEBUGINFOD, "-F", (char *)srv, "-p", port_s, "-d", db, NULL };
		pid_t pid;

		snprintf(port_s, sizeof(port_s), "%d", port);
		pid = fork();
		cr_assert_geq(pid, 0);
		if (pid == 0) {
			/* gone with the test, however it ends; its output in
			 * @dir, not on the test's pipes */
			int log = open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);

			prctl(PR_SET_PDEATHSIG, SIGKILL);
			if (log < 0 || dup2(log, 1) < 0 || dup2(log, 2) < 0)
				_exit(127);
			execve(DEBUGINFOD, argv, environ);
			_exit(127);
		}
		/* its first scan of @dir; a port taken ends it at once */
		for (int i = 0; i < 600; i++) {
			if (waitpid(pid, &status, WNOHANG) == pid) {
				pid = 0;
				break;
			}
			if (http_status(port, path) == 200) {
				*ret_port = port;
				return pid;
			}
			usleep(50 * 1000);
		}
		if (pid) {
			kill(pid, SIGKILL);
			waitpid(pid, &status, 0);
			cr_assert_fail("debuginfod on port %d did not serve %s in 30 s", port,
				       path);
		}
	}
	cr_assert_fail("debuginfod did not start on any of 20 ports");
	return 0;
}

/* A file stripped of its symbols and debug info, without a debuglink:
 * its frames are addresses, unless debuginfod was asked for
 * (mp_dwfl_set_net(), --debuginfod) and DEBUGINFOD_URLS names a server
 * that has its debug file (by build-id); then they have function, file
 * and line. DEBUGINFOD_URLS alone (a login shell may set it) fetches
 * nothing, and a server that does not answer leaves them addresses. */
Test(symbolize, debug_file_from_debuginfod, .timeout = 120)
{
	const char *exe = fixture("tests/stacks/symfix-net");
	const char *debug = fixture("tests/stacks/symfix-net.debug");
	struct text t = text_of(exe);
	uint64_t a = nm_value(debug, "symfix_alpha"), b = nm_value(debug, "symfix_beta");
	char dir[128], srv[200], cache[200], cache_dead[200], url[64], id[128], cmd[1024];
	struct mp_symbolize_stats st;
	const struct mp_location *l;
	char *txt = NULL;
	size_t cap = 0;
	int port, status;
	pid_t pid;
	FILE *f = open_memstream(&txt, &cap);

	map_line(f, t.vaddr, t.size, t.offset, exe, 0);
	fclose(f);
	const uint64_t callers[] = { a + 2, b + 2 };
	struct mp_profile *p;

	build_id_of(exe, id, sizeof(id));
	mp_test_tmpdir(dir, sizeof(dir), "debuginfod");
	snprintf(srv, sizeof(srv), "%s/srv", dir);
	snprintf(cache, sizeof(cache), "%s/cache", dir);
	snprintf(cache_dead, sizeof(cache_dead), "%s/cache-dead", dir);
	snprintf(cmd, sizeof(cmd), "mkdir '%s' && cp '%s' '%s/'", srv, debug, srv);
	cr_assert_eq(system(cmd), 0);

	unsetenv("DEBUGINFOD_URLS");
	setenv("DEBUGINFOD_CACHE_PATH", cache, 1);
	mp_dwfl_set_net(true);
	p = symbolize(txt, callers, 2, &st);
	cr_expect_null(loc(p, callers[0])->function, "named without its debug file");
	cr_expect_eq(st.unsymbolized, 2);
	mp_profile_free(p);

	pid = debuginfod_start(srv, dir, id, &port);
	snprintf(url, sizeof(url), "http://127.0.0.1:%d", port);
	setenv("DEBUGINFOD_URLS", url, 1);
	mp_dwfl_set_net(false);
	p = symbolize(txt, callers, 2, &st);
	cr_expect_eq(st.unsymbolized, 2, "fetched without --debuginfod");
	mp_profile_free(p);

	/* nothing listens there (its misses cached apart) */
	snprintf(url, sizeof(url), "http://127.0.0.1:%d", port == 65000 ? 65001 : 65000);
	setenv("DEBUGINFOD_URLS", url, 1);
	setenv("DEBUGINFOD_CACHE_PATH", cache_dead, 1);
	mp_dwfl_set_net(true);
	p = symbolize(txt, callers, 2, &st);
	cr_expect_eq(st.unsymbolized, 2);
	mp_profile_free(p);

	snprintf(url, sizeof(url), "http://127.0.0.1:%d", port);
	setenv("DEBUGINFOD_URLS", url, 1);
	setenv("DEBUGINFOD_CACHE_PATH", cache, 1);
	p = symbolize(txt, callers, 2, &st);
	expect_named(p, callers[0], "symfix_alpha", a + 2, exe);
	expect_named(p, callers[1], "symfix_beta", b + 2, exe);
	l = loc(p, callers[0]);
	cr_expect(l->file && strstr(l->file, "symfix.c"), "file %s", l->file ? l->file : "(none)");
	cr_expect_gt(l->line, 0);
	cr_expect_eq(st.unsymbolized, 0);
	mp_profile_free(p);

	mp_dwfl_set_net(false);
	unsetenv("DEBUGINFOD_URLS");
	unsetenv("DEBUGINFOD_CACHE_PATH");
	kill(pid, SIGTERM);
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	free(txt);
	mp_test_rmtree(dir);
}
