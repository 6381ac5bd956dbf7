// SPDX-License-Identifier: MIT
/* Where a free of a block never seen allocated may point: freecheck.h. */
#include "freecheck.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

struct range {
	uint64_t start, end;
};

struct ranges {
	struct range *r;
	size_t n;
};

struct mp_freecheck {
	pid_t pid;
	struct ranges attach, now;
	uint64_t read_ns; /* when @now was read */
	uint64_t next_read_ns; /* no read before this */
	uint64_t reads;
	bool rebase; /* exec: the next read is the attach snapshot too */
	mp_freecheck_read_fn read;
	mp_freecheck_clock_fn clock;
	void *ctx;
};

static int read_proc(void *ctx, struct mp_procmaps **ret)
{
	return mp_procmaps_read(((struct mp_freecheck *)ctx)->pid, ret);
}

static uint64_t clock_mono(void *ctx)
{
	(void)ctx;
	return mp_now_ns();
}

/* A mapping an allocator may carve blocks from: writable, private, not
 * the main thread's stack. */
static bool heap_like(const struct mp_mapping *m)
{
	return (m->perms & MP_MAP_W) && !(m->perms & MP_MAP_SHARED) && strcmp(m->path, "[stack]");
}

/* @m's heap-like mappings, adjacent ones merged (sorted: @m is). */
static int ranges_of(const struct mp_procmaps *m, struct ranges *ret)
{
	struct ranges out = { 0 };

	if (m && m->n) {
		out.r = malloc(m->n * sizeof(*out.r));
		if (!out.r)
			return -ENOMEM;
	}
	for (size_t i = 0; m && i < m->n; i++) {
		const struct mp_mapping *mm = &m->maps[i];

		if (!heap_like(mm))
			continue;
		if (out.n && out.r[out.n - 1].end == mm->start)
			out.r[out.n - 1].end = mm->end;
		else
			out.r[out.n++] = (struct range){ mm->start, mm->end };
	}
	*ret = out;
	return 0;
}

static bool ranges_have(const struct ranges *rs, uint64_t addr)
{
	size_t lo = 0, hi = rs->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (addr < rs->r[mid].start)
			hi = mid;
		else if (addr >= rs->r[mid].end)
			lo = mid + 1;
		else
			return true;
	}
	return false;
}

int mp_freecheck_new(pid_t pid, const struct mp_procmaps *at_attach, uint64_t at_attach_ns,
		     struct mp_freecheck **ret)
{
	struct mp_freecheck *fc = calloc(1, sizeof(*fc));
	int r;

	if (!fc)
		return -ENOMEM;
	fc->pid = pid;
	fc->read = read_proc;
	fc->clock = clock_mono;
	fc->ctx = fc;
	fc->rebase = !at_attach;
	fc->read_ns = at_attach_ns;
	r = ranges_of(at_attach, &fc->attach);
	if (r < 0) {
		free(fc);
		return r;
	}
	*ret = fc;
	return 0;
}

void mp_freecheck_free(struct mp_freecheck *fc)
{
	if (!fc)
		return;
	free(fc->attach.r);
	free(fc->now.r);
	free(fc);
}

void mp_freecheck_set_source(struct mp_freecheck *fc, mp_freecheck_read_fn read,
			     mp_freecheck_clock_fn clock, void *ctx)
{
	fc->read = read;
	fc->clock = clock;
	fc->ctx = ctx;
}

/* Reads the maps again into @now (and @attach after an exec); the next
 * read waits MP_FREECHECK_MIN_NS, or ten times this one's duration. */
static void reread(struct mp_freecheck *fc, uint64_t t0)
{
	struct mp_procmaps *m = NULL;
	struct ranges rs;
	uint64_t t1, wait;
	int r = fc->read(fc->ctx, &m);

	if (r == 0)
		r = ranges_of(m, &rs);
	mp_procmaps_free(m);
	t1 = fc->clock(fc->ctx);
	wait = t1 > t0 ? 10 * (t1 - t0) : 0;
	fc->next_read_ns = t1 + (wait > MP_FREECHECK_MIN_NS ? wait : MP_FREECHECK_MIN_NS);
	fc->reads++;
	if (r < 0)
		return; /* judged by what was read before */
	fc->read_ns = t0;
	if (fc->rebase) {
		free(fc->attach.r);
		fc->attach = rs;
		rs = (struct ranges){ 0 };
		fc->rebase = false;
	}
	free(fc->now.r);
	fc->now = rs;
}

bool mp_freecheck_judged(const struct mp_freecheck *fc, uint64_t ts_ns)
{
	return fc->read_ns > ts_ns;
}

bool mp_freecheck_mapped(struct mp_freecheck *fc, uint64_t addr, uint64_t ts_ns)
{
	uint64_t now;

	if (ranges_have(&fc->attach, addr) || ranges_have(&fc->now, addr))
		return true;
	/* a look taken after the free saw the address space it was in */
	if (fc->read_ns > ts_ns)
		return false;
	now = fc->clock(fc->ctx);
	if (now < fc->next_read_ns)
		return false;
	reread(fc, now);
	return ranges_have(&fc->attach, addr) || ranges_have(&fc->now, addr);
}

/* @a and @b merged into one sorted list, overlapping and adjacent ranges
 * joined; @a and @b freed. */
static int ranges_union(struct ranges *a, struct ranges *b)
{
	struct ranges out = { 0 };
	size_t i = 0, j = 0;

	if (a->n + b->n) {
		out.r = malloc((a->n + b->n) * sizeof(*out.r));
		if (!out.r)
			return -ENOMEM;
	}
	while (i < a->n || j < b->n) {
		struct range r = j >= b->n || (i < a->n && a->r[i].start <= b->r[j].start) ?
					 a->r[i++] :
					 b->r[j++];

		if (out.n && r.start <= out.r[out.n - 1].end) {
			if (r.end > out.r[out.n - 1].end)
				out.r[out.n - 1].end = r.end;
		} else {
			out.r[out.n++] = r;
		}
	}
	free(a->r);
	free(b->r);
	*a = out;
	*b = (struct ranges){ 0 };
	return 0;
}

int mp_freecheck_snapshot(struct mp_freecheck *fc)
{
	struct mp_procmaps *m = NULL;
	struct ranges rs = { 0 };
	int r;

	if (!fc)
		return 0;
	r = fc->read(fc->ctx, &m);
	if (r == 0)
		r = ranges_of(m, &rs);
	mp_procmaps_free(m);
	if (r < 0)
		return r;
	if (fc->rebase) {
		free(fc->attach.r);
		fc->attach = rs;
		fc->rebase = false;
		return 0;
	}
	r = ranges_union(&fc->attach, &rs);
	free(rs.r);
	return r;
}

void mp_freecheck_exec(struct mp_freecheck *fc)
{
	if (!fc)
		return;
	free(fc->attach.r);
	free(fc->now.r);
	fc->attach = fc->now = (struct ranges){ 0 };
	fc->read_ns = fc->next_read_ns = 0;
	fc->rebase = true;
}

uint64_t mp_freecheck_reads(const struct mp_freecheck *fc)
{
	return fc ? fc->reads : 0;
}
