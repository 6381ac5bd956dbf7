// SPDX-License-Identifier: MIT
/*
 * A session with nothing to read sleeps until there is something
 * (docs/SERVICE.md "Costs and limits"). After IDLE_AFTER_TICKS ticks at
 * TICK_NS that read nothing, the session asks its sources to wake it (the
 * BPF ring buffer wakes its fd at the first record while the tracer is
 * told the session is idle; the marker ring's doorbell, a futex word the
 * target's producers swap and wake, is watched by a waiter thread that
 * signals an eventfd), polls once more (a record published before the
 * sources knew is read then), and stops its tick. A sleeping session's
 * timers: a one-shot tick for what the ordering stage still holds and for
 * the next marker ring search, and an RSS sample every IDLE_RSS_NS where
 * RSS changes wake no event (without the rss_stat tracepoint): a sample
 * equal to the one before is dropped, a different one wakes the session.
 * Any event of a source puts the tick back.
 */
#include <errno.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "consumer.h"
#include "log.h"
#include "order.h"
#include "order_inline.h"
#include "path.h"
#include "ring_abi.h"
#include "rss.h"
#include "tracer.h"
#include "util.h"

#include "session_impl.h"

/* The waiter thread: it sleeps on the ring's doorbell while the session
 * watches it (watch set), and on its private control word otherwise. */
struct bell_waiter {
	pthread_t th;
	int efd; /* in the session's epoll set: EP_BELL */
	uint32_t ctl; /* bumped at each change of watch or stop */
	uint32_t stop;
	uint32_t *watch;
};

static void *bell_main(void *arg)
{
	struct bell_waiter *b = arg;
	uint32_t seen = 0;
	bool notified = false;

	for (;;) {
		uint32_t c = __atomic_load_n(&b->ctl, __ATOMIC_ACQUIRE);
		uint32_t *w = __atomic_load_n(&b->watch, __ATOMIC_ACQUIRE);

		if (__atomic_load_n(&b->stop, __ATOMIC_ACQUIRE))
			return NULL;
		if (w && !(notified && seen == c)) {
			/* Returns when the doorbell is no longer armed (a
			 * producer swapped it), when ctl changes, or at once
			 * when either already differs. Only the doorbell's
			 * word is the target's: the waiter never reads it. */
			struct futex_waitv v[2] = {
				{ .val = MP_BELL_ARMED, .uaddr = (uintptr_t)w, .flags = FUTEX_32 },
				{ .val = c,
				  .uaddr = (uintptr_t)&b->ctl,
				  .flags = FUTEX_32 | FUTEX_PRIVATE_FLAG },
			};
			uint64_t one = 1;

			syscall(SYS_futex_waitv, v, 2u, 0u, NULL, 0);
			if (__atomic_load_n(&b->ctl, __ATOMIC_ACQUIRE) != c)
				continue;
			/* the doorbell (or anything else about it: a hostile
			 * target costs its own syscalls) */
			seen = c;
			notified = true;
			if (write(b->efd, &one, sizeof(one)) < 0 && errno != EAGAIN)
				return NULL;
			continue;
		}
		syscall(SYS_futex, &b->ctl, FUTEX_WAIT_PRIVATE, c, NULL, NULL, 0);
	}
}

static void waiter_set(struct bell_waiter *b, uint32_t *watch)
{
	__atomic_store_n(&b->watch, watch, __ATOMIC_RELEASE);
	__atomic_add_fetch(&b->ctl, 1, __ATOMIC_RELEASE);
	syscall(SYS_futex, &b->ctl, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

static int waiter_start(struct session *s)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.u32 = EP_BELL };
	struct bell_waiter *b = calloc(1, sizeof(*b));
	pthread_attr_t attr;
	int r;

	if (!b)
		return -ENOMEM;
	b->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (b->efd < 0 || epoll_ctl(s->epfd, EPOLL_CTL_ADD, b->efd, &ev) < 0) {
		r = -errno;
		goto fail;
	}
	r = -pthread_attr_init(&attr);
	if (r < 0)
		goto fail;
	/* a few frames; a sanitizer's own need included */
	pthread_attr_setstacksize(&attr, 256 << 10);
	r = -pthread_create(&b->th, &attr, bell_main, b);
	pthread_attr_destroy(&attr);
	if (r < 0)
		goto fail;
	s->idle.waiter = b;
	return 0;
fail:
	if (b->efd >= 0)
		close(b->efd);
	free(b);
	return r;
}

void mp_sess_idle_free(struct session *s)
{
	struct bell_waiter *b = s->idle.waiter;

	/* a ring left armed costs its next record one syscall: quiet it */
	if (s->idle.bell && s->ring && mp_consumer_bell(s->ring) == s->idle.bell)
		__atomic_store_n(s->idle.bell, MP_BELL_QUIET, __ATOMIC_SEQ_CST);
	s->idle.bell = NULL;
	if (!b)
		return;
	__atomic_store_n(&b->stop, 1, __ATOMIC_RELEASE);
	waiter_set(b, NULL);
	pthread_join(b->th, NULL);
	close(b->efd);
	free(b);
	s->idle.waiter = NULL;
}

/* The RSS period of a session polling, or asleep. */
static int rss_period(struct session *s, bool asleep)
{
	bool rss_stat = s->o->rss_exact || s->o->mode == MP_TRACE_RSS;

	if (!s->rss)
		return 0;
	if (!asleep)
		return mp_rss_sampler_set_period(s->rss, 1000000000ull / s->o->rss_hz);
	/* rss_stat reports every change of the target's counters: it wakes
	 * the session, which samples again */
	return mp_rss_sampler_set_period(s->rss, rss_stat ? 0 : IDLE_RSS_NS);
}

/* Back to polling: the sources' wake-ups off, the tick and RSS sampling
 * at their rates. */
static int idle_wake(struct session *s)
{
	struct sess_idle *d = &s->idle;
	bool asleep = d->state == IDLE_ASLEEP;
	int r;

	d->quiet_ticks = 0;
	if (d->state == IDLE_POLL)
		return 0;
	d->state = IDLE_POLL;
	mp_tracer_set_idle(s->tracer, false);
	if (d->bell)
		__atomic_store_n(d->bell, MP_BELL_QUIET, __ATOMIC_SEQ_CST);
	d->bell = NULL;
	if (d->waiter)
		waiter_set(d->waiter, NULL);
	if (!asleep)
		return 0;
	s->tick_ns = mp_sess_busy_tick(s);
	s->idle_ticks = 0;
	r = mp_timer_arm(s->tickfd, s->tick_ns, s->tick_ns);
	if (r == 0)
		r = rss_period(s, false);
	/* the target runs again: a marker ring may come now */
	if (!s->ring && s->ring_retry_ns != UINT64_MAX)
		s->ring_retry_ns = 0;
	return r < 0 ? log_error_errno(r, "pid %d: timers: %m", (int)s->o->pid) : 0;
}

/* Polling with the sources' wake-ups armed: the next tick sees whether
 * anything came before they were. */
static int idle_arm(struct session *s)
{
	struct sess_idle *d = &s->idle;
	uint32_t *bell = s->ring ? mp_consumer_bell(s->ring) : NULL;
	int r;

	if (bell && !d->waiter) {
		r = waiter_start(s);
		if (r < 0)
			return log_error_errno(r, "pid %d: doorbell waiter: %m", (int)s->o->pid);
	}
	mp_tracer_set_idle(s->tracer, true);
	if (bell) {
		__atomic_store_n(bell, MP_BELL_ARMED, __ATOMIC_SEQ_CST);
		d->bell = bell;
		waiter_set(d->waiter, bell);
	}
	d->state = IDLE_GRACE;
	return 0;
}

/* Asleep: the tick once, for what the ordering stage holds and the next
 * marker ring search, else never. */
static int idle_timer(struct session *s)
{
	uint64_t now = mp_now_ns(), at = UINT64_MAX;
	uint64_t lag = s->o->lag_ns ? s->o->lag_ns : DEFAULT_LAG_NS;

	if (s->order->items || s->order->held)
		at = now + lag + TICK_NS;
	if (!s->ring && !s->exited && s->ring_retry_ns != UINT64_MAX && s->ring_retry_ns < at)
		at = s->ring_retry_ns > now ? s->ring_retry_ns : now + 1;
	return mp_timer_arm(s->tickfd, at == UINT64_MAX ? 0 : at - now, 0);
}

int mp_sess_idle_tick(struct session *s)
{
	struct sess_idle *d = &s->idle;
	uint64_t events = mp_tracer_delivered(s->tracer);
	bool quiet = s->drains == d->drains_seen && events == d->events_seen && !d->rss_changed &&
		     !s->drain_more && s->tick_ns == TICK_NS;
	int r;

	d->drains_seen = s->drains;
	d->events_seen = events;
	d->rss_changed = false;
	/* a look for objects past what is traced is due (unseen.c): its
	 * second sighting must come while the process lives */
	if (mp_sess_unseen_pending(s))
		quiet = false;
	/* a ring without a doorbell (an older libmemprof) is polled */
	if (s->ring && !mp_consumer_bell(s->ring))
		quiet = false;
	/* the ring armed is gone (exec): its word is not ours any more */
	if (d->bell && (!s->ring || mp_consumer_bell(s->ring) != d->bell)) {
		d->bell = NULL;
		quiet = false;
	}
	if (!quiet)
		return idle_wake(s);
	switch (d->state) {
	case IDLE_POLL:
		if (++d->quiet_ticks >= IDLE_AFTER_TICKS)
			return idle_arm(s);
		return 0;
	case IDLE_GRACE:
		d->state = IDLE_ASLEEP;
		r = rss_period(s, true);
		break;
	default:
		r = 0;
		break;
	}
	if (r == 0)
		r = idle_timer(s);
	return r < 0 ? log_error_errno(r, "pid %d: timers: %m", (int)s->o->pid) : 0;
}

int mp_sess_idle_event(struct session *s, uint32_t ep)
{
	uint64_t n;

	switch (ep) {
	case EP_BELL:
		if (s->idle.waiter && read(s->idle.waiter->efd, &n, sizeof(n)) < 0 &&
		    errno != EAGAIN)
			return log_error_errno(-errno, "pid %d: doorbell: %m", (int)s->o->pid);
		return idle_wake(s);
	case EP_TRACER:
		return idle_wake(s);
	default:
		return 0;
	}
}

static bool rss_same(const struct mp_rss_sample *a, const struct mp_rss_sample *b)
{
	return a->vm_rss == b->vm_rss && a->rss_anon == b->rss_anon && a->rss_file == b->rss_file &&
	       a->rss_shmem == b->rss_shmem && a->vm_hwm == b->vm_hwm && a->vm_swap == b->vm_swap;
}

int mp_sess_idle_rss(struct session *s)
{
	struct sess_idle *d = &s->idle;
	struct mp_rss_sample rs;
	bool changed;
	int r;

	r = mp_rss_sampler_sample(s->rss, &rs);
	if (r == -ESRCH || r == -EAGAIN)
		return 0;
	if (r < 0) {
		/* The process may be gone between its exit and our noticing. */
		if (!s->exited)
			log_warning_errno(r, "pid %d: RSS sample: %m", (int)s->o->pid);
		return 0;
	}
	changed = !d->have_rss || !rss_same(&rs, &d->last_rss);
	d->last_rss = rs;
	d->have_rss = true;
	d->rss_changed |= changed;
	if (d->state == IDLE_ASLEEP) {
		/* asleep, the timeline keeps only what changed */
		if (!changed)
			return 0;
		r = idle_wake(s);
		if (r < 0)
			return r;
	}
	return mp_order_push(s->order, ITEM_RSS, rs.ts_ns, &rs, sizeof(rs));
}

uint64_t mp_sess_ring_retry_ns(struct session *s)
{
	uint32_t k;

	/* the first search, or the first after an exec or a wake-up */
	if (!s->ring_retry_ns)
		s->idle.ring_tries = 0;
	k = s->idle.ring_tries;
	if (k < 16)
		s->idle.ring_tries++;
	return k >= 5 || (RING_RETRY_NS << k) > RING_RETRY_MAX_NS ? RING_RETRY_MAX_NS :
								    RING_RETRY_NS << k;
}
