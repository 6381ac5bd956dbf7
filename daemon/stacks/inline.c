// SPDX-License-Identifier: MIT
#include <dwarf.h>
#include <elfutils/libdw.h>
#include <stdlib.h>

#include "inline.h"
#include "symtab.h"

/* The ELF symbol containing @pc (not past the end of a sized symbol: a
 * stripped file's nearest dynamic symbol can be far below). */
static const char *symbol_at(Dwfl_Module *mod, uint64_t pc)
{
	uint64_t off, size;
	const char *name = mp_symtab_lookup(mod, pc, &off, &size);

	if (name && size && off >= size)
		return NULL;
	return name;
}

static const char *die_function_name(Dwarf_Die *die)
{
	Dwarf_Attribute attr;
	const char *s;

	if (dwarf_attr_integrate(die, DW_AT_linkage_name, &attr) && (s = dwarf_formstring(&attr)))
		return s;
	if (dwarf_attr_integrate(die, DW_AT_MIPS_linkage_name, &attr) &&
	    (s = dwarf_formstring(&attr)))
		return s;
	if (dwarf_attr_integrate(die, DW_AT_name, &attr) && (s = dwarf_formstring(&attr)))
		return s;
	return NULL;
}

/* Where the inlined subroutine @die was called from. */
static void call_site(Dwarf_Die *die, Dwarf_Files *files, size_t nfiles, struct mp_sym_frame *f)
{
	Dwarf_Attribute attr;
	Dwarf_Word idx = 0, line = 0;

	f->file = NULL;
	f->line = 0;
	if (dwarf_attr(die, DW_AT_call_file, &attr) && dwarf_formudata(&attr, &idx) == 0 && files &&
	    idx < nfiles)
		f->file = dwarf_filesrc(files, idx, NULL, NULL);
	if (dwarf_attr(die, DW_AT_call_line, &attr) && dwarf_formudata(&attr, &line) == 0 &&
	    line <= 0x7fffffff)
		f->line = (int)line;
}

int mp_sym_frames(Dwfl_Module *mod, uint64_t pc, struct mp_sym_frame *ret, int max)
{
	Dwfl_Line *ln = dwfl_module_getsrc(mod, pc);
	const char *sym = symbol_at(mod, pc), *comp_dir = NULL;
	Dwarf_Die *scopes = NULL, *cu;
	Dwarf_Files *files = NULL;
	Dwarf_Addr bias = 0;
	Dwarf_Attribute attr;
	size_t nfiles = 0;
	int n = 0, nscopes;

	if (max < 1)
		return 0;
	ret[0] = (struct mp_sym_frame){ 0 };
	if (ln) {
		ret[0].file = dwfl_lineinfo(ln, NULL, &ret[0].line, NULL, NULL, NULL);
		ret[0].comp_dir = dwfl_line_comp_dir(ln);
		if (ret[0].line <= 0 || !ret[0].file) {
			ret[0].file = NULL;
			ret[0].line = 0;
		}
	}
	cu = dwfl_module_addrdie(mod, pc, &bias);
	nscopes = cu ? dwarf_getscopes(cu, pc - bias, &scopes) : 0;
	if (cu) {
		if (dwarf_attr(cu, DW_AT_comp_dir, &attr))
			comp_dir = dwarf_formstring(&attr);
		if (dwarf_getsrcfiles(cu, &files, &nfiles) != 0)
			files = NULL;
	}
	/* dwarf_getscopes continues an inlined instance with its abstract
	 * definition's parents; the concrete parents (the functions it was
	 * inlined into) come from dwarf_getscopes_die on the innermost
	 * inlined instance, as eu-addr2line -i does. */
	for (int i = 0; i < nscopes; i++) {
		int tag = dwarf_tag(&scopes[i]);
		Dwarf_Die *chain = NULL;
		int nchain;

		if (tag == DW_TAG_subprogram) {
			ret[n++].function = die_function_name(&scopes[i]);
			break;
		}
		if (tag != DW_TAG_inlined_subroutine)
			continue;
		nchain = dwarf_getscopes_die(&scopes[i], &chain);
		/* Innermost first: each inlined subroutine is a frame whose
		 * caller's position is its call site; the subprogram ends the
		 * list. */
		for (int j = 0; j < nchain && n < max; j++) {
			int t = dwarf_tag(&chain[j]);

			if (t != DW_TAG_inlined_subroutine && t != DW_TAG_subprogram)
				continue;
			ret[n].function = die_function_name(&chain[j]);
			if (t == DW_TAG_subprogram) {
				n++;
				break;
			}
			if (n + 1 >= max)
				break;
			ret[n + 1] = (struct mp_sym_frame){ .comp_dir = comp_dir };
			call_site(&chain[j], files, nfiles, &ret[n + 1]);
			n++;
		}
		free(chain);
		break;
	}
	free(scopes);
	if (n == 0)
		n = 1;
	/* The machine frame's function: the symbol, which is what a stripped
	 * file or one without DWARF still has. */
	if (sym)
		ret[n - 1].function = sym;
	if (!ret[0].function && !ret[0].file && n == 1)
		return 0;
	return n;
}
