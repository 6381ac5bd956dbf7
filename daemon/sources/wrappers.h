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

#endif /* MP_WRAPPERS_H */
