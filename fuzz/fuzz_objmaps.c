// SPDX-License-Identifier: MIT
/* libFuzzer target: the mappings of a loaded object placed from its file
 * (modules.c mp_object_mappings(), for a library a process dlopen()ed and
 * no longer shows in /proc), and its GOT slots read (gotcheck.c). The file
 * is the target's to choose: the input is that file, placed at a load
 * bias, its slots read, then merged into known maps. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "fuzz_memfd.h"
#include "gotcheck.h"
#include "modules.h"
#include "procmaps.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char known_text[] = "7f0000000000-7f0000001000 r--p 00000000 fe:01 9 /lib/a.so\n"
				 "7f0000001000-7f0000002000 r-xp 00001000 fe:01 9 /lib/a.so\n"
				 "7fff00000000-7fff00021000 rw-p 00000000 00:00 0 [stack]\n";

static bool none_ours(void *ctx, const struct mp_mapping *m)
{
	(void)ctx;
	(void)m;
	return false;
}

/* The file's GOT slots read where it is placed: this process's memory,
 * mostly unmapped there (reads fail) or anything at all. */
static void got_slots(const struct mp_procmaps *pm)
{
	char what[256];
	struct mp_gotcheck g = { .pid = 0, .maps = pm, .ours = none_ours };
	int r;

	g.memfd = open("/proc/self/mem", O_RDONLY | O_CLOEXEC);
	if (g.memfd < 0)
		return;
	r = mp_gotcheck(&g, &pm->maps[0], what, sizeof(what));
	if (r == 1 && !memchr(what, '\0', sizeof(what)))
		__builtin_trap();
	close(g.memfd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct mp_procmaps *pm = NULL, *known = NULL;
	uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
	int fd = mp_fuzz_memfd("fuzz-objmaps", data, size);
	char path[64];

	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	if (mp_object_mappings(0, path, 0x7f0000000000, &pm) == 0) {
		/* what mp_procmaps_find() and the merge rely on */
		if (!pm->n)
			__builtin_trap();
		for (size_t i = 0; i < pm->n; i++) {
			const struct mp_mapping *m = &pm->maps[i];

			if (m->end <= m->start || (m->start | m->end | m->offset) & (page - 1) ||
			    (i && m->start < pm->maps[i - 1].end) || strcmp(m->path, path))
				__builtin_trap();
		}
		got_slots(pm);
		if (mp_procmaps_parse(known_text, sizeof(known_text) - 1, &known) < 0)
			__builtin_trap();
		if (mp_procmaps_merge(&known, pm) == 0) {
			for (size_t i = 1; i < known->n; i++)
				if (known->maps[i].start < known->maps[i - 1].end)
					__builtin_trap();
		}
		mp_procmaps_free(known);
	}
	close(fd);
	return 0;
}
