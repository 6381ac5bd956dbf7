// SPDX-License-Identifier: MIT
/*
 * The symbol index (symtab.c) against libdwfl's own lookup: at every
 * address of the code of this process's files (the executable, libc,
 * libdw, libelf, criterion and the rest it maps), sampled every few bytes,
 * mp_symtab_lookup() names the symbol dwfl_module_addrinfo() names, at the
 * same offset, with the same size. The stacks' function names depend on
 * it, and it is what makes symbolizing big stripped libraries cheap.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "modules.h"
#include "procmaps.h"
#include "symtab.h"

Test(symtab, same_as_libdwfl)
{
	struct mp_procmaps *maps;
	uint64_t checked = 0, named = 0;
	Dwfl *dwfl;

	cr_assert_eq(mp_procmaps_read(getpid(), &maps), 0);
	dwfl = dwfl_begin(&mp_dwfl_callbacks);
	cr_assert_not_null(dwfl);
	dwfl_report_begin(dwfl);
	for (size_t i = 0; i < maps->n; i++) {
		const struct mp_mapping *m = &maps->maps[i];
		Dwfl_Module *mod;
		uint64_t bias;

		if (mp_mapping_is_code(m) && !dwfl_addrmodule(dwfl, m->start))
			mp_dwfl_report_mapping(dwfl, m, getpid(), (unsigned int)i, &mod, &bias);
	}
	dwfl_report_end(dwfl, NULL, NULL);
	for (size_t i = 0; i < maps->n; i++) {
		const struct mp_mapping *m = &maps->maps[i];
		/* a prime step: every alignment within functions is visited */
		uint64_t step = (m->end - m->start) / 4000 | 1;

		if (!mp_mapping_is_code(m))
			continue;
		for (uint64_t a = m->start; a < m->end; a += step) {
			Dwfl_Module *mod = dwfl_addrmodule(dwfl, a);
			GElf_Off off = 0;
			GElf_Sym sym;
			uint64_t xoff = 0, xsize = 0;
			const char *want, *got;

			if (!mod)
				continue;
			want = dwfl_module_addrinfo(mod, a, &off, &sym, NULL, NULL, NULL);
			got = mp_symtab_lookup(mod, a, &xoff, &xsize);
			checked++;
			cr_assert_eq(!want, !got, "%s+%#lx: libdwfl %s, index %s", m->path,
				     (unsigned long)(a - m->start), want ? want : "(none)",
				     got ? got : "(none)");
			if (!want)
				continue;
			named++;
			cr_assert_str_eq(got, want, "%s+%#lx", m->path,
					 (unsigned long)(a - m->start));
			cr_assert_eq(xoff, off, "%s at %s+%#lx", want, m->path,
				     (unsigned long)(a - m->start));
			cr_assert_eq(xsize, sym.st_size, "%s", want);
		}
	}
	/* libc, libdw, criterion: a few files of thousands of symbols */
	cr_assert_gt(checked, 20000, "%lu addresses", (unsigned long)checked);
	cr_assert_gt(named, checked / 4, "%lu of %lu named", (unsigned long)named,
		     (unsigned long)checked);
	mp_dwfl_end(dwfl);
	mp_procmaps_free(maps);
}

/* Ended by mp_dwfl_end() before any lookup, and after: nothing leaks
 * (LeakSanitizer in the sanitizer build), NULL is a no-op. */
Test(symtab, end_frees)
{
	Dwfl *dwfl = dwfl_begin(&mp_dwfl_callbacks);

	cr_assert_not_null(dwfl);
	mp_dwfl_end(dwfl);
	mp_dwfl_end(NULL);
}
