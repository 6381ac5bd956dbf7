/* SPDX-License-Identifier: MIT */
/*
 * Attach by pid at in-process cost: libmemprof loaded into a running
 * process with ptrace, no debugger (docs/TRACER.md "Injection"). Every
 * thread is stopped; one at a safe point (no thread inside the dynamic
 * loader or the allocator, room on its stack) calls the loader's dlopen()
 * on libmemprof and then libmemprof's memprof__inject(), which points the
 * GOT slots of the malloc family in every loaded object, and in those
 * dlopen()ed later, at its interposer; every register is put back and the
 * threads run on. libmemprof stays after the profiler leaves, dormant
 * (its cost with nobody attached), and a later attach reuses it.
 *
 * Whatever it cannot do, it refuses before it touches the target, with a
 * reason for the profile's path line: a static executable, a 32-bit or
 * foreign process, another tracer, ptrace forbidden (Yama, capabilities),
 * seccomp filters that stop the loader's system calls, no safe point, a
 * call that does not return in time.
 */
#ifndef MP_INJECTOR_H
#define MP_INJECTOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define MP_INJECT_WHY_MAX 256
#define MP_INJECT_DEFAULT_TIMEOUT_NS 2000000000ull
#define MP_INJECT_DEFAULT_SAFEPOINT_NS 1000000000ull

struct mp_inject_opts {
	pid_t pid;
	/* libmemprof as the daemon sees it; the target must see the same
	 * file at the same path */
	const char *lib;
	/* bound on each call made in the target; 0: the default */
	uint64_t timeout_ns;
	/* how long to look for a safe point; 0: the default */
	uint64_t safepoint_ns;
	/* Yama's setting (tests point it elsewhere); NULL: /proc/sys's */
	const char *yama_path;
};

struct mp_inject_result {
	int32_t slots; /* GOT slots that point at libmemprof */
	bool loaded; /* libmemprof was loaded by this call */
	bool first; /* libmemprof's malloc was already the process's: nothing patched */
	uint32_t threads; /* threads stopped */
	uint32_t tries; /* looks for a safe point */
	uint64_t stopped_ns; /* how long the threads were held */
};

/*
 * Loads libmemprof into @o->pid (or finds it there) and routes the
 * process's allocator calls through it. 0 and *@ret filled; otherwise a
 * negative errno and @why (MP_INJECT_WHY_MAX bytes) says why in words a
 * user reads: -EOPNOTSUPP (the target cannot take it), -EPERM (ptrace
 * refused), -ETIMEDOUT, -ESRCH (the process is gone), or the error of a
 * call made in the target. The target runs on unchanged on every error.
 */
int mp_inject(const struct mp_inject_opts *o, struct mp_inject_result *ret, char *why);

/* Whether the executable open at @fd can take libmemprof: 0 and
 * *@ret_dynamic (it has a program interpreter, so a loader to call), or
 * -EOPNOTSUPP and @why (not ELF, a 32-bit or foreign-arch program). */
int mp_inject_check_exe(int fd, bool *ret_dynamic, char *why);

/* libmemprof to inject: $MEMPROF_INJECT_LIB, else $MEMPROF_PRELOAD_LIB,
 * else @fallback (may be NULL). NULL when none is readable. */
const char *mp_inject_lib(const char *fallback);

#endif /* MP_INJECTOR_H */
