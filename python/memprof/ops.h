/* SPDX-License-Identifier: MIT */
/*
 * Op kernels from PyTorch's RecordFunction (ops_rf.cpp), for the C side of
 * the _ops extension (_ops.c). Every function is called with the GIL held,
 * which orders the changes of the registration; the callbacks themselves
 * run on any thread, without the GIL.
 */
#ifndef MEMPROF_PY_OPS_H
#define MEMPROF_PY_OPS_H

#include <stddef.h>

#include "binding.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The libmemprof entry points the callbacks call (copied). */
void mp_ops_init(const struct mp_py_binding *b);

/* Registers the global callback (with the ops' inputs when @shapes),
 * replacing one registered without them. 0, or -1 with PyTorch's message
 * in @err. */
int mp_ops_register(int shapes, char *err, size_t len);
/* Removes it; ops that began under it still end their kernels. */
void mp_ops_unregister(void);
/* 0: not registered; 1: registered; 2: registered with the inputs. */
int mp_ops_registered(void);

/* Whether the ops of every thread are kernels (else only those of threads
 * inside mp_ops_thread_enter()). */
void mp_ops_all_threads(int on);
int mp_ops_all_threads_on(void);
/* The calling thread's ops are kernels until the matching exit (nests). */
void mp_ops_thread_enter(void);
void mp_ops_thread_exit(void);

#ifdef __cplusplus
}
#endif

#endif /* MEMPROF_PY_OPS_H */
