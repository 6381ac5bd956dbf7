// SPDX-License-Identifier: MIT
/* Symbol resolution in our own process (no privileges needed). */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "procmaps.h"
#include "symbols.h"

/* Exported by the executable (-rdynamic): found in lookup order slot 0. */
__attribute__((noinline, used, visibility("default"))) int mp_test_symbol(int x);

int mp_test_symbol(int x)
{
	return x + 1;
}

Test(symbols, lookup_order_and_offsets)
{
	struct mp_symbols *s;
	struct mp_symbol sym;
	struct mp_procmaps *pm;
	const struct mp_mapping *m;
	char exe[4096];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);

	cr_assert_gt(n, 0);
	exe[n] = '\0';
	cr_assert_eq(mp_symbols_new(getpid(), &s), 0);
	cr_assert(mp_symbols_complete(s));
	cr_assert_str_eq(mp_symbols_object(s, 0), exe);
	cr_assert_null(mp_symbols_object(s, mp_symbols_count(s)));

	/* Our own function: the file offset maps back to its address. */
	cr_assert_eq(mp_symbols_lookup(s, "mp_test_symbol", NULL, &sym), 0);
	cr_assert_str_eq(sym.path, exe);
	cr_assert_eq(sym.object, 0);
	cr_assert_eq(mp_procmaps_read(getpid(), &pm), 0);
	m = mp_procmaps_find(pm, (uint64_t)(uintptr_t)&mp_test_symbol);
	cr_assert_not_null(m);
	cr_assert_eq((uint64_t)(uintptr_t)&mp_test_symbol - m->start + m->offset, sym.offset);
	mp_procmaps_free(pm);

	/* malloc comes from libc (this executable defines none), or from the
	 * sanitizer runtime, which precedes libc in the lookup order. */
	cr_assert_eq(mp_symbols_lookup(s, "malloc", NULL, &sym), 0);
	cr_assert(strstr(sym.path, "/libc.so") || strstr(sym.path, "/libasan"), "malloc in %s",
		  sym.path);
	cr_assert_gt(sym.object, 0);
	cr_assert(!strncmp(sym.root_path, "/proc/", 6) && strstr(sym.root_path, "/root/") &&
			  !strcmp(strstr(sym.root_path, "/root/") + 5, sym.path),
		  "root path %s", sym.root_path);
	/* restricted to an object */
	cr_assert_eq(mp_symbols_lookup(s, "malloc", "libc.so.6", &sym), 0);
	cr_assert(strstr(sym.path, "/libc.so.6"));
	cr_assert_eq(mp_symbols_lookup(s, "malloc", "libnothere", &sym), -ENOENT);
	cr_assert_eq(mp_symbols_lookup(s, "no_such_function_xyz", NULL, &sym), -ENOENT);
	mp_symbols_free(s);
	mp_symbols_free(NULL);
	cr_assert_eq(mp_symbols_new(0x3ffffff0, &s), -ENOENT);
}
