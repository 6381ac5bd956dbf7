// SPDX-License-Identifier: MIT
/* libFuzzer target: the symbolizer over a hostile ELF file (a container
 * chooses the files its process maps). The input is one file, mapped
 * three times as a process could map it (its first pages, pages further
 * in, a second copy elsewhere as V8 maps node's builtins) beside JIT code
 * in anonymous memory; sites and a stack point into every mapping, and
 * everything symbolize.h promises of the locations is checked. */
#include <inttypes.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz_memfd.h"
#include "procmaps.h"
#include "profile.h"
#include "symbolize.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define N_ADDR 12

static const uint64_t starts[] = { 0x7f0000000000, 0x7f0000100000, 0x7f0000400000, 0x7f0001000000 };
static const uint64_t offsets[] = { 0, 0x1000, 0, 0 };
#define MAP_SIZE ((uint64_t)0x100000)

/* Addresses in every mapping: at offsets the input's first bytes choose
 * (often its entry point or symbol values), and its edges. */
static void addresses(const uint8_t *data, size_t size, uint64_t *a)
{
	for (int i = 0; i < N_ADDR; i++) {
		uint64_t v = 0;

		for (int k = 0; k < 4; k++)
			v = v << 8 | (size > (size_t)(24 + i * 4 + k) ? data[24 + i * 4 + k] : 0);
		a[i] = starts[i % 4] + (i < 4 ? (uint64_t)i : v % MAP_SIZE);
	}
}

static void check(const struct mp_profile *p, const uint64_t *a)
{
	for (int i = 0; i < N_ADDR; i++) {
		const struct mp_location *l = mp_profile_location(p, a[i]);
		int m = i % 4;

		if (!l || l->addr != a[i])
			__builtin_trap();
		/* JIT code: no object, no name, no file touched */
		if (m == 3 && (l->object != MP_NONE || l->function || l->file))
			__builtin_trap();
		if (m != 3 &&
		    (l->object >= p->n_objects || p->objects[l->object].start != starts[m]))
			__builtin_trap();
		if (l->function && !memchr(l->function, 0, 1 << 20))
			__builtin_trap();
		if (l->n_inlined > MP_PROFILE_MAX_INLINE || (l->n_inlined && !l->inlined))
			__builtin_trap();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	int fd = mp_fuzz_memfd("fuzz-symbolize", data, size);
	struct mp_symbolize_stats st;
	struct mp_procmaps *maps;
	struct mp_profile *p;
	char path[64], txt[1024];
	uint64_t a[N_ADDR];
	struct stat sb;
	int n = 0;

	if (fstat(fd, &sb) < 0)
		__builtin_trap();
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	for (int i = 0; i < 3; i++)
		n += snprintf(txt + n, sizeof(txt) - n,
			      "%" PRIx64 "-%" PRIx64 " r-xp %08" PRIx64 " 00:00 %" PRIu64 " %s\n",
			      starts[i], starts[i] + MAP_SIZE, offsets[i], (uint64_t)sb.st_ino,
			      path);
	snprintf(txt + n, sizeof(txt) - n, "%" PRIx64 "-%" PRIx64 " rwxp 00000000 00:00 0\n",
		 starts[3], starts[3] + MAP_SIZE);
	if (mp_procmaps_parse(txt, strlen(txt), &maps) < 0)
		__builtin_trap();
	addresses(data, size, a);
	p = mp_profile_new();
	if (!p)
		__builtin_trap();
	p->sites = calloc(N_ADDR, sizeof(*p->sites));
	p->stacks = calloc(1, sizeof(*p->stacks));
	if (!p->sites || !p->stacks || !(p->stacks[0].frames = calloc(N_ADDR, sizeof(uint64_t))))
		__builtin_trap();
	p->n_sites = N_ADDR / 2;
	p->n_stacks = 1;
	p->stacks[0].n_frames = N_ADDR / 2;
	for (int i = 0; i < N_ADDR / 2; i++) {
		p->sites[i] = (struct mp_site){ .caller = a[i], .alloc_objects = 1 };
		p->stacks[0].frames[i] = a[N_ADDR / 2 + i];
	}
	if (mp_symbolize(p, maps, NULL, 0, &st) < 0)
		__builtin_trap();
	if (st.frames > N_ADDR || st.unsymbolized > st.frames || st.anonymous > st.unsymbolized ||
	    st.objects_unreadable > st.objects || st.objects > 3)
		__builtin_trap();
	check(p, a);
	mp_profile_free(p);
	mp_procmaps_free(maps);
	close(fd);
	return 0;
}
