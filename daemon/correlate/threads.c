/* SPDX-License-Identifier: MIT */
/* Per-thread state: open kernels, tags, record numbering. */
#include <errno.h>
#include <stdlib.h>

#include "correlator_impl.h"

/* The first slot of @tid. Not mp_hash_u64(): this runs per event whenever
 * the thread changes, and one multiply (Fibonacci hashing, the middle bits
 * of the product) spreads thread ids well enough; docs/ARCHITECTURE.md
 * "Hash tables". */
static inline uint32_t tid_slot(uint32_t tid, uint32_t mask)
{
	return (uint32_t)((tid * 0x9e3779b97f4a7c15ull) >> 32) & mask;
}

struct thread *corr_thread_find_slow(struct mp_correlator *c, uint32_t tid)
{
	uint32_t mask, i;

	if (!c->thr_ht_cap)
		return NULL;
	mask = c->thr_ht_cap - 1;
	for (i = tid_slot(tid, mask); c->thr_ht[i]; i = (i + 1) & mask) {
		if (c->thr_ht[i]->tid == tid) {
			c->last_thr = c->thr_ht[i];
			return c->thr_ht[i];
		}
	}
	return NULL;
}

static void thread_insert(struct thread **ht, uint32_t cap, struct thread *t)
{
	uint32_t mask = cap - 1, i;

	for (i = tid_slot(t->tid, mask); ht[i]; i = (i + 1) & mask)
		;
	ht[i] = t;
}

int corr_thread_get(struct mp_correlator *c, uint32_t tid, struct thread **ret)
{
	struct thread *t = thread_find(c, tid);

	if (t) {
		*ret = t;
		return 0;
	}
	if (c->n_threads >= MAX_THREADS)
		return -E2BIG;
	if ((c->n_threads + 1) * 2 > c->thr_ht_cap) {
		uint32_t ncap = c->thr_ht_cap ? c->thr_ht_cap * 2 : 64;
		struct thread **ht = calloc(ncap, sizeof(*ht));

		if (!ht)
			return -ENOMEM;
		for (uint32_t i = 0; i < c->thr_ht_cap; i++)
			if (c->thr_ht[i])
				thread_insert(ht, ncap, c->thr_ht[i]);
		free(c->thr_ht);
		c->thr_ht = ht;
		c->thr_ht_cap = ncap;
	}
	t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->tid = tid;
	thread_insert(c->thr_ht, c->thr_ht_cap, t);
	c->n_threads++;
	c->last_thr = t;
	*ret = t;
	return 0;
}
