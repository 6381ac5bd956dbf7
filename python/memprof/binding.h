/* SPDX-License-Identifier: MIT */
/*
 * The libmemprof entry points _memprof bound at import, handed to the op
 * kernels' extension (_ops) in a capsule, so that both write into the one
 * copy of libmemprof the process uses.
 */
#ifndef MEMPROF_PY_BINDING_H
#define MEMPROF_PY_BINDING_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* memprof._memprof's attribute holding the capsule, and the capsule's name */
#define MP_PY_BINDING_ATTR "_binding"
#define MP_PY_BINDING_NAME "memprof._memprof._binding"

struct mp_py_binding {
	uint32_t size; /* sizeof(struct mp_py_binding) of the producer */
	int (*kernel_begin)(const char *name);
	int (*kernel_end)(void);
	int (*input_shape)(const int64_t *dims, int rank);
	int (*attached)(void); /* never NULL: a stub saying 1 for old libraries */
};

#ifdef __cplusplus
}
#endif

#endif /* MEMPROF_PY_BINDING_H */
