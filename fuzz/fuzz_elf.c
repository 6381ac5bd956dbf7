// SPDX-License-Identifier: MIT
/* libFuzzer target: the ELF objects of a profiled process are hostile input
 * (a container chooses them). The input is one ELF file, loaded both as the
 * executable and as libc.so.6, then looked up like the tracer does. */
#include <stddef.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fuzz_memfd.h"
#include "symbols.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void lookup(struct mp_symbols *s, const char *name, const char *object, size_t size)
{
	struct mp_symbol sym;
	uint8_t code[64];
	size_t n = SIZE_MAX;

	if (mp_symbols_lookup(s, name, object, &sym) < 0)
		return;
	/* The offset is where the uprobe goes: inside the file. */
	if (sym.object >= mp_symbols_count(s) || !sym.path || !sym.root_path ||
	    mp_symbols_object(s, sym.object) != sym.path || sym.offset >= size)
		__builtin_trap();
	if (mp_symbols_read_code(s, &sym, code, sizeof(code), &n) < 0)
		return;
	/* The code comes from the file: never more than asked or than it holds. */
	if (n > sizeof(code) || n > size - sym.offset)
		__builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *paths[] = { "/fuzz/exe", "/lib/x86_64-linux-gnu/libc.so.6" };
	int fds[2];
	struct mp_symbols *s;

	fds[0] = mp_fuzz_memfd("fuzz-elf", data, size);
	fds[1] = dup(fds[0]);
	if (fds[1] < 0)
		__builtin_trap();
	if (mp_symbols_new_from_fds(fds, paths, 2, &s) < 0)
		return 0;
	if (mp_symbols_count(s) != 2)
		__builtin_trap();
	(void)mp_symbols_complete(s);
	lookup(s, "malloc", NULL, size);
	lookup(s, "free", NULL, size);
	lookup(s, "mp_fuzz_no_such_function", NULL, size);
	lookup(s, "malloc", "libc", size);
	{
		struct mp_symbol d;

		/* the loader's list head, as the tracer finds it */
		if (mp_symbols_lookup_data(s, "_r_debug", NULL, &d) == 0 &&
		    (d.object >= mp_symbols_count(s) || !d.path ||
		     mp_symbols_object(s, d.object) != d.path))
			__builtin_trap();
	}
	mp_symbols_free(s);
	return 0;
}
