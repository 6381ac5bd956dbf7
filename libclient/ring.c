/* SPDX-License-Identifier: MIT */
/*
 * The bottom of libmemprof: the shared-memory ring that memprofd reads
 * (docs/RING.md explains the layout and the memory ordering). Its creation
 * (at load time, at the first marker, again after fork), the thread slots
 * (taken at a thread's first record, given back at its exit), the string
 * table and the writer of marker records. It calls nothing of the rest of
 * the library: the markers (memprof.c), pools (pool.c), the interposer
 * (interpose.c) and the heap record writer (heap_writer.c) call into it.
 * Comments here only say why a line is the way it is.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <linux/futex.h>
#include <linux/membarrier.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "ring_abi.h"
#include "ring_clock.h"
#include "expand.h"
#include "ring_state.h"
#include "ring_writer.h"

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
/* Kernel names and, with a Python extension registered, the names of the
 * Python code on call stacks (expand.h); address space, touched as used. */
#define DEFAULT_STRINGS 65536u
#define DEFAULT_BLOB (4u << 20)

MP_HIDDEN struct mp_rw mp_rw;
static const struct mp_ring_hdr dormant_hdr;
MP_HIDDEN const struct mp_ring_hdr *mp_alloc_hdr = &dormant_hdr;
MP_HIDDEN uint32_t mp_fork_gen;
MP_HIDDEN int mp_rw_state;
static int g_err;
MP_HIDDEN uint8_t mp_rw_heap_clock;
static pthread_key_t g_key;
static bool g_key_ok;
static bool g_atfork_done;
/* The ring was made at load (not MEMPROF_RING_LAZY): a forked child makes
 * its own at once too. */
static bool g_eager;
MP_HIDDEN __thread struct mp_rw_tls mp_rw_tls __attribute__((tls_model("initial-exec")));
MP_HIDDEN __thread struct mp_alloc_tls mp_alloc_tls __attribute__((tls_model("initial-exec")));

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

static void ring_unmap(struct mp_rw *r)
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
	struct mp_ring_hdr *h = mp_rw.hdr;
	uint32_t id, off;

	if (LOAD(&h->str_count, RELAXED) >= mp_rw.str_max)
		return 0;
	id = __atomic_fetch_add(&h->str_count, 1, __ATOMIC_RELAXED);
	if (id >= mp_rw.str_max)
		return 0;
	off = __atomic_fetch_add(&h->blob_used, len + 1, __ATOMIC_RELAXED);
	if (off > mp_rw.blob_size || len + 1 > mp_rw.blob_size - off)
		return 0;
	memcpy(mp_rw.blob + off, s, len);
	mp_rw.blob[off + len] = '\0';
	STORE(&mp_rw.strent[id], ((uint64_t)off << 32) | (len + 1), RELEASE);
	return id;
}

static const char *string_get(uint32_t id, uint32_t *ret_len)
{
	mp_strent e = LOAD(&mp_rw.strent[id], ACQUIRE);

	*ret_len = (uint32_t)e - 1;
	return mp_rw.blob + (e >> 32);
}

/* Registers this process for the consumer's expedited attach barrier;
 * whether it is. Not under a seccomp filter, which may kill a process for
 * a syscall it does not expect (a sandbox that allows memfd_create). */
static bool membarrier_registered(void)
{
	int saved = errno;
	bool ok = prctl(PR_GET_SECCOMP, 0, 0, 0, 0) == 0 &&
		  syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED, 0, 0) == 0;

	errno = saved;
	return ok;
}

static int ring_create(void)
{
	struct mp_rw r = { .fd = -1 };
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
	h->creator_flags =
		MP_RING_F_BELL | (membarrier_registered() ? MP_RING_F_MEMBARRIER_EXPEDITED : 0);
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
	/* where the interposer's in-allocator flag is in every thread */
	h->alloc_tls_off = (int64_t)((uintptr_t)&mp_alloc_tls.in_alloc -
				     (uintptr_t)__builtin_thread_pointer());
	mp_rw_heap_clock = heap_clock_choose();
	/* id 0 names whatever could not be interned */
	memcpy(r.blob, "?", 2);
	h->blob_used = 2;
	h->str_count = 1;
	r.strent[0] = 2;
	STORE(&h->magic, MP_RING_MAGIC, RELEASE);
	mp_rw = r;
	STORE(&mp_alloc_hdr, h, RELEASE);
	return 0;

fail_errno:
	err = -errno;
	ring_unmap(&r);
	return err;
}

static int ensure_ring(void);

static void atfork_child(void)
{
	/* Only the forking thread exists here. The parent's ring is still
	 * mapped MAP_SHARED: drop it without touching it, the parent owns it. */
	mp_alloc_hdr = &dormant_hdr;
	mp_fork_gen++;
	if (mp_rw_state == ST_READY)
		ring_unmap(&mp_rw);
	memset(&mp_rw_tls, 0, sizeof(mp_rw_tls));
	g_err = 0;
	STORE(&mp_rw_state, ST_NONE, RELEASE);
	/* As at load: a profiler attaching to the child (a preforked
	 * server's worker) finds its ring, though the child never marks;
	 * its allocations are dormant until then. */
	if (g_eager)
		(void)ensure_ring();
}

static void thread_exit(void *arg);

static int ensure_ring(void)
{
	int s = LOAD(&mp_rw_state, ACQUIRE);
	int r;

	if (likely(s == ST_READY))
		return 0;
	if (s == ST_NONE && __atomic_compare_exchange_n(&mp_rw_state, &s, ST_INIT, false,
							__ATOMIC_ACQUIRE, __ATOMIC_ACQUIRE)) {
		if (!g_atfork_done) {
			if (pthread_atfork(NULL, NULL, atfork_child) == 0)
				g_atfork_done = true;
			g_key_ok = pthread_key_create(&g_key, thread_exit) == 0;
		}
		r = g_atfork_done ? ring_create() : -ENOMEM;
		if (r < 0) {
			g_err = r;
			STORE(&mp_rw_state, ST_FAILED, RELEASE);
			return r;
		}
		STORE(&mp_rw_state, ST_READY, RELEASE);
		return 0;
	}
	/* Another thread is creating the ring (a first marker only): wait a
	 * bounded time, never forever. */
	for (int i = 0; i < 200000; i++) {
		s = LOAD(&mp_rw_state, ACQUIRE);
		if (s == ST_READY)
			return 0;
		if (s == ST_FAILED)
			return g_err;
		cpu_relax();
	}
	return -EAGAIN;
}

static int thread_init_inner(struct mp_rw_tls *t);

/* A thread's first marker: the only one allowed syscalls. The caller's errno
 * is left as it was. */
MP_HIDDEN int mp_rw_thread_init(struct mp_rw_tls *t)
{
	int saved = errno;
	int r = thread_init_inner(t);

	errno = saved;
	return r;
}

static int thread_init_inner(struct mp_rw_tls *t)
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
	for (i = 0; i < mp_rw.nthreads; i++) {
		uint32_t free_state = 0;

		if (LOAD(&mp_rw.threads[i].state, RELAXED))
			continue;
		if (__atomic_compare_exchange_n(&mp_rw.threads[i].state, &free_state, 1, false,
						__ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
			thr = &mp_rw.threads[i];
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
	t->ring = mp_rw.slots + (size_t)i * (mp_rw.mask + 1);
	/* continue after whatever the previous owner left unread */
	t->head = LOAD(&thr->head, RELAXED);
	t->tail = LOAD(&thr->tail, ACQUIRE);
	t->gen = gen;
	t->depth = 0;
	t->tag_depth = 0;
	t->priv = &mp_rw.priv[i];
	t->thr = thr;
	if (g_key_ok)
		pthread_setspecific(g_key, t);
	return 0;

noslot:
	/* Every marker of a thread that got no slot is a lost record. */
	if (LOAD(&mp_rw.hdr->attached, RELAXED))
		__atomic_fetch_add(&mp_rw.hdr->drops, 1, __ATOMIC_RELAXED);
	return -ENOSPC;
}

/* Appends one record to the calling thread's own ring: a single producer,
 * so no atomic read-modify-write, only a release store to publish. */
MP_HIDDEN int mp_rw_put(struct mp_rw_tls *t, uint8_t type, uint8_t flags, uint32_t name_id,
			uint64_t ts, const int64_t *dims, int rank)
{
	uint64_t pos = t->head;
	struct mp_slot *s;

	/* Full when pos is a whole ring ahead of the consumer. The cached
	 * tail only lags, so it can only say "full" wrongly; then the real
	 * one is read (once per lap, not per record). */
	if (unlikely(pos - t->tail > mp_rw.mask)) {
		t->tail = LOAD(&t->thr->tail, ACQUIRE);
		if (pos - t->tail > mp_rw.mask) {
			__atomic_fetch_add(&mp_rw.hdr->drops, 1, __ATOMIC_RELAXED);
			return -ENOSPC;
		}
	}
	/* An allocator call from a signal handler must not write into the
	 * slot this record is filling (ring_writer.h). */
	t->busy = 1;
	atomic_signal_fence(memory_order_seq_cst);
	s = &t->ring[pos & mp_rw.mask];
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
	mp_rw_bell();
	return 0;
}

/* The one producer that swaps the armed bell to quiet wakes the
 * consumer's waiter; errno is the caller's (an allocator call). */
MP_HIDDEN void mp_rw_bell_ring(void)
{
	int saved = errno;

	if (__atomic_exchange_n(&mp_rw.hdr->bell, MP_BELL_QUIET, __ATOMIC_SEQ_CST) == MP_BELL_ARMED)
		syscall(SYS_futex, &mp_rw.hdr->bell, FUTEX_WAKE, 1, NULL, NULL, 0);
	errno = saved;
}

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

static uint32_t fnv1a(const char *s, uint32_t len)
{
	uint32_t h = 2166136261u;

	for (uint32_t i = 0; i < len; i++)
		h = (h ^ (uint8_t)s[i]) * 16777619u;
	return h;
}

/* The id of @name (@len bytes) in the string table, added unless @add is
 * false; 0 when it is not there and cannot be. */
static uint32_t intern_probe(const char *name, uint32_t len, bool add)
{
	uint32_t h = fnv1a(name, len);
	uint32_t new_id = 0;

	for (uint32_t probe = 0; probe <= mp_rw.hash_mask; probe++) {
		uint32_t *b = &mp_rw.hash[(h + probe) & mp_rw.hash_mask];
		uint32_t v = LOAD(b, ACQUIRE);
		uint32_t slen;
		const char *s;

		if (!v) {
			if (!add)
				return 0;
			if (!new_id)
				new_id = string_add(name, len);
			if (!new_id)
				return 0;
			if (__atomic_compare_exchange_n(b, &v, new_id, false, __ATOMIC_ACQ_REL,
							__ATOMIC_ACQUIRE))
				return new_id;
		}
		s = string_get(v, &slen);
		/* a racing thread interned it first; new_id is wasted */
		if (slen == len && !memcmp(s, name, len))
			return v;
	}
	return 0;
}

MP_HIDDEN uint32_t mp_rw_intern_slow(const char *name, struct cache_ent *e)
{
	uint32_t len = (uint32_t)strnlen(name, MP_NAME_MAX);
	bool trunc = len == MP_NAME_MAX && name[len] != '\0';
	uint32_t id = intern_probe(name, len, true);

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

MP_EXPAND_API uint32_t memprof__intern(const char *s, uint32_t len)
{
	uint32_t id;

	if (LOAD(&mp_rw_state, ACQUIRE) != ST_READY || !s || !len || len > MP_NAME_MAX)
		return 0;
	/* a quarter of the table kept for the markers' names */
	id = intern_probe(s, len, LOAD(&mp_rw.hdr->str_count, RELAXED) < mp_rw.str_max / 4 * 3);
	return id;
}

/* Thread exit: close what the thread left open (the consumer sees END
 * records flagged MP_REC_F_THREAD_EXIT) and give the slot back. */
static void thread_exit(void *arg)
{
	struct mp_rw_tls *t = &mp_rw_tls;

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
	g_eager = true;
	(void)ensure_ring();
}

MP_HIDDEN int mp__intern(const char *name, uint32_t *ret_id)
{
	struct mp_rw_tls *t;
	int r;

	t = tls_get(&r);
	if (unlikely(!t))
		return r;
	*ret_id = intern(t, name);
	return 0;
}

MP_HIDDEN int mp__ring_record(uint8_t type, uint32_t name_id, const int64_t *words, int n)
{
	struct mp_rw_tls *t;
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
	return mp_rw_put(t, type, 0, name_id, now_ns(), words, n);
}
