/* SPDX-License-Identifier: MIT */
/*
 * Symbols of allocation sites: each site's caller address → object file,
 * build-id, address in the file's terms, function name and file:line
 * (libdwfl). Works after the process has exited: the ELF files are found
 * by path from a maps snapshot (through /proc/PID/root while the process
 * lives, so other mount namespaces work; by the same path, checked by
 * inode, afterwards) and placed at the load bias the snapshot implies.
 */
#ifndef MP_SYMBOLIZE_H
#define MP_SYMBOLIZE_H

#include <sys/types.h>

#include "procmaps.h"
#include "profile.h"

/*
 * Fills p->objects and p->locations (replacing what they held) for the
 * callers of p->sites. @maps is the process's address space as last read
 * (may be NULL); callers outside it are looked up in a fresh read of
 * /proc/@pid/maps when the process still exists. Best effort: a caller in
 * no file mapping, or in a file that cannot be read, gets a location with
 * only its address; a stripped file yields names from .symtab or .dynsym
 * where present. Returns 0, or -ENOMEM.
 */
int mp_symbolize_profile(struct mp_profile *p, const struct mp_procmaps *maps, pid_t pid);

#endif /* MP_SYMBOLIZE_H */
