/* SPDX-License-Identifier: MIT */
/*
 * The in-process allocation path: libmemprof defines the malloc family and
 * forwards every call to the next definition in lookup order (RTLD_NEXT:
 * glibc, jemalloc, tcmalloc, mimalloc...). Dormant until a profiler turns
 * it on through the ring header (one pointer load, one mode load and a
 * branch per call); then it writes ALLOC / FREE / REALLOC records into the
 * calling thread's marker ring, with the eBPF tracer's semantics
 * (docs/TRACER.md, "Two allocation paths").
 *
 * Rules: never allocate on our own behalf; no recursion through dlsym (it
 * may call calloc, served from a static bootstrap arena); record an
 * allocation after the allocator returned it and a free before the block is
 * released, so that a block's records are ordered with those of the thread
 * that gets the address next.
 */
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <sched.h>
#include <math.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "ring_abi.h"
#include "ring_writer.h"
#include "inject.h"
#include "local_unwind.h"
#include "stack_capture.h"

#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)
#define LOAD(p, mo) __atomic_load_n((p), __ATOMIC_##mo)
#define STORE(p, v, mo) __atomic_store_n((p), (v), __ATOMIC_##mo)
#define EXPORT __attribute__((visibility("default")))
#define CALLER ((uint64_t)(uintptr_t)__builtin_return_address(0))

/* enum mp_alloc_fn of daemon/sources/heap_event.h: the record's fn. */
enum {
	FN_MALLOC = 0,
	FN_CALLOC,
	FN_REALLOC,
	FN_REALLOCARRAY,
	FN_FREE,
	FN_POSIX_MEMALIGN,
	FN_ALIGNED_ALLOC,
	FN_MEMALIGN,
	FN_VALLOC,
	FN_PVALLOC,
};

/* ---- bootstrap: the next allocator, resolved on first use ---- */

static void *boot_malloc(size_t n);
static void boot_free(void *p);
static void *boot_calloc(size_t n, size_t m);
static void *boot_realloc(void *p, size_t n);

static struct {
	void *(*malloc)(size_t);
	void (*free)(void *);
	void *(*calloc)(size_t, size_t);
	void *(*realloc)(void *, size_t);
	void *(*reallocarray)(void *, size_t, size_t);
	int (*posix_memalign)(void **, size_t, size_t);
	void *(*aligned_alloc)(size_t, size_t);
	void *(*memalign)(size_t, size_t);
	void *(*valloc)(size_t);
	void *(*pvalloc)(size_t);
	size_t (*malloc_usable_size)(void *);
} next = {
	.malloc = boot_malloc,
	.free = boot_free,
	.calloc = boot_calloc,
	.realloc = boot_realloc,
};

/* dlsym and anything else that allocates before the next allocator is
 * known: a bump arena, never freed. Blocks carry their size just before
 * them (for realloc out of the arena). */
#define ARENA_SIZE (64u << 10)
static unsigned char arena[ARENA_SIZE] __attribute__((aligned(64)));
static size_t arena_used;

static bool in_arena(const void *p)
{
	return (uintptr_t)p - (uintptr_t)arena < sizeof(arena);
}

static void *arena_alloc(size_t n, size_t align)
{
	size_t off, cur;

	if (align < 16)
		align = 16;
	if (n > ARENA_SIZE || align > 4096)
		return NULL;
	cur = LOAD(&arena_used, RELAXED);
	do {
		off = (cur + 16 + align - 1) & ~(align - 1);
		if (off + n > ARENA_SIZE)
			return NULL;
	} while (!__atomic_compare_exchange_n(&arena_used, &cur, off + n, true, __ATOMIC_RELAXED,
					      __ATOMIC_RELAXED));
	memcpy(arena + off - sizeof(size_t), &n, sizeof(n));
	return arena + off;
}

static size_t arena_size(const void *p)
{
	size_t n;

	memcpy(&n, (const unsigned char *)p - sizeof(n), sizeof(n));
	return n;
}

enum { RES_NONE, RES_BUSY, RES_DONE };
static int resolve_state;
/* The thread inside dlsym: its allocations come from the arena. */
static __thread bool resolving __attribute__((tls_model("initial-exec")));

#define SYM(name) dlsym(RTLD_NEXT, name)
/* Injected (got.c, memprof__inject): dlopen'ed into a running process, out
 * of its global scope, behind GOT slots that point here. The next allocator
 * is then the process's own first one, not the next after us in our local
 * scope (which would be libc's whatever the process uses). */
static bool injected;
#define NEXT_SYM(name) (LOAD(&injected, RELAXED) ? mp_default_sym(name) : SYM(name))

MP_HIDDEN void *mp_default_sym(const char *name)
{
	void *f = dlsym(RTLD_DEFAULT, name), *g;
	const ElfW(Sym) *sym = NULL;
	struct link_map *lm = NULL, *at;
	Dl_info di;

	/* A non-PIE executable that takes @name's address defines it as its
	 * own PLT entry (undefined, with a value: dladdr reports it as a
	 * definition), which jumps through a GOT slot that got.c points at
	 * us: forwarding there would come back here. The definition it stands
	 * for is the first object after the executable that defines @name
	 * itself (dlsym on a handle searches that object's scope: the object
	 * that answers must be the one asked). A handle comes from dlopen
	 * RTLD_NOLOAD of the object's name (a link map is not one for every
	 * object: the vDSO's has no scope). */
	if (!f || !dladdr1(f, &di, (void **)&sym, RTLD_DL_SYMENT) || !sym ||
	    sym->st_shndx != SHN_UNDEF || !dladdr1(f, &di, (void **)&lm, RTLD_DL_LINKMAP) || !lm)
		return f;
	for (struct link_map *l = lm->l_next; l; l = l->l_next) {
		void *h = l->l_name && l->l_name[0] ? dlopen(l->l_name, RTLD_LAZY | RTLD_NOLOAD) :
						      NULL;

		if (!h)
			continue;
		g = dlsym(h, name);
		at = NULL;
		dlclose(h);
		if (g && g != f && dladdr1(g, &di, (void **)&at, RTLD_DL_LINKMAP) && at == l)
			return g;
	}
	return NULL;
}

/* @fn when it comes from the object of @malloc_fn: an allocator without
 * pvalloc (jemalloc) must not get glibc's, whose blocks it cannot free.
 * The missing ones are then built on that allocator's memalign. */
static void *same_object(void *malloc_fn, void *fn)
{
	Dl_info a, b;

	if (!fn || !dladdr(malloc_fn, &a) || !dladdr(fn, &b))
		return NULL;
	return a.dli_fbase == b.dli_fbase ? fn : NULL;
}

/* True once the next allocator's malloc and free are known. Another thread
 * arriving while one resolves is served by the arena too: a few calls, and
 * no thread ever waits on another. */
static bool resolve(void)
{
	int s = LOAD(&resolve_state, ACQUIRE);
	void *m, *f;

	if (s == RES_DONE)
		return true;
	if (resolving || s == RES_BUSY ||
	    !__atomic_compare_exchange_n(&resolve_state, &s, RES_BUSY, false, __ATOMIC_ACQUIRE,
					 __ATOMIC_ACQUIRE))
		return LOAD(&resolve_state, ACQUIRE) == RES_DONE;
	resolving = true;
	m = NEXT_SYM("malloc");
	f = NEXT_SYM("free");
	if (!m || !f) {
		/* no allocator after us: the arena is all there is */
		resolving = false;
		STORE(&resolve_state, RES_NONE, RELEASE);
		return false;
	}
	next.calloc = NEXT_SYM("calloc");
	next.realloc = NEXT_SYM("realloc");
	next.reallocarray = same_object(m, NEXT_SYM("reallocarray"));
	next.posix_memalign = same_object(m, NEXT_SYM("posix_memalign"));
	next.aligned_alloc = same_object(m, NEXT_SYM("aligned_alloc"));
	next.memalign = same_object(m, NEXT_SYM("memalign"));
	next.valloc = same_object(m, NEXT_SYM("valloc"));
	next.pvalloc = same_object(m, NEXT_SYM("pvalloc"));
	next.malloc_usable_size = same_object(m, NEXT_SYM("malloc_usable_size"));
	/* The next allocator's first call, here while the other threads are
	 * still served by the arena: glibc's malloc initializes itself at its
	 * first call, unlocked (ptmalloc_init), so threads racing into it
	 * would each take its main arena unattached and reset it under each
	 * other. It was initialized already where the process's own startup
	 * allocated; not where every call of the process went to another
	 * allocator first (a sanitizer's) and ours come from threads. */
	((void (*)(void *))f)(((void *(*)(size_t))m)(1));
	STORE(&next.free, (void (*)(void *))f, RELEASE);
	STORE(&next.malloc, (void *(*)(size_t))m, RELEASE);
	resolving = false;
	STORE(&resolve_state, RES_DONE, RELEASE);
	return true;
}

/* got.c: the allocator the process calls, resolved before any slot points
 * here. -EALREADY when ours is the process's first malloc; -EBUSY when the
 * next one is already known and is another. */
MP_HIDDEN int mp_interpose_inject(void)
{
	void *m = mp_default_sym("malloc");
	int s;

	if (!m)
		return -ENOENT;
	if (m == (void *)mp_own_malloc)
		return -EALREADY;
	s = LOAD(&resolve_state, ACQUIRE);
	if (s == RES_NONE) {
		STORE(&injected, true, RELAXED);
		if (!resolve())
			return -EBUSY;
	} else if (s == RES_BUSY) {
		return -EBUSY;
	}
	return (void *)LOAD(&next.malloc, ACQUIRE) == m ? 0 : -EBUSY;
}

/* Yields a thread that finds the next allocator being resolved gives the
 * resolver before it takes the arena instead. */
#define BOOT_YIELDS 1000
/* How long a call the arena cannot serve waits for the resolver. */
#define BOOT_WAIT_NS (2 * 1000 * 1000 * 1000ll)

static int64_t boot_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

/* True once the next allocator is known; false when the caller must take
 * the arena. A thread that finds another one resolving waits for it, a
 * while (@full false) or up to 2 s (@full: the arena has no room for the
 * call), rather than fill the arena: a program's threads racing into
 * their first calls would exhaust its 64 KiB, and a call the arena cannot
 * serve fails, an ENOMEM the program would not get without us. The wait
 * is bounded because the resolver's dlsym takes the loader's lock, which
 * a thread inside dlopen may hold while it allocates: that thread gets
 * the arena, which holds dlopen's few blocks (and past 2 s of a full
 * arena, the failure it got before rather than a deadlock). */
static bool resolved_or_waited(bool full)
{
	int64_t t0 = 0;

	for (unsigned i = 0; !resolve(); i++) {
		if (resolving || LOAD(&resolve_state, ACQUIRE) != RES_BUSY ||
		    (!full && i >= BOOT_YIELDS))
			return false;
		if (full && i >= BOOT_YIELDS) {
			int saved = errno;
			int64_t now = boot_now_ns();

			errno = saved;
			if (!t0)
				t0 = now;
			else if (now - t0 > BOOT_WAIT_NS)
				return false;
		}
		sched_yield();
	}
	return true;
}

/* A call made before the next allocator is known: the arena's block of
 * @n bytes at @align, or NULL with *@ret_next set when the next allocator
 * became known meanwhile (the caller then calls it instead). */
static void *boot_block(size_t n, size_t align, bool *ret_next)
{
	void *p = NULL;

	*ret_next = resolved_or_waited(false);
	if (!*ret_next && !(p = arena_alloc(n, align)))
		*ret_next = resolved_or_waited(true);
	return p;
}

static void *boot_malloc(size_t n)
{
	bool nx;
	void *p = boot_block(n, 16, &nx);

	return nx ? next.malloc(n) : p;
}

static void boot_free(void *p)
{
	/* a block of the next allocator: it is known, or being resolved */
	if (p && !in_arena(p) && resolved_or_waited(true))
		next.free(p);
}

static void *boot_calloc(size_t n, size_t m)
{
	size_t size;
	bool nx;
	void *p;

	if (__builtin_mul_overflow(n, m, &size)) {
		errno = ENOMEM;
		return NULL;
	}
	/* the arena is zero and never reused */
	p = boot_block(size, 16, &nx);
	return nx && next.calloc != boot_calloc ? next.calloc(n, m) : p;
}

static void *boot_realloc(void *p, size_t n)
{
	void *q;

	if (resolved_or_waited(false) && next.realloc != boot_realloc)
		return next.realloc(p, n);
	/* @p (never the arena's: realloc() copies those) is the next
	 * allocator's */
	q = p ? NULL : arena_alloc(n, 16);
	if (!q && resolved_or_waited(true) && next.realloc != boot_realloc)
		return next.realloc(p, n);
	return q;
}

/* ---- sampled mode: the per-thread countdown and the sampled-block set ---- */

enum { NOT_SAMPLED = 0, SAMPLED_EXACT = 1, SAMPLED_SCALED = 2 };

static uint64_t rng_next(struct mp_alloc_tls *t)
{
	/* xorshift64*: a sampling decision needs no better */
	uint64_t x = t->rng;

	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	t->rng = x;
	return x * 0x2545f4914f6cdd1dull;
}

/* An exponential draw of mean @mean bytes. */
static int64_t draw_interval(struct mp_alloc_tls *t, uint64_t mean)
{
	/* uniform in (0, 1]: never log(0) */
	double u = ((double)(rng_next(t) >> 11) + 1.0) * (1.0 / 9007199254740992.0);

	return (int64_t)(-log(u) * (double)mean) + 1;
}

/* The BPF side's scheme (bpf/memprof.bpf.c sample()): blocks of at least
 * the interval always, smaller ones when the thread's countdown runs out. */
static int sample(uint64_t size, uint64_t mean)
{
	struct mp_alloc_tls *t = &mp_alloc_tls;

	if (size >= mean)
		return SAMPLED_EXACT;
	if (unlikely(!t->seeded)) {
		t->rng = ((uint64_t)(uintptr_t)t * 0x9e3779b97f4a7c15ull) ^
			 (uint64_t)gettid() * 0xbf58476d1ce4e5b9ull;
		if (!t->rng)
			t->rng = 1;
		t->seeded = true;
		t->countdown = draw_interval(t, mean);
	}
	t->countdown -= (int64_t)size;
	if (likely(t->countdown > 0))
		return NOT_SAMPLED;
	for (int i = 0; i < 64 && t->countdown <= 0; i++)
		t->countdown += draw_interval(t, mean);
	return SAMPLED_SCALED;
}

/*
 * Sampled blocks, so that only their frees are recorded: an open-addressing
 * set of SET_SIZE addresses (lock-free; an entry is claimed by CAS and freed
 * to a tombstone), probed at most SET_PROBES slots, in front of it a filter
 * of per-bucket counts that a free of an unsampled block (nearly every
 * free) reads alone: 4 bits a bucket, 16 buckets to a 64-bit word updated
 * as one (a count and whether it is zero cannot disagree), 32 KiB where
 * byte counts took 64 KiB and missed the cache more. A count that reaches
 * 15 stays there (the bucket then only costs a probe). Private anonymous
 * memory mapped at the first sample and kept (2 MiB + 32 KiB of address
 * space, touched as used). A sampled block that
 * finds no room is not recorded and counted as a drop: its free could not
 * be matched. docs/TRACER.md gives the cost and error.
 */
#define SET_BITS 18
#define SET_SIZE (1u << SET_BITS)
#define SET_PROBES 64
#define FILTER_BITS 16
#define TOMB 1ull

#define NIB_MAX 15u

struct sampled_set {
	uint64_t keys[SET_SIZE];
	uint64_t filter[(1u << FILTER_BITS) / 16];
};
static struct sampled_set *set;
static uint64_t set_epoch;

static uint64_t mix(uint64_t p)
{
	return (p >> 4) * 0x9e3779b97f4a7c15ull;
}

static uint32_t bucket_of(uint64_t p)
{
	return (uint32_t)(mix(p) >> (64 - FILTER_BITS));
}

/* Bucket @b's count (0-15). */
static inline __attribute__((always_inline)) unsigned int count_of(const struct sampled_set *s,
								   uint32_t b)
{
	return (unsigned int)(LOAD(&s->filter[b / 16], ACQUIRE) >> (b % 16 * 4)) & NIB_MAX;
}

/* Bucket @b's count moved by @up (+1 or -1) in its word, but for a count
 * at 15 (it stays) or a decrement of 0. */
static void count_add(struct sampled_set *s, uint32_t b, bool up)
{
	uint64_t *w = &s->filter[b / 16], v = LOAD(w, RELAXED), one = 1ull << (b % 16 * 4);

	for (;;) {
		unsigned int n = (unsigned int)(v >> (b % 16 * 4)) & NIB_MAX;

		if (n == NIB_MAX || (!up && n == 0))
			return;
		if (__atomic_compare_exchange_n(w, &v, up ? v + one : v - one, true,
						__ATOMIC_SEQ_CST, __ATOMIC_RELAXED))
			return;
	}
}

/* set_epoch while the set is being emptied for a new session */
#define EPOCH_WIPING UINT64_MAX

/* The set of the session of @epoch; NULL when it cannot be had (no memory,
 * or emptied right now for a new session by another thread: the block at
 * hand is then not sampled, and counted). */
static struct sampled_set *set_get(uint64_t epoch)
{
	struct sampled_set *s = LOAD(&set, ACQUIRE), *fresh;
	uint64_t e;

	if (unlikely(!s)) {
		/* Our memory, not the program's: the tracepoints must not
		 * report it as an anonymous mapping of the process. on_alloc()
		 * leaves errno alone only if this does. */
		int saved = errno;

		mp_alloc_tls.in_alloc = 1; /* ENTER(): on_alloc() runs with in_alloc 0 */
		atomic_signal_fence(memory_order_seq_cst);
		fresh = mmap(NULL, sizeof(*s), PROT_READ | PROT_WRITE,
			     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		errno = saved;
		/* The epoch before the set: a thread that finds the set must
		 * find its epoch too, or it would take the set for the last
		 * session's and empty it under the first inserts (every thread
		 * of a session writes the same epoch here). */
		if (fresh != MAP_FAILED)
			STORE(&set_epoch, epoch, RELEASE);
		if (fresh != MAP_FAILED &&
		    !__atomic_compare_exchange_n(&set, &s, fresh, false, __ATOMIC_ACQ_REL,
						 __ATOMIC_ACQUIRE)) {
			munmap(fresh, sizeof(*fresh));
			fresh = s;
		}
		atomic_signal_fence(memory_order_seq_cst);
		mp_alloc_tls.in_alloc = 0;
		return fresh == MAP_FAILED ? NULL : fresh;
	}
	e = LOAD(&set_epoch, ACQUIRE);
	if (likely(e == epoch))
		return s;
	/* A new session: blocks sampled by the last one are unknown to it.
	 * One thread empties the set; while it does, the others sample
	 * nothing (an insert then would be emptied too). Threads still
	 * inserting for the old session may leave an entry, which at worst
	 * makes one free an unknown free. */
	if (e == EPOCH_WIPING || !__atomic_compare_exchange_n(&set_epoch, &e, EPOCH_WIPING, false,
							      __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
		return NULL;
	{
		int saved = errno;

		madvise(s, sizeof(*s), MADV_DONTNEED);
		errno = saved;
	}
	STORE(&set_epoch, epoch, RELEASE);
	return s;
}

static bool set_insert(uint64_t p, uint64_t epoch)
{
	struct sampled_set *s = set_get(epoch);
	uint64_t h, *free_slot = NULL;

	if (!s)
		return false;
	h = mix(p) >> (64 - SET_BITS);
	/* The address may still be there from a block freed while the path
	 * was off: keep that entry. */
	for (unsigned i = 0; i < SET_PROBES; i++) {
		uint64_t *k = &s->keys[(h + i) & (SET_SIZE - 1)];
		uint64_t v = LOAD(k, RELAXED);

		if (v == p)
			return true;
		if (!free_slot && v <= TOMB &&
		    __atomic_compare_exchange_n(k, &v, p, false, __ATOMIC_RELAXED,
						__ATOMIC_RELAXED))
			free_slot = k;
		if (v == 0 && free_slot)
			break;
	}
	if (!free_slot)
		return false;
	count_add(s, bucket_of(p), true);
	return true;
}

/* Removes @p; false when it was not sampled. */
static bool set_remove(uint64_t p)
{
	struct sampled_set *s = LOAD(&set, ACQUIRE);
	uint64_t h;

	if (!s)
		return false;
	if (likely(!count_of(s, bucket_of(p))))
		return false;
	h = mix(p) >> (64 - SET_BITS);
	for (unsigned i = 0; i < SET_PROBES; i++) {
		uint64_t *k = &s->keys[(h + i) & (SET_SIZE - 1)];
		uint64_t v = LOAD(k, RELAXED);

		if (v == 0)
			return false;
		if (v == p && __atomic_compare_exchange_n(k, &v, TOMB, false, __ATOMIC_RELAXED,
							  __ATOMIC_RELAXED)) {
			count_add(s, bucket_of(p), false);
			return true;
		}
	}
	return false;
}

/* ---- recording ---- */

struct stack_bounds {
	uint64_t lo, end;
};
static const struct stack_bounds *thread_stack(void);

/* Bytes of stack an allocation from @caller carries because @caller is an
 * allocator wrapper (ring_abi.h wrap); 0 when it is not. One compare when
 * the caller is outside [wrap_lo, wrap_hi), the common case. */
static inline __attribute__((always_inline)) uint32_t wrapped(const struct mp_ring_hdr *h,
							      uint64_t caller)
{
	uint64_t lo = LOAD(&h->wrap_lo, RELAXED);
	uint32_t n;

	if (likely(caller - lo >= LOAD(&h->wrap_hi, RELAXED) - lo))
		return 0;
	n = LOAD(&h->wrap_count, RELAXED);
	for (uint32_t i = 0; i < n && i < MP_RING_WRAP_MAX; i++) {
		if (caller < LOAD(&h->wrap[i].lo, RELAXED))
			break;
		if (caller < LOAD(&h->wrap[i].hi, RELAXED))
			return LOAD(&h->wrap_stack_bytes, RELAXED);
	}
	return 0;
}

/* Whether @pc, a return address past an allocation's caller, is outside
 * every allocator wrapper: the caller the allocation is charged to, where
 * the walk of a wrapped allocation ends. */
static bool beyond_wrappers(uint64_t pc)
{
	return !wrapped(LOAD(&mp_alloc_hdr, RELAXED), pc);
}

static inline __attribute__((always_inline)) void put(uint8_t type, uint8_t flags, uint32_t fn,
						      uint64_t addr, uint64_t size, uint64_t caller,
						      uint64_t old, uint32_t mode)
{
	uint64_t w[4] = { addr, size, caller, old };
	unsigned nw = type == MP_REC_REALLOC ? 4 : 3;
	enum mp_rw_wait wait = mode == MP_ALLOC_PRECISE ? MP_RW_WAIT : MP_RW_NOWAIT;
	const struct mp_ring_hdr *h = LOAD(&mp_alloc_hdr, RELAXED);
	uint32_t sb, depth = 0;

	/* a new block gets the call stack, when the consumer asked (frames
	 * unwound here, when it says how deep) or when its caller is an
	 * allocator wrapper (then the frames up to the first caller outside
	 * the wrappers, at most MP_WRAP_FRAMES) */
	if (type != MP_REC_FREE && addr &&
	    ((sb = LOAD(&h->alloc_stack_bytes, RELAXED)) || (sb = wrapped(h, caller)))) {
		const struct stack_bounds *b = thread_stack();
		bool whole = LOAD(&h->alloc_stack_bytes, RELAXED);

		depth = LOAD(&h->alloc_stack_depth, RELAXED);
		if (!whole && depth > MP_WRAP_FRAMES)
			depth = MP_WRAP_FRAMES;
		mp_stack_put(type, flags, fn, w, nw, wait, b->lo, b->end, sb, depth,
			     whole ? NULL : beyond_wrappers, mp_alloc_tls.entry_fp);
		return;
	}
	mp_ring_write(type, flags, fn, w, nw, wait);
}

/* Sampled mode: whether to record a new block; remembers it. */
static int keep(const struct mp_ring_hdr *h, uint64_t p, uint64_t size)
{
	uint64_t mean = LOAD(&h->alloc_sample_bytes, RELAXED);
	int how;

	if (!mean)
		return NOT_SAMPLED;
	how = sample(size, mean);
	if (how == NOT_SAMPLED)
		return how;
	/* a forked child's set holds its parent's blocks */
	if (!set_insert(p, LOAD(&h->alloc_epoch, RELAXED) ^
				   ((uint64_t)LOAD(&mp_fork_gen, RELAXED) << 48))) {
		/* unmatched frees would follow: not recorded, counted */
		mp_ring_count_alloc_drop();
		return NOT_SAMPLED;
	}
	return how;
}

/* Neither on_alloc() nor on_free() touches errno (each would be a call
 * into libc per record): nothing on the record path sets it but its rare
 * slow paths (a thread's first record, the bounded wait's sleep, the stack
 * bounds, the sampled-block set's mapping), which save and restore it
 * themselves. */
static __attribute__((noinline)) void on_alloc(uint32_t mode, uint32_t fn, void *p, uint64_t size,
					       uint64_t caller)
{
	const struct mp_ring_hdr *h = LOAD(&mp_alloc_hdr, ACQUIRE);
	int how = SAMPLED_EXACT;

	if (mode == MP_ALLOC_SAMPLED && !(how = keep(h, (uintptr_t)p, size)))
		return;
	put(MP_REC_ALLOC, how == SAMPLED_SCALED ? MP_REC_F_SCALED : 0, fn, (uintptr_t)p, size,
	    caller, 0, mode);
}

/* on_alloc() of a traced call whose interposed function has the frame
 * record @fp (its caller's rbp and the return address to it): where a
 * wrapped allocation's walk may begin. */
static inline __attribute__((always_inline)) void
on_alloc_at(uint32_t mode, uint32_t fn, void *p, uint64_t size, uint64_t caller, const void *fp)
{
	mp_alloc_tls.entry_fp = fp;
	on_alloc(mode, fn, p, size, caller);
	mp_alloc_tls.entry_fp = NULL;
}

static __attribute__((noinline)) void on_free(uint32_t mode, void *p, uint64_t caller)
{
	if (mode == MP_ALLOC_SAMPLED && !set_remove((uintptr_t)p))
		return;
	put(MP_REC_FREE, 0, FN_FREE, (uintptr_t)p, 0, caller, 0, mode);
}

/* Sampled mode, inlined into malloc() and calloc(): keep()'s decision for
 * a block it would not sample (nearly every one), without a call. True,
 * with the thread's countdown charged exactly as sample() charges it, when
 * @size is below the interval and does not exhaust the countdown; false
 * leaves the whole decision to keep() (a block of at least the interval,
 * an exhausted countdown, a thread not seeded yet: its countdown is 0). */
static inline __attribute__((always_inline)) bool unsampled(const struct mp_ring_hdr *h,
							    uint64_t size)
{
	struct mp_alloc_tls *t = &mp_alloc_tls;
	int64_t left = t->countdown - (int64_t)size;

	if (size >= LOAD(&h->alloc_sample_bytes, RELAXED) || (int64_t)size < 0 || left <= 0)
		return false;
	t->countdown = left;
	return true;
}

/* Sampled mode, inlined into free(): false when @p is certainly not a
 * sampled block (the filter's count for its bucket is 0), which is what
 * set_remove() would find first. */
static inline __attribute__((always_inline)) bool maybe_sampled(uint64_t p)
{
	struct sampled_set *s = LOAD(&set, ACQUIRE);

	return s && count_of(s, bucket_of(p));
}

/* realloc family, after the call: @old (0: none) resized to @size bytes
 * returned @ret; bpf/memprof.bpf.c emit_realloc() in sampled mode. */
static __attribute__((noinline)) void on_realloc(uint32_t mode, uint32_t fn, uint64_t ret,
						 uint64_t size, uint64_t old, uint64_t caller)
{
	const struct mp_ring_hdr *h = LOAD(&mp_alloc_hdr, ACQUIRE);
	bool old_s;
	int how;

	if (mode != MP_ALLOC_SAMPLED) {
		put(MP_REC_REALLOC, 0, fn, ret, size, caller, old, mode);
		return;
	}
	if (!ret) {
		if (size == 0 && old && set_remove(old))
			put(MP_REC_REALLOC, 0, fn, 0, 0, caller, old, mode);
		return;
	}
	old_s = old && set_remove(old);
	how = keep(h, ret, size);
	if (old_s && how != NOT_SAMPLED)
		put(MP_REC_REALLOC, how == SAMPLED_SCALED ? MP_REC_F_SCALED : 0, fn, ret, size,
		    caller, old, mode);
	else if (old_s)
		put(MP_REC_FREE, 0, fn, old, 0, caller, 0, mode);
	else if (how != NOT_SAMPLED)
		put(MP_REC_ALLOC, how == SAMPLED_SCALED ? MP_REC_F_SCALED : 0, fn, ret, size,
		    caller, 0, mode);
}

/* The one check every call makes. */
static inline __attribute__((always_inline)) uint32_t mode_now(void)
{
	return LOAD(&LOAD(&mp_alloc_hdr, RELAXED)->alloc_mode, RELAXED);
}

/* Every ENTER() runs with in_alloc 0 (each caller tests it first, and a
 * signal handler that interrupts a traced call sees it set and enters
 * nothing): plain stores, no read-modify-write. */
#define ENTER() (mp_alloc_tls.in_alloc = 1, atomic_signal_fence(memory_order_seq_cst))
#define LEAVE() (atomic_signal_fence(memory_order_seq_cst), mp_alloc_tls.in_alloc = 0)

/* ---- call stacks: where the calling thread's stack ends ---- */

extern void *__libc_stack_end; /* the initial thread's, set by ld.so */
static __thread struct stack_bounds stack_bounds __attribute__((tls_model("initial-exec")));

/* Found once per thread; empty when unknown (the stack record then
 * carries the registers alone). The initial thread's stack ends at
 * __libc_stack_end and may grow down to its rlimit (at most 1 GiB is
 * believed; the kernel keeps that range for it). Another thread's stack
 * is where glibc says: its pthread_getattr_np allocates (the affinity
 * mask), which this thread's traced-call flag keeps out of the profile. */
static const struct stack_bounds *thread_stack(void)
{
	struct stack_bounds *b = &stack_bounds;
	pthread_attr_t a;
	struct rlimit rl;
	size_t size;
	int saved;
	void *lo;

	if (likely(b->end))
		return b;
	/* the caller's errno outlives our calls (on_alloc() leaves it alone) */
	saved = errno;
	b->end = 1;
	if (gettid() == getpid()) {
		uint64_t max = 1ull << 30;

		if (getrlimit(RLIMIT_STACK, &rl) == 0 && rl.rlim_cur < max)
			max = rl.rlim_cur;
		b->end = (uintptr_t)__libc_stack_end;
		b->lo = b->end > max ? b->end - max : 0;
	} else {
		ENTER();
		if (pthread_getattr_np(pthread_self(), &a) == 0) {
			if (pthread_attr_getstack(&a, &lo, &size) == 0) {
				b->lo = (uintptr_t)lo;
				b->end = (uintptr_t)lo + size;
			}
			pthread_attr_destroy(&a);
		}
		LEAVE();
	}
	errno = saved;
	return b;
}

/* ---- the interposed functions: dormant, a tail call to the next
 * allocator ---- */

/* On: the traced call, a tail jump from malloc() (its dormant path keeps
 * no frame). An unsampled call in sampled mode (nearly every one) costs a
 * dormant call, the in_alloc flag around the next allocator and the
 * countdown test inlined in malloc_on(), and calls nothing else of ours. */
static __attribute__((noinline)) void *malloc_traced(uint32_t m, size_t n, uint64_t caller)
{
	void *p;

	ENTER();
	p = next.malloc(n);
	LEAVE();
	if (p)
		on_alloc_at(m, FN_MALLOC, p, n, caller, __builtin_frame_address(0));
	return p;
}

/* The decision comes before the call, so that only the size lives across
 * it (two registers saved, not six); a failed call gives its charge back,
 * as keep() never charges one. */
static __attribute__((noinline)) void *malloc_on(uint32_t m, size_t n, uint64_t caller)
{
	void *p;

	/* called by the next allocator inside a traced call (glibc's
	 * reallocarray calls realloc): that call's record accounts for it */
	if (mp_alloc_tls.in_alloc)
		return next.malloc(n);
	if (m != MP_ALLOC_SAMPLED || !unsampled(LOAD(&mp_alloc_hdr, RELAXED), n))
		return malloc_traced(m, n, caller);
	ENTER();
	p = next.malloc(n);
	LEAVE();
	if (unlikely(!p))
		mp_alloc_tls.countdown += (int64_t)n;
	return p;
}

EXPORT void *malloc(size_t n)
{
	const struct mp_ring_hdr *h = LOAD(&mp_alloc_hdr, RELAXED);
	uint32_t m = LOAD(&h->alloc_mode, RELAXED);

	if (likely(!m))
		return next.malloc(n);
	return malloc_on(m, n, CALLER);
}

/* The free of a block that is certainly not sampled records nothing and
 * calls nothing of ours: maybe_sampled() is set_remove()'s first test. */
static __attribute__((noinline)) void free_on(uint32_t m, void *p, uint64_t caller)
{
	if (mp_alloc_tls.in_alloc) {
		next.free(p);
		return;
	}
	if (p && (m != MP_ALLOC_SAMPLED || maybe_sampled((uintptr_t)p)))
		on_free(m, p, caller);
	ENTER();
	next.free(p);
	LEAVE();
}

EXPORT void free(void *p)
{
	uint32_t m = mode_now();

	/* A bootstrap block is never released, but its allocation was
	 * recorded (a traced call served before the next allocator was
	 * found: threads racing into their first malloc), so its free is. */
	if (unlikely(in_arena(p))) {
		if (m && !mp_alloc_tls.in_alloc &&
		    (m != MP_ALLOC_SAMPLED || maybe_sampled((uintptr_t)p)))
			on_free(m, p, CALLER);
		return;
	}
	if (likely(!m)) {
		next.free(p);
		return;
	}
	free_on(m, p, CALLER);
}

static __attribute__((noinline)) void *calloc_on(const struct mp_ring_hdr *h, uint32_t m, size_t n,
						 size_t size, uint64_t caller)
{
	void *p;

	if (mp_alloc_tls.in_alloc)
		return next.calloc(n, size);
	/* an overflowing product fails in calloc itself, and gives its
	 * charge back */
	if (m == MP_ALLOC_SAMPLED && unsampled(h, (uint64_t)n * size)) {
		ENTER();
		p = next.calloc(n, size);
		LEAVE();
		if (unlikely(!p))
			mp_alloc_tls.countdown += (int64_t)((uint64_t)n * size);
		return p;
	}
	ENTER();
	p = next.calloc(n, size);
	LEAVE();
	if (p)
		on_alloc_at(m, FN_CALLOC, p, (uint64_t)n * size, caller,
			    __builtin_frame_address(0));
	return p;
}

EXPORT void *calloc(size_t n, size_t size)
{
	const struct mp_ring_hdr *h = LOAD(&mp_alloc_hdr, RELAXED);
	uint32_t m = LOAD(&h->alloc_mode, RELAXED);

	if (likely(!m))
		return next.calloc(n, size);
	return calloc_on(h, m, n, size, CALLER);
}

static void *realloc_arena(void *p, size_t n)
{
	size_t old = arena_size(p);
	void *q = malloc(n);

	if (q)
		memcpy(q, p, old < n ? old : n);
	return q;
}

static __attribute__((noinline)) void *realloc_on(uint32_t m, void *p, size_t n, uint64_t caller)
{
	void *q;

	if (mp_alloc_tls.in_alloc)
		return next.realloc(p, n);
	ENTER();
	q = next.realloc(p, n);
	LEAVE();
	on_realloc(m, FN_REALLOC, (uintptr_t)q, n, (uintptr_t)p, caller);
	return q;
}

EXPORT void *realloc(void *p, size_t n)
{
	uint32_t m;

	if (unlikely(in_arena(p)))
		return realloc_arena(p, n);
	m = mode_now();
	if (likely(!m))
		return next.realloc(p, n);
	return realloc_on(m, p, n, CALLER);
}

EXPORT void *reallocarray(void *p, size_t n, size_t size)
{
	size_t total;
	void *q;
	uint32_t m;

	if (__builtin_mul_overflow(n, size, &total)) {
		/* fails without touching the block, as the tracer sees it */
		errno = ENOMEM;
		return NULL;
	}
	if (unlikely(in_arena(p)))
		return realloc_arena(p, total);
	if (!next.reallocarray && !resolved_or_waited(true))
		return NULL;
	m = mp_alloc_tls.in_alloc ? 0 : mode_now();
	if (m)
		ENTER();
	q = next.reallocarray ? next.reallocarray(p, n, size) : next.realloc(p, total);
	if (m) {
		LEAVE();
		on_realloc(m, FN_REALLOCARRAY, (uintptr_t)q, total, (uintptr_t)p, CALLER);
	}
	return q;
}

/* The aligned family: the next allocator's own entry points when it has
 * them (they are resolved with malloc), else its memalign. */
static void *aligned_next(uint32_t fn, size_t align, size_t n)
{
	void *p = NULL;
	int r;

	if (LOAD(&resolve_state, ACQUIRE) != RES_DONE) {
		bool nx;

		p = boot_block(n, align, &nx);
		if (!nx)
			return p;
	}
	switch (fn) {
	case FN_ALIGNED_ALLOC:
		if (next.aligned_alloc)
			return next.aligned_alloc(align, n);
		break;
	case FN_VALLOC:
		if (next.valloc)
			return next.valloc(n);
		break;
	case FN_PVALLOC:
		if (next.pvalloc)
			return next.pvalloc(n);
		break;
	default:
		break;
	}
	if (next.memalign)
		return next.memalign(align, n);
	if (next.posix_memalign) {
		r = next.posix_memalign(&p, align, n);
		if (r) {
			errno = r;
			return NULL;
		}
		return p;
	}
	errno = ENOMEM;
	return NULL;
}

static void *aligned_traced(uint32_t fn, size_t align, size_t n, size_t size, uint64_t caller)
{
	uint32_t m = mode_now();
	void *p;

	if (likely(!m) || mp_alloc_tls.in_alloc)
		return aligned_next(fn, align, n);
	ENTER();
	p = aligned_next(fn, align, n);
	LEAVE();
	if (p)
		on_alloc_at(m, fn, p, size, caller, __builtin_frame_address(0));
	return p;
}

static __attribute__((noinline)) int posix_memalign_traced(uint32_t m, void **ret, size_t align,
							   size_t n, uint64_t caller)
{
	int r;

	ENTER();
	r = next.posix_memalign(ret, align, n);
	LEAVE();
	if (r == 0 && *ret)
		on_alloc_at(m, FN_POSIX_MEMALIGN, *ret, n, caller, __builtin_frame_address(0));
	return r;
}

EXPORT int posix_memalign(void **ret, size_t align, size_t n)
{
	uint32_t m;

	if (LOAD(&resolve_state, ACQUIRE) != RES_DONE) {
		bool nx;

		*ret = boot_block(n, align, &nx);
		if (!nx)
			return *ret ? 0 : ENOMEM;
	}
	if (!next.posix_memalign)
		return ENOMEM;
	m = mode_now();
	if (likely(!m) || mp_alloc_tls.in_alloc)
		return next.posix_memalign(ret, align, n);
	return posix_memalign_traced(m, ret, align, n, CALLER);
}

EXPORT void *aligned_alloc(size_t align, size_t n)
{
	return aligned_traced(FN_ALIGNED_ALLOC, align, n, n, CALLER);
}

EXPORT void *memalign(size_t align, size_t n)
{
	return aligned_traced(FN_MEMALIGN, align, n, n, CALLER);
}

EXPORT void *valloc(size_t n)
{
	return aligned_traced(FN_VALLOC, (size_t)sysconf(_SC_PAGESIZE), n, n, CALLER);
}

EXPORT void *pvalloc(size_t n)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);

	return aligned_traced(FN_PVALLOC, page, (n + page - 1) & ~(page - 1), n, CALLER);
}

EXPORT size_t malloc_usable_size(void *p)
{
	if (!p)
		return 0;
	if (in_arena(p))
		return arena_size(p);
	if (LOAD(&resolve_state, ACQUIRE) != RES_DONE && !resolved_or_waited(true))
		return 0;
	return next.malloc_usable_size ? next.malloc_usable_size(p) : 0;
}

/* ---- dlclose: what the in-process unwinder cached of an unloaded
 * object must not outlive it (another may be mapped at its address) ---- */

EXPORT int dlclose(void *handle)
{
	static int (*next_dlclose)(void *);
	int (*f)(void *) = LOAD(&next_dlclose, ACQUIRE);
	int r;

	if (unlikely(!f)) {
		f = (int (*)(void *))SYM("dlclose");
		if (!f)
			return -1;
		STORE(&next_dlclose, f, RELEASE);
	}
	r = f(handle);
	if (r == 0)
		mp_unwind_forget();
	return r;
}

/* Our definitions under names that bind here (got.c): in the C code of a
 * library not first in lookup order, malloc means the process's. */
#if defined(__has_attribute) && __has_attribute(copy)
#define OWN_ATTRS(f) __attribute__((copy(f)))
#else
#define OWN_ATTRS(f)
#endif
#define OWN(f) extern __typeof(f) mp_own_##f OWN_ATTRS(f) __attribute__((alias(#f)))
OWN(malloc);
OWN(free);
OWN(calloc);
OWN(realloc);
OWN(reallocarray);
OWN(posix_memalign);
OWN(aligned_alloc);
OWN(memalign);
OWN(valloc);
OWN(pvalloc);
OWN(malloc_usable_size);
OWN(dlclose);
