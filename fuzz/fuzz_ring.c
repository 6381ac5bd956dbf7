/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for the ring consumer. The input drives a ring image:
 * the first bytes pick the sizes of a well-formed layout (so the fuzzer gets
 * past header validation), a flag byte lets it overwrite the header itself,
 * and the rest is laid over slots, thread slots and strings. The consumer
 * then reads (mp_consumer_read_rings_at(), in reads of one record up to
 * thousands) until it reports nothing or an error, with an iteration cap.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "consumer.h"
#include "ring_abi.h"

/* The depth the consumer asks FRAMES records to keep to. */
#define FUZZ_DEPTH 64u

/* Where the checks leave what they read, so that the reads stay. */
static volatile unsigned fuzz_sink;

/* A heap record names a builtin function and carries no name, even in the
 * record the reader reuses after a marker's. */
/* The ring reader's look-ahead (mp_consumer_set_prefetch()): any value
 * the image holds comes here, to be used as a hint only. */
static void fuzz_prefetch(void *ctx, uint64_t addr, uint64_t old_addr)
{
	(void)ctx;
	fuzz_sink += (unsigned)(addr ^ old_addr);
}

static int check_ring_rec(void *ctx, uint32_t ring, const struct mp_record *rec)
{
	(void)ring;
	/* the read's progress (docs/RING.md "Consumer: how far the rings
	 * have been read"), asked in the middle of a read */
	(void)mp_consumer_complete_others_ns(ctx);
	if (rec->type >= MP_REC_ALLOC && rec->type <= MP_REC_REALLOC &&
	    (rec->fn >= 32 || rec->name || rec->rank))
		__builtin_trap();
	/* a stack comes only with a new block, bounded, and every byte of
	 * it is readable (ASan checks) */
	if (rec->stack) {
		unsigned sum = 0;

		if ((rec->type != MP_REC_ALLOC && rec->type != MP_REC_REALLOC) ||
		    rec->stack->len > MP_RING_STACK_MAX)
			__builtin_trap();
		for (uint32_t j = 0; j < rec->stack->len; j++)
			sum += rec->stack->bytes[j];
		/* frames unwound by the target: 1 to the depth asked */
		if (rec->stack->frames &&
		    (rec->stack->len || !rec->stack->n_frames || rec->stack->n_frames > FUZZ_DEPTH))
			__builtin_trap();
		for (uint32_t j = 0; rec->stack->frames && j < rec->stack->n_frames; j++)
			sum += (unsigned)rec->stack->frames[j];
		/* kept, not judged: frames are any 64-bit values */
		fuzz_sink = sum;
	}
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define PARAMS 8

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint32_t slots, threads, strs, blob;
	struct mp_ring_layout l;
	size_t len, body;
	struct mp_ring_hdr *h;
	struct mp_consumer *c;
	unsigned char *mem;
	uint8_t flags, shrink, clk, clkv;

	if (size < PARAMS)
		return 0;
	slots = 2u << (data[0] % 6);
	threads = 1u + data[1] % 4;
	strs = 1u + data[2] % 16;
	blob = 1u + data[3];
	flags = data[4];
	shrink = data[5];
	clk = data[6];
	clkv = data[7];
	data += PARAMS;
	size -= PARAMS;

	l = mp_ring_layout_of(slots, threads, strs, blob);
	len = l.end;
	mem = aligned_alloc(128, (len + 127) & ~(size_t)127);
	if (!mem)
		return 0;
	memset(mem, 0, len);
	h = (struct mp_ring_hdr *)mem;
	*h = (struct mp_ring_hdr){
		.magic = MP_RING_MAGIC,
		.abi_version = MP_RING_ABI_VERSION,
		.hdr_size = sizeof(*h),
		.total_size = len,
		.creator_pid = 1,
		.slot_size = sizeof(struct mp_slot),
		.slot_count = slots,
		.thread_size = sizeof(struct mp_thread),
		.thread_count = threads,
		.str_max = strs,
		.blob_size = blob,
		.ring_off = l.ring_off,
		.threads_off = l.threads_off,
		.strent_off = l.strent_off,
		.blob_off = l.blob_off,
	};
	if (flags & 1) {
		/* raw header bytes from the input */
		size_t n = size < sizeof(*h) ? size : sizeof(*h);

		memcpy(mem, data, n);
		data += n;
		size -= n;
	}
	body = len - l.ring_off;
	memcpy(mem + l.ring_off, data, size < body ? size : body);
	if (flags & 2) {
		/* make slots after each ring's consumer position look
		 * published, so that records get decoded */
		uint64_t mask = slots - 1;

		for (uint32_t r = 0; r < threads; r++) {
			struct mp_thread *t = (struct mp_thread *)(mem + l.threads_off) + r;
			struct mp_slot *ring =
				(struct mp_slot *)(mem + l.ring_off) + (size_t)r * slots;

			for (uint64_t p = t->tail, i = 0; i < slots; i++, p++) {
				if (flags & 4 || i < 4)
					ring[p & mask].seq = p + 1;
				/* the in-process path's heap records (types
				 * 8-10), whatever else the input put there */
				if (flags & 16)
					ring[p & mask].type = 8 + ring[p & mask].type % 3;
				/* a clock byte the ABI defines, or one past them */
				if (clk & 4)
					ring[p & mask].clock = (uint8_t)((clkv + i) % 3);
			}
			/* a STACK record (type 24) at the consumer's position,
			 * any length, or a FRAMES record (type 25) of any
			 * count and flags: continuation slots and the heap
			 * record after it are whatever the input made them */
			if (flags & 64) {
				struct mp_slot *st = &ring[t->tail & mask];

				if (clkv & 0x80) {
					st->type = MP_REC_FRAMES;
					st->dims[0] = (int64_t)((uint64_t)st->dims[0] %
								(MP_FRAMES_MAX + 16));
					st->flags &= clkv & 0x40 ? 0xff : MP_FRAMES_F_TRUNCATED;
				} else {
					st->type = MP_REC_STACK;
					st->dims[3] =
						(int64_t)((uint64_t)st->dims[3] %
							  (slots * MP_STACK_SLOT_BYTES + 256));
				}
			}
		}
	}

	/* strict: stamps and thread ids checked as a live target's */
	if (mp_consumer_open_mem_opts(mem, (flags & 8) ? len - shrink % 64 : len,
				      &(struct mp_consumer_opts){ .strict = clk & 1,
								  .alloc_stack_depth = FUZZ_DEPTH },
				      &c) == 0) {
		/* turning the interposer on or off only writes the header */
		(void)mp_consumer_set_alloc_mode(c, shrink % 4, flags & 32 ? 0 : 4096);
		(void)mp_consumer_set_alloc_stacks(c, shrink & 64 ? 16384 : 0);
		if (flags & 16)
			mp_consumer_set_prefetch(c, fuzz_prefetch, NULL);
		/* TSC records (docs/RING.md "Clocks"): a forged calibration
		 * (any rate, any base: the conversion saturates), none (TSC
		 * records are corrupt), or now and then the consumer's own
		 * (its first calibration waits up to 1 ms) */
		if ((clk & 0x1f) != 3) {
			struct mp_tsc_cal cal = {
				.tsc = (uint64_t)clkv << (clk >> 5 << 3),
				.ns = (uint64_t)shrink << (clk & 0x18),
				.mult = (clk & 2) ? UINT64_MAX >> (clkv % 64) : (1ull << 31) + clkv,
			};

			mp_consumer_set_tsc_cal(c, (clk & 3) == 1 ? NULL : &cal);
		}
		for (int i = 0; i < 10000; i++) {
			/* told a time that moves on, or stands still; or
			 * 1 ms a read (a stuck ring passes its stall time).
			 * Reads of a few records, of one (a record that
			 * fails after one that passed is in the next read)
			 * or of a whole batch of the daemon's. */
			uint64_t now = flags & 64 && i % 2 ? (uint64_t)(i / 4) * (clkv | 1) :
							     (uint64_t)(i + 1) * 1000000;
			size_t max = flags & 64 ? 1 + i % 7 : flags & 128 ? 1 : 4096;

			if (mp_consumer_read_rings_at(c, max, now, check_ring_rec, c) <= 0)
				break;
			(void)mp_consumer_complete_ns(c);
		}
		(void)mp_consumer_drops(c);
		(void)mp_consumer_alloc_drops(c);
		(void)mp_consumer_alloc_waits(c);
		(void)mp_consumer_alloc_tls_off(c);
		(void)mp_consumer_pid(c);
		{
			uint64_t unwound, copied;

			mp_consumer_stack_counts(c, &unwound, &copied);
		}
		mp_consumer_free(c);
	}
	free(mem);
	return 0;
}
