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
 * callers of p->sites and the frames of p->stacks. @maps is the process's
 * address space as last read (may be NULL); callers outside it are looked
 * up in a fresh read of /proc/@pid/maps when the process still exists.
 * Best effort: a caller in no file mapping (JIT code) gets a location with
 * only its address, one in a file that cannot be read its object and its
 * offset in the file (as rel_addr), and no ELF file is touched for either;
 * a stripped file yields names from .symtab or .dynsym where present.
 * Returns 0, or -ENOMEM.
 */
int mp_symbolize_profile(struct mp_profile *p, const struct mp_procmaps *maps, pid_t pid);

/* What symbolization found: the distinct addresses of the sites' callers
 * and stack frames, those left without a function name (their locations
 * keep the address, and the object and offset in the file when the
 * address lies in a file mapping), and of those the ones in no file
 * (JIT code in anonymous memory, or an address no mapping holds); the
 * file mappings holding addresses and those whose file could not be read
 * as the ELF file mapped there (gone, replaced, truncated, not ELF). */
struct mp_symbolize_stats {
	uint32_t frames, unsymbolized, anonymous;
	uint32_t objects, objects_unreadable;
};

/* For a message about frames left without a symbol: "" when debug files
 * were asked for from debuginfod servers (mp_dwfl_net_enabled()), else a
 * pointer to --debuginfod. */
const char *mp_symbolize_net_hint(void);

/* mp_symbolize_profile(), with callers @maps lacks looked up in @later
 * (another read of the maps, may be NULL) before /proc, and what it found
 * in *@ret_stats (may be NULL; set when 0 is returned). */
int mp_symbolize(struct mp_profile *p, const struct mp_procmaps *maps,
		 const struct mp_procmaps *later, pid_t pid, struct mp_symbolize_stats *ret_stats);
/* mp_symbolize(), Python frames (MP_PYFRAME) named by @pyname: the
 * "qualname@file" of their code's string id, NULL when unknown (the
 * location then says so). */
typedef const char *(*mp_symbolize_pyname_fn)(void *ctx, uint32_t id);
int mp_symbolize_python(struct mp_profile *p, const struct mp_procmaps *maps,
			const struct mp_procmaps *later, pid_t pid, mp_symbolize_pyname_fn pyname,
			void *ctx, struct mp_symbolize_stats *ret_stats);

/*
 * The debug files of the code mappings of @maps and @later (either may be
 * NULL) that @want says hold frames (NULL: all of them) opened ahead, at
 * most 256 files, the highest mappings first (a process's first
 * libraries: libc, the dynamic linker), in a thread of its own, while the
 * caller goes on (the profile's stacks laid out): their DWARF loaded (libc's
 * from libc6-dbg inflated first, ~60 ms here) and their symbols indexed
 * (~40 ms for that libc's), which made most of a PyTorch profile's
 * symbolization. mp_symbolize_warmed() takes what it finds there for the
 * same mapping, after the thread is done; mp_symbolize_warm_free() (NULL:
 * nothing) ends the rest. 0, -ENOMEM, or -EAGAIN (no mapping, no thread:
 * *@ret NULL).
 */
struct mp_symbolize_warm;
typedef bool (*mp_symbolize_warm_want_fn)(const void *ctx, const struct mp_mapping *m);
int mp_symbolize_warm_start(const struct mp_procmaps *maps, const struct mp_procmaps *later,
			    pid_t pid, mp_symbolize_warm_want_fn want, const void *ctx,
			    struct mp_symbolize_warm **ret);
void mp_symbolize_warm_free(struct mp_symbolize_warm *w);
/* Once mp_symbolize_warmed() is done with @w: its files, and those the
 * symbolization opened itself, closed in a thread of their own (NULL:
 * nothing), which mp_symbolize_warm_free() joins. */
void mp_symbolize_warm_retire(struct mp_symbolize_warm *w);
/* Until every file of @w is opened (mp_symbolize_warmed() waits so). */
void mp_symbolize_warm_wait(struct mp_symbolize_warm *w);
/* mp_symbolize_python() with the files @warm opened (NULL: none). */
int mp_symbolize_warmed(struct mp_profile *p, const struct mp_procmaps *maps,
			const struct mp_procmaps *later, pid_t pid, mp_symbolize_pyname_fn pyname,
			void *ctx, struct mp_symbolize_warm *warm,
			struct mp_symbolize_stats *ret_stats);

#endif /* MP_SYMBOLIZE_H */
