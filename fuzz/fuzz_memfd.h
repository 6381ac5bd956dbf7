/* SPDX-License-Identifier: MIT */
/* The fuzz targets' input as a file: a memfd holding the bytes, which the
 * code under test opens, maps or reads as it would a target's file. */
#ifndef MP_FUZZ_MEMFD_H
#define MP_FUZZ_MEMFD_H

#include <stddef.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <unistd.h>

/* A memfd named @name with @size bytes of @data; traps on failure. */
static inline int mp_fuzz_memfd(const char *name, const uint8_t *data, size_t size)
{
	int fd = memfd_create(name, MFD_CLOEXEC);
	size_t off = 0;

	if (fd < 0)
		__builtin_trap();
	while (off < size) {
		ssize_t w = write(fd, data + off, size - off);

		if (w <= 0)
			__builtin_trap();
		off += (size_t)w;
	}
	return fd;
}

#endif /* MP_FUZZ_MEMFD_H */
