/* SPDX-License-Identifier: MIT */
/*
 * Internal to libmemprof and the daemon that injects it (not in memprof.h):
 * attach by pid at in-process cost.
 *
 * The daemon ptraces a process that was not started with libmemprof, makes
 * one of its threads dlopen("libmemprof.so.0", RTLD_NOW) (the constructor
 * creates the ring) and then call memprof__inject(), with every other
 * thread stopped and none inside the allocator or the dynamic loader.
 *
 * int memprof__inject(void)  (exported, version node MEMPROF_0.4)
 *   >= 0        the number of GOT slots of the process (every loaded object
 *               but libmemprof and the vDSO) that now point to libmemprof's
 *               malloc family, dlopen hook and dlclose. The objects a later
 *               dlopen() adds are patched by that dlopen; another call
 *               patches what came without one and returns the count again.
 *   -EALREADY   libmemprof's malloc is already the process's first one
 *               (preloaded or linked): nothing changed.
 *   -EBUSY      libmemprof already forwards to another allocator than the
 *               process's first malloc (the two would be mixed).
 *   -EAGAIN     a scan (another thread's dlopen) is under way: try again.
 *   -ENOTSUP    an allocator function of the process is a canonical PLT
 *               entry of a non-PIE executable that stands for no definition
 *               found after it (forwarding there would come back here), or
 *               the architecture is not supported. A canonical PLT entry
 *               with a definition behind it (Debian's python3 takes
 *               malloc's address) is handled: the definition is forwarded
 *               to, and slots holding either are patched.
 *   -ENOENT     the process has no malloc in its global scope.
 * It never allocates, logs or aborts. The slots stay patched after the
 * profiler detaches: the interposer's dormant path forwards at the cost of
 * one load and a branch.
 */
#ifndef MEMPROF_INJECT_H
#define MEMPROF_INJECT_H

#include <stddef.h>
#include <stdint.h>

#include "ring_writer.h"

__attribute__((visibility("default"))) int memprof__inject(void);

/* interpose.c: forward to the process's first allocator (dlsym
 * RTLD_DEFAULT), resolved now; 0, -EALREADY, -EBUSY or -ENOENT as above. */
MP_HIDDEN int mp_interpose_inject(void);

/* interpose.c: dlsym(RTLD_DEFAULT, @name), but the definition itself where
 * that is a non-PIE executable's canonical PLT entry (the executable takes
 * the function's address: Debian's /usr/bin/python3 does for malloc and
 * free); NULL when there is none. */
MP_HIDDEN void *mp_default_sym(const char *name);

/* interpose.c: its definitions, under names that bind to them (in this
 * library's code, malloc means the process's first malloc). */
MP_HIDDEN void *mp_own_malloc(size_t n);
MP_HIDDEN void mp_own_free(void *p);
MP_HIDDEN void *mp_own_calloc(size_t n, size_t size);
MP_HIDDEN void *mp_own_realloc(void *p, size_t n);
MP_HIDDEN void *mp_own_reallocarray(void *p, size_t n, size_t size);
MP_HIDDEN int mp_own_posix_memalign(void **ret, size_t align, size_t n);
MP_HIDDEN void *mp_own_aligned_alloc(size_t align, size_t n);
MP_HIDDEN void *mp_own_memalign(size_t align, size_t n);
MP_HIDDEN void *mp_own_valloc(size_t n);
MP_HIDDEN void *mp_own_pvalloc(size_t n);
MP_HIDDEN size_t mp_own_malloc_usable_size(void *p);
MP_HIDDEN int mp_own_dlclose(void *handle);

/* got.c, after the last scan, for a later issue to publish: objects with a
 * slot pointing here, such slots, and objects whose allocator slots were
 * left alone because they bind to another allocator. */
extern MP_HIDDEN uint64_t mp_inject_objects;
extern MP_HIDDEN uint64_t mp_inject_slots;
extern MP_HIDDEN uint64_t mp_inject_foreign;

#endif
