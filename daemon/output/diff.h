/* SPDX-License-Identifier: MIT */
/*
 * `memprof diff OLD NEW`: what changed between two profiles, per scope (the
 * whole profile, each kernel, phase, owner and tag) and metric, and the
 * limits of a CI gate (`--max-increase`). docs/OUTPUT.md "memprof diff"
 * defines every figure and the limit grammar.
 *
 * Sampled figures carry variances (docs/PROFILE.md "Sampled figures"): a
 * change is within the noise when it is no larger than @sigmas standard
 * errors of the difference, and a limit is exceeded only when the increase
 * passes what it allows by more than that.
 */
#ifndef MP_DIFF_H
#define MP_DIFF_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "profile.h"

enum mp_diff_scope {
	MP_DIFF_PROFILE = 0, /* the whole profile */
	MP_DIFF_KERNEL,
	MP_DIFF_PHASE,
	MP_DIFF_OWNER,
	MP_DIFF_TAG,
	/* An owner's or a tag's part of a phase's peak, named "PHASE/NAME"
	 * (docs/PROFILE.md "Who held the peak"). */
	MP_DIFF_PHASE_OWNER,
	MP_DIFF_PHASE_TAG,
	/* A Python line: the heap sites whose stacks' innermost Python frame
	 * is there, named "FUNCTION FILE:LINE" (docs/PROFILE.md "Python
	 * frames"). */
	MP_DIFF_LINE,
	MP_DIFF_N_SCOPES,
};

enum mp_diff_metric {
	MP_DIFF_ALLOC = 0, /* bytes allocated (a kernel: inclusive) */
	MP_DIFF_PEAK, /* the profile's heap peak (peakBytes) */
	MP_DIFF_PEAK_ADDED, /* a kernel's highest net bytes in one call */
	MP_DIFF_PEAK_LIVE, /* live bytes peak (an owner's, a tag's: its own) */
	MP_DIFF_RSS, /* profile, phase: VmRSS peak; kernel: summed RSS deltas */
	/* Anonymous mappings, apart from the heap (docs/PROFILE.md "Heap and
	 * mappings"); unknown in a file written before they were recorded. */
	MP_DIFF_MAPPED, /* bytes mapped (a kernel: inclusive) */
	MP_DIFF_MAPPED_PEAK, /* reserved peak: own (profile, owner, tag), else the process's */
	MP_DIFF_MAPPED_LIVE, /* reserved at the end: profile, owner, tag */
	/* Bytes held at a peak (docs/PROFILE.md "Who held the peak"): an
	 * owner's or tag's at the process's, a phase_owner's or phase_tag's at
	 * its phase's; unknown in a file written before they were recorded. */
	MP_DIFF_PEAK_SHARE,
	MP_DIFF_N_METRICS,
};

/* Where an entity (a kernel, phase, owner or tag) is. */
enum mp_diff_presence {
	MP_DIFF_IN_BOTH = 0,
	MP_DIFF_APPEARED, /* only in NEW */
	MP_DIFF_VANISHED, /* only in OLD */
};

enum mp_diff_status {
	MP_DIFF_UNCHANGED = 0,
	MP_DIFF_CHANGED, /* beyond the noise, no limit on it */
	MP_DIFF_UNKNOWN, /* a figure is unknown (RSS without samples) */
	MP_DIFF_NOISE, /* within the noise (sampled), or over a limit only within it */
	MP_DIFF_OK, /* a limit applies and holds */
	MP_DIFF_FAIL, /* a limit is exceeded */
};

/* One --max-increase: [SCOPE:NAME.]METRIC=VALUE. */
struct mp_diff_limit {
	char *spec; /* as given */
	enum mp_diff_scope scope;
	char *pattern; /* fnmatch(3) glob of names; NULL for the profile */
	enum mp_diff_metric metric;
	bool percent; /* @value is a percentage of OLD, else bytes */
	double value;
};

/* Whether @m is a figure of the anonymous mappings. */
bool mp_diff_metric_is_maps(enum mp_diff_metric m);

/* One figure of one entity in both profiles. */
struct mp_diff_row {
	enum mp_diff_scope scope;
	const char *name; /* in OLD's or NEW's model; NULL for the profile */
	enum mp_diff_metric metric;
	enum mp_diff_presence presence;
	enum mp_diff_status status;
	bool known; /* both figures known; else old/new/delta are 0 */
	bool limited; /* some limit names it */
	int64_t old_v, new_v, delta;
	double stderr_; /* standard error of delta, 0 when both are exact */
	/* The tightest limit checked on it: bytes it allows (-1: none). */
	double allowed;
};

/* A limit's outcome. */
struct mp_diff_check {
	uint32_t matched; /* rows it applies to */
	uint32_t unknown; /* of those, rows with an unknown figure */
	uint32_t failed; /* rows over it beyond the noise */
	uint32_t first_failed; /* index into rows of the largest, if failed */
};

/* A Python line's figures in one profile: its sites' allocated bytes and
 * the bytes they held at the process's heap peak. */
struct mp_diff_line {
	uint64_t alloc, peak;
	bool peak_known;
};

struct mp_diff {
	const struct mp_profile *old, *new_;
	double sigmas;
	/* Mapping figures are compared: at least one profile recorded them
	 * (else no mapping rows). */
	bool maps;
	/* The same for who held the peaks (peak_share rows). */
	bool parts;
	/* The names of the phase_owner, phase_tag and line rows. */
	uint32_t n_names;
	char **names;
	/* The line rows' figures, per profile (OLD, NEW). */
	struct mp_diff_line *lines[2];
	uint32_t n_rows;
	struct mp_diff_row *rows; /* by decreasing |delta|, unknown ones last */
	uint32_t n_limits;
	const struct mp_diff_limit *limits;
	struct mp_diff_check *checks; /* one per limit */
	uint32_t exceeded; /* limits with failed rows */
};

/* Parses one limit; on error -EINVAL and *@ret_why (static text) says what
 * is wrong. mp_diff_limit_release() frees what it holds. */
int mp_diff_limit_parse(const char *spec, struct mp_diff_limit *ret, const char **ret_why);
void mp_diff_limit_release(struct mp_diff_limit *l);

/* "alloc", "peak", ... and "kernel", "phase", ...; "profile" for
 * MP_DIFF_PROFILE. */
const char *mp_diff_metric_name(enum mp_diff_metric m);
const char *mp_diff_scope_name(enum mp_diff_scope s);

/* Compares @old and @new_ (which must outlive the result) and checks the
 * @n_limits @limits (kept by pointer). @sigmas: the noise margin in
 * standard errors (>= 0). 0 or -ENOMEM. */
int mp_diff_new(const struct mp_profile *old, const struct mp_profile *new_,
		const struct mp_diff_limit *limits, uint32_t n_limits, double sigmas,
		struct mp_diff **ret);
void mp_diff_free(struct mp_diff *d);

enum mp_diff_format {
	MP_DIFF_TABLE = 1,
	MP_DIFF_JSON,
};

/* "table", "json"; -EINVAL otherwise. */
int mp_diff_format_parse(const char *s, enum mp_diff_format *ret);

/* Writes @d to @f; @old_label and @new_label name the two profiles (their
 * files). 0 or -EIO. */
int mp_diff_write(const struct mp_diff *d, enum mp_diff_format format, const char *old_label,
		  const char *new_label, FILE *f);

#endif /* MP_DIFF_H */
