// SPDX-License-Identifier: MIT
#include "collect.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "ring_abi.h"
#include "stacks.h"
#include "util.h"

/* Frames of libmemprof itself at the start of an in-process stack (the
 * capture, the record writer's caller, the traced twin, the interposed
 * function), dropped after the unwind. */

struct mp_stack_collector {
	pid_t pid;
	uint32_t depth;
	struct mp_unwinder *unwinder; /* built at the first use */
	uint64_t unwind_maps_ns;
	struct mp_procmaps *maps; /* the last read for the unwinder */
	struct mp_stack_table *stacks;
	uint64_t *frames;
	/* Python frames (MP_PYFRAME): the names of their code, by string id,
	 * copied from the target's string table as the frames are first
	 * stored, so that they outlive the ring */
	mp_pyname_src_fn pyname_src;
	void *pyname_ctx;
	char **py_names;
	uint32_t py_names_cap;
	bool last_python;
	uint64_t next_bytes; /* mp_stack_collect_set_bytes() */
	/* The mappings (start, inode) that frames were found in, open
	 * addressing (HELD_SLOTS, made at the first), up to HELD_MAX of
	 * them; held_last: the one marked last. */
	struct held {
		uint64_t start, inode;
	} * held;
	uint32_t n_held;
	struct held held_last;
};

#define HELD_SLOTS 4096u
#define HELD_MAX (HELD_SLOTS / 2)

static size_t held_slot(uint64_t start)
{
	return (size_t)((start >> 12) * 0x9e3779b97f4a7c15ull >> 52) & (HELD_SLOTS - 1);
}

/* Mapping @m holds a frame (as many as fit are remembered). */
static void held_mark(struct mp_stack_collector *c, const struct mp_mapping *m)
{
	size_t i;

	/* (start 0, no code there, is the empty slot's) */
	if (!m->start || (m->start == c->held_last.start && m->inode == c->held_last.inode) ||
	    c->n_held >= HELD_MAX)
		return;
	c->held_last = (struct held){ .start = m->start, .inode = m->inode };
	if (!c->held && !(c->held = calloc(HELD_SLOTS, sizeof(*c->held))))
		return;
	for (i = held_slot(m->start); c->held[i].start; i = (i + 1) & (HELD_SLOTS - 1))
		if (c->held[i].start == m->start && c->held[i].inode == m->inode)
			return;
	c->held[i] = (struct held){ .start = m->start, .inode = m->inode };
	c->n_held++;
}

bool mp_stack_collect_holds_frames(const void *collector, const struct mp_mapping *m)
{
	const struct mp_stack_collector *c = collector;

	if (!c || !c->held)
		return false;
	for (size_t i = held_slot(m->start); c->held[i].start; i = (i + 1) & (HELD_SLOTS - 1))
		if (c->held[i].start == m->start && c->held[i].inode == m->inode)
			return true;
	return false;
}

int mp_stack_collector_new(pid_t pid, bool stacks, uint32_t depth, struct mp_stack_collector **ret)
{
	struct mp_stack_collector *c;
	int r = 0;

	if (!depth)
		depth = MP_UNWIND_DEFAULT_DEPTH;
	if (stacks && depth > MP_UNWIND_MAX_DEPTH)
		return -EINVAL;
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->pid = pid;
	c->depth = depth;
	c->next_bytes = UINT64_MAX;
	if (stacks) {
		c->frames = calloc(depth + MP_COLLECT_RING_SKIP, sizeof(*c->frames));
		r = c->frames ? mp_stack_table_new(&c->stacks) : -ENOMEM;
	}
	if (r < 0) {
		mp_stack_collector_free(c);
		return r;
	}
	*ret = c;
	return 0;
}

void mp_stack_collector_free(struct mp_stack_collector *c)
{
	if (!c)
		return;
	for (uint32_t i = 0; i < c->py_names_cap; i++)
		free(c->py_names[i]);
	free(c->py_names);
	free(c->held);
	if (c->unwinder && c->stacks) {
		uint64_t fast, slow;

		mp_unwinder_stats(c->unwinder, &fast, &slow);
		log_debug("pid %d: %" PRIu64 " stacks unwound with cached rules, %" PRIu64
			  " by libdwfl, %" PRIu64 " rules looked up, %u distinct stacks",
			  (int)c->pid, fast, slow, mp_unwinder_rule_fills(c->unwinder),
			  mp_stack_table_count(c->stacks));
	}
	mp_unwinder_free(c->unwinder);
	mp_procmaps_free(c->maps);
	mp_stack_table_free(c->stacks);
	free(c->frames);
	free(c);
}

/* The unwinder, over the address space as it is now when @ip is in code
 * it does not know (first use, dlopen, exec); rebuilt at most every
 * MP_COLLECT_MAPS_REREAD_NS. NULL when none can be made. */
static struct mp_unwinder *unwinder_for(struct mp_stack_collector *c,
					const struct mp_collect_target *t, uint64_t ip)
{
	struct mp_procmaps *fresh;

	/* First the caller's snapshot: events are often unwound after the
	 * target exited, when its maps are gone. */
	if (!c->unwinder && t->maps && mp_unwinder_new(c->pid, t->maps, &c->unwinder) < 0)
		c->unwinder = NULL;
	if (c->unwinder && mp_unwinder_knows(c->unwinder, ip))
		return c->unwinder;
	if (t->exited ||
	    (c->unwinder && mp_now_ns() - c->unwind_maps_ns < MP_COLLECT_MAPS_REREAD_NS))
		return c->unwinder;
	c->unwind_maps_ns = mp_now_ns();
	if (mp_procmaps_read(c->pid, &fresh) < 0)
		return c->unwinder;
	if (!fresh->n) {
		mp_procmaps_free(fresh);
		return c->unwinder;
	}
	if (c->unwinder)
		mp_unwinder_set_maps(c->unwinder, fresh);
	else
		mp_unwinder_new(c->pid, fresh, &c->unwinder);
	/* Kept for the symbolizer: code mapped since the caller's snapshot
	 * (V8's copy of node's builtins) is gone from /proc once the target
	 * exits. */
	mp_procmaps_free(c->maps);
	c->maps = fresh;
	return c->unwinder;
}

/* A frame in no mapping the last read knows means code mapped since (V8
 * maps a copy of node's builtins while it starts): the maps are read
 * again, at most every MP_COLLECT_MAPS_REREAD_NS, for the symbolizer,
 * which runs when the target is gone. */
static void note_frames(struct mp_stack_collector *c, const struct mp_collect_target *t,
			const uint64_t *frames, int n)
{
	const struct mp_procmaps *maps = c->maps ? c->maps : t->maps;
	struct mp_procmaps *fresh;
	int i;

	if (t->exited)
		return;
	/* the clock read only for a frame the maps lack; the mappings of
	 * the others remembered, for the symbolizer's files opened ahead */
	for (i = 0; i < n; i++) {
		const struct mp_mapping *m;

		if (MP_PYFRAME_IS(frames[i]))
			continue;
		if (!maps || !(m = mp_procmaps_find(maps, frames[i])))
			break;
		held_mark(c, m);
	}
	if (i == n || mp_now_ns() - c->unwind_maps_ns < MP_COLLECT_MAPS_REREAD_NS)
		return;
	c->unwind_maps_ns = mp_now_ns();
	if (mp_procmaps_read(c->pid, &fresh) < 0)
		return;
	mp_procmaps_free(c->maps);
	c->maps = fresh;
}

/* The id of c->frames[0..n); the frames the table stores for the first
 * time are looked up in the maps (the others were when they were new),
 * and of a stack the table has no room for, the caller its site keeps. */
/* The name of Python frame @f's code kept, if the source has it. */
static void py_name_keep(struct mp_stack_collector *c, uint64_t f)
{
	uint32_t id = MP_PYFRAME_NAME(f);
	const char *name;

	if (!c->pyname_src || id >= MP_RING_MAX_STRINGS ||
	    (id < c->py_names_cap && c->py_names[id]))
		return;
	/* the source bounds the ids (the ring's table) before the array
	 * grows to hold one */
	name = c->pyname_src(c->pyname_ctx, id);
	if (!name)
		return;
	if (id >= c->py_names_cap) {
		uint32_t cap = c->py_names_cap ? c->py_names_cap : 1024;
		char **t;

		while (cap <= id)
			cap *= 2;
		t = reallocarray(c->py_names, cap, sizeof(*t));
		if (!t)
			return;
		memset(t + c->py_names_cap, 0, (cap - c->py_names_cap) * sizeof(*t));
		c->py_names = t;
		c->py_names_cap = cap;
	}
	c->py_names[id] = strdup(name);
}

static uint32_t intern(struct mp_stack_collector *c, const struct mp_collect_target *t, uint32_t n,
		       bool trunc)
{
	uint32_t id = mp_stack_table_intern(
		c->stacks, c->frames, n,
		(trunc ? MP_STACK_F_TRUNCATED : 0) |
			(c->next_bytes >= MP_STACKS_LARGE_BYTES ? MP_STACKS_F_LARGE : 0));
	uint32_t fresh = id ? mp_stack_table_last_new(c->stacks) : 1;

	if (fresh)
		note_frames(c, t, c->frames, (int)fresh);
	if (c->last_python)
		for (uint32_t i = 0; i < fresh && i < n; i++)
			if (MP_PYFRAME_IS(c->frames[i]))
				py_name_keep(c, c->frames[i]);
	return id;
}

uint32_t mp_stack_collect_event(struct mp_stack_collector *c, const struct mp_collect_target *t,
				const struct mp_unwind_regs *regs, const void *bytes, uint32_t len)
{
	struct mp_unwinder *u;
	bool trunc;
	int n;

	if (!c->stacks)
		return 0;
	u = unwinder_for(c, t, regs->ip);
	if (u) {
		n = mp_unwind(u, regs, bytes, len, c->depth, c->frames, &trunc);
	} else {
		c->frames[0] = regs->ip;
		n = 1;
		trunc = true;
	}
	if (n <= 0)
		return 0;
	return intern(c, t, (uint32_t)n, trunc);
}

uint32_t mp_stack_collect_ring(struct mp_stack_collector *c, const struct mp_collect_target *t,
			       const struct mp_unwind_regs *regs, const void *bytes, uint32_t len,
			       uint64_t caller)
{
	uint32_t max = c->depth + MP_COLLECT_RING_SKIP, skip = 0;
	struct mp_unwinder *u;
	bool trunc = true;
	int n = 0;

	if (!c->stacks)
		return 0;
	/* ip is libmemprof's, known from the start: the caller says whether
	 * the code allocating is (dlopen) */
	u = unwinder_for(c, t, caller);
	if (u)
		n = mp_unwind(u, regs, bytes, len,
			      max < MP_UNWIND_MAX_DEPTH ? max : MP_UNWIND_MAX_DEPTH, c->frames,
			      &trunc);
	while (skip < (uint32_t)(n > 0 ? n : 0) && c->frames[skip] != caller)
		skip++;
	if (n <= 0 || skip == (uint32_t)n) {
		/* not unwound up to the caller: the caller alone */
		c->frames[0] = caller;
		n = 1;
		trunc = true;
	} else {
		n -= (int)skip;
		memmove(c->frames, c->frames + skip, (size_t)n * sizeof(*c->frames));
	}
	if ((uint32_t)n > c->depth) {
		n = (int)c->depth;
		trunc = true;
	}
	return intern(c, t, (uint32_t)n, trunc);
}

uint32_t mp_stack_collect_given(struct mp_stack_collector *c, const struct mp_collect_target *t,
				const uint64_t *frames, uint32_t n, bool truncated)
{
	if (!c->stacks || !n)
		return 0;
	if (n > c->depth) {
		n = c->depth;
		truncated = true;
	}
	c->last_python = false;
	for (uint32_t i = 0; i < n; i++) {
		c->frames[i] = frames[i];
		c->last_python |= MP_PYFRAME_IS(frames[i]);
	}
	return intern(c, t, n, truncated);
}

int mp_stack_collect_unwind(struct mp_stack_collector *c, const struct mp_collect_target *t,
			    const struct mp_unwind_regs *regs, const void *bytes, uint32_t len,
			    uint64_t caller, uint64_t *ret, uint32_t max, bool *ret_truncated)
{
	struct mp_unwinder *u = unwinder_for(c, t, caller ? caller : regs->ip);
	uint32_t skip = 0;
	int n;

	*ret_truncated = true;
	if (!u || !max)
		return 0;
	n = mp_unwind(u, regs, bytes, len, max < MP_UNWIND_MAX_DEPTH ? max : MP_UNWIND_MAX_DEPTH,
		      ret, ret_truncated);
	if (n <= 0)
		return 0;
	if (!caller)
		return n;
	while (skip < (uint32_t)n && ret[skip] != caller)
		skip++;
	if (skip == (uint32_t)n)
		return 0;
	memmove(ret, ret + skip, (size_t)(n - (int)skip) * sizeof(*ret));
	return n - (int)skip;
}

int mp_stack_collect_src_frames(struct mp_stack_collector *c, const struct mp_collect_target *t,
				uint64_t addr, struct mp_sym_frame *ret, int max)
{
	static __thread char paths[MP_MAX_INLINE][PATH_MAX];
	struct mp_unwinder *u = unwinder_for(c, t, addr);
	int n;

	if (!u)
		return 0;
	n = mp_unwinder_sym_frames(u, addr, ret, max < MP_MAX_INLINE ? max : MP_MAX_INLINE);
	for (int i = 0; i < n; i++) {
		if (ret[i].file && ret[i].file[0] != '/' && ret[i].comp_dir) {
			snprintf(paths[i], sizeof(paths[i]), "%s/%s", ret[i].comp_dir, ret[i].file);
			ret[i].file = paths[i];
		}
	}
	return n;
}

uint32_t mp_stack_collect_frames(const struct mp_stack_collector *c, uint32_t id,
				 const uint64_t **ret_frames)
{
	const struct mp_stack *st = c->stacks ? mp_stack_table_get(c->stacks, id) : NULL;

	if (!st)
		return 0;
	*ret_frames = st->frames;
	return st->n_frames;
}

void mp_stack_collector_set_max(struct mp_stack_collector *c, uint32_t max_stacks,
				uint64_t max_frames)
{
	if (c->stacks)
		mp_stack_table_set_max(c->stacks, max_stacks, max_frames);
}

void mp_stack_collect_set_bytes(struct mp_stack_collector *c, uint64_t bytes)
{
	c->next_bytes = bytes;
}

void mp_stack_collect_set_pynames(struct mp_stack_collector *c, mp_pyname_src_fn fn, void *ctx)
{
	c->pyname_src = fn;
	c->pyname_ctx = ctx;
}

bool mp_stack_collect_last_python(const struct mp_stack_collector *c)
{
	return c->last_python;
}

const char *mp_stack_collect_pyname(void *collector, uint32_t id)
{
	const struct mp_stack_collector *c = collector;

	return c && id < c->py_names_cap ? c->py_names[id] : NULL;
}

int mp_stack_collect_export(const struct mp_stack_collector *c, struct mp_profile *p)
{
	return c->stacks ? mp_stack_table_export(c->stacks, p) : 0;
}

const struct mp_procmaps *mp_stack_collect_maps(const struct mp_stack_collector *c)
{
	return c ? c->maps : NULL;
}
