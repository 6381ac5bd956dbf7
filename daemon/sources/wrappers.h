/* SPDX-License-Identifier: MIT */
/*
 * Allocator wrappers: the functions (and whole objects) between a program
 * and the allocator, such as operator new, c10::alloc_cpu or CPython's
 * PyMem_Malloc, that an allocation's owner and site look past
 * (docs/PROFILE.md "Owners"). The default list and the user's --wrapper
 * (object globs) and --wrapper-fn (symbol globs) are resolved to address
 * ranges of the target from its mapped ELF files, read through
 * /proc/PID/root (hostile input: every table is bounded), as the target
 * maps them (dlopen: mp_wrappers_update() again).
 */
#ifndef MP_WRAPPERS_H
#define MP_WRAPPERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "procmaps.h"

/* Ranges kept at most (functions merged when adjacent). */
#define MP_WRAPPERS_MAX_RANGES 65536

struct mp_wrap_range {
	uint64_t lo, hi; /* [lo, hi) */
};

struct mp_wrappers_opts {
	const char *const *dso_globs; /* every function of matching objects */
	size_t n_dso;
	const char *const *fn_globs; /* symbols, fnmatch(3) globs */
	size_t n_fn;
	bool no_default; /* without the default list */
};

struct mp_wrappers;

/* For process @pid (0: paths as they are, tests). -ENOMEM. */
int mp_wrappers_new(pid_t pid, const struct mp_wrappers_opts *o, struct mp_wrappers **ret);
void mp_wrappers_free(struct mp_wrappers *w);

/* Resolves the objects of @maps not seen yet. 1 when the ranges changed,
 * 0 when not; -ENOMEM. */
int mp_wrappers_update(struct mp_wrappers *w, const struct mp_procmaps *maps);
/* The same off the event loop's critical path: the objects of @maps (NULL:
 * none) not seen yet are queued; the queued object mapped at @first (0:
 * none) is resolved at once, the others for at most MP_WRAPPERS_SLICE_NS
 * once every MP_WRAPPERS_GAP_NS (@now_ns: CLOCK_MONOTONIC). Returns as
 * mp_wrappers_update(). */
#define MP_WRAPPERS_SLICE_NS (1000 * 1000ull)
#define MP_WRAPPERS_GAP_NS (2 * 1000 * 1000ull)
int mp_wrappers_step(struct mp_wrappers *w, const struct mp_procmaps *maps, uint64_t first,
		     uint64_t now_ns);
/* Objects queued and not resolved yet. */
size_t mp_wrappers_pending(const struct mp_wrappers *w);
/* The address space was replaced (exec): every range is forgotten. */
void mp_wrappers_reset(struct mp_wrappers *w);

/* Whether @addr is in a wrapper. */
bool mp_wrappers_has(const struct mp_wrappers *w, uint64_t addr);
/* Whether any wrapper is known. */
bool mp_wrappers_any(const struct mp_wrappers *w);

/* At most @max ranges covering every wrapper range (the gaps that are
 * smallest are closed first), sorted: the target's filter, which only
 * decides which allocations carry their stack. Returns how many. */
size_t mp_wrappers_coarse(const struct mp_wrappers *w, struct mp_wrap_range *ret, size_t max);

/* Functions and objects resolved as wrappers so far (an object that is a
 * wrapper as a whole counts as one object, no function). */
void mp_wrappers_counts(const struct mp_wrappers *w, uint32_t *ret_functions,
			uint32_t *ret_objects);

/* What resolving has cost so far: objects opened and read, the time it
 * took (wall clock and this thread's CPU), the longest single
 * mp_wrappers_step() (the longest its caller was held). */
struct mp_wrappers_cost {
	uint64_t objects, wall_ns, cpu_ns, max_step_ns;
};
void mp_wrappers_cost(const struct mp_wrappers *w, struct mp_wrappers_cost *ret);

/* One object, for tests and the fuzzer. */
enum {
	/* exact names by a scan of every symbol, not the hash table */
	MP_WRAPPERS_FULL_SCAN = 1,
};

struct mp_wrappers_scan {
	uint32_t symbols; /* symbol entries read by scans */
	bool hashed; /* exact names looked up in .gnu.hash or .hash */
	bool hash_bad; /* a hash table was there and inconsistent */
	bool symtab; /* .symtab was read */
};

/* The wrapper functions (@w's symbol patterns) of the ELF object open as
 * @fd, as file ranges [offset, offset + size), sorted, at most @max into
 * @ret; returns how many were found (possibly more than @max), -ENOEXEC
 * when @fd is not a 64-bit ELF object of this machine's byte order,
 * -ENOMEM. Every read is bounded by the file's size and the limits of
 * wrappers.c. */
int mp_wrappers_scan_fd(const struct mp_wrappers *w, int fd, unsigned flags,
			struct mp_wrap_range *ret, size_t max, struct mp_wrappers_scan *st);

#endif /* MP_WRAPPERS_H */
