/* SPDX-License-Identifier: MIT */
/*
 * Timestamps of heap records (docs/RING.md "Clocks"): the TSC where
 * CLOCK_MONOTONIC itself is read from it in user space, converted to
 * CLOCK_MONOTONIC nanoseconds by the consumer. Shared by libmemprof (which
 * decides once, at ring creation, which clock its heap records carry:
 * mp_tsc_stamp_ok()) and the consumer (which decides whether it converts
 * TSC records at all: mp_tsc_trusted()).
 */
#ifndef MEMPROF_RING_CLOCK_H
#define MEMPROF_RING_CLOCK_H

#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
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

/* The clocksources under which CLOCK_MONOTONIC is computed from the TSC
 * read in user space. */
enum mp_tsc_source {
	MP_TSC_SRC_OTHER = 0, /* hpet, acpi_pm, xen, hyperv_clocksource_tsc_page, ... */
	MP_TSC_SRC_TSC = 1, /* "tsc": the kernel found the TSC synchronised */
	/* "kvm-clock": pvclock, TSC-based; synchronised across vCPUs only
	 * while the hypervisor sets PVCLOCK_TSC_STABLE_BIT (see
	 * mp_tsc_stamp_decide()) */
	MP_TSC_SRC_KVM = 2,
};

/* @buf, @n: what a read of MP_CLOCKSOURCE_PATH returned. */
static inline enum mp_tsc_source mp_tsc_source_parse(const char *buf, ssize_t n)
{
	if (n == 4 && memcmp(buf, "tsc\n", 4) == 0)
		return MP_TSC_SRC_TSC;
	if (n == 10 && memcmp(buf, "kvm-clock\n", 10) == 0)
		return MP_TSC_SRC_KVM;
	return MP_TSC_SRC_OTHER;
}

static inline enum mp_tsc_source mp_tsc_source(void)
{
	char buf[32];
	ssize_t n;
	int fd;

	fd = open(MP_CLOCKSOURCE_PATH, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return MP_TSC_SRC_OTHER;
	n = read(fd, buf, sizeof(buf));
	close(fd);
	return mp_tsc_source_parse(buf, n);
}

/* The CPU says its TSC is invariant: constant rate in every P- and
 * C-state (CPUID 0x80000007 EDX bit 8). */
static inline bool mp_tsc_invariant(void)
{
#if defined(__x86_64__)
	unsigned a, b, c, d;

	if (!__get_cpuid(0x80000000u, &a, &b, &c, &d) || a < 0x80000007u)
		return false;
	return __get_cpuid(0x80000007u, &a, &b, &c, &d) && (d & (1u << 8));
#else
	return false;
#endif
}

/*
 * True when the consumer may convert TSC stamps (docs/RING.md "Clocks"):
 * an invariant TSC and a TSC-based clocksource ("tsc", or "kvm-clock").
 * Whether the TSC is also synchronised across CPUs, which only matters to
 * the writer, is mp_tsc_stamp_ok()'s question. A few syscalls: call once,
 * never on a hot path.
 */
static inline bool mp_tsc_trusted(void)
{
	return mp_tsc_invariant() && mp_tsc_source() != MP_TSC_SRC_OTHER;
}

/*
 * The writer's decision, from what was measured: @invariant
 * (mp_tsc_invariant()), the clocksource @src, and for kvm-clock the
 * fastest of a few libc clock_gettime(CLOCK_MONOTONIC) calls (@vdso_ns,
 * the vDSO) and of the same call as a raw syscall (@sys_ns).
 *
 * Under "tsc" the kernel itself found the TSC synchronised across CPUs.
 * Under "kvm-clock" the vDSO computes CLOCK_MONOTONIC from an rdtsc on
 * whatever vCPU it runs, with vCPU 0's pvclock parameters alone, and
 * only while the hypervisor sets PVCLOCK_TSC_STABLE_BIT, which the
 * kernel takes to mean that every vCPU's TSC is synchronised; without
 * the bit, every clock_gettime is a syscall. A vDSO call at least twice
 * as fast as the syscall therefore never entered the kernel, and the TSC
 * is then exactly as synchronised as user-space CLOCK_MONOTONIC is. A
 * vDSO that falls back costs the syscall and more, so this cannot say
 * yes wrongly; noise can only make it say no (clock_gettime stamps).
 */
static inline bool mp_tsc_stamp_decide(bool invariant, enum mp_tsc_source src, uint64_t vdso_ns,
				       uint64_t sys_ns)
{
	if (!invariant)
		return false;
	if (src == MP_TSC_SRC_TSC)
		return true;
	if (src == MP_TSC_SRC_KVM)
		return vdso_ns > 0 && sys_ns > 0 && vdso_ns * 2 < sys_ns;
	return false;
}

static inline uint64_t mp_clock_probe_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Per-call cost, in ns, of the fastest of 4 batches of 32
 * clock_gettime(CLOCK_MONOTONIC) calls, through libc (@raw false: the
 * vDSO) or as the syscall itself. Timed with CLOCK_MONOTONIC, whichever
 * CPU the batch ends on; 0 when no batch could be timed. */
static inline uint64_t mp_clock_call_ns(bool raw)
{
	uint64_t best = UINT64_MAX;

	for (int b = 0; b < 4; b++) {
		struct timespec ts;
		uint64_t t0 = mp_clock_probe_ns(), t1;

		for (int i = 0; i < 32; i++) {
			if (raw)
				syscall(SYS_clock_gettime, CLOCK_MONOTONIC, &ts);
			else
				clock_gettime(CLOCK_MONOTONIC, &ts);
			__asm__ volatile("" : : "r"(&ts) : "memory");
		}
		t1 = mp_clock_probe_ns();
		if (t1 > t0 && (t1 - t0) / 32 < best)
			best = (t1 - t0) / 32;
	}
	return best == UINT64_MAX ? 0 : best;
}

/*
 * True when libmemprof may stamp heap records with the TSC: the
 * decision above, on this machine. Under kvm-clock it times 256 calls
 * (tens of microseconds); call once, when the ring is created.
 */
static inline bool mp_tsc_stamp_ok(void)
{
	bool inv = mp_tsc_invariant();
	enum mp_tsc_source src = inv ? mp_tsc_source() : MP_TSC_SRC_OTHER;

	if (src != MP_TSC_SRC_KVM)
		return mp_tsc_stamp_decide(inv, src, 0, 0);
	return mp_tsc_stamp_decide(inv, src, mp_clock_call_ns(false), mp_clock_call_ns(true));
}

#endif /* MEMPROF_RING_CLOCK_H */
