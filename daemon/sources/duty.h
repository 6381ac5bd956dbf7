/* SPDX-License-Identifier: MIT */
/*
 * The duty cycle of the allocator probes (--duty ON/PERIOD): attached for
 * ON, detached for PERIOD - ON, again and again, and how long they were
 * attached in all (the profile's duty_active_ns). The caller does the
 * attaching and keeps the timer; this only decides, on the clock readings
 * it is given, so that tests can run the windows on a fake clock.
 *
 * Each window is timed from the switch that opened it, not from a fixed
 * grid: a late switch (a slow attach on a loaded host) shifts the windows
 * after it, and the active time counts what the probes really had.
 */
#ifndef MP_DUTY_H
#define MP_DUTY_H

#include <stdbool.h>
#include <stdint.h>

struct mp_duty {
	uint64_t on_ns, period_ns; /* period 0: no duty cycle, always on */
	bool on; /* the probes are attached */
	uint64_t since_ns; /* when they were, if on */
	uint64_t total_ns; /* attached time of the windows already closed */
};

/* Whether ON/PERIOD is a duty cycle: 0 < ON < PERIOD, or PERIOD 0 (none,
 * whatever ON says: it is unused then). */
bool mp_duty_valid(uint64_t on_ns, uint64_t period_ns);

/* Off, nothing counted yet. */
void mp_duty_init(struct mp_duty *d, uint64_t on_ns, uint64_t period_ns);

/* The probes were attached at @now_ns: a window opens. Returns how long
 * it lasts (the timer's next delay), 0 without a duty cycle. */
uint64_t mp_duty_switched_on(struct mp_duty *d, uint64_t now_ns);

/* The probes were detached at @now_ns (a no-op when already off): the
 * window closes and counts. Returns how long they stay off, 0 without a
 * duty cycle. */
uint64_t mp_duty_switched_off(struct mp_duty *d, uint64_t now_ns);

/* Attached time up to @now_ns, the open window included. */
uint64_t mp_duty_active_ns(const struct mp_duty *d, uint64_t now_ns);

#endif
