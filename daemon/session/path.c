// SPDX-License-Identifier: MIT
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <string.h>

#include "injector.h"
#include "log.h"
#include "path.h"
#include "profile.h"
#include "symbols.h"

int mp_path_inprocess_available(pid_t pid, bool *ret)
{
	struct mp_symbols *syms = NULL;
	struct mp_symbol m, k;
	int r;

	r = mp_symbols_new(pid, &syms);
	if (r < 0)
		return r == -ENOENT ? -ESRCH : r;
	/* The same object: a libmemprof that is not the first malloc (an
	 * executable with its own allocator, one preloaded before it) is
	 * dormant and the uprobes must see the real one. */
	*ret = mp_symbols_lookup(syms, "malloc", NULL, &m) == 0 &&
	       mp_symbols_lookup(syms, "memprof_kernel_begin", NULL, &k) == 0 &&
	       m.object == k.object;
	mp_symbols_free(syms);
	return 0;
}

const char *mp_path_inject_lib(char *buf, size_t len)
{
	char *slash;
	ssize_t n;

	n = readlink("/proc/self/exe", buf, len - 1);
	if (n > 0) {
		buf[n] = '\0';
		slash = strrchr(buf, '/');
		if (slash &&
		    (size_t)(slash - buf) + sizeof("/../libclient/libmemprof.so.0") < len) {
			strcpy(slash, "/../libclient/libmemprof.so.0");
			if (access(buf, R_OK) == 0)
				return mp_inject_lib(buf);
		}
	}
	snprintf(buf, len, "%s", MP_LIBDIR "/libmemprof.so.0");
	return mp_inject_lib(buf);
}

/* libmemprof loaded into @pid and its allocator routed through it. */
static int inject(const struct mp_path_opts *o, struct mp_path_choice *ret)
{
	const struct mp_inject_opts io = { .pid = o->pid,
					   .lib = o->inject_lib,
					   .timeout_ns = o->inject_timeout_ns,
					   .yama_path = getenv("MEMPROFD_TEST_YAMA_SCOPE") };
	struct mp_inject_result res;
	char why[MP_INJECT_WHY_MAX];
	int r;

	r = mp_inject(&io, &res, why);
	if (r < 0) {
		snprintf(ret->reason, sizeof(ret->reason), "not injected: %s", why);
		log_info("pid %d: libmemprof not injected (%s): %s", (int)o->pid, strerror(-r),
			 why);
		return r;
	}
	ret->path = MP_PATH_INPROCESS;
	ret->injected = true;
	if (res.first)
		snprintf(ret->reason, sizeof(ret->reason),
			 "interposer, already the process's malloc");
	else
		snprintf(ret->reason, sizeof(ret->reason),
			 "injected by ptrace%s: %d GOT slots, %u threads held %.1f ms",
			 res.loaded ? "" : " (already loaded)", (int)res.slots, res.threads,
			 (double)res.stopped_ns / 1e6);
	log_debug("pid %d: libmemprof %s", (int)o->pid, ret->reason);
	return 0;
}

int mp_path_pick(const struct mp_path_opts *o, struct mp_path_choice *ret)
{
	bool avail = false;
	int r;

	*ret = (struct mp_path_choice){ .path = MP_PATH_BPF };
	if (o->requested == MP_PATH_BPF)
		return 0;
	/* rss mode traces no allocator call; the duty cycle switches uprobes */
	if (o->mode == MP_TRACE_RSS || o->duty_period_ns) {
		if (o->requested) {
			snprintf(ret->reason, sizeof(ret->reason), "%s",
				 o->mode == MP_TRACE_RSS ? "--mode rss traces no allocator call" :
							   "--duty needs the eBPF path");
			return -EOPNOTSUPP;
		}
		return 0;
	}
	r = mp_path_inprocess_available(o->pid, &avail);
	if (r < 0)
		return r;
	if (avail) {
		ret->path = MP_PATH_INPROCESS;
		return 0;
	}
	if (o->no_inject) {
		snprintf(ret->reason, sizeof(ret->reason), "not injected: %s", o->no_inject);
		return o->requested ? -EOPNOTSUPP : 0;
	}
	r = inject(o, ret);
	if (r == -ESRCH)
		return r;
	if (r < 0 && o->requested)
		return -EOPNOTSUPP;
	return 0;
}
