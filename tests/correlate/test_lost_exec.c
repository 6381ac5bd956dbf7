// SPDX-License-Identifier: MIT
/*
 * The correlator when marker records are lost (gaps in a thread's record
 * numbers) and when the process calls exec: affected invocations are
 * flagged and kept out of the per-kernel figures; exec closes the old
 * image's kernels and records the event (docs/PROFILE.md).
 */
#include "../profile/helpers.h"
#include "chrome.h"

/* Skips @n record numbers of @tid: records the ring dropped. */
static void lose(struct stream *s, uint32_t tid, uint32_t n)
{
	while (n--)
		next_seq(s, tid);
}

Test(lost_markers, invocation_with_a_lost_end_is_flagged_and_left_out)
{
	struct stream s;
	struct mp_profile *p;
	const struct mp_kernel *k;

	stream_init(&s, NULL);
	kbegin(&s, 1, "k"); /* 1001 */
	alloc(&s, 1, 100); /* 1002 */
	kend(&s, 1); /* 1003: complete, 2 ns */
	kbegin(&s, 1, "k"); /* 1004 */
	alloc(&s, 1, 50); /* 1005 */
	lose(&s, 1, 1); /* its END */
	kbegin(&s, 1, "k"); /* 1006: proves the gap */
	alloc(&s, 1, 10); /* 1007 */
	kend(&s, 1); /* 1008: complete, 2 ns */
	lose(&s, 1, 1); /* a BEGIN */
	kend(&s, 1); /* 1009: unmatched */
	p = finish(&s);

	cr_assert_eq(p->n_invocations, 3);
	cr_expect_eq(p->invocations[0].flags, 0);
	cr_expect_eq(p->invocations[1].flags, MP_INV_F_MARKERS_LOST);
	/* closed at its thread's last record before the gap (its own BEGIN) */
	cr_expect_eq(p->invocations[1].end_ns, 1004);
	cr_expect_eq(p->invocations[1].incl.alloc_bytes, 50);
	cr_expect_eq(p->invocations[2].flags, 0);
	cr_expect_eq(p->marker_gaps, 2);
	cr_expect_eq(p->unmatched_ends, 1);
	cr_expect(!p->truncated);
	k = mp_profile_kernel(p, "k");
	cr_assert_not_null(k);
	cr_expect_eq(k->calls, 2);
	cr_expect_eq(k->markers_lost, 1);
	cr_expect_eq(k->total_ns, 4);
	cr_expect_eq(k->max_ns, 2);
	cr_expect_eq(k->incl.alloc_bytes, 110);
	cr_expect_eq(k->incl.alloc_count, 2);
	cr_expect_eq(k->excl.alloc_bytes, 110);
	/* the allocation made while the lost invocation was open stays in the
	 * whole-profile figures */
	cr_expect_eq(p->mem.alloc_bytes, 160);
	mp_profile_free(p);
}

/* The overrun that made a kernel last longer than the window: every END is
 * lost, so without the gap rule each BEGIN nests in the last one and they
 * all stay open. */
Test(lost_markers, totals_stay_within_the_window)
{
	struct stream s;
	struct mp_profile *p;
	const struct mp_kernel *k;

	stream_init(&s, NULL);
	for (int i = 0; i < 1000; i++) {
		kbegin(&s, 1, "k");
		alloc(&s, 1, 1000);
		if (i % 3)
			lose(&s, 1, 1);
		else
			kend(&s, 1);
	}
	p = finish(&s);
	k = mp_profile_kernel(p, "k");
	cr_assert_not_null(k);
	cr_expect_eq(k->calls + k->markers_lost, 1000);
	cr_expect_eq(k->calls, 334 + 0, "calls %llu", (unsigned long long)k->calls);
	cr_expect_leq(k->total_ns, p->end_ns - p->begin_ns);
	cr_expect_leq(k->incl.alloc_bytes, p->mem.alloc_bytes);
	for (uint32_t i = 0; i < p->n_invocations; i++)
		cr_expect_eq(p->invocations[i].depth, 0, "invocation %u nested", i);
	mp_profile_free(p);
}

Test(lost_markers, tags_whose_end_may_be_lost_end_at_the_gap)
{
	struct stream s;
	struct mp_profile *p;

	stream_init(&s, NULL);
	tag_begin(&s, 1, "weights");
	lose(&s, 1, 1);
	alloc(&s, 1, 64);
	kbegin(&s, 1, "k"); /* proves the gap: the tag is dropped */
	alloc(&s, 1, 32);
	kend(&s, 1);
	p = finish(&s);
	cr_assert_eq(p->n_tags, 2);
	/* only the allocation before the gap was seen was tagged */
	cr_expect_eq(p->tags[1].mem.alloc_bytes, 64);
	cr_expect_eq(p->tags[0].mem.alloc_bytes, 32);
	cr_expect_eq(p->marker_gaps, 1);
	mp_profile_free(p);
}

Test(lost_markers, open_at_attach_records_share_one_number)
{
	struct stream s;
	struct mp_profile *p;
	struct mp_record open = { .type = MP_REC_KERNEL_BEGIN,
				  .flags = MP_REC_F_OPEN_AT_ATTACH,
				  .tid = 1,
				  .ts_ns = 10,
				  .seq = 0,
				  .name = "outer" };

	stream_init(&s, NULL);
	cr_assert_eq(mp_correlator_on_record(s.c, &open), 0);
	open.name = "inner";
	cr_assert_eq(mp_correlator_on_record(s.c, &open), 0);
	kend(&s, 1); /* seq 1 */
	kend(&s, 1); /* seq 2 */
	p = finish(&s);
	cr_expect_eq(p->marker_gaps, 0);
	cr_expect_eq(mp_profile_kernel(p, "outer")->calls, 1);
	cr_expect_eq(mp_profile_kernel(p, "inner")->calls, 1);
	mp_profile_free(p);
}

Test(exec, closes_the_old_image_and_starts_clean)
{
	struct stream s;
	struct mp_profile *p;
	const struct mp_kernel *k;
	uint64_t ts;

	stream_init(&s, NULL);
	phase(&s, "load"); /* 1001 */
	kbegin(&s, 1, "outer"); /* 1002 */
	kbegin(&s, 1, "inner"); /* 1003 */
	tag_begin(&s, 1, "weights"); /* 1004 */
	alloc(&s, 1, 100); /* 1005 */
	kbegin(&s, 2, "worker"); /* 1006 */
	ts = tick(&s); /* 1007 */
	cr_assert_eq(mp_correlator_on_exec(s.c, ts, 1, "/usr/bin/next"), 0);
	/* the new image: nothing open, no tag, no phase */
	alloc(&s, 1, 7000); /* 1008 */
	s.n_seq = 0; /* its records are numbered afresh */
	s.seq[0] = 41;
	s.seq_tid[0] = 1;
	s.n_seq = 1;
	kbegin(&s, 1, "after"); /* 1009, seq 42 */
	alloc(&s, 1, 5); /* 1010 */
	kend(&s, 1); /* 1011 */
	p = finish(&s);

	cr_assert_eq(p->n_invocations, 4);
	for (uint32_t i = 0; i < 3; i++) {
		cr_expect_eq(p->invocations[i].flags, MP_INV_F_TRUNCATED | MP_INV_F_EXEC, "inv %u",
			     i);
		cr_expect_eq(p->invocations[i].end_ns, ts);
	}
	cr_expect_eq(p->invocations[0].incl.alloc_bytes, 100);
	cr_expect_eq(p->invocations[3].flags, 0);
	cr_expect_eq(p->invocations[3].incl.alloc_bytes, 5);
	cr_expect_eq(p->invocations[3].phase, MP_NONE);
	cr_expect_eq(p->marker_gaps, 0);
	k = mp_profile_kernel(p, "outer");
	cr_expect_eq(k->calls, 1);
	cr_expect_eq(k->truncated, 1);
	cr_assert_eq(p->n_execs, 1);
	cr_expect_eq(p->exec_count, 1);
	cr_expect_eq(p->execs[0].ts_ns, ts);
	cr_expect_eq(p->execs[0].tid, 1);
	cr_expect_eq(p->execs[0].kernels_closed, 3);
	cr_expect_str_eq(p->execs[0].path, "/usr/bin/next");
	/* the phase ended at the exec; the tag too */
	cr_expect_eq(p->phases[0].duration_ns, ts - 1001);
	cr_expect_eq(p->tags[1].mem.alloc_bytes, 100);
	cr_expect_eq(p->tags[0].mem.alloc_bytes, 7005);
	cr_expect_eq(p->mem.alloc_bytes, 7105);
	mp_profile_free(p);
}

/* A raw allocator event through the live table, as the session applies it. */
static void apply_raw(struct stream *s, uint32_t type, uint64_t addr, uint64_t size, uint64_t ts)
{
	struct mp_raw_event ev = {
		.type = type, .fn = MP_FN_MALLOC, .tid = 1, .ts_ns = ts, .addr = addr, .size = size
	};

	cr_assert_eq(mp_correlator_apply_heap(s->c, &ev, 0), 0);
}

/* The old image's live blocks go with its address space: released by the
 * exec, with no kernel charged, and out of the new image's figures. */
Test(exec, releases_the_old_image_live_blocks)
{
	struct stream s;
	struct mp_profile *p;
	const struct mp_kernel *k;
	uint64_t ts;

	stream_init(&s, NULL);
	kbegin(&s, 1, "old");
	apply_raw(&s, MP_RAW_ALLOC, 0x10000, 300, tick(&s));
	apply_raw(&s, MP_RAW_ALLOC, 0x20000, 700, tick(&s));
	kend(&s, 1);
	ts = tick(&s);
	cr_assert_eq(mp_correlator_on_exec(s.c, ts, 1, "/bin/new"), 0);
	apply_raw(&s, MP_RAW_EXEC, 0, 0, ts);
	s.n_seq = 0; /* the new image numbers its records afresh */
	kbegin(&s, 1, "new");
	/* the new image may get the same address again */
	apply_raw(&s, MP_RAW_ALLOC, 0x10000, 50, tick(&s));
	kend(&s, 1);
	p = finish(&s);
	cr_assert_eq(p->n_execs, 1);
	cr_expect_eq(p->execs[0].released_bytes, 1000);
	cr_expect_eq(p->execs[0].released_blocks, 2);
	cr_expect_eq(p->mem.bytes_added, 50);
	cr_expect_eq(p->mem.free_bytes, 1000);
	cr_expect_eq(p->peak_bytes, 1000);
	k = mp_profile_kernel(p, "new");
	cr_assert_not_null(k);
	cr_expect_eq(k->peak_bytes, 50);
	k = mp_profile_kernel(p, "old");
	cr_assert_not_null(k);
	cr_expect_eq(k->retained_bytes, 0);
	cr_expect_eq(k->incl.bytes_added, 1000);
	mp_profile_free(p);
}

Test(exec, events_are_bounded_and_counted)
{
	struct stream s;
	struct mp_profile *p;

	stream_init(&s, NULL);
	for (int i = 0; i < MP_PROFILE_MAX_EXECS + 10; i++)
		cr_assert_eq(mp_correlator_on_exec(s.c, tick(&s), 1, i % 2 ? NULL : "/bin/x"), 0);
	p = finish(&s);
	cr_expect_eq(p->n_execs, MP_PROFILE_MAX_EXECS);
	cr_expect_eq(p->exec_count, MP_PROFILE_MAX_EXECS + 10);
	cr_expect_null(p->execs[1].path);
	cr_expect_str_eq(p->execs[2].path, "/bin/x");
	mp_profile_free(p);
}

/* The exporters show what the model holds: the table, JSON and the Chrome
 * trace carry the exec, the lost markers and the corruption flag. */
Test(exec, exporters_show_execs_lost_markers_and_corruption)
{
	struct stream s;
	struct mp_profile *p;
	char *txt, *buf = NULL;
	size_t len = 0;
	FILE *f;

	stream_init(&s, NULL);
	kbegin(&s, 1, "k");
	lose(&s, 1, 1);
	kbegin(&s, 1, "k");
	cr_assert_eq(mp_correlator_on_exec(s.c, tick(&s), 1, "/opt/new"), 0);
	p = finish(&s);
	p->corruption = MP_CORRUPT_RING_HEADER | MP_CORRUPT_RING_RECORDS;

	txt = render(p, MP_REPORT_TABLE, NULL);
	cr_expect(
		strstr(txt, "lost markers: 1 gaps; 1 invocations left out of the kernel figures\n"),
		"%s", txt);
	cr_expect(strstr(txt, "CORRUPTED marker ring: header counters records; marker figures are "
			      "incomplete\n"),
		  "%s", txt);
	cr_expect(strstr(txt, "by tid 1: /opt/new, 1 open kernels closed, 0 B in 0 live blocks "
			      "released\n"),
		  "%s", txt);
	/* said first, before any figure */
	cr_expect(strstr(txt, "\nCORRUPTION: marker ring damaged\nmode:"), "%s", txt);
	free(txt);
	txt = render(p, MP_REPORT_JSON, NULL);
	cr_expect(strstr(txt, "\"markerGaps\": 1"), "%s", txt);
	cr_expect(strstr(txt, "\"ringHeader\": true"), "%s", txt);
	cr_expect(strstr(txt, "\"ringOpen\": false"), "%s", txt);
	cr_expect(strstr(txt, "\"path\": \"/opt/new\""), "%s", txt);
	cr_expect(strstr(txt, "\"closedAtExec\": true"), "%s", txt);
	cr_expect(strstr(txt, "\"markersLost\": 1"), "%s", txt);
	free(txt);
	f = open_memstream(&buf, &len);
	cr_assert_not_null(f);
	cr_assert_eq(mp_chrome_write(p, f), 0);
	fclose(f);
	cr_expect(strstr(buf, "\"cat\":\"exec\""), "%s", buf);
	cr_expect(strstr(buf, "\"path\":\"/opt/new\""), "%s", buf);
	cr_expect(strstr(buf, "\"closedAtExec\":true"), "%s", buf);
	cr_expect(strstr(buf, "\"markersLost\":true"), "%s", buf);
	cr_expect(strstr(buf, "\"corruption\":3"), "%s", buf);
	free(buf);
	/* refused records alone: the CORRUPTION line, not the marker ring's */
	p->corruption = MP_CORRUPT_RECORDS_REJECTED;
	p->rejected[MP_REJECT_FREE_UNMAPPED] = 2;
	txt = render(p, MP_REPORT_TABLE, NULL);
	cr_expect(strstr(txt, "CORRUPTION: refused records: 2 freeUnmapped"), "%s", txt);
	cr_expect(!strstr(txt, "CORRUPTED marker ring"), "%s", txt);
	free(txt);
	mp_profile_free(p);
}

/* Lost heap events: the report says, before any figure, which way the
 * live figures are off (a lost free leaves its block live), in the table,
 * the JSON and the HTML page. */
Test(lost_events, the_bound_follows_what_was_lost)
{
	const struct {
		uint64_t allocs, frees, reallocs, others, heap;
		enum mp_heap_bound bound;
		const char *words, *json;
	} cases[] = {
		{ 0, 0, 0, 0, 0, MP_BOUND_EXACT, NULL, NULL },
		{ 0, 7, 0, 0, 0, MP_BOUND_UPPER, "are upper bounds (frees lost", "upper" },
		{ 5, 0, 0, 0, 0, MP_BOUND_LOWER, "are lower bounds (allocations lost)", "lower" },
		{ 5, 7, 0, 0, 0, MP_BOUND_NONE, "are neither upper nor lower bounds", "none" },
		{ 0, 0, 1, 0, 0, MP_BOUND_NONE, "are neither upper nor lower bounds", "none" },
		{ 0, 0, 0, 3, 0, MP_BOUND_EXACT, "heap figures are whole", "exact" },
		{ 0, 0, 0, 0, 9, MP_BOUND_NONE, "are neither upper nor lower bounds", "none" },
		/* counted before the kinds were: unknown */
		{ 0, 0, 0, 0, 0, MP_BOUND_NONE, "are neither upper nor lower bounds", "none" },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct stream s;
		struct mp_profile *p;
		char *txt, *lost, *heap, want[64];

		stream_init(&s, NULL);
		kbegin(&s, 1, "k");
		kend(&s, 1);
		p = finish(&s);
		p->drops_bpf_allocs = cases[i].allocs;
		p->drops_bpf_frees = cases[i].frees;
		p->drops_bpf_reallocs = cases[i].reallocs;
		p->drops_bpf_others = cases[i].others;
		p->drops_bpf =
			cases[i].allocs + cases[i].frees + cases[i].reallocs + cases[i].others;
		p->drops_heap = cases[i].heap;
		p->tracer_path = cases[i].heap ? MP_PATH_INPROCESS : MP_PATH_BPF;
		if (i == sizeof(cases) / sizeof(cases[0]) - 1)
			p->drops_bpf = 4;
		cr_expect_eq(mp_profile_heap_bound(p), cases[i].bound, "cases[%zu]", i);

		txt = render(p, MP_REPORT_TABLE, NULL);
		lost = strstr(txt, "LOST: ");
		heap = strstr(txt, "\nheap: ");
		if (!cases[i].words) {
			cr_expect_null(lost, "cases[%zu]:\n%s", i, txt);
		} else {
			cr_expect(lost && heap && lost < heap,
				  "cases[%zu]: not before the figures:\n%s", i, txt);
			cr_expect(lost && strstr(lost, cases[i].words), "cases[%zu]:\n%s", i, txt);
		}
		free(txt);
		txt = render(p, MP_REPORT_JSON, NULL);
		if (cases[i].json) {
			snprintf(want, sizeof(want), "\"heapBound\": \"%s\"", cases[i].json);
			cr_expect(strstr(txt, want), "cases[%zu]: no %s", i, want);
		} else {
			cr_expect_null(strstr(txt, "heapBound"), "cases[%zu]", i);
		}
		free(txt);
		mp_profile_free(p);
	}
}
