/* SPDX-License-Identifier: MIT */
/*
 * libmemprof producer: kernel markers written into a shared-memory ring that
 * memprofd reads. docs/RING.md explains the layout and the memory ordering;
 * comments here only say why a line is the way it is.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "client_internal.h"
#include "memprof.h"
#include "ring_abi.h"
#include "ring_clock.h"
#include "ring_writer.h"

#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)
#define HOT static inline __attribute__((always_inline))

/* Per thread: 4 MiB of address space, touched only as records are written.
 * Sized for the in-process allocation path: an allocating thread writes
 * tens of millions of records a second and the consumer drains every
 * millisecond (docs/RING.md). */
#define DEFAULT_SLOTS (1u << 15)
/* Slots of each ring that heap records leave to markers: a precise-mode
 * writer that waited for space takes it one slot at a time, so without
 * them the marker that follows (which never waits) would find the ring
 * full and be dropped. 1/64 of the ring, at most 256. */
#define MARKER_RESERVE(slots) ((slots) / 64 < 256 ? (slots) / 64 : 256)
#define DEFAULT_THREADS 512u
#define DEFAULT_STRINGS 8192u
#define DEFAULT_BLOB (512u << 10)
#define CACHE_SIZE 64u

#define LOAD(p, mo) __atomic_load_n((p), __ATOMIC_##mo)
#define STORE(p, v, mo) __atomic_store_n((p), (v), __ATOMIC_##mo)

enum { ST_NONE, ST_INIT, ST_READY, ST_FAILED };

struct cache_ent {
	const char *ptr;
	uint32_t id;
	uint32_t len; /* MP_NAME_MAX + 1: the name was truncated */
	const char *str;
	/* A name that, with its NUL, lies in the two aligned words at
	 * ptr & ~7: those words as they were (w) and the mask of the name's
	 * bytes and NUL in them (m), for name_matches() to compare a word at
	 * a time. m[0] == 0: byte by byte. */
	uint64_t w[2];
	uint64_t m[2];
} __attribute__((aligned(64)));

/* Process-private per-thread-slot data, never shared with the consumer. */
struct thread_priv {
	struct cache_ent cache[CACHE_SIZE];
	/* Slots [0, populated) of this thread slot's ring are mapped in
	 * this process (ring_populate()). */
	uint64_t populated;
};

struct ring {
	int fd;
	struct mp_ring_hdr *hdr;
	size_t size;
	struct mp_slot *slots; /* thread slot i's ring: slots + i * (mask + 1) */
	uint64_t mask;
	/* Heap and stack records see a ring as full with MARKER_RESERVE()
	 * slots still free: those are the markers' (docs/RING.md "Waiting
	 * for space"). */
	uint64_t heap_mask;
	struct mp_thread *threads;
	uint32_t nthreads;
	mp_strent *strent;
	char *blob;
	uint32_t str_max;
	uint32_t blob_size;
	void *priv_map;
	size_t priv_size;
	struct thread_priv *priv;
	uint32_t *hash; /* string hash -> id, open addressing */
	uint32_t hash_mask;
};

static struct ring g;
static const struct mp_ring_hdr dormant_hdr;
MP_HIDDEN const struct mp_ring_hdr *mp_alloc_hdr = &dormant_hdr;
MP_HIDDEN uint32_t mp_fork_gen;
static int g_state;
static int g_err;
/* enum mp_ts_clock of heap records, chosen once at ring creation. */
static uint8_t g_heap_clock;
static pthread_key_t g_key;
static bool g_key_ok;
static bool g_atfork_done;

/* initial-exec: no __tls_get_addr (which may allocate for dlopened
 * libraries) on the marker path. Small on purpose: static TLS surplus is
 * limited when the library is dlopened. */
struct tls {
	struct mp_thread *thr;
	struct mp_slot *ring; /* this thread's ring */
	uint64_t head; /* next position in it */
	uint64_t tail; /* consumer position last seen */
	struct thread_priv *priv;
	uint64_t gen;
	uint32_t depth;
	uint32_t tag_depth;
	uint32_t tid;
	uint16_t idx;
	uint8_t dead; /* slot released at thread exit */
	uint8_t noslot;
	uint8_t busy; /* writing a record (a signal handler may interrupt) */
	uint8_t gave_up; /* the last bounded wait timed out at this tail */
	uint64_t populate_at; /* heap record position that calls ring_populate() */
};
static __thread struct tls tls __attribute__((tls_model("initial-exec")));

HOT uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Out of line: mp_ring_write() then keeps no timespec and saves fewer
 * registers. */
static __attribute__((noinline, cold)) uint64_t heap_ts_monotonic(void)
{
	return now_ns();
}

/* A heap record's stamp, in the clock of g_heap_clock: two records per
 * malloc+free pair make clock_gettime (tens of ns in a VM) the largest
 * cost of precise mode; rdtsc is a few ns. */
HOT uint64_t heap_ts(void)
{
	return likely(g_heap_clock == MP_TS_TSC) ? mp_rdtsc() : heap_ts_monotonic();
}

/* MEMPROF_CLOCK=monotonic keeps clock_gettime even where the TSC is
 * trusted (a comparison, or a doubt about the host). */
static uint8_t heap_clock_choose(void)
{
	const char *e = getenv("MEMPROF_CLOCK");

	if (e && strcmp(e, "monotonic") == 0)
		return MP_TS_MONOTONIC;
	return mp_tsc_stamp_ok() ? MP_TS_TSC : MP_TS_MONOTONIC;
}

static uint32_t env_pow2(const char *name, uint32_t def, uint32_t min, uint32_t max)
{
	const char *s = getenv(name);
	unsigned long v;
	char *end;

	if (!s || !*s)
		return def;
	errno = 0;
	v = strtoul(s, &end, 0);
	if (errno || *end || v < min || v > max || (v & (v - 1)))
		return def;
	return (uint32_t)v;
}

static size_t align_up(size_t v, size_t a)
{
	return (v + a - 1) & ~(a - 1);
}

static void ring_unmap(struct ring *r)
{
	if (r->hdr)
		munmap(r->hdr, r->size);
	if (r->priv_map)
		munmap(r->priv_map, r->priv_size);
	if (r->fd >= 0)
		close(r->fd);
	memset(r, 0, sizeof(*r));
	r->fd = -1;
}

/* Stores string @s (@len bytes, no NUL inside) as a new table entry. Returns
 * its id, 0 when the table is full. */
static uint32_t string_add(const char *s, uint32_t len)
{
	struct mp_ring_hdr *h = g.hdr;
	uint32_t id, off;

	if (LOAD(&h->str_count, RELAXED) >= g.str_max)
		return 0;
	id = __atomic_fetch_add(&h->str_count, 1, __ATOMIC_RELAXED);
	if (id >= g.str_max)
		return 0;
	off = __atomic_fetch_add(&h->blob_used, len + 1, __ATOMIC_RELAXED);
	if (off > g.blob_size || len + 1 > g.blob_size - off)
		return 0;
	memcpy(g.blob + off, s, len);
	g.blob[off + len] = '\0';
	STORE(&g.strent[id], ((uint64_t)off << 32) | (len + 1), RELEASE);
	return id;
}

static const char *string_get(uint32_t id, uint32_t *ret_len)
{
	mp_strent e = LOAD(&g.strent[id], ACQUIRE);

	*ret_len = (uint32_t)e - 1;
	return g.blob + (e >> 32);
}

static int ring_create(void)
{
	struct ring r = { .fd = -1 };
	struct mp_ring_hdr *h;
	uint32_t slots, hash_size;
	struct mp_ring_layout l;
	size_t hash_off;
	void *p;
	int err;

	slots = env_pow2("MEMPROF_RING_SLOTS", DEFAULT_SLOTS, 64, 1u << 20);
	r.nthreads = env_pow2("MEMPROF_RING_THREADS", DEFAULT_THREADS, 1, MP_RING_MAX_THREADS);
	while ((uint64_t)slots * r.nthreads > MP_RING_MAX_SLOTS)
		slots /= 2;
	r.str_max = DEFAULT_STRINGS;
	r.blob_size = DEFAULT_BLOB;
	r.mask = slots - 1;
	r.heap_mask = r.mask - MARKER_RESERVE(slots);

	l = mp_ring_layout_of(slots, r.nthreads, r.str_max, r.blob_size);
	r.size = align_up(l.end, 4096);

	r.fd = memfd_create(MP_RING_MEMFD_NAME, MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (r.fd < 0)
		return -errno;
	if (ftruncate(r.fd, (off_t)r.size) < 0)
		goto fail_errno;
	/* The consumer maps this memory: a shrink would make it fault. */
	if (fcntl(r.fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0)
		goto fail_errno;
	p = mmap(NULL, r.size, PROT_READ | PROT_WRITE, MAP_SHARED, r.fd, 0);
	if (p == MAP_FAILED)
		goto fail_errno;
	r.hdr = h = p;
	r.slots = (struct mp_slot *)((char *)p + l.ring_off);
	r.threads = (struct mp_thread *)((char *)p + l.threads_off);
	r.strent = (mp_strent *)((char *)p + l.strent_off);
	r.blob = (char *)p + l.blob_off;

	hash_size = r.str_max * 2;
	hash_off = align_up((size_t)r.nthreads * sizeof(struct thread_priv), 64);
	r.priv_size = align_up(hash_off + (size_t)hash_size * sizeof(uint32_t), 4096);
	p = mmap(NULL, r.priv_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED) {
		p = NULL;
		goto fail_errno;
	}
	r.priv_map = p;
	r.priv = p;
	r.hash = (uint32_t *)((char *)p + hash_off);
	r.hash_mask = hash_size - 1;

	/* Fresh memfd pages are zero: no slot published, every thread slot
	 * free, every string entry unpublished. */
	h->abi_version = MP_RING_ABI_VERSION;
	h->hdr_size = sizeof(*h);
	h->total_size = r.size;
	h->creator_pid = (uint32_t)getpid();
	h->slot_size = sizeof(struct mp_slot);
	h->slot_count = slots;
	h->thread_size = sizeof(struct mp_thread);
	h->thread_count = r.nthreads;
	h->str_max = r.str_max;
	h->blob_size = r.blob_size;
	h->ring_off = l.ring_off;
	h->threads_off = l.threads_off;
	h->strent_off = l.strent_off;
	h->blob_off = l.blob_off;
	h->alloc_tls_off = mp_interpose_tls_off();
	g_heap_clock = heap_clock_choose();
	/* id 0 names whatever could not be interned */
	memcpy(r.blob, "?", 2);
	h->blob_used = 2;
	h->str_count = 1;
	r.strent[0] = 2;
	STORE(&h->magic, MP_RING_MAGIC, RELEASE);
	g = r;
	STORE(&mp_alloc_hdr, h, RELEASE);
	return 0;

fail_errno:
	err = -errno;
	ring_unmap(&r);
	return err;
}

static void atfork_child(void)
{
	/* Only the forking thread exists here. The parent's ring is still
	 * mapped MAP_SHARED: drop it without touching it, the parent owns it. */
	mp_alloc_hdr = &dormant_hdr;
	mp_fork_gen++;
	if (g_state == ST_READY)
		ring_unmap(&g);
	memset(&tls, 0, sizeof(tls));
	g_err = 0;
	STORE(&g_state, ST_NONE, RELEASE);
}

static void thread_exit(void *arg);

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ volatile("yield");
#endif
}

static int ensure_ring(void)
{
	int s = LOAD(&g_state, ACQUIRE);
	int r;

	if (likely(s == ST_READY))
		return 0;
	if (s == ST_NONE && __atomic_compare_exchange_n(&g_state, &s, ST_INIT, false,
							__ATOMIC_ACQUIRE, __ATOMIC_ACQUIRE)) {
		if (!g_atfork_done) {
			if (pthread_atfork(NULL, NULL, atfork_child) == 0)
				g_atfork_done = true;
			g_key_ok = pthread_key_create(&g_key, thread_exit) == 0;
		}
		r = g_atfork_done ? ring_create() : -ENOMEM;
		if (r < 0) {
			g_err = r;
			STORE(&g_state, ST_FAILED, RELEASE);
			return r;
		}
		STORE(&g_state, ST_READY, RELEASE);
		return 0;
	}
	/* Another thread is creating the ring (a first marker only): wait a
	 * bounded time, never forever. */
	for (int i = 0; i < 200000; i++) {
		s = LOAD(&g_state, ACQUIRE);
		if (s == ST_READY)
			return 0;
		if (s == ST_FAILED)
			return g_err;
		cpu_relax();
	}
	return -EAGAIN;
}

static int thread_init_inner(struct tls *t);

/* A thread's first marker: the only one allowed syscalls. The caller's errno
 * is left as it was. */
static __attribute__((noinline)) int thread_init(struct tls *t)
{
	int saved = errno;
	int r = thread_init_inner(t);

	errno = saved;
	return r;
}

static int thread_init_inner(struct tls *t)
{
	struct mp_thread *thr = NULL;
	uint32_t i;
	uint64_t gen;
	int r;

	if (t->dead)
		return -ESRCH;
	r = ensure_ring();
	if (r < 0)
		return r;
	if (t->noslot)
		goto noslot;
	for (i = 0; i < g.nthreads; i++) {
		uint32_t free_state = 0;

		if (LOAD(&g.threads[i].state, RELAXED))
			continue;
		if (__atomic_compare_exchange_n(&g.threads[i].state, &free_state, 1, false,
						__ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
			thr = &g.threads[i];
			break;
		}
	}
	if (!thr) {
		t->noslot = 1;
		goto noslot;
	}
	/* gen continues from the previous owner so that (slot, tseq) never
	 * repeats and a late consumer's de-duplication stays exact. */
	gen = (LOAD(&thr->gen, RELAXED) + 1) & ~1ull;
	STORE(&thr->gen, gen + 1, RELAXED);
	atomic_thread_fence(memory_order_release);
	STORE(&thr->tid, (uint32_t)gettid(), RELAXED);
	STORE(&thr->depth, 0, RELAXED);
	STORE(&thr->tag_depth, 0, RELAXED);
	gen += 2;
	STORE(&thr->gen, gen, RELEASE);

	t->tid = thr->tid;
	t->idx = (uint16_t)i;
	t->ring = g.slots + (size_t)i * (g.mask + 1);
	/* continue after whatever the previous owner left unread */
	t->head = LOAD(&thr->head, RELAXED);
	t->tail = LOAD(&thr->tail, ACQUIRE);
	t->gen = gen;
	t->depth = 0;
	t->tag_depth = 0;
	t->priv = &g.priv[i];
	t->thr = thr;
	if (g_key_ok)
		pthread_setspecific(g_key, t);
	return 0;

noslot:
	/* Every marker of a thread that got no slot is a lost record. */
	if (LOAD(&g.hdr->attached, RELAXED))
		__atomic_fetch_add(&g.hdr->drops, 1, __ATOMIC_RELAXED);
	return -ENOSPC;
}

/* Appends one record to the calling thread's own ring: a single producer,
 * so no atomic read-modify-write, only a release store to publish. */
static __attribute__((noinline)) int ring_put(struct tls *t, uint8_t type, uint8_t flags,
					      uint32_t name_id, uint64_t ts, const int64_t *dims,
					      int rank)
{
	uint64_t pos = t->head;
	struct mp_slot *s;

	/* Full when pos is a whole ring ahead of the consumer. The cached
	 * tail only lags, so it can only say "full" wrongly; then the real
	 * one is read (once per lap, not per record). */
	if (unlikely(pos - t->tail > g.mask)) {
		t->tail = LOAD(&t->thr->tail, ACQUIRE);
		if (pos - t->tail > g.mask) {
			__atomic_fetch_add(&g.hdr->drops, 1, __ATOMIC_RELAXED);
			return -ENOSPC;
		}
	}
	/* An allocator call from a signal handler must not write into the
	 * slot this record is filling (ring_writer.h). */
	t->busy = 1;
	atomic_signal_fence(memory_order_seq_cst);
	s = &t->ring[pos & g.mask];
	s->ts_ns = ts;
	s->type = type;
	s->flags = flags;
	s->rank = (uint8_t)rank;
	s->tid = t->tid;
	s->tseq = (uint32_t)(t->gen >> 1);
	s->name_id = name_id;
	if (rank > 0)
		memcpy(s->dims, dims, (size_t)rank * sizeof(*dims));
	STORE(&s->seq, pos + 1, RELEASE);
	t->head = pos + 1;
	STORE(&t->thr->head, pos + 1, RELAXED);
	atomic_signal_fence(memory_order_seq_cst);
	t->busy = 0;
	return 0;
}

/* Bounded wait of a precise-mode heap record for ring space (heapprofd's
 * block_client model), at most WAIT_MAX_NS in all, by the clock (1 s: the
 * bound used to count 5,000 sleeps of a nominal 20 us, which took 0.35 s
 * to seconds; a true 100 ms dropped records of the exactness tests at
 * load 12, the daemon being off the CPU that long):
 * - spin WAIT_SPINS times: a daemon that is draining gives space back
 *   every 256 records it reads, some 10-20 us apart;
 * - then yield the CPU (sched_yield) until WAIT_YIELD_NS have passed: on
 *   a loaded machine the daemon may be waiting for this very CPU, and a
 *   daemon between two ticks (0.5 ms apart while records come) is back
 *   within that time; a sleep would oversleep it (a 20 us nanosleep takes
 *   70-250 us in a VM: the timer slack is 50 us);
 * - then sleep in WAIT_SLEEP_NS steps (a daemon that has backed off to a
 *   slower tick, or a stalled one).
 * A thread whose wait timed out drops at once until the consumer moves
 * again, so a stalled consumer costs one timeout, not one per record. */
#define WAIT_SPINS 1024
#define WAIT_YIELD_NS (500 * 1000ull)
#define WAIT_SLEEP_NS (20 * 1000)
#define WAIT_MAX_NS (1000 * 1000 * 1000ull)

/* Records ahead of the writer whose slot mp_ring_write() prefetches. */
#define RING_PREFETCH 8

static bool ring_wait_inner(struct tls *t, uint64_t pos)
{
	uint64_t t0 = 0;

	__atomic_fetch_add(&g.hdr->alloc_waits, 1, __ATOMIC_RELAXED);
	for (unsigned i = 0;; i++) {
		if (i < WAIT_SPINS) {
			cpu_relax();
		} else {
			uint64_t now = now_ns(), spent;

			if (!t0)
				t0 = now;
			spent = now - t0;
			if (spent >= WAIT_MAX_NS) {
				t->gave_up = 1;
				return false;
			}
			if (spent < WAIT_YIELD_NS) {
				sched_yield();
			} else {
				struct timespec ts = { .tv_nsec = WAIT_SLEEP_NS };

				nanosleep(&ts, NULL);
			}
		}
		/* a consumer that detaches turns the interposer off */
		if (!LOAD(&g.hdr->alloc_mode, RELAXED))
			return false;
		t->tail = LOAD(&t->thr->tail, ACQUIRE);
		if (pos - t->tail <= g.heap_mask)
			return true;
	}
}

static bool ring_wait(struct tls *t, uint64_t pos)
{
	int saved;
	bool r;

	if (t->gave_up)
		return false;
	/* nanosleep and sched_yield may set errno: the interposer's caller
	 * must not see it (the record path leaves errno alone, interpose.c) */
	saved = errno;
	r = ring_wait_inner(t, pos);
	errno = saved;
	return r;
}

/* @in_drops: not yet counted in drops (a thread without a slot was). */
static void count_alloc_drop(bool in_drops)
{
	if (LOAD(&g_state, ACQUIRE) != ST_READY)
		return;
	if (in_drops)
		__atomic_fetch_add(&g.hdr->drops, 1, __ATOMIC_RELAXED);
	__atomic_fetch_add(&g.hdr->alloc_drops, 1, __ATOMIC_RELAXED);
}

MP_HIDDEN void mp_ring_count_alloc_drop(void)
{
	count_alloc_drop(true);
}

/* Fills a heap or STACK record's slot but its seq: the caller publishes
 * it. Inlined: a call here would cost the allocation path a frame. */
static inline __attribute__((always_inline)) void slot_fill(struct mp_slot *s, const struct tls *t,
							    uint64_t ts, uint8_t type,
							    uint8_t flags, uint32_t name_id,
							    const uint64_t *w, unsigned nw)
{
	s->ts_ns = ts;
	s->type = type;
	s->flags = flags;
	s->rank = 0;
	/* the clock of ts (heap records' only; a STACK record's is unread) */
	s->clock = g_heap_clock;
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
static __attribute__((noinline, cold)) void ring_populate(struct tls *t, uint64_t first,
							  uint64_t last)
{
	struct thread_priv *pv = t->priv;
	/* the slots before @first were written: mapped already */
	uint64_t slots = g.mask + 1, from = pv->populated > first ? pv->populated : first, to,
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
	struct tls *t = &tls;
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
		r = thread_init(t);
		if (r < 0)
			goto drop;
	}
	/* before the stamp: a record is published within microseconds of
	 * its stamp (docs/RING.md "Consumer: how far the rings have been
	 * read") */
	if (unlikely(t->head >= t->populate_at))
		ring_populate(t, t->head, t->head);
	ts = heap_ts();
	pos = t->head;
	if (unlikely(pos - t->tail > g.heap_mask)) {
		uint64_t tail = LOAD(&t->thr->tail, ACQUIRE);

		if (tail != t->tail)
			t->gave_up = 0;
		t->tail = tail;
		if (pos - t->tail > g.heap_mask && (wait == MP_RW_NOWAIT || !ring_wait(t, pos))) {
			r = -ENOSPC;
			goto drop;
		}
	}
	s = &t->ring[pos & g.mask];
	slot_fill(s, t, ts, type, flags, name_id, w, nw);
	STORE(&s->seq, pos + 1, RELEASE);
	t->head = pos + 1;
	STORE(&t->thr->head, pos + 1, RELAXED);
	/* The slot a few records on, for writing: its line was last in the
	 * consumer's cache (or nowhere), and the miss of the first store
	 * into a slot was a fifth of this function. */
	__builtin_prefetch(&t->ring[(pos + RING_PREFETCH) & g.mask], 1);
	atomic_signal_fence(memory_order_seq_cst);
	t->busy = 0;
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

MP_HIDDEN int mp_ring_write_stacked(uint8_t type, uint8_t flags, uint32_t name_id,
				    const uint64_t *w, unsigned nw, enum mp_rw_wait wait,
				    const uint64_t regs[3], const void *stack, uint32_t len)
{
	uint32_t k = (len + MP_STACK_SLOT_BYTES - 1) / MP_STACK_SLOT_BYTES;
	const unsigned char *src = stack;
	struct tls *t = &tls;
	struct mp_slot *s;
	const uint64_t sw[4] = { regs[0], regs[1], regs[2], len };
	uint64_t pos, last, ts;

	if (len > MP_RING_STACK_MAX || unlikely(t->busy))
		return mp_ring_write(type, flags, name_id, w, nw, wait);
	t->busy = 1;
	atomic_signal_fence(memory_order_seq_cst);
	if (unlikely(!t->thr) && thread_init(t) < 0) {
		t->busy = 0;
		return mp_ring_write(type, flags, name_id, w, nw, wait);
	}
	if (k + 2 > g.heap_mask + 1) {
		t->busy = 0;
		return mp_ring_write(type, flags, name_id, w, nw, wait);
	}
	pos = t->head;
	last = pos + k + 1; /* the heap record's position */
	if (last - t->tail > g.heap_mask) {
		uint64_t tail = LOAD(&t->thr->tail, ACQUIRE);

		if (tail != t->tail)
			t->gave_up = 0;
		t->tail = tail;
		if (last - t->tail > g.heap_mask && (wait == MP_RW_NOWAIT || !ring_wait(t, last))) {
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
	/* The continuation slots and the heap record first, the STACK
	 * record's seq last: a consumer that sees it sees them all. */
	for (uint32_t j = 0; j < k; j++) {
		uint32_t n = len - j * MP_STACK_SLOT_BYTES;

		s = &t->ring[(pos + 1 + j) & g.mask];
		copy_bytes((unsigned char *)s + sizeof(s->seq),
			   src + (size_t)j * MP_STACK_SLOT_BYTES,
			   n < MP_STACK_SLOT_BYTES ? n : MP_STACK_SLOT_BYTES);
		STORE(&s->seq, pos + 2 + j, RELAXED);
	}
	s = &t->ring[last & g.mask];
	slot_fill(s, t, ts, type, flags, name_id, w, nw);
	STORE(&s->seq, last + 1, RELEASE);
	s = &t->ring[pos & g.mask];
	slot_fill(s, t, ts, MP_REC_STACK, 0, 0, sw, 4);
	STORE(&s->seq, pos + 1, RELEASE);
	t->head = last + 1;
	STORE(&t->thr->head, last + 1, RELAXED);
	atomic_signal_fence(memory_order_seq_cst);
	t->busy = 0;
	return 0;
}

/* The aligned word at @a, which holds at least one byte of the caller's
 * string: it never crosses a page, so it is mapped whatever follows the
 * string's NUL. In asm, because the bytes past the NUL are outside the
 * string as far as a sanitizer knows. */
static inline uint64_t load_word(uintptr_t a)
{
	uint64_t v;

	__asm__ volatile("movq (%1), %0" : "=r"(v) : "r"(a));
	return v;
}

/* Fills e->w and e->m from the interned bytes of the entry's name (the
 * name at ptr when it was interned), or clears e->m. */
static void word_key(struct cache_ent *e, const char *name, bool trunc)
{
	size_t off = (uintptr_t)name & 7;
	unsigned char w[16] = { 0 }, m[16] = { 0 };

	e->m[0] = e->m[1] = 0;
#if defined(__x86_64__)
	if (trunc || off + e->len + 1 > sizeof(w))
		return;
	memcpy(w + off, e->str, e->len);
	memset(m + off, 0xff, e->len + 1);
	memcpy(e->w, w, sizeof(w));
	memcpy(e->m, m, sizeof(m));
#else
	(void)off;
	(void)w;
	(void)m;
	(void)trunc;
#endif
}

HOT bool name_matches(const char *name, const struct cache_ent *e)
{
	uint32_t n = e->len > MP_NAME_MAX ? MP_NAME_MAX : e->len;

	/* A short name, a word at a time: the bytes of the words outside the
	 * name and its NUL are masked off (the cache key ptr == name gives
	 * the words the same alignment as when the entry was made). */
	if (likely(e->m[0])) {
		uintptr_t a = (uintptr_t)name & ~(uintptr_t)7;
		uint64_t d = (load_word(a) ^ e->w[0]) & e->m[0];

		/* the second word only when the name reaches it */
		if (e->m[1])
			d |= (load_word(a + 8) ^ e->w[1]) & e->m[1];
		return d == 0;
	}
	/* Byte by byte, stopping at the first difference: never reads past
	 * the caller's NUL. */
	for (uint32_t i = 0; i < n; i++)
		if (name[i] != e->str[i])
			return false;
	return e->len > MP_NAME_MAX || name[n] == '\0';
}

static uint32_t fnv1a(const char *s, uint32_t len)
{
	uint32_t h = 2166136261u;

	for (uint32_t i = 0; i < len; i++)
		h = (h ^ (uint8_t)s[i]) * 16777619u;
	return h;
}

static __attribute__((noinline)) uint32_t intern_slow(const char *name, struct cache_ent *e)
{
	uint32_t len = (uint32_t)strnlen(name, MP_NAME_MAX);
	bool trunc = len == MP_NAME_MAX && name[len] != '\0';
	uint32_t h = fnv1a(name, len);
	uint32_t new_id = 0, id = 0;

	for (uint32_t probe = 0; probe <= g.hash_mask; probe++) {
		uint32_t *b = &g.hash[(h + probe) & g.hash_mask];
		uint32_t v = LOAD(b, ACQUIRE);
		uint32_t slen;
		const char *s;

		if (!v) {
			if (!new_id)
				new_id = string_add(name, len);
			if (!new_id)
				return 0;
			if (__atomic_compare_exchange_n(b, &v, new_id, false, __ATOMIC_ACQ_REL,
							__ATOMIC_ACQUIRE)) {
				id = new_id;
				break;
			}
		}
		s = string_get(v, &slen);
		if (slen == len && !memcmp(s, name, len)) {
			/* a racing thread interned it first; new_id is wasted */
			id = v;
			break;
		}
	}
	if (!id)
		return 0;
	/* A signal handler's marker may look at this entry meanwhile: it
	 * misses until the entry is whole. */
	e->ptr = NULL;
	atomic_signal_fence(memory_order_seq_cst);
	e->id = id;
	e->len = trunc ? MP_NAME_MAX + 1 : len;
	e->str = string_get(id, &len);
	word_key(e, name, trunc);
	atomic_signal_fence(memory_order_seq_cst);
	e->ptr = name;
	return id;
}

/* Pointer-keyed cache, confirmed by comparing the bytes: a name buffer that
 * is reused for another string at the same address is detected (it just
 * takes the slow path). */
HOT uint32_t intern(const struct tls *t, const char *name)
{
	uintptr_t p = (uintptr_t)name;
	struct cache_ent *e = &t->priv->cache[(p ^ (p >> 7)) & (CACHE_SIZE - 1)];

	if (likely(e->ptr == name) && likely(name_matches(name, e)))
		return e->id;
	return intern_slow(name, e);
}

HOT struct tls *tls_get(int *ret_err)
{
	struct tls *t = &tls;

	if (unlikely(!t->thr)) {
		*ret_err = thread_init(t);
		if (*ret_err < 0)
			return NULL;
	}
	return t;
}

HOT void gen_begin(struct tls *t)
{
	STORE(&t->thr->gen, t->gen + 1, RELAXED);
	atomic_thread_fence(memory_order_release);
}

HOT void gen_end(struct tls *t)
{
	t->gen += 2;
	STORE(&t->thr->gen, t->gen, RELEASE);
	/* The attached flag must be read after the new gen is stored (the
	 * consumer's membarrier pairs with this program order): keep the
	 * compiler from hoisting the load. */
	atomic_signal_fence(memory_order_seq_cst);
}

HOT bool attached(void)
{
	return LOAD(&g.hdr->attached, RELAXED) != 0;
}

HOT int push(struct tls *t, bool tag, uint8_t type, const char *name)
{
	struct mp_frame *f;
	uint32_t id, d;
	uint64_t ts;
	bool att;

	id = intern(t, name);
	att = attached();
	ts = att ? now_ns() : 0;
	d = tag ? t->tag_depth : t->depth;
	gen_begin(t);
	if (likely(d < (tag ? MP_TSTACK_MAX : MP_KSTACK_MAX))) {
		f = tag ? &t->thr->tags[d] : &t->thr->kernels[d];
		STORE(&f->name_id, id, RELAXED);
		STORE(&f->ts_ns, ts, RELAXED);
	}
	if (tag) {
		t->tag_depth = d + 1;
		STORE(&t->thr->tag_depth, d + 1, RELAXED);
	} else {
		t->depth = d + 1;
		STORE(&t->thr->depth, d + 1, RELAXED);
	}
	gen_end(t);
	if (likely(!attached()))
		return 0;
	return ring_put(t, type, 0, id, ts ? ts : now_ns(), NULL, 0);
}

HOT int pop(struct tls *t, bool tag, uint8_t type, uint8_t flags)
{
	uint32_t d = tag ? t->tag_depth : t->depth;
	uint32_t id = 0;
	uint64_t ts;

	if (unlikely(!d))
		return -EINVAL;
	ts = attached() ? now_ns() : 0;
	d--;
	if (d < (tag ? MP_TSTACK_MAX : MP_KSTACK_MAX))
		id = tag ? t->thr->tags[d].name_id : t->thr->kernels[d].name_id;
	gen_begin(t);
	if (tag) {
		t->tag_depth = d;
		STORE(&t->thr->tag_depth, d, RELAXED);
	} else {
		t->depth = d;
		STORE(&t->thr->depth, d, RELAXED);
	}
	gen_end(t);
	if (likely(!attached()))
		return 0;
	return ring_put(t, type, flags, id, ts ? ts : now_ns(), NULL, 0);
}

/* Thread exit: close what the thread left open (the consumer sees END
 * records flagged MP_REC_F_THREAD_EXIT) and give the slot back. */
static void thread_exit(void *arg)
{
	struct tls *t = &tls;

	(void)arg;
	if (!t->thr || t->dead)
		return;
	while (t->tag_depth)
		pop(t, true, MP_REC_TAG_END, MP_REC_F_THREAD_EXIT);
	while (t->depth)
		pop(t, false, MP_REC_KERNEL_END, MP_REC_F_THREAD_EXIT);
	STORE(&t->thr->state, 0, RELEASE);
	t->thr = NULL;
	t->dead = 1;
}

/* The ring exists from load time on, so a profiler that stops the process
 * before main (memprof run) or attaches before the first marker finds it at
 * once and its own mappings are not mistaken for allocations of the
 * program. MEMPROF_RING_LAZY=1 defers it to the first marker (a process
 * that never marks then pays nothing); creation on first use also covers a
 * failure here. */
__attribute__((constructor)) static void memprof_load(void)
{
	const char *lazy = getenv("MEMPROF_RING_LAZY");

	if (lazy && lazy[0] == '1')
		return;
	(void)ensure_ring();
}

MEMPROF_API int memprof_kernel_begin(const char *name)
{
	struct tls *t;
	int r;

	if (unlikely(!name))
		return -EINVAL;
	t = tls_get(&r);
	if (unlikely(!t))
		return r;
	return push(t, false, MP_REC_KERNEL_BEGIN, name);
}

MEMPROF_API int memprof_kernel_end(void)
{
	struct tls *t;
	int r;

	t = tls_get(&r);
	if (unlikely(!t))
		return r;
	return pop(t, false, MP_REC_KERNEL_END, 0);
}

MEMPROF_API int memprof_tag_begin(const char *tag)
{
	struct tls *t;
	int r;

	if (unlikely(!tag))
		return -EINVAL;
	t = tls_get(&r);
	if (unlikely(!t))
		return r;
	return push(t, true, MP_REC_TAG_BEGIN, tag);
}

MEMPROF_API int memprof_tag_end(void)
{
	struct tls *t;
	int r;

	t = tls_get(&r);
	if (unlikely(!t))
		return r;
	return pop(t, true, MP_REC_TAG_END, 0);
}

static int shape(uint8_t type, const int64_t *dims, int rank)
{
	struct tls *t;
	int r;

	if (rank < 0 || (rank > 0 && !dims))
		return -EINVAL;
	if (rank > MEMPROF_MAX_RANK)
		return -E2BIG;
	t = tls_get(&r);
	if (unlikely(!t))
		return r;
	if (!t->depth)
		return -EINVAL;
	/* No stack change, but the record still needs its own tseq so a late
	 * consumer drops shapes of kernels that ended before it attached. */
	gen_begin(t);
	gen_end(t);
	if (!attached())
		return 0;
	return ring_put(t, type, 0, 0, now_ns(), dims, rank);
}

MEMPROF_API int memprof_kernel_input_shape(const int64_t *dims, int rank)
{
	return shape(MP_REC_INPUT_SHAPE, dims, rank);
}

MEMPROF_API int memprof_kernel_output_shape(const int64_t *dims, int rank)
{
	return shape(MP_REC_OUTPUT_SHAPE, dims, rank);
}

MEMPROF_API int memprof_phase(const char *name)
{
	struct tls *t;
	uint64_t ts, order;
	uint32_t id;
	int r;

	if (!name)
		return -EINVAL;
	t = tls_get(&r);
	if (unlikely(!t))
		return r;
	id = intern(t, name);
	/* Phases are rare: always timestamp them so a late consumer gets the
	 * real start of the current phase. */
	ts = now_ns();
	order = __atomic_add_fetch(&g.hdr->phase_order, 1, __ATOMIC_RELAXED);
	gen_begin(t);
	STORE(&t->thr->phase_id, id, RELAXED);
	STORE(&t->thr->phase_ts, ts, RELAXED);
	STORE(&t->thr->phase_order, order, RELAXED);
	gen_end(t);
	if (!attached())
		return 0;
	return ring_put(t, MP_REC_PHASE, 0, id, ts, NULL, 0);
}

int mp__intern(const char *name, uint32_t *ret_id)
{
	struct tls *t;
	int r;

	t = tls_get(&r);
	if (unlikely(!t))
		return r;
	*ret_id = intern(t, name);
	return 0;
}

int mp__ring_record(uint8_t type, uint32_t name_id, const int64_t *words, int n)
{
	struct tls *t;
	int r;

	t = tls_get(&r);
	if (unlikely(!t))
		return r;
	/* A fresh record number, as for shapes: a consumer attaching now
	 * must not take this record for one its snapshot already holds. */
	gen_begin(t);
	gen_end(t);
	if (likely(!attached()))
		return 0;
	return ring_put(t, type, 0, name_id, now_ns(), words, n);
}

MEMPROF_API uint64_t memprof_dropped(void)
{
	if (LOAD(&g_state, ACQUIRE) != ST_READY)
		return 0;
	return LOAD(&g.hdr->drops, RELAXED);
}

MEMPROF_API const char *memprof_version(void)
{
#define STR2(x) #x
#define STR(x) STR2(x)
	return STR(MEMPROF_VERSION_MAJOR) "." STR(MEMPROF_VERSION_MINOR) "." STR(
		MEMPROF_VERSION_PATCH);
}

MEMPROF_API const char *memprof_strerror(int err)
{
	switch (err < 0 ? -err : err) {
	case 0:
		return "success";
	case ENOSPC:
		return "ring full, record dropped and counted";
	case EINVAL:
		return "invalid argument or no open kernel/tag";
	case E2BIG:
		return "shape rank larger than MEMPROF_MAX_RANK";
	case ENOMEM:
		return "out of memory creating the ring";
	case EMFILE:
	case ENFILE:
		return "too many open files to create the ring";
	case EAGAIN:
		return "ring still being created by another thread";
	case ESRCH:
		return "marker after the thread released its slot";
	case ENOSYS:
		return "memfd_create not supported";
	default:
		return "unknown error";
	}
}
