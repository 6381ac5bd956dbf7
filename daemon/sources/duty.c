// SPDX-License-Identifier: MIT
#include "duty.h"

bool mp_duty_valid(uint64_t on_ns, uint64_t period_ns)
{
	return !period_ns || (on_ns && on_ns < period_ns);
}

void mp_duty_init(struct mp_duty *d, uint64_t on_ns, uint64_t period_ns)
{
	*d = (struct mp_duty){ .on_ns = on_ns, .period_ns = period_ns };
}

/* A reading older than the window's start (a caller's stale clock) counts
 * nothing rather than wrapping around. */
static uint64_t open_window_ns(const struct mp_duty *d, uint64_t now_ns)
{
	return d->on && now_ns > d->since_ns ? now_ns - d->since_ns : 0;
}

uint64_t mp_duty_switched_on(struct mp_duty *d, uint64_t now_ns)
{
	if (!d->on) {
		d->on = true;
		d->since_ns = now_ns;
	}
	return d->period_ns ? d->on_ns : 0;
}

uint64_t mp_duty_switched_off(struct mp_duty *d, uint64_t now_ns)
{
	d->total_ns += open_window_ns(d, now_ns);
	d->on = false;
	return d->period_ns ? d->period_ns - d->on_ns : 0;
}

uint64_t mp_duty_active_ns(const struct mp_duty *d, uint64_t now_ns)
{
	return d->total_ns + open_window_ns(d, now_ns);
}
