/* SPDX-License-Identifier: MIT */
/*
 * Timestamps of heap records (docs/RING.md "Clocks"): the TSC where the
 * kernel itself keeps CLOCK_MONOTONIC on it, converted to CLOCK_MONOTONIC
 * nanoseconds by the consumer. Shared by libmemprof (which decides once, at
 * ring creation, which clock its heap records carry) and the consumer
 * (which decides the same way whether it believes TSC records at all).
 */
#ifndef MEMPROF_RING_CLOCK_H
#define MEMPROF_RING_CLOCK_H

#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#define MP_CLOCKSOURCE_PATH "/sys/devices/system/clocksource/clocksource0/current_clocksource"

static inline uint64_t mp_rdtsc(void)
{
#if defined(__x86_64__)
	uint32_t lo, hi;

	/* Not serialising on purpose: a record's stamp may be taken a few
	 * dozen cycles early, far below the ordering the consumer needs
	 * against the kernel's events (syscalls, faults). */
	__asm__ volatile("rdtsc" : "=a"(lo), "=d"(hi));
	return ((uint64_t)hi << 32) | lo;
#else
	return 0;
#endif
}

/*
 * True when the TSC may stamp records: the CPU says its TSC is invariant
 * (constant rate in every P-/C-state, CPUID 0x80000007 EDX bit 8) and the
 * kernel's clocksource is "tsc" (so the kernel found it synchronised across
 * CPUs and derives CLOCK_MONOTONIC from it; were it found unstable, the
 * kernel would have switched away). A few syscalls: call once, never on a
 * hot path.
 */
static inline bool mp_tsc_trusted(void)
{
#if defined(__x86_64__)
	unsigned a, b, c, d;
	char buf[16];
	ssize_t n;
	int fd;

	if (!__get_cpuid(0x80000000u, &a, &b, &c, &d) || a < 0x80000007u)
		return false;
	if (!__get_cpuid(0x80000007u, &a, &b, &c, &d) || !(d & (1u << 8)))
		return false;
	fd = open(MP_CLOCKSOURCE_PATH, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	return n == 4 && memcmp(buf, "tsc\n", 4) == 0;
#else
	return false;
#endif
}

#endif /* MEMPROF_RING_CLOCK_H */
