/* SPDX-License-Identifier: MIT */
/*
 * Where a free of a block never seen allocated may point (docs/PROFILE.md
 * "Corruption"): into memory the target's allocator could have handed out,
 * a writable private mapping of the target (anonymous, [heap], a file's
 * .data/.bss, where musl's malloc donates its leftovers) other than the
 * main thread's stack, as the target had it at the attach or has it at the
 * daemon's latest look. A block allocated before the attach lies in the
 * former; one allocated since whose allocation the daemon never saw
 * (dropped, past a table's bound) in the latter, unless its own mapping
 * came and went between two looks.
 *
 * The attach snapshot (the maps read when the attach begins, joined by
 * those read once it is done: mp_freecheck_snapshot()) is kept; the
 * latest look is taken again on a miss,
 * when it is older than the free, at most every MP_FREECHECK_MIN_NS and
 * never more often than ten times the last read's duration: a target that
 * floods forged frees costs the daemon at most ~10% of a core in reads.
 * Nothing is allocated per check: reads allocate, at that bounded rate.
 */
#ifndef MP_FREECHECK_H
#define MP_FREECHECK_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "procmaps.h"

#define MP_FREECHECK_MIN_NS (10 * 1000 * 1000ull)

/* Reads the target's maps now (mp_procmaps_read() of the pid): 0 or
 * -errno. Tests inject their own. */
typedef int (*mp_freecheck_read_fn)(void *ctx, struct mp_procmaps **ret);
/* CLOCK_MONOTONIC ns (the clock of the events' stamps). */
typedef uint64_t (*mp_freecheck_clock_fn)(void *ctx);

struct mp_freecheck;

/* A checker of @pid's frees, with @at_attach (may be NULL: the first read
 * is taken as the attach snapshot) read at @at_attach_ns. */
int mp_freecheck_new(pid_t pid, const struct mp_procmaps *at_attach, uint64_t at_attach_ns,
		     struct mp_freecheck **ret);
void mp_freecheck_free(struct mp_freecheck *fc);
/* Tests: reads and the clock from @read and @clock (with @ctx). */
void mp_freecheck_set_source(struct mp_freecheck *fc, mp_freecheck_read_fn read,
			     mp_freecheck_clock_fn clock, void *ctx);

/* Whether @addr, freed at @ts_ns, lies in a mapping where an allocator
 * could have put a block (above). May read the maps (bounded rate). */
bool mp_freecheck_mapped(struct mp_freecheck *fc, uint64_t addr, uint64_t ts_ns);
/* Whether a read of the maps taken after @ts_ns was had: a free at @ts_ns
 * that mp_freecheck_mapped() finds in no mapping was then seen unmapped,
 * not merely unread (the process gone before a read, a mapping made since
 * the last one). */
bool mp_freecheck_judged(const struct mp_freecheck *fc, uint64_t ts_ns);

/* The attach is done (the uprobes attached, the interposer on): the
 * target's mappings now join the attach snapshot. A block allocated
 * between the first snapshot and this moment is live at it: its mapping
 * is in it. One read; 0 or -errno (the snapshot stays as it was). */
int mp_freecheck_snapshot(struct mp_freecheck *fc);

/* The target exec'd: a new address space, whose first read is its attach
 * snapshot (mp_freecheck_snapshot() at the new image's attach, or the
 * next miss, whatever the rate). */
void mp_freecheck_exec(struct mp_freecheck *fc);

/* Reads of the maps so far (the attach snapshot's not counted). */
uint64_t mp_freecheck_reads(const struct mp_freecheck *fc);

#endif /* MP_FREECHECK_H */
