/* SPDX-License-Identifier: MIT */
/*
 * Live-allocation table: turns raw tracer events (bpf/memprof_events.h) into
 * paired heap events (heap_event.h). Pure logic, no BPF, no I/O.
 */
#ifndef MP_LIVE_H
#define MP_LIVE_H

#include <stdint.h>

#include "heap_event.h"
#include "memprof_events.h"

/* Functions are indexed by enum mp_alloc_fn; custom ones from MP_FN_CUSTOM. */
#define MP_LIVE_FN_MAX (MP_FN_CUSTOM + 32)

struct mp_live_fn_stats {
	uint64_t allocs; /* blocks returned by this function */
	uint64_t alloc_bytes; /* their requested sizes */
	uint64_t frees; /* known blocks released by this function */
	uint64_t freed_bytes;
	uint64_t unknown_frees; /* releases of blocks allocated before attach */
};

struct mp_live_stats {
	uint64_t live_bytes;
	uint64_t live_blocks;
	uint64_t unknown_frees;
	uint64_t failed; /* realloc/mremap that failed (block kept) */
	uint64_t ignored; /* munmap/mremap of mappings never tracked */
	uint64_t exec_dropped; /* blocks forgotten because the target exec'd */
	/* New blocks the table had no room for (mp_live_set_max_bytes()):
	 * not tracked and given to no callback; their frees are unknown. */
	uint64_t untracked, untracked_bytes;
	struct mp_live_fn_stats fn[MP_LIVE_FN_MAX];
};

#define MP_LIVE_B_SCALED 0x1u /* mp_live_block.flags */

struct mp_live_block {
	uint64_t addr;
	uint64_t size;
	uint64_t ts_ns;
	uint64_t caller;
	uint64_t user; /* what the mp_heap_cb returned for its ALLOC */
	uint32_t tid;
	uint16_t fn; /* below MP_LIVE_FN_MAX */
	uint16_t flags; /* MP_LIVE_B_* */
};

struct mp_live;

int mp_live_new(struct mp_live **ret);
void mp_live_free(struct mp_live *l);

/* Bounds the table's slots to @bytes (0: no bound; at least the initial
 * table): it then holds at most mp_live_max_blocks() blocks. Past that, a
 * new block is counted in untracked / untracked_bytes and not tracked
 * (nor shown to the callback); a block already in the table is still
 * freed and replaced. Growing needs the old slots beside the new ones for
 * a moment: 1.5 times the bound at most. */
void mp_live_set_max_bytes(struct mp_live *l, uint64_t bytes);
/* The most blocks the table holds (UINT64_MAX: no bound). */
uint64_t mp_live_max_blocks(const struct mp_live *l);
/* Bytes of slots the table holds now. */
uint64_t mp_live_bytes(const struct mp_live *l);

/*
 * Apply one raw event: ALLOC, FREE and REALLOC update the table and call @cb
 * (may be NULL) for every resulting heap event, in order (a moving realloc is
 * FREE(old) then ALLOC(new)). EXEC forgets every block without callbacks;
 * other types are ignored. Returns 0 or -ENOMEM (the table is unchanged).
 */
int mp_live_apply(struct mp_live *l, const struct mp_raw_event *ev, mp_heap_cb cb, void *ctx);

void mp_live_stats(const struct mp_live *l, struct mp_live_stats *ret);

/* 0 and *ret_block filled, or -ENOENT. */
int mp_live_lookup(const struct mp_live *l, uint64_t addr, struct mp_live_block *ret_block);

/* Calls @cb for every live block in unspecified order; a non-zero return of
 * @cb stops the walk and is returned. */
int mp_live_foreach(const struct mp_live *l, int (*cb)(void *ctx, const struct mp_live_block *b),
		    void *ctx);

/* Replaces the value stored with every live block by @fn(@ctx, value):
 * the correlator's, when what values named is gone (a site's entry,
 * attribution.c). Nothing else changes. */
void mp_live_map_user(struct mp_live *l, uint64_t (*fn)(void *ctx, uint64_t user), void *ctx);

#endif /* MP_LIVE_H */
