// SPDX-License-Identifier: MIT
/*
 * A target that floods the daemon with forged heap records: well-formed
 * ALLOC records of blocks that do not exist, written straight into its
 * own ring (as a hostile process could), each at a new address, never
 * freed. argv[1] is the number of records. First it allocates HONEST
 * blocks of 100 bytes through malloc on another thread and keeps them.
 *
 * Writes "flooded" once the daemon has read every forged record, then
 * waits for a line on stdin (the test measures the daemon meanwhile) and
 * ends with _exit(): libmemprof's own idea of this thread's ring position
 * is stale after the flood, so nothing on this thread may allocate again
 * (no stdio: write(2) and read(2) only).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <memprof.h>

#include "own_ring.h"

#define HONEST 1000

static void *honest(void *arg)
{
	void **keep = arg;

	for (int i = 0; i < HONEST; i++)
		keep[i] = malloc(100);
	return NULL;
}

static uint64_t now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Waits (at most 30 s) until the consumer has read up to @pos. */
static int wait_tail(struct mp_thread *t, uint64_t pos)
{
	for (int i = 0; i < 300000; i++) {
		if (__atomic_load_n(&t->tail, __ATOMIC_ACQUIRE) >= pos)
			return 0;
		usleep(100);
	}
	return -1;
}

static int flood(const struct own_ring *r, uint64_t n)
{
	uint32_t i, tid = (uint32_t)gettid();
	struct mp_thread *t = own_thread(r, &i);
	uint64_t pos, slots = r->hdr->slot_count;

	if (!t)
		return -1;
	pos = __atomic_load_n(&t->head, __ATOMIC_RELAXED);
	for (uint64_t k = 0; k < n; k++, pos++) {
		struct mp_slot *s = own_slot(r, i, pos);

		if (pos - __atomic_load_n(&t->tail, __ATOMIC_ACQUIRE) >= slots &&
		    wait_tail(t, pos - slots + 1) < 0)
			return -1;
		memset((char *)s + 8, 0, sizeof(*s) - 8);
		s->ts_ns = now();
		s->type = MP_REC_ALLOC;
		s->clock = MP_TS_MONOTONIC;
		s->tid = tid;
		s->tseq = (uint32_t)(t->gen >> 1);
		s->name_id = 0; /* malloc */
		s->dims[0] = (int64_t)(0x7e0000000000ull + k * 16);
		s->dims[1] = 16;
		s->dims[2] = 0x401234;
		__atomic_store_n(&s->seq, pos + 1, __ATOMIC_RELEASE);
		__atomic_store_n(&t->head, pos + 1, __ATOMIC_RELEASE);
	}
	return wait_tail(t, pos);
}

int main(int argc, char **argv)
{
	static void *keep[HONEST];
	struct own_ring r;
	pthread_t th;
	char c;

	if (argc < 2)
		return 2;
	memprof_phase("flood"); /* creates the ring and this thread's slot */
	if (own_ring_map(&r) < 0)
		return 3;
	if (!own_ring_wait_attached(&r))
		return 5;
	memprof_phase("flood");
	if (!own_ring_wait_read(&r))
		return 5;
	if (pthread_create(&th, NULL, honest, keep) || pthread_join(th, NULL))
		return 7;
	if (flood(&r, strtoull(argv[1], NULL, 10)) < 0)
		_exit(6);
	if (write(1, "flooded\n", 8) != 8)
		_exit(8);
	while (read(0, &c, 1) == 1 && c != '\n')
		;
	_exit(0);
}
