// SPDX-License-Identifier: MIT
/* memprof diff OLD NEW: what changed between two profiles, and a CI gate
 * (daemon/output/diff.c; docs/OUTPUT.md "memprof diff"). */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "diff.h"
#include "diff_cmd.h"
#include "log.h"
#include "profile.h"
#include "profile_pb.h"

/* More --max-increase options than anyone writes by hand. */
#define MAX_LIMITS 256

static void diff_usage(FILE *f)
{
	fputs("Usage: memprof diff OLD NEW [--max-increase LIMIT]... [--format table|json]\n"
	      "                    [--sigmas K]\n"
	      "\n"
	      "Compare two profiles (`memprof run -o`, `memprofd -o`) of the same program:\n"
	      "per kernel, phase, owner and tag, the bytes allocated, the peaks, RSS and\n"
	      "the anonymous mappings (apart from the heap), with absolute and relative\n"
	      "changes, largest first; kernels that appear or vanish are named. With\n"
	      "limits it is a gate: exit 1 when one is exceeded.\n"
	      "\n"
	      "  -m, --max-increase LIMIT  fail when a figure grows by more than LIMIT\n"
	      "                            (repeatable; every limit is checked)\n"
	      "  -f, --format FMT          table (default) or json\n"
	      "      --sigmas K            noise margin of sampled profiles in standard\n"
	      "                            errors (default 3, 0..100)\n"
	      "\n"
	      "LIMIT is [SCOPE:NAME.]METRIC=VALUE:\n"
	      "  SCOPE:NAME  kernel:NAME, phase:NAME, owner:NAME or tag:NAME; NAME is a\n"
	      "              glob (kernel:conv*, kernel:*: every kernel). Without it the\n"
	      "              limit is on the whole profile. phase_owner:PHASE/OWNER and\n"
	      "              phase_tag:PHASE/TAG: an owner's or tag's part of a phase's\n"
	      "              peak (phase_owner:inference/delegate:*). line:'FUNC FILE:LINE':\n"
	      "              the heap sites whose innermost Python frame is that line\n"
	      "              (--stacks; line:'* */model.py:*').\n"
	      "  METRIC      alloc       bytes allocated (a kernel: with nested kernels)\n"
	      "              peak        the whole profile's heap peak (peakBytes)\n"
	      "              peak_added  a kernel's highest net bytes within one call\n"
	      "              peak_live   the live heap's peak while a kernel or phase ran;\n"
	      "                          an owner's or tag's own live bytes' peak\n"
	      "              rss         profile, phase: the highest RSS sampled;\n"
	      "                          kernel: RSS deltas summed over its calls\n"
	      "              mapped      bytes of anonymous mappings made (apart from\n"
	      "                          the heap; a kernel: with nested kernels)\n"
	      "              maps_peak   the mappings' reserved bytes' peak (a kernel's,\n"
	      "                          a phase's: the process's while it ran)\n"
	      "              maps_live   the mappings' reserved bytes at the end\n"
	      "              peak_share  bytes held when the heap reached its peak: an\n"
	      "                          owner's or tag's at the whole profile's peak,\n"
	      "                          phase_owner's, phase_tag's at the phase's\n"
	      "              (profile: alloc, peak, rss, mapped, maps_peak, maps_live;\n"
	      "              kernel: alloc, peak_added, peak_live, rss, mapped,\n"
	      "              maps_peak; phase: alloc, peak_live, rss, mapped, maps_peak;\n"
	      "              owner, tag: alloc, peak_live, mapped, maps_peak, maps_live,\n"
	      "              peak_share; phase_owner, phase_tag: peak_share;\n"
	      "              line: alloc, peak_share)\n"
	      "  VALUE       N% of the OLD figure (a figure that was 0 may not grow at\n"
	      "              all), or bytes: 512, 64K, 1.5M, 2G (K, M, G: powers of 1024;\n"
	      "              KiB, MiB, GiB and a B suffix are accepted)\n"
	      "A limit fails when a figure it names grows by more than it allows; in\n"
	      "sampled profiles only by more than that plus K standard errors of the\n"
	      "difference, so a change within the noise never fails. Decreases never\n"
	      "fail. A kernel, phase, owner or tag missing from one profile counts 0\n"
	      "there. An RSS figure without samples, or a mapping figure (peak_share) of\n"
	      "a file written before mappings (peak parts) were recorded, is not checked.\n"
	      "A limit that names nothing in either profile is bad input.\n"
	      "\n"
	      "Exit status: 0 no limit exceeded, 1 a limit exceeded, 2 bad input.\n"
	      "\n"
	      "Example: memprof diff base.memprof head.memprof --max-increase peak=5% \\\n"
	      "             --max-increase 'kernel:*.peak_added=10%' "
	      "--max-increase kernel:matmul.alloc=1M\n",
	      f);
}

static const char *scope_noun(enum mp_diff_scope s)
{
	switch (s) {
	case MP_DIFF_KERNEL:
		return "kernel";
	case MP_DIFF_PHASE:
		return "phase";
	case MP_DIFF_OWNER:
		return "owner";
	case MP_DIFF_TAG:
		return "tag";
	case MP_DIFF_PHASE_OWNER:
		return "owner at a phase's peak";
	case MP_DIFF_PHASE_TAG:
		return "tag at a phase's peak";
	case MP_DIFF_LINE:
		return "Python line";
	default:
		return "figure";
	}
}

struct diff_args {
	struct mp_diff_limit limits[MAX_LIMITS];
	uint32_t n_limits;
	enum mp_diff_format format;
	double sigmas;
};

static int parse_sigmas(const char *s, double *ret)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || *end || !isfinite(v) || v < 0 || v > 100)
		return -EINVAL;
	*ret = v;
	return 0;
}

/* 0, 1 (--help printed) or 2 (usage error, logged). */
static int parse_args(int argc, char **argv, struct diff_args *a)
{
	static const struct option longopts[] = {
		{ "max-increase", required_argument, NULL, 'm' },
		{ "format", required_argument, NULL, 'f' },
		{ "sigmas", required_argument, NULL, 'S' },
		{ "help", no_argument, NULL, 'h' },
		{},
	};
	const char *why;
	int c;

	while ((c = getopt_long(argc, argv, "m:f:h", longopts, NULL)) != -1) {
		switch (c) {
		case 'm':
			if (a->n_limits == MAX_LIMITS) {
				log_error("more than %d --max-increase limits", MAX_LIMITS);
				return 2;
			}
			if (mp_diff_limit_parse(optarg, &a->limits[a->n_limits], &why) < 0) {
				log_error("--max-increase '%s': %s", optarg, why);
				return 2;
			}
			a->n_limits++;
			break;
		case 'f':
			if (mp_diff_format_parse(optarg, &a->format) < 0) {
				log_error("unknown format '%s' (table, json)", optarg);
				return 2;
			}
			break;
		case 'S':
			if (parse_sigmas(optarg, &a->sigmas) < 0) {
				log_error("--sigmas takes a number of standard errors (0..100)");
				return 2;
			}
			break;
		case 'h':
			diff_usage(stdout);
			return 1;
		default:
			return 2;
		}
	}
	if (optind + 2 != argc) {
		log_error("expected two profiles, OLD and NEW (see --help)");
		return 2;
	}
	return 0;
}

static int load(const char *path, struct mp_profile **ret)
{
	const char *why = NULL;
	int r = mp_profile_load(path, ret, &why);

	if (r < 0)
		log_error("%s: %s", path, why ? why : strerror(-r));
	return r;
}

/* A limit that names nothing is a typo or a renamed kernel: a gate on it
 * would pass forever. */
static int check_matched(const struct mp_diff *d)
{
	for (uint32_t i = 0; i < d->n_limits; i++) {
		if (d->checks[i].matched)
			continue;
		log_error("--max-increase '%s': no %s '%s' in OLD or NEW", d->limits[i].spec,
			  scope_noun(d->limits[i].scope), d->limits[i].pattern);
		return -ENOENT;
	}
	return 0;
}

static int diff_files(struct diff_args *a, const char *old_path, const char *new_path)
{
	struct mp_profile *old = NULL, *new_ = NULL;
	struct mp_diff *d = NULL;
	int r, ret = 2;

	if (load(old_path, &old) < 0 || load(new_path, &new_) < 0)
		goto out;
	r = mp_diff_new(old, new_, a->limits, a->n_limits, a->sigmas, &d);
	if (r < 0) {
		log_error_errno(r, "comparing the profiles: %m");
		goto out;
	}
	if (check_matched(d) < 0)
		goto out;
	r = mp_diff_write(d, a->format, old_path, new_path, stdout);
	if (r >= 0 && fflush(stdout) != 0)
		r = -errno;
	if (r < 0) {
		log_error_errno(r, "writing the comparison: %m");
		goto out;
	}
	ret = d->exceeded ? 1 : 0;
out:
	mp_diff_free(d);
	mp_profile_free(old);
	mp_profile_free(new_);
	return ret;
}

int memprof_cmd_diff(int argc, char **argv)
{
	struct diff_args *a = calloc(1, sizeof(*a));
	int r;

	if (!a) {
		log_error("out of memory");
		return 2;
	}
	a->format = MP_DIFF_TABLE;
	a->sigmas = 3;
	r = parse_args(argc, argv, a);
	if (r == 0)
		r = diff_files(a, argv[optind], argv[optind + 1]);
	else if (r == 1)
		r = 0;
	for (uint32_t i = 0; i < a->n_limits; i++)
		mp_diff_limit_release(&a->limits[i]);
	free(a);
	return r;
}
