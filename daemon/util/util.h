/* SPDX-License-Identifier: MIT */
/* Small helpers every stage of the daemon needs: the monotonic clock that
 * all event timestamps share (CLOCK_MONOTONIC, the clock of
 * bpf_ktime_get_ns and of the marker ring), ARRAY_SIZE, and arming a
 * timerfd from nanoseconds. */
#ifndef MEMPROF_UTIL_H
#define MEMPROF_UTIL_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/timerfd.h>
#include <time.h>

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

#define MP_NSEC_PER_SEC 1000000000ull

static inline uint64_t mp_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * MP_NSEC_PER_SEC + (uint64_t)ts.tv_nsec;
}

static inline struct timespec mp_timespec_of_ns(uint64_t ns)
{
	return (struct timespec){ .tv_sec = (time_t)(ns / MP_NSEC_PER_SEC),
				  .tv_nsec = (long)(ns % MP_NSEC_PER_SEC) };
}

/* Arms timerfd @fd to fire @first_ns from now, then every @period_ns
 * (0: once). @first_ns 0 disarms it. Returns 0 or a negative errno. */
static inline int mp_timer_arm(int fd, uint64_t first_ns, uint64_t period_ns)
{
	struct itimerspec it = { .it_value = mp_timespec_of_ns(first_ns),
				 .it_interval = mp_timespec_of_ns(period_ns) };

	return timerfd_settime(fd, 0, &it, NULL) < 0 ? -errno : 0;
}

#endif
