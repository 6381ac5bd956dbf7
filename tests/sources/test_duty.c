// SPDX-License-Identifier: MIT
/*
 * The probes' duty cycle (daemon/sources/duty.c) on a fake clock: every
 * switch, window and total exactly, for a punctual host and for a late one
 * (the timer handled late, a slow attach), without waiting for any real
 * window. tests/sources/test_tracer.c checks on real probes what holds on
 * any machine.
 */
#include <criterion/criterion.h>

#include "duty.h"

#define MS 1000000ull

Test(duty, valid_cycles)
{
	cr_assert(mp_duty_valid(0, 0), "no duty cycle");
	cr_assert(mp_duty_valid(5 * MS, 0), "no period: ON is unused");
	cr_assert(mp_duty_valid(1, 2));
	cr_assert(mp_duty_valid(200 * MS, 500 * MS));
	cr_assert(mp_duty_valid(499 * MS, 500 * MS));
	cr_assert_not(mp_duty_valid(0, 500 * MS), "ON 0: never attached");
	cr_assert_not(mp_duty_valid(500 * MS, 500 * MS), "ON = PERIOD: never detached");
	cr_assert_not(mp_duty_valid(501 * MS, 500 * MS));
	cr_assert_not(mp_duty_valid(UINT64_MAX, 1));
}

Test(duty, switches_and_active_time)
{
	struct mp_duty d;

	mp_duty_init(&d, 200 * MS, 500 * MS);
	cr_assert_not(d.on);
	cr_assert_eq(mp_duty_active_ns(&d, 1000 * MS), 0);
	/* ON at 1 s: the timer's next delay is ON */
	cr_assert_eq(mp_duty_switched_on(&d, 1000 * MS), 200 * MS);
	cr_assert(d.on);
	cr_assert_eq(mp_duty_active_ns(&d, 1000 * MS), 0, "nothing yet at the switch itself");
	cr_assert_eq(mp_duty_active_ns(&d, 1150 * MS), 150 * MS, "the open window counts");
	/* OFF at 1.2 s: the next delay is PERIOD - ON */
	cr_assert_eq(mp_duty_switched_off(&d, 1200 * MS), 300 * MS);
	cr_assert_not(d.on);
	cr_assert_eq(mp_duty_active_ns(&d, 1200 * MS), 200 * MS);
	cr_assert_eq(mp_duty_active_ns(&d, 1499 * MS), 200 * MS, "OFF adds nothing");
	cr_assert_eq(mp_duty_switched_on(&d, 1500 * MS), 200 * MS);
	cr_assert_eq(mp_duty_active_ns(&d, 1501 * MS), 201 * MS);
	cr_assert_eq(mp_duty_switched_off(&d, 1700 * MS), 300 * MS);
	cr_assert_eq(mp_duty_active_ns(&d, 9000 * MS), 400 * MS);
}

/* Repeated switches and a clock reading older than the window: nothing is
 * counted twice, nothing wraps around. */
Test(duty, boundaries)
{
	struct mp_duty d;

	mp_duty_init(&d, 10, 100);
	cr_assert_eq(mp_duty_switched_off(&d, 50), 90, "off while off: nothing to close");
	cr_assert_eq(mp_duty_active_ns(&d, 50), 0);
	mp_duty_switched_on(&d, 100);
	mp_duty_switched_on(&d, 105);
	cr_assert_eq(mp_duty_active_ns(&d, 110), 10, "the window opened at the first switch");
	cr_assert_eq(mp_duty_active_ns(&d, 99), 0, "a reading before the window");
	mp_duty_switched_off(&d, 110);
	mp_duty_switched_off(&d, 200);
	cr_assert_eq(mp_duty_active_ns(&d, 300), 10, "closed once");
	/* A window closed at its opening instant is empty. */
	mp_duty_switched_on(&d, 300);
	mp_duty_switched_off(&d, 300);
	cr_assert_eq(mp_duty_active_ns(&d, 400), 10);
	/* Stale readings count nothing; the total only grows. */
	mp_duty_switched_on(&d, 500);
	mp_duty_switched_off(&d, 450);
	cr_assert_eq(mp_duty_active_ns(&d, 600), 10);
}

/* Without --duty the probes are on from attach to exit: the same accounts
 * hold, and no timer is ever armed. */
Test(duty, no_duty_cycle)
{
	struct mp_duty d;

	mp_duty_init(&d, 0, 0);
	cr_assert_eq(mp_duty_switched_on(&d, 7), 0);
	cr_assert_eq(mp_duty_active_ns(&d, 1007), 1000);
	cr_assert_eq(mp_duty_switched_off(&d, 2007), 0);
	cr_assert_eq(mp_duty_active_ns(&d, 5000), 2000);
}

/* The tracer's use of it, on a fake clock: attached at @t0 and the timer
 * armed for the returned delay; each expiry is handled @late_ns after it is
 * due; switching off reads the clock first, switching on after an attach
 * of @attach_ns. Records every window, stops at the exit at @exit_ns. */
struct sim {
	struct mp_duty d;
	uint64_t on_at[32], off_at[32];
	size_t n_on, n_off;
};

static void simulate(struct sim *s, uint64_t on, uint64_t period, uint64_t t0, uint64_t late_ns,
		     uint64_t attach_ns, uint64_t exit_ns)
{
	uint64_t due;

	*s = (struct sim){ 0 };
	mp_duty_init(&s->d, on, period);
	s->on_at[s->n_on++] = t0;
	due = t0 + mp_duty_switched_on(&s->d, t0);
	while (due + late_ns < exit_ns) {
		uint64_t now = due + late_ns;

		cr_assert_lt(s->n_on, 32);
		if (s->d.on) {
			s->off_at[s->n_off++] = now;
			due = now + mp_duty_switched_off(&s->d, now);
		} else {
			now += attach_ns;
			s->on_at[s->n_on++] = now;
			due = now + mp_duty_switched_on(&s->d, now);
		}
	}
	/* The target's exit closes an open window. */
	mp_duty_switched_off(&s->d, exit_ns);
}

/* ON 200 ms of every 500 ms over 1.5 s, every switch on time: windows
 * [0, .2), [.5, .7), [1, 1.2) s exactly, 600 ms on. */
Test(duty, punctual_windows)
{
	static const uint64_t on_at[] = { 0, 500 * MS, 1000 * MS },
			      off_at[] = { 200 * MS, 700 * MS, 1200 * MS };
	struct sim s;

	simulate(&s, 200 * MS, 500 * MS, 0, 0, 0, 1500 * MS);
	cr_assert_eq(s.n_on, 3);
	cr_assert_eq(s.n_off, 3);
	cr_assert_arr_eq(s.on_at, on_at, sizeof(on_at));
	cr_assert_arr_eq(s.off_at, off_at, sizeof(off_at));
	cr_assert_eq(mp_duty_active_ns(&s.d, 1500 * MS), 600 * MS);
	cr_assert_not(s.d.on);

	/* An exit inside the third window cuts it: 2 x 200 + 100 ms. */
	simulate(&s, 200 * MS, 500 * MS, 0, 0, 0, 1100 * MS);
	cr_assert_eq(s.n_on, 3);
	cr_assert_eq(s.n_off, 2);
	cr_assert_eq(mp_duty_active_ns(&s.d, 5000 * MS), 500 * MS);

	/* An exit at the very end of a window, before its expiry is handled,
	 * and one in an OFF window. */
	simulate(&s, 200 * MS, 500 * MS, 0, 0, 0, 1200 * MS);
	cr_assert_eq(mp_duty_active_ns(&s.d, 5000 * MS), 600 * MS);
	simulate(&s, 200 * MS, 500 * MS, 0, 0, 0, 1300 * MS);
	cr_assert_eq(mp_duty_active_ns(&s.d, 5000 * MS), 600 * MS);
}

/* A loaded host: each expiry handled 7 ms late, each attach 30 ms long.
 * A window lasts ON + 7 ms (switching off is never early), an OFF gap
 * PERIOD - ON + 7 + 30 ms, so every cycle is 544 ms and the windows drift
 * by that; the active time is what the probes really had. */
Test(duty, late_windows)
{
	const uint64_t late = 7 * MS, attach = 30 * MS, cycle = 500 * MS + 2 * late + attach;
	struct sim s;

	simulate(&s, 200 * MS, 500 * MS, 1000 * MS, late, attach, 1000 * MS + 2000 * MS);
	cr_assert_eq(cycle, 544 * MS);
	/* windows open at 1000 + k 544 ms: k = 0..3 */
	cr_assert_eq(s.n_on, 4);
	cr_assert_eq(s.n_off, 4);
	for (size_t k = 0; k < s.n_on; k++) {
		cr_assert_eq(s.on_at[k], 1000 * MS + k * cycle, "window %zu", k);
		cr_assert_eq(s.off_at[k] - s.on_at[k], 200 * MS + late, "window %zu", k);
		if (k)
			cr_assert_eq(s.on_at[k] - s.off_at[k - 1], 300 * MS + late + attach,
				     "gap before window %zu", k);
	}
	cr_assert_eq(mp_duty_active_ns(&s.d, 9000 * MS), 4 * (200 * MS + late));
}

/* Whatever the host's delays, each closed window is at least ON long and
 * the active time never exceeds the run: the bounds the integration test
 * can rely on. */
Test(duty, bounds_hold_for_any_delay)
{
	static const uint64_t delays[] = { 0, 1, 999, 3 * MS, 150 * MS, 700 * MS };

	for (size_t i = 0; i < sizeof(delays) / sizeof(delays[0]); i++) {
		for (size_t j = 0; j < sizeof(delays) / sizeof(delays[0]); j++) {
			const uint64_t run = 5000 * MS;
			struct sim s;

			simulate(&s, 200 * MS, 500 * MS, 0, delays[i], delays[j], run);
			cr_assert_geq(s.n_on, 1);
			for (size_t k = 0; k < s.n_off; k++)
				cr_assert_geq(s.off_at[k] - s.on_at[k], 200 * MS);
			for (size_t k = 1; k < s.n_on; k++)
				cr_assert_geq(s.on_at[k] - s.off_at[k - 1], 300 * MS);
			cr_assert_geq(mp_duty_active_ns(&s.d, run), s.n_off * 200 * MS);
			cr_assert_leq(mp_duty_active_ns(&s.d, run), run);
		}
	}
}
