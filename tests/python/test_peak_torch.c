// SPDX-License-Identifier: MIT
/* Who held the peak (docs/PYTHON.md "Who held the peak") on Debian's
 * PyTorch: torchvision's resnet18 rewritten for XNNPACK by
 * torch.utils.mobile_optimizer, under `memprof run --torch`. Its default
 * owner groups name the delegate; at the inference peak libXNNPACK holds
 * its scratch and packed weights, and the parts of every peak add up to
 * it. */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "profile.h"
#include "profile_pb.h"
#include "../common/helpers.h"

#ifndef PY_SRC_DIR
#error "PY_SRC_DIR must name tests/python in the source tree"
#endif

#define PYTHON "/usr/bin/python3" /* Debian's, which python3-torch is for */

static char out[1 << 20];

/* The bytes of owner or tag @name at the peak of phase @ph (0: none). */
static uint64_t part_of(const struct mp_profile *p, const struct mp_phase *ph, bool tags,
			const char *name)
{
	const struct mp_peak_part *v = tags ? ph->peak_tags : ph->peak_owners;
	const struct mp_pool *pools = tags ? p->tags : p->owners;
	uint32_t n = tags ? ph->n_peak_tags : ph->n_peak_owners;

	for (uint32_t i = 0; i < n; i++)
		if (!strcmp(pools[v[i].id].name, name))
			return v[i].bytes;
	return 0;
}

static uint64_t parts_sum(const struct mp_peak_part *v, uint32_t n)
{
	uint64_t s = 0;

	for (uint32_t i = 0; i < n; i++)
		s += v[i].bytes;
	return s;
}

/* Every peak's parts, by owner and by tag, sum to it. */
static void assert_parts_add_up(const struct mp_profile *p)
{
	uint64_t so = 0, st = 0;

	for (uint32_t i = 0; i < p->n_owners; i++)
		so += p->owners[i].peak_share;
	for (uint32_t i = 0; i < p->n_tags; i++)
		st += p->tags[i].peak_share;
	cr_assert_eq(so, p->peak_bytes, "owners at the peak: %" PRIu64 " of %" PRIu64, so,
		     p->peak_bytes);
	cr_assert_eq(st, p->peak_bytes, "tags at the peak: %" PRIu64 " of %" PRIu64, st,
		     p->peak_bytes);
	for (uint32_t i = 0; i < p->n_phases; i++) {
		const struct mp_phase *ph = &p->phases[i];

		cr_assert_eq(parts_sum(ph->peak_owners, ph->n_peak_owners), ph->peak_bytes,
			     "phase %s: owners %" PRIu64 " of %" PRIu64, ph->name,
			     parts_sum(ph->peak_owners, ph->n_peak_owners), ph->peak_bytes);
		cr_assert_eq(parts_sum(ph->peak_tags, ph->n_peak_tags), ph->peak_bytes,
			     "phase %s: tags %" PRIu64 " of %" PRIu64, ph->name,
			     parts_sum(ph->peak_tags, ph->n_peak_tags), ph->peak_bytes);
	}
}

/* `memprof run --torch [--owner RULE] -- python3 torch_xnnpack.py` into
 * @dir/t.pb; its profile. */
static struct mp_profile *run_xnnpack(const char *dir, const char *owner_rule)
{
	char pb[300];
	char *argv[16];
	struct mp_profile *p = NULL;
	const char *why = NULL;
	int n = 0, st;

	snprintf(pb, sizeof(pb), "%s/t.pb", dir);
	argv[n++] = mp_test_build_path("cli/memprof");
	argv[n++] = "run";
	argv[n++] = "--torch";
	if (owner_rule) {
		argv[n++] = "--owner";
		argv[n++] = (char *)owner_rule;
	}
	argv[n++] = "-o";
	argv[n++] = pb;
	argv[n++] = "--print";
	argv[n++] = "none";
	argv[n++] = "--";
	argv[n++] = PYTHON;
	argv[n++] = PY_SRC_DIR "/torch_xnnpack.py";
	argv[n++] = "2";
	argv[n++] = "112";
	argv[n] = NULL;
	cr_assert_eq(unsetenv("PYTHONPATH"), 0);
	st = mp_test_run_capture(argv, out, sizeof(out));
	cr_assert_eq(st, 0, "memprof run exited %d:\n%s", st, out);
	cr_assert(strstr(out, "torch_xnnpack.py: done (1, 1000)"), "%s", out);
	cr_assert_eq(mp_profile_load(pb, &p, &why), 0, "%s: %s", pb, why ? why : "?");
	return p;
}

Test(peak_torch, xnnpack_delegate_named_at_the_inference_peak, .timeout = 300)
{
	const struct mp_phase *load, *inf;
	struct mp_profile *p;
	char dir[256], pb[300], *txt;
	uint64_t xnn, fw;

	mp_test_need_root("memprof run");
	mp_test_tmpdir(dir, sizeof(dir), "peak-torch");
	p = run_xnnpack(dir, NULL);
	cr_assert(p->peak_parts, "the profile records no peak parts");
	load = mp_profile_phase(p, "load");
	inf = mp_profile_phase(p, "inference");
	cr_assert(load && inf, "phases load and inference: %s %s", load ? "yes" : "no",
		  inf ? "yes" : "no");
	assert_parts_add_up(p);
	xnn = part_of(p, inf, false, "delegate:xnnpack");
	fw = part_of(p, inf, false, "framework");
	cr_log_info("inference peak %" PRIu64 " B: delegate:xnnpack %" PRIu64
		    " B, framework %" PRIu64 " B; load peak %" PRIu64 " B",
		    inf->peak_bytes, xnn, fw, load->peak_bytes);
	/* XNNPACK's packed weights and its workspace: tens of MB */
	cr_assert_gt(xnn, 1 << 20, "delegate:xnnpack holds %" PRIu64 " B at the inference peak",
		     xnn);
	cr_assert_gt(fw, 0, "framework holds nothing at the inference peak");
	/* no library of the groups is left under its own name */
	for (uint32_t i = 0; i < p->n_owners; i++)
		cr_assert(strncmp(p->owners[i].name, "libXNNPACK", 10) &&
				  strncmp(p->owners[i].name, "libtorch", 8) &&
				  strncmp(p->owners[i].name, "libc10", 6),
			  "owner %s outside its group", p->owners[i].name);
	mp_profile_free(p);

	/* the table names it too, in the inference peak's rows */
	snprintf(pb, sizeof(pb), "%s/t.pb", dir);
	{
		char *argv[] = {
			mp_test_build_path("cli/memprof"), "report", pb, "--format", "table", NULL
		};

		cr_assert_eq(mp_test_run_capture(argv, out, sizeof(out)), 0, "%s", out);
		txt = strstr(out, "\ninference ");
		while (txt && strncmp(txt + 34, "delegate:xnnpack ", 17))
			txt = strstr(txt + 1, "\ninference ");
		cr_assert_not_null(txt, "no inference row of delegate:xnnpack in the table:\n%s",
				   out);
	}
	mp_test_rmtree(dir);
}

/* A user's --owner rule comes before the defaults and wins. */
Test(peak_torch, owner_rule_overrides_the_groups, .timeout = 300)
{
	const struct mp_phase *inf;
	struct mp_profile *p;
	char dir[256];

	mp_test_need_root("memprof run");
	mp_test_tmpdir(dir, sizeof(dir), "peak-torch-rule");
	p = run_xnnpack(dir, "libXNNPACK*=xnnpack-own");
	inf = mp_profile_phase(p, "inference");
	cr_assert_not_null(inf);
	assert_parts_add_up(p);
	cr_assert_gt(part_of(p, inf, false, "xnnpack-own"), 1 << 20);
	cr_assert_eq(part_of(p, inf, false, "delegate:xnnpack"), 0);
	cr_assert_gt(part_of(p, inf, false, "framework"), 0);
	mp_profile_free(p);
	mp_test_rmtree(dir);
}
