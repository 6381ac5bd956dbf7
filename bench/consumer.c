// SPDX-License-Identifier: MIT
/*
 * Consumer throughput of the in-process path (issue 10): heap records of the
 * marker ring through the daemon's code, on one core, as fast as it goes.
 *
 * A synthetic ring image (the real layout, 32 Ki slots per thread) is filled
 * the way libmemprof's interposer fills it: a program that allocates a
 * block of 16-63 bytes, each at a new address, and frees it right after
 * (every allocation is a temporary one: the text said "keeps 4096 blocks
 * live" until session 7, the code never did), with a kernel begin/end pair
 * every 512 records, one record every 33 ns of timestamp (30 M/s).
 * BENCH_FILL=live keeps 4096 blocks live (BENCH_LIVE=N: N, at most 65536)
 * per ring instead, freeing the oldest and
 * allocating a new one (no temporary allocations); BENCH_FILL=loop is the
 * alloc loop of bench-workload (malloc(32), the same address each time as
 * glibc's tcache hands it back, and its free). BENCH_PAIRING=0 applies
 * every record alone, without the session's pairing of an allocation with
 * the free that follows it (mp_correlator_apply_temporary()).
 * Each round fills every ring and then drains it through
 *
 *   memcpy drain   the baseline: copy each published slot out, move the tail
 *   session path   mp_consumer_read_rings_at -> mp_order -> the correlator's live table ->
 *                  mp_correlator (what the session does now)
 *   10 ms lag      the same, released as before (below)
 *   consumer+ringq the session path without the live table and correlator
 *
 * Records are released as the session releases them (mp_order_watermark):
 * up to how far the rings have been read, less the 50 us margin, the BPF
 * side being drained at the time of the drain (the time of the newest
 * record), so ~1,500 records are held at 30 M/s. The "10 ms lag" row
 * releases them 10 ms behind the newest, as the session did before (300k
 * records held), so the held records' memory is part of the cost. Only the
 * drains are timed.
 *
 *   bench/bench-consumer [ROUNDS [RINGS [THREADS]]]
 *
 * default 100 rounds, 1 ring with records, THREADS thread slots in the
 * image (default RINGS; libmemprof makes 512, the others idle). Each round
 * writes BENCH_CHUNK records per ring (default 32768, a full ring) before a
 * drain (the session drains every 0.5 ms: ~15,000 records at 30 M/s), so
 * rounds x 32768 records per ring go through in all. BENCH_PATHS=abc...
 * runs only those rows (by their letters; b, a path that is gone, is not
 * used, so that the others keep theirs); BENCH_TSC=0 stamps
 * heap records with CLOCK_MONOTONIC instead of the TSC.
 *
 * Times are the thread's CPU time (the machine may be shared).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "correlator.h"
#include "live.h"
#include "consumer.h"
#include "order.h"
#include "order_inline.h"
#include "ring_abi.h"
#include "ringq.h"

#define SLOTS 32768u
#define LIVE 4096u /* BENCH_LIVE=N: N blocks (at most LIVE_MAX) */
#define LIVE_MAX 65536u
#define KERNEL_EVERY 512u
#define TS_STEP 33u /* ns between records: 30 M/s */
#define LAG_NS (10u * 1000 * 1000) /* the session's merge lag */
#define MAX_RINGS 64u
#define MAX_THREADS 4096u

struct ring {
	unsigned char *mem;
	struct mp_slot *slots;
	uint32_t rings, threads;
	uint64_t pos[MAX_RINGS];
	/* the synthetic program, per ring */
	uint64_t live[MAX_RINGS][LIVE_MAX];
	uint32_t next[MAX_RINGS], since_kernel[MAX_RINGS], tseq[MAX_RINGS];
	uint8_t freed[MAX_RINGS]; /* BENCH_FILL=live: the oldest is freed */
	uint64_t addr, ts;
	int in_kernel[MAX_RINGS];
};

static uint64_t now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t); /* CPU time: the machine is shared */
	return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static int ring_init(struct ring *g, uint32_t rings, uint32_t threads)
{
	struct mp_ring_layout l = mp_ring_layout_of(SLOTS, threads, 16, 64);
	struct mp_ring_hdr *h;

	g->rings = rings;
	g->threads = threads;
	g->mem = aligned_alloc(128, (l.end + 127) & ~(uint64_t)127);
	if (!g->mem)
		return -ENOMEM;
	memset(g->mem, 0, l.end);
	h = (struct mp_ring_hdr *)g->mem;
	*h = (struct mp_ring_hdr){
		.magic = MP_RING_MAGIC,
		.abi_version = MP_RING_ABI_VERSION,
		.hdr_size = sizeof(*h),
		.total_size = l.end,
		.creator_pid = 1,
		.slot_size = sizeof(struct mp_slot),
		.slot_count = SLOTS,
		.thread_size = sizeof(struct mp_thread),
		.thread_count = threads,
		.str_max = 16,
		.blob_size = 64,
		.ring_off = l.ring_off,
		.threads_off = l.threads_off,
		.strent_off = l.strent_off,
		.blob_off = l.blob_off,
	};
	memcpy(g->mem + l.blob_off, "kernel", 7);
	((mp_strent *)(g->mem + l.strent_off))[1] = 7; /* offset 0, length 7 */
	g->slots = (struct mp_slot *)(g->mem + l.ring_off);
	g->addr = 0x7f0000000000ull;
	g->ts = 1000000;
	return 0;
}

static uint8_t heap_clock = MP_TS_TSC;
static uint32_t chunk = SLOTS;
enum { FILL_TEMP, FILL_LIVE, FILL_LOOP };
static uint32_t live_n = LIVE;
static int fill_kind = FILL_TEMP; /* BENCH_FILL */
static int pairing = 1; /* BENCH_PAIRING */

/* What the interposer and the marker functions write for one record. */
static void put(struct ring *g, uint32_t ring, uint8_t type, uint32_t fn, uint64_t a, uint64_t b)
{
	struct mp_slot *s = &g->slots[(uint64_t)ring * SLOTS + (g->pos[ring] & (SLOTS - 1))];

	s->ts_ns = g->ts += TS_STEP;
	s->type = type;
	s->flags = 0;
	s->rank = 0;
	/* heap records carry the TSC, as the interposer writes them where
	 * the TSC is trusted (docs/RING.md "Clocks"), unless BENCH_TSC=0 */
	s->clock = type >= MP_REC_ALLOC && type <= MP_REC_REALLOC ? heap_clock : MP_TS_MONOTONIC;
	s->tid = 1000 + ring;
	s->tseq = g->tseq[ring];
	s->name_id = fn;
	s->dims[0] = (int64_t)a;
	s->dims[1] = (int64_t)b;
	s->dims[2] = 0x401000 + 16 * (int64_t)(b & 7); /* 8 call sites */
	__atomic_store_n(&s->seq, ++g->pos[ring], __ATOMIC_RELEASE);
}

/* Writes a chunk into every ring (round robin, so timestamps interleave
 * like threads). */
static void fill(struct ring *g, uint64_t *n)
{
	for (uint32_t k = 0; k < chunk; k++) {
		for (uint32_t r = 0; r < g->rings; r++) {
			uint64_t *slot = &g->live[r][g->next[r] % live_n];

			if (g->since_kernel[r]++ >= KERNEL_EVERY) {
				g->since_kernel[r] = 0;
				g->tseq[r]++;
				put(g, r, g->in_kernel[r] ? MP_REC_KERNEL_END : MP_REC_KERNEL_BEGIN,
				    1, 0, 0);
				g->in_kernel[r] = !g->in_kernel[r];
			} else if (fill_kind == FILL_LOOP) {
				/* malloc(32), then its free */
				uint64_t a = 0x7f0000000000ull + 0x1000 * r;

				if (g->next[r]++ % 2)
					put(g, r, MP_REC_FREE, MP_FN_FREE, a, 0);
				else
					put(g, r, MP_REC_ALLOC, MP_FN_MALLOC, a, 32);
			} else if (fill_kind == FILL_LIVE && *slot && !g->freed[r]) {
				/* the oldest block, then a new one in its place */
				put(g, r, MP_REC_FREE, MP_FN_FREE, *slot, 0);
				g->freed[r] = 1;
			} else if (fill_kind == FILL_LIVE) {
				uint64_t size = 16 + (g->addr >> 4) % 48;

				*slot = g->addr;
				g->addr += 64;
				put(g, r, MP_REC_ALLOC, MP_FN_MALLOC, *slot, size);
				g->freed[r] = 0;
				g->next[r]++;
			} else if (*slot) {
				put(g, r, MP_REC_FREE, MP_FN_FREE, *slot, 0);
				*slot = 0;
				g->next[r]++;
			} else {
				uint64_t size = 16 + (g->addr >> 4) % 48;

				*slot = g->addr;
				g->addr += 64;
				put(g, r, MP_REC_ALLOC, MP_FN_MALLOC, *slot, size);
			}
			(*n)++;
		}
	}
}

static const char *owner(void *ctx, uint64_t caller)
{
	(void)ctx;
	(void)caller;
	return "/usr/lib/libexample.so";
}

struct pipe {
	struct mp_consumer *c;
	struct mp_order *order;
	struct mp_correlator *corr;
	int full; /* live table and correlator too */
	/* the session's held allocation (heap_record()) */
	struct mp_ringq_rec held;
	int holding;
	uint32_t hold_misses, hold_skip;
};

static inline __attribute__((always_inline)) int on_rec(void *ctx, const struct mp_ringq_rec *rec,
							const struct mp_record *marker, void *ref);
static int on_idle(void *ctx);

/* The session's prefetch of a heap record's live-table slot, shown the
 * record a few ahead of its release (daemon/session/flow.c). */
static void on_prefetch(void *ctx, const struct mp_ringq_rec *rec)
{
	const struct pipe *p = ctx;

	if (p->full)
		mp_correlator_prefetch_heap(p->corr, rec->addr, rec->old_addr);
}

/* The same, from the ring reader (daemon/session/flow.c ring_prefetch()):
 * with one ring, records are applied as they are read. */
static void on_ring_prefetch(void *ctx, uint64_t addr, uint64_t old_addr)
{
	const struct pipe *p = ctx;

	if (p->full)
		mp_correlator_prefetch_heap(p->corr, addr, old_addr);
}

static int pipe_new(struct pipe *p, struct ring *g, int full)
{
	struct mp_correlator_opts co = { .begin_ns = 1, .resolve_owner = owner };
	const struct mp_order_opts oo = { .lag_ns = LAG_NS, .fast_release = true };
	const struct mp_order_sink sink = {
		.ctx = p, .ring = on_rec, .idle = on_idle, .prefetch = on_prefetch
	};

	memset(p, 0, sizeof(*p));
	p->full = full;
	if (mp_consumer_open_mem(g->mem, ((struct mp_ring_hdr *)g->mem)->total_size, &p->c) ||
	    mp_order_new(&oo, &sink, &p->order) || mp_correlator_new(&co, &p->corr))
		return -1;
	if (!getenv("BENCH_NO_RING_PF"))
		mp_consumer_set_prefetch(p->c, on_ring_prefetch, p);
	/* one tick a nanosecond: the conversion is paid, the stamps stay */
	mp_consumer_set_tsc_cal(p->c,
				&(struct mp_tsc_cal){ .tsc = 0, .ns = 0, .mult = 1ull << 32 });
	return 0;
}

static void pipe_free(struct pipe *p)
{
	mp_consumer_free(p->c);
	mp_order_free(p->order);
	mp_correlator_free(p->corr);
}

/* The session's handle_heap_record() without its sampled-size estimate
 * (the bench runs precise mode). */
static inline __attribute__((always_inline)) int apply_one(struct pipe *p,
							   const struct mp_ringq_rec *rec)
{
	struct mp_raw_event ev;

	mp_ringq_raw(rec, 1, &ev);
	return mp_correlator_apply_heap(p->corr, &ev, 0);
}

/* The session's heap_flush(). */
static __attribute__((noinline)) int flush(struct pipe *p)
{
	if (!p->holding)
		return 0;
	p->holding = 0;
	return apply_one(p, &p->held);
}

static int on_idle(void *ctx)
{
	return flush(ctx);
}

/* The session's dispatch of one ring record (the ordering stage's sink:
 * an allocation held for the free that may follow; inlined where it is
 * called directly, as in the session). */
static inline __attribute__((always_inline)) int on_rec(void *ctx, const struct mp_ringq_rec *rec,
							const struct mp_record *marker, void *ref)
{
	struct pipe *p = ctx;
	struct mp_raw_event al, fr;

	(void)ref;
	if (!p->full)
		return 0;
	if (marker)
		return flush(p) < 0 ? -1 : mp_correlator_on_record(p->corr, marker);
	if (p->holding) {
		if (rec->type == MP_REC_FREE && rec->addr == p->held.addr &&
		    rec->tid == p->held.tid && rec->fn < MP_FN_MMAP) {
			p->holding = 0;
			p->hold_misses = 0;
			mp_ringq_raw(&p->held, 1, &al);
			mp_ringq_raw(rec, 1, &fr);
			return mp_correlator_apply_temporary(p->corr, &al, p->held.stack, &fr);
		}
		/* the session's HOLD_MISSES and HOLD_SKIP */
		if (++p->hold_misses >= 8) {
			p->hold_misses = 0;
			p->hold_skip = 256;
		}
		if (flush(p) < 0)
			return -1;
	}
	if (rec->type == MP_REC_ALLOC && pairing && rec->fn < MP_FN_MMAP) {
		if (!p->hold_skip) {
			/* field by field, as the session (store forwarding) */
			p->held.ts = rec->ts;
			p->held.addr = rec->addr;
			p->held.size = rec->size;
			p->held.caller = rec->caller;
			p->held.old_addr = rec->old_addr;
			p->held.tid = rec->tid;
			p->held.type = rec->type;
			p->held.flags = rec->flags;
			p->held.fn = rec->fn;
			p->held.marker = rec->marker;
			p->held.stack = rec->stack;
			p->holding = 1;
			return 0;
		}
		p->hold_skip--;
	}
	return apply_one(p, rec);
}

/* As the session: each record read to the ordering stage. */
static int on_read(void *ctx, uint32_t ring, const struct mp_record *rec)
{
	struct pipe *p = ctx;
	int r = mp_order_ring_inline(p->order, p->c, ring, rec, 0, NULL, on_rec);

	return r < 0 ? r : 0;
}

/* The session's drain at time @now (the newest record's stamp: the BPF
 * side, which has no events here, is drained then too); @lag_only: the
 * release rule before mp_order_watermark() (10 ms behind). @flush_all
 * releases everything. */
/* noinline: callgrind counts its instructions (docs/BENCHMARKS.md) */
static __attribute__((noinline)) int drain_new(struct pipe *p, uint64_t now, int lag_only,
					       int flush_all)
{
	uint64_t wm;
	int r;

	if (!lag_only)
		mp_order_read_begin(p->order, now, true);
	while ((r = mp_consumer_read_rings_at(p->c, 65536, now, on_read, p)) > 0)
		;
	mp_order_read_end(p->order);
	if (r < 0)
		return r;
	wm = lag_only ? (now > LAG_NS ? now - LAG_NS : 0) :
			mp_order_watermark(now, LAG_NS, now, mp_consumer_complete_ns(p->c));
	if (flush_all)
		wm = UINT64_MAX;
	/* as the session: the sink's held allocation goes when nothing more
	 * is released now */
	return mp_order_release_to(p->order, wm);
}

/* The baseline: copy every published slot out and give it back. */
static struct mp_slot sink[SLOTS];
static int drain_memcpy(struct ring *g, uint64_t *tail)
{
	const struct mp_ring_hdr *h = (const struct mp_ring_hdr *)g->mem;
	struct mp_thread *thr = (struct mp_thread *)(g->mem + h->threads_off);

	for (uint32_t r = 0; r < g->rings; r++) {
		for (;;) {
			struct mp_slot *s =
				&g->slots[(uint64_t)r * SLOTS + (tail[r] & (SLOTS - 1))];

			if (__atomic_load_n(&s->seq, __ATOMIC_ACQUIRE) != tail[r] + 1)
				break;
			memcpy(&sink[tail[r] & (SLOTS - 1)], s, sizeof(*s));
			tail[r]++;
		}
		__atomic_store_n(&thr[r].tail, tail[r], __ATOMIC_RELEASE);
	}
	return 0;
}

enum { P_MEMCPY, P_LAG, P_NEW, P_QUEUE, NPATH };
static const char *const names[NPATH] = {
	"memcpy drain (baseline)",
	"session, 10 ms lag (before)",
	"session: consumer+ringq+live+correlator",
	"session, consumer+ringq only",
};
/* the rows' letters, as bench/run and the docs name them */
static const char letters[NPATH] = { 'a', 'c', 'd', 'e' };

/* @rounds x SLOTS records per ring through path @k, in fills of chunk
 * records and drains; CPU ns and records drained in *ns and *recs. */
static int run(int k, uint32_t rings, uint32_t threads, int rounds, uint64_t *ns, uint64_t *recs)
{
	struct ring *g = calloc(1, sizeof(*g));
	uint64_t tail[MAX_RINGS] = { 0 }, n = 0;
	uint64_t fills = (uint64_t)rounds * SLOTS / chunk;
	struct pipe p;
	int r = 0;

	if (!g || ring_init(g, rings, threads) < 0)
		return -1;
	if (k != P_MEMCPY && pipe_new(&p, g, k != P_QUEUE) < 0)
		return -1;
	*ns = 0;
	for (uint64_t i = 0; i < fills && r == 0; i++) {
		int last = i == fills - 1;
		uint64_t t0;

		fill(g, &n);
		t0 = now_ns();
		switch (k) {
		case P_MEMCPY:
			r = drain_memcpy(g, tail);
			break;
		default:
			r = drain_new(&p, g->ts, k == P_LAG, last);
			break;
		}
		*ns += now_ns() - t0;
	}
	*recs = n;
	if (k != P_MEMCPY) {
		struct mp_profile *prof;

		if (r == 0 && mp_correlator_finish(p.corr, g->ts + 1, &prof) == 0) {
			if (k != P_QUEUE && prof->mem.alloc_count == 0)
				r = -1; /* the pipeline lost the records */
			mp_profile_free(prof);
		}
		pipe_free(&p);
	}
	free(g->mem);
	free(g);
	return r;
}

int main(int argc, char **argv)
{
	int rounds = argc > 1 ? atoi(argv[1]) : 100;
	const char *tsc_env = getenv("BENCH_TSC"), *paths = getenv("BENCH_PATHS");
	const char *chunk_env = getenv("BENCH_CHUNK");
	uint32_t rings = argc > 2 ? (uint32_t)atoi(argv[2]) : 1;
	uint32_t threads = argc > 3 ? (uint32_t)atoi(argv[3]) : rings;
	uint64_t best[NPATH], recs = 0;
	int on[NPATH];

	if (tsc_env && !strcmp(tsc_env, "0"))
		heap_clock = MP_TS_MONOTONIC;
	if (chunk_env)
		chunk = (uint32_t)atoi(chunk_env);
	if (getenv("BENCH_LIVE")) {
		unsigned long v = strtoul(getenv("BENCH_LIVE"), NULL, 10);

		live_n = v && v <= LIVE_MAX ? (uint32_t)v : LIVE;
	}
	if (getenv("BENCH_FILL"))
		fill_kind = !strcmp(getenv("BENCH_FILL"), "live") ? FILL_LIVE :
			    !strcmp(getenv("BENCH_FILL"), "loop") ? FILL_LOOP :
								    FILL_TEMP;
	if (getenv("BENCH_PAIRING") && !strcmp(getenv("BENCH_PAIRING"), "0"))
		pairing = 0;
	if (rounds < 2 || rings < 1 || rings > MAX_RINGS || threads < rings ||
	    threads > MAX_THREADS || chunk < 1 || chunk > SLOTS ||
	    (uint64_t)threads * SLOTS > MP_RING_MAX_SLOTS) {
		fprintf(stderr,
			"usage: bench-consumer [ROUNDS>=2 [RINGS 1-%u [THREADS]]] "
			"(BENCH_CHUNK 1-%u, at most %u slots in all)\n",
			MAX_RINGS, SLOTS, MP_RING_MAX_SLOTS);
		return 2;
	}
	for (int k = 0; k < NPATH; k++)
		on[k] = !paths || strchr(paths, letters[k]) || k == P_MEMCPY;
	/* fastest of 3 passes, the paths interleaved so load shifts hit all */
	for (int k = 0; k < NPATH; k++)
		best[k] = UINT64_MAX;
	for (int pass = 0; pass < 3; pass++) {
		for (int k = 0; k < NPATH; k++) {
			uint64_t ns;

			if (!on[k])
				continue;
			if (run(k, rings, threads, rounds, &ns, &recs) < 0) {
				fprintf(stderr, "bench-consumer: %s failed\n", names[k]);
				return 1;
			}
			if (ns < best[k])
				best[k] = ns;
		}
	}
	printf("bench-consumer: %u ring(s) of %u slots with records, %u thread slots, %d rounds, "
	       "%llu records per pass (a kernel marker every %u, a drain every %u per ring); "
	       "fastest of 3 passes; heap records stamped with %s; %s, %s\n",
	       rings, SLOTS, threads, rounds, (unsigned long long)recs, KERNEL_EVERY, chunk,
	       heap_clock == MP_TS_TSC ? "the TSC (converted)" : "CLOCK_MONOTONIC (BENCH_TSC=0)",
	       fill_kind == FILL_LIVE ? "blocks live per ring (BENCH_FILL=live, BENCH_LIVE)" :
	       fill_kind == FILL_LOOP ? "the alloc loop's malloc(32)+free (BENCH_FILL=loop)" :
					"each block freed after its allocation",
	       pairing ? "paired" : "every record alone (BENCH_PAIRING=0)");
	printf("%-42s %10s %14s %10s\n", "path", "ns/record", "M records/s", "x memcpy");
	for (int k = 0; k < NPATH; k++)
		if (on[k])
			printf("%c %-40s %10.2f %14.1f %10.2f\n", letters[k], names[k],
			       (double)best[k] / (double)recs, (double)recs * 1e3 / (double)best[k],
			       (double)best[k] / (double)best[P_MEMCPY]);
	if (on[P_NEW])
		printf("target: >= 30 M records/s through the live table and the correlator "
		       "(session path): %s\n",
		       (double)recs * 1e3 / (double)best[P_NEW] >= 30 ? "met" : "missed");
	return 0;
}
