/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "chrome.h"
#include "hashmap.h"
#include "json.h"
#include "text.h"

struct out {
	const struct mp_profile *p;
	FILE *f;
	uint64_t w0, w1; /* window; every timestamp is clamped into it */
	bool first;
	int err;
};

static uint64_t clamp(uint64_t v, uint64_t lo, uint64_t hi)
{
	return v < lo ? lo : v > hi ? hi : v;
}

/* Microseconds with three decimals: exact, and parsed back to the same
 * nanosecond by Perfetto (which rounds ts * 1000). */
static void put_us(struct out *o, const char *key, uint64_t ns)
{
	fprintf(o->f, ",\"%s\":%" PRIu64 ".%03u", key, ns / 1000, (unsigned)(ns % 1000));
}

static void ev_begin(struct out *o, const char *ph, const char *cat, const char *name)
{
	fputs(o->first ? "\n{\"ph\":\"" : ",\n{\"ph\":\"", o->f);
	o->first = false;
	fputs(ph, o->f);
	fputc('"', o->f);
	if (cat)
		fprintf(o->f, ",\"cat\":\"%s\"", cat);
	fputs(",\"name\":", o->f);
	mp_json_write_string(o->f, name ? name : "");
	fprintf(o->f, ",\"pid\":%" PRId32, o->p->pid);
}

static void ev_tid(struct out *o, uint32_t tid)
{
	fprintf(o->f, ",\"tid\":%" PRIu32, tid);
}

static void ev_ts(struct out *o, uint64_t ts)
{
	put_us(o, "ts", clamp(ts, o->w0, o->w1) - o->w0);
}

/* The args object goes through the JSON writer (escaping, nesting); the
 * event's own fields are written directly because the writer has no
 * fractional numbers. */
static void args_begin(struct out *o, struct mp_json *j)
{
	fputs(",\"args\":", o->f);
	mp_json_init(j, o->f, false);
	mp_json_object_begin(j, NULL);
}

/* Closes the args and the event. */
static void args_end(struct out *o, struct mp_json *j)
{
	mp_json_object_end(j);
	if (j->err || j->depth)
		o->err = -EINVAL;
	fputc('}', o->f);
}

static const char *name_of(const struct mp_profile *p, uint32_t id)
{
	return id < p->n_names && p->names[id] ? p->names[id] : "(invalid)";
}

static const char *exe_base(const struct mp_profile *p)
{
	const char *s;

	if (!p->exe || !*p->exe)
		return NULL;
	s = strrchr(p->exe, '/');
	return s && s[1] ? s + 1 : p->exe;
}

/* ---- slice nesting ---- */

/* Sort key of an invocation's slice: thread, clamped begin, index (on
 * equal begins the earlier invocation is the enclosing one). */
struct slot {
	uint32_t tid, idx;
	uint64_t begin;
};

static int by_thread_begin(const void *a, const void *b)
{
	const struct slot *x = a, *y = b;

	if (x->tid != y->tid)
		return x->tid < y->tid ? -1 : 1;
	if (x->begin != y->begin)
		return x->begin < y->begin ? -1 : 1;
	return x->idx < y->idx ? -1 : x->idx > y->idx;
}

/* Fills @b/@e with each invocation's slice: clamped to the window, then
 * placed on its thread's stack of open slices, in begin order. A slice that
 * begins before the top of the stack ends is nested in it and is cut to end
 * with it; one that begins at or after that end closes it first. The result
 * nests on every thread whatever the input (a file may hold anything, and
 * merged streams may be a little out of order); with consistent markers it
 * is exactly the model's parent relation. @order gets the invocations
 * sorted by thread. */
static void place_slices(const struct mp_profile *p, uint64_t w0, uint64_t w1, struct slot *order,
			 uint32_t *stack, uint64_t *b, uint64_t *e)
{
	uint32_t n = p->n_invocations;

	for (uint32_t i = 0; i < n; i++)
		order[i] = (struct slot){ .tid = p->invocations[i].tid,
					  .idx = i,
					  .begin = clamp(p->invocations[i].begin_ns, w0, w1) };
	qsort(order, n, sizeof(*order), by_thread_begin);
	for (uint32_t g = 0; g < n;) {
		uint32_t tid = order[g].tid, sp = 0;

		for (; g < n && order[g].tid == tid; g++) {
			uint32_t idx = order[g].idx;
			uint64_t bb = order[g].begin, ee;

			ee = clamp(p->invocations[idx].end_ns, bb, w1);
			while (sp && e[stack[sp - 1]] <= bb)
				sp--;
			/* Sorted by begin: b[top] <= bb < e[top]. */
			if (sp && ee > e[stack[sp - 1]])
				ee = e[stack[sp - 1]];
			b[idx] = bb;
			e[idx] = ee;
			stack[sp++] = idx;
		}
	}
}

/* ---- events ---- */

static void metadata(struct out *o, const char *what, uint32_t tid, const char *name)
{
	struct mp_json j;

	ev_begin(o, "M", NULL, what);
	ev_tid(o, tid);
	args_begin(o, &j);
	mp_json_str(&j, "name", name);
	args_end(o, &j);
}

static void slice(struct out *o, uint32_t idx, uint64_t b, uint64_t e)
{
	const struct mp_profile *p = o->p;
	const struct mp_invocation *v = &p->invocations[idx];
	struct mp_json j;

	ev_begin(o, "X", "kernel", name_of(p, v->name));
	ev_tid(o, v->tid);
	put_us(o, "ts", b - o->w0);
	put_us(o, "dur", e - b);
	args_begin(o, &j);
	mp_json_u64(&j, "index", idx);
	mp_json_i64(&j, "bytesAdded", v->incl.bytes_added);
	mp_json_i64(&j, "tensorsAdded", v->incl.tensors_added);
	mp_json_u64(&j, "allocBytes", v->incl.alloc_bytes);
	mp_json_u64(&j, "allocCount", v->incl.alloc_count);
	mp_json_u64(&j, "freeBytes", v->incl.free_bytes);
	mp_json_u64(&j, "freeCount", v->incl.free_count);
	mp_json_i64(&j, "selfBytesAdded", v->excl.bytes_added);
	mp_json_u64(&j, "selfAllocBytes", v->excl.alloc_bytes);
	mp_json_u64(&j, "totalBytesSnapshot", v->total_bytes_snapshot);
	mp_json_u64(&j, "totalTensorsSnapshot", v->total_tensors_snapshot);
	mp_json_u64(&j, "peakBytes", v->peak_bytes);
	mp_json_u64(&j, "peakAdded", v->peak_added);
	mp_json_u64(&j, "retainedBytes", v->retained_bytes);
	mp_json_u64(&j, "retainedCount", v->retained_count);
	if (v->cross_thread_allocs) {
		mp_json_u64(&j, "crossThreadAllocs", v->cross_thread_allocs);
		mp_json_u64(&j, "crossThreadBytes", v->cross_thread_bytes);
	}
	if (v->rss_begin != MP_UNKNOWN && v->rss_end != MP_UNKNOWN) {
		mp_json_u64(&j, "rssBegin", v->rss_begin);
		mp_json_u64(&j, "rssEnd", v->rss_end);
		mp_json_i64(&j, "rssDelta", (int64_t)(v->rss_end - v->rss_begin));
	}
	if (p->rss_exact)
		mp_json_i64(&j, "rssExact", v->rss_exact_incl);
	if (v->phase < p->n_phases && p->phases[v->phase].name)
		mp_json_str(&j, "phase", p->phases[v->phase].name);
	if (v->n_inputs)
		mp_json_shapes(&j, "inputShapes", v->inputs, v->n_inputs);
	if (v->n_outputs)
		mp_json_shapes(&j, "outputShapes", v->outputs, v->n_outputs);
	if (v->flags & MP_INV_F_OPEN_AT_ATTACH)
		mp_json_bool(&j, "openAtAttach", true);
	if (v->flags & MP_INV_F_TRUNCATED)
		mp_json_bool(&j, "truncated", true);
	if (v->flags & MP_INV_F_MARKERS_LOST)
		mp_json_bool(&j, "markersLost", true);
	if (v->flags & MP_INV_F_EXEC)
		mp_json_bool(&j, "closedAtExec", true);
	if (b != v->begin_ns || e != v->end_ns) {
		mp_json_u64(&j, "modelBeginNs", v->begin_ns);
		mp_json_u64(&j, "modelEndNs", v->end_ns);
	}
	args_end(o, &j);
}

struct heap_pt {
	uint64_t ts, live;
	uint32_t seq;
};

static int by_ts(const void *a, const void *b)
{
	const struct heap_pt *x = a, *y = b;

	if (x->ts != y->ts)
		return x->ts < y->ts ? -1 : 1;
	return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static void counter_u64(struct out *o, const char *name, uint64_t ts, const char *key, uint64_t v)
{
	struct mp_json j;

	ev_begin(o, "C", NULL, name);
	ev_ts(o, ts);
	args_begin(o, &j);
	mp_json_u64(&j, key, v);
	args_end(o, &j);
}

/* The live heap is known exactly at the window's begin (0: only blocks
 * allocated while attached count), at each RSS sample, at each kernel end
 * (its total_bytes_snapshot) and at the window's end (newBytes). */
static int heap_counter(struct out *o)
{
	const struct mp_profile *p = o->p;
	uint32_t n = 0, cap = p->n_rss + p->n_invocations + 2;
	struct heap_pt *pts = malloc(cap * sizeof(*pts));

	if (!pts)
		return -ENOMEM;
	pts[n] = (struct heap_pt){ o->w0, 0, n };
	n++;
	for (uint32_t i = 0; i < p->n_rss; i++) {
		if (p->rss[i].heap_live == MP_UNKNOWN)
			continue;
		pts[n] = (struct heap_pt){ clamp(p->rss[i].ts_ns, o->w0, o->w1),
					   p->rss[i].heap_live, n };
		n++;
	}
	for (uint32_t i = 0; i < p->n_invocations; i++) {
		const struct mp_invocation *v = &p->invocations[i];

		pts[n] = (struct heap_pt){ clamp(v->end_ns, o->w0, o->w1), v->total_bytes_snapshot,
					   n };
		n++;
	}
	pts[n] = (struct heap_pt){ o->w1, p->mem.bytes_added > 0 ? (uint64_t)p->mem.bytes_added : 0,
				   n };
	n++;
	qsort(pts, n, sizeof(*pts), by_ts);
	for (uint32_t i = 0; i < n; i++) {
		/* One value per instant: the last one taken. */
		if (i + 1 < n && pts[i + 1].ts == pts[i].ts)
			continue;
		counter_u64(o, "heap", pts[i].ts, "live", pts[i].live);
	}
	free(pts);
	return 0;
}

/* The reserved bytes of the anonymous mappings, a track apart from the
 * heap's (docs/PROFILE.md "Mappings"): known at the window's begin (0),
 * at each RSS sample, at each kernel end and at the window's end. Only
 * when the program made or released some. */
static int maps_counter(struct out *o)
{
	const struct mp_profile *p = o->p;
	uint32_t n = 0, cap = p->n_rss + p->n_invocations + 2;
	struct heap_pt *pts;

	if (!p->maps.alloc_count && !p->maps.free_count)
		return 0;
	pts = malloc(cap * sizeof(*pts));
	if (!pts)
		return -ENOMEM;
	pts[n] = (struct heap_pt){ o->w0, 0, n };
	n++;
	for (uint32_t i = 0; i < p->n_rss; i++) {
		if (p->rss[i].maps_live == MP_UNKNOWN)
			continue;
		pts[n] = (struct heap_pt){ clamp(p->rss[i].ts_ns, o->w0, o->w1),
					   p->rss[i].maps_live, n };
		n++;
	}
	for (uint32_t i = 0; i < p->n_invocations; i++) {
		const struct mp_invocation *v = &p->invocations[i];

		pts[n] = (struct heap_pt){ clamp(v->end_ns, o->w0, o->w1), v->maps.live_bytes, n };
		n++;
	}
	pts[n] = (struct heap_pt){ o->w1, p->maps.live_bytes, n };
	n++;
	qsort(pts, n, sizeof(*pts), by_ts);
	for (uint32_t i = 0; i < n; i++) {
		if (i + 1 < n && pts[i + 1].ts == pts[i].ts)
			continue;
		counter_u64(o, "anonymous mappings", pts[i].ts, "reserved", pts[i].live);
	}
	free(pts);
	return 0;
}

/* One counter track per used pool, apart from the heap track: a pool's live
 * slices are known at each kernel end (its bucket's live_end) and at the
 * window's end. Device pools are never added to the heap or RSS tracks. */
static int pool_counters(struct out *o)
{
	const struct mp_profile *p = o->p;
	struct heap_pt *pts;

	if (!p->n_mempools)
		return 0;
	pts = malloc(((size_t)p->n_invocations + 2) * sizeof(*pts));
	if (!pts)
		return -ENOMEM;
	for (uint32_t pl = 0; pl < p->n_mempools; pl++) {
		const struct mp_mempool *mp = &p->mempools[pl];
		char name[96];
		uint32_t n = 0;

		/* a pool declared and never used would be a flat line at 0 */
		if (!mp_mempool_used(mp))
			continue;
		snprintf(name, sizeof(name), "pool %.64s (%s)", mp->name,
			 mp_pool_kind_name(mp->kind));
		pts[n] = (struct heap_pt){ o->w0, 0, n };
		n++;
		for (uint32_t i = 0; i < p->n_invocations; i++) {
			const struct mp_invocation *v = &p->invocations[i];
			const struct mp_pool_bucket *bk =
				mp_pool_bucket_find(v->pools, v->n_pools, pl);

			if (!bk)
				continue;
			pts[n] =
				(struct heap_pt){ clamp(v->end_ns, o->w0, o->w1), bk->live_end, n };
			n++;
		}
		pts[n] = (struct heap_pt){ o->w1, mp->live_bytes, n };
		n++;
		qsort(pts, n, sizeof(*pts), by_ts);
		for (uint32_t i = 0; i < n; i++) {
			if (i + 1 < n && pts[i + 1].ts == pts[i].ts)
				continue;
			counter_u64(o, name, pts[i].ts, "live", pts[i].live);
		}
	}
	free(pts);
	return 0;
}

static void rss_counter(struct out *o)
{
	const struct mp_profile *p = o->p;
	uint64_t last = 0;

	for (uint32_t i = 0; i < p->n_rss; i++) {
		const struct mp_rss_point *pt = &p->rss[i];
		uint64_t ts = clamp(pt->ts_ns, o->w0, o->w1);
		struct mp_json j;

		/* A counter track must go forward in time. */
		if (i && ts <= last)
			continue;
		if (pt->rss_anon == MP_UNKNOWN && pt->rss_file == MP_UNKNOWN &&
		    pt->rss_shmem == MP_UNKNOWN)
			continue;
		last = ts;
		ev_begin(o, "C", NULL, "rss");
		ev_ts(o, ts);
		args_begin(o, &j);
		if (pt->rss_anon != MP_UNKNOWN)
			mp_json_u64(&j, "anon", pt->rss_anon);
		if (pt->rss_file != MP_UNKNOWN)
			mp_json_u64(&j, "file", pt->rss_file);
		if (pt->rss_shmem != MP_UNKNOWN)
			mp_json_u64(&j, "shmem", pt->rss_shmem);
		args_end(o, &j);
	}
}

/* The model keeps one entry per phase (totals over its entries), so only
 * the first entry has a place in time. */
static void phases(struct out *o)
{
	const struct mp_profile *p = o->p;

	for (uint32_t i = 0; i < p->n_phases; i++) {
		const struct mp_phase *ph = &p->phases[i];
		struct mp_json j;

		ev_begin(o, "i", "phase", ph->name);
		fputs(",\"s\":\"p\"", o->f);
		ev_ts(o, ph->first_ns);
		args_begin(o, &j);
		mp_json_u64(&j, "entries", ph->entries);
		mp_json_u64(&j, "durationNs", ph->duration_ns);
		mp_json_i64(&j, "bytesAdded", ph->mem.bytes_added);
		mp_json_u64(&j, "allocBytes", ph->mem.alloc_bytes);
		mp_json_u64(&j, "peakBytes", ph->peak_bytes);
		if (ph->rss_peak)
			mp_json_u64(&j, "rssPeak", ph->rss_peak);
		args_end(o, &j);
	}
}

/* Execs, on the thread that called exec (kernels of the old image end
 * there, flagged truncated). */
static void execs(struct out *o)
{
	const struct mp_profile *p = o->p;

	for (uint32_t i = 0; i < p->n_execs; i++) {
		const struct mp_exec *x = &p->execs[i];
		struct mp_json j;

		ev_begin(o, "i", "exec", "exec");
		fputs(",\"s\":\"p\"", o->f);
		ev_tid(o, x->tid);
		ev_ts(o, x->ts_ns);
		args_begin(o, &j);
		if (x->path)
			mp_json_str(&j, "path", x->path);
		mp_json_u64(&j, "kernelsClosed", x->kernels_closed);
		args_end(o, &j);
	}
}

/* ---- allocation sites and their stacks ---- */

/* A node of the stackFrames tree: one frame reached from @parent (0: a
 * root). Nodes with the same parent, name and category are one node, so a
 * frame shared by many stacks is written once. Its id is its index + 1. */
struct frame {
	uint32_t parent;
	char *name;
	const char *cat;
};

struct frames {
	struct frame *v;
	uint32_t n, cap;
	struct mp_hashmap ids; /* index into v by (parent, name, cat) */
};

struct frame_key {
	uint32_t parent;
	const char *name, *cat;
};

static bool frame_eq(const void *ctx, uint32_t id, const void *key)
{
	const struct frame *f = &((const struct frames *)ctx)->v[id];
	const struct frame_key *k = key;

	return f->parent == k->parent && !strcmp(f->name, k->name) && !strcmp(f->cat, k->cat);
}

/* The id of (@parent, @name, @cat), added if new (@name is copied). */
static int frames_intern(struct frames *fr, uint32_t parent, const char *name, const char *cat,
			 uint32_t *ret)
{
	struct frame_key k = { .parent = parent, .name = name, .cat = cat };
	uint64_t h = mp_hash_combine(mp_hash_combine(mp_hash_u64(parent), mp_hash_str(name)),
				     mp_hash_str(cat));
	uint32_t i;
	int r;

	if (fr->n == fr->cap) {
		uint32_t cap = fr->cap ? fr->cap * 2 : 64;
		struct frame *v = cap > fr->cap ? realloc(fr->v, cap * sizeof(*v)) : NULL;

		if (!v)
			return -ENOMEM;
		fr->v = v;
		fr->cap = cap;
	}
	r = mp_hashmap_intern(&fr->ids, h, frame_eq, fr, &k, fr->n, &i);
	if (r < 0)
		return r;
	if (r == 1) {
		char *copy = strdup(name);

		if (!copy) {
			mp_hashmap_remove(&fr->ids, h, i);
			return -ENOMEM;
		}
		fr->v[fr->n++] = (struct frame){ .parent = parent, .name = copy, .cat = cat };
	}
	*ret = i + 1;
	return 0;
}

static void frames_free(struct frames *fr)
{
	for (uint32_t i = 0; i < fr->n; i++)
		free(fr->v[i].name);
	free(fr->v);
	mp_hashmap_free(&fr->ids);
}

static const char *base_name(const char *path)
{
	const char *s = path ? strrchr(path, '/') : NULL;

	return s && s[1] ? s + 1 : path ? path : "";
}

/* Adds the frames of one return address below @parent, outermost first
 * (the function, then what was inlined into it, innermost last), and sets
 * @parent to the innermost. An address without a symbol is a frame named
 * by its object and offset, or by the address itself. */
static int frames_add_addr(struct frames *fr, const struct mp_profile *p, uint64_t addr,
			   uint32_t *parent)
{
	const struct mp_location *l = mp_profile_location(p, addr);
	const char *cat = "";
	char buf[48], py[512];
	int r;

	if (l && l->python)
		return frames_intern(fr, *parent, mp_text_python_frame(l, py, sizeof(py)), "python",
				     parent);
	if (l && l->object < p->n_objects)
		cat = base_name(p->objects[l->object].path);
	if (!l || !l->function) {
		if (l && l->object < p->n_objects)
			snprintf(buf, sizeof(buf), "+0x%" PRIx64, l->rel_addr);
		else
			snprintf(buf, sizeof(buf), "0x%" PRIx64, addr);
		r = frames_intern(fr, *parent, buf, cat, parent);
	} else {
		r = frames_intern(fr, *parent, l->function, cat, parent);
	}
	for (uint32_t i = l ? l->n_inlined : 0; r >= 0 && i-- > 0;)
		r = frames_intern(fr, *parent,
				  l->inlined[i].function ? l->inlined[i].function : "??", cat,
				  parent);
	return r;
}

/* The frame id of site @s's innermost frame: its whole stack when it has
 * one, else its caller alone. */
static int site_frame(struct frames *fr, const struct mp_profile *p, const struct mp_site *s,
		      uint32_t *ret)
{
	const struct mp_stack *st =
		s->stack && s->stack <= p->n_stacks ? &p->stacks[s->stack - 1] : NULL;
	uint64_t buf[MP_PROFILE_MAX_DEPTH];
	const uint64_t *frames = st ? mp_profile_stack_frames(p, s->stack - 1, buf) : NULL;
	uint32_t id = 0;
	int r = 0;

	if (st && st->n_frames)
		for (uint32_t j = st->n_frames; r >= 0 && j-- > 0;)
			r = frames_add_addr(fr, p, frames[j], &id);
	else
		r = frames_add_addr(fr, p, s->caller, &id);
	*ret = id;
	return r;
}

static void site_event(struct out *o, const struct mp_site *s, const char *name, uint32_t sf,
		       uint32_t tid, uint64_t ts)
{
	const struct mp_profile *p = o->p;
	const struct mp_stack *st =
		s->stack && s->stack <= p->n_stacks ? &p->stacks[s->stack - 1] : NULL;
	struct mp_json j;
	char caller[24];

	ev_begin(o, "i", "site", name);
	ev_tid(o, tid);
	fputs(",\"s\":\"t\"", o->f);
	ev_ts(o, ts);
	fprintf(o->f, ",\"sf\":%" PRIu32, sf);
	args_begin(o, &j);
	if (s->name != MP_NONE)
		mp_json_str(&j, "kernel", name_of(p, s->name));
	else
		mp_json_null(&j, "kernel");
	mp_json_u64(&j, "allocBytes", s->alloc_space);
	mp_json_u64(&j, "allocCount", s->alloc_objects);
	mp_json_u64(&j, "inuseBytes", s->inuse_space);
	mp_json_u64(&j, "inuseCount", s->inuse_objects);
	mp_json_u64(&j, "allocTid", s->tid);
	if (s->owner < p->n_owners && p->owners[s->owner].name)
		mp_json_str(&j, "owner", p->owners[s->owner].name);
	if (s->phase < p->n_phases && p->phases[s->phase].name)
		mp_json_str(&j, "phase", p->phases[s->phase].name);
	if (s->pool && s->pool <= p->n_mempools)
		mp_json_str(&j, "pool", p->mempools[s->pool - 1].name);
	snprintf(caller, sizeof(caller), "0x%" PRIx64, s->caller);
	mp_json_str(&j, "caller", caller);
	if (st && (st->flags & MP_STACK_F_TRUNCATED))
		mp_json_bool(&j, "stackTruncated", true);
	if (!st || !st->n_frames)
		mp_json_bool(&j, "callerOnly", true);
	args_end(o, &j);
}

/* One thread-scoped instant per allocation site of a profile taken with
 * stacks, with its stack as an "sf" reference into @fr. The model has no
 * time per site, only the kernel it is charged to (over all its calls):
 * the event sits at the end of that kernel's last recorded slice, on its
 * thread; a site outside any kernel (or of a kernel without a recorded
 * slice) at the window's end on the allocating thread. */
static int sites(struct out *o, const uint64_t *e, struct frames *fr)
{
	const struct mp_profile *p = o->p;
	uint32_t *last;
	int r = 0;

	if (!p->n_sites || (!p->stack_depth && !p->n_stacks))
		return 0;
	last = malloc((p->n_names ? p->n_names : 1) * sizeof(*last));
	if (!last)
		return -ENOMEM;
	for (uint32_t i = 0; i < p->n_names; i++)
		last[i] = MP_NONE;
	for (uint32_t i = 0; i < p->n_invocations; i++) {
		uint32_t nm = p->invocations[i].name;

		if (nm < p->n_names && (last[nm] == MP_NONE || e[i] >= e[last[nm]]))
			last[nm] = i;
	}
	for (uint32_t i = 0; i < p->n_sites && r >= 0; i++) {
		const struct mp_site *s = &p->sites[i];
		uint32_t inv = s->name < p->n_names ? last[s->name] : MP_NONE, sf;

		r = site_frame(fr, p, s, &sf);
		if (r < 0)
			break;
		if (inv != MP_NONE)
			site_event(o, s, fr->v[sf - 1].name, sf, p->invocations[inv].tid, e[inv]);
		else
			site_event(o, s, fr->v[sf - 1].name, sf, s->tid, o->w1);
	}
	free(last);
	return r;
}

/* The top-level "stackFrames" dictionary: id -> {name, category, parent}. */
static void stack_frames(struct out *o, const struct frames *fr)
{
	struct mp_json j;
	char id[16];

	fputs(",\"stackFrames\":", o->f);
	mp_json_init(&j, o->f, false);
	mp_json_object_begin(&j, NULL);
	for (uint32_t i = 0; i < fr->n; i++) {
		snprintf(id, sizeof(id), "%" PRIu32, i + 1);
		mp_json_object_begin(&j, id);
		mp_json_str(&j, "name", fr->v[i].name);
		mp_json_str(&j, "category", fr->v[i].cat);
		if (fr->v[i].parent) {
			snprintf(id, sizeof(id), "%" PRIu32, fr->v[i].parent);
			mp_json_str(&j, "parent", id);
		}
		mp_json_object_end(&j);
	}
	mp_json_object_end(&j);
	if (j.err || j.depth)
		o->err = -EINVAL;
}

int mp_chrome_write(const struct mp_profile *p, FILE *f)
{
	struct out o = { .p = p, .f = f, .w0 = p->begin_ns, .first = true };
	uint32_t n = p->n_invocations, *stack = NULL;
	struct slot *order = NULL;
	uint64_t *b = NULL, *e = NULL;
	struct frames fr = { 0 };
	const char *base = exe_base(p);
	char pname[32];
	int r = -ENOMEM;

	o.w1 = p->end_ns > o.w0 ? p->end_ns : o.w0;
	if (n) {
		order = malloc(n * sizeof(*order));
		stack = malloc(n * sizeof(*stack));
		b = malloc(n * sizeof(*b));
		e = malloc(n * sizeof(*e));
		if (!order || !stack || !b || !e)
			goto out;
		place_slices(p, o.w0, o.w1, order, stack, b, e);
	}

	fputs("{\"traceEvents\":[", f);
	snprintf(pname, sizeof(pname), "pid %" PRId32, p->pid);
	metadata(&o, "process_name", 0, base ? base : pname);
	for (uint32_t i = 0; i < n; i++) {
		uint32_t tid = order[i].tid;
		char tname[16];

		if (i && order[i - 1].tid == tid)
			continue;
		snprintf(tname, sizeof(tname), "%" PRIu32, tid);
		metadata(&o, "thread_name", tid, (int32_t)tid == p->pid && base ? base : tname);
	}
	for (uint32_t i = 0; i < n; i++)
		slice(&o, i, b[i], e[i]);
	r = heap_counter(&o);
	if (r < 0)
		goto out;
	r = pool_counters(&o);
	if (r < 0)
		goto out;
	r = maps_counter(&o);
	if (r < 0)
		goto out;
	rss_counter(&o);
	phases(&o);
	execs(&o);
	r = sites(&o, e, &fr);
	if (r < 0)
		goto out;
	fputs("\n],\"displayTimeUnit\":\"ns\"", f);
	if (fr.n)
		stack_frames(&o, &fr);
	fputs(",\"otherData\":", f);
	{
		struct mp_json j;

		mp_json_init(&j, f, false);
		mp_json_object_begin(&j, NULL);
		mp_json_str(&j, "generator", "memprofd");
		mp_json_u64(&j, "formatVersion", p->format_version);
		mp_json_str(&j, "exe", p->exe);
		mp_json_u64(&j, "beginNs", p->begin_ns);
		mp_json_u64(&j, "endNs", p->end_ns);
		mp_json_bool(&j, "truncated", p->truncated);
		mp_json_u64(&j, "invocationsDropped", p->invocations_dropped);
		/* Only damaged or exec'ing runs have these. */
		if (p->marker_gaps)
			mp_json_u64(&j, "markerGaps", p->marker_gaps);
		if (p->corruption)
			mp_json_u64(&j, "corruption", p->corruption);
		if (p->exec_count)
			mp_json_u64(&j, "execCount", p->exec_count);
		mp_json_object_end(&j);
		if (j.err || j.depth)
			o.err = -EINVAL;
	}
	fputs("}\n", f);
	r = o.err ? o.err : ferror(f) ? -EIO : 0;
out:
	free(order);
	free(stack);
	free(b);
	free(e);
	frames_free(&fr);
	return r;
}
