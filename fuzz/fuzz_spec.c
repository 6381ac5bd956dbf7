/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for the --alloc/--free function spec parser
 * (daemon/sources/funcspec.c): command-line text, but it reaches the tracer's
 * probe settings, so everything it accepts must be in range.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tracer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct mp_tracer_func f;
	char *spec;

	if (size < 1 || size > 4096)
		return 0;
	spec = malloc(size);
	if (!spec)
		return 0;
	/* first byte: alloc or free; the rest: the spec, NUL-terminated */
	memcpy(spec, data + 1, size - 1);
	spec[size - 1] = '\0';
	if (mp_tracer_parse_func(spec, data[0] & 1, &f) == 0) {
		if (f.arg > 5 || f.ptr_arg > 5 || f.ptr > MP_FUNC_PTR_OUT ||
		    f.ok > MP_FUNC_OK_NONZERO || f.pool_kind > MP_POOL_KIND_DEVICE ||
		    (f.is_free && f.ptr) || (!f.pool[0] && f.pool_kind) ||
		    !memchr(f.name, '\0', sizeof(f.name)) ||
		    !memchr(f.object, '\0', sizeof(f.object)) ||
		    !memchr(f.pool, '\0', sizeof(f.pool)) || !f.name[0])
			abort();
	}
	free(spec);
	return 0;
}
