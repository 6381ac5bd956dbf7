/* SPDX-License-Identifier: MIT */
/*
 * `memprof diff` on profiles built in memory: the whole table and JSON of
 * a small case, kernels that appear and vanish, the limit grammar, globs,
 * noise of sampled figures, unknown RSS, and hostile values.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <json-c/json.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "diff.h"
#include "profile.h"

/* ---- building profiles ---- */

static struct mp_profile *prof(uint64_t alloc, uint64_t peak, uint64_t rss_peak)
{
	struct mp_profile *p = mp_profile_new();

	cr_assert_not_null(p);
	cr_assert_eq(mp_profile_set_process(p, 7, "/bin/model", NULL, NULL), 0);
	p->mem.alloc_bytes = alloc;
	p->mem.alloc_count = alloc ? 1 : 0;
	p->peak_bytes = peak;
	p->rss_peak = rss_peak;
	p->rss_samples = rss_peak ? 10 : 0;
	return p;
}

static uint32_t add_name(struct mp_profile *p, const char *name)
{
	p->names = reallocarray(p->names, p->n_names + 1, sizeof(*p->names));
	cr_assert_not_null(p->names);
	p->names[p->n_names] = strdup(name);
	return p->n_names++;
}

static struct mp_kernel *kernel(struct mp_profile *p, const char *name, uint64_t alloc,
				uint64_t peak_added, uint64_t peak_live)
{
	struct mp_kernel *k;

	p->kernels = reallocarray(p->kernels, p->n_kernels + 1, sizeof(*p->kernels));
	cr_assert_not_null(p->kernels);
	k = &p->kernels[p->n_kernels++];
	*k = (struct mp_kernel){ .name = add_name(p, name),
				 .calls = 1,
				 .incl = { .alloc_bytes = alloc, .alloc_count = 1 },
				 .peak_added = peak_added,
				 .peak_bytes = peak_live };
	return k;
}

static struct mp_pool *pool(struct mp_pool **v, uint32_t *n, const char *name, uint64_t alloc,
			    uint64_t peak)
{
	struct mp_pool *o;

	*v = reallocarray(*v, *n + 1, sizeof(**v));
	cr_assert_not_null(*v);
	o = &(*v)[(*n)++];
	*o = (struct mp_pool){ .name = strdup(name), .peak_bytes = peak };
	o->mem.alloc_bytes = alloc;
	o->mem.alloc_count = alloc ? 1 : 0;
	return o;
}

static struct mp_phase *phase(struct mp_profile *p, const char *name, uint64_t alloc, uint64_t peak,
			      uint64_t rss_peak)
{
	struct mp_phase *ph;

	p->phases = reallocarray(p->phases, p->n_phases + 1, sizeof(*p->phases));
	cr_assert_not_null(p->phases);
	ph = &p->phases[p->n_phases++];
	*ph = (struct mp_phase){ .name = strdup(name), .peak_bytes = peak, .rss_peak = rss_peak };
	ph->mem.alloc_bytes = alloc;
	return ph;
}

static struct mp_diff_limit *limits(const char *const *specs, uint32_t n)
{
	struct mp_diff_limit *l = calloc(n ? n : 1, sizeof(*l));
	const char *why = NULL;

	cr_assert_not_null(l);
	for (uint32_t i = 0; i < n; i++)
		cr_assert_eq(mp_diff_limit_parse(specs[i], &l[i], &why), 0, "%s: %s", specs[i],
			     why);
	return l;
}

static void limits_free(struct mp_diff_limit *l, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		mp_diff_limit_release(&l[i]);
	free(l);
}

static char *render(const struct mp_diff *d, enum mp_diff_format fmt)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	cr_assert_not_null(f);
	cr_assert_eq(mp_diff_write(d, fmt, "old.memprof", "new.memprof", f), 0);
	cr_assert_eq(fclose(f), 0);
	return buf;
}

static const struct mp_diff_row *row(const struct mp_diff *d, enum mp_diff_scope s,
				     const char *name, enum mp_diff_metric m)
{
	for (uint32_t i = 0; i < d->n_rows; i++) {
		const struct mp_diff_row *r = &d->rows[i];

		if (r->scope == s && r->metric == m &&
		    (s == MP_DIFF_PROFILE || !strcmp(r->name, name)))
			return r;
	}
	cr_assert_fail("no row %s %s %s", mp_diff_scope_name(s), name ? name : "",
		       mp_diff_metric_name(m));
	return NULL;
}

/* OLD: load 1000 B, matmul 4096 B, relu 512 B; NEW: matmul grown to
 * 1 MiB + 4096 B (its peaks with it), relu unchanged. */
static void model(struct mp_profile **ret_old, struct mp_profile **ret_new, bool grown)
{
	uint64_t extra = grown ? 1048576 : 0;
	struct mp_profile *p[2];

	for (int i = 0; i < 2; i++) {
		uint64_t e = i ? extra : 0;

		p[i] = prof(5608 + e, 5096 + e, 0);
		kernel(p[i], "load", 1000, 1000, 1000);
		kernel(p[i], "matmul", 4096 + e, 4096 + e, 5096 + e);
		kernel(p[i], "relu", 512, 0, 1512);
	}
	*ret_old = p[0];
	*ret_new = p[1];
}

/* ---- whole results ---- */

Test(diff, same_model_passes_whole_table)
{
	static const char *const specs[] = { "peak=0", "kernel:*.alloc=0%" };
	struct mp_profile *a, *b;
	struct mp_diff_limit *l = limits(specs, 2);
	struct mp_diff *d;
	char *text;

	model(&a, &b, false);
	cr_assert_eq(mp_diff_new(a, b, l, 2, 3, &d), 0);
	cr_expect_eq(d->exceeded, 0);
	cr_expect_eq(d->n_rows, 3 + 3 * 4);
	cr_expect_eq(d->checks[0].matched, 1);
	cr_expect_eq(d->checks[1].matched, 3);
	text = render(d, MP_DIFF_TABLE);
	cr_expect_str_eq(text, "old: old.memprof: pid 7 /bin/model, precise\n"
			       "new: new.memprof: pid 7 /bin/model, precise\n"
			       "\n"
			       "0 figures changed, 11 unchanged, 4 unknown (RSS without samples)\n"
			       "\n"
			       "limits:\n"
			       "  ok    peak=0: held over 1 figure\n"
			       "  ok    kernel:*.alloc=0%: held over 3 figures\n"
			       "result: pass, 0 of 2 limits exceeded\n");
	free(text);
	mp_diff_free(d);
	limits_free(l, 2);
	mp_profile_free(a);
	mp_profile_free(b);
}

Test(diff, grown_kernel_fails_whole_table)
{
	static const char *const specs[] = { "peak=5%", "kernel:matmul.alloc=10%",
					     "kernel:relu.peak_live=1M" };
	struct mp_profile *a, *b;
	struct mp_diff_limit *l = limits(specs, 3);
	struct mp_diff *d;
	char *text;

	model(&a, &b, true);
	cr_assert_eq(mp_diff_new(a, b, l, 3, 3, &d), 0);
	cr_expect_eq(d->exceeded, 2);
	text = render(d, MP_DIFF_TABLE);
	cr_expect_str_eq(
		text,
		"old: old.memprof: pid 7 /bin/model, precise\n"
		"new: new.memprof: pid 7 /bin/model, precise\n"
		"\n"
		"STATUS           DELTA  RELATIVE             OLD             NEW  METRIC     WHERE\n"
		"              +1048576 +18697.9%            5608         1054184  alloc      profile\n"
		"FAIL          +1048576 +20576.5%            5096         1053672  peak       profile\n"
		"FAIL          +1048576 +25600.0%            4096         1052672  alloc      "
		"kernel:matmul\n"
		"              +1048576 +25600.0%            4096         1052672  peak_added "
		"kernel:matmul\n"
		"              +1048576 +20576.5%            5096         1053672  peak_live  "
		"kernel:matmul\n"
		"\n"
		"5 figures changed, 6 unchanged, 4 unknown (RSS without samples)\n"
		"\n"
		"limits:\n"
		"  FAIL  peak=5%: profile +1048576 B (+20576.5%), allows +254 B\n"
		"  FAIL  kernel:matmul.alloc=10%: kernel:matmul +1048576 B (+25600.0%), allows +409 B\n"
		"  ok    kernel:relu.peak_live=1M: held over 1 figure\n"
		"result: FAIL, 2 of 3 limits exceeded\n");
	free(text);
	mp_diff_free(d);
	limits_free(l, 3);
	mp_profile_free(a);
	mp_profile_free(b);
}

Test(diff, grown_kernel_whole_json)
{
	static const char *const specs[] = { "kernel:matmul.alloc=10%" };
	struct mp_profile *a = prof(4096, 4096, 0), *b = prof(8192, 8192, 0);
	struct mp_diff_limit *l = limits(specs, 1);
	struct mp_diff *d;
	json_object *root;
	char *text;

	kernel(a, "matmul", 4096, 4096, 4096);
	kernel(b, "matmul", 8192, 4096, 8192);
	cr_assert_eq(mp_diff_new(a, b, l, 1, 3, &d), 0);
	text = render(d, MP_DIFF_JSON);
	cr_expect_str_eq(text, "{\n"
			       "  \"format\": \"memprof-diff\",\n"
			       "  \"version\": 1,\n"
			       "  \"old\": {\n"
			       "    \"file\": \"old.memprof\",\n"
			       "    \"pid\": 7,\n"
			       "    \"exe\": \"/bin/model\",\n"
			       "    \"traceMode\": \"precise\",\n"
			       "    \"sampleBytes\": 0,\n"
			       "    \"stderr\": false\n"
			       "  },\n"
			       "  \"new\": {\n"
			       "    \"file\": \"new.memprof\",\n"
			       "    \"pid\": 7,\n"
			       "    \"exe\": \"/bin/model\",\n"
			       "    \"traceMode\": \"precise\",\n"
			       "    \"sampleBytes\": 0,\n"
			       "    \"stderr\": false\n"
			       "  },\n"
			       "  \"sigmas\": 3,\n"
			       "  \"warnings\": [],\n"
			       "  \"appeared\": [],\n"
			       "  \"vanished\": [],\n"
			       "  \"changes\": [\n"
			       "    {\n"
			       "      \"scope\": \"profile\",\n"
			       "      \"name\": null,\n"
			       "      \"metric\": \"alloc\",\n"
			       "      \"presence\": \"both\",\n"
			       "      \"status\": \"changed\",\n"
			       "      \"old\": 4096,\n"
			       "      \"new\": 8192,\n"
			       "      \"delta\": 4096,\n"
			       "      \"relativePercent\": 100,\n"
			       "      \"stderr\": 0,\n"
			       "      \"allowed\": null\n"
			       "    },\n"
			       "    {\n"
			       "      \"scope\": \"profile\",\n"
			       "      \"name\": null,\n"
			       "      \"metric\": \"peak\",\n"
			       "      \"presence\": \"both\",\n"
			       "      \"status\": \"changed\",\n"
			       "      \"old\": 4096,\n"
			       "      \"new\": 8192,\n"
			       "      \"delta\": 4096,\n"
			       "      \"relativePercent\": 100,\n"
			       "      \"stderr\": 0,\n"
			       "      \"allowed\": null\n"
			       "    },\n"
			       "    {\n"
			       "      \"scope\": \"kernel\",\n"
			       "      \"name\": \"matmul\",\n"
			       "      \"metric\": \"alloc\",\n"
			       "      \"presence\": \"both\",\n"
			       "      \"status\": \"fail\",\n"
			       "      \"old\": 4096,\n"
			       "      \"new\": 8192,\n"
			       "      \"delta\": 4096,\n"
			       "      \"relativePercent\": 100,\n"
			       "      \"stderr\": 0,\n"
			       "      \"allowed\": 409\n"
			       "    },\n"
			       "    {\n"
			       "      \"scope\": \"kernel\",\n"
			       "      \"name\": \"matmul\",\n"
			       "      \"metric\": \"peak_live\",\n"
			       "      \"presence\": \"both\",\n"
			       "      \"status\": \"changed\",\n"
			       "      \"old\": 4096,\n"
			       "      \"new\": 8192,\n"
			       "      \"delta\": 4096,\n"
			       "      \"relativePercent\": 100,\n"
			       "      \"stderr\": 0,\n"
			       "      \"allowed\": null\n"
			       "    },\n"
			       "    {\n"
			       "      \"scope\": \"kernel\",\n"
			       "      \"name\": \"matmul\",\n"
			       "      \"metric\": \"peak_added\",\n"
			       "      \"presence\": \"both\",\n"
			       "      \"status\": \"unchanged\",\n"
			       "      \"old\": 4096,\n"
			       "      \"new\": 4096,\n"
			       "      \"delta\": 0,\n"
			       "      \"relativePercent\": 0,\n"
			       "      \"stderr\": 0,\n"
			       "      \"allowed\": null\n"
			       "    },\n"
			       "    {\n"
			       "      \"scope\": \"profile\",\n"
			       "      \"name\": null,\n"
			       "      \"metric\": \"rss\",\n"
			       "      \"presence\": \"both\",\n"
			       "      \"status\": \"unknown\",\n"
			       "      \"old\": null,\n"
			       "      \"new\": null,\n"
			       "      \"delta\": null,\n"
			       "      \"relativePercent\": null,\n"
			       "      \"stderr\": 0,\n"
			       "      \"allowed\": null\n"
			       "    },\n"
			       "    {\n"
			       "      \"scope\": \"kernel\",\n"
			       "      \"name\": \"matmul\",\n"
			       "      \"metric\": \"rss\",\n"
			       "      \"presence\": \"both\",\n"
			       "      \"status\": \"unknown\",\n"
			       "      \"old\": null,\n"
			       "      \"new\": null,\n"
			       "      \"delta\": null,\n"
			       "      \"relativePercent\": null,\n"
			       "      \"stderr\": 0,\n"
			       "      \"allowed\": null\n"
			       "    }\n"
			       "  ],\n"
			       "  \"limits\": [\n"
			       "    {\n"
			       "      \"limit\": \"kernel:matmul.alloc=10%\",\n"
			       "      \"scope\": \"kernel\",\n"
			       "      \"name\": \"matmul\",\n"
			       "      \"metric\": \"alloc\",\n"
			       "      \"percent\": 10,\n"
			       "      \"matched\": 1,\n"
			       "      \"unknown\": 0,\n"
			       "      \"failed\": 1,\n"
			       "      \"exceeded\": true,\n"
			       "      \"worst\": {\n"
			       "        \"scope\": \"kernel\",\n"
			       "        \"name\": \"matmul\",\n"
			       "        \"delta\": 4096,\n"
			       "        \"relativePercent\": 100,\n"
			       "        \"stderr\": 0,\n"
			       "        \"allowed\": 409\n"
			       "      }\n"
			       "    }\n"
			       "  ],\n"
			       "  \"exceeded\": 1,\n"
			       "  \"result\": \"fail\"\n"
			       "}\n");
	root = json_tokener_parse(text);
	cr_expect_not_null(root, "not JSON");
	json_object_put(root);
	free(text);
	mp_diff_free(d);
	limits_free(l, 1);
	mp_profile_free(a);
	mp_profile_free(b);
}

/* ---- appeared and vanished ---- */

Test(diff, appeared_and_vanished_named)
{
	static const char *const specs[] = { "kernel:attention.peak_added=1%",
					     "kernel:legacy.alloc=0" };
	struct mp_profile *a = prof(3000, 3000, 0), *b = prof(3000, 3000, 0);
	struct mp_diff_limit *l = limits(specs, 2);
	const struct mp_diff_row *r;
	struct mp_diff *d;
	char *text;

	kernel(a, "legacy", 2000, 2000, 2000);
	kernel(a, "relu", 1000, 0, 1000);
	kernel(b, "relu", 1000, 0, 1000);
	kernel(b, "attention", 2000, 2000, 2000);
	cr_assert_eq(mp_diff_new(a, b, l, 2, 3, &d), 0);
	r = row(d, MP_DIFF_KERNEL, "attention", MP_DIFF_PEAK_ADDED);
	cr_expect_eq(r->presence, MP_DIFF_APPEARED);
	cr_expect_eq(r->old_v, 0);
	cr_expect_eq(r->new_v, 2000);
	cr_expect_eq(r->status, MP_DIFF_FAIL, "a figure that was 0 may not grow under a %% limit");
	r = row(d, MP_DIFF_KERNEL, "legacy", MP_DIFF_ALLOC);
	cr_expect_eq(r->presence, MP_DIFF_VANISHED);
	cr_expect_eq(r->delta, -2000);
	cr_expect_eq(r->status, MP_DIFF_OK, "a decrease never fails");
	cr_expect_eq(d->exceeded, 1);
	text = render(d, MP_DIFF_TABLE);
	cr_expect(strstr(text, "\nappeared in NEW: kernel:attention\n"
			       "vanished from NEW: kernel:legacy\n"),
		  "%s", text);
	cr_expect(strstr(text, "FAIL             +2000       new               -            2000  "
			       "peak_added kernel:attention\n"),
		  "%s", text);
	cr_expect(strstr(text, "ok               -2000   -100.0%            2000               -  "
			       "alloc      kernel:legacy\n"),
		  "%s", text);
	free(text);
	text = render(d, MP_DIFF_JSON);
	cr_expect(strstr(text, "\"appeared\": [\n    {\n      \"scope\": \"kernel\",\n"
			       "      \"name\": \"attention\"\n    }\n  ],\n"
			       "  \"vanished\": [\n    {\n      \"scope\": \"kernel\",\n"
			       "      \"name\": \"legacy\"\n    }\n  ],\n"),
		  "%s", text);
	free(text);
	mp_diff_free(d);
	limits_free(l, 2);
	mp_profile_free(a);
	mp_profile_free(b);
}

/* ---- the limit grammar ---- */

Test(diff, limit_grammar_accepts)
{
	static const struct {
		const char *spec;
		enum mp_diff_scope scope;
		const char *pattern;
		enum mp_diff_metric metric;
		bool percent;
		double value;
	} ok[] = {
		{ "peak=5%", MP_DIFF_PROFILE, NULL, MP_DIFF_PEAK, true, 5 },
		{ "alloc=2.5%", MP_DIFF_PROFILE, NULL, MP_DIFF_ALLOC, true, 2.5 },
		{ "rss=64M", MP_DIFF_PROFILE, NULL, MP_DIFF_RSS, false, 64 << 20 },
		{ "peak=0", MP_DIFF_PROFILE, NULL, MP_DIFF_PEAK, false, 0 },
		{ "peak=512", MP_DIFF_PROFILE, NULL, MP_DIFF_PEAK, false, 512 },
		{ "peak=512B", MP_DIFF_PROFILE, NULL, MP_DIFF_PEAK, false, 512 },
		{ "peak=1.5K", MP_DIFF_PROFILE, NULL, MP_DIFF_PEAK, false, 1536 },
		{ "peak=2KiB", MP_DIFF_PROFILE, NULL, MP_DIFF_PEAK, false, 2048 },
		{ "peak=1GiB", MP_DIFF_PROFILE, NULL, MP_DIFF_PEAK, false, 1 << 30 },
		{ "peak=3G", MP_DIFF_PROFILE, NULL, MP_DIFF_PEAK, false, 3.0 * (1 << 30) },
		{ "kernel:matmul.alloc=10%", MP_DIFF_KERNEL, "matmul", MP_DIFF_ALLOC, true, 10 },
		{ "kernel:*.peak_added=1M", MP_DIFF_KERNEL, "*", MP_DIFF_PEAK_ADDED, false,
		  1 << 20 },
		{ "kernel:aten::mm.out.peak_live=0%", MP_DIFF_KERNEL, "aten::mm.out",
		  MP_DIFF_PEAK_LIVE, true, 0 },
		{ "kernel:a=b.rss=1K", MP_DIFF_KERNEL, "a=b", MP_DIFF_RSS, false, 1024 },
		{ "phase:load.peak_live=5%", MP_DIFF_PHASE, "load", MP_DIFF_PEAK_LIVE, true, 5 },
		{ "phase:inference.rss=10%", MP_DIFF_PHASE, "inference", MP_DIFF_RSS, true, 10 },
		{ "owner:libxnnpack*.alloc=1%", MP_DIFF_OWNER, "libxnnpack*", MP_DIFF_ALLOC, true,
		  1 },
		{ "maps_peak=5%", MP_DIFF_PROFILE, NULL, MP_DIFF_MAPPED_PEAK, true, 5 },
		{ "maps_live=0", MP_DIFF_PROFILE, NULL, MP_DIFF_MAPPED_LIVE, false, 0 },
		{ "kernel:init.mapped=8M", MP_DIFF_KERNEL, "init", MP_DIFF_MAPPED, false, 8 << 20 },
		{ "phase:load.maps_peak=1%", MP_DIFF_PHASE, "load", MP_DIFF_MAPPED_PEAK, true, 1 },
		{ "owner:libv8*.maps_live=10%", MP_DIFF_OWNER, "libv8*", MP_DIFF_MAPPED_LIVE, true,
		  10 },
		{ "tag:weights.peak_live=0", MP_DIFF_TAG, "weights", MP_DIFF_PEAK_LIVE, false, 0 },
		{ "owner:libXNNPACK.so.0.peak_share=1M", MP_DIFF_OWNER, "libXNNPACK.so.0",
		  MP_DIFF_PEAK_SHARE, false, 1 << 20 },
		{ "phase_owner:inference/delegate:*.peak_share=10%", MP_DIFF_PHASE_OWNER,
		  "inference/delegate:*", MP_DIFF_PEAK_SHARE, true, 10 },
		{ "phase_tag:load/weights.peak_share=0", MP_DIFF_PHASE_TAG, "load/weights",
		  MP_DIFF_PEAK_SHARE, false, 0 },
	};

	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		struct mp_diff_limit l;
		const char *why = NULL;

		cr_assert_eq(mp_diff_limit_parse(ok[i].spec, &l, &why), 0, "%s: %s", ok[i].spec,
			     why);
		cr_expect_str_eq(l.spec, ok[i].spec);
		cr_expect_eq(l.scope, ok[i].scope, "%s", ok[i].spec);
		if (ok[i].pattern)
			cr_expect_str_eq(l.pattern, ok[i].pattern, "%s", ok[i].spec);
		else
			cr_expect_null(l.pattern, "%s", ok[i].spec);
		cr_expect_eq(l.metric, ok[i].metric, "%s", ok[i].spec);
		cr_expect_eq(l.percent, ok[i].percent, "%s", ok[i].spec);
		cr_expect_eq(l.value, ok[i].value, "%s: %g", ok[i].spec, l.value);
		mp_diff_limit_release(&l);
	}
}

Test(diff, limit_grammar_refuses_with_reason)
{
	static const struct {
		const char *spec, *why;
	} bad[] = {
		{ "peak", "expected [SCOPE:NAME.]METRIC=VALUE" },
		{ "=5%", "expected [SCOPE:NAME.]METRIC=VALUE" },
		{ "peek=5%", "unknown metric" },
		{ "peak=", "not a number" },
		{ "peak=-5%", "not a number" },
		{ "peak=five", "not a number" },
		{ "peak=5%%", "unknown unit" },
		{ "peak=5MB", "unknown unit" },
		{ "peak=5 M", "unknown unit" },
		{ "peak=0x10", "unknown unit" },
		{ "peak=1e3", "unknown unit" },
		{ "peak=2000000%", "above 1000000%" },
		{ "peak=99999999999G", "more bytes" },
		{ "peak=123456789012345678901234", "too large" },
		{ "kernel:matmul.peak=5%", "peak is the whole profile's" },
		{ "peak_added=5%", "need a scope" },
		{ "owner:libc.so.6.rss=1M", "an owner's metrics" },
		{ "tag:weights.peak_added=1M", "a tag's metrics" },
		{ "phase:load.peak_added=1M", "a phase's metrics" },
		{ "kernel:.alloc=1M", "NAME is empty" },
		{ "matmul.alloc=1M", "a scope is kernel:NAME" },
		{ "op:matmul.alloc=1M", "unknown scope" },
		{ "kernel:init.maps_live=1M",
		  "a kernel's metrics are alloc, peak_added, peak_live, "
		  "rss, mapped and maps_peak" },
		{ "phase:load.maps_live=1M", "a phase's metrics" },
		{ "phase:load.peak_share=1M", "a phase's metrics" },
		{ "phase_owner:load/framework.alloc=1M", "a phase_owner:PHASE/OWNER's metric is "
							 "peak_share" },
		{ "phase_tag:load/weights.peak_live=0", "a phase_tag:PHASE/TAG's metric" },
		{ "mapped_peak=1M", "unknown metric: alloc, peak, peak_added, peak_live, rss, "
				    "mapped, maps_peak, maps_live or peak_share" },
	};

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct mp_diff_limit l = { 0 };
		const char *why = NULL;

		cr_expect_eq(mp_diff_limit_parse(bad[i].spec, &l, &why), -EINVAL, "%s accepted",
			     bad[i].spec);
		cr_expect(why && strstr(why, bad[i].why), "%s: '%s', want '%s'", bad[i].spec,
			  why ? why : "(null)", bad[i].why);
		cr_expect_null(l.spec);
		cr_expect_null(l.pattern);
	}
}

/* ---- globs, scopes, bytes limits ---- */

Test(diff, globs_phases_owners_tags)
{
	static const char *const specs[] = {
		"kernel:conv*.alloc=100", /* conv1 +50: ok; conv2 +200: fails */
		"phase:load.peak_live=1K", "owner:libxnn*.alloc=10%",
		"tag:weights.alloc=0",	   "kernel:nomatch*.alloc=0",
	};
	struct mp_profile *a = prof(100, 100, 0), *b = prof(100, 100, 0);
	struct mp_diff_limit *l = limits(specs, 5);
	struct mp_diff *d;

	kernel(a, "conv1", 1000, 0, 0);
	kernel(a, "conv2", 1000, 0, 0);
	kernel(a, "matmul", 1000, 0, 0);
	kernel(b, "conv1", 1050, 0, 0);
	kernel(b, "conv2", 1200, 0, 0);
	kernel(b, "matmul", 9000, 0, 0);
	phase(a, "load", 0, 4096, 0);
	phase(b, "load", 0, 4096 + 1025, 0);
	pool(&a->owners, &a->n_owners, "(unknown)", 0, 0); /* inactive: no entity */
	pool(&b->owners, &b->n_owners, "(unknown)", 0, 0);
	pool(&a->owners, &a->n_owners, "libxnnpack.so", 1000, 1000);
	pool(&b->owners, &b->n_owners, "libxnnpack.so", 1100, 1000);
	pool(&a->tags, &a->n_tags, "weights", 500, 500);
	pool(&b->tags, &b->n_tags, "weights", 400, 400);
	cr_assert_eq(mp_diff_new(a, b, l, 5, 3, &d), 0);
	cr_expect_eq(d->checks[0].matched, 2);
	cr_expect_eq(d->checks[0].failed, 1);
	cr_expect_eq(d->rows[d->checks[0].first_failed].delta, 200);
	cr_expect_str_eq(d->rows[d->checks[0].first_failed].name, "conv2");
	cr_expect_eq(row(d, MP_DIFF_KERNEL, "conv1", MP_DIFF_ALLOC)->status, MP_DIFF_OK);
	cr_expect_eq(row(d, MP_DIFF_KERNEL, "matmul", MP_DIFF_ALLOC)->status, MP_DIFF_CHANGED);
	cr_expect_eq(d->checks[1].failed, 1, "1025 > 1024");
	cr_expect_eq(d->checks[2].failed, 0, "100 = 10%% of 1000 is allowed");
	cr_expect_eq(row(d, MP_DIFF_OWNER, "libxnnpack.so", MP_DIFF_ALLOC)->allowed, 100);
	cr_expect_eq(d->checks[3].failed, 0);
	cr_expect_eq(d->checks[4].matched, 0, "a glob naming nothing");
	cr_expect_eq(d->exceeded, 2);
	for (uint32_t i = 0; i < d->n_rows; i++)
		cr_expect(d->rows[i].scope != MP_DIFF_OWNER || strcmp(d->rows[i].name, "(unknown)"),
			  "an owner that allocated nothing is no entity");
	mp_diff_free(d);
	limits_free(l, 5);
	mp_profile_free(a);
	mp_profile_free(b);
}

/* A backslash makes a glob character literal. */
Test(diff, glob_escape)
{
	static const char *const specs[] = { "kernel:a\\*b.alloc=0", "kernel:a*b.alloc=0" };
	struct mp_profile *a = prof(0, 0, 0), *b = prof(0, 0, 0);
	struct mp_diff_limit *l = limits(specs, 2);
	struct mp_diff *d;

	kernel(a, "a*b", 10, 0, 0);
	kernel(b, "a*b", 10, 0, 0);
	kernel(a, "axxb", 10, 0, 0);
	kernel(b, "axxb", 20, 0, 0);
	cr_assert_eq(mp_diff_new(a, b, l, 2, 3, &d), 0);
	cr_expect_eq(d->checks[0].matched, 1);
	cr_expect_eq(d->checks[0].failed, 0);
	cr_expect_eq(d->checks[1].matched, 2);
	cr_expect_eq(d->checks[1].failed, 1);
	mp_diff_free(d);
	limits_free(l, 2);
	mp_profile_free(a);
	mp_profile_free(b);
}

/* Largest |delta| first, decreases included; unknown figures last. */
Test(diff, sorted_by_absolute_change)
{
	struct mp_profile *a = prof(0, 0, 0), *b = prof(0, 0, 0);
	struct mp_diff *d;
	int64_t prev = INT64_MAX;
	bool unknown_seen = false;

	kernel(a, "small", 10, 0, 0);
	kernel(b, "small", 20, 0, 0);
	kernel(a, "shrunk", 5000, 0, 0);
	kernel(b, "shrunk", 0, 0, 0);
	kernel(a, "grown", 100, 0, 0);
	kernel(b, "grown", 1100, 0, 0);
	cr_assert_eq(mp_diff_new(a, b, NULL, 0, 3, &d), 0);
	cr_expect_str_eq(d->rows[0].name, "shrunk");
	cr_expect_eq(d->rows[0].delta, -5000);
	cr_expect_str_eq(d->rows[1].name, "grown");
	cr_expect_str_eq(d->rows[2].name, "small");
	for (uint32_t i = 0; i < d->n_rows; i++) {
		if (!d->rows[i].known) {
			unknown_seen = true;
			continue;
		}
		cr_expect(!unknown_seen, "a known row after an unknown one");
		cr_expect_leq(llabs(d->rows[i].delta), prev);
		prev = llabs(d->rows[i].delta);
	}
	mp_diff_free(d);
	mp_profile_free(a);
	mp_profile_free(b);
}

/* ---- sampled figures ---- */

/* Sampled profiles: kernel alloc with standard error 1000 B in each, so
 * the difference has sqrt(2) * 1000 = 1414 B. */
static void sampled_pair(struct mp_profile **ra, struct mp_profile **rb, uint64_t old_alloc,
			 uint64_t new_alloc)
{
	struct mp_profile *p[2];

	for (int i = 0; i < 2; i++) {
		struct mp_kernel *k;

		p[i] = prof(100000, 100000, 0);
		p[i]->trace_mode = MP_TRACE_SAMPLED;
		p[i]->sample_bytes = 4096;
		p[i]->mem.alloc_var = 1e6;
		p[i]->peak_var = 1e6;
		k = kernel(p[i], "matmul", i ? new_alloc : old_alloc, 0, 0);
		k->incl.alloc_var = 1e6;
	}
	*ra = p[0];
	*rb = p[1];
}

Test(diff, sampled_change_within_noise_never_fails)
{
	static const char *const specs[] = { "kernel:matmul.alloc=0" };
	struct mp_diff_limit *l = limits(specs, 1);
	const struct mp_diff_row *r;
	struct mp_profile *a, *b;
	struct mp_diff *d;
	char *text;

	/* +4000 B: 2.83 standard errors */
	sampled_pair(&a, &b, 50000, 54000);
	cr_assert_eq(mp_diff_new(a, b, l, 1, 3, &d), 0);
	r = row(d, MP_DIFF_KERNEL, "matmul", MP_DIFF_ALLOC);
	cr_expect_eq(r->delta, 4000);
	cr_expect_float_eq(r->stderr_, sqrt(2e6), 1e-6);
	cr_expect_eq(r->status, MP_DIFF_NOISE);
	cr_expect_eq(d->exceeded, 0);
	text = render(d, MP_DIFF_TABLE);
	cr_expect(strstr(text, "noise            +4000 ±        1414     +8.0%           50000     "
			       "      54000  alloc      kernel:matmul\n"),
		  "%s", text);
	cr_expect(strstr(text, "\nnoise: a change within 3 standard errors of the difference is "
			       "noise, and fails no limit unless the increase passes it by more "
			       "than that\n"),
		  "%s", text);
	free(text);
	mp_diff_free(d);
	mp_profile_free(a);
	mp_profile_free(b);

	/* +4500 B: 3.18 standard errors, beyond the noise: fails */
	sampled_pair(&a, &b, 50000, 54500);
	cr_assert_eq(mp_diff_new(a, b, l, 1, 3, &d), 0);
	cr_expect_eq(row(d, MP_DIFF_KERNEL, "matmul", MP_DIFF_ALLOC)->status, MP_DIFF_FAIL);
	cr_expect_eq(d->exceeded, 1);
	mp_diff_free(d);
	/* with a 5-sigma margin it is noise again */
	cr_assert_eq(mp_diff_new(a, b, l, 1, 5, &d), 0);
	cr_expect_eq(row(d, MP_DIFF_KERNEL, "matmul", MP_DIFF_ALLOC)->status, MP_DIFF_NOISE);
	cr_expect_eq(d->exceeded, 0);
	mp_diff_free(d);
	mp_profile_free(a);
	mp_profile_free(b);
	limits_free(l, 1);
}

/* Over the limit but not by more than the noise: not a failure. */
Test(diff, sampled_over_limit_within_noise)
{
	static const char *const specs[] = { "kernel:matmul.alloc=10K" };
	struct mp_diff_limit *l = limits(specs, 1);
	struct mp_profile *a, *b;
	struct mp_diff *d;

	/* +14240 B: 10240 allowed, 4000 over it (2.83 standard errors) */
	sampled_pair(&a, &b, 50000, 64240);
	cr_assert_eq(mp_diff_new(a, b, l, 1, 3, &d), 0);
	cr_expect_eq(row(d, MP_DIFF_KERNEL, "matmul", MP_DIFF_ALLOC)->status, MP_DIFF_NOISE);
	cr_expect_eq(d->exceeded, 0);
	mp_diff_free(d);
	mp_profile_free(a);
	mp_profile_free(b);
	/* 4500 over it: fails */
	sampled_pair(&a, &b, 50000, 64740);
	cr_assert_eq(mp_diff_new(a, b, l, 1, 3, &d), 0);
	cr_expect_eq(row(d, MP_DIFF_KERNEL, "matmul", MP_DIFF_ALLOC)->status, MP_DIFF_FAIL);
	cr_expect_eq(d->exceeded, 1);
	mp_diff_free(d);
	mp_profile_free(a);
	mp_profile_free(b);
	limits_free(l, 1);
}

/* Exact against sampled: only the sampled side's variance counts; the
 * mode change is a warning. */
Test(diff, mixed_modes_warn)
{
	struct mp_profile *a, *b;
	struct mp_diff *d;
	char *text;

	sampled_pair(&a, &b, 50000, 51000);
	a->trace_mode = MP_TRACE_PRECISE;
	a->mem.alloc_var = a->peak_var = 0;
	a->kernels[0].incl.alloc_var = 0;
	cr_assert_eq(mp_diff_new(a, b, NULL, 0, 3, &d), 0);
	cr_expect_float_eq(row(d, MP_DIFF_KERNEL, "matmul", MP_DIFF_ALLOC)->stderr_, 1000, 1e-9);
	text = render(d, MP_DIFF_TABLE);
	cr_expect(strstr(text, "\nwarning: OLD was traced in mode precise and NEW in mode "
			       "sampled: their heap figures are not measured alike\n"),
		  "%s", text);
	free(text);
	mp_diff_free(d);
	mp_profile_free(a);
	mp_profile_free(b);
}

/* ---- RSS ---- */

Test(diff, rss_unknown_is_not_checked)
{
	static const char *const specs[] = { "kernel:*.rss=0", "rss=10%", "phase:*.rss=0" };
	struct mp_diff_limit *l = limits(specs, 3);
	struct mp_profile *a = prof(0, 0, 1 << 20), *b = prof(0, 0, 2 << 20);
	struct mp_kernel *k;
	struct mp_diff *d;
	char *text;

	k = kernel(a, "touch", 0, 0, 0);
	k->rss_delta_sum = 4096;
	k->rss_calls = 1;
	k = kernel(b, "touch", 0, 0, 0);
	k->rss_delta_sum = 8192;
	k->rss_calls = 1;
	kernel(a, "brief", 0, 0, 0); /* no RSS samples around it */
	kernel(b, "brief", 0, 0, 0);
	phase(a, "load", 0, 0, 0); /* no sample while current */
	phase(b, "load", 0, 0, 3 << 20);
	cr_assert_eq(mp_diff_new(a, b, l, 3, 3, &d), 0);
	cr_expect_eq(row(d, MP_DIFF_KERNEL, "touch", MP_DIFF_RSS)->delta, 4096);
	cr_expect_eq(row(d, MP_DIFF_KERNEL, "brief", MP_DIFF_RSS)->status, MP_DIFF_UNKNOWN);
	cr_expect_eq(row(d, MP_DIFF_PHASE, "load", MP_DIFF_RSS)->status, MP_DIFF_UNKNOWN);
	cr_expect_eq(d->checks[0].matched, 2);
	cr_expect_eq(d->checks[0].unknown, 1);
	cr_expect_eq(d->checks[0].failed, 1);
	cr_expect_eq(d->checks[1].failed, 1, "RSS peak doubled");
	cr_expect_eq(d->checks[2].matched, 1);
	cr_expect_eq(d->checks[2].unknown, 1);
	cr_expect_eq(d->checks[2].failed, 0);
	text = render(d, MP_DIFF_TABLE);
	cr_expect(strstr(text, "\n?                    ?         ?               ?               ?"
			       "  rss        kernel:brief\n"),
		  "%s", text);
	cr_expect(strstr(text, "  ?     phase:*.rss=0: held over 0 figures; 1 not checked (RSS "
			       "unknown)\n"),
		  "%s", text);
	free(text);
	mp_diff_free(d);
	limits_free(l, 3);
	mp_profile_free(a);
	mp_profile_free(b);
}

/* ---- hostile values ---- */

Test(diff, hostile_profiles)
{
	struct mp_profile *a = prof(UINT64_MAX, UINT64_MAX, UINT64_MAX), *b = prof(0, 0, 1);
	static const char *const specs[] = { "alloc=1000000%" };
	struct mp_diff_limit *l = limits(specs, 1);
	struct mp_kernel *k;
	struct mp_diff *d;
	char *text;
	json_object *root;

	a->mem.alloc_var = NAN;
	a->peak_var = INFINITY;
	b->mem.alloc_var = -5;
	k = kernel(a, "dup", 10, 0, 0);
	k->rss_delta_sum = INT64_MIN;
	k->rss_calls = 1;
	kernel(a, "dup", 99, 0, 0); /* a name twice: the first counts */
	k = kernel(b, "ctl\x01\n\"\xff", 5, 0, 0);
	k->rss_delta_sum = INT64_MAX;
	k->rss_calls = 1;
	k = kernel(b, "x", 1, 0, 0);
	k->name = 999; /* out of range */
	cr_assert_eq(mp_diff_new(a, b, l, 1, 3, &d), 0);
	cr_expect_eq(row(d, MP_DIFF_KERNEL, "dup", MP_DIFF_ALLOC)->old_v, 10);
	cr_expect_eq(row(d, MP_DIFF_PROFILE, NULL, MP_DIFF_ALLOC)->stderr_, 0);
	cr_expect_eq(row(d, MP_DIFF_PROFILE, NULL, MP_DIFF_ALLOC)->delta, -(INT64_MAX / 4));
	cr_expect_eq(row(d, MP_DIFF_KERNEL, "", MP_DIFF_ALLOC)->new_v, 1);
	cr_expect_eq(d->exceeded, 0);
	text = render(d, MP_DIFF_TABLE);
	cr_expect(strstr(text, "kernel:ctl??\"?\n"), "%s", text);
	free(text);
	text = render(d, MP_DIFF_JSON);
	root = json_tokener_parse(text);
	cr_expect_not_null(root, "%s", text);
	json_object_put(root);
	cr_expect(strstr(text, "\"name\": \"ctl\\u0001\\n\\\"\\u00ff\""), "%s", text);
	free(text);
	mp_diff_free(d);
	limits_free(l, 1);
	mp_profile_free(a);
	mp_profile_free(b);
}

Test(diff, format_names)
{
	enum mp_diff_format f;

	cr_expect_eq(mp_diff_format_parse("table", &f), 0);
	cr_expect_eq(f, MP_DIFF_TABLE);
	cr_expect_eq(mp_diff_format_parse("json", &f), 0);
	cr_expect_eq(f, MP_DIFF_JSON);
	cr_expect_eq(mp_diff_format_parse("tfjs", &f), -EINVAL);
	cr_expect_eq(mp_diff_format_parse(NULL, &f), -EINVAL);
}

/* ---- anonymous mappings, apart from the heap ---- */

static void set_maps(struct mp_map_stats *m, uint64_t mapped, uint64_t peak, uint64_t live)
{
	*m = (struct mp_map_stats){ .alloc_bytes = mapped,
				    .alloc_count = mapped ? 1 : 0,
				    .free_bytes = mapped - live,
				    .free_count = mapped > live ? 1 : 0,
				    .live_bytes = live,
				    .peak_bytes = peak };
}

/* The same heap in both (kernel init allocates 4096 B, owner libapp.so);
 * NEW reserves 8 MiB more in init, by libv8.so, and keeps it. */
static void reserving(struct mp_profile **ret_old, struct mp_profile **ret_new)
{
	struct mp_profile *p[2];

	for (int i = 0; i < 2; i++) {
		uint64_t m = i ? 8u << 20 : 0;
		struct mp_kernel *k;
		struct mp_pool *o;

		p[i] = prof(4096, 4096, 0);
		p[i]->maps_recorded = true;
		p[i]->maps_resident_peak = MP_UNKNOWN;
		set_maps(&p[i]->maps, 65536 + m, 65536 + m, 65536 + m);
		k = kernel(p[i], "init", 4096, 4096, 4096);
		set_maps(&k->maps, 65536 + m, 65536 + m, 65536 + m);
		pool(&p[i]->owners, &p[i]->n_owners, "libapp.so", 4096, 4096);
		o = pool(&p[i]->owners, &p[i]->n_owners, "libv8.so", 0, 0);
		set_maps(&o->maps, 65536 + m, 65536 + m, 65536 + m);
	}
	*ret_old = p[0];
	*ret_new = p[1];
}

Test(diff, mapping_growth_under_an_unchanged_heap_whole_table)
{
	static const char *const specs[] = { "peak=0", "maps_peak=10%" };
	struct mp_profile *a, *b;
	struct mp_diff_limit *l = limits(specs, 2);
	struct mp_diff *d;
	char *text;

	reserving(&a, &b);
	cr_assert_eq(mp_diff_new(a, b, l, 2, 3, &d), 0);
	cr_expect(d->maps);
	cr_expect_eq(d->exceeded, 1);
	text = render(d, MP_DIFF_TABLE);
	cr_expect_str_eq(
		text,
		"old: old.memprof: pid 7 /bin/model, precise\n"
		"new: new.memprof: pid 7 /bin/model, precise\n"
		"\n"
		"heap: peak 4096 -> 4096 B (+0), allocated 4096 -> 4096 B (+0)\n"
		"mappings: reserved peak 65536 -> 8454144 B (+8388608), at the end 65536 -> "
		"8454144 B (+8388608), mapped 65536 -> 8454144 B (+8388608)\n"
		"\n"
		"STATUS           DELTA  RELATIVE             OLD             NEW  METRIC     WHERE\n"
		"              +8388608 +12800.0%           65536         8454144  mapped     profile\n"
		"FAIL          +8388608 +12800.0%           65536         8454144  maps_peak  profile\n"
		"              +8388608 +12800.0%           65536         8454144  maps_live  profile\n"
		"              +8388608 +12800.0%           65536         8454144  mapped     "
		"kernel:init\n"
		"              +8388608 +12800.0%           65536         8454144  maps_peak  "
		"kernel:init\n"
		"              +8388608 +12800.0%           65536         8454144  mapped     "
		"owner:libv8.so\n"
		"              +8388608 +12800.0%           65536         8454144  maps_peak  "
		"owner:libv8.so\n"
		"              +8388608 +12800.0%           65536         8454144  maps_live  "
		"owner:libv8.so\n"
		"\n"
		"8 figures changed, 12 unchanged, 2 unknown (RSS without samples)\n"
		"\n"
		"limits:\n"
		"  ok    peak=0: held over 1 figure\n"
		"  FAIL  maps_peak=10%: profile +8388608 B (+12800.0%), allows +6553 B\n"
		"result: FAIL, 1 of 2 limits exceeded\n");
	free(text);
	mp_diff_free(d);
	limits_free(l, 2);
	mp_profile_free(a);
	mp_profile_free(b);
}

/* The JSON has the heap's and the mappings' figures as separate rows: the
 * heap's peak unchanged, the mappings' grown. */
Test(diff, mapping_growth_json)
{
	struct mp_profile *a, *b;
	struct mp_diff *d;
	json_object *root, *changes;
	char *text;
	int seen = 0;

	reserving(&a, &b);
	cr_assert_eq(mp_diff_new(a, b, NULL, 0, 3, &d), 0);
	text = render(d, MP_DIFF_JSON);
	root = json_tokener_parse(text);
	cr_assert_not_null(root, "%s", text);
	cr_assert(json_object_object_get_ex(root, "changes", &changes));
	for (size_t i = 0; i < json_object_array_length(changes); i++) {
		json_object *c = json_object_array_get_idx(changes, i), *v;
		const char *scope, *metric;
		int64_t delta;

		json_object_object_get_ex(c, "scope", &v);
		scope = json_object_get_string(v);
		json_object_object_get_ex(c, "metric", &v);
		metric = json_object_get_string(v);
		json_object_object_get_ex(c, "delta", &v);
		delta = json_object_get_int64(v);
		if (!strcmp(scope, "rss") || !strcmp(metric, "rss"))
			continue;
		if (!strcmp(metric, "mapped") || !strcmp(metric, "maps_peak") ||
		    !strcmp(metric, "maps_live")) {
			bool grows =
				strcmp(scope, "owner") ||
				!strcmp(json_object_get_string(json_object_object_get(c, "name")),
					"libv8.so");

			cr_expect_eq(delta, grows ? 8 << 20 : 0, "%s %s", scope, metric);
		} else {
			cr_expect_eq(delta, 0, "heap %s %s changed", scope, metric);
		}
		if (!strcmp(scope, "profile") &&
		    (!strcmp(metric, "peak") || !strcmp(metric, "maps_peak")))
			seen++;
	}
	cr_expect_eq(seen, 2, "the heap's and the mappings' peaks, each a row");
	json_object_put(root);
	free(text);
	mp_diff_free(d);
	mp_profile_free(a);
	mp_profile_free(b);
}

/* A file written before mappings were recorded: its mapping figures are
 * unknown (never 0), a limit on them is not checked, and a warning says
 * its heap figures may hold mappings. Two such files: no mapping rows. */
Test(diff, mappings_unknown_in_an_older_file)
{
	static const char *const specs[] = { "maps_peak=0" };
	struct mp_profile *a, *b;
	struct mp_diff_limit *l = limits(specs, 1);
	struct mp_diff *d;
	char *text;

	reserving(&a, &b);
	a->maps_recorded = false;
	cr_assert_eq(mp_diff_new(a, b, l, 1, 3, &d), 0);
	cr_expect_eq(d->exceeded, 0);
	cr_expect_eq(row(d, MP_DIFF_PROFILE, NULL, MP_DIFF_MAPPED_PEAK)->status, MP_DIFF_UNKNOWN);
	cr_expect_eq(row(d, MP_DIFF_OWNER, "libv8.so", MP_DIFF_MAPPED)->status, MP_DIFF_UNKNOWN);
	text = render(d, MP_DIFF_TABLE);
	cr_expect(strstr(text, "warning: OLD was written before mappings were recorded: its "
			       "mapping figures are unknown, and its heap figures may include "
			       "mappings\n"),
		  "%s", text);
	cr_expect(strstr(text, "mappings: reserved peak unknown, at the end unknown, mapped "
			       "unknown\n"),
		  "%s", text);
	cr_expect(strstr(text, "1 figure changed, 9 unchanged, 12 unknown (RSS without samples, "
			       "mappings not recorded)\n"),
		  "%s", text);
	cr_expect(strstr(text, "  ?     maps_peak=0: held over 0 figures; 1 not checked "
			       "(mappings not recorded)\n"),
		  "%s", text);
	free(text);
	mp_diff_free(d);

	b->maps_recorded = false;
	cr_assert_eq(mp_diff_new(a, b, NULL, 0, 3, &d), 0);
	cr_expect(!d->maps);
	for (uint32_t i = 0; i < d->n_rows; i++)
		cr_expect(!mp_diff_metric_is_maps(d->rows[i].metric), "a mapping row");
	text = render(d, MP_DIFF_TABLE);
	cr_expect(!strstr(text, "mappings"), "%s", text);
	free(text);
	mp_diff_free(d);
	limits_free(l, 1);
	mp_profile_free(a);
	mp_profile_free(b);
}

/* ---- who held the peak ---- */

static void parts_set(struct mp_peak_part **v, uint32_t *n, uint32_t a_id, uint64_t a,
		      uint32_t b_id, uint64_t b)
{
	*v = calloc(2, sizeof(**v));
	cr_assert_not_null(*v);
	(*v)[0] = (struct mp_peak_part){ a_id, a };
	(*v)[1] = (struct mp_peak_part){ b_id, b };
	*n = 2;
}

/* OLD: the inference peak of 10000 B held by framework 7000 and
 * delegate:xnnpack 3000 (the process's peak, too); NEW: the delegate's
 * part grown to 5000. */
static void delegate_grows(struct mp_profile **ret_old, struct mp_profile **ret_new)
{
	struct mp_profile *p[2];

	for (int i = 0; i < 2; i++) {
		uint64_t xnn = i ? 5000 : 3000;
		struct mp_phase *ph;

		p[i] = prof(20000, 7000 + xnn, 0);
		p[i]->peak_parts = true;
		pool(&p[i]->owners, &p[i]->n_owners, "(unknown)", 0, 0);
		pool(&p[i]->owners, &p[i]->n_owners, "framework", 10000, 7000)->peak_share = 7000;
		pool(&p[i]->owners, &p[i]->n_owners, "delegate:xnnpack", 10000, xnn)->peak_share =
			xnn;
		pool(&p[i]->tags, &p[i]->n_tags, "(untagged)", 20000, 7000 + xnn)->peak_share =
			7000 + xnn;
		ph = phase(p[i], "inference", 20000, 7000 + xnn, 0);
		parts_set(&ph->peak_owners, &ph->n_peak_owners, 1, 7000, 2, xnn);
	}
	*ret_old = p[0];
	*ret_new = p[1];
}

/* A delegate's part of the inference peak is a figure of its own, gated
 * like any other: phase_owner:PHASE/OWNER.peak_share, and the owner's part
 * of the process's peak, owner:NAME.peak_share. */
Test(diff, who_held_the_peak_gated)
{
	static const char *const specs[] = { "phase_owner:inference/delegate:*.peak_share=10%",
					     "owner:framework.peak_share=0" };
	const struct mp_diff_row *r;
	struct mp_profile *a, *b;
	struct mp_diff_limit *l = limits(specs, 2);
	struct mp_diff *d;
	char *text;

	delegate_grows(&a, &b);
	cr_assert_eq(mp_diff_new(a, b, l, 2, 3, &d), 0);
	cr_expect_eq(d->exceeded, 1);
	r = row(d, MP_DIFF_PHASE_OWNER, "inference/delegate:xnnpack", MP_DIFF_PEAK_SHARE);
	cr_expect(r->known && r->old_v == 3000 && r->new_v == 5000 && r->status == MP_DIFF_FAIL);
	r = row(d, MP_DIFF_PHASE_OWNER, "inference/framework", MP_DIFF_PEAK_SHARE);
	cr_expect(r->known && r->delta == 0);
	r = row(d, MP_DIFF_OWNER, "delegate:xnnpack", MP_DIFF_PEAK_SHARE);
	cr_expect(r->known && r->delta == 2000 && r->status == MP_DIFF_CHANGED);
	cr_expect_eq(row(d, MP_DIFF_OWNER, "framework", MP_DIFF_PEAK_SHARE)->status, MP_DIFF_OK);
	text = render(d, MP_DIFF_TABLE);
	cr_expect(strstr(text, "FAIL             +2000    +66.7%            3000            5000  "
			       "peak_share phase_owner:inference/delegate:xnnpack\n"),
		  "%s", text);
	cr_expect(strstr(text, "                 +2000    +66.7%            3000            5000  "
			       "peak_share owner:delegate:xnnpack\n"),
		  "%s", text);
	cr_expect(strstr(text, "  FAIL  phase_owner:inference/delegate:*.peak_share=10%: "
			       "phase_owner:inference/delegate:xnnpack +2000 B (+66.7%), allows "
			       "+300 B\n"),
		  "%s", text);
	cr_expect(strstr(text, "  ok    owner:framework.peak_share=0: held over 1 figure\n"), "%s",
		  text);
	free(text);
	text = render(d, MP_DIFF_JSON);
	cr_expect(strstr(text, "\"phase_owner\""), "%s", text);
	cr_expect(strstr(text, "\"inference/delegate:xnnpack\""), "%s", text);
	free(text);
	mp_diff_free(d);

	/* a file from before: its parts are unknown, never 0 */
	a->peak_parts = false;
	cr_assert_eq(mp_diff_new(a, b, l, 2, 3, &d), 0);
	cr_expect_eq(d->exceeded, 0);
	cr_expect_eq(row(d, MP_DIFF_OWNER, "framework", MP_DIFF_PEAK_SHARE)->status,
		     MP_DIFF_UNKNOWN);
	cr_expect_eq(row(d, MP_DIFF_PHASE_OWNER, "inference/delegate:xnnpack", MP_DIFF_PEAK_SHARE)
			     ->status,
		     MP_DIFF_UNKNOWN);
	text = render(d, MP_DIFF_TABLE);
	cr_expect(strstr(text, "warning: OLD was written before peaks were broken down: who held "
			       "them is unknown\n"),
		  "%s", text);
	cr_expect(strstr(text, "not checked (peak parts not recorded)\n"), "%s", text);
	free(text);
	mp_diff_free(d);
	limits_free(l, 2);
	mp_profile_free(a);
	mp_profile_free(b);
}

/* A profile whose heap sites' stacks hold Python frames: site 0 allocates
 * @a bytes under forward() (model.py:12, called from <module> run.py:3),
 * site 1 @b bytes under the same forward() line through a native frame,
 * site 2 64 bytes with native frames only. */
static struct mp_profile *python_prof(uint64_t a, uint64_t b)
{
	struct mp_profile *p = prof(a + b + 64, a + b, 0);
	static const uint64_t fwd = 0xfa0000000100000cull, mod = 0xfa00000002000003ull;

	p->n_locations = 3;
	p->locations = calloc(3, sizeof(*p->locations));
	cr_assert_not_null(p->locations);
	p->locations[0] = (struct mp_location){ .addr = 0x1000, .object = MP_NONE };
	p->locations[1] = (struct mp_location){ .addr = fwd,
						.object = MP_NONE,
						.function = strdup("forward"),
						.file = strdup("/src/model.py"),
						.line = 12,
						.python = true };
	p->locations[2] = (struct mp_location){ .addr = mod,
						.object = MP_NONE,
						.function = strdup("<module>"),
						.file = strdup("/src/run.py"),
						.line = 3,
						.python = true };
	cr_assert_eq(mp_profile_stacks_alloc(p, 3, 7), 0);
	p->n_stacks = 3;
	p->stacks[0] = (struct mp_stack){ 2, 0, p->stack_frames };
	p->stacks[0].frames[0] = fwd;
	p->stacks[0].frames[1] = mod;
	p->stacks[1] = (struct mp_stack){ 3, 0, p->stack_frames + 2 };
	p->stacks[1].frames[0] = 0x1000;
	p->stacks[1].frames[1] = fwd;
	p->stacks[1].frames[2] = mod;
	p->stacks[2] = (struct mp_stack){ 2, 0, p->stack_frames + 5 };
	p->stacks[2].frames[0] = 0x1000;
	p->stacks[2].frames[1] = 0x1000;
	p->n_sites = 3;
	p->sites = calloc(3, sizeof(*p->sites));
	cr_assert_not_null(p->sites);
	p->sites[0] = (struct mp_site){
		.caller = 0x1000, .alloc_space = a, .alloc_objects = 1, .peak_space = a, .stack = 1
	};
	p->sites[1] = (struct mp_site){
		.caller = 0x1000, .alloc_space = b, .alloc_objects = 1, .peak_space = 0, .stack = 2
	};
	p->sites[2] = (struct mp_site){ .caller = 0x1000,
					.alloc_space = 64,
					.alloc_objects = 1,
					.peak_space = 64,
					.stack = 3 };
	p->peak_parts = true;
	return p;
}

/* A Python line's rows: its sites' bytes together (the innermost Python
 * frame names the line), a limit on it, and native-only sites in none. */
Test(diff, python_lines)
{
	static const char *const specs[] = { "line:forward */model.py:12.alloc=1M" };
	struct mp_profile *a = python_prof(1000, 24), *b = python_prof(3u << 20, 24);
	struct mp_diff_limit *l = limits(specs, 1);
	const struct mp_diff_row *r;
	struct mp_diff *d;
	char *out;

	cr_assert_eq(mp_diff_new(a, b, l, 1, 3, &d), 0);
	r = row(d, MP_DIFF_LINE, "forward /src/model.py:12", MP_DIFF_ALLOC);
	cr_expect_eq(r->old_v, 1024);
	cr_expect_eq(r->new_v, (3 << 20) + 24);
	cr_expect_eq(r->status, MP_DIFF_FAIL);
	r = row(d, MP_DIFF_LINE, "forward /src/model.py:12", MP_DIFF_PEAK_SHARE);
	cr_expect_eq(r->old_v, 1000);
	cr_expect_eq(r->new_v, 3 << 20);
	for (uint32_t i = 0; i < d->n_rows; i++)
		cr_expect(d->rows[i].scope != MP_DIFF_LINE ||
				  !strcmp(d->rows[i].name, "forward /src/model.py:12"),
			  "%s", d->rows[i].name);
	cr_expect_eq(d->exceeded, 1);
	out = render(d, MP_DIFF_TABLE);
	cr_expect(strstr(out, "line:forward /src/model.py:12"), "%s", out);
	free(out);
	mp_diff_free(d);
	limits_free(l, 1);
	mp_profile_free(a);
	mp_profile_free(b);
}
