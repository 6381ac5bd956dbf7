/* SPDX-License-Identifier: MIT */
/* Per-thread state: open kernels, tags, record numbering. */
#include <errno.h>
#include <stdlib.h>

#include "correlator_impl.h"

static bool thread_eq(const void *ctx, uint32_t id, const void *key)
{
	const struct mp_correlator *c = ctx;

	return c->threads[id]->tid == *(const uint32_t *)key;
}

struct thread *corr_thread_find_slow(struct mp_correlator *c, uint32_t tid)
{
	uint32_t id;

	if (mp_hashmap_find(&c->thread_map, mp_hash_u64(tid), thread_eq, c, &tid, &id) < 0)
		return NULL;
	c->last_thr = c->threads[id];
	return c->last_thr;
}

int corr_thread_get(struct mp_correlator *c, uint32_t tid, struct thread **ret)
{
	struct thread *t = thread_find(c, tid);
	int r;

	if (t) {
		*ret = t;
		return 0;
	}
	if (c->n_threads >= MAX_THREADS)
		return -E2BIG;
	if (corr_grow((void **)&c->threads, &c->threads_cap, c->n_threads + 1,
		      sizeof(*c->threads)) < 0)
		return -ENOMEM;
	t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	r = mp_hashmap_insert(&c->thread_map, mp_hash_u64(tid), c->n_threads);
	if (r < 0) {
		free(t);
		return r == -ENOSPC ? -E2BIG : r;
	}
	t->tid = tid;
	c->threads[c->n_threads++] = t;
	c->last_thr = t;
	*ret = t;
	return 0;
}
