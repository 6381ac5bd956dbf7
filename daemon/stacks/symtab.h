/* SPDX-License-Identifier: MIT */
/*
 * The ELF symbol containing an address of a libdwfl module, as
 * dwfl_module_addrinfo() finds it, by binary search over an index of the
 * module's symbols built at its first lookup. libdw scans every symbol of
 * the module at each lookup: libtorch_cpu.so has over 300,000, which made
 * symbolizing a PyTorch program's stacks take most of a minute.
 *
 * The index lives in the module's userdata: a Dwfl whose modules were
 * looked up here is ended with mp_dwfl_end(), which frees them.
 */
#ifndef MP_SYMTAB_H
#define MP_SYMTAB_H

#include <elfutils/libdwfl.h>
#include <stdint.h>

/*
 * The name of the symbol at @addr (an address of @mod's, as libdwfl's
 * own lookups take), and *@ret_off, the offset of @addr in it, and
 * *@ret_size, its size (0: a label without a size). NULL when no symbol
 * holds @addr, or when the index cannot be built (no memory: then
 * libdwfl's own lookup answers).
 */
const char *mp_symtab_lookup(Dwfl_Module *mod, uint64_t addr, uint64_t *ret_off,
			     uint64_t *ret_size);

/* The index of @mod's symbols built now, not at its first lookup (a
 * thread that opens files ahead of their lookups). */
void mp_symtab_prepare(Dwfl_Module *mod);

/* dwfl_end() after freeing the modules' symbol indexes; NULL is a no-op. */
void mp_dwfl_end(Dwfl *dwfl);

#endif /* MP_SYMTAB_H */
