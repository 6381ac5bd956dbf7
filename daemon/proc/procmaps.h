/* SPDX-License-Identifier: MIT */
/* /proc/PID/maps: parsing (hostile input, bounded) and address lookup. */
#ifndef MP_PROCMAPS_H
#define MP_PROCMAPS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define MP_PROCMAPS_MAX_LINE 4352 /* PATH_MAX + the fixed fields */
#define MP_PROCMAPS_MAX_SIZE (64 << 20) /* whole file */

enum {
	MP_MAP_R = 1,
	MP_MAP_W = 2,
	MP_MAP_X = 4,
	MP_MAP_SHARED = 8,
};

struct mp_mapping {
	uint64_t start, end; /* [start, end) */
	uint64_t offset; /* file offset of start */
	uint64_t inode;
	uint32_t dev_major, dev_minor;
	uint32_t perms; /* MP_MAP_* */
	/* Path as the target sees it ("" for anonymous, "[heap]" etc. for
	 * special mappings); a " (deleted)" suffix is kept. */
	const char *path;
};

struct mp_procmaps {
	struct mp_mapping *maps; /* sorted by start, non-overlapping */
	size_t n;
	char *strings;
	/* The index mp_procmaps_find() found last, tried first: lookups come
	 * in runs in one object (a stack's frames, libtorch's callers).
	 * Written by lookups through a const pointer, atomically: the
	 * symbolizer's threads share one snapshot. */
	size_t hint;
};

/* Parse the text of a maps file. Malformed lines and lines longer than
 * MP_PROCMAPS_MAX_LINE give -EINVAL, unsorted or overlapping ranges
 * -EAGAIN (a read torn by the target's own mapping changes). */
int mp_procmaps_parse(const char *buf, size_t len, struct mp_procmaps **ret);
/* Read and parse /proc/PID/maps, read again (up to 16 times) while the
 * ranges come out torn: -EAGAIN when they always did; -ESRCH when there
 * is no mapping (the process has exited). */
int mp_procmaps_read(pid_t pid, struct mp_procmaps **ret);
/* What is known of an address space that changes: @fresh (taken over)
 * replaces *@into where their ranges overlap, and what else *@into had
 * stays (a library unmapped since still names the allocations it made
 * before). -ENOMEM leaves *@into as it was. */
int mp_procmaps_merge(struct mp_procmaps **into, struct mp_procmaps *fresh);
void mp_procmaps_free(struct mp_procmaps *m);

/* The mapping containing @addr, or NULL. */
const struct mp_mapping *mp_procmaps_find(const struct mp_procmaps *m, uint64_t addr);

#endif /* MP_PROCMAPS_H */
