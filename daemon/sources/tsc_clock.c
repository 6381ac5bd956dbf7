/* SPDX-License-Identifier: MIT */
/*
 * The ring reader's TSC clock: the calibration from (rdtsc, clock_gettime)
 * pairs. The conversion itself, inlined into the read of every heap
 * record, is in tsc_clock.h.
 */
#include "tsc_clock.h"
#include "ring_clock.h"
#include "util.h"

#define LOAD(p, mo) __atomic_load_n((p), __ATOMIC_##mo)
#define STORE(p, v, mo) __atomic_store_n((p), (v), __ATOMIC_##mo)

/* The rate's baseline: at least TSC_MIN_BASE_NS (the first calibration
 * waits that long after the open if it must), then TSC_BASE_NS to twice it.
 * A pair is off by at most half its bracket (tens of ns): over one second
 * that is a rate error below 0.1 ppm. */
#define TSC_MIN_BASE_NS 1000000ull
#define TSC_BASE_NS 1000000000ull
#define TSC_PAIR_TRIES 3

/* 0: not yet known, 1 trusted, 2 not. */
static int tsc_trust;

static bool tsc_trusted_once(void)
{
	int t = LOAD(&tsc_trust, RELAXED);

	if (!t) {
		t = mp_tsc_trusted() ? 1 : 2;
		STORE(&tsc_trust, t, RELAXED);
	}
	return t == 1;
}

/* The narrowest of a few brackets: a preemption between the reads widens
 * one, not all. */
static struct mp_tsc_pair tsc_pair_take(void)
{
	struct mp_tsc_pair p = { 0, 0 };
	uint64_t best = UINT64_MAX;

	for (int i = 0; i < TSC_PAIR_TRIES; i++) {
		uint64_t t1 = mp_rdtsc();
		uint64_t ns = mp_now_ns();
		uint64_t t2 = mp_rdtsc();

		if (t2 - t1 < best) {
			best = t2 - t1;
			p.tsc = t1 + (t2 - t1) / 2;
			p.ns = ns;
		}
	}
	return p;
}

void mp_tsc_clock_init(struct mp_tsc_clock *k)
{
	*k = (struct mp_tsc_clock){ .mode = tsc_trusted_once() ? MP_TSC_LIVE : MP_TSC_REJECT };
	if (k->mode == MP_TSC_LIVE)
		k->a = k->b = tsc_pair_take();
}

bool mp_tsc_clock_refresh(struct mp_tsc_clock *k)
{
	struct mp_tsc_pair p = tsc_pair_take();

	if (!k->ready) {
		/* once per consumer, and only if the first TSC record comes
		 * within TSC_MIN_BASE_NS of the open */
		for (unsigned i = 0; p.ns - k->a.ns < TSC_MIN_BASE_NS && i < 1000000; i++)
			p = tsc_pair_take();
	}
	if (p.tsc <= k->a.tsc || p.ns <= k->a.ns || p.ns - k->a.ns < TSC_MIN_BASE_NS) {
		k->mode = MP_TSC_REJECT;
		k->fast = false;
		return false;
	}
	k->cal.tsc = p.tsc;
	k->cal.ns = p.ns;
	k->cal.mult = (uint64_t)(((unsigned __int128)(p.ns - k->a.ns) << 32) / (p.tsc - k->a.tsc));
	k->ready = true;
	if (p.ns - k->b.ns >= TSC_BASE_NS) {
		k->a = k->b;
		k->b = p;
	}
	return true;
}

uint64_t mp_tsc_to_ns(const struct mp_tsc_cal *cal, uint64_t tsc)
{
	return mp_tsc_clock_to_ns(cal, tsc);
}
