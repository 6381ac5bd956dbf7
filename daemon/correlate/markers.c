/* SPDX-License-Identifier: MIT */
/* Marker records: kernels, shapes, phases, tags; exec. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "correlator_impl.h"

static int kernel_begin(struct mp_correlator *c, const struct mp_record *rec)
{
	struct mp_profile *p = c->p;
	struct mp_invocation *r;
	struct thread *t;
	struct frame *f;
	uint32_t name;
	int err;

	err = corr_thread_get(c, rec->tid, &t);
	if (err == -ENOMEM)
		return err;
	if (err < 0 || t->depth >= MAX_DEPTH || t->overflow) {
		if (err == 0)
			t->overflow++;
		p->dropped_markers++;
		return 0;
	}
	err = corr_name_intern(c, rec->name ? rec->name : "(null)", &name);
	if (err == -E2BIG)
		err = corr_name_intern(c, "(other)", &name);
	if (err < 0) {
		if (err != -E2BIG)
			return err;
		t->overflow++;
		p->dropped_markers++;
		return 0;
	}
	f = c->free_frames;
	if (f)
		c->free_frames = f->next;
	else if (!(f = malloc(sizeof(*f))))
		return -ENOMEM;
	*f = (struct frame){ .inv = MP_NONE, .name = name, .thr = t };
	if (p->n_invocations < c->opts.max_invocations) {
		if (corr_grow((void **)&p->invocations, &c->invs_cap, p->n_invocations + 1,
			      sizeof(*p->invocations)) < 0) {
			f->next = c->free_frames;
			c->free_frames = f;
			return -ENOMEM;
		}
		f->inv = p->n_invocations++;
	} else {
		p->invocations_dropped++;
	}
	r = inv_rec(c, f);
	*r = (struct mp_invocation){
		.name = name,
		.tid = rec->tid,
		.parent = t->top ? t->top->inv : MP_NONE,
		.depth = t->depth,
		.phase = c->cur_phase,
		.flags = (rec->flags & MP_REC_F_OPEN_AT_ATTACH) ? MP_INV_F_OPEN_AT_ATTACH : 0,
		.begin_ns = rec->ts_ns,
		.end_ns = rec->ts_ns,
		.peak_bytes = c->live_bytes,
		.peak_var = c->live_var,
		.rss_begin = MP_UNKNOWN,
		.rss_end = MP_UNKNOWN,
	};
	if (corr_pools_begin(c, r) < 0)
		c->oom = true;
	corr_maps_begin(c, r);
	f->rss_b = c->last_rss;
	f->rss_b_pending = true;
	f->up = t->top;
	t->top = f;
	t->depth++;
	f->prev = c->open_tail;
	if (c->open_tail)
		c->open_tail->next = f;
	else
		c->open_head = f;
	c->open_tail = f;
	return 0;
}

/* The traffic counters every kind of bucket has (profile.h), summed. */
static int buckets_merge(struct mp_bucket **dst, uint32_t *n, const struct mp_bucket *src,
			 uint32_t ns)
{
	for (uint32_t i = 0; i < ns; i++) {
		struct mp_bucket *b =
			bucket_get(dst, n, sizeof(**dst), &src[i].id, sizeof(src[i].id));

		if (!b)
			return -ENOMEM;
		ADD_COUNTS(b, &src[i]);
	}
	return 0;
}

static void mem_add(struct mp_mem_stats *d, const struct mp_mem_stats *s)
{
	add_signed(&d->bytes_added, (uint64_t)s->bytes_added);
	add_signed(&d->tensors_added, (uint64_t)s->tensors_added);
	d->alloc_bytes += s->alloc_bytes;
	d->alloc_count += s->alloc_count;
	d->free_bytes += s->free_bytes;
	d->free_count += s->free_count;
	d->alloc_var += s->alloc_var;
	d->free_var += s->free_var;
}

int corr_aggregate(struct mp_profile *p, const struct mp_invocation *r)
{
	struct mp_kernel *k = &p->kernels[r->name];
	uint64_t dur = r->end_ns > r->begin_ns ? r->end_ns - r->begin_ns : 0;

	/* Its begin or end may be another invocation's: it would add time
	 * and memory that belong to no single call. */
	if (r->flags & MP_INV_F_MARKERS_LOST) {
		k->markers_lost++;
		return 0;
	}
	k->calls++;
	k->total_ns += dur;
	if (dur < k->min_ns)
		k->min_ns = dur;
	if (dur > k->max_ns)
		k->max_ns = dur;
	mem_add(&k->incl, &r->incl);
	mem_add(&k->excl, &r->excl);
	if (r->peak_bytes > k->peak_bytes) {
		k->peak_bytes = r->peak_bytes;
		k->peak_var = r->peak_var;
	}
	if (r->peak_added > k->peak_added) {
		k->peak_added = r->peak_added;
		k->peak_added_var = r->peak_added_var;
	}
	if (r->added_var_max > k->added_var_max)
		k->added_var_max = r->added_var_max;
	corr_maps_aggregate(k, r);
	k->cross_thread_allocs += r->cross_thread_allocs;
	k->cross_thread_bytes += r->cross_thread_bytes;
	add_signed(&k->rss_exact_incl, (uint64_t)r->rss_exact_incl);
	add_signed(&k->rss_exact_excl, (uint64_t)r->rss_exact_excl);
	if (r->flags & MP_INV_F_OPEN_AT_ATTACH)
		k->open_at_attach++;
	if (r->flags & MP_INV_F_TRUNCATED)
		k->truncated++;
	if (buckets_merge(&k->owners, &k->n_owners, r->owners, r->n_owners) < 0 ||
	    buckets_merge(&k->tags, &k->n_tags, r->tags, r->n_tags) < 0 ||
	    corr_pool_buckets_merge(&k->pools, &k->n_pools, r->pools, r->n_pools) < 0 ||
	    corr_pool_tag_buckets_merge(&k->pool_tags, &k->n_pool_tags, r->pool_tags,
					r->n_pool_tags) < 0)
		return -ENOMEM;
	return 0;
}

void corr_frame_close(struct mp_correlator *c, struct frame *f, uint64_t ts, uint32_t flags)
{
	struct mp_invocation *r = inv_rec(c, f);
	struct pending pe = {
		.inv = f->inv,
		.name = f->name,
		.begin_ns = r->begin_ns,
		.end_ns = ts,
		.b = f->rss_b,
		.e = c->last_rss,
		.b_pending = f->rss_b_pending,
		.lost = !!(flags & MP_INV_F_MARKERS_LOST),
	};

	r->end_ns = ts;
	r->flags |= flags;
	r->total_bytes_snapshot = c->live_bytes;
	r->total_tensors_snapshot = c->live_count;
	corr_pools_end(c, r);
	corr_maps_end(c, r);
	if (corr_aggregate(c->p, r) < 0)
		c->oom = true;

	f->thr->top = f->up;
	f->thr->depth--;
	if (f->prev)
		f->prev->next = f->next;
	else
		c->open_head = f->next;
	if (f->next)
		f->next->prev = f->prev;
	else
		c->open_tail = f->prev;

	if (c->finishing) {
		corr_pending_apply(c->p, &pe);
	} else {
		if (c->n_pending == MAX_PENDING || !c->pending)
			corr_pending_flush(c);
		if (!c->pending)
			c->pending = calloc(MAX_PENDING, sizeof(*c->pending));
		if (c->pending)
			c->pending[c->n_pending++] = pe;
		else
			c->oom = true;
	}
	if (f->inv == MP_NONE) {
		free(r->inputs);
		free(r->outputs);
		free(r->owners);
		free(r->tags);
		free(r->pools);
		free(r->pool_tags);
	}
	f->next = c->free_frames;
	c->free_frames = f;
}

static void kernel_end(struct mp_correlator *c, const struct mp_record *rec)
{
	struct thread *t = thread_find(c, rec->tid);

	if (t && t->overflow) {
		t->overflow--;
		return;
	}
	if (!t || !t->top) {
		c->p->unmatched_ends++;
		return;
	}
	corr_frame_close(c, t->top, rec->ts_ns, 0);
}

static int shape(struct mp_correlator *c, const struct mp_record *rec, bool input)
{
	struct thread *t = thread_find(c, rec->tid);
	struct mp_invocation *r;
	struct mp_shape **v;
	uint32_t *n;

	if (t && t->overflow) {
		c->p->dropped_markers++;
		return 0;
	}
	if (!t || !t->top) {
		c->p->orphan_shapes++;
		return 0;
	}
	r = inv_rec(c, t->top);
	v = input ? &r->inputs : &r->outputs;
	n = input ? &r->n_inputs : &r->n_outputs;
	if (rec->rank > MP_MAX_RANK || *n >= MAX_SHAPES) {
		c->p->dropped_markers++;
		return 0;
	}
	if (corr_grow_implicit((void **)v, *n, sizeof(**v)) < 0)
		return -ENOMEM;
	(*v)[*n] = (struct mp_shape){ .rank = rec->rank };
	memcpy((*v)[*n].dims, rec->dims, rec->rank * sizeof(rec->dims[0]));
	(*n)++;
	return 0;
}

void corr_phase_leave(struct mp_correlator *c, uint64_t ts)
{
	struct mp_phase *ph;

	if (c->cur_phase == MP_NONE)
		return;
	ph = &c->p->phases[c->cur_phase];
	if (ts > c->phase_entered)
		ph->duration_ns += ts - c->phase_entered;
	corr_pools_phase_leave(c, ph);
	corr_maps_phase_leave(c, ph);
	if (corr_peak_parts_phase(c, c->p, ph) < 0)
		c->oom = true;
	c->ph_reached = false;
}

static int phase(struct mp_correlator *c, const struct mp_record *rec)
{
	struct mp_profile *p = c->p;
	const char *name = rec->name ? rec->name : "(null)";
	struct mp_phase *ph;
	uint32_t i;

	for (i = 0; i < p->n_phases; i++)
		if (strncmp(p->phases[i].name, name, MAX_NAME_LEN) == 0)
			break;
	if (i == p->n_phases) {
		char *d;

		if (p->n_phases >= MAX_PHASES) {
			p->dropped_markers++;
			return 0;
		}
		if (corr_grow((void **)&p->phases, &c->phases_cap, p->n_phases + 1,
			      sizeof(*p->phases)) < 0)
			return -ENOMEM;
		d = strndup(name, MAX_NAME_LEN);
		if (!d)
			return -ENOMEM;
		p->phases[i] =
			(struct mp_phase){ .name = d, .first_ns = rec->ts_ns, .rss_peak = 0 };
		p->n_phases++;
	}
	corr_phase_leave(c, rec->ts_ns);
	c->cur_phase = i;
	c->phase_entered = rec->ts_ns;
	ph = &p->phases[i];
	ph->entries++;
	/* What is live when the phase starts is live during it. */
	if (c->live_bytes > ph->peak_bytes) {
		ph->peak_bytes = c->live_bytes;
		ph->peak_var = c->live_var;
		phase_new_peak(c);
	}
	if (c->last_rss.val != MP_UNKNOWN && c->last_rss.val > ph->rss_peak)
		ph->rss_peak = c->last_rss.val;
	corr_maps_phase_enter(c, ph);
	return corr_pools_phase_enter(c, ph);
}

static int tag_begin(struct mp_correlator *c, const struct mp_record *rec)
{
	struct mp_profile *p = c->p;
	const char *name = rec->name ? rec->name : "(null)";
	uint32_t id = MP_TAG_NONE;
	struct thread *t;
	int r;

	r = corr_thread_get(c, rec->tid, &t);
	if (r == -ENOMEM)
		return r;
	if (r < 0) {
		p->dropped_markers++;
		return 0;
	}
	for (uint32_t i = 1; i < p->n_tags; i++) {
		if (strncmp(p->tags[i].name, name, MAX_NAME_LEN) == 0) {
			id = i;
			break;
		}
	}
	if (id == MP_TAG_NONE) {
		if (p->n_tags < MAX_POOLS) {
			r = corr_pool_add(&p->tags, &p->n_tags, &c->tags_cap, name);
			if (r < 0)
				return r;
			id = r;
		} else {
			p->dropped_markers++;
		}
	}
	if (t->ntags < MAX_TAG_DEPTH && !t->tag_overflow) {
		t->tags[t->ntags++] = id;
	} else {
		t->tag_overflow++;
		p->dropped_markers++;
	}
	return 0;
}

static void tag_end(struct mp_correlator *c, const struct mp_record *rec)
{
	struct thread *t = thread_find(c, rec->tid);

	if (t && t->tag_overflow)
		t->tag_overflow--;
	else if (t && t->ntags)
		t->ntags--;
	else
		c->p->unmatched_tag_ends++;
}

/* Records of @t were lost (the ring was full, or the thread slot was
 * reused): whatever it has open may have ended, and what comes next may end
 * something that never began. Its open kernels are closed where its last
 * record was and flagged; its tags, whose ends may be lost too, are
 * dropped. */
static void markers_lost(struct mp_correlator *c, struct thread *t)
{
	c->p->marker_gaps++;
	while (t->top)
		corr_frame_close(c, t->top, t->last_ts, MP_INV_F_MARKERS_LOST);
	t->overflow = 0;
	t->ntags = 0;
	t->tag_overflow = 0;
}

int mp_correlator_on_exec(struct mp_correlator *c, uint64_t ts_ns, uint32_t tid, const char *path)
{
	struct mp_profile *p = c->p;
	uint32_t closed = 0;

	if (c->finished)
		return -EALREADY;
	start(c, ts_ns);
	/* Innermost first, so each closes as the top of its thread. */
	while (c->open_tail) {
		corr_frame_close(c, c->open_tail, ts_ns, MP_INV_F_TRUNCATED | MP_INV_F_EXEC);
		closed++;
	}
	/* The old image's threads are gone; the new one numbers its
	 * records afresh. */
	for (uint32_t i = 0; i < c->thr_ht_cap; i++) {
		struct thread *t = c->thr_ht[i];

		if (!t)
			continue;
		t->overflow = 0;
		t->ntags = 0;
		t->tag_overflow = 0;
		t->seq_known = false;
	}
	corr_phase_leave(c, ts_ns);
	c->cur_phase = MP_NONE;
	/* The old image's address space is gone with its blocks: the EXEC
	 * event the live table gets next releases them (no kernel is open),
	 * counted here as released by this exec. */
	p->exec_count++;
	if (p->n_execs < MP_PROFILE_MAX_EXECS) {
		struct mp_exec *e = reallocarray(p->execs, p->n_execs + 1, sizeof(*e));

		if (!e) {
			c->oom = true;
			return -ENOMEM;
		}
		p->execs = e;
		e = &p->execs[p->n_execs];
		*e = (struct mp_exec){ .ts_ns = ts_ns,
				       .tid = tid,
				       .kernels_closed = closed,
				       .released_bytes = 0,
				       .released_blocks = 0 };
		if (path && !(e->path = strndup(path, 4096))) {
			c->oom = true;
			return -ENOMEM;
		}
		p->n_execs++;
	}
	return 0;
}

int mp_correlator_on_record(struct mp_correlator *c, const struct mp_record *rec)
{
	struct thread *t;
	int r = 0;

	if (c->finished)
		return -EALREADY;
	start(c, rec->ts_ns);
	t = thread_find(c, rec->tid);
	/* Open-at-attach records all carry the attach snapshot's number. */
	if (t && t->seq_known && !(rec->flags & MP_REC_F_OPEN_AT_ATTACH) &&
	    rec->seq != t->last_seq + 1)
		markers_lost(c, t);
	switch (rec->type) {
	case MP_REC_KERNEL_BEGIN:
		r = kernel_begin(c, rec);
		break;
	case MP_REC_KERNEL_END:
		kernel_end(c, rec);
		break;
	case MP_REC_INPUT_SHAPE:
		r = shape(c, rec, true);
		break;
	case MP_REC_OUTPUT_SHAPE:
		r = shape(c, rec, false);
		break;
	case MP_REC_PHASE:
		r = phase(c, rec);
		break;
	case MP_REC_PHASE_END:
		corr_phase_leave(c, rec->ts_ns);
		c->cur_phase = MP_NONE;
		break;
	case MP_REC_TAG_BEGIN:
		r = tag_begin(c, rec);
		break;
	case MP_REC_TAG_END:
		tag_end(c, rec);
		break;
	case MP_REC_POOL_ALLOC:
	case MP_REC_POOL_FREE:
	case MP_REC_POOL_RESET:
	case MP_REC_POOL_DECLARE:
		r = corr_pool_record(c, rec);
		break;
	default:
		c->p->dropped_markers++;
		break;
	}
	t = thread_find(c, rec->tid);
	if (t) {
		t->seq_known = true;
		t->last_seq = rec->seq;
		t->last_ts = rec->ts_ns;
	}
	if (r == -ENOMEM)
		c->oom = true;
	return r;
}
