// SPDX-License-Identifier: MIT
/*
 * A target that corrupts its own marker ring, as a hostile process could.
 * argv[1] is the way; argv[2] is "after" (wait for the daemon to attach,
 * mark, then corrupt right away, while the daemon still holds the records)
 * or "before" (corrupt, print "ready", wait for the daemon to attach).
 *
 *   seq     a slot of the next lap published ahead of its turn
 *   slot    a published slot full of random bytes
 *   name    a published KERNEL_BEGIN whose name id is out of range, and a
 *           string table entry pointing outside the blob
 *   len     a published shape whose rank is out of range, and a string
 *           table entry longer than MP_NAME_MAX
 *   header  the drop counter set to an impossible value, and the string
 *           table counters scrambled
 *   static  (before only) the header's sizes overwritten
 *
 * Ways of a forging thread (after only; fixture_forge.h), while the main
 * thread keeps HONEST_LIVE bytes live in HONEST_BLOCKS blocks:
 *
 *   heap    heap records with impossible sizes, stamps and thread ids, a
 *           STACK record longer than the ABI allows, KERNEL_ENDs of
 *           another thread
 *   stuck   the thread slot's head moved past records never published
 *   seqback the next slot given a sequence word no writer leaves there
 *
 *   exec    (after only) keep HONEST_LIVE bytes live, then exec this
 *           program as "execd", which keeps 1 MiB live inside kernel
 *           "after_exec"
 *
 * Every name the target writes honestly is "good<N>" or "hostile"; the
 * profile must contain no other.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <memprof.h>
#include <unistd.h>

#include "own_ring.h"
#include "fixture_forge.h"

#define ROUNDS 400

static uint64_t rnd_state = 0x9e3779b97f4a7c15ull;

static uint64_t rnd(void)
{
	rnd_state ^= rnd_state << 13;
	rnd_state ^= rnd_state >> 7;
	rnd_state ^= rnd_state << 17;
	return rnd_state;
}

static void mark(void)
{
	char name[16];
	void *p;

	for (int i = 0; i < ROUNDS; i++) {
		snprintf(name, sizeof(name), "good%d", i % 10);
		memprof_kernel_begin(name);
		p = malloc(16);
		free(p);
		memprof_kernel_end();
	}
}

/* Writes @s at position @pos of ring @i with sequence number @seq. */
static void forge(const struct own_ring *r, uint32_t i, uint64_t pos, struct mp_slot *s,
		  uint64_t seq)
{
	struct mp_slot *dst = own_slot(r, i, pos);

	memcpy((char *)dst + 8, (char *)s + 8, sizeof(*s) - 8);
	__atomic_store_n(&dst->seq, seq, __ATOMIC_RELEASE);
}

/* The forged record of position @pos for the slot-level ways. */
static uint64_t forged(const struct own_ring *r, const struct mp_thread *t, const char *how,
		       uint64_t pos, struct mp_slot *s)
{
	memset(s, 0, sizeof(*s));
	s->tid = t->tid;
	if (!strcmp(how, "seq")) {
		/* a record of the next lap, published ahead of its turn */
		s->type = 2; /* MP_REC_KERNEL_END */
		return pos + 1 + r->hdr->slot_count;
	}
	if (!strcmp(how, "slot")) {
		uint64_t *w = (uint64_t *)s;

		for (size_t k = 0; k < sizeof(*s) / 8; k++)
			w[k] = rnd();
		s->type = 0xee; /* no record has it */
	} else if (!strcmp(how, "name")) {
		s->type = 1; /* MP_REC_KERNEL_BEGIN */
		s->name_id = pos & 1 ? r->hdr->str_max + 7 : r->hdr->str_max - 1;
	} else { /* len */
		s->type = 3; /* MP_REC_INPUT_SHAPE */
		s->rank = 200;
	}
	/* newer than the attach snapshot, so the consumer decodes it */
	s->tseq = (uint32_t)(t->gen >> 1) + 1000;
	return pos + 1;
}

/* @all: every slot the producer has not written yet (before attach: the
 * producer overwrites them one by one, the consumer meets the first one
 * left); else only the next one (after attach, with no marker after it). */
static int corrupt(const struct own_ring *r, const char *how, bool all)
{
	mp_strent *strent = (mp_strent *)(r->base + r->hdr->strent_off);
	struct mp_thread *t;
	struct mp_slot s;
	uint64_t head;
	uint32_t i;

	if (!strcmp(how, "header")) {
		__atomic_store_n(&r->hdr->drops, 860256446137949701ull, __ATOMIC_RELAXED);
		r->hdr->str_count = 0xffffffffu;
		r->hdr->blob_used = 0xffffffffu;
		r->hdr->phase_order = ~0ull;
		return 0;
	}
	if (!strcmp(how, "static")) {
		r->hdr->slot_count = 3;
		r->hdr->ring_off = r->len;
		return 0;
	}
	if (strcmp(how, "seq") && strcmp(how, "slot") && strcmp(how, "name") && strcmp(how, "len"))
		return -1;
	t = own_thread(r, &i);
	if (!t)
		return -1;
	/* string entries no honest record uses: outside the blob, too long */
	__atomic_store_n(&strent[r->hdr->str_max - 1], ((uint64_t)r->hdr->blob_size << 32) | 100u,
			 __ATOMIC_RELEASE);
	__atomic_store_n(&strent[r->hdr->str_max - 2], 4096ull + 1, __ATOMIC_RELEASE);
	head = __atomic_load_n(&t->head, __ATOMIC_RELAXED);
	for (uint64_t pos = head; pos < head + (all ? r->hdr->slot_count : 1); pos++)
		forge(r, i, pos, &s, forged(r, t, how, pos, &s));
	return 0;
}

int main(int argc, char **argv)
{
	struct own_ring r;
	bool before;
	int c;

	if (argc >= 2 && !strcmp(argv[1], "execd"))
		return execd();
	if (argc < 3)
		return 2;
	if (!strcmp(argv[1], "exec"))
		return exec_way(argv[0]);
	if (forge_way(argv[1]))
		return forge_main(argv[1]);
	before = !strcmp(argv[2], "before");
	/* creates the ring */
	memprof_phase("hostile");
	mark();
	if (own_ring_map(&r) < 0)
		return 3;
	if (before) {
		if (corrupt(&r, argv[1], true) < 0)
			return 4;
		puts("ready");
		fflush(stdout);
		/* the test says when the daemon is there */
		while ((c = getchar()) != EOF && c != '\n')
			;
		mark();
	} else {
		if (!own_ring_wait_attached(&r))
			return 5;
		memprof_phase("hostile");
		if (!own_ring_wait_read(&r))
			return 5;
		mark();
		if (corrupt(&r, argv[1], false) < 0)
			return 4;
		/* A slot-level corruption at the next position stands only
		 * while this thread writes no record over it. */
		if (!strcmp(argv[1], "header"))
			mark();
	}
	/* outlive a few drains of the daemon, which must keep going */
	usleep(200 * 1000);
	return 0;
}
