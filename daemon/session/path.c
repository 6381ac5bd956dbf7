// SPDX-License-Identifier: MIT
#include <errno.h>
#include <string.h>

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

int mp_path_pick(pid_t pid, uint32_t requested, uint32_t mode, uint64_t duty_period_ns,
		 uint32_t *ret_path, const char **ret_why)
{
	bool avail = false;
	int r;

	if (requested == MP_PATH_BPF) {
		*ret_path = MP_PATH_BPF;
		return 0;
	}
	/* rss mode traces no allocator call; the duty cycle switches uprobes */
	if (mode == MP_TRACE_RSS || duty_period_ns) {
		if (requested == MP_PATH_INPROCESS) {
			*ret_why = mode == MP_TRACE_RSS ? "--mode rss traces no allocator call" :
							  "--duty needs the eBPF path";
			return -EOPNOTSUPP;
		}
		*ret_path = MP_PATH_BPF;
		return 0;
	}
	r = mp_path_inprocess_available(pid, &avail);
	if (r < 0)
		return r;
	if (!avail && requested == MP_PATH_INPROCESS) {
		*ret_why = "the target's malloc is not libmemprof's (not linked or preloaded, or "
			   "another allocator comes first)";
		return -EOPNOTSUPP;
	}
	*ret_path = avail ? MP_PATH_INPROCESS : MP_PATH_BPF;
	return 0;
}
