/* SPDX-License-Identifier: MIT */
/*
 * Timestamp merge of the daemon's input streams (marker records, BPF events,
 * RSS samples).
 *
 * Each stream is only roughly ordered (the BPF ring buffer is in reservation
 * order across CPUs, the marker ring in claim order across threads), so items
 * are held in a min-heap on (ts, arrival) and released only once they are
 * older than a watermark the caller derives from the clock reading taken
 * before its last drain of every stream, less a lag. Sorting by the shared
 * CLOCK_MONOTONIC timestamp also preserves causality between threads (an
 * allocation's event is stamped before the pointer is returned, so before any
 * other thread can free it). An item that arrives older than what was already
 * released is still delivered, next, and counted as late.
 *
 * Steady state does no allocation: item slots and the heap grow by doubling
 * and are reused.
 */
#ifndef MP_MERGE_H
#define MP_MERGE_H

#include <stddef.h>
#include <stdint.h>

#define MP_MERGE_PAYLOAD_MAX 160

struct mp_merge_item {
	uint64_t ts;
	uint32_t kind; /* caller-defined stream / item kind */
	uint32_t len;
	union {
		unsigned char bytes[MP_MERGE_PAYLOAD_MAX];
		uint64_t align_;
		void *align_ptr_;
	} payload;
};

struct mp_merge;

int mp_merge_new(size_t initial_capacity, struct mp_merge **ret);
void mp_merge_free(struct mp_merge *m);

/* Copies @len bytes of @payload (at most MP_MERGE_PAYLOAD_MAX) into the merge.
 * -E2BIG for an oversized payload, -ENOMEM when growing fails. */
int mp_merge_push(struct mp_merge *m, uint32_t kind, uint64_t ts, const void *payload, size_t len);

/* Pops the oldest item if its ts <= @watermark (UINT64_MAX flushes
 * everything). Returns 1 and sets *@ret (valid until the next push or pop),
 * or 0 when nothing is ready. */
int mp_merge_pop(struct mp_merge *m, uint64_t watermark, const struct mp_merge_item **ret);

/* Timestamp of the oldest item held, UINT64_MAX when none. */
uint64_t mp_merge_next_ts(const struct mp_merge *m);
/* Items of another stream (mp_ringq) were released up to @ts: an item
 * pushed later and older than that is late too. */
void mp_merge_note_released(struct mp_merge *m, uint64_t ts);

size_t mp_merge_pending(const struct mp_merge *m);
/* Items that arrived older than an item already released. */
uint64_t mp_merge_late(const struct mp_merge *m);

#endif /* MP_MERGE_H */
