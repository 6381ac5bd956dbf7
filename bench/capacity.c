// SPDX-License-Identifier: MIT
/*
 * Daemon capacity: the per-event userspace path of a session (ordering
 * stage -> live table -> correlator) fed with synthetic allocation events
 * on one thread, as fast as possible and paced at 100k and 1M events/s.
 * The BPF ring-buffer read is not included (alloc-bench covers the whole
 * path, but cannot produce 1M events/s on 2 cores: every event costs the
 * target ~3 uprobe hits).
 *
 *   bench/bench-capacity [SECONDS_PER_RATE]
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "correlator.h"
#include "live.h"
#include "consumer.h"
#include "order.h"

#define LIVE 4096 /* blocks kept live by the synthetic program */
#define BATCH 4096

struct pipe {
	struct mp_order *order;
	struct mp_correlator *corr;
	uint64_t ts, n;
	uint64_t slots[LIVE];
	uint32_t next;
	uint32_t seq; /* the thread's record number, as the ring gives it */
};

static uint64_t clk(clockid_t c)
{
	struct timespec ts;

	clock_gettime(c, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static long rss_kib(void)
{
	char line[256];
	long v = -1;
	FILE *f = fopen("/proc/self/status", "re");

	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "VmRSS: %ld", &v) == 1)
			break;
	if (f)
		fclose(f);
	return v;
}

/* The ordering stage's sink: markers and BPF events to the correlator. */
static int on_ring(void *ctx, const struct mp_ringq_rec *rec, const struct mp_record *marker,
		   void *ref)
{
	struct pipe *p = ctx;

	return marker ? mp_correlator_on_record(p->corr, marker) : -EINVAL;
}

static int on_item(void *ctx, const struct mp_merge_item *it)
{
	struct pipe *p = ctx;
	struct mp_raw_event ev;

	memcpy(&ev, it->payload.bytes, sizeof(ev));
	return mp_correlator_apply_heap(p->corr, &ev, 0);
}

/* One batch: a kernel begin, BATCH events (free the oldest of LIVE blocks,
 * allocate a new one), a kernel end; then everything is released. */
static int batch(struct pipe *p)
{
	struct mp_record rec = { .type = MP_REC_KERNEL_BEGIN, .tid = 1, .name = "k" };

	/* consecutive record numbers, as a ring without drops gives them */
	rec.seq = ++p->seq;
	rec.ts_ns = ++p->ts;
	if (mp_order_ring(p->order, NULL, 0, &rec, 0, NULL) < 0)
		return -1;
	for (int i = 0; i < BATCH; i++) {
		struct mp_raw_event ev = { .pid = 1, .tid = 1, .caller = 0x401000, .size = 64 };
		uint64_t *slot = &p->slots[p->next++ % LIVE];

		ev.ts_ns = ++p->ts;
		if (*slot) {
			ev.type = MP_RAW_FREE;
			ev.fn = MP_FN_FREE;
			ev.addr = *slot;
			*slot = 0;
		} else {
			ev.type = MP_RAW_ALLOC;
			ev.fn = MP_FN_MALLOC;
			ev.addr = 0x10000000 + 64 * (p->n + (uint64_t)i);
			*slot = ev.addr;
		}
		if (mp_order_push(p->order, 2, ev.ts_ns, &ev, sizeof(ev)) < 0)
			return -1;
	}
	rec.type = MP_REC_KERNEL_END;
	rec.name = NULL;
	rec.seq = ++p->seq;
	rec.ts_ns = ++p->ts;
	if (mp_order_ring(p->order, NULL, 0, &rec, 0, NULL) < 0)
		return -1;
	if (mp_order_release_to(p->order, UINT64_MAX) < 0)
		return -1;
	p->n += BATCH;
	return 0;
}

int main(int argc, char **argv)
{
	double secs = argc > 1 ? atof(argv[1]) : 2.0;
	struct mp_correlator_opts co = { .begin_ns = 1 };
	const double rates[] = { 100e3, 1e6 };
	struct pipe p = { 0 };
	const struct mp_order_sink sink = { .ctx = &p, .ring = on_ring, .item = on_item };
	uint64_t w0, c0, w1, c1;

	if (mp_order_new(&(struct mp_order_opts){ 0 }, &sink, &p.order) ||
	    mp_correlator_new(&co, &p.corr))
		return 1;
	/* Flat out. */
	w0 = clk(CLOCK_MONOTONIC);
	c0 = clk(CLOCK_THREAD_CPUTIME_ID);
	while (clk(CLOCK_MONOTONIC) - w0 < (uint64_t)(secs * 1e9))
		if (batch(&p))
			return 1;
	c1 = clk(CLOCK_THREAD_CPUTIME_ID);
	printf("%-28s %12s %8s %10s\n", "rate (events/s)", "achieved", "CPU %", "RSS MiB");
	printf("%-28s %12.0f %8.0f %10.1f\n", "flat out", (double)p.n * 1e9 / (double)(c1 - c0),
	       100.0, (double)rss_kib() / 1024);
	for (size_t k = 0; k < 2; k++) {
		uint64_t n0 = p.n;
		double period = BATCH / rates[k]; /* seconds per batch */

		w0 = clk(CLOCK_MONOTONIC);
		c0 = clk(CLOCK_THREAD_CPUTIME_ID);
		for (uint64_t i = 0;; i++) {
			uint64_t due = w0 + (uint64_t)(period * 1e9 * (double)i), now;

			if (due - w0 >= (uint64_t)(secs * 1e9))
				break;
			while ((now = clk(CLOCK_MONOTONIC)) < due)
				usleep((useconds_t)((due - now) / 1000 + 1));
			if (batch(&p))
				return 1;
		}
		w1 = clk(CLOCK_MONOTONIC);
		c1 = clk(CLOCK_THREAD_CPUTIME_ID);
		printf("%-28.0f %12.0f %8.1f %10.1f\n", rates[k],
		       (double)(p.n - n0) * 1e9 / (double)(w1 - w0),
		       100.0 * (double)(c1 - c0) / (double)(w1 - w0), (double)rss_kib() / 1024);
	}
	printf("events: %llu; nothing is dropped in this path (the 8 MiB BPF ring holds "
	       "100k events, 100 ms at 1M events/s)\n",
	       (unsigned long long)p.n);
	mp_correlator_free(p.corr);
	mp_order_free(p.order);
	return 0;
}
