/* SPDX-License-Identifier: MIT */
#ifndef MP_RSS_SAMPLE_H
#define MP_RSS_SAMPLE_H

#include <stdint.h>

/* One RSS reading of the target, in bytes. Fields the kernel did not report
 * are UINT64_MAX. */
struct mp_rss_sample {
	uint64_t ts_ns; /* CLOCK_MONOTONIC, when the reading was taken */
	uint64_t vm_rss;
	uint64_t rss_anon;
	uint64_t rss_file;
	uint64_t rss_shmem;
	uint64_t vm_hwm;
	uint64_t vm_swap;
	uint64_t pss; /* from smaps_rollup; UINT64_MAX when not read this time */
};

/* Members of the kernel's per-mm RSS counters (rss_stat tracepoint). */
enum mp_rss_member {
	MP_RSS_FILE = 0,
	MP_RSS_ANON = 1,
	MP_RSS_SWAPENTS = 2,
	MP_RSS_SHMEM = 3,
	MP_RSS_MEMBER_COUNT,
};

/* One exact RSS change from the rss_stat tracepoint (--rss-exact): counter
 * @member of the target's mm became @value bytes, on thread @tid (the thread
 * whose fault or unmap changed it; 0 when not the target's own thread). */
struct mp_rss_stat_event {
	uint64_t ts_ns;
	uint32_t tid;
	uint32_t member; /* enum mp_rss_member */
	int64_t value; /* new counter value, bytes */
};

#endif /* MP_RSS_SAMPLE_H */
