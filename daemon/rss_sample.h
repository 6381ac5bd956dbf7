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

#endif /* MP_RSS_SAMPLE_H */
