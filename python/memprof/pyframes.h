/* SPDX-License-Identifier: MIT */
/* Python frames in libmemprof's call stacks (pyframes.c). */
#ifndef MEMPROF_PY_PYFRAMES_H
#define MEMPROF_PY_PYFRAMES_H

#include <stdbool.h>
#include <stddef.h>

/* Registers the frame walker with the libmemprof whose symbols @sym finds:
 * 0, or -1 with the reason in @err (an older libmemprof, an interpreter of
 * another version than the headers', no symbol size of the eval loop). */
int mp_pyframes_register(void *(*sym)(const char *name), char *err, size_t len);
/* libmemprof keeps native frames only from now on. */
void mp_pyframes_unregister(void);
bool mp_pyframes_registered(void);

#endif /* MEMPROF_PY_PYFRAMES_H */
