/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "html.h"
#include "json.h"
#include "maps_report.h"
#include "peak_report.h"
#include "rank.h"
#include "report.h"
#include "text.h"

int mp_report_format_parse(const char *s, enum mp_report_format *ret)
{
	static const struct {
		const char *name;
		enum mp_report_format fmt;
	} formats[] = {
		{ "table", MP_REPORT_TABLE },
		{ "json", MP_REPORT_JSON },
		{ "tfjs", MP_REPORT_TFJS },
		{ "html", MP_REPORT_HTML },
	};

	for (size_t i = 0; i < sizeof(formats) / sizeof(formats[0]); i++) {
		if (s && strcmp(s, formats[i].name) == 0) {
			*ret = formats[i].fmt;
			return 0;
		}
	}
	return -EINVAL;
}

/* A profile read from a file may carry any index: never trust one. */
static const char *name_of(const struct mp_profile *p, uint32_t id)
{
	return id < p->n_names ? p->names[id] : "(invalid)";
}

static const char *pool_name(const struct mp_pool *v, uint32_t n, uint32_t id)
{
	return id < n ? v[id].name : "(invalid)";
}

static const char *mode_name(uint32_t mode)
{
	switch (mode) {
	case MP_TRACE_PRECISE:
		return "precise";
	case MP_TRACE_SAMPLED:
		return "sampled";
	case MP_TRACE_RSS:
		return "rss";
	}
	return "unknown";
}

/* ---- tfjs ---- */

/* tf.profile's figures of one pool (--pool): tfjs counts GPU texture
 * memory the same way, beside the CPU heap. */
static int write_tfjs_pool(const struct mp_profile *p, const struct mp_region *rg, uint32_t pool,
			   FILE *f)
{
	const struct mp_mempool *mp = &p->mempools[pool];
	const struct mp_pool_bucket *b;
	struct mp_json j;

	mp_json_init(&j, f, false);
	mp_json_object_begin(&j, NULL);
	if (rg->whole) {
		mp_json_i64(&j, "newBytes", mp->mem.bytes_added);
		mp_json_i64(&j, "newTensors", mp->mem.tensors_added);
		mp_json_u64(&j, "peakBytes", mp->peak_bytes);
	} else {
		const struct mp_invocation *inv = &p->invocations[rg->inv];

		b = mp_pool_bucket_find(inv->pools, inv->n_pools, pool);
		mp_json_i64(&j, "newBytes", b ? (int64_t)(b->alloc_bytes - b->free_bytes) : 0);
		mp_json_i64(&j, "newTensors", b ? (int64_t)(b->alloc_count - b->free_count) : 0);
		mp_json_u64(&j, "peakBytes", b ? b->peak_bytes : 0);
	}
	mp_json_array_begin(&j, "kernels");
	for (uint32_t i = 0; i < p->n_invocations; i++) {
		const struct mp_invocation *inv = &p->invocations[i];

		if (!rg->whole && (i == rg->inv || !mp_profile_inv_within(p, i, rg->inv)))
			continue;
		b = mp_pool_bucket_find(inv->pools, inv->n_pools, pool);
		mp_json_object_begin(&j, NULL);
		mp_json_str(&j, "name", name_of(p, inv->name));
		mp_json_i64(&j, "bytesAdded", b ? (int64_t)(b->alloc_bytes - b->free_bytes) : 0);
		mp_json_u64(&j, "totalBytesSnapshot", b ? b->live_end : 0);
		mp_json_i64(&j, "tensorsAdded", b ? (int64_t)(b->alloc_count - b->free_count) : 0);
		mp_json_u64(&j, "totalTensorsSnapshot", b ? b->live_count_end : 0);
		mp_json_shapes(&j, "inputShapes", inv->inputs, inv->n_inputs);
		mp_json_shapes(&j, "outputShapes", inv->outputs, inv->n_outputs);
		mp_json_object_end(&j);
	}
	mp_json_array_end(&j);
	mp_json_object_end(&j);
	return mp_json_finish(&j);
}

static int write_tfjs(const struct mp_profile *p, const char *region, const char *pool, FILE *f)
{
	struct mp_region rg;
	struct mp_json j;
	int r;

	r = mp_profile_region(p, region, &rg);
	if (r < 0)
		return r;
	if (pool) {
		const struct mp_mempool *mp = mp_profile_mempool(p, pool);

		if (!mp)
			return -ESRCH;
		return write_tfjs_pool(p, &rg, (uint32_t)(mp - p->mempools), f);
	}
	mp_json_init(&j, f, false);
	mp_json_object_begin(&j, NULL);
	if (rg.whole) {
		mp_json_i64(&j, "newBytes", p->mem.bytes_added);
		mp_json_i64(&j, "newTensors", p->mem.tensors_added);
		mp_json_u64(&j, "peakBytes", p->peak_bytes);
	} else {
		const struct mp_invocation *inv = &p->invocations[rg.inv];

		mp_json_i64(&j, "newBytes", inv->incl.bytes_added);
		mp_json_i64(&j, "newTensors", inv->incl.tensors_added);
		mp_json_u64(&j, "peakBytes", inv->peak_bytes);
	}
	mp_json_array_begin(&j, "kernels");
	for (uint32_t i = 0; i < p->n_invocations; i++) {
		const struct mp_invocation *inv = &p->invocations[i];

		if (!rg.whole && (i == rg.inv || !mp_profile_inv_within(p, i, rg.inv)))
			continue;
		mp_json_object_begin(&j, NULL);
		mp_json_str(&j, "name", name_of(p, inv->name));
		mp_json_i64(&j, "bytesAdded", inv->incl.bytes_added);
		mp_json_u64(&j, "totalBytesSnapshot", inv->total_bytes_snapshot);
		mp_json_i64(&j, "tensorsAdded", inv->incl.tensors_added);
		mp_json_u64(&j, "totalTensorsSnapshot", inv->total_tensors_snapshot);
		mp_json_shapes(&j, "inputShapes", inv->inputs, inv->n_inputs);
		mp_json_shapes(&j, "outputShapes", inv->outputs, inv->n_outputs);
		mp_json_object_end(&j);
	}
	mp_json_array_end(&j);
	mp_json_object_end(&j);
	return mp_json_finish(&j);
}

/* ---- json: the whole model ---- */

static void json_opt_u64(struct mp_json *j, const char *key, uint64_t v)
{
	if (v == MP_UNKNOWN)
		mp_json_null(j, key);
	else
		mp_json_u64(j, key, v);
}

/* A standard error in bytes, from a variance (docs/PROFILE.md "Sampled
 * figures"). */
static uint64_t stderr_of(double var)
{
	return var > 0 ? (uint64_t)llround(sqrt(var)) : 0;
}

/* Whether @p carries the standard errors of sampled mode. A sampled
 * profile written before they were recorded has none: its figures are
 * then shown without, not as exact. */
static bool has_stderr(const struct mp_profile *p)
{
	return p->trace_mode == MP_TRACE_SAMPLED &&
	       (p->peak_bias_bound > 0 || p->mem.alloc_var > 0 || p->peak_var > 0);
}

static uint64_t bytes_of(double v)
{
	return v > 0 ? (uint64_t)llround(v) : 0;
}

/* A sampled peak's standard error (from @var) and the bound on its upward
 * bias (docs/PROFILE.md "Per-kernel peaks"), as @key"Stderr" and
 * @key"BiasBound"; nothing for an exact profile. */
static void json_peak_err(struct mp_json *j, const struct mp_profile *p, const char *key,
			  double var, double bias)
{
	char k[48];

	if (!has_stderr(p))
		return;
	snprintf(k, sizeof(k), "%sStderr", key);
	mp_json_u64(j, k, stderr_of(var));
	snprintf(k, sizeof(k), "%sBiasBound", key);
	mp_json_u64(j, k, bytes_of(bias));
}

static void json_mem(struct mp_json *j, const char *key, const struct mp_mem_stats *m)
{
	mp_json_object_begin(j, key);
	mp_json_i64(j, "bytesAdded", m->bytes_added);
	mp_json_i64(j, "tensorsAdded", m->tensors_added);
	mp_json_u64(j, "allocBytes", m->alloc_bytes);
	mp_json_u64(j, "allocCount", m->alloc_count);
	mp_json_u64(j, "freeBytes", m->free_bytes);
	mp_json_u64(j, "freeCount", m->free_count);
	/* only figures that hold sampled estimates have one */
	if (m->alloc_var > 0)
		mp_json_u64(j, "allocBytesStderr", stderr_of(m->alloc_var));
	if (m->free_var > 0)
		mp_json_u64(j, "freeBytesStderr", stderr_of(m->free_var));
	mp_json_object_end(j);
}

/* One owner/tag bucket's object. */
static void json_bucket(struct mp_json *j, const char *name, uint64_t alloc_bytes,
			uint64_t alloc_count, uint64_t free_bytes, uint64_t free_count)
{
	mp_json_object_begin(j, NULL);
	mp_json_str(j, "name", name);
	mp_json_i64(j, "bytesAdded", (int64_t)(alloc_bytes - free_bytes));
	mp_json_u64(j, "allocBytes", alloc_bytes);
	mp_json_u64(j, "allocCount", alloc_count);
	mp_json_u64(j, "freeBytes", free_bytes);
	mp_json_u64(j, "freeCount", free_count);
	mp_json_object_end(j);
}

static void json_buckets(struct mp_json *j, const char *key, const struct mp_bucket *b, uint32_t n,
			 const struct mp_pool *names, uint32_t n_names)
{
	mp_json_array_begin(j, key);
	for (uint32_t i = 0; i < n; i++)
		json_bucket(j, pool_name(names, n_names, b[i].id), b[i].alloc_bytes,
			    b[i].alloc_count, b[i].free_bytes, b[i].free_count);
	mp_json_array_end(j);
}

/* An owner's or tag's figures over the window (@mem under @key), in an
 * object the caller ends (it may add to it). */
static void json_live(struct mp_json *j, const char *name, const char *key,
		      const struct mp_mem_stats *mem, uint64_t live_bytes, uint64_t live_count,
		      uint64_t peak_bytes)
{
	mp_json_object_begin(j, NULL);
	mp_json_str(j, "name", name);
	json_mem(j, key, mem);
	mp_json_u64(j, "liveBytes", live_bytes);
	mp_json_u64(j, "liveCount", live_count);
	mp_json_u64(j, "peakBytes", peak_bytes);
}

/* A pool bucket's slices by tag (@pool's entries of @t), as "tags" are for
 * heap blocks. */
static void json_pool_tag_buckets(struct mp_json *j, const struct mp_profile *p, uint32_t pool,
				  const struct mp_pool_tag_bucket *t, uint32_t nt)
{
	mp_json_array_begin(j, "tags");
	for (uint32_t i = 0; i < nt; i++)
		if (t[i].pool == pool)
			json_bucket(j, pool_name(p->tags, p->n_tags, t[i].tag), t[i].alloc_bytes,
				    t[i].alloc_count, t[i].free_bytes, t[i].free_count);
	mp_json_array_end(j);
}

/* Present only in profiles with pools. Invocations and kernels break each
 * bucket down by tag (@t); phases have no tag breakdown (@t NULL), as for
 * the heap. */
static void json_pool_buckets(struct mp_json *j, const struct mp_profile *p,
			      const struct mp_pool_bucket *b, uint32_t n,
			      const struct mp_pool_tag_bucket *t, uint32_t nt)
{
	if (!p->n_mempools)
		return;
	mp_json_array_begin(j, "pools");
	for (uint32_t i = 0; i < n; i++) {
		mp_json_object_begin(j, NULL);
		mp_json_str(j, "pool",
			    b[i].id < p->n_mempools ? p->mempools[b[i].id].name : "(invalid)");
		mp_json_u64(j, "allocBytes", b[i].alloc_bytes);
		mp_json_u64(j, "allocCount", b[i].alloc_count);
		mp_json_u64(j, "freeBytes", b[i].free_bytes);
		mp_json_u64(j, "freeCount", b[i].free_count);
		mp_json_u64(j, "peakAdded", b[i].peak_added);
		mp_json_u64(j, "peakBytes", b[i].peak_bytes);
		mp_json_u64(j, "liveBytesEnd", b[i].live_end);
		mp_json_u64(j, "liveCountEnd", b[i].live_count_end);
		if (t)
			json_pool_tag_buckets(j, p, b[i].id, t, nt);
		mp_json_object_end(j);
	}
	mp_json_array_end(j);
}

static void json_mempools(struct mp_json *j, const struct mp_profile *p)
{
	if (!p->n_mempools)
		return;
	mp_json_array_begin(j, "pools");
	for (uint32_t i = 0; i < p->n_mempools; i++) {
		const struct mp_mempool *mp = &p->mempools[i];

		mp_json_object_begin(j, NULL);
		mp_json_str(j, "name", mp->name);
		mp_json_str(j, "kind", mp_pool_kind_name(mp->kind));
		mp_json_str(j, "source", mp->source == MP_POOL_SRC_PROBE ? "probe" : "api");
		json_mem(j, "slices", &mp->mem);
		mp_json_u64(j, "liveBytes", mp->live_bytes);
		mp_json_u64(j, "liveCount", mp->live_count);
		mp_json_u64(j, "peakBytes", mp->peak_bytes);
		mp_json_u64(j, "resets", mp->resets);
		mp_json_u64(j, "unknownFrees", mp->unknown_frees);
		mp_json_array_begin(j, "tags");
		for (uint32_t t = 0; t < mp->n_tags; t++) {
			const struct mp_pool_tag *pt = &mp->tags[t];

			json_live(j, pool_name(p->tags, p->n_tags, pt->tag), "slices", &pt->mem,
				  pt->live_bytes, pt->live_count, pt->peak_bytes);
			mp_json_object_end(j);
		}
		mp_json_array_end(j);
		mp_json_object_end(j);
	}
	mp_json_array_end(j);
}

static void json_invocation(struct mp_json *j, const struct mp_profile *p, uint32_t idx)
{
	const struct mp_invocation *v = &p->invocations[idx];

	mp_json_object_begin(j, NULL);
	mp_json_u64(j, "index", idx);
	mp_json_str(j, "name", name_of(p, v->name));
	mp_json_u64(j, "tid", v->tid);
	if (v->parent == MP_NONE)
		mp_json_null(j, "parent");
	else
		mp_json_u64(j, "parent", v->parent);
	mp_json_u64(j, "depth", v->depth);
	if (v->phase < p->n_phases)
		mp_json_str(j, "phase", p->phases[v->phase].name);
	else
		mp_json_null(j, "phase");
	mp_json_u64(j, "beginNs", v->begin_ns);
	mp_json_u64(j, "endNs", v->end_ns);
	mp_json_u64(j, "durationNs", v->end_ns > v->begin_ns ? v->end_ns - v->begin_ns : 0);
	mp_json_bool(j, "openAtAttach", v->flags & MP_INV_F_OPEN_AT_ATTACH);
	mp_json_bool(j, "truncated", v->flags & MP_INV_F_TRUNCATED);
	mp_json_bool(j, "markersLost", v->flags & MP_INV_F_MARKERS_LOST);
	mp_json_bool(j, "closedAtExec", v->flags & MP_INV_F_EXEC);
	mp_json_i64(j, "bytesAdded", v->incl.bytes_added);
	mp_json_u64(j, "totalBytesSnapshot", v->total_bytes_snapshot);
	mp_json_i64(j, "tensorsAdded", v->incl.tensors_added);
	mp_json_u64(j, "totalTensorsSnapshot", v->total_tensors_snapshot);
	mp_json_shapes(j, "inputShapes", v->inputs, v->n_inputs);
	mp_json_shapes(j, "outputShapes", v->outputs, v->n_outputs);
	json_mem(j, "inclusive", &v->incl);
	json_mem(j, "exclusive", &v->excl);
	mp_json_u64(j, "peakBytes", v->peak_bytes);
	json_peak_err(j, p, "peakBytes", v->peak_var, p->peak_bias_bound);
	mp_json_u64(j, "peakAdded", v->peak_added);
	json_peak_err(j, p, "peakAdded", v->peak_added_var, v->peak_added_bias_bound);
	if (has_stderr(p))
		mp_json_u64(j, "bytesAddedStderr", stderr_of(v->added_var));
	mp_json_u64(j, "retainedBytes", v->retained_bytes);
	mp_json_u64(j, "retainedCount", v->retained_count);
	mp_json_u64(j, "crossThreadAllocs", v->cross_thread_allocs);
	mp_json_u64(j, "crossThreadBytes", v->cross_thread_bytes);
	json_opt_u64(j, "rssBegin", v->rss_begin);
	json_opt_u64(j, "rssEnd", v->rss_end);
	if (v->rss_begin != MP_UNKNOWN && v->rss_end != MP_UNKNOWN)
		mp_json_i64(j, "rssDelta", (int64_t)(v->rss_end - v->rss_begin));
	else
		mp_json_null(j, "rssDelta");
	mp_json_i64(j, "rssExactInclusive", v->rss_exact_incl);
	mp_json_i64(j, "rssExactExclusive", v->rss_exact_excl);
	json_buckets(j, "owners", v->owners, v->n_owners, p->owners, p->n_owners);
	json_buckets(j, "tags", v->tags, v->n_tags, p->tags, p->n_tags);
	json_pool_buckets(j, p, v->pools, v->n_pools, v->pool_tags, v->n_pool_tags);
	mp_maps_json(j, "anonMaps", &v->maps);
	mp_json_object_end(j);
}

/* enum mp_reject's names, in the table and in JSON. */
static const char *const reject_names[MP_REJECT_COUNT] = {
	[MP_REJECT_SIZE] = "size",
	[MP_REJECT_TIME] = "time",
	[MP_REJECT_THREAD] = "thread",
	[MP_REJECT_FREE] = "free",
	[MP_REJECT_STACK] = "stack",
	[MP_REJECT_MODE] = "mode",
	[MP_REJECT_FREE_MISALIGNED] = "freeMisaligned",
	[MP_REJECT_FREE_UNMAPPED] = "freeUnmapped",
};

/* Ring corruption and execs (docs/PROFILE.md "Corruption", "Exec"). */
static void json_hardening(struct mp_json *j, const struct mp_profile *p)
{
	mp_json_object_begin(j, "corruption");
	mp_json_bool(j, "ringHeader", p->corruption & MP_CORRUPT_RING_HEADER);
	mp_json_bool(j, "ringRecords", p->corruption & MP_CORRUPT_RING_RECORDS);
	mp_json_bool(j, "ringOpen", p->corruption & MP_CORRUPT_RING_OPEN);
	mp_json_bool(j, "recordsRejected", p->corruption & MP_CORRUPT_RECORDS_REJECTED);
	mp_json_bool(j, "ringStuck", p->corruption & MP_CORRUPT_RING_STUCK);
	mp_json_object_begin(j, "rejected");
	for (int i = 0; i < MP_REJECT_COUNT; i++)
		mp_json_u64(j, reject_names[i], p->rejected[i]);
	mp_json_u64(j, "stuckRings", p->stuck_rings);
	mp_json_object_end(j);
	mp_json_object_end(j);
	mp_json_u64(j, "execCount", p->exec_count);
	mp_json_array_begin(j, "execs");
	for (uint32_t i = 0; i < p->n_execs; i++) {
		mp_json_object_begin(j, NULL);
		mp_json_u64(j, "tsNs", p->execs[i].ts_ns);
		mp_json_u64(j, "tid", p->execs[i].tid);
		mp_json_u64(j, "releasedBytes", p->execs[i].released_bytes);
		mp_json_u64(j, "releasedBlocks", p->execs[i].released_blocks);
		if (p->execs[i].path)
			mp_json_str(j, "path", p->execs[i].path);
		else
			mp_json_null(j, "path");
		mp_json_u64(j, "kernelsClosed", p->execs[i].kernels_closed);
		mp_json_object_end(j);
	}
	mp_json_array_end(j);
}

static void json_kernel(struct mp_json *j, const struct mp_profile *p, const struct mp_kernel *k)
{
	mp_json_object_begin(j, NULL);
	mp_json_str(j, "name", name_of(p, k->name));
	mp_json_u64(j, "calls", k->calls);
	mp_json_u64(j, "totalNs", k->total_ns);
	mp_json_u64(j, "minNs", k->calls ? k->min_ns : 0);
	mp_json_u64(j, "maxNs", k->max_ns);
	json_mem(j, "inclusive", &k->incl);
	json_mem(j, "exclusive", &k->excl);
	mp_json_u64(j, "peakBytes", k->peak_bytes);
	json_peak_err(j, p, "peakBytes", k->peak_var, p->peak_bias_bound);
	mp_json_u64(j, "peakAdded", k->peak_added);
	json_peak_err(j, p, "peakAdded", k->peak_added_var, k->peak_added_bias_bound);
	mp_json_u64(j, "retainedBytes", k->retained_bytes);
	mp_json_u64(j, "retainedCount", k->retained_count);
	mp_json_u64(j, "crossThreadAllocs", k->cross_thread_allocs);
	mp_json_u64(j, "crossThreadBytes", k->cross_thread_bytes);
	mp_json_i64(j, "rssDeltaSum", k->rss_delta_sum);
	mp_json_u64(j, "rssCalls", k->rss_calls);
	mp_json_i64(j, "rssExactInclusive", k->rss_exact_incl);
	mp_json_i64(j, "rssExactExclusive", k->rss_exact_excl);
	mp_json_u64(j, "openAtAttach", k->open_at_attach);
	mp_json_u64(j, "truncated", k->truncated);
	mp_json_u64(j, "markersLost", k->markers_lost);
	json_buckets(j, "owners", k->owners, k->n_owners, p->owners, p->n_owners);
	json_buckets(j, "tags", k->tags, k->n_tags, p->tags, p->n_tags);
	json_pool_buckets(j, p, k->pools, k->n_pools, k->pool_tags, k->n_pool_tags);
	mp_maps_json(j, "anonMaps", &k->maps);
	mp_json_object_end(j);
}

static void json_pools(struct mp_json *j, const struct mp_profile *p, const char *key,
		       const struct mp_pool *v, uint32_t n)
{
	mp_json_array_begin(j, key);
	for (uint32_t i = 0; i < n; i++) {
		json_live(j, v[i].name, "heap", &v[i].mem, v[i].live_bytes, v[i].live_count,
			  v[i].peak_bytes);
		if (has_stderr(p))
			mp_json_u64(j, "liveBytesStderr", stderr_of(v[i].live_var));
		json_peak_err(j, p, "peakBytes", v[i].peak_var, v[i].peak_bias_bound);
		if (p->peak_parts)
			mp_json_u64(j, "peakShare", v[i].peak_share);
		mp_maps_json(j, "anonMaps", &v[i].maps);
		mp_json_object_end(j);
	}
	mp_json_array_end(j);
}

/* Sites name their kernel, phase and owner like invocations do; objects
 * and locations refer to each other by index, as in the proto. */
static void json_sites(struct mp_json *j, const struct mp_profile *p)
{
	mp_json_array_begin(j, "sites");
	for (uint32_t i = 0; i < p->n_sites; i++) {
		const struct mp_site *st = &p->sites[i];

		mp_json_object_begin(j, NULL);
		mp_json_u64(j, "caller", st->caller);
		if (st->name == MP_NONE)
			mp_json_null(j, "kernel");
		else
			mp_json_str(j, "kernel", name_of(p, st->name));
		if (st->phase < p->n_phases)
			mp_json_str(j, "phase", p->phases[st->phase].name);
		else
			mp_json_null(j, "phase");
		mp_json_str(j, "owner", pool_name(p->owners, p->n_owners, st->owner));
		mp_json_u64(j, "thread", st->tid);
		mp_json_u64(j, "allocObjects", st->alloc_objects);
		mp_json_u64(j, "allocSpace", st->alloc_space);
		mp_json_u64(j, "inuseObjects", st->inuse_objects);
		mp_json_u64(j, "inuseSpace", st->inuse_space);
		if (st->peak_space == MP_UNKNOWN) { /* a file from before it was kept */
			mp_json_null(j, "peakObjects");
			mp_json_null(j, "peakSpace");
		} else {
			mp_json_u64(j, "peakObjects", st->peak_objects);
			mp_json_u64(j, "peakSpace", st->peak_space);
		}
		if (p->site_vars) {
			mp_json_u64(j, "allocSpaceStderr", stderr_of(p->site_vars[i].alloc_space));
			mp_json_u64(j, "inuseSpaceStderr", stderr_of(p->site_vars[i].inuse_space));
		}
		/* limits: the "(other sites)" entry past the site table, and
		 * what a site admitted past it may lack */
		if (st->flags & MP_SITE_F_OTHER)
			mp_json_bool(j, "other", true);
		if (st->error_space)
			mp_json_u64(j, "errorSpace", st->error_space);
		/* pool slices: a view apart from the heap sites (only in
		 * profiles with pools) */
		if (p->n_mempools) {
			if (st->pool && st->pool <= p->n_mempools)
				mp_json_str(j, "pool", p->mempools[st->pool - 1].name);
			else
				mp_json_null(j, "pool");
		}
		mp_json_object_end(j);
	}
	mp_json_array_end(j);
	mp_json_array_begin(j, "objects");
	for (uint32_t i = 0; i < p->n_objects; i++) {
		const struct mp_object *ob = &p->objects[i];

		mp_json_object_begin(j, NULL);
		mp_json_u64(j, "start", ob->start);
		mp_json_u64(j, "limit", ob->limit);
		mp_json_u64(j, "fileOffset", ob->file_offset);
		mp_json_str(j, "path", ob->path);
		mp_json_str(j, "buildId", ob->build_id);
		mp_json_bool(j, "hasFunctions", ob->flags & MP_OBJ_F_FUNCTIONS);
		mp_json_bool(j, "hasLines", ob->flags & MP_OBJ_F_LINES);
		mp_json_object_end(j);
	}
	mp_json_array_end(j);
	mp_json_array_begin(j, "locations");
	for (uint32_t i = 0; i < p->n_locations; i++) {
		const struct mp_location *l = &p->locations[i];

		mp_json_object_begin(j, NULL);
		mp_json_u64(j, "address", l->addr);
		if (l->object < p->n_objects)
			mp_json_u64(j, "object", l->object);
		else
			mp_json_null(j, "object");
		mp_json_u64(j, "relAddress", l->rel_addr);
		mp_json_str(j, "function", l->function);
		mp_json_str(j, "file", l->file);
		if (l->line)
			mp_json_u64(j, "line", l->line);
		else
			mp_json_null(j, "line");
		if (l->python)
			mp_json_bool(j, "python", true);
		mp_json_object_end(j);
	}
	mp_json_array_end(j);
}

static int json_phases(struct mp_json *j, const struct mp_profile *p)
{
	int r = 0;

	mp_json_array_begin(j, "phases");
	for (uint32_t i = 0; i < p->n_phases; i++) {
		const struct mp_phase *ph = &p->phases[i];

		mp_json_object_begin(j, NULL);
		mp_json_str(j, "name", ph->name);
		mp_json_u64(j, "firstNs", ph->first_ns);
		mp_json_u64(j, "durationNs", ph->duration_ns);
		mp_json_u64(j, "entries", ph->entries);
		json_mem(j, "heap", &ph->mem);
		mp_json_u64(j, "peakBytes", ph->peak_bytes);
		json_peak_err(j, p, "peakBytes", ph->peak_var, p->peak_bias_bound);
		mp_json_u64(j, "rssPeak", ph->rss_peak);
		json_pool_buckets(j, p, ph->pools, ph->n_pools, NULL, 0);
		mp_maps_json(j, "anonMaps", &ph->maps);
		if (r == 0)
			r = mp_peak_json(j, p, "peakOwners", i, false);
		if (r == 0)
			r = mp_peak_json(j, p, "peakTags", i, true);
		mp_json_object_end(j);
	}
	mp_json_array_end(j);
	return r;
}

static void json_rss(struct mp_json *j, const struct mp_profile *p)
{
	mp_json_object_begin(j, "rss");
	mp_json_u64(j, "samples", p->rss_samples);
	mp_json_u64(j, "stride", p->rss_stride);
	mp_json_u64(j, "peak", p->rss_peak);
	json_opt_u64(j, "vmHwm", p->vm_hwm);
	mp_json_i64(j, "exactUnattributed", p->rss_exact_unattributed);
	mp_json_array_begin(j, "timeline");
	for (uint32_t i = 0; i < p->n_rss; i++) {
		const struct mp_rss_point *pt = &p->rss[i];

		mp_json_object_begin(j, NULL);
		mp_json_u64(j, "tsNs", pt->ts_ns);
		json_opt_u64(j, "vmRss", pt->vm_rss);
		json_opt_u64(j, "rssAnon", pt->rss_anon);
		json_opt_u64(j, "rssFile", pt->rss_file);
		json_opt_u64(j, "rssShmem", pt->rss_shmem);
		json_opt_u64(j, "vmSwap", pt->vm_swap);
		json_opt_u64(j, "pss", pt->pss);
		json_opt_u64(j, "heapLive", pt->heap_live);
		json_opt_u64(j, "anonMapsLive", pt->maps_live);
		mp_json_object_end(j);
	}
	mp_json_array_end(j);
	mp_json_object_end(j);
}

/* Limits (docs/PROFILE.md "Limits"): in profiles of a daemon run, or
 * when a bound was reached. */
static void json_limits(struct mp_json *j, const struct mp_profile *p)
{
	const struct mp_limits *l = &p->limits;

	if (!l->reached && !l->memory)
		return;
	mp_json_object_begin(j, "limits");
	mp_json_u64(j, "memory", l->memory);
	mp_json_u64(j, "liveBlocks", l->live_blocks);
	mp_json_u64(j, "sites", l->sites);
	mp_json_u64(j, "stacks", l->stacks);
	mp_json_u64(j, "stackFrames", l->stack_frames);
	mp_json_array_begin(j, "reached");
	if (l->reached & MP_LIMIT_LIVE)
		mp_json_str(j, NULL, "live");
	if (l->reached & MP_LIMIT_SITES)
		mp_json_str(j, NULL, "sites");
	if (l->reached & MP_LIMIT_STACKS)
		mp_json_str(j, NULL, "stacks");
	if (l->reached & MP_LIMIT_NAMES)
		mp_json_str(j, NULL, "names");
	mp_json_array_end(j);
	mp_json_u64(j, "untrackedAllocs", l->untracked_allocs);
	mp_json_u64(j, "untrackedBytes", l->untracked_bytes);
	mp_json_u64(j, "otherSiteAllocs", p->sites_dropped);
	mp_json_u64(j, "sitesEvicted", l->sites_evicted);
	mp_json_u64(j, "siteErrorBytes", l->site_error_bytes);
	mp_json_u64(j, "stacksDropped", p->stacks_dropped);
	mp_json_bool(j, "heapLowerBounds", (l->reached & MP_LIMIT_LIVE) != 0);
	mp_json_object_end(j);
}

/* Call stacks on the in-process path: unwound by the target or copied. */
static void json_stacks(struct mp_json *j, const struct mp_profile *p)
{
	if (!p->stack_depth || (!p->stacks_unwound && !p->stacks_copied))
		return;
	mp_json_object_begin(j, "stackCapture");
	mp_json_u64(j, "unwoundInProcess", p->stacks_unwound);
	mp_json_u64(j, "copied", p->stacks_copied);
	mp_json_array_begin(j, "pythonThreads");
	for (uint32_t i = 0; i < p->n_python_tids; i++)
		mp_json_u64(j, NULL, p->python_tids[i]);
	mp_json_array_end(j);
	mp_json_object_end(j);
}

/* Allocator wrappers (docs/PROFILE.md "Owners"): when the run used them. */
static void json_wrappers(struct mp_json *j, const struct mp_profile *p)
{
	const struct mp_wrappers_info *w = &p->wrappers;

	if (!w->on)
		return;
	mp_json_object_begin(j, "wrappers");
	mp_json_bool(j, "defaultList", w->default_list);
	mp_json_u64(j, "functions", w->functions);
	mp_json_u64(j, "objects", w->objects);
	mp_json_u64(j, "skipped", w->skipped);
	mp_json_u64(j, "fallbacks", w->fallbacks);
	mp_json_object_end(j);
}

static void json_drops(struct mp_json *j, const struct mp_profile *p)
{
	mp_json_object_begin(j, "drops");
	mp_json_u64(j, "ring", p->drops_ring);
	mp_json_u64(j, "bpf", p->drops_bpf);
	mp_json_u64(j, "invocations", p->invocations_dropped);
	mp_json_u64(j, "markers", p->dropped_markers);
	mp_json_u64(j, "sites", p->sites_dropped);
	if (p->tracer_path)
		mp_json_u64(j, "heap", p->drops_heap);
	/* Only when something was lost: files without losses keep their shape. */
	if (p->drops_bpf) {
		mp_json_u64(j, "bpfAllocs", p->drops_bpf_allocs);
		mp_json_u64(j, "bpfFrees", p->drops_bpf_frees);
		mp_json_u64(j, "bpfReallocs", p->drops_bpf_reallocs);
		mp_json_u64(j, "bpfOthers", p->drops_bpf_others);
	}
	if (p->drops_bpf || p->drops_heap)
		mp_json_str(j, "heapBound", mp_heap_bound_name(mp_profile_heap_bound(p)));
	/* Only when streaming lost something: older readers' shape stays. */
	if (p->stream_chunks_lost)
		mp_json_u64(j, "streamChunks", p->stream_chunks_lost);
	mp_json_object_end(j);
}

static int write_json(const struct mp_profile *p, FILE *f)
{
	struct mp_json j;
	int r;

	mp_json_init(&j, f, true);
	mp_json_object_begin(&j, NULL);
	mp_json_u64(&j, "formatVersion", p->format_version);
	mp_json_object_begin(&j, "process");
	mp_json_i64(&j, "pid", p->pid);
	mp_json_str(&j, "exe", p->exe);
	mp_json_str(&j, "buildId", p->build_id);
	mp_json_str(&j, "cmdline", p->cmdline);
	mp_json_object_end(&j);
	mp_json_str(&j, "clock", p->clock == MP_CLOCK_MONOTONIC ? "CLOCK_MONOTONIC" : "unknown");
	mp_json_object_begin(&j, "sampling");
	mp_json_u64(&j, "rssIntervalNs", p->rss_interval_ns);
	mp_json_u64(&j, "pssIntervalNs", p->pss_interval_ns);
	mp_json_bool(&j, "rssExact", p->rss_exact);
	mp_json_str(&j, "traceMode", mode_name(p->trace_mode));
	mp_json_u64(&j, "sampleBytes", p->sample_bytes);
	mp_json_u64(&j, "dutyOnNs", p->duty_on_ns);
	mp_json_u64(&j, "dutyPeriodNs", p->duty_period_ns);
	mp_json_u64(&j, "dutyActiveNs", p->duty_active_ns);
	/* profiles from before the in-process path say nothing about it */
	if (p->tracer_path) {
		mp_json_str(&j, "tracerPath", mp_tracer_path_name(p->tracer_path));
		mp_json_u64(&j, "heapWaits", p->heap_waits);
		mp_json_bool(&j, "injected", p->injected);
		mp_json_str(&j, "tracerPathReason", p->tracer_path_reason);
	}
	mp_json_object_end(&j);
	mp_json_u64(&j, "beginNs", p->begin_ns);
	mp_json_u64(&j, "endNs", p->end_ns);
	mp_json_i64(&j, "newBytes", p->mem.bytes_added);
	mp_json_i64(&j, "newTensors", p->mem.tensors_added);
	mp_json_u64(&j, "peakBytes", p->peak_bytes);
	if (has_stderr(p)) {
		mp_json_u64(&j, "newBytesStderr", stderr_of(p->added_var));
		mp_json_u64(&j, "peakBytesStderr", stderr_of(p->peak_var));
		mp_json_u64(&j, "peakBytesBiasBound", (uint64_t)llround(p->peak_bias_bound));
	}
	mp_json_u64(&j, "peakTensors", p->peak_tensors);
	r = mp_peak_json_profile(&j, p);
	json_mem(&j, "heap", &p->mem);
	mp_maps_json_profile(&j, p);
	mp_json_u64(&j, "unknownFrees", p->unknown_frees);
	mp_json_bool(&j, "truncated", p->truncated);
	json_drops(&j, p);
	mp_json_object_begin(&j, "anomalies");
	mp_json_u64(&j, "unmatchedEnds", p->unmatched_ends);
	mp_json_u64(&j, "unmatchedTagEnds", p->unmatched_tag_ends);
	mp_json_u64(&j, "orphanShapes", p->orphan_shapes);
	mp_json_u64(&j, "accountingErrors", p->accounting_errors);
	mp_json_u64(&j, "markerGaps", p->marker_gaps);
	/* Only when it happened: it means the heap figures are not real. */
	if (p->probe_hits_unmatched)
		mp_json_u64(&j, "probeHitsUnmatched", p->probe_hits_unmatched);
	/* Only when it happened, as files from before it have none. */
	if (p->internal_frees)
		mp_json_u64(&j, "allocatorInternalFrees", p->internal_frees);
	if (p->unseen_objects) {
		mp_json_u64(&j, "unseenObjects", p->unseen_objects);
		mp_json_array_begin(&j, "unseenObjectNames");
		for (uint32_t i = 0; i < p->n_unseen_names; i++)
			mp_json_str(&j, NULL, p->unseen_names[i]);
		mp_json_array_end(&j);
	}
	mp_json_object_end(&j);
	json_hardening(&j, p);
	json_limits(&j, p);
	json_stacks(&j, p);
	json_wrappers(&j, p);
	mp_json_array_begin(&j, "kernels");
	for (uint32_t i = 0; i < p->n_kernels; i++)
		json_kernel(&j, p, &p->kernels[i]);
	mp_json_array_end(&j);
	mp_json_array_begin(&j, "invocations");
	for (uint32_t i = 0; i < p->n_invocations; i++)
		json_invocation(&j, p, i);
	mp_json_array_end(&j);
	if (r == 0)
		r = json_phases(&j, p);
	json_pools(&j, p, "owners", p->owners, p->n_owners);
	json_pools(&j, p, "tags", p->tags, p->n_tags);
	json_mempools(&j, p);
	json_rss(&j, p);
	json_sites(&j, p);
	mp_json_object_end(&j);
	if (r < 0) {
		(void)mp_json_finish(&j);
		return r;
	}
	return mp_json_finish(&j);
}

/* ---- table ---- */

static void put_bytes(FILE *f, int64_t v)
{
	fprintf(f, " %14" PRId64, v);
}

/* A duration as --duty takes it: the largest unit that divides it. */
static void put_span(FILE *f, uint64_t ns)
{
	static const struct {
		uint64_t ns;
		const char *unit;
	} units[] = { { 1000000000, "s" }, { 1000000, "ms" }, { 1000, "us" } };

	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
		if (ns && ns % units[i].ns == 0) {
			fprintf(f, "%" PRIu64 "%s", ns / units[i].ns, units[i].unit);
			return;
		}
	}
	fprintf(f, "%" PRIu64 "ns", ns);
}

static void put_losses(FILE *f, const struct mp_profile *p)
{
	if (p->drops_heap)
		fprintf(f,
			"LOST: %" PRIu64 " heap records dropped in the process; %s; allocated "
			"and freed totals are lower bounds\n",
			p->drops_heap, mp_profile_heap_bound_text(p));
	if (p->drops_bpf)
		fprintf(f,
			"LOST: %" PRIu64 " events (BPF ring buffer full): %" PRIu64
			" allocations, %" PRIu64 " frees, %" PRIu64 " reallocs, %" PRIu64
			" others; %s\n",
			p->drops_bpf, p->drops_bpf_allocs, p->drops_bpf_frees,
			p->drops_bpf_reallocs, p->drops_bpf_others, mp_profile_heap_bound_text(p));
	if (p->unseen_objects) {
		fprintf(f,
			"UNSEEN: %" PRIu64 " object%s the allocator past the interposer (their "
			"blocks are in no figure):",
			p->unseen_objects, p->unseen_objects == 1 ? " calls" : "s call");
		for (uint32_t i = 0; i < p->n_unseen_names; i++)
			fprintf(f, "%s %s", i ? ";" : "", p->unseen_names[i]);
		fputs(p->unseen_objects > p->n_unseen_names ? "; ...\n" : "\n", f);
	}
}

/* What the heap figures below mean depends on how they were traced. */
static void put_mode(FILE *f, const struct mp_profile *p)
{
	switch (p->trace_mode) {
	case MP_TRACE_PRECISE:
		fputs("mode: precise\n", f);
		break;
	case MP_TRACE_SAMPLED:
		fprintf(f,
			"mode: sampled, mean interval %" PRIu64 " B (heap figures are estimates)\n",
			p->sample_bytes);
		break;
	case MP_TRACE_RSS:
		/* files from before mappings were a view apart counted them
		 * in the heap figures */
		fputs(p->maps_recorded ? "mode: rss (no allocator probes: heap figures are the "
					 "break (brk), anonymous mmaps the mappings)\n" :
					 "mode: rss (no allocator probes: heap figures cover "
					 "anonymous mappings and brk)\n",
		      f);
		break;
	default:
		fprintf(f, "mode: unknown (%" PRIu32 ")\n", p->trace_mode);
		break;
	}
	if (p->trace_mode == MP_TRACE_RSS && p->tracer_path == MP_PATH_BPF &&
	    !p->tracer_path_reason[0])
		fputs("path: none (rss mode: no allocator probes)\n", f);
	else if (p->tracer_path == MP_PATH_INPROCESS)
		fprintf(f, "path: in-process (libmemprof %s)\n",
			p->tracer_path_reason[0] ? p->tracer_path_reason : "interposer");
	else if (p->tracer_path == MP_PATH_BPF && p->tracer_path_reason[0])
		fprintf(f, "path: eBPF uprobes (%s)\n", p->tracer_path_reason);
	else if (p->tracer_path == MP_PATH_BPF)
		fputs("path: eBPF uprobes\n", f);
	put_losses(f, p);
	if (p->duty_period_ns) {
		fputs("duty cycle ", f);
		put_span(f, p->duty_on_ns);
		fputc('/', f);
		put_span(f, p->duty_period_ns);
		fprintf(f, ", active %.3f s: heap figures cover only those windows\n",
			p->duty_active_ns / 1e9);
	}
}

/* Limits (docs/PROFILE.md "Limits"): each bound reached, by name. */
static void put_limits(FILE *f, const struct mp_profile *p)
{
	const struct mp_limits *l = &p->limits;

	if (l->reached & MP_LIMIT_LIVE)
		fprintf(f,
			"limit reached: live table (%" PRIu64 " blocks, max_memory %" PRIu64
			" MiB): %" PRIu64 " new blocks, %" PRIu64
			" B, counted but not tracked (heap figures are lower bounds)\n",
			l->live_blocks, l->memory >> 20, l->untracked_allocs, l->untracked_bytes);
	if (l->reached & MP_LIMIT_SITES)
		fprintf(f,
			"limit reached: sites (max_sites %" PRIu32 "): %" PRIu64
			" sites with the fewest bytes evicted, their %" PRIu64
			" allocations counted in \"(other sites)\"; a site listed lacks at most %" PRIu64
			" B, and every site with more than 1/%" PRIu32 " of the bytes is listed\n",
			l->sites, l->sites_evicted, p->sites_dropped, l->site_error_bytes,
			l->sites);
	if (l->reached & MP_LIMIT_STACKS)
		fprintf(f,
			"limit reached: stacks (max_stacks %" PRIu32 ", %" PRIu64
			" frames): %" PRIu64 " allocations keep their caller alone\n",
			l->stacks, l->stack_frames, p->stacks_dropped);
	if (l->reached & MP_LIMIT_NAMES)
		fputs("limit reached: kernel names (65535): later names are \"(other)\"\n", f);
}

/* Call stacks on the in-process path: how they were taken. */
static void put_stacks(FILE *f, const struct mp_profile *p)
{
	if (!p->stack_depth || (!p->stacks_unwound && !p->stacks_copied))
		return;
	fprintf(f,
		"stacks: %" PRIu64 " unwound in process, %" PRIu64
		" copied and unwound by memprofd\n",
		p->stacks_unwound, p->stacks_copied);
	if (!p->n_python_tids)
		return;
	fprintf(f, "python frames: in the stacks of %" PRIu32 " thread%s (", p->n_python_tids,
		p->n_python_tids == 1 ? "" : "s");
	for (uint32_t i = 0; i < p->n_python_tids && i < 8; i++)
		fprintf(f, "%s%" PRIu32, i ? ", " : "", p->python_tids[i]);
	fprintf(f, "%s); the others' are native frames only\n",
		p->n_python_tids > 8 ? ", ..." : "");
}

/* Allocator wrappers: owners and sites are the first caller beyond them. */
static void put_wrappers(FILE *f, const struct mp_profile *p)
{
	const struct mp_wrappers_info *w = &p->wrappers;

	if (!w->on)
		return;
	fprintf(f,
		"wrappers: %" PRIu32 " functions in %" PRIu32 " objects skipped (%s): %" PRIu64
		" allocations charged past them",
		w->functions, w->objects, w->default_list ? "default list" : "user list",
		w->skipped);
	if (w->fallbacks)
		fprintf(f, ", %" PRIu64 " left at a wrapper (no stack or unwind failed)",
			w->fallbacks);
	fputc('\n', f);
}

static const char *mempool_name(const struct mp_profile *p, uint32_t id)
{
	return id < p->n_mempools ? p->mempools[id].name : "(invalid)";
}

/* A row of the tables naming two things (PHASE/POOL, KERNEL/POOL,
 * POOL/TAG) and four byte figures. */
static void put_pool_row(FILE *f, const char *a, const char *b, int64_t v0, int64_t v1, int64_t v2,
			 int64_t v3)
{
	mp_text_put_name(f, a, 32);
	fputc(' ', f);
	mp_text_put_name(f, b, 16);
	put_bytes(f, v0);
	put_bytes(f, v1);
	put_bytes(f, v2);
	put_bytes(f, v3);
	fputc('\n', f);
}

/* Pools declared but never used (a --device preset's functions the program
 * does not call): one line naming them instead of rows of zeros. */
static void table_unused_pools(const struct mp_profile *p, FILE *f, uint32_t used)
{
	bool first = true;

	if (used == p->n_mempools)
		return;
	fputs(used ? "unused pools (not shown):" : "\npools: none used; declared:", f);
	for (uint32_t i = 0; i < p->n_mempools; i++) {
		if (mp_mempool_used(&p->mempools[i]))
			continue;
		fputs(first ? " " : ", ", f);
		mp_text_put_name(f, p->mempools[i].name, 0);
		first = false;
	}
	fputc('\n', f);
}

/* Slices by tag, as the TAG table is for heap blocks; only when some slice
 * was made under a tag (else it would repeat the POOL table). */
static void table_pool_tags(const struct mp_profile *p, FILE *f)
{
	bool tagged = false;

	for (uint32_t i = 0; i < p->n_mempools && !tagged; i++)
		for (uint32_t t = 0; t < p->mempools[i].n_tags; t++)
			if (p->mempools[i].tags[t].tag != MP_TAG_NONE &&
			    p->mempools[i].tags[t].mem.alloc_count)
				tagged = true;
	if (!tagged)
		return;
	fprintf(f, "\n%-32s %-16s %14s %14s %14s %14s\n", "POOL", "TAG", "ALLOC_BYTES",
		"LIVE_BYTES", "PEAK_BYTES", "NET_BYTES");
	for (uint32_t i = 0; i < p->n_mempools; i++) {
		const struct mp_mempool *mp = &p->mempools[i];

		for (uint32_t t = 0; t < mp->n_tags; t++) {
			const struct mp_pool_tag *pt = &mp->tags[t];

			if (!pt->mem.alloc_count && !pt->mem.free_count)
				continue;
			put_pool_row(f, mp->name, pool_name(p->tags, p->n_tags, pt->tag),
				     (int64_t)pt->mem.alloc_bytes, (int64_t)pt->live_bytes,
				     (int64_t)pt->peak_bytes, pt->mem.bytes_added);
		}
	}
}

/* Pools are a view apart from the heap above: an arena's slices are here,
 * its backing malloc is in the heap figures; device memory is in neither
 * the heap nor RSS. */
static void table_pools(const struct mp_profile *p, FILE *f)
{
	uint32_t used = 0;

	for (uint32_t i = 0; i < p->n_mempools; i++)
		used += mp_mempool_used(&p->mempools[i]);
	if (!used) {
		table_unused_pools(p, f, used);
		return;
	}
	fputs("\npools (a separate view: slices the program or a device runtime handed out;\n"
	      "an arena's backing malloc is counted once, in the heap figures above)\n",
	      f);
	fprintf(f, "%-32s %6s %14s %14s %14s %14s %8s\n", "POOL", "KIND", "ALLOC_BYTES",
		"LIVE_BYTES", "PEAK_BYTES", "NET_BYTES", "RESETS");
	for (uint32_t i = 0; i < p->n_mempools; i++) {
		const struct mp_mempool *mp = &p->mempools[i];

		if (!mp_mempool_used(mp))
			continue;
		mp_text_put_name(f, mp->name, 32);
		fprintf(f, " %6s", mp_pool_kind_name(mp->kind));
		put_bytes(f, (int64_t)mp->mem.alloc_bytes);
		put_bytes(f, (int64_t)mp->live_bytes);
		put_bytes(f, (int64_t)mp->peak_bytes);
		put_bytes(f, mp->mem.bytes_added);
		fprintf(f, " %8" PRIu64 "\n", mp->resets);
	}
	table_unused_pools(p, f, used);
	table_pool_tags(p, f);
	if (p->n_phases) {
		fprintf(f, "\n%-32s %-16s %14s %14s %14s %14s\n", "PHASE", "POOL", "ALLOC_BYTES",
			"FREE_BYTES", "PEAK_ADDED", "PEAK_LIVE");
		for (uint32_t i = 0; i < p->n_phases; i++) {
			const struct mp_phase *ph = &p->phases[i];

			for (uint32_t b = 0; b < ph->n_pools; b++) {
				const struct mp_pool_bucket *pb = &ph->pools[b];

				if (!pb->peak_bytes && !pb->alloc_count && !pb->free_count)
					continue;
				put_pool_row(f, ph->name, mempool_name(p, pb->id),
					     (int64_t)pb->alloc_bytes, (int64_t)pb->free_bytes,
					     (int64_t)pb->peak_added, (int64_t)pb->peak_bytes);
			}
		}
	}
	fprintf(f, "\n%-32s %-16s %14s %14s %14s %14s\n", "KERNEL", "POOL", "ALLOC_BYTES",
		"FREE_BYTES", "PEAK_ADDED", "PEAK_LIVE");
	for (uint32_t i = 0; i < p->n_kernels; i++) {
		const struct mp_kernel *k = &p->kernels[i];

		for (uint32_t b = 0; b < k->n_pools; b++) {
			const struct mp_pool_bucket *pb = &k->pools[b];

			if (!pb->alloc_count && !pb->free_count)
				continue;
			put_pool_row(f, name_of(p, k->name), mempool_name(p, pb->id),
				     (int64_t)pb->alloc_bytes, (int64_t)pb->free_bytes,
				     (int64_t)pb->peak_added, (int64_t)pb->peak_bytes);
		}
	}
}

/* Lines only a damaged or exec'ing run has, so other tables stay as they were. */
static void put_hardening(FILE *f, const struct mp_profile *p)
{
	uint64_t lost = 0;

	for (uint32_t i = 0; i < p->n_kernels; i++)
		lost += p->kernels[i].markers_lost;
	if (p->marker_gaps || lost)
		fprintf(f,
			"lost markers: %" PRIu64 " gaps; %" PRIu64
			" invocations left out of the kernel figures\n",
			p->marker_gaps, lost);
	/* refused records and stuck rings have the CORRUPTION line */
	if (p->corruption &
	    (MP_CORRUPT_RING_HEADER | MP_CORRUPT_RING_RECORDS | MP_CORRUPT_RING_OPEN))
		fprintf(f, "CORRUPTED marker ring:%s%s%s; marker figures are incomplete\n",
			p->corruption & MP_CORRUPT_RING_HEADER ? " header counters" : "",
			p->corruption & MP_CORRUPT_RING_RECORDS ? " records" : "",
			p->corruption & MP_CORRUPT_RING_OPEN ? " refused at attach" : "");
	for (uint32_t i = 0; i < p->n_execs; i++) {
		fprintf(f, "exec at +%.6f s by tid %" PRIu32 ": ",
			p->execs[i].ts_ns > p->begin_ns ? (p->execs[i].ts_ns - p->begin_ns) / 1e9 :
							  0.0,
			p->execs[i].tid);
		mp_text_put_name(f, p->execs[i].path ? p->execs[i].path : "?", 0);
		fprintf(f,
			", %" PRIu32 " open kernels closed, %" PRIu64 " B in %" PRIu64
			" live blocks released\n",
			p->execs[i].kernels_closed, p->execs[i].released_bytes,
			p->execs[i].released_blocks);
	}
	if (p->exec_count > p->n_execs)
		fprintf(f, "%" PRIu64 " more execs\n", p->exec_count - p->n_execs);
}

/* The heap line of sampled mode: every estimate with its standard error,
 * and the peak with the bound on its upward bias (docs/PROFILE.md
 * "Sampled figures"). */
static void put_sampled_heap(FILE *f, const struct mp_profile *p)
{
	fprintf(f,
		"heap: new %" PRId64 " ± %" PRIu64 " B in %" PRId64 " blocks, peak %" PRIu64
		" ± %" PRIu64 " B (biased up by at most %" PRIu64 " B), allocated %" PRIu64
		" ± %" PRIu64 " B in %" PRIu64 " blocks, freed %" PRIu64 " ± %" PRIu64
		" B in %" PRIu64 " blocks, unknown frees %" PRIu64 "\n",
		p->mem.bytes_added, stderr_of(p->added_var), p->mem.tensors_added, p->peak_bytes,
		stderr_of(p->peak_var), (uint64_t)llround(p->peak_bias_bound), p->mem.alloc_bytes,
		stderr_of(p->mem.alloc_var), p->mem.alloc_count, p->mem.free_bytes,
		stderr_of(p->mem.free_var), p->mem.free_count, p->unknown_frees);
}

static void table_kernels(const struct mp_profile *p, bool sampled, FILE *f)
{
	int w = 32;

	for (uint32_t i = 0; i < p->n_kernels; i++)
		w = mp_text_name_col(w, name_of(p, p->kernels[i].name));
	fprintf(f, "\n%-*s %8s %14s %14s%s %14s%s %14s%s %14s %12s\n", w, "KERNEL", "CALLS",
		"BYTES_ADDED", "ALLOC_BYTES", sampled ? "    ±ALLOC_BYTES" : "", "PEAK_ADDED",
		sampled ? "     ±PEAK_ADDED   BIAS_ADDED<=" : "", "PEAK_LIVE",
		sampled ? "      ±PEAK_LIVE" : "", "RSS_DELTA", "TIME_MS");
	for (uint32_t i = 0; i < p->n_kernels; i++) {
		const struct mp_kernel *k = &p->kernels[i];

		mp_text_put_name(f, name_of(p, k->name), w);
		fprintf(f, " %8" PRIu64, k->calls);
		put_bytes(f, k->incl.bytes_added);
		put_bytes(f, (int64_t)k->incl.alloc_bytes);
		if (sampled)
			fprintf(f, " ±%14" PRIu64, stderr_of(k->incl.alloc_var));
		put_bytes(f, (int64_t)k->peak_added);
		if (sampled)
			fprintf(f, " ±%14" PRIu64 " %14" PRIu64, stderr_of(k->peak_added_var),
				bytes_of(k->peak_added_bias_bound));
		put_bytes(f, (int64_t)k->peak_bytes);
		if (sampled)
			fprintf(f, " ±%14" PRIu64, stderr_of(k->peak_var));
		if (k->rss_calls)
			put_bytes(f, k->rss_delta_sum);
		else
			fprintf(f, " %14s", "-");
		fprintf(f, " %12.3f\n", k->total_ns / 1e6);
	}
	if (sampled)
		fprintf(f,
			"sampled peaks: PEAK_LIVE and the phases' PEAK_BYTES biased up by at most %" PRIu64
			" B (as the process peak); PEAK_ADDED by at most BIAS_ADDED\n",
			bytes_of(p->peak_bias_bound));
}

static void table_phases(const struct mp_profile *p, bool sampled, FILE *f)
{
	int w = 32;

	if (!p->n_phases)
		return;
	for (uint32_t i = 0; i < p->n_phases; i++)
		w = mp_text_name_col(w, p->phases[i].name);
	fprintf(f, "\n%-*s %12s %14s %14s%s %14s\n", w, "PHASE", "TIME_MS", "NET_BYTES",
		"PEAK_BYTES", sampled ? "     ±PEAK_BYTES" : "", "RSS_PEAK");
	for (uint32_t i = 0; i < p->n_phases; i++) {
		const struct mp_phase *ph = &p->phases[i];

		mp_text_put_name(f, ph->name, w);
		fprintf(f, " %12.3f", ph->duration_ns / 1e6);
		put_bytes(f, ph->mem.bytes_added);
		put_bytes(f, (int64_t)ph->peak_bytes);
		if (sampled)
			fprintf(f, " ±%14" PRIu64, stderr_of(ph->peak_var));
		put_bytes(f, (int64_t)ph->rss_peak);
		fputc('\n', f);
	}
}

/* Owners by bytes allocated, the highest first (rank.h); tags as first
 * seen. Without memory for the order, as first seen. */
static void table_owners_tags(const struct mp_profile *p, bool sampled, FILE *f)
{
	for (int t = 0; t < 2; t++) {
		const struct mp_pool *v = t ? p->tags : p->owners;
		uint32_t n = t ? p->n_tags : p->n_owners, *order = NULL;
		int w = 32;

		if (!t)
			(void)mp_rank_pools(v, n, MP_RANK_ALLOC, &order);

		for (uint32_t i = 0; i < n; i++)
			if (v[i].mem.alloc_count)
				w = mp_text_name_col(w, v[i].name);
		fprintf(f, "\n%-*s %14s %14s %14s%s %14s\n", w, t ? "TAG" : "OWNER", "ALLOC_BYTES",
			"LIVE_BYTES", "PEAK_BYTES",
			sampled ? "     ±PEAK_BYTES         BIAS<=" : "", "NET_BYTES");
		for (uint32_t k = 0; k < n; k++) {
			const struct mp_pool *o = &v[order ? order[k] : k];

			if (!o->mem.alloc_count)
				continue;
			mp_text_put_name(f, o->name, w);
			put_bytes(f, (int64_t)o->mem.alloc_bytes);
			put_bytes(f, (int64_t)o->live_bytes);
			put_bytes(f, (int64_t)o->peak_bytes);
			if (sampled)
				fprintf(f, " ±%14" PRIu64 " %14" PRIu64, stderr_of(o->peak_var),
					bytes_of(o->peak_bias_bound));
			put_bytes(f, o->mem.bytes_added);
			fputc('\n', f);
		}
		free(order);
	}
}

/* At the top of the table: a target that lied or broke its ring. Refused
 * records reached no figure; the rest of the table is what remained. */
static void put_corruption_head(FILE *f, const struct mp_profile *p)
{
	const char *sep = " ";
	bool any = false;

	if (!p->corruption)
		return;
	fputs("CORRUPTION:", f);
	for (int i = 0; i < MP_REJECT_COUNT; i++) {
		if (!p->rejected[i])
			continue;
		fprintf(f, "%s%" PRIu64 " %s", any ? ", " : " refused records: ", p->rejected[i],
			reject_names[i]);
		any = true;
		sep = "; ";
	}
	if (p->stuck_rings) {
		fprintf(f, "%s%" PRIu64 " stuck rings", sep, p->stuck_rings);
		sep = "; ";
	}
	if (p->corruption &
	    (MP_CORRUPT_RING_HEADER | MP_CORRUPT_RING_RECORDS | MP_CORRUPT_RING_OPEN))
		fprintf(f, "%smarker ring damaged", sep);
	fputs(any ? " (refused records reach no figure)\n" : "\n", f);
}

static int write_table(const struct mp_profile *p, FILE *f)
{
	uint64_t win = p->end_ns > p->begin_ns ? p->end_ns - p->begin_ns : 0;
	bool sampled = has_stderr(p);

	fprintf(f, "memprofd profile: pid %" PRId32 " ", p->pid);
	mp_text_put_name(f, p->exe ? p->exe : "?", 0);
	fprintf(f, "\nwindow: %.3f s%s\n", win / 1e9, p->truncated ? " (truncated)" : "");
	put_corruption_head(f, p);
	put_mode(f, p);
	put_limits(f, p);
	put_stacks(f, p);
	put_wrappers(f, p);
	if (sampled)
		put_sampled_heap(f, p);
	else
		fprintf(f,
			"heap: new %" PRId64 " B in %" PRId64 " blocks, peak %" PRIu64
			" B, allocated %" PRIu64 " B in %" PRIu64 " blocks, freed %" PRIu64
			" B in %" PRIu64 " blocks, unknown frees %" PRIu64 "\n",
			p->mem.bytes_added, p->mem.tensors_added, p->peak_bytes, p->mem.alloc_bytes,
			p->mem.alloc_count, p->mem.free_bytes, p->mem.free_count, p->unknown_frees);
	if (p->internal_frees)
		fprintf(f,
			"allocator's own frees of blocks never seen allocated: %" PRIu64
			" (a thread's cache flushed at its exit; in no figure)\n",
			p->internal_frees);
	mp_maps_table_head(p, f);
	if (p->rss_samples)
		fprintf(f, "rss: peak %" PRIu64 " B over %" PRIu64 " samples\n", p->rss_peak,
			p->rss_samples);

	table_kernels(p, sampled, f);
	table_phases(p, sampled, f);
	table_owners_tags(p, sampled, f);
	mp_peak_table(p, f);
	mp_maps_table(p, f);
	table_pools(p, f);
	fprintf(f,
		"\ndrops: ring %" PRIu64 ", bpf %" PRIu64 ", invocations beyond cap %" PRIu64
		", markers %" PRIu64 "; unmatched ends %" PRIu64 "; truncated: %s\n",
		p->drops_ring, p->drops_bpf, p->invocations_dropped, p->dropped_markers,
		p->unmatched_ends, p->truncated ? "yes" : "no");
	put_hardening(f, p);
	if (p->stream_chunks_lost)
		fprintf(f, "streaming: %" PRIu64 " chunks not delivered to a collector\n",
			p->stream_chunks_lost);
	if (p->probe_hits_unmatched)
		fprintf(f,
			"warning: %" PRIu64 " allocator probe hits were not the target's "
			"(pid not recognised): heap figures are incomplete\n",
			p->probe_hits_unmatched);
	return ferror(f) ? -EIO : 0;
}

int mp_report_write_pool(const struct mp_profile *p, enum mp_report_format format,
			 const char *region, const char *pool, FILE *f)
{
	switch (format) {
	case MP_REPORT_TABLE:
		return write_table(p, f);
	case MP_REPORT_JSON:
		return write_json(p, f);
	case MP_REPORT_TFJS:
		return write_tfjs(p, region, pool, f);
	case MP_REPORT_HTML:
		return mp_html_write(p, f);
	}
	return -EINVAL;
}

int mp_report_write(const struct mp_profile *p, enum mp_report_format format, const char *region,
		    FILE *f)
{
	return mp_report_write_pool(p, format, region, NULL, f);
}
