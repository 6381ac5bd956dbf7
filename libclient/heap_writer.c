/* SPDX-License-Identifier: MIT */
/*
 * The writer of heap records (types 8-15) and of the STACK and FRAMES
 * records that precede them (types 24, 25): what the allocator interposer (interpose.c) and
 * the stack capture (stack_capture.c) put into the calling thread's ring
 * (docs/RING.md "Heap records"). Unlike markers, a precise-mode record
 * waits a bounded time for space, is stamped with the cheapest trusted
 * clock, and maps the first lap of its ring ahead of itself. It works on
 * the ring writer's state (ring.c) and calls nothing above it.
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "ring_abi.h"
#include "ring_clock.h"
#include "ring_state.h"
#include "ring_writer.h"

/* Out of line: mp_ring_write() then keeps no timespec and saves fewer
 * registers. */
static __attribute__((noinline, cold)) uint64_t heap_ts_monotonic(void)
{
	return now_ns();
}

/* A heap record's stamp, in the clock of mp_rw_heap_clock: two records per
 * malloc+free pair make clock_gettime (tens of ns in a VM) the largest
 * cost of precise mode; rdtsc is a few ns. */
HOT uint64_t heap_ts(void)
{
	return likely(mp_rw_heap_clock == MP_TS_TSC) ? mp_rdtsc() : heap_ts_monotonic();
}

/* Wait of a precise-mode heap record for ring space (heapprofd's
 * block_client model), as long as the consumer holds the ring's lease when
 * it asks so (alloc_max_wait_ns MP_WAIT_LEASE: precise stays exact however
 * long the daemon is slow or stopped, and a daemon that dies releases the
 * ring), else at most alloc_max_wait_ns, or WAIT_MAX_NS (an older
 * consumer, or one without the lease), by the clock (1 s: the bound used
 * to count 5,000 sleeps of a nominal 20 us, which took 0.35 s to seconds;
 * a true 100 ms dropped records of the exactness tests at load 12, the
 * daemon being off the CPU that long):
 * - spin WAIT_SPINS times: a daemon that is draining gives space back
 *   every 256 records it reads, some 10-20 us apart;
 * - then yield the CPU (sched_yield) until WAIT_YIELD_NS have passed: on
 *   a loaded machine the daemon may be waiting for this very CPU, and a
 *   daemon between two ticks (0.5 ms apart while records come) is back
 *   within that time; a sleep would oversleep it (a 20 us nanosleep takes
 *   70-250 us in a VM: the timer slack is 50 us);
 * - then sleep in WAIT_SLEEP_NS steps (a daemon that has backed off to a
 *   slower tick, or a stalled one), WAIT_LONG_SLEEP_NS ones past
 *   WAIT_MAX_NS (a stopped daemon: a thousand wake-ups a second, not
 *   fifty thousand).
 * A thread whose wait timed out drops at once until the consumer moves
 * again, so a stalled consumer costs one timeout, not one per record. */
#define WAIT_SPINS 1024
#define WAIT_YIELD_NS (500 * 1000ull)
#define WAIT_SLEEP_NS (20 * 1000)
#define WAIT_MAX_NS (1000 * 1000 * 1000ull)
#define WAIT_LONG_SLEEP_NS (1000 * 1000)

/* Records ahead of the writer whose slot mp_ring_write() prefetches. */
#define RING_PREFETCH 8
/* Slots after a payload record's last that it prefetches. */
#define PAYLOAD_PREFETCH 6
_Static_assert(sizeof(struct mp_slot) == 128, "a slot is two cache lines");

/* At most one look at the consumer's lease per LEASE_LOOK_NS in the
 * process (a syscall), and only where a heap record finds its ring full. */
#define LEASE_LOOK_NS (1000 * 1000ull)

static uint64_t lease_look_ns;

/* Records that never wait (sampled mode) may never fill their ring when
 * the consumer is gone: one of them looks at the lease when the heap
 * clock (ns, or TSC ticks: 0.2-1 ms at 1-5 GHz) has moved LEASE_TICKS past
 * the last look; consumer_gone() still makes at most one syscall per
 * LEASE_LOOK_NS. A difference, not a deadline: a clock that went back (a
 * forked child's ring stamping with the other clock) looks at once. */
#define LEASE_TICKS (1ull << 20)

static uint64_t lease_look_ts;

/*
 * Whether the consumer that turned the interposer on is gone; if so the
 * ring is released: detached and dormant (docs/RING.md "A consumer that
 * dies"). A consumer holding the lease marks attached with
 * MP_ATTACHED_LEASE and keeps a read lock on the memfd's lease byte, which
 * the kernel drops when it dies; asking for a write lock there says
 * whether another open file holds one. A new consumer that began its
 * attach since attach_word was read cleared it and numbers its own
 * differently, so the swap then fails and its session goes on. Slow paths
 * only (a full ring, a sampled record once per LEASE_TICKS); leaves errno
 * alone.
 */
static __attribute__((noinline, cold)) bool consumer_gone(uint64_t now)
{
	struct mp_ring_hdr *h = mp_rw.hdr;
	struct flock fl = {
		.l_type = F_WRLCK,
		.l_whence = SEEK_SET,
		.l_start = MP_RING_LEASE_BYTE,
		.l_len = 1,
	};
	uint64_t w;
	int saved, r;

	if (now < LOAD(&lease_look_ns, RELAXED))
		return false;
	STORE(&lease_look_ns, now + LEASE_LOOK_NS, RELAXED);
	w = LOAD(&h->attach_word, ACQUIRE);
	/* x86-64: attached is the low half */
	if (!((uint32_t)w & MP_ATTACHED_LEASE) || !(w >> 32))
		return false;
	saved = errno;
	r = fcntl(mp_rw.fd, F_OFD_GETLK, &fl);
	errno = saved;
	if (r < 0 || fl.l_type != F_UNLCK)
		return false;
	return __atomic_compare_exchange_n(&h->attach_word, &w, 0, false, __ATOMIC_SEQ_CST,
					   __ATOMIC_RELAXED);
}

/* A record that does not wait, stamped @ts, is the first for LEASE_TICKS
 * of the heap clock: whether the consumer is gone (the ring is then
 * released). Out of line: the record path keeps one compare. */
static __attribute__((noinline, cold)) bool lease_due(uint64_t ts)
{
	STORE(&lease_look_ts, ts, RELAXED);
	return consumer_gone(now_ns());
}

static inline __attribute__((always_inline)) bool lease_look(enum mp_rw_wait wait, uint64_t ts)
{
	return wait == MP_RW_NOWAIT &&
	       unlikely(ts - LOAD(&lease_look_ts, RELAXED) >= LEASE_TICKS) && lease_due(ts);
}

/* How long this wait may last (UINT64_MAX: while the lease holds). */
static uint64_t wait_bound(void)
{
	uint64_t max = LOAD(&mp_rw.hdr->alloc_max_wait_ns, RELAXED);

	if (!max ||
	    (max == MP_WAIT_LEASE && !(LOAD(&mp_rw.hdr->attached, RELAXED) & MP_ATTACHED_LEASE)))
		return WAIT_MAX_NS;
	return max;
}

static bool ring_wait_inner(struct mp_rw_tls *t, uint64_t pos)
{
	uint64_t t0 = 0, max = wait_bound();

	__atomic_fetch_add(&mp_rw.hdr->alloc_waits, 1, __ATOMIC_RELAXED);
	for (unsigned i = 0;; i++) {
		if (i < WAIT_SPINS) {
			cpu_relax();
		} else {
			uint64_t now = now_ns(), spent;

			if (!t0)
				t0 = now;
			spent = now - t0;
			if (consumer_gone(now))
				return false;
			if (max != MP_WAIT_LEASE && spent >= max) {
				t->gave_up = 1;
				return false;
			}
			if (spent < WAIT_YIELD_NS) {
				sched_yield();
			} else {
				struct timespec ts = { .tv_nsec = spent < WAIT_MAX_NS ?
									  WAIT_SLEEP_NS :
									  WAIT_LONG_SLEEP_NS };

				nanosleep(&ts, NULL);
			}
		}
		/* a consumer that detaches turns the interposer off */
		if (!LOAD(&mp_rw.hdr->alloc_mode, RELAXED))
			return false;
		t->tail = LOAD(&t->thr->tail, ACQUIRE);
		if (pos - t->tail <= mp_rw.heap_mask)
			return true;
	}
}

static bool ring_wait(struct mp_rw_tls *t, uint64_t pos)
{
	int saved;
	bool r;

	/* a consumer that died gives the ring back before anyone waits */
	if (consumer_gone(now_ns()) || t->gave_up)
		return false;
	/* nanosleep and sched_yield may set errno: the interposer's caller
	 * must not see it (the record path leaves errno alone, interpose.c) */
	saved = errno;
	r = ring_wait_inner(t, pos);
	errno = saved;
	return r;
}

/* A heap or STACK record of @pos finds its ring full: whether there is
 * room after the bounded wait (MP_RW_WAIT); a record that does not wait
 * still looks whether the consumer is gone. */
static bool ring_full(struct mp_rw_tls *t, uint64_t pos, enum mp_rw_wait wait)
{
	if (wait == MP_RW_WAIT)
		return ring_wait(t, pos);
	consumer_gone(now_ns());
	return false;
}

/* @in_drops: not yet counted in drops (a thread without a slot was). */
static void count_alloc_drop(bool in_drops)
{
	if (LOAD(&mp_rw_state, ACQUIRE) != ST_READY)
		return;
	if (in_drops)
		__atomic_fetch_add(&mp_rw.hdr->drops, 1, __ATOMIC_RELAXED);
	__atomic_fetch_add(&mp_rw.hdr->alloc_drops, 1, __ATOMIC_RELAXED);
}

MP_HIDDEN void mp_ring_count_alloc_drop(void)
{
	count_alloc_drop(true);
}

/* Fills a heap or STACK record's slot but its seq: the caller publishes
 * it. Inlined: a call here would cost the allocation path a frame. */
static inline __attribute__((always_inline)) void
slot_fill(struct mp_slot *s, const struct mp_rw_tls *t, uint64_t ts, uint8_t type, uint8_t flags,
	  uint32_t name_id, const uint64_t *w, unsigned nw)
{
	s->ts_ns = ts;
	s->type = type;
	s->flags = flags;
	s->rank = 0;
	/* the clock of ts (heap records' only; a STACK record's is unread) */
	s->clock = mp_rw_heap_clock;
	s->tid = t->tid;
	s->tseq = (uint32_t)(t->gen >> 1);
	s->name_id = name_id;
	/* three words always (the slot's first line), the fourth on the
	 * second line only when there is one */
	s->dims[0] = (int64_t)w[0];
	s->dims[1] = (int64_t)w[1];
	s->dims[2] = (int64_t)w[2];
	if (nw > 3)
		s->dims[3] = (int64_t)w[3];
}

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
#define POPULATE_MIN_PAGES 4u
#define POPULATE_MAX_PAGES 64u

/* The first lap of a thread slot's ring, for heap records (only written
 * while the interposer is on): its pages are mapped ahead of the writer,
 * from positions @first..@last on, in chunks of 4 pages, then as many as
 * the slot has written, up to 64 (256 KiB), one madvise(MADV_POPULATE_WRITE)
 * each, instead of a page fault per 4 KiB (32 records): 12-25 us a fault in
 * a guest whose page tables the host shadows, against ~1.5 us a populated
 * page and ~5 at its first touch (docs/RING.md "First lap"). At most one
 * chunk, never more than what was written, is mapped beyond the records.
 * Once every slot is mapped (or populating fails: a kernel before 5.14),
 * never called again for the slot. */
static __attribute__((noinline, cold)) void ring_populate(struct mp_rw_tls *t, uint64_t first,
							  uint64_t last)
{
	struct thread_priv *pv = t->priv;
	/* the slots before @first were written: mapped already */
	uint64_t slots = mp_rw.mask + 1, from = pv->populated > first ? pv->populated : first, to,
		 per_page, pages;
	uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE), a, b;
	int saved = errno;

	/* positions run on across the slot's owners: one past the ring means
	 * every slot of it was written once already */
	if (last >= slots || from >= slots || !page || page % sizeof(struct mp_slot))
		goto done;
	if (last < pv->populated) {
		/* a previous owner of the slot mapped them */
		t->populate_at = pv->populated;
		return;
	}
	per_page = page / sizeof(struct mp_slot);
	pages = from / per_page;
	if (pages < POPULATE_MIN_PAGES)
		pages = POPULATE_MIN_PAGES;
	if (pages > POPULATE_MAX_PAGES)
		pages = POPULATE_MAX_PAGES;
	to = (from / per_page + pages) * per_page;
	if (to <= last)
		to = (last / per_page + 1) * per_page;
	if (to > slots)
		to = slots;
	a = (uintptr_t)&t->ring[from] & ~(page - 1);
	b = (uintptr_t)&t->ring[to - 1] + sizeof(struct mp_slot);
	if (madvise((void *)a, b - a, MADV_POPULATE_WRITE) < 0)
		goto done; /* the writer faults them in, as without this */
	pv->populated = to;
	t->populate_at = to < slots ? to : UINT64_MAX;
	errno = saved;
	return;
done:
	pv->populated = slots;
	t->populate_at = UINT64_MAX;
	errno = saved;
}

MP_HIDDEN int mp_ring_write(uint8_t type, uint8_t flags, uint32_t name_id, const uint64_t *w,
			    unsigned nw, enum mp_rw_wait wait)
{
	struct mp_rw_tls *t = &mp_rw_tls;
	struct mp_slot *s;
	uint64_t pos, ts;
	int r;

	if (unlikely(t->busy)) {
		count_alloc_drop(true);
		return -EBUSY;
	}
	t->busy = 1;
	atomic_signal_fence(memory_order_seq_cst);
	if (unlikely(!t->thr)) {
		r = mp_rw_thread_init(t);
		if (r < 0)
			goto drop;
	}
	/* before the stamp: a record is published within microseconds of
	 * its stamp (docs/RING.md "Consumer: how far the rings have been
	 * read") */
	if (unlikely(t->head >= t->populate_at))
		ring_populate(t, t->head, t->head);
	ts = heap_ts();
	/* released: the record in hand is dropped, as at a full ring */
	if (lease_look(wait, ts)) {
		r = -ENOSPC;
		goto drop;
	}
	pos = t->head;
	if (unlikely(pos - t->tail > mp_rw.heap_mask)) {
		uint64_t tail = LOAD(&t->thr->tail, ACQUIRE);

		if (tail != t->tail)
			t->gave_up = 0;
		t->tail = tail;
		if (pos - t->tail > mp_rw.heap_mask && !ring_full(t, pos, wait)) {
			r = -ENOSPC;
			goto drop;
		}
	}
	s = &t->ring[pos & mp_rw.mask];
	slot_fill(s, t, ts, type, flags, name_id, w, nw);
	STORE(&s->seq, pos + 1, RELEASE);
	t->head = pos + 1;
	STORE(&t->thr->head, pos + 1, RELAXED);
	/* The slot a few records on, for writing: its line was last in the
	 * consumer's cache (or nowhere), and the miss of the first store
	 * into a slot was a fifth of this function. */
	__builtin_prefetch(&t->ring[(pos + RING_PREFETCH) & mp_rw.mask], 1);
	atomic_signal_fence(memory_order_seq_cst);
	t->busy = 0;
	mp_rw_bell();
	return 0;

drop:
	count_alloc_drop(!(r == -ENOSPC && t->noslot));
	atomic_signal_fence(memory_order_seq_cst);
	t->busy = 0;
	return r;
}

/* Copies @n bytes with rep movsb: never a call into an intercepted memcpy
 * (a sanitizer runtime in the process would check the redzones of the
 * stack frames being copied). */
static inline void copy_bytes(void *dst, const void *src, size_t n)
{
	__asm__ volatile("rep movsb" : "+D"(dst), "+S"(src), "+c"(n) : : "memory");
}

/* The heap record preceded by a payload record (@ptype, @pflags, header
 * words @pw) whose @len bytes at @src follow it in continuation slots:
 * STACK and FRAMES records alike (ring_writer.h). */
static int write_payload(uint8_t type, uint8_t flags, uint32_t name_id, const uint64_t *w,
			 unsigned nw, enum mp_rw_wait wait, uint8_t ptype, uint8_t pflags,
			 const uint64_t pw[4], const unsigned char *src, uint32_t len)
{
	uint32_t k = (len + MP_STACK_SLOT_BYTES - 1) / MP_STACK_SLOT_BYTES;
	struct mp_rw_tls *t = &mp_rw_tls;
	struct mp_slot *s;
	uint64_t pos, last, ts;

	if (len > MP_RING_STACK_MAX || unlikely(t->busy))
		return mp_ring_write(type, flags, name_id, w, nw, wait);
	t->busy = 1;
	atomic_signal_fence(memory_order_seq_cst);
	if (unlikely(!t->thr) && mp_rw_thread_init(t) < 0) {
		t->busy = 0;
		return mp_ring_write(type, flags, name_id, w, nw, wait);
	}
	if (k + 2 > mp_rw.heap_mask + 1) {
		t->busy = 0;
		return mp_ring_write(type, flags, name_id, w, nw, wait);
	}
	pos = t->head;
	last = pos + k + 1; /* the heap record's position */
	if (last - t->tail > mp_rw.heap_mask) {
		uint64_t tail = LOAD(&t->thr->tail, ACQUIRE);

		if (tail != t->tail)
			t->gave_up = 0;
		t->tail = tail;
		if (last - t->tail > mp_rw.heap_mask && !ring_full(t, last, wait)) {
			/* no room for the stack: the record alone */
			atomic_signal_fence(memory_order_seq_cst);
			t->busy = 0;
			return mp_ring_write(type, flags, name_id, w, nw, wait);
		}
	}
	/* before the stamp, as in mp_ring_write() */
	if (unlikely(last >= t->populate_at))
		ring_populate(t, pos, last);
	ts = heap_ts();
	if (lease_look(wait, ts)) {
		count_alloc_drop(true);
		atomic_signal_fence(memory_order_seq_cst);
		t->busy = 0;
		return -ENOSPC;
	}
	/* The continuation slots and the heap record first, the payload
	 * record's seq last: a consumer that sees it sees them all. */
	for (uint32_t j = 0; j < k; j++) {
		uint32_t n = len - j * MP_STACK_SLOT_BYTES;

		s = &t->ring[(pos + 1 + j) & mp_rw.mask];
		copy_bytes((unsigned char *)s + sizeof(s->seq),
			   src + (size_t)j * MP_STACK_SLOT_BYTES,
			   n < MP_STACK_SLOT_BYTES ? n : MP_STACK_SLOT_BYTES);
		STORE(&s->seq, pos + 2 + j, RELAXED);
	}
	s = &t->ring[last & mp_rw.mask];
	slot_fill(s, t, ts, type, flags, name_id, w, nw);
	STORE(&s->seq, last + 1, RELEASE);
	s = &t->ring[pos & mp_rw.mask];
	slot_fill(s, t, ts, ptype, pflags, 0, pw, 4);
	STORE(&s->seq, pos + 1, RELEASE);
	t->head = last + 1;
	STORE(&t->thr->head, last + 1, RELAXED);
	/* The next record's slots, for writing (mp_ring_write() takes one a
	 * few records on): a thread sending stacks writes 4-6 slots a
	 * record, and their first stores missed (a third of this function
	 * on the PyTorch --stacks script). */
	for (uint32_t j = 1; j <= PAYLOAD_PREFETCH; j++) {
		const char *n = (const char *)&t->ring[(last + j) & mp_rw.mask];

		__builtin_prefetch(n, 1);
		__builtin_prefetch(n + 64, 1);
	}
	atomic_signal_fence(memory_order_seq_cst);
	t->busy = 0;
	mp_rw_bell();
	return 0;
}

MP_HIDDEN int mp_ring_write_stacked(uint8_t type, uint8_t flags, uint32_t name_id,
				    const uint64_t *w, unsigned nw, enum mp_rw_wait wait,
				    const uint64_t regs[3], const void *stack, uint32_t len)
{
	const uint64_t sw[4] = { regs[0], regs[1], regs[2], len };

	return write_payload(type, flags, name_id, w, nw, wait, MP_REC_STACK, 0, sw, stack, len);
}

MP_HIDDEN struct mp_unwind_memo *mp_rw_unwind_memo(void)
{
	struct thread_priv *pv = mp_rw_tls.priv;

	return pv ? &pv->unwind_memo : NULL;
}

MP_HIDDEN int mp_ring_write_frames(uint8_t type, uint8_t flags, uint32_t name_id, const uint64_t *w,
				   unsigned nw, enum mp_rw_wait wait, const uint64_t *frames,
				   uint32_t n, bool truncated)
{
	const uint64_t fw[4] = { n, 0, 0, 0 };

	if (!n || n > MP_FRAMES_MAX)
		return mp_ring_write(type, flags, name_id, w, nw, wait);
	return write_payload(type, flags, name_id, w, nw, wait, MP_REC_FRAMES,
			     truncated ? MP_FRAMES_F_TRUNCATED : 0, fw,
			     (const unsigned char *)frames, n * 8);
}
