/* SPDX-License-Identifier: MIT */
/* Objects whose allocator calls bypass the in-process interposer. */
#ifndef MP_GOTCHECK_H
#define MP_GOTCHECK_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "procmaps.h"

/* A process: its pid, its memory (/proc/PID/mem, open), its address
 * space, and which objects' functions are the ones traced (libmemprof's
 * on the in-process path, the probed ones on the eBPF path). */
struct mp_gotcheck {
	pid_t pid;
	int memfd;
	const struct mp_procmaps *maps;
	bool (*ours)(void *ctx, const struct mp_mapping *m);
	void *ctx;
};

/*
 * Whether object @m (a file mapping of the process) holds in a GOT slot
 * of an allocator entry point (the malloc family, glibc's __libc_ names)
 * an address that is a function defined elsewhere than in a traced object
 * (not 0, not the object's own lazy slot not yet bound, not an
 * executable's canonical PLT entry). 1 and "SYMBOL -> OBJECT" in @ret
 * when one does; 0 when none does; a negative errno when the object
 * cannot be read.
 */
int mp_gotcheck(const struct mp_gotcheck *g, const struct mp_mapping *m, char *ret, size_t cap);

#endif /* MP_GOTCHECK_H */
