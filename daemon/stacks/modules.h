/* SPDX-License-Identifier: MIT */
/*
 * ELF files of a target as libdwfl modules, for the unwinder and for
 * symbolization: a file is opened as the process sees it (through
 * /proc/PID/root while it lives, so other mount namespaces work; by the same
 * path, checked by inode, afterwards) and placed at the load bias its
 * mapping implies. Separate debug info comes from the local build-id tree
 * or the file's .gnu_debuglink; for symbolization only, and only when
 * asked (--debuginfod), from the servers of DEBUGINFOD_URLS by build-id
 * (never for the unwinder, which runs while the target waits).
 */
#ifndef MP_UNWIND_MODULES_H
#define MP_UNWIND_MODULES_H

#include <elfutils/libdwfl.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "procmaps.h"

/* Callbacks for dwfl_begin() that find ELF and debug files locally only. */
extern const Dwfl_Callbacks mp_dwfl_callbacks;
/* The same, then, once mp_dwfl_set_net(true) was called (--debuginfod)
 * and DEBUGINFOD_URLS names servers, debug files from them by build-id
 * (each thread its own client, the client's cache as DEBUGINFOD_CACHE_PATH
 * says); mp_dwfl_net_end() ends the calling thread's client. Off by
 * default: a fetch can take long, and the files it brings are parsed. */
extern const Dwfl_Callbacks mp_dwfl_symbolize_callbacks;
void mp_dwfl_set_net(bool on);
bool mp_dwfl_net_enabled(void);
void mp_dwfl_net_end(void);

/*
 * Reports the file of mapping @m of process @pid to @dwfl (between
 * dwfl_report_begin and dwfl_report_end), for lookups by address: only
 * when the file lies where the mapping is (not so an ET_EXEC file mapped
 * a second time elsewhere: -EADDRNOTAVAIL). @id is the caller's number
 * for the module, unique in @dwfl. Sets *@ret_mod and *@ret_bias (process
 * address - ELF virtual address). Returns 0, or a negative errno when the
 * file cannot be opened or is not the ELF file mapped there.
 */
int mp_dwfl_report_mapping(Dwfl *dwfl, const struct mp_mapping *m, pid_t pid, unsigned int id,
			   Dwfl_Module **ret_mod, uint64_t *ret_bias);

/*
 * The same for lookups through the module itself: the file is reported
 * where its headers place it (an ET_EXEC file at its own addresses, any
 * other at the bias @m implies). *@ret_mod_bias is the module's bias,
 * *@ret_map_bias the bias of @m (they differ for a second mapping of an
 * ET_EXEC file): the module's address of process address A in @m is
 * A - *@ret_map_bias + *@ret_mod_bias.
 */
int mp_dwfl_report_file(Dwfl *dwfl, const struct mp_mapping *m, pid_t pid, unsigned int id,
			Dwfl_Module **ret_mod, uint64_t *ret_mod_bias, uint64_t *ret_map_bias);

/* Opens the file of mapping @m of process @pid as the process sees it
 * (through /proc/@pid/root while it lives, else by its path; regular files
 * only, with @m's inode unless 0); @path receives the name opened. */
int mp_object_open(const struct mp_mapping *m, pid_t pid, char *path, size_t size);

/* The bias (process address - ELF virtual address) mapping @m of the ELF
 * file @elf implies: from the PT_LOAD segment holding its file offset. 0
 * or -ENOEXEC. */
int mp_mapping_bias(Elf *elf, const struct mp_mapping *m, uint64_t *ret_bias);

/* Whether @m is a mapping of code from a file (worth a module). */
bool mp_mapping_is_code(const struct mp_mapping *m);

/*
 * The mappings the dynamic loader makes of the ELF file @path (absolute)
 * loaded at bias @bias: its PT_LOAD segments in whole pages. For an object
 * a process named (dlopen) but may no longer show in /proc; the file is
 * opened through /proc/@pid/root while the process lives, else by @path.
 * -ENOEXEC when it is not such a file.
 */
int mp_object_mappings(pid_t pid, const char *path, uint64_t bias, struct mp_procmaps **ret);

#endif /* MP_UNWIND_MODULES_H */
