/* SPDX-License-Identifier: MIT */
/*
 * Test helpers: a synthetic event stream (one nanosecond per event, so
 * every kernel is far shorter than a microsecond) and deep comparisons of
 * whole model objects.
 */
#ifndef MP_TEST_PROFILE_HELPERS_H
#define MP_TEST_PROFILE_HELPERS_H

#include <criterion/criterion.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "correlator.h"
#include "profile.h"
#include "report.h"

#define UNUSED __attribute__((unused))

struct stream {
	struct mp_correlator *c;
	uint64_t ts;
	uint64_t next_addr;
	/* Per-thread record numbers, as the ring gives them (consecutive:
	 * a gap means lost records). */
	uint32_t seq_tid[64], seq[64];
	uint32_t n_seq;
};

/* The next record number of @tid. */
static UNUSED uint32_t next_seq(struct stream *s, uint32_t tid)
{
	for (uint32_t i = 0; i < s->n_seq; i++)
		if (s->seq_tid[i] == tid)
			return ++s->seq[i];
	cr_assert_lt(s->n_seq, 64, "too many threads for the test stream");
	s->seq_tid[s->n_seq] = tid;
	s->seq[s->n_seq] = 1;
	return s->seq[s->n_seq++];
}

struct block {
	uint64_t addr, size, caller, ts, user;
	uint32_t tid;
};

static UNUSED void stream_init(struct stream *s, const struct mp_correlator_opts *o)
{
	struct mp_correlator_opts opts = { 0 };

	if (o)
		opts = *o;
	if (!opts.begin_ns)
		opts.begin_ns = 1000;
	*s = (struct stream){ .ts = 1000, .next_addr = 0x10000 };
	cr_assert_eq(mp_correlator_new(&opts, &s->c), 0);
}

static UNUSED uint64_t tick(struct stream *s)
{
	return ++s->ts;
}

static UNUSED void rec(struct stream *s, uint32_t type, uint32_t tid, const char *name,
		       uint32_t flags)
{
	struct mp_record r = { .type = type,
			       .flags = flags,
			       .tid = tid,
			       .ts_ns = tick(s),
			       .name = name,
			       .seq = next_seq(s, tid) };

	cr_assert_eq(mp_correlator_on_record(s->c, &r), 0);
}

static UNUSED void kbegin(struct stream *s, uint32_t tid, const char *name)
{
	rec(s, MP_REC_KERNEL_BEGIN, tid, name, 0);
}

static UNUSED void kend(struct stream *s, uint32_t tid)
{
	rec(s, MP_REC_KERNEL_END, tid, NULL, 0);
}

static UNUSED void phase(struct stream *s, const char *name)
{
	rec(s, MP_REC_PHASE, 1, name, 0);
}

static UNUSED void tag_begin(struct stream *s, uint32_t tid, const char *name)
{
	rec(s, MP_REC_TAG_BEGIN, tid, name, 0);
}

static UNUSED void tag_end(struct stream *s, uint32_t tid)
{
	rec(s, MP_REC_TAG_END, tid, NULL, 0);
}

/* shape(s, tid, input, rank, d0, d1, ...) */
static UNUSED void shape(struct stream *s, uint32_t tid, bool input, uint32_t rank, ...)
{
	struct mp_record r = {
		.type = input ? MP_REC_INPUT_SHAPE : MP_REC_OUTPUT_SHAPE,
		.tid = tid,
		.rank = rank,
		.ts_ns = tick(s),
		.seq = next_seq(s, tid),
	};
	va_list ap;

	va_start(ap, rank);
	for (uint32_t i = 0; i < rank; i++)
		r.dims[i] = va_arg(ap, int64_t);
	va_end(ap);
	cr_assert_eq(mp_correlator_on_record(s->c, &r), 0);
}

static UNUSED struct block alloc_from(struct stream *s, uint32_t tid, uint64_t size,
				      uint64_t caller)
{
	struct mp_heap_event ev = {
		.kind = MP_HEAP_ALLOC,
		.fn = MP_FN_MALLOC,
		.tid = tid,
		.ts_ns = tick(s),
		.addr = s->next_addr,
		.size = size,
		.caller = caller,
	};
	struct block b = {
		.addr = ev.addr, .size = size, .caller = caller, .ts = ev.ts_ns, .tid = tid
	};

	s->next_addr += 0x1000;
	b.user = mp_correlator_on_heap(s->c, &ev);
	return b;
}

static UNUSED struct block alloc(struct stream *s, uint32_t tid, uint64_t size)
{
	return alloc_from(s, tid, size, 0);
}

static UNUSED void release(struct stream *s, uint32_t tid, const struct block *b)
{
	struct mp_heap_event ev = {
		.kind = MP_HEAP_FREE,
		.fn = MP_FN_FREE,
		.tid = tid,
		.alloc_tid = b->tid,
		.ts_ns = tick(s),
		.addr = b->addr,
		.size = b->size,
		.alloc_ts_ns = b->ts,
		.alloc_caller = b->caller,
		.user = b->user,
	};

	mp_correlator_on_heap(s->c, &ev);
}

static UNUSED void unknown_free(struct stream *s, uint32_t tid, uint64_t addr)
{
	struct mp_heap_event ev = {
		.kind = MP_HEAP_UNKNOWN_FREE,
		.fn = MP_FN_FREE,
		.tid = tid,
		.ts_ns = tick(s),
		.addr = addr,
	};

	mp_correlator_on_heap(s->c, &ev);
}

static UNUSED struct mp_profile *finish(struct stream *s)
{
	struct mp_profile *p = NULL;

	cr_assert_eq(mp_correlator_finish(s->c, tick(s), &p), 0);
	mp_correlator_free(s->c);
	s->c = NULL;
	return p;
}

/* Renders @p and returns the text (caller frees). */
static UNUSED char *render(const struct mp_profile *p, enum mp_report_format fmt,
			   const char *region)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	cr_assert_not_null(f);
	cr_assert_eq(mp_report_write(p, fmt, region, f), 0);
	cr_assert_eq(fclose(f), 0);
	return buf;
}

/* Asserts that @p's report in @fmt holds every string of the list. */
#define assert_report_has(p, fmt, ...) \
	assert_report_has_all((p), (fmt), (const char *const[]){ __VA_ARGS__, NULL })

static UNUSED void assert_report_has_all(const struct mp_profile *p, enum mp_report_format fmt,
					 const char *const *want)
{
	char *txt = render(p, fmt, NULL);

	for (; *want; want++)
		cr_assert_not_null(strstr(txt, *want), "no \"%s\" in the report:\n%s", *want, txt);
	free(txt);
}

/* Asserts the sampled-mode errors of kernel @k's peaks and of owner @o's
 * peak: each positive where blocks were sampled (@sampled), each 0 in
 * exact mode. */
static UNUSED void assert_peak_errors(const struct mp_kernel *k, const struct mp_pool *o,
				      bool sampled)
{
	const struct {
		const char *name;
		double value;
	} e[] = {
		{ "kernel peak_var", k->peak_var },
		{ "kernel peak_added_var", k->peak_added_var },
		{ "kernel peak_added_bias_bound", k->peak_added_bias_bound },
		{ "owner peak_var", o->peak_var },
		{ "owner peak_bias_bound", o->peak_bias_bound },
	};

	for (size_t i = 0; i < sizeof(e) / sizeof(e[0]); i++) {
		if (sampled)
			cr_assert_gt(e[i].value, 0, "%s %g, sampled", e[i].name, e[i].value);
		else
			cr_assert_eq(e[i].value, 0, "%s %g, exact", e[i].name, e[i].value);
	}
}

/* ---- deep comparison of model objects ---- */

#define EQ(path, field, got, want)                                                            \
	cr_expect_eq((got)->field, (want)->field, "%s.%s: got %lld, want %lld", path, #field, \
		     (long long)(got)->field, (long long)(want)->field)

static UNUSED void expect_str_eq(const char *path, const char *got, const char *want)
{
	if (!got || !want)
		cr_expect(got == want, "%s: got %s, want %s", path, got ? got : "NULL",
			  want ? want : "NULL");
	else
		cr_expect_str_eq(got, want, "%s: got \"%s\", want \"%s\"", path, got, want);
}

static UNUSED void expect_mem_eq(const char *path, const struct mp_mem_stats *g,
				 const struct mp_mem_stats *w)
{
	EQ(path, bytes_added, g, w);
	EQ(path, tensors_added, g, w);
	EQ(path, alloc_bytes, g, w);
	EQ(path, alloc_count, g, w);
	EQ(path, free_bytes, g, w);
	EQ(path, free_count, g, w);
}

static UNUSED void expect_maps_eq(const char *path, const struct mp_map_stats *g,
				  const struct mp_map_stats *w)
{
	EQ(path, alloc_bytes, g, w);
	EQ(path, alloc_count, g, w);
	EQ(path, free_bytes, g, w);
	EQ(path, free_count, g, w);
	EQ(path, live_bytes, g, w);
	EQ(path, peak_bytes, g, w);
}

static UNUSED void expect_shapes_eq(const char *path, const struct mp_shape *g, uint32_t ng,
				    const struct mp_shape *w, uint32_t nw)
{
	cr_expect_eq(ng, nw, "%s: %u shapes, want %u", path, ng, nw);
	for (uint32_t i = 0; i < ng && i < nw; i++) {
		cr_expect_eq(g[i].rank, w[i].rank, "%s[%u].rank", path, i);
		for (uint32_t d = 0; d < g[i].rank && d < MP_MAX_RANK; d++)
			cr_expect_eq(g[i].dims[d], w[i].dims[d], "%s[%u].dims[%u]: %lld want %lld",
				     path, i, d, (long long)g[i].dims[d], (long long)w[i].dims[d]);
	}
}

static UNUSED void expect_buckets_eq(const char *path, const struct mp_bucket *g, uint32_t ng,
				     const struct mp_bucket *w, uint32_t nw)
{
	char sub[256];

	cr_expect_eq(ng, nw, "%s: %u buckets, want %u", path, ng, nw);
	for (uint32_t i = 0; i < ng && i < nw; i++) {
		snprintf(sub, sizeof(sub), "%s[%u]", path, i);
		EQ(sub, id, &g[i], &w[i]);
		EQ(sub, alloc_bytes, &g[i], &w[i]);
		EQ(sub, alloc_count, &g[i], &w[i]);
		EQ(sub, free_bytes, &g[i], &w[i]);
		EQ(sub, free_count, &g[i], &w[i]);
	}
}

static UNUSED void expect_inv_eq(const char *path, const struct mp_invocation *g,
				 const struct mp_invocation *w)
{
	char sub[256];

	EQ(path, name, g, w);
	EQ(path, tid, g, w);
	EQ(path, parent, g, w);
	EQ(path, depth, g, w);
	EQ(path, phase, g, w);
	EQ(path, flags, g, w);
	EQ(path, begin_ns, g, w);
	EQ(path, end_ns, g, w);
	snprintf(sub, sizeof(sub), "%s.incl", path);
	expect_mem_eq(sub, &g->incl, &w->incl);
	snprintf(sub, sizeof(sub), "%s.excl", path);
	expect_mem_eq(sub, &g->excl, &w->excl);
	EQ(path, total_bytes_snapshot, g, w);
	EQ(path, total_tensors_snapshot, g, w);
	EQ(path, peak_bytes, g, w);
	EQ(path, peak_added, g, w);
	EQ(path, retained_bytes, g, w);
	EQ(path, retained_count, g, w);
	EQ(path, cross_thread_allocs, g, w);
	EQ(path, cross_thread_bytes, g, w);
	EQ(path, rss_begin, g, w);
	EQ(path, rss_end, g, w);
	EQ(path, rss_exact_incl, g, w);
	EQ(path, rss_exact_excl, g, w);
	snprintf(sub, sizeof(sub), "%s.inputs", path);
	expect_shapes_eq(sub, g->inputs, g->n_inputs, w->inputs, w->n_inputs);
	snprintf(sub, sizeof(sub), "%s.outputs", path);
	expect_shapes_eq(sub, g->outputs, g->n_outputs, w->outputs, w->n_outputs);
	snprintf(sub, sizeof(sub), "%s.owners", path);
	expect_buckets_eq(sub, g->owners, g->n_owners, w->owners, w->n_owners);
	snprintf(sub, sizeof(sub), "%s.tags", path);
	expect_buckets_eq(sub, g->tags, g->n_tags, w->tags, w->n_tags);
	snprintf(sub, sizeof(sub), "%s.maps", path);
	expect_maps_eq(sub, &g->maps, &w->maps);
}

static UNUSED void expect_kernel_eq(const char *path, const struct mp_kernel *g,
				    const struct mp_kernel *w)
{
	char sub[256];

	EQ(path, name, g, w);
	EQ(path, calls, g, w);
	EQ(path, total_ns, g, w);
	EQ(path, min_ns, g, w);
	EQ(path, max_ns, g, w);
	snprintf(sub, sizeof(sub), "%s.incl", path);
	expect_mem_eq(sub, &g->incl, &w->incl);
	snprintf(sub, sizeof(sub), "%s.excl", path);
	expect_mem_eq(sub, &g->excl, &w->excl);
	EQ(path, peak_bytes, g, w);
	EQ(path, peak_added, g, w);
	EQ(path, retained_bytes, g, w);
	EQ(path, retained_count, g, w);
	EQ(path, cross_thread_allocs, g, w);
	EQ(path, cross_thread_bytes, g, w);
	EQ(path, rss_delta_sum, g, w);
	EQ(path, rss_calls, g, w);
	EQ(path, rss_exact_incl, g, w);
	EQ(path, rss_exact_excl, g, w);
	EQ(path, open_at_attach, g, w);
	EQ(path, truncated, g, w);
	EQ(path, markers_lost, g, w);
	snprintf(sub, sizeof(sub), "%s.owners", path);
	expect_buckets_eq(sub, g->owners, g->n_owners, w->owners, w->n_owners);
	snprintf(sub, sizeof(sub), "%s.tags", path);
	expect_buckets_eq(sub, g->tags, g->n_tags, w->tags, w->n_tags);
	snprintf(sub, sizeof(sub), "%s.maps", path);
	expect_maps_eq(sub, &g->maps, &w->maps);
}

static UNUSED void expect_phase_eq(const char *path, const struct mp_phase *g,
				   const struct mp_phase *w)
{
	char sub[256];

	snprintf(sub, sizeof(sub), "%s.name", path);
	expect_str_eq(sub, g->name, w->name);
	EQ(path, first_ns, g, w);
	EQ(path, duration_ns, g, w);
	EQ(path, entries, g, w);
	snprintf(sub, sizeof(sub), "%s.mem", path);
	expect_mem_eq(sub, &g->mem, &w->mem);
	EQ(path, peak_bytes, g, w);
	EQ(path, rss_peak, g, w);
	snprintf(sub, sizeof(sub), "%s.maps", path);
	expect_maps_eq(sub, &g->maps, &w->maps);
}

static UNUSED void expect_pool_eq(const char *path, const struct mp_pool *g,
				  const struct mp_pool *w)
{
	char sub[256];

	snprintf(sub, sizeof(sub), "%s.name", path);
	expect_str_eq(sub, g->name, w->name);
	snprintf(sub, sizeof(sub), "%s.mem", path);
	expect_mem_eq(sub, &g->mem, &w->mem);
	EQ(path, live_bytes, g, w);
	EQ(path, live_count, g, w);
	EQ(path, peak_bytes, g, w);
	snprintf(sub, sizeof(sub), "%s.maps", path);
	expect_maps_eq(sub, &g->maps, &w->maps);
}

static UNUSED void expect_rss_point_eq(const char *path, const struct mp_rss_point *g,
				       const struct mp_rss_point *w)
{
	EQ(path, ts_ns, g, w);
	EQ(path, vm_rss, g, w);
	EQ(path, rss_anon, g, w);
	EQ(path, rss_file, g, w);
	EQ(path, rss_shmem, g, w);
	EQ(path, vm_swap, g, w);
	EQ(path, pss, g, w);
	EQ(path, heap_live, g, w);
	EQ(path, maps_live, g, w);
}

static UNUSED void expect_site_eq(const char *path, const struct mp_site *g,
				  const struct mp_site *w)
{
	EQ(path, caller, g, w);
	EQ(path, name, g, w);
	EQ(path, phase, g, w);
	EQ(path, owner, g, w);
	EQ(path, tid, g, w);
	EQ(path, alloc_objects, g, w);
	EQ(path, alloc_space, g, w);
	EQ(path, inuse_objects, g, w);
	EQ(path, inuse_space, g, w);
	EQ(path, pool, g, w);
	EQ(path, flags, g, w);
	EQ(path, error_space, g, w);
}

/* expect_site_eq() and the figures at the peak. */
static UNUSED void expect_site_peak_eq(const char *path, const struct mp_site *g,
				       const struct mp_site *w)
{
	expect_site_eq(path, g, w);
	EQ(path, peak_objects, g, w);
	EQ(path, peak_space, g, w);
}

static UNUSED void expect_object_eq(const char *path, const struct mp_object *g,
				    const struct mp_object *w)
{
	char sub[256];

	EQ(path, start, g, w);
	EQ(path, limit, g, w);
	EQ(path, file_offset, g, w);
	snprintf(sub, sizeof(sub), "%s.path", path);
	expect_str_eq(sub, g->path, w->path);
	snprintf(sub, sizeof(sub), "%s.build_id", path);
	expect_str_eq(sub, g->build_id, w->build_id);
	EQ(path, flags, g, w);
}

static UNUSED void expect_location_eq(const char *path, const struct mp_location *g,
				      const struct mp_location *w)
{
	char sub[256];

	EQ(path, addr, g, w);
	EQ(path, object, g, w);
	EQ(path, rel_addr, g, w);
	snprintf(sub, sizeof(sub), "%s.function", path);
	expect_str_eq(sub, g->function, w->function);
	snprintf(sub, sizeof(sub), "%s.file", path);
	expect_str_eq(sub, g->file, w->file);
	EQ(path, line, g, w);
}

static UNUSED void expect_exec_eq(const char *path, const struct mp_exec *g,
				  const struct mp_exec *w)
{
	char sub[256];

	EQ(path, ts_ns, g, w);
	EQ(path, tid, g, w);
	EQ(path, kernels_closed, g, w);
	snprintf(sub, sizeof(sub), "%s.path", path);
	expect_str_eq(sub, g->path, w->path);
}

#define EXPECT_ARRAY(path, got, ngot, want, nwant, fn)                                           \
	do {                                                                                     \
		char sub_[256];                                                                  \
		cr_expect_eq((ngot), (nwant), "%s: %u entries, want %u", path, (unsigned)(ngot), \
			     (unsigned)(nwant));                                                 \
		for (uint32_t i_ = 0; i_ < (ngot) && i_ < (nwant); i_++) {                       \
			snprintf(sub_, sizeof(sub_), "%s[%u]", path, i_);                        \
			fn(sub_, &(got)[i_], &(want)[i_]);                                       \
		}                                                                                \
	} while (0)

static UNUSED void expect_peak_part_eq(const char *path, const struct mp_peak_part *g,
				       const struct mp_peak_part *w)
{
	EQ(path, id, g, w);
	EQ(path, bytes, g, w);
}

/* Who held the peaks: the owners' and tags' bytes at the process peak and
 * each phase's breakdown. */
static UNUSED void expect_peak_parts_eq(const struct mp_profile *g, const struct mp_profile *w)
{
	char sub[256];

	cr_expect_eq(g->peak_parts, w->peak_parts, "profile.peak_parts");
	for (uint32_t i = 0; i < g->n_owners && i < w->n_owners; i++)
		cr_expect_eq(g->owners[i].peak_share, w->owners[i].peak_share,
			     "owners[%u].peak_share: got %llu, want %llu", i,
			     (unsigned long long)g->owners[i].peak_share,
			     (unsigned long long)w->owners[i].peak_share);
	for (uint32_t i = 0; i < g->n_tags && i < w->n_tags; i++)
		cr_expect_eq(g->tags[i].peak_share, w->tags[i].peak_share,
			     "tags[%u].peak_share: got %llu, want %llu", i,
			     (unsigned long long)g->tags[i].peak_share,
			     (unsigned long long)w->tags[i].peak_share);
	for (uint32_t i = 0; i < g->n_phases && i < w->n_phases; i++) {
		const struct mp_phase *gp = &g->phases[i], *wp = &w->phases[i];

		snprintf(sub, sizeof(sub), "phases[%u].peak_owners", i);
		EXPECT_ARRAY(sub, gp->peak_owners, gp->n_peak_owners, wp->peak_owners,
			     wp->n_peak_owners, expect_peak_part_eq);
		snprintf(sub, sizeof(sub), "phases[%u].peak_tags", i);
		EXPECT_ARRAY(sub, gp->peak_tags, gp->n_peak_tags, wp->peak_tags, wp->n_peak_tags,
			     expect_peak_part_eq);
	}
}

/* Every field of the whole profile. */
static UNUSED void expect_profile_eq(const struct mp_profile *g, const struct mp_profile *w)
{
	const char *path = "profile";

	EQ(path, format_version, g, w);
	EQ(path, pid, g, w);
	expect_str_eq("profile.exe", g->exe, w->exe);
	expect_str_eq("profile.build_id", g->build_id, w->build_id);
	expect_str_eq("profile.cmdline", g->cmdline, w->cmdline);
	EQ(path, clock, g, w);
	EQ(path, rss_interval_ns, g, w);
	EQ(path, pss_interval_ns, g, w);
	EQ(path, rss_exact, g, w);
	EQ(path, trace_mode, g, w);
	EQ(path, sample_bytes, g, w);
	EQ(path, duty_on_ns, g, w);
	EQ(path, duty_period_ns, g, w);
	EQ(path, duty_active_ns, g, w);
	EQ(path, begin_ns, g, w);
	EQ(path, end_ns, g, w);
	expect_mem_eq("profile.mem", &g->mem, &w->mem);
	EQ(path, peak_bytes, g, w);
	EQ(path, peak_tensors, g, w);
	expect_maps_eq("profile.maps", &g->maps, &w->maps);
	EQ(path, maps_resident_peak, g, w);
	EQ(path, maps_recorded, g, w);
	EQ(path, unknown_frees, g, w);
	EQ(path, unmatched_ends, g, w);
	EQ(path, unmatched_tag_ends, g, w);
	EQ(path, orphan_shapes, g, w);
	EQ(path, drops_ring, g, w);
	EQ(path, drops_bpf, g, w);
	EQ(path, invocations_dropped, g, w);
	EQ(path, dropped_markers, g, w);
	EQ(path, accounting_errors, g, w);
	EQ(path, truncated, g, w);
	EQ(path, rss_exact_unattributed, g, w);
	EQ(path, marker_gaps, g, w);
	EQ(path, corruption, g, w);
	EQ(path, exec_count, g, w);
	EXPECT_ARRAY("profile.execs", g->execs, g->n_execs, w->execs, w->n_execs, expect_exec_eq);
	cr_expect_eq(g->n_names, w->n_names, "profile.n_names: %u want %u", g->n_names, w->n_names);
	for (uint32_t i = 0; i < g->n_names && i < w->n_names; i++)
		expect_str_eq("profile.names[]", g->names[i], w->names[i]);
	EXPECT_ARRAY("profile.invocations", g->invocations, g->n_invocations, w->invocations,
		     w->n_invocations, expect_inv_eq);
	EXPECT_ARRAY("profile.kernels", g->kernels, g->n_kernels, w->kernels, w->n_kernels,
		     expect_kernel_eq);
	EXPECT_ARRAY("profile.phases", g->phases, g->n_phases, w->phases, w->n_phases,
		     expect_phase_eq);
	EXPECT_ARRAY("profile.owners", g->owners, g->n_owners, w->owners, w->n_owners,
		     expect_pool_eq);
	EXPECT_ARRAY("profile.tags", g->tags, g->n_tags, w->tags, w->n_tags, expect_pool_eq);
	expect_peak_parts_eq(g, w);
	EXPECT_ARRAY("profile.rss", g->rss, g->n_rss, w->rss, w->n_rss, expect_rss_point_eq);
	EQ(path, rss_stride, g, w);
	EQ(path, rss_samples, g, w);
	EQ(path, rss_peak, g, w);
	EQ(path, vm_hwm, g, w);
	EXPECT_ARRAY("profile.sites", g->sites, g->n_sites, w->sites, w->n_sites,
		     expect_site_peak_eq);
	EQ(path, sites_dropped, g, w);
	EXPECT_ARRAY("profile.objects", g->objects, g->n_objects, w->objects, w->n_objects,
		     expect_object_eq);
	EXPECT_ARRAY("profile.locations", g->locations, g->n_locations, w->locations,
		     w->n_locations, expect_location_eq);
}

#define SHAPE(...)                                                                      \
	{                                                                               \
		.rank = sizeof((int64_t[]){ __VA_ARGS__ }) / sizeof(int64_t), .dims = { \
			__VA_ARGS__                                                     \
		}                                                                       \
	}

/* The pools a correlator starts with. */
#define POOL_UNKNOWN_EMPTY          \
	{                           \
		.name = "(unknown)" \
	}
#define POOL_UNTAGGED_EMPTY          \
	{                            \
		.name = "(untagged)" \
	}

#endif /* MP_TEST_PROFILE_HELPERS_H */
