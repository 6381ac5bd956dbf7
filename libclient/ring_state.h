/* SPDX-License-Identifier: MIT */
/*
 * Internal to libmemprof: the ring writer's process and thread state
 * (ring.c), and the parts of the marker path that work on it, inline so
 * that a marker calls nothing out of line until it writes a record. Used
 * by the ring writer itself (ring.c, heap_writer.c) and by the markers
 * (memprof.c); the other producers go through ring_writer.h.
 */
#ifndef MEMPROF_RING_STATE_H
#define MEMPROF_RING_STATE_H

#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "local_unwind.h"
#include "ring_abi.h"
#include "ring_writer.h"

#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)
#define HOT static inline __attribute__((always_inline))

#define LOAD(p, mo) __atomic_load_n((p), __ATOMIC_##mo)
#define STORE(p, v, mo) __atomic_store_n((p), (v), __ATOMIC_##mo)

#define CACHE_SIZE 64u

/* Values of mp_rw_state: the ring of this process. */
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
	/* The in-process unwinder's memo of this thread's last walk (a
	 * thread taking the slot over starts from it: the walk checks every
	 * stack word it replays). */
	struct mp_unwind_memo unwind_memo;
};

/* The ring of this process (ring.c ring_create()). */
struct mp_rw {
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

/* initial-exec: no __tls_get_addr (which may allocate for dlopened
 * libraries) on the marker path. Small on purpose: static TLS surplus is
 * limited when the library is dlopened. */
struct mp_rw_tls {
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

extern MP_HIDDEN struct mp_rw mp_rw;

/* The doorbell rung (ring.c): the consumer sleeps on it. */
MP_HIDDEN void mp_rw_bell_ring(void);

/* After a record is published: one load and a branch while the consumer
 * polls; a sleeping consumer is woken (docs/RING.md "Doorbell"). */
static inline void mp_rw_bell(void)
{
	if (unlikely(LOAD(&mp_rw.hdr->bell, RELAXED) == MP_BELL_ARMED))
		mp_rw_bell_ring();
}
extern MP_HIDDEN int mp_rw_state;
/* enum mp_ts_clock of heap records, chosen once at ring creation. */
extern MP_HIDDEN uint8_t mp_rw_heap_clock;
extern MP_HIDDEN __thread struct mp_rw_tls mp_rw_tls __attribute__((tls_model("initial-exec")));

/* A thread's first record: the only one allowed syscalls (it takes a
 * thread slot, and creates the ring if need be). The caller's errno is
 * left as it was. 0 or a negative errno. */
MP_HIDDEN __attribute__((noinline)) int mp_rw_thread_init(struct mp_rw_tls *t);

/* Appends one marker record to the calling thread's own ring; -ENOSPC
 * (counted) when it is full. */
MP_HIDDEN __attribute__((noinline)) int mp_rw_put(struct mp_rw_tls *t, uint8_t type, uint8_t flags,
						  uint32_t name_id, uint64_t ts,
						  const int64_t *dims, int rank);

/* The string id of @name, not found in the thread's cache entry @e, which
 * it fills; 0 when the string table is full. */
MP_HIDDEN __attribute__((noinline)) uint32_t mp_rw_intern_slow(const char *name,
							       struct cache_ent *e);

HOT uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ volatile("yield");
#endif
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

/* Pointer-keyed cache, confirmed by comparing the bytes: a name buffer that
 * is reused for another string at the same address is detected (it just
 * takes the slow path). */
HOT uint32_t intern(const struct mp_rw_tls *t, const char *name)
{
	uintptr_t p = (uintptr_t)name;
	struct cache_ent *e = &t->priv->cache[(p ^ (p >> 7)) & (CACHE_SIZE - 1)];

	if (likely(e->ptr == name) && likely(name_matches(name, e)))
		return e->id;
	return mp_rw_intern_slow(name, e);
}

HOT struct mp_rw_tls *tls_get(int *ret_err)
{
	struct mp_rw_tls *t = &mp_rw_tls;

	if (unlikely(!t->thr)) {
		*ret_err = mp_rw_thread_init(t);
		if (*ret_err < 0)
			return NULL;
	}
	return t;
}

HOT void gen_begin(struct mp_rw_tls *t)
{
	STORE(&t->thr->gen, t->gen + 1, RELAXED);
	atomic_thread_fence(memory_order_release);
}

HOT void gen_end(struct mp_rw_tls *t)
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
	return LOAD(&mp_rw.hdr->attached, RELAXED) != 0;
}

/* The open kernels and tags of the thread slot, in shared memory for a
 * late consumer. Here rather than with the markers: a thread's exit
 * (ring.c) pops what the thread left open. */
HOT int push(struct mp_rw_tls *t, bool tag, uint8_t type, const char *name)
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
	return mp_rw_put(t, type, 0, id, ts ? ts : now_ns(), NULL, 0);
}

HOT int pop(struct mp_rw_tls *t, bool tag, uint8_t type, uint8_t flags)
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
	return mp_rw_put(t, type, flags, id, ts ? ts : now_ns(), NULL, 0);
}

#endif /* MEMPROF_RING_STATE_H */
