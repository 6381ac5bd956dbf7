/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "html.h"
#include "json.h"
#include "rank.h"
#include "text.h"

/* daemon/output/html/report.{js,css}, embedded by embed.py at build time. */
extern const char mp_html_js[];
extern const char mp_html_css[];

/* A profile read from a file may carry any index: never trust one. */
static const char *name_of(const struct mp_profile *p, uint32_t id)
{
	return id < p->n_names ? p->names[id] : "(invalid)";
}

static uint64_t stderr_of(double var)
{
	return var > 0 && isfinite(var) ? (uint64_t)llround(sqrt(var)) : 0;
}

static uint64_t bytes_of(double v)
{
	return v > 0 && isfinite(v) && v < 1.8e19 ? (uint64_t)llround(v) : 0;
}

/* As the table: a sampled profile written before the errors were recorded
 * shows its figures without ±, not as exact. */
static bool has_stderr(const struct mp_profile *p)
{
	return p->trace_mode == MP_TRACE_SAMPLED &&
	       (p->peak_bias_bound > 0 || p->mem.alloc_var > 0 || p->peak_var > 0);
}

/* Times on the page are nanoseconds from the attach (negative for a kernel
 * open at attach), so they stay exact in a double. */
static int64_t rel(const struct mp_profile *p, uint64_t t)
{
	return (int64_t)(t - p->begin_ns);
}

static void opt_u64(struct mp_json *j, const char *key, uint64_t v)
{
	if (v == MP_UNKNOWN)
		mp_json_null(j, key);
	else
		mp_json_u64(j, key, v);
}

/* A holder's mapping figures: bytes mapped, reserved peak and reserved live
 * at the end; null in a file written before mappings were recorded
 * (unknown, never 0). */
static void maps_fields(struct mp_json *j, const struct mp_profile *p, const struct mp_map_stats *m)
{
	if (!p->maps_recorded) {
		mp_json_null(j, "mapsAlloc");
		mp_json_null(j, "mapsPeak");
		mp_json_null(j, "mapsLive");
		return;
	}
	mp_json_u64(j, "mapsAlloc", m->alloc_bytes);
	mp_json_u64(j, "mapsPeak", m->peak_bytes);
	mp_json_u64(j, "mapsLive", m->live_bytes);
}

/* ---- flags: what the reader must know before trusting a figure ---- */

static void flag(struct mp_json *j, const char *level, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void flag(struct mp_json *j, const char *level, const char *fmt, ...)
{
	char text[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	mp_json_array_begin(j, NULL);
	mp_json_str(j, NULL, level);
	mp_json_str(j, NULL, text);
	mp_json_array_end(j);
}

static void flags_drops(struct mp_json *j, const struct mp_profile *p)
{
	if (p->drops_ring)
		flag(j, "warn",
		     "%" PRIu64
		     " kernel markers were dropped because the process's marker ring was "
		     "full: some kernels are missing or incomplete.",
		     p->drops_ring);
	if (p->drops_bpf)
		flag(j, "warn",
		     "%" PRIu64
		     " allocator events were lost (the BPF ring buffer was full: %" PRIu64
		     " allocations, %" PRIu64 " frees, %" PRIu64 " reallocs): %s.",
		     p->drops_bpf, p->drops_bpf_allocs, p->drops_bpf_frees, p->drops_bpf_reallocs,
		     mp_profile_heap_bound_text(p));
	if (p->drops_heap)
		flag(j, "warn", "%" PRIu64 " heap records were dropped in the process: %s.",
		     p->drops_heap, mp_profile_heap_bound_text(p));
	if (p->unseen_objects)
		flag(j, "warn",
		     "%" PRIu64 " object(s) call the allocator past the interposer, so their "
		     "blocks are in no figure%s%s.",
		     p->unseen_objects, p->n_unseen_names ? ", first: " : "",
		     p->n_unseen_names ? p->unseen_names[0] : "");
	if (p->invocations_dropped)
		flag(j, "warn",
		     "%" PRIu64
		     " kernel invocations came after the limit of invocations kept: they "
		     "count in the kernel table but are not on the timeline or in regions.",
		     p->invocations_dropped);
	if (p->dropped_markers)
		flag(j, "warn",
		     "%" PRIu64 " markers passed a limit (nesting depth, kernel names, shapes, "
		     "phases, owners or tags) and were not recorded as such.",
		     p->dropped_markers);
	if (p->sites_dropped)
		flag(j, "warn",
		     "%" PRIu64 " allocations are in \"(other sites)\", from the sites with the "
		     "fewest bytes, evicted at the limit of allocation sites: they are missing "
		     "from the flame graphs but count in every other figure.",
		     p->sites_dropped);
	if (p->stacks_dropped)
		flag(j, "warn",
		     "%" PRIu64 " allocations have no call stack (the stack table was full): the "
		     "flame graphs show their caller alone.",
		     p->stacks_dropped);
	if (p->stream_chunks_lost)
		flag(j, "warn", "%" PRIu64 " profile chunks were not delivered to a collector.",
		     p->stream_chunks_lost);
}

static void flags_markers(struct mp_json *j, const struct mp_profile *p)
{
	uint64_t lost = 0;

	for (uint32_t i = 0; i < p->n_kernels; i++)
		lost += p->kernels[i].markers_lost;
	if (p->marker_gaps || lost)
		flag(j, "warn",
		     "Markers were lost %" PRIu64 " times (gaps in a thread's records): %" PRIu64
		     " invocations are left out of the kernel figures.",
		     p->marker_gaps, lost);
	if (p->corruption)
		flag(j, "warn",
		     "The process's marker ring was corrupted (%s%s%s): the kernel figures are "
		     "incomplete; the heap and RSS figures are not affected.",
		     p->corruption & MP_CORRUPT_RING_HEADER ? "impossible header counters; " : "",
		     p->corruption & MP_CORRUPT_RING_RECORDS ? "a record failed validation; " : "",
		     p->corruption & MP_CORRUPT_RING_OPEN ? "refused at attach; " : "");
	if (p->truncated)
		flag(j, "warn",
		     "The profile ended while a kernel was open: it was closed at the end of the "
		     "profile and is marked truncated.");
	if (p->unmatched_ends || p->unmatched_tag_ends)
		flag(j, "warn",
		     "%" PRIu64 " kernel ends and %" PRIu64
		     " tag ends had no matching begin and were ignored.",
		     p->unmatched_ends, p->unmatched_tag_ends);
	if (p->orphan_shapes)
		flag(j, "note", "%" PRIu64 " shapes were recorded while no kernel was open.",
		     p->orphan_shapes);
	if (p->accounting_errors)
		flag(j, "warn",
		     "%" PRIu64 " frees were larger than the live total and were refused: the "
		     "tracer paired some blocks wrongly.",
		     p->accounting_errors);
	if (p->probe_hits_unmatched)
		flag(j, "warn",
		     "%" PRIu64 " allocator probe hits were not the target's: the heap figures are "
		     "incomplete.",
		     p->probe_hits_unmatched);
	if (p->exec_count)
		flag(j, "note",
		     "The process called exec %" PRIu64
		     " times; kernels open at an exec were closed "
		     "there and are marked truncated.",
		     p->exec_count);
}

static void flags_mode(struct mp_json *j, const struct mp_profile *p)
{
	if (p->trace_mode == MP_TRACE_SAMPLED)
		flag(j, "note",
		     "Sampled mode (mean interval %" PRIu64 " B): heap figures are estimates%s.",
		     p->sample_bytes,
		     has_stderr(p) ? ", shown with ± one standard error; peaks can be biased up by "
				     "at most the bound shown beside them" :
				     "; this file has no standard errors");
	else if (p->trace_mode == MP_TRACE_RSS)
		flag(j, "note", "%s",
		     p->maps_recorded ?
			     "RSS mode: no allocator probes; heap figures are the break "
			     "(brk) only, anonymous mmaps are mappings." :
			     "RSS mode: no allocator probes; heap figures cover anonymous "
			     "mappings and brk only.");
	if (p->duty_period_ns)
		flag(j, "note",
		     "Duty cycle: allocator probes were attached %.3f ms of every %.3f ms (%.3f s in "
		     "all); heap figures cover only those windows.",
		     p->duty_on_ns / 1e6, p->duty_period_ns / 1e6, p->duty_active_ns / 1e9);
	if (p->rss_stride > 1)
		flag(j, "note",
		     "The RSS timeline keeps one sample in every %" PRIu32 " (%" PRIu64
		     " samples were taken).",
		     p->rss_stride, p->rss_samples);
}

/* ---- the figures ---- */

static void data_summary(struct mp_json *j, const struct mp_profile *p)
{
	bool err = has_stderr(p);

	mp_json_object_begin(j, "process");
	mp_json_i64(j, "pid", p->pid);
	mp_json_str(j, "exe", p->exe);
	mp_json_str(j, "cmdline", p->cmdline);
	mp_json_object_end(j);
	mp_json_str(j, "mode", mp_trace_mode_name(p->trace_mode));
	mp_json_u64(j, "sampleBytes", p->sample_bytes);
	mp_json_str(j, "tracerPath", mp_tracer_path_name(p->tracer_path));
	mp_json_bool(j, "sampled", err);
	mp_json_u64(j, "windowNs", p->end_ns > p->begin_ns ? p->end_ns - p->begin_ns : 0);
	mp_json_i64(j, "newBytes", p->mem.bytes_added);
	mp_json_i64(j, "newTensors", p->mem.tensors_added);
	mp_json_u64(j, "peakBytes", p->peak_bytes);
	mp_json_u64(j, "peakTensors", p->peak_tensors);
	mp_json_u64(j, "allocBytes", p->mem.alloc_bytes);
	mp_json_u64(j, "allocCount", p->mem.alloc_count);
	mp_json_u64(j, "freeBytes", p->mem.free_bytes);
	mp_json_u64(j, "freeCount", p->mem.free_count);
	mp_json_u64(j, "unknownFrees", p->unknown_frees);
	if (err) {
		mp_json_u64(j, "newBytesStderr", stderr_of(p->added_var));
		mp_json_u64(j, "peakBytesStderr", stderr_of(p->peak_var));
		mp_json_u64(j, "peakBytesBiasBound", bytes_of(p->peak_bias_bound));
		mp_json_u64(j, "allocBytesStderr", stderr_of(p->mem.alloc_var));
		mp_json_u64(j, "freeBytesStderr", stderr_of(p->mem.free_var));
	}
	mp_json_u64(j, "rssPeak", p->rss_peak);
	mp_json_u64(j, "rssSamples", p->rss_samples);
	opt_u64(j, "vmHwm", p->vm_hwm);
	mp_json_bool(j, "mapsRecorded", p->maps_recorded);
	maps_fields(j, p, &p->maps);
	mp_json_u64(j, "mapsAllocCount", p->maps.alloc_count);
	mp_json_u64(j, "mapsFree", p->maps.free_bytes);
	mp_json_u64(j, "mapsFreeCount", p->maps.free_count);
	opt_u64(j, "mapsResidentPeak", p->maps_recorded ? p->maps_resident_peak : MP_UNKNOWN);
	mp_json_u64(j, "invocationsDropped", p->invocations_dropped);
	mp_json_array_begin(j, "flags");
	flags_drops(j, p);
	flags_markers(j, p);
	flags_mode(j, p);
	mp_json_array_end(j);
}

/* The kernel a kernel runs in: the parent of its first recorded
 * invocation (-1: top level), for the nested table. */
static void data_kernels(struct mp_json *j, const struct mp_profile *p)
{
	bool err = has_stderr(p);

	mp_json_array_begin(j, "kernels");
	for (uint32_t i = 0; i < p->n_kernels; i++) {
		const struct mp_kernel *k = &p->kernels[i];

		mp_json_object_begin(j, NULL);
		mp_json_str(j, "name", name_of(p, k->name));
		mp_json_u64(j, "id", k->name);
		mp_json_u64(j, "calls", k->calls);
		mp_json_u64(j, "totalNs", k->total_ns);
		mp_json_u64(j, "minNs", k->calls ? k->min_ns : 0);
		mp_json_u64(j, "maxNs", k->max_ns);
		mp_json_i64(j, "bytesAdded", k->incl.bytes_added);
		mp_json_i64(j, "tensorsAdded", k->incl.tensors_added);
		mp_json_u64(j, "allocBytes", k->incl.alloc_bytes);
		mp_json_u64(j, "allocCount", k->incl.alloc_count);
		mp_json_u64(j, "freeBytes", k->incl.free_bytes);
		mp_json_u64(j, "selfAllocBytes", k->excl.alloc_bytes);
		mp_json_u64(j, "peakAdded", k->peak_added);
		mp_json_u64(j, "peakBytes", k->peak_bytes);
		mp_json_u64(j, "retainedBytes", k->retained_bytes);
		if (k->rss_calls)
			mp_json_i64(j, "rssDelta", k->rss_delta_sum);
		else
			mp_json_null(j, "rssDelta");
		maps_fields(j, p, &k->maps);
		mp_json_u64(j, "markersLost", k->markers_lost);
		mp_json_u64(j, "truncated", k->truncated);
		if (err) {
			mp_json_u64(j, "allocBytesStderr", stderr_of(k->incl.alloc_var));
			mp_json_u64(j, "peakAddedStderr", stderr_of(k->peak_added_var));
			mp_json_u64(j, "peakAddedBiasBound", bytes_of(k->peak_added_bias_bound));
			mp_json_u64(j, "peakBytesStderr", stderr_of(k->peak_var));
		}
		mp_json_object_end(j);
	}
	mp_json_array_end(j);
}

/* One array per field: 100,000 invocations are a few megabytes, not one
 * object each. Times and parents are written as differences, which are
 * short: "begin" from the previous invocation's begin, "dur" from its own
 * begin, "parent" back from its own index (0: none), "total" from the
 * previous invocation's, "peak" from its own total; the script adds them
 * up again. "maps", the process's reserved mapping bytes at the end, is
 * written from the previous invocation's. */
enum inv_col {
	COL_NAME,
	COL_TID,
	COL_PARENT,
	COL_DEPTH,
	COL_BEGIN,
	COL_DUR,
	COL_ADDED,
	COL_TOTAL,
	COL_TADDED,
	COL_TTOTAL,
	COL_PEAK,
	COL_PEAK_ADDED,
	COL_ALLOC,
	COL_FLAGS,
	COL_MAPS,
	COL_N,
};

static const char *const inv_col_names[COL_N] = {
	"name",	  "tid",    "parent", "depth",	   "begin", "dur",   "added", "total",
	"tadded", "ttotal", "peak",   "peakAdded", "alloc", "flags", "maps",
};

static void inv_value(struct mp_json *j, const struct mp_profile *p, uint32_t i, enum inv_col c)
{
	const struct mp_invocation *v = &p->invocations[i];

	switch (c) {
	case COL_NAME:
		mp_json_u64(j, NULL, v->name < p->n_names ? v->name : p->n_names);
		break;
	case COL_TID:
		mp_json_u64(j, NULL, v->tid);
		break;
	case COL_PARENT: /* a parent is an earlier invocation (the decoder checks) */
		mp_json_u64(j, NULL, v->parent < i ? i - v->parent : 0);
		break;
	case COL_DEPTH:
		mp_json_u64(j, NULL, v->depth);
		break;
	case COL_BEGIN:
		mp_json_i64(j, NULL,
			    (int64_t)(v->begin_ns -
				      (i ? p->invocations[i - 1].begin_ns : p->begin_ns)));
		break;
	case COL_DUR:
		mp_json_u64(j, NULL, v->end_ns > v->begin_ns ? v->end_ns - v->begin_ns : 0);
		break;
	case COL_ADDED:
		mp_json_i64(j, NULL, v->incl.bytes_added);
		break;
	case COL_TOTAL:
		mp_json_i64(j, NULL,
			    (int64_t)(v->total_bytes_snapshot -
				      (i ? p->invocations[i - 1].total_bytes_snapshot : 0)));
		break;
	case COL_TADDED:
		mp_json_i64(j, NULL, v->incl.tensors_added);
		break;
	case COL_TTOTAL:
		mp_json_u64(j, NULL, v->total_tensors_snapshot);
		break;
	case COL_PEAK:
		mp_json_i64(j, NULL, (int64_t)(v->peak_bytes - v->total_bytes_snapshot));
		break;
	case COL_PEAK_ADDED:
		mp_json_u64(j, NULL, v->peak_added);
		break;
	case COL_ALLOC:
		mp_json_u64(j, NULL, v->incl.alloc_bytes);
		break;
	case COL_MAPS:
		mp_json_i64(j, NULL,
			    (int64_t)(v->maps.live_bytes -
				      (i ? p->invocations[i - 1].maps.live_bytes : 0)));
		break;
	case COL_FLAGS:
	case COL_N:
		mp_json_u64(j, NULL, v->flags);
		break;
	}
}

static void data_invocations(struct mp_json *j, const struct mp_profile *p)
{
	mp_json_object_begin(j, "inv");
	for (int c = 0; c < COL_N; c++) {
		mp_json_array_begin(j, inv_col_names[c]);
		for (uint32_t i = 0; i < p->n_invocations; i++)
			inv_value(j, p, i, (enum inv_col)c);
		mp_json_array_end(j);
	}
	/* Shapes only where there are some: index -> [inputs, outputs]. */
	mp_json_object_begin(j, "shapes");
	for (uint32_t i = 0; i < p->n_invocations; i++) {
		const struct mp_invocation *v = &p->invocations[i];
		char key[16];

		if (!v->n_inputs && !v->n_outputs)
			continue;
		snprintf(key, sizeof(key), "%" PRIu32, i);
		mp_json_array_begin(j, key);
		mp_json_shapes(j, NULL, v->inputs, v->n_inputs);
		mp_json_shapes(j, NULL, v->outputs, v->n_outputs);
		mp_json_array_end(j);
	}
	mp_json_object_end(j);
	mp_json_object_end(j);
}

static void data_rss(struct mp_json *j, const struct mp_profile *p)
{
	static const char *const keys[] = { "t", "rss", "anon", "file", "shmem", "heap", "maps" };

	mp_json_object_begin(j, "rss");
	for (size_t k = 0; k < sizeof(keys) / sizeof(keys[0]); k++) {
		mp_json_array_begin(j, keys[k]);
		for (uint32_t i = 0; i < p->n_rss; i++) {
			const struct mp_rss_point *pt = &p->rss[i];
			const uint64_t v[] = { 0,
					       pt->vm_rss,
					       pt->rss_anon,
					       pt->rss_file,
					       pt->rss_shmem,
					       pt->heap_live,
					       p->maps_recorded ? pt->maps_live : MP_UNKNOWN };

			if (k == 0)
				mp_json_i64(j, NULL, rel(p, pt->ts_ns));
			else
				opt_u64(j, NULL, v[k]);
		}
		mp_json_array_end(j);
	}
	mp_json_object_end(j);
}

static void data_phases(struct mp_json *j, const struct mp_profile *p)
{
	bool err = has_stderr(p);

	mp_json_array_begin(j, "phases");
	for (uint32_t i = 0; i < p->n_phases; i++) {
		const struct mp_phase *ph = &p->phases[i];

		mp_json_object_begin(j, NULL);
		mp_json_str(j, "name", ph->name);
		mp_json_i64(j, "first", rel(p, ph->first_ns));
		mp_json_u64(j, "durationNs", ph->duration_ns);
		mp_json_u64(j, "entries", ph->entries);
		mp_json_i64(j, "bytesAdded", ph->mem.bytes_added);
		mp_json_u64(j, "allocBytes", ph->mem.alloc_bytes);
		mp_json_u64(j, "peakBytes", ph->peak_bytes);
		if (err)
			mp_json_u64(j, "peakBytesStderr", stderr_of(ph->peak_var));
		mp_json_u64(j, "rssPeak", ph->rss_peak);
		maps_fields(j, p, &ph->maps);
		mp_json_object_end(j);
	}
	mp_json_array_end(j);
}

/* One peak's parts by owner or tag: [name, bytes], the most bytes first. */
static int data_peak_parts(struct mp_json *j, const struct mp_profile *p, const char *key,
			   uint32_t phase, bool tags)
{
	const struct mp_pool *v = tags ? p->tags : p->owners;
	struct mp_peak_part *a;
	uint64_t total;
	uint32_t n;
	int r;

	r = mp_profile_peak_parts(p, phase, tags, &a, &n, &total);
	if (r < 0)
		return r;
	mp_json_array_begin(j, key);
	for (uint32_t i = 0; i < n; i++) {
		mp_json_array_begin(j, NULL);
		mp_json_str(j, NULL, v[a[i].id].name);
		mp_json_u64(j, NULL, a[i].bytes);
		mp_json_array_end(j);
	}
	mp_json_array_end(j);
	free(a);
	return 0;
}

/* Who held the peak (docs/PROFILE.md "Who held the peak"): the process's
 * peak, then each phase's, each with its parts by owner and by tag; none
 * in a file that does not record them. */
static int data_peaks(struct mp_json *j, const struct mp_profile *p)
{
	int r = 0;

	mp_json_array_begin(j, "peaks");
	for (uint32_t k = 0; p->peak_parts && r == 0 && k <= p->n_phases; k++) {
		uint32_t i = k ? k - 1 : MP_NONE;

		mp_json_object_begin(j, NULL);
		mp_json_str(j, "name", i == MP_NONE ? "(process)" : p->phases[i].name);
		mp_json_u64(j, "peakBytes", i == MP_NONE ? p->peak_bytes : p->phases[i].peak_bytes);
		r = data_peak_parts(j, p, "owners", i, false);
		if (r == 0)
			r = data_peak_parts(j, p, "tags", i, true);
		mp_json_object_end(j);
	}
	mp_json_array_end(j);
	return r;
}

/* Owners or tags that allocated, freed, mapped or unmapped something, in
 * the order of @order (NULL: as they are): the page keeps it for equal
 * figures. */
static void data_buckets(struct mp_json *j, const struct mp_profile *p, const char *key,
			 const struct mp_pool *v, uint32_t n, const uint32_t *order)
{
	bool err = has_stderr(p);

	mp_json_array_begin(j, key);
	for (uint32_t k = 0; k < n; k++) {
		const struct mp_pool *o = &v[order ? order[k] : k];

		if (!o->mem.alloc_count && !o->mem.free_count && !o->maps.alloc_count &&
		    !o->maps.free_count)
			continue;
		mp_json_object_begin(j, NULL);
		mp_json_str(j, "name", o->name);
		mp_json_u64(j, "allocBytes", o->mem.alloc_bytes);
		mp_json_u64(j, "allocCount", o->mem.alloc_count);
		mp_json_u64(j, "liveBytes", o->live_bytes);
		mp_json_u64(j, "peakBytes", o->peak_bytes);
		mp_json_i64(j, "netBytes", o->mem.bytes_added);
		if (err) {
			mp_json_u64(j, "liveBytesStderr", stderr_of(o->live_var));
			mp_json_u64(j, "peakBytesStderr", stderr_of(o->peak_var));
			mp_json_u64(j, "peakBytesBiasBound", bytes_of(o->peak_bias_bound));
		}
		maps_fields(j, p, &o->maps);
		mp_json_object_end(j);
	}
	mp_json_array_end(j);
}

static void data_mempools(struct mp_json *j, const struct mp_profile *p)
{
	mp_json_array_begin(j, "pools");
	for (uint32_t i = 0; i < p->n_mempools; i++) {
		const struct mp_mempool *mp = &p->mempools[i];

		mp_json_object_begin(j, NULL);
		mp_json_str(j, "name", mp->name);
		mp_json_str(j, "kind", mp_pool_kind_name(mp->kind));
		mp_json_bool(j, "used", mp_mempool_used(mp));
		mp_json_u64(j, "allocBytes", mp->mem.alloc_bytes);
		mp_json_u64(j, "allocCount", mp->mem.alloc_count);
		mp_json_u64(j, "liveBytes", mp->live_bytes);
		mp_json_u64(j, "peakBytes", mp->peak_bytes);
		mp_json_i64(j, "netBytes", mp->mem.bytes_added);
		mp_json_u64(j, "resets", mp->resets);
		mp_json_u64(j, "unknownFrees", mp->unknown_frees);
		mp_json_object_end(j);
	}
	mp_json_array_end(j);
}

static void data_execs(struct mp_json *j, const struct mp_profile *p)
{
	mp_json_array_begin(j, "execs");
	for (uint32_t i = 0; i < p->n_execs; i++) {
		mp_json_object_begin(j, NULL);
		mp_json_i64(j, "t", rel(p, p->execs[i].ts_ns));
		mp_json_u64(j, "tid", p->execs[i].tid);
		mp_json_str(j, "path", p->execs[i].path);
		mp_json_u64(j, "kernelsClosed", p->execs[i].kernels_closed);
		mp_json_object_end(j);
	}
	mp_json_array_end(j);
}

/* One frame's names, outermost first: the function, then the functions
 * inlined into it (the location keeps them innermost first). */
static void frame_names(struct mp_json *j, const struct mp_profile *p, uint64_t addr)
{
	const struct mp_location *l = mp_profile_location(p, addr);
	char hex[24], py[512];

	if (l && l->python) {
		mp_json_str(j, NULL, mp_text_python_frame(l, py, sizeof(py)));
		return;
	}
	if (!l || (!l->function && !l->n_inlined)) {
		snprintf(hex, sizeof(hex), "0x%" PRIx64, addr);
		mp_json_str(j, NULL, hex);
		return;
	}
	if (l->function) {
		mp_json_str(j, NULL, l->function);
	} else {
		snprintf(hex, sizeof(hex), "0x%" PRIx64, addr);
		mp_json_str(j, NULL, hex);
	}
	for (uint32_t k = l->n_inlined < MP_PROFILE_MAX_INLINE ? l->n_inlined :
								 MP_PROFILE_MAX_INLINE;
	     k-- > 0;)
		mp_json_str(j, NULL, l->inlined[k].function ? l->inlined[k].function : "??");
}

/* The heap sites with their stacks (outermost frame first), for the flame
 * graphs: [allocated bytes, bytes live at the end, kernel or -1, frames,
 * bytes live at the peak or null]; sitesAtPeak: every one knows the last
 * (files written before sites recorded it know none). */
static void data_sites(struct mp_json *j, const struct mp_profile *p)
{
	uint64_t buf[MP_PROFILE_MAX_DEPTH];
	bool at_peak = true;

	for (uint32_t i = 0; i < p->n_sites; i++)
		if (!p->sites[i].pool && p->sites[i].peak_space == MP_UNKNOWN)
			at_peak = false;
	mp_json_u64(j, "stackDepth", p->stack_depth);
	mp_json_u64(j, "nStacks", p->n_stacks);
	mp_json_bool(j, "sitesAtPeak", at_peak);
	mp_json_array_begin(j, "sites");
	for (uint32_t i = 0; i < p->n_sites; i++) {
		const struct mp_site *st = &p->sites[i];
		const struct mp_stack *sk =
			st->stack && st->stack <= p->n_stacks ? &p->stacks[st->stack - 1] : NULL;

		if (st->pool)
			continue;
		mp_json_array_begin(j, NULL);
		mp_json_u64(j, NULL, st->alloc_space);
		mp_json_u64(j, NULL, st->inuse_space);
		mp_json_i64(j, NULL, st->name < p->n_names ? (int64_t)st->name : -1);
		mp_json_array_begin(j, NULL);
		if (sk) {
			const uint64_t *fr = mp_profile_stack_frames(p, st->stack - 1, buf);

			for (uint32_t f = sk->n_frames < MP_PROFILE_MAX_DEPTH ?
						  sk->n_frames :
						  MP_PROFILE_MAX_DEPTH;
			     f-- > 0;)
				frame_names(j, p, fr[f]);
		} else {
			frame_names(j, p, st->caller);
		}
		mp_json_array_end(j);
		if (st->peak_space == MP_UNKNOWN)
			mp_json_null(j, NULL);
		else
			mp_json_u64(j, NULL, st->peak_space);
		mp_json_array_end(j);
	}
	mp_json_array_end(j);
}

int mp_html_write_data(const struct mp_profile *p, FILE *f)
{
	struct mp_json j;
	uint32_t *owners = NULL;
	int r;

	mp_json_init(&j, f, false);
	mp_json_object_begin(&j, NULL);
	mp_json_u64(&j, "version", 1);
	data_summary(&j, p);
	mp_json_array_begin(&j, "names");
	for (uint32_t i = 0; i < p->n_names; i++)
		mp_json_str(&j, NULL, p->names[i]);
	mp_json_str(&j, NULL, "(invalid)");
	mp_json_array_end(&j);
	data_kernels(&j, p);
	data_invocations(&j, p);
	data_rss(&j, p);
	data_phases(&j, p);
	r = data_peaks(&j, p);
	/* owners by bytes allocated, equal ones by name (rank.h) */
	if (r == 0)
		r = mp_rank_pools(p->owners, p->n_owners, MP_RANK_ALLOC, &owners);
	data_buckets(&j, p, "owners", p->owners, p->n_owners, owners);
	free(owners);
	data_buckets(&j, p, "tags", p->tags, p->n_tags, NULL);
	data_mempools(&j, p);
	data_execs(&j, p);
	data_sites(&j, p);
	mp_json_object_end(&j);
	if (r < 0) {
		(void)mp_json_finish(&j);
		return r;
	}
	return mp_json_finish(&j);
}

/* The data goes inside a <script> element, which ends at the first
 * "</script" whatever JSON thinks: '<', '>' and '&' are written as \u
 * escapes, which only occur inside JSON strings and mean the same there. */
static void put_escaped(FILE *f, const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (s[i] == '<' || s[i] == '>' || s[i] == '&')
			fprintf(f, "\\u%04x", (unsigned char)s[i]);
		else
			fputc(s[i], f);
	}
}

/* Text for the page's title: what HTML would read as markup is replaced. */
static void put_text(FILE *f, const char *s)
{
	for (; s && *s; s++) {
		if (*s == '<' || *s == '>' || *s == '&' || *s == '"' || (unsigned char)*s < 0x20)
			fputc('?', f);
		else
			fputc(*s, f);
	}
}

int mp_html_write(const struct mp_profile *p, FILE *f)
{
	char *data = NULL;
	size_t len = 0;
	FILE *m = open_memstream(&data, &len);
	int r;

	if (!m)
		return -ENOMEM;
	r = mp_html_write_data(p, m);
	if (fclose(m) != 0 && r == 0)
		r = -ENOMEM;
	if (r < 0) {
		free(data);
		return r;
	}
	fputs("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
	      "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
	      "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
	      "script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:\">\n"
	      "<title>memprof report: ",
	      f);
	put_text(f, p->exe ? p->exe : "?");
	fputs("</title>\n<style>\n", f);
	fputs(mp_html_css, f);
	fputs("</style></head>\n<body data-mp-ready=\"0\">\n"
	      "<noscript>This report is drawn by its script: enable JavaScript.</noscript>\n"
	      "<script type=\"application/json\" id=\"mp-data\">",
	      f);
	put_escaped(f, data, len);
	fputs("</script>\n<script>\n", f);
	fputs(mp_html_js, f);
	fputs("</script>\n</body></html>\n", f);
	free(data);
	return ferror(f) ? -EIO : 0;
}
