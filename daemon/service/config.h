/* SPDX-License-Identifier: MIT */
/*
 * The service's configuration file (/etc/memprofd/memprofd.conf): one
 * "key = value" per line, '#' starts a comment line. Keys (docs/SERVICE.md):
 *   collector = URL        stream every target to URL (repeatable)
 *   owner = GLOB=NAME      owner rule (repeatable)
 *   rss_hz = N             RSS samples per second (0 = off)
 *   pss_every = N          read smaps_rollup every Nth sample
 *   max_targets = N        attached processes at most
 *   max_connections = N    control connections at most (one kept for root)
 *   max_connections_per_uid = N  of them per non-root user
 *   stream_interval = S    seconds between chunks (decimal)
 *   buffer_size = N[K|M|G] per-collector buffer
 *   bpf_ring_size = N[K|M] BPF ring buffer per target (power of two;
 *                          default by mode: rss 1M, sampled/precise 8M)
 *   memory_budget = N[K|M|G]  refuse attaches beyond it (0: 7/8 of the
 *                          service cgroup's memory.max, if any)
 *   stream_collectors_per_uid = N  distinct --stream collectors of a uid
 *   stream_total_size = N[K|M|G]   all collectors' buffers together
 *   stacks = yes|no        call stacks of allocations (--stacks)
 *   tracer = auto|inprocess|bpf  allocation path (--tracer; auto: in-process
 *                          when the target's malloc is libmemprof's)
 *   stack_depth = N        frames per stack at most (1-256, default 64)
 */
#ifndef MP_CONFIG_H
#define MP_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MP_CONFIG_DEFAULT_PATH "/etc/memprofd/memprofd.conf"
#define MP_CONFIG_MAX_COLLECTORS 16
#define MP_CONFIG_MAX_OWNERS 64
#define MP_CONFIG_DEFAULT_MAX_CONNS 64
#define MP_CONFIG_DEFAULT_MAX_CONNS_PER_UID 8

struct mp_config {
	char *collectors[MP_CONFIG_MAX_COLLECTORS];
	size_t n_collectors;
	char *owners[MP_CONFIG_MAX_OWNERS];
	size_t n_owners;
	unsigned rss_hz;
	unsigned pss_every;
	unsigned max_targets;
	unsigned max_conns;
	unsigned max_conns_per_uid;
	uint64_t stream_interval_ns;
	uint64_t buffer_bytes;
	uint32_t bpf_ring_bytes; /* 0: the tracer's default for the mode */
	uint64_t memory_budget; /* 0: from the cgroup */
	uint32_t mode; /* enum mp_trace_mode of targets attached without --mode */
	uint64_t sample_bytes; /* their sampling interval in sampled mode */
	unsigned stream_per_uid; /* 0: no limit (root is never limited) */
	uint64_t stream_total_bytes; /* 0: no limit */
	bool stacks; /* call stacks of targets attached without stacks= */
	uint32_t tracer; /* their allocation path: enum mp_tracer_path, 0 auto */
	uint32_t stack_depth; /* 0: MP_UNWIND_DEFAULT_DEPTH */
};

/* Defaults only. */
int mp_config_new(struct mp_config **ret);
void mp_config_free(struct mp_config *c);

/* Reads @path (at most 1 MiB). On a syntax error returns -EINVAL with
 * "LINE: what" in @err. */
int mp_config_load(const char *path, struct mp_config **ret, char *err, size_t errlen);

#endif /* MP_CONFIG_H */
