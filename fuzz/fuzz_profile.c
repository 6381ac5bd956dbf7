/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for the profile decoder (memprof report/convert read
 * profile files someone else wrote). Whatever decodes must render and
 * re-encode without a fault: the renderers trust only what the decoder
 * validated. `memprof diff` compares what decodes with an empty profile and
 * with itself.
 *
 * Inputs starting with 'C' instead drive the correlator with an event
 * stream decoded from the bytes: marker records come from the profiled
 * process's ring (hostile tids, types, flags, ranks, timestamps), and the
 * resulting profile goes through the renderers, a round trip and the
 * pprof encoder.
 *
 * Inputs starting with 'L' drive the in-process path's fused step
 * (mp_correlator_apply_heap(): live table and correlator) with raw heap
 * events of any type, function, address, size and flag, as a hostile
 * ring can forge them, between markers; precise or sampled mode by the
 * second byte. A second correlator gets the same stream as the session
 * feeds it, an allocation held for the free that follows it
 * (mp_correlator_apply_temporary()); the two profiles must encode to the
 * same bytes.
 *
 * Inputs starting with 'T' are a prefix tree of call stacks (memprof.proto
 * Profile.stack_*) built from the bytes, parents and indices in and out of
 * range, chains of any depth: what decodes renders, and re-encodes to the
 * same stacks.
 */
#include <stdbool.h>
#include <string.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "correlator.h"
#include "memprof.pb-c.h"
#include "live.h"
#include "chrome.h"
#include "diff.h"
#include "pprof.h"
#include "profile_pb.h"
#include "report.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* memprof diff of @p against an empty profile both ways and against
 * itself, with a limit on every scope, in both formats. */
static void exercise_diff(const struct mp_profile *p, FILE *f)
{
	static const char *const specs[] = { "peak=5%",
					     "kernel:*.peak_added=0",
					     "phase:*.rss=1M",
					     "owner:*.alloc=1%",
					     "tag:*.peak_live=0",
					     "owner:*.peak_share=0",
					     "phase_owner:*.peak_share=1%",
					     "phase_tag:*/weights.peak_share=0" };
	struct mp_diff_limit l[sizeof(specs) / sizeof(specs[0])];
	struct mp_profile *empty = mp_profile_new();
	const char *why;
	uint32_t n = 0;

	for (size_t i = 0; i < sizeof(specs) / sizeof(specs[0]); i++)
		if (mp_diff_limit_parse(specs[i], &l[n], &why) == 0)
			n++;
	for (int way = 0; empty && way < 3; way++) {
		struct mp_diff *d;

		if (mp_diff_new(way ? p : empty, way == 1 ? empty : p, l, n, 3, &d) < 0)
			continue;
		mp_diff_write(d, MP_DIFF_TABLE, "old", "new", f);
		mp_diff_write(d, MP_DIFF_JSON, "old", "new", f);
		mp_diff_free(d);
	}
	for (uint32_t i = 0; i < n; i++)
		mp_diff_limit_release(&l[i]);
	mp_profile_free(empty);
}

static void exercise(struct mp_profile *p)
{
	FILE *f = fopen("/dev/null", "w");
	uint8_t *buf;
	size_t len;

	if (f) {
		mp_report_write(p, MP_REPORT_TABLE, NULL, f);
		mp_report_write(p, MP_REPORT_JSON, NULL, f);
		mp_report_write(p, MP_REPORT_TFJS, NULL, f);
		mp_report_write(p, MP_REPORT_HTML, NULL, f);
		if (p->n_names)
			mp_report_write(p, MP_REPORT_TFJS, p->names[0], f);
		mp_chrome_write(p, f);
		exercise_diff(p, f);
		fclose(f);
	}
	if (mp_profile_encode(p, &buf, &len) == 0)
		free(buf);
	/* Sites, mappings and locations as decoded: the pprof encoder trusts
	 * only validated indices too. */
	if (mp_pprof_encode(p, false, &buf, &len) == 0)
		free(buf);
}

static const char *fuzz_resolve(void *ctx, uint64_t addr)
{
	static const char *paths[] = {
		"/lib/libxnnpack.so.1", "/bin/app", NULL, "", "/", "noslash"
	};

	(void)ctx;
	return paths[addr % 6];
}

static uint64_t rd(const uint8_t *d, int n)
{
	uint64_t v = 0;

	for (int i = 0; i < n; i++)
		v |= (uint64_t)d[i] << (8 * i);
	return v;
}

static const char *fuzz_names[] = { "conv", "gemm", "", "a\"b", "(other)", "load", "weights" };

/* A marker record (pool records too: hostile kinds, reused addresses,
 * huge sizes); now and then a snapshot of the profile so far. */
static void drive_record(struct mp_correlator *c, const uint8_t *d, uint32_t tid, uint64_t v,
			 uint64_t ts)
{
	struct mp_record r = { .type = d[2] % 13 < 9 ? d[2] % 13 :
						       MP_REC_POOL_ALLOC + d[2] % 13 - 9,
			       .flags = d[3],
			       .tid = tid,
			       .rank = d[3] % 12,
			       .ts_ns = ts,
			       .name = fuzz_names[d[2] % 7] };

	for (int i = 0; i < MP_MAX_RANK; i++)
		r.dims[i] = (int64_t)(v * (i + 1));
	r.pool.kind = d[3] % 3;
	r.pool.addr = v % 32;
	r.pool.size = d[3] == 0xff ? v : v >> 48;
	r.pool.caller = rd(d + 2, 2);
	mp_correlator_on_record(c, &r);
	if (d[3] == 0xfe) {
		struct mp_profile *snap = NULL;

		if (mp_correlator_snapshot(c, ts, &snap) == 0) {
			exercise(snap);
			mp_profile_free(snap);
		}
	}
}

struct blocks {
	struct mp_heap_event ev[64];
	unsigned n;
};

/* Allocations (kept to be freed later), frees of them, and heap events
 * of any kind with arbitrary contents. */
static void drive_heap(struct mp_correlator *c, const uint8_t *d, uint32_t tid, uint64_t v,
		       uint64_t ts, struct blocks *b)
{
	struct mp_heap_event ev = { .tid = tid,
				    .ts_ns = ts,
				    .fn = d[3] % 4 == 1 ? MP_FN_CUSTOM : 0 };

	switch (d[0] % 8) {
	case 1:
	case 2:
		ev.kind = MP_HEAP_ALLOC;
		ev.addr = v;
		ev.size = d[2] == 0xff ? v : v % 100000;
		ev.caller = rd(d + 2, 2);
		ev.user = mp_correlator_on_heap(c, &ev);
		if (b->n < 64)
			b->ev[b->n++] = ev;
		break;
	case 3:
	case 4:
		if (b->n) {
			unsigned k = d[2] % b->n;

			ev = b->ev[k];
			ev.kind = MP_HEAP_FREE;
			ev.tid = tid;
			ev.ts_ns = ts;
			if (d[3] == 0xff)
				ev.user = v; /* a bogus stored value */
			mp_correlator_on_heap(c, &ev);
			b->ev[k] = b->ev[--b->n];
		}
		break;
	default:
		ev.kind = d[2] % 5;
		ev.addr = ev.size = ev.user = v;
		if (ev.kind != MP_HEAP_ALLOC)
			mp_correlator_on_heap(c, &ev);
	}
}

static void drive_rss(struct mp_correlator *c, const uint8_t *d, uint32_t tid, uint64_t v,
		      uint64_t ts)
{
	if (d[0] % 8 == 6) {
		struct mp_rss_sample smp = { .ts_ns = ts,
					     .vm_rss = d[2] ? v : UINT64_MAX,
					     .rss_anon = v,
					     .rss_file = v,
					     .rss_shmem = v,
					     .vm_hwm = v,
					     .vm_swap = v,
					     .pss = v };

		mp_correlator_on_rss(c, &smp);
	} else {
		struct mp_rss_stat_event ev = {
			.ts_ns = ts, .tid = tid, .member = d[2] % 6, .value = (int64_t)v
		};

		mp_correlator_on_rss_stat(c, &ev);
	}
}

/* The finished profile is rendered, and what is written must read back. */
static void drive_finish(struct mp_correlator *c, uint64_t ts)
{
	struct mp_profile *p = NULL, *q = NULL;
	uint8_t *buf;
	size_t len;

	if (mp_correlator_finish(c, ts, &p) < 0)
		return;
	exercise(p);
	if (mp_profile_file_encode(p, &buf, &len) == 0) {
		const char *why = NULL;

		if (mp_profile_file_decode(buf, len, &q, &why) != 0) {
			fprintf(stderr, "written profile does not read back: %s\n",
				why ? why : "?");
			abort();
		}
		free(buf);
		mp_profile_free(q);
	}
	mp_profile_free(p);
}

/* 16 bytes per event: op, tid selector, 2 argument bytes, 4-byte timestamp
 * step, 8-byte value. */
static void drive_correlator(const uint8_t *d, size_t n)
{
	struct mp_correlator_opts o = { .resolve_owner = fuzz_resolve,
					.max_invocations = 64,
					.max_rss_points = 8,
					.max_sites = 8 };
	struct blocks blocks = { .n = 0 };
	struct mp_correlator *c;
	uint64_t ts = 1000;

	if (mp_correlator_new(&o, &c) < 0)
		return;
	mp_correlator_add_owner_rule(c, "libxnn*=xnnpack");
	/* heap events of this function are device pool slices */
	mp_correlator_set_fn_pool(c, MP_FN_CUSTOM, "dev", MP_POOL_KIND_DEVICE);
	for (; n >= 16; d += 16, n -= 16) {
		uint32_t tid = d[1] < 0xf0 ? d[1] % 5 : (uint32_t)rd(d + 8, 4);
		uint64_t v = rd(d + 8, 8);

		/* Mostly forward, sometimes backwards in time. */
		ts += (int32_t)rd(d + 4, 4) < 0 ? -(uint64_t)(rd(d + 4, 2)) : rd(d + 4, 2);
		if (d[0] % 8 == 0)
			drive_record(c, d, tid, v, ts);
		else if (d[0] % 8 <= 5)
			drive_heap(c, d, tid, v, ts, &blocks);
		else
			drive_rss(c, d, tid, v, ts);
	}
	drive_finish(c, ts);
	mp_correlator_free(c);
}

/* The session's pairing (heap_record()): an allocation waits for the
 * next event, and goes with it when that is a free. */
struct pairing {
	struct mp_correlator *c;
	struct mp_raw_event held;
	bool holding;
	int err;
};

static void pair_flush(struct pairing *q)
{
	if (q->holding && mp_correlator_apply_heap(q->c, &q->held, 0) < 0)
		q->err = 1;
	q->holding = false;
}

static void pair_heap(struct pairing *q, const struct mp_raw_event *ev)
{
	if (q->holding && ev->type == MP_RAW_FREE) {
		q->holding = false;
		if (mp_correlator_apply_temporary(q->c, &q->held, 0, ev) < 0)
			q->err = 1;
		return;
	}
	pair_flush(q);
	if (ev->type == MP_RAW_ALLOC) {
		q->held = *ev;
		q->holding = true;
	} else if (mp_correlator_apply_heap(q->c, ev, 0) < 0) {
		q->err = 1;
	}
}

/* Both correlators' profiles (snapshots at @ts: @c is finished after),
 * which must encode to the same bytes. */
static void pair_compare(struct mp_correlator *c, struct pairing *q, uint64_t ts)
{
	struct mp_profile *p = NULL, *pq = NULL;
	uint8_t *a = NULL, *b = NULL;
	size_t na = 0, nb = 0;

	pair_flush(q);
	if (mp_correlator_snapshot(c, ts, &p) == 0 && mp_correlator_snapshot(q->c, ts, &pq) == 0 &&
	    !q->err && mp_profile_encode(p, &a, &na) == 0 && mp_profile_encode(pq, &b, &nb) == 0 &&
	    (na != nb || memcmp(a, b, na) != 0)) {
		fprintf(stderr, "a temporary allocation in one step changed the profile\n");
		abort();
	}
	free(a);
	free(b);
	mp_profile_free(p);
	mp_profile_free(pq);
}

/* 16 bytes per event: op, tid selector, fn, flags, 4-byte timestamp step,
 * 8-byte value (address, size and the old address are drawn from it). */
static void drive_fused(const uint8_t *d, size_t n)
{
	struct mp_correlator_opts o = { .resolve_owner = fuzz_resolve,
					.max_invocations = 64,
					.max_sites = 8,
					.sample_bytes = n && d[0] & 1 ? 4096 : 0 };
	struct pairing q = { 0 };
	struct mp_correlator *c;
	uint64_t ts = 1000;

	if (mp_correlator_new(&o, &c) < 0)
		return;
	if (mp_correlator_new(&o, &q.c) < 0) {
		mp_correlator_free(c);
		return;
	}
	mp_correlator_set_fn_pool(c, MP_FN_CUSTOM, "dev", MP_POOL_KIND_DEVICE);
	mp_correlator_set_fn_pool(q.c, MP_FN_CUSTOM, "dev", MP_POOL_KIND_DEVICE);
	for (d += n ? 1 : 0, n -= n ? 1 : 0; n >= 16; d += 16, n -= 16) {
		uint32_t tid = d[1] % 5;
		uint64_t v = rd(d + 8, 8);

		ts += rd(d + 4, 2);
		if (d[0] % 8 == 0) {
			drive_record(c, d, tid, v, ts);
			pair_flush(&q);
			drive_record(q.c, d, tid, v, ts);
		} else {
			/* addresses from a small set, so that frees, reallocs
			 * and brk moves meet live blocks */
			struct mp_raw_event ev = {
				.type = d[0] % 8 == 7 ? d[0] >> 3 : d[0] % 4,
				.fn = d[2] % 40 | (d[3] & 1 ? MP_LIVE_FN_SCALED : 0),
				.pid = 1,
				.tid = tid,
				.ts_ns = ts,
				.addr = d[3] & 2 ? v : (v & 0x3f) << 6,
				.size = d[3] & 4 ? v : v >> 48,
				.old_addr = d[3] & 8 ? v >> 8 : (v >> 8 & 0x3f) << 6,
				.caller = rd(d + 2, 2),
			};

			/* stack 0: a stack id is the daemon's own (its stack
			 * table's, never the target's), and this profile has
			 * no stack table for one to refer to */
			if (mp_correlator_apply_heap(c, &ev, 0) < 0)
				break;
			pair_heap(&q, &ev);
		}
	}
	pair_compare(c, &q, ts);
	drive_finish(c, ts);
	mp_correlator_free(c);
	mp_correlator_free(q.c);
}

/* The stacks of @p and @q are the same. */
static void same_stacks(const struct mp_profile *p, const struct mp_profile *q)
{
	if (p->n_stacks != q->n_stacks)
		abort();
	for (uint32_t i = 0; i < p->n_stacks; i++)
		if (p->stacks[i].n_frames != q->stacks[i].n_frames ||
		    p->stacks[i].flags != q->stacks[i].flags ||
		    memcmp(p->stacks[i].frames, q->stacks[i].frames,
			   p->stacks[i].n_frames * sizeof(uint64_t)))
			abort();
}

#define TREE_MAX 512

/* 3 bytes per node (up, address index, whether a stack ends there and
 * with which flag), the addresses from the last bytes. */
static void drive_tree(const uint8_t *d, size_t n)
{
	static uint32_t up[TREE_MAX], node_addrs[TREE_MAX], leaves[TREE_MAX];
	static uint64_t addrs[8];
	Memprof__Profile m = MEMPROF__PROFILE__INIT;
	struct mp_profile *p = NULL, *q = NULL;
	size_t nodes = n / 3 < TREE_MAX ? n / 3 : TREE_MAX, len;
	uint8_t *buf;

	for (size_t i = 0; i < 8; i++)
		addrs[i] = n > i ? (uint64_t)d[n - 1 - i] << (i * 5) : i;
	m.format_version = MP_PROFILE_FORMAT_STACK_TREE;
	m.n_stack_addrs = n ? d[0] % 9 : 0;
	m.stack_addrs = addrs;
	for (size_t i = 0; i < nodes; i++) {
		const uint8_t *b = d + 3 * i;

		/* mostly a parent just before: deep chains */
		up[i] = b[0] < 0xc0 ? 1 + b[0] % 4 : b[0] - 0xc0;
		node_addrs[i] = b[1] % 9;
		if (b[2] & 1)
			leaves[m.n_stack_leaves++] =
				b[2] >> 1 ? (uint32_t)(i + 1) << 1 | (b[2] >> 1 & 1) : b[2];
	}
	m.n_stack_node_up = m.n_stack_node_addrs = nodes;
	m.stack_node_up = up;
	m.stack_node_addrs = node_addrs;
	m.stack_leaves = leaves;
	len = memprof__profile__get_packed_size(&m);
	buf = malloc(len ? len : 1);
	if (!buf)
		return;
	memprof__profile__pack(&m, buf);
	if (mp_profile_decode(buf, len, &p, NULL) == 0) {
		exercise(p);
		free(buf);
		buf = NULL;
		if (mp_profile_encode(p, &buf, &len) == 0) {
			if (mp_profile_decode(buf, len, &q, NULL) != 0)
				abort();
			same_stacks(p, q);
		}
	}
	free(buf);
	mp_profile_free(q);
	mp_profile_free(p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct mp_profile *p = NULL;

	if (size && data[0] == 'C') {
		drive_correlator(data + 1, size - 1);
		return 0;
	}
	if (size && data[0] == 'L') {
		drive_fused(data + 1, size - 1);
		return 0;
	}
	if (size && data[0] == 'T') {
		drive_tree(data + 1, size - 1);
		return 0;
	}

	/* Both framings: the file (header + message) and a bare message. */
	if (mp_profile_file_decode(data, size, &p, NULL) == 0) {
		exercise(p);
		mp_profile_free(p);
	}
	p = NULL;
	if (mp_profile_decode(data, size, &p, NULL) == 0) {
		exercise(p);
		mp_profile_free(p);
	}
	return 0;
}
