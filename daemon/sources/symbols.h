/* SPDX-License-Identifier: MIT */
/*
 * Which object of a process provides a function: the process's mapped ELF
 * objects in the dynamic loader's symbol lookup order, read through
 * /proc/PID/root so processes in other mount namespaces work.
 */
#ifndef MP_SYMBOLS_H
#define MP_SYMBOLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct mp_symbols;

struct mp_symbol {
	const char *path; /* object path as the target sees it */
	const char *root_path; /* the same through /proc/PID/root */
	uint64_t vaddr; /* st_value */
	uint64_t size; /* st_size */
	uint64_t offset; /* file offset of the first instruction */
	size_t object; /* index in lookup order (0 = executable) */
};

/* Build the lookup order of @pid: the executable, LD_PRELOAD objects (from
 * /proc/PID/environ and /etc/ld.so.preload), then DT_NEEDED breadth-first
 * matched to mapped objects by soname or file name, then any other mapped
 * object (dlopen) in address order. */
int mp_symbols_new(pid_t pid, struct mp_symbols **ret);
void mp_symbols_free(struct mp_symbols *s);

/* Every DT_NEEDED of the objects in lookup order is mapped: false while
 * the dynamic loader of a freshly exec'd process is still loading. */
bool mp_symbols_complete(const struct mp_symbols *s);

size_t mp_symbols_count(const struct mp_symbols *s);
/* Path (as the target sees it) of object @i in lookup order, or NULL. */
const char *mp_symbols_object(const struct mp_symbols *s, size_t i);

/*
 * First definition of function @name in lookup order (exported dynamic
 * symbols; the executable's static symbol table too). @object, if not NULL,
 * restricts the search to objects whose path or file name equals it or
 * whose file name starts with it ("libfoo" matches libfoo.so.1).
 * -ENOENT when nothing defines it.
 */
int mp_symbols_lookup(struct mp_symbols *s, const char *name, const char *object,
		      struct mp_symbol *ret_sym);

/* The exported data object @name (@object as above): its first definition
 * in lookup order, the one every reference binds to. No file offset (it
 * may lie in .bss). */
int mp_symbols_lookup_data(struct mp_symbols *s, const char *name, const char *object,
			   struct mp_symbol *ret_sym);

/* Read up to @len bytes of code at @sym's start; *ret_len gets the count. */
int mp_symbols_read_code(struct mp_symbols *s, const struct mp_symbol *sym, uint8_t *buf,
			 size_t len, size_t *ret_len);

/*
 * Internal, for fuzz/fuzz_elf.c: the same lookup set over already open
 * files instead of a process's mappings. Takes over @fds (closed by
 * mp_symbols_free, or here on error; -1 is an unreadable object). @paths are
 * the objects' paths as a target would see them; @paths[0] is the
 * executable. No LD_PRELOAD is read.
 */
int mp_symbols_new_from_fds(const int *fds, const char *const *paths, size_t n,
			    struct mp_symbols **ret);

#endif /* MP_SYMBOLS_H */
