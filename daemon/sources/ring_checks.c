// SPDX-License-Identifier: MIT
/*
 * What the ring reader checks in what a ring claims, beyond its format
 * (docs/PROFILE.md "Corruption"): heap records stamped outside the
 * session, records of threads that are not the ring's, stuck rings. The
 * per-record tests are inline in consumer.c; their slow paths, taken only
 * when a record fails the fast test, are here.
 */
#include "consumer_impl.h"
#include "util.h"

/* The stamp @ns is outside [ts_lo, ts_hi]: 1 before the window, 2 after
 * it even by a clock read now, else 0 (ts_hi moved on). */
int mp_cons_ts_outside_(struct mp_consumer *c, uint64_t ns)
{
	if (ns < c->ts_lo)
		return 1;
	c->ts_hi = mp_now_ns() + TS_SLACK_NS;
	return ns > c->ts_hi ? 2 : 0;
}

/* A record read and refused (@why): skipped, counted, reading goes on. */
int mp_cons_reject_(struct mp_consumer *c, enum mp_consumer_reject why, bool *skipped)
{
	c->rejected[why]++;
	c->corruption |= MP_CONSUMER_CORRUPT_REJECTED;
	*skipped = true;
	return 0;
}

/* A heap record stamped outside the window (@out: mp_cons_ts_outside_()) with
 * record number @tseq in ring @t: one numbered as the attach snapshot and
 * stamped before the attach was left by an earlier consumer's session (it
 * detached before reading it), and is skipped as the records before the
 * snapshot are; any other is refused. */
int mp_cons_ts_reject_(struct mp_consumer *c, const struct tstate *t, int out, uint32_t tseq,
		       bool *skipped)
{
	if (out == 1 && t->snap_valid && tseq == t->snap_seq) {
		*skipped = true;
		return 0;
	}
	return mp_cons_reject_(c, MP_CONSUMER_REJECT_TIME, skipped);
}

/* Record of ring @t with thread id @tid, another than its last record's:
 * whether to believe it. Strict: a thread id Linux can have, and the
 * thread slot's owner, or, while the slot names another owner than the
 * last one whose records we took, a thread that owned it in between (the
 * records of threads that exited come before their successors'). Once the
 * owner's own records come, no other thread id passes: a writer cannot
 * name other threads as it goes. */
bool mp_cons_tid_ok_(struct mp_consumer *c, struct tstate *t, uint32_t tid)
{
	uint32_t owner = LOAD(&thread_at(c, (uint32_t)(t - c->ts))->tid, RELAXED);

	if (c->strict && (!tid || tid > TID_MAX || (tid != owner && owner == t->owner)))
		return false;
	t->tid = tid;
	if (tid == owner)
		t->owner = owner;
	return true;
}

/* Ring @t cannot move on (mp_cons_check_heads_(), stuck_at()): flagged, once. */
void mp_cons_ring_stuck_(struct mp_consumer *c, struct tstate *t)
{
	if (t->stuck_flagged)
		return;
	t->stuck_flagged = true;
	c->stuck_rings++;
	c->corruption |= MP_CONSUMER_CORRUPT_STUCK;
}

/*
 * Rings that claim records they do not hand over: the thread slot's head
 * is past the consumer's position (strict: libmemprof publishes a slot
 * before it moves head; an image's head may be unset) while the next slot
 * is not published, or that slot's sequence word is one no writer leaves
 * there (0 on the ring's first lap, the previous lap's number after).
 * Either way the ring cannot move on; once so at the same position for
 * stall_ns it is stuck. Looked at every stall_ns / 4 rather than at every
 * read (one more cache line per thread slot).
 */
void mp_cons_check_heads_(struct mp_consumer *c, uint64_t now_ns)
{
	c->heads_ns = now_ns;
	for (uint32_t i = 0; i < c->thread_count; i++) {
		struct tstate *t = &c->ts[i];
		uint64_t head = LOAD(&thread_at(c, i)->head, ACQUIRE);
		uint64_t seq = LOAD(&t->slots[t->pos & c->mask].seq, ACQUIRE);
		uint64_t prev = t->pos >= c->slot_count ? t->pos + 1 - c->slot_count : 0;
		bool stale = seq != t->pos + 1 && (seq != prev || (c->strict && head != t->pos));

		if (!stale) {
			t->stale_ns = t->stale_pos = 0;
			t->stale = false;
		} else if (!t->stale || t->stale_pos != t->pos) {
			t->stale = true;
			t->stale_ns = now_ns;
			t->stale_pos = t->pos;
		} else if (now_ns - t->stale_ns >= c->stall_ns) {
			mp_cons_ring_stuck_(c, t);
		}
	}
}

uint64_t mp_consumer_rejected(const struct mp_consumer *c, enum mp_consumer_reject why)
{
	return c && (unsigned)why < MP_CONSUMER_REJECT_N ? c->rejected[why] : 0;
}

uint64_t mp_consumer_stuck_rings(const struct mp_consumer *c)
{
	return c ? c->stuck_rings : 0;
}
