/* SPDX-License-Identifier: MIT */
/*
 * RSS of a target process, sampled from /proc.
 *
 * The parsers are pure functions over untrusted text: the target controls
 * its own name, which appears in /proc/PID/status, and the fuzz target feeds
 * them arbitrary bytes. The sampler reads pre-opened /proc files on a timerfd
 * so the daemon's event loop can poll it next to the ring and the BPF ringbuf.
 */
#ifndef MP_RSS_H
#define MP_RSS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "rss_sample.h"

#define MP_RSS_DEFAULT_HZ 100
#define MP_RSS_MAX_HZ 10000
/* smaps_rollup walks every page table of the target; read it less often. */
#define MP_RSS_DEFAULT_PSS_EVERY 10
/* and, on a big target, no more than 1/(1 + this) of the time: a Pss
 * read that took d defers the next timed one by this many d (a 5 ms walk
 * of a 350 MB PyTorch process, every 250 ms at most). */
#define MP_RSS_PSS_COST_RATIO 50

/*
 * Parse the text of /proc/PID/status. Sets every field of @ret: the six
 * counters (kB converted to bytes; UINT64_MAX when the line is absent, as for
 * a zombie or a kernel thread), ts_ns = 0 and pss = UINT64_MAX.
 * Returns 0, or -EBADMSG when a line we read is malformed or repeated, or
 * -ERANGE when a value overflows 64 bits in bytes; @ret is then untouched.
 */
int mp_rss_parse_status(const char *buf, size_t len, struct mp_rss_sample *ret);

/*
 * Parse the text of /proc/PID/smaps_rollup and return its "Pss:" line in bytes.
 * Returns 0, -ENODATA when there is no Pss line (the target has no mm any
 * more), -EBADMSG / -ERANGE as above; @ret_pss is untouched on error.
 */
int mp_rss_parse_smaps_rollup(const char *buf, size_t len, uint64_t *ret_pss);

struct mp_rss_sampler;

/*
 * Open /proc/@pid/status (and smaps_rollup unless @pss_every_n is 0) and arm
 * a CLOCK_MONOTONIC timerfd at @hz (1..MP_RSS_MAX_HZ). Every @pss_every_n-th
 * timer sample, starting with the first, also asks for Pss, unless the last
 * timed Pss read ended less than MP_RSS_PSS_COST_RATIO times its own cost
 * ago or is still running (counted: mp_rss_sampler_pss_deferred()). The
 * read runs on a thread made for it (none lives between reads), and its
 * Pss goes out with the first timed sample after it ended: the caller's
 * thread never walks the target's page tables (see
 * mp_rss_sampler_set_async_pss()).
 * Returns 0, -EINVAL, -ESRCH (no such process), -EACCES (smaps_rollup needs
 * ptrace read access), -ENOMEM, or the errno of open/timerfd_create.
 */
int mp_rss_sampler_new(pid_t pid, unsigned hz, unsigned pss_every_n, struct mp_rss_sampler **ret);
void mp_rss_sampler_free(struct mp_rss_sampler *s);

/* The timerfd (non-blocking, CLOEXEC) to poll for EPOLLIN. Owned by @s. */
int mp_rss_sampler_fd(const struct mp_rss_sampler *s);
/* Samples every @period_ns from now on (0: none until set again). */
int mp_rss_sampler_set_period(struct mp_rss_sampler *s, uint64_t period_ns);

/*
 * Call when the timerfd is readable: consumes the expirations and takes one
 * sample (with Pss on every n-th call). Calling it when the timer has not
 * fired is harmless and still samples. Returns 0, -ESRCH when the target has
 * exited (zombie or reaped), -EBADMSG/-ERANGE on unparsable /proc text, or
 * the errno of the read.
 */
int mp_rss_sampler_sample(struct mp_rss_sampler *s, struct mp_rss_sample *ret);

/* An immediate sample outside the timer cadence (at kernel begin/end, say);
 * does not touch the timer or the Pss cadence. Same returns as above. */
int mp_rss_sampler_read(struct mp_rss_sampler *s, bool with_pss, struct mp_rss_sample *ret);

/* Timer expirations that were not turned into samples because the caller
 * was late (the timerfd coalesces them). */
uint64_t mp_rss_sampler_missed(const struct mp_rss_sampler *s);

/* The bound on timed Pss reads' share of the time, as a ratio (default
 * MP_RSS_PSS_COST_RATIO; 0: none, every @pss_every_n-th sample), and the
 * timed samples that went without Pss because of it. */
void mp_rss_sampler_set_pss_cost_ratio(struct mp_rss_sampler *s, unsigned ratio);
/* false: timed Pss reads in mp_rss_sampler_sample() itself, reported with
 * the sample that asked for them (a read in flight is waited for and its
 * result dropped). */
void mp_rss_sampler_set_async_pss(struct mp_rss_sampler *s, bool async);

/* Tests only: called on the Pss thread before each of its reads (NULL:
 * nothing), so that a test can hold a read in flight. */
extern void (*mp_rss_pss_read_hook)(void);
uint64_t mp_rss_sampler_pss_deferred(const struct mp_rss_sampler *s);

#endif /* MP_RSS_H */
