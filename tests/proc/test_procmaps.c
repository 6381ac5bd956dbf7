// SPDX-License-Identifier: MIT
/* Unit tests of the /proc/PID/maps parser (no privileges needed). */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "procmaps.h"

static const char sample[] =
	"55d0c0a00000-55d0c0a02000 r--p 00000000 fe:01 1311 /usr/bin/cat\n"
	"55d0c0a02000-55d0c0a07000 r-xp 00002000 fe:01 1311 /usr/bin/cat\n"
	"55d0c1c6d000-55d0c1c8e000 rw-p 00000000 00:00 0 [heap]\n"
	"7f3a4c000000-7f3a4c021000 rw-s 00000000 00:05 77 /dev/shm/x (deleted)\n"
	"7f3a4c100000-7f3a4c200000 rw-p 00000000 00:00 0 \n"
	"7f3a4c200000-7f3a4c228000 r-xp 00028000 fe:01 2888 /usr/lib/a b.so\n"
	"ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0 [vsyscall]\n";

struct want {
	uint64_t start, end, offset, inode;
	uint32_t maj, min, perms;
	const char *path;
};

Test(procmaps, parses_whole_file)
{
	static const struct want w[] = {
		{ 0x55d0c0a00000, 0x55d0c0a02000, 0, 1311, 0xfe, 1, MP_MAP_R, "/usr/bin/cat" },
		{ 0x55d0c0a02000, 0x55d0c0a07000, 0x2000, 1311, 0xfe, 1, MP_MAP_R | MP_MAP_X,
		  "/usr/bin/cat" },
		{ 0x55d0c1c6d000, 0x55d0c1c8e000, 0, 0, 0, 0, MP_MAP_R | MP_MAP_W, "[heap]" },
		{ 0x7f3a4c000000, 0x7f3a4c021000, 0, 77, 0, 5, MP_MAP_R | MP_MAP_W | MP_MAP_SHARED,
		  "/dev/shm/x (deleted)" },
		{ 0x7f3a4c100000, 0x7f3a4c200000, 0, 0, 0, 0, MP_MAP_R | MP_MAP_W, "" },
		{ 0x7f3a4c200000, 0x7f3a4c228000, 0x28000, 2888, 0xfe, 1, MP_MAP_R | MP_MAP_X,
		  "/usr/lib/a b.so" },
		{ 0xffffffffff600000, 0xffffffffff601000, 0, 0, 0, 0, MP_MAP_X, "[vsyscall]" },
	};
	struct mp_procmaps *pm;

	cr_assert_eq(mp_procmaps_parse(sample, strlen(sample), &pm), 0);
	cr_assert_eq(pm->n, sizeof(w) / sizeof(w[0]));
	for (size_t i = 0; i < pm->n; i++) {
		const struct mp_mapping *m = &pm->maps[i];

		cr_assert(m->start == w[i].start && m->end == w[i].end &&
				  m->offset == w[i].offset && m->inode == w[i].inode &&
				  m->dev_major == w[i].maj && m->dev_minor == w[i].min &&
				  m->perms == w[i].perms && !strcmp(m->path, w[i].path),
			  "mapping %zu differs (path '%s')", i, m->path);
	}
	cr_assert_eq(mp_procmaps_find(pm, 0x55d0c0a02000), &pm->maps[1]);
	cr_assert_eq(mp_procmaps_find(pm, 0x55d0c0a06fff), &pm->maps[1]);
	cr_assert_eq(mp_procmaps_find(pm, 0x55d0c0a01fff), &pm->maps[0]);
	cr_assert_null(mp_procmaps_find(pm, 0x55d0c0a07000));
	cr_assert_null(mp_procmaps_find(pm, 0));
	cr_assert_eq(mp_procmaps_find(pm, 0xffffffffff600fff), &pm->maps[6]);
	mp_procmaps_free(pm);
	mp_procmaps_free(NULL);
}

/* The last mapping found is tried first (a stack's frames come in runs
 * in one object): every lookup still answers by the current ranges, the
 * hint's mapping, another one, a gap right after it, and a hint left by
 * a larger table than the one the maps were merged down to. */
Test(procmaps, lookups_after_a_hit_answer_by_the_ranges)
{
	struct mp_procmaps *pm;

	cr_assert_eq(mp_procmaps_parse(sample, strlen(sample), &pm), 0);
	for (int round = 0; round < 2; round++) {
		cr_assert_eq(mp_procmaps_find(pm, 0x7f3a4c200010), &pm->maps[5]);
		cr_assert_eq(mp_procmaps_find(pm, 0x7f3a4c227fff), &pm->maps[5]);
		cr_assert_null(mp_procmaps_find(pm, 0x7f3a4c228000));
		cr_assert_null(mp_procmaps_find(pm, 0x7f3a4c1fffff + 0x28001));
		cr_assert_eq(mp_procmaps_find(pm, 0x7f3a4c1fffff), &pm->maps[4]);
		cr_assert_eq(mp_procmaps_find(pm, 0x55d0c0a00000), &pm->maps[0]);
		cr_assert_eq(mp_procmaps_find(pm, 0x55d0c0a02000), &pm->maps[1]);
		cr_assert_null(mp_procmaps_find(pm, 0x55d0c1c6cfff));
	}
	/* the hint past the table's end after it shrank */
	cr_assert_eq(mp_procmaps_find(pm, 0xffffffffff600000), &pm->maps[6]);
	pm->n = 3;
	cr_assert_null(mp_procmaps_find(pm, 0xffffffffff600000));
	cr_assert_eq(mp_procmaps_find(pm, 0x55d0c1c6d000), &pm->maps[2]);
	pm->n = 7;
	mp_procmaps_free(pm);
}

Test(procmaps, rejects_hostile_input)
{
	static const char *const bad[] = {
		"zz-1000 r--p 00000000 00:00 0\n",
		"2000-1000 r--p 00000000 00:00 0\n",
		"1000-2000 r--p\n",
		"1000-2000 r--p 0 0:0\n",
		"1000-2000 r--p 0 0:0 12x /a\n",
		"10000000000000000-10000000000000001 r--p 0 0:0 0\n",
		"1000-2000 rw\n",
		"1000-2000 r--p 0 100000000:0 0\n",
	};
	struct mp_procmaps *pm = NULL;
	char *big;
	size_t n = MP_PROCMAPS_MAX_LINE + 100;
	char nul[] = "1000-2000 r--p 0 0:0 0 /a\0b\n";

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		cr_assert_eq(mp_procmaps_parse(bad[i], strlen(bad[i]), &pm), -EINVAL,
			     "accepted '%s'", bad[i]);
	cr_assert_eq(mp_procmaps_parse(nul, sizeof(nul) - 1, &pm), -EINVAL);
	/* overlapping or unsorted: a torn read, to be read again */
	cr_assert_eq(mp_procmaps_parse("1000-3000 r--p 0 0:0 0\n2000-4000 r--p 0 0:0 0\n", 46, &pm),
		     -EAGAIN);
	cr_assert_eq(mp_procmaps_parse("3000-4000 r--p 0 0:0 0\n1000-2000 r--p 0 0:0 0\n", 46, &pm),
		     -EAGAIN);
	big = malloc(n + 1);
	cr_assert(big);
	memset(big, 'a', n);
	memcpy(big, "1000-2000 r--p 0 0:0 0 /", 25);
	big[n] = '\n';
	cr_assert_eq(mp_procmaps_parse(big, n + 1, &pm), -EINVAL);
	free(big);
	/* empty input is an empty map, and a last line without newline ok */
	cr_assert_eq(mp_procmaps_parse("", 0, &pm), 0);
	cr_assert_eq(pm->n, 0);
	mp_procmaps_free(pm);
	cr_assert_eq(mp_procmaps_parse("1000-2000 r-xp 0 0:0 0 /x", 25, &pm), 0);
	cr_assert_eq(pm->n, 1);
	cr_assert_str_eq(pm->maps[0].path, "/x");
	mp_procmaps_free(pm);
}

Test(procmaps, reads_own_maps)
{
	struct mp_procmaps *pm;
	const struct mp_mapping *m;
	char exe[4096];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);

	cr_assert_gt(n, 0);
	exe[n] = '\0';
	cr_assert_eq(mp_procmaps_read(getpid(), &pm), 0);
	m = mp_procmaps_find(pm, (uint64_t)(uintptr_t)&mp_procmaps_parse);
	cr_assert_not_null(m);
	cr_assert_str_eq(m->path, exe);
	cr_assert(m->perms & MP_MAP_X);
	mp_procmaps_free(pm);
	cr_assert_eq(mp_procmaps_read(-1, &pm), -ENOENT);
}

/* An exited process (a zombie) shows no mapping at all: that is no
 * address space to replace a copy read before with. */
Test(procmaps, exited_process_reads_as_gone)
{
	struct mp_procmaps *pm = NULL;
	pid_t pid = fork();

	cr_assert_geq(pid, 0);
	if (pid == 0)
		_exit(0);
	/* a zombie until reaped */
	for (int i = 0; i < 2000; i++) {
		char path[64], st[256] = "";
		FILE *f;

		snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
		f = fopen(path, "r");
		cr_assert_not_null(f);
		cr_assert_not_null(fgets(st, sizeof(st), f));
		fclose(f);
		if (strstr(st, ") Z "))
			break;
		usleep(1000);
	}
	cr_assert_eq(mp_procmaps_read(pid, &pm), -ESRCH);
	cr_assert_null(pm);
	cr_assert_eq(waitpid(pid, NULL, 0), pid);
}

static struct mp_procmaps *parsed(const char *text)
{
	struct mp_procmaps *pm;

	cr_assert_eq(mp_procmaps_parse(text, strlen(text), &pm), 0);
	return pm;
}

Test(procmaps, merge_keeps_what_the_fresh_read_does_not_cover)
{
	struct mp_procmaps *known = parsed("1000-2000 r-xp 0 fe:1 1 /a\n"
					   "3000-5000 r-xp 0 fe:1 2 /gone\n"
					   "8000-9000 rw-p 0 0:0 0 \n"),
			   *fresh = parsed("1000-2000 r-xp 0 fe:1 1 /a\n"
					   "4000-6000 r-xp 0 fe:1 3 /new\n"
					   "a000-b000 r-xp 0 fe:1 4 /later\n");
	static const struct {
		uint64_t start;
		const char *path;
	} want[] = { { 0x1000, "/a" }, { 0x4000, "/new" }, { 0x8000, "" }, { 0xa000, "/later" } };

	cr_assert_eq(mp_procmaps_merge(&known, fresh), 0);
	cr_assert_eq(known->n, 4);
	for (size_t i = 0; i < 4; i++) {
		cr_assert_eq(known->maps[i].start, want[i].start, "mapping %zu", i);
		cr_assert_str_eq(known->maps[i].path, want[i].path, "mapping %zu", i);
	}
	/* /gone overlapped /new: the fresh read wins */
	cr_assert_str_eq(mp_procmaps_find(known, 0x4800)->path, "/new");
	cr_assert_null(mp_procmaps_find(known, 0x3800));
	cr_assert_str_eq(mp_procmaps_find(known, 0x8800)->path, "");
	mp_procmaps_free(known);

	known = NULL;
	fresh = parsed("1000-2000 r-xp 0 fe:1 1 /a\n");
	cr_assert_eq(mp_procmaps_merge(&known, fresh), 0);
	cr_assert_eq(known, fresh);
	mp_procmaps_free(known);
}
