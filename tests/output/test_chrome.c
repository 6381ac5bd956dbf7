/* SPDX-License-Identifier: MIT */
/*
 * Chrome / Perfetto trace export on synthetic profiles: the whole text of
 * small cases, slice clamping and nesting, hostile names, and the heap
 * counter's source (heap_live of RSS points, stored in memprof.proto).
 */
#include "helpers.h"
#include "helpers_chrome.h"
#include "memprof.pb-c.h"
#include "profile_pb.h"

#define U MP_UNKNOWN

static void sample(struct stream *s, uint64_t rss)
{
	struct mp_rss_sample smp = {
		.ts_ns = tick(s),
		.vm_rss = rss,
		.rss_anon = rss / 2,
		.rss_file = rss / 2,
		.rss_shmem = 0,
		.vm_hwm = rss,
		.vm_swap = 0,
		.pss = U,
	};

	cr_assert_eq(mp_correlator_on_rss(s->c, &smp), 0);
}

/* outer (12 B) > inner (8 B, freed after it) on thread 1, an empty kernel
 * on thread 2, a phase and one RSS sample; 1 ns per event. */
static struct mp_profile *tiny(void)
{
	struct stream s;
	struct mp_profile *p;
	struct block b2;

	stream_init(&s, NULL);
	phase(&s, "load"); /* 1001 */
	kbegin(&s, 1, "outer"); /* 1002 */
	alloc(&s, 1, 12); /* 1003 */
	kbegin(&s, 1, "inner"); /* 1004 */
	shape(&s, 1, true, 2, (int64_t)2, (int64_t)3); /* 1005 */
	b2 = alloc(&s, 1, 8); /* 1006 */
	sample(&s, 8192); /* 1007: live 20 */
	kend(&s, 1); /* 1008 */
	release(&s, 1, &b2); /* 1009 */
	kend(&s, 1); /* 1010 */
	kbegin(&s, 2, "worker"); /* 1011 */
	kend(&s, 2); /* 1012 */
	p = finish(&s); /* 1013 */
	cr_assert_eq(mp_profile_set_process(p, 42, "/usr/bin/tiny", NULL, NULL), 0);
	return p;
}

Test(chrome, tiny_profile_whole_text)
{
	struct mp_profile *p = tiny();
	char *got = chrome_render(p), *v;

	cr_expect_str_eq(
		got,
		"{\"traceEvents\":[\n"
		"{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":42,\"tid\":0,\"args\":{\"name\":\"tiny\"}},\n"
		"{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":42,\"tid\":1,\"args\":{\"name\":\"1\"}},\n"
		"{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":42,\"tid\":2,\"args\":{\"name\":\"2\"}},\n"
		"{\"ph\":\"X\",\"cat\":\"kernel\",\"name\":\"outer\",\"pid\":42,\"tid\":1,\"ts\":0.002,"
		"\"dur\":0.008,\"args\":{\"index\":0,\"bytesAdded\":12,\"tensorsAdded\":1,"
		"\"allocBytes\":20,\"allocCount\":2,\"freeBytes\":8,\"freeCount\":1,"
		"\"selfBytesAdded\":4,\"selfAllocBytes\":12,\"totalBytesSnapshot\":12,"
		"\"totalTensorsSnapshot\":1,\"peakBytes\":20,\"peakAdded\":20,\"retainedBytes\":12,"
		"\"retainedCount\":1,\"rssBegin\":8192,\"rssEnd\":8192,\"rssDelta\":0,"
		"\"phase\":\"load\"}},\n"
		"{\"ph\":\"X\",\"cat\":\"kernel\",\"name\":\"inner\",\"pid\":42,\"tid\":1,\"ts\":0.004,"
		"\"dur\":0.004,\"args\":{\"index\":1,\"bytesAdded\":8,\"tensorsAdded\":1,"
		"\"allocBytes\":8,\"allocCount\":1,\"freeBytes\":0,\"freeCount\":0,"
		"\"selfBytesAdded\":8,\"selfAllocBytes\":8,\"totalBytesSnapshot\":20,"
		"\"totalTensorsSnapshot\":2,\"peakBytes\":20,\"peakAdded\":8,\"retainedBytes\":0,"
		"\"retainedCount\":0,\"rssBegin\":8192,\"rssEnd\":8192,\"rssDelta\":0,"
		"\"phase\":\"load\",\"inputShapes\":[[2,3]]}},\n"
		"{\"ph\":\"X\",\"cat\":\"kernel\",\"name\":\"worker\",\"pid\":42,\"tid\":2,\"ts\":0.011,"
		"\"dur\":0.001,\"args\":{\"index\":2,\"bytesAdded\":0,\"tensorsAdded\":0,"
		"\"allocBytes\":0,\"allocCount\":0,\"freeBytes\":0,\"freeCount\":0,"
		"\"selfBytesAdded\":0,\"selfAllocBytes\":0,\"totalBytesSnapshot\":12,"
		"\"totalTensorsSnapshot\":1,\"peakBytes\":12,\"peakAdded\":0,\"retainedBytes\":0,"
		"\"retainedCount\":0,\"rssBegin\":8192,\"rssEnd\":8192,\"rssDelta\":0,"
		"\"phase\":\"load\"}},\n"
		"{\"ph\":\"C\",\"name\":\"heap\",\"pid\":42,\"ts\":0.000,\"args\":{\"live\":0}},\n"
		"{\"ph\":\"C\",\"name\":\"heap\",\"pid\":42,\"ts\":0.007,\"args\":{\"live\":20}},\n"
		"{\"ph\":\"C\",\"name\":\"heap\",\"pid\":42,\"ts\":0.008,\"args\":{\"live\":20}},\n"
		"{\"ph\":\"C\",\"name\":\"heap\",\"pid\":42,\"ts\":0.010,\"args\":{\"live\":12}},\n"
		"{\"ph\":\"C\",\"name\":\"heap\",\"pid\":42,\"ts\":0.012,\"args\":{\"live\":12}},\n"
		"{\"ph\":\"C\",\"name\":\"heap\",\"pid\":42,\"ts\":0.013,\"args\":{\"live\":12}},\n"
		"{\"ph\":\"C\",\"name\":\"rss\",\"pid\":42,\"ts\":0.007,"
		"\"args\":{\"anon\":4096,\"file\":4096,\"shmem\":0}},\n"
		"{\"ph\":\"i\",\"cat\":\"phase\",\"name\":\"load\",\"pid\":42,\"s\":\"p\",\"ts\":0.001,"
		"\"args\":{\"entries\":1,\"durationNs\":12,\"bytesAdded\":12,\"allocBytes\":20,"
		"\"peakBytes\":20,\"rssPeak\":8192}}\n"
		"],\"displayTimeUnit\":\"ns\",\"otherData\":{\"generator\":\"memprofd\","
		"\"formatVersion\":2,\"exe\":\"/usr/bin/tiny\",\"beginNs\":1000,\"endNs\":1013,"
		"\"truncated\":false,\"invocationsDropped\":0}}\n");
	v = validate_text(got);
	cr_expect_str_eq(v, "ok X=3 C=7 M=3 i=1 threads=2");
	free(v);
	free(got);
	mp_profile_free(p);
}

Test(chrome, empty_profile_whole_text)
{
	struct mp_profile *p = mp_profile_new();
	char *got, *v;

	cr_assert_not_null(p);
	got = chrome_render(p);
	cr_expect_str_eq(
		got,
		"{\"traceEvents\":[\n"
		"{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":0,\"tid\":0,\"args\":{\"name\":\"pid 0\"}},\n"
		"{\"ph\":\"C\",\"name\":\"heap\",\"pid\":0,\"ts\":0.000,\"args\":{\"live\":0}}\n"
		"],\"displayTimeUnit\":\"ns\",\"otherData\":{\"generator\":\"memprofd\","
		"\"formatVersion\":2,\"exe\":null,\"beginNs\":0,\"endNs\":0,\"truncated\":false,"
		"\"invocationsDropped\":0}}\n");
	v = validate_text(got);
	cr_expect_str_eq(v, "ok X=0 C=1 M=1 i=0 threads=0");
	free(v);
	free(got);
	mp_profile_free(p);
}

/* A hand-built model (as a file could hold it): names, and invocations
 * with the given tid, begin, end and flags. */
struct inv_spec {
	uint32_t name, tid;
	uint64_t begin, end;
	uint32_t flags;
};

static struct mp_profile *hand_built(const char *const *names, uint32_t n_names,
				     const struct inv_spec *v, uint32_t n, uint64_t w0, uint64_t w1)
{
	struct mp_profile *p = mp_profile_new();

	cr_assert_not_null(p);
	p->pid = 7;
	p->begin_ns = w0;
	p->end_ns = w1;
	p->names = calloc(n_names, sizeof(*p->names));
	p->invocations = calloc(n, sizeof(*p->invocations));
	cr_assert(p->names && p->invocations);
	for (uint32_t i = 0; i < n_names; i++)
		p->names[i] = strdup(names[i]);
	p->n_names = n_names;
	for (uint32_t i = 0; i < n; i++)
		p->invocations[i] = (struct mp_invocation){
			.name = v[i].name,
			.tid = v[i].tid,
			.parent = MP_NONE,
			.phase = MP_NONE,
			.flags = v[i].flags,
			.begin_ns = v[i].begin,
			.end_ns = v[i].end,
			.rss_begin = U,
			.rss_end = U,
		};
	p->n_invocations = n;
	return p;
}

/* Returns the "X" lines of a trace, each up to its "args", one per line. */
static char *slice_heads(const char *trace)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	cr_assert_not_null(f);
	for (const char *l = trace; (l = strstr(l, "{\"ph\":\"X\"")); l++) {
		const char *a = strstr(l, ",\"args\":");
		const char *m = strstr(l, "\"modelBeginNs\"");
		const char *eol = strchr(l, '\n');

		cr_assert(a && eol);
		fwrite(l, 1, (size_t)(a - l), f);
		if (m && m < eol)
			fprintf(f, " clamped");
		fputc('\n', f);
	}
	cr_assert_eq(fclose(f), 0);
	return buf;
}

/* Slices are clamped to the window and into the slice they begin in, so
 * every thread nests even when the model's times do not. */
Test(chrome, slices_clamped_and_nested)
{
	static const char *const names[] = { "a", "b", "c" };
	static const struct inv_spec v[] = {
		{ 0, 9, 500, 1500, MP_INV_F_OPEN_AT_ATTACH }, /* begins before the window */
		{ 1, 9, 1200, 1700, 0 }, /* ends after its parent */
		{ 2, 9, 1600, 2500, MP_INV_F_TRUNCATED }, /* ends after the window */
		{ 0, 3, 1100, 1100, 0 }, /* zero length, another thread */
		{ 1, 9, 1550, 1580, 0 }, /* listed after c, begins before it */
		{ 2, 9, 2000, 2000, 0 }, /* at the window's end */
		{ 0, 3, 900, 3000, 0 }, /* covers the whole window */
	};
	struct mp_profile *p = hand_built(names, 3, v, 7, 1000, 2000);
	char *got = chrome_render(p), *heads = slice_heads(got), *val;

	cr_expect_str_eq(
		heads,
		"{\"ph\":\"X\",\"cat\":\"kernel\",\"name\":\"a\",\"pid\":7,\"tid\":9,\"ts\":0.000,\"dur\":0.500 clamped\n"
		"{\"ph\":\"X\",\"cat\":\"kernel\",\"name\":\"b\",\"pid\":7,\"tid\":9,\"ts\":0.200,\"dur\":0.300 clamped\n"
		"{\"ph\":\"X\",\"cat\":\"kernel\",\"name\":\"c\",\"pid\":7,\"tid\":9,\"ts\":0.600,\"dur\":0.400 clamped\n"
		"{\"ph\":\"X\",\"cat\":\"kernel\",\"name\":\"a\",\"pid\":7,\"tid\":3,\"ts\":0.100,\"dur\":0.000\n"
		"{\"ph\":\"X\",\"cat\":\"kernel\",\"name\":\"b\",\"pid\":7,\"tid\":9,\"ts\":0.550,\"dur\":0.030\n"
		"{\"ph\":\"X\",\"cat\":\"kernel\",\"name\":\"c\",\"pid\":7,\"tid\":9,\"ts\":1.000,\"dur\":0.000\n"
		"{\"ph\":\"X\",\"cat\":\"kernel\",\"name\":\"a\",\"pid\":7,\"tid\":3,\"ts\":0.000,\"dur\":1.000 clamped\n");
	/* The flags and the model's own times stay visible. */
	cr_expect(strstr(got, "\"openAtAttach\":true,\"modelBeginNs\":500,\"modelEndNs\":1500}}"));
	cr_expect(strstr(got, "\"truncated\":true,\"modelBeginNs\":1600,\"modelEndNs\":2500}}"));
	val = validate_text(got);
	cr_expect_str_eq(val, "ok X=7 C=6 M=3 i=0 threads=2");
	free(val);
	free(heads);
	free(got);
	mp_profile_free(p);
}

/* Names come from the profiled process: every byte must come out as valid
 * JSON, and invalid indices must not be followed. */
Test(chrome, hostile_names_escaped)
{
	static const char *const names[] = { "q\"b\\s/", "ctl\x01\n\t\x7f", "bad\xff\xfe\xc3" };
	static const struct inv_spec v[] = {
		{ 0, 1, 10, 20, 0 },
		{ 1, 1, 11, 19, 0 },
		{ 2, 2, 12, 13, 0 },
		{ 99, 2, 14, 15, 0 }, /* no such name */
	};
	struct mp_profile *p = hand_built(names, 3, v, 4, 0, 100);
	char *got, *val;

	p->pid = 1;
	cr_assert_eq(mp_profile_set_process(p, 1, "/x/e\"vil\x1b[2J", NULL, NULL), 0);
	p->n_phases = 1;
	p->phases = calloc(1, sizeof(*p->phases));
	cr_assert_not_null(p->phases);
	p->phases[0].name = strdup("ph\x02");
	got = chrome_render(p);
	cr_expect(strstr(got, "\"name\":\"q\\\"b\\\\s/\""), "%s", got);
	cr_expect(strstr(got, "\"name\":\"ctl\\u0001\\n\\t\\u007f\""), "%s", got);
	cr_expect(strstr(got, "\"name\":\"bad\\u00ff\\u00fe\\u00c3\""), "%s", got);
	cr_expect(strstr(got, "\"name\":\"(invalid)\""), "%s", got);
	cr_expect(strstr(got, "\"args\":{\"name\":\"e\\\"vil\\u001b[2J\"}"), "%s", got);
	cr_expect(strstr(got, "\"name\":\"ph\\u0002\""), "%s", got);
	val = validate_text(got);
	cr_expect_str_eq(val, "ok X=4 C=6 M=3 i=1 threads=2");
	free(val);
	free(got);
	mp_profile_free(p);
}

/* Each RSS point records the process's live heap bytes at that moment. */
Test(chrome, rss_points_record_heap_live)
{
	struct stream s;
	struct mp_profile *p;
	struct block a, b;

	stream_init(&s, NULL);
	sample(&s, 4096); /* 1001 */
	a = alloc(&s, 1, 100); /* 1002 */
	sample(&s, 8192); /* 1003 */
	b = alloc(&s, 2, 50); /* 1004 */
	sample(&s, 8192); /* 1005 */
	release(&s, 1, &a); /* 1006 */
	sample(&s, 4096); /* 1007 */
	release(&s, 2, &b); /* 1008 */
	p = finish(&s);
	struct mp_rss_point pts[] = {
		{ 1001, 4096, 2048, 2048, 0, 0, U, 0, 0 },
		{ 1003, 8192, 4096, 4096, 0, 0, U, 100, 0 },
		{ 1005, 8192, 4096, 4096, 0, 0, U, 150, 0 },
		{ 1007, 4096, 2048, 2048, 0, 0, U, 50, 0 },
	};
	EXPECT_ARRAY("rss", p->rss, p->n_rss, pts, 4, expect_rss_point_eq);
	mp_profile_free(p);
}

/* heap_live survives memprof.proto; a file whose writer did not record it
 * reads as unknown (not 0), and the trace then leaves those points out. */
Test(chrome, heap_live_stored_and_unknown_in_older_files)
{
	struct mp_profile *p = tiny(), *q = NULL, *old = NULL;
	Memprof__Profile *m;
	const char *why = NULL;
	uint8_t *buf, *buf2;
	size_t len, len2;
	char *text;

	cr_assert_eq(mp_profile_encode(p, &buf, &len), 0);
	cr_assert_eq(mp_profile_decode(buf, len, &q, &why), 0, "%s", why);
	expect_profile_eq(q, p);
	cr_expect_eq(q->rss[0].heap_live, 20);

	m = memprof__profile__unpack(NULL, len, buf);
	cr_assert_not_null(m);
	cr_assert(m->rss && m->rss->heap_live_recorded);
	m->rss->heap_live_recorded = false;
	len2 = memprof__profile__get_packed_size(m);
	buf2 = malloc(len2);
	cr_assert_not_null(buf2);
	memprof__profile__pack(m, buf2);
	memprof__profile__free_unpacked(m, NULL);
	cr_assert_eq(mp_profile_decode(buf2, len2, &old, &why), 0, "%s", why);
	struct mp_rss_point want = { 1007, 8192, 4096, 4096, 0, 0, U, U, 0 };
	EXPECT_ARRAY("rss", old->rss, old->n_rss, &want, 1, expect_rss_point_eq);
	text = chrome_render(old);
	cr_expect_null(strstr(text, "\"ts\":0.007,\"args\":{\"live\""), "%s", text);
	cr_expect(strstr(text, "\"ts\":0.008,\"args\":{\"live\":20}"), "%s", text);
	free(text);
	free(buf);
	free(buf2);
	mp_profile_free(p);
	mp_profile_free(q);
	mp_profile_free(old);
}

/* A larger stream (threads, nesting, a worker charged across threads,
 * phases re-entered, many samples) passes every viewer check. */
Test(chrome, busy_profile_valid)
{
	struct mp_correlator_opts o = { .max_rss_points = 8 };
	struct stream s;
	struct mp_profile *p;
	struct block blk[64];
	char *text, *val;
	int nb = 0;

	stream_init(&s, &o);
	for (int round = 0; round < 4; round++) {
		phase(&s, round % 2 ? "infer" : "load");
		kbegin(&s, 1, "step");
		for (uint32_t t = 1; t <= 3; t++) {
			kbegin(&s, t, "op");
			blk[nb++] = alloc(&s, t, 100 * t);
			kbegin(&s, t, "sub");
			blk[nb++] = alloc(&s, t, 10);
			sample(&s, 4096 * (uint64_t)(nb + 1));
			kend(&s, t);
			alloc(&s, 4, 7); /* worker without a kernel */
			kend(&s, t);
		}
		release(&s, 2, &blk[--nb]);
		kend(&s, 1);
	}
	kbegin(&s, 5, "left_open");
	p = finish(&s);
	cr_assert_eq(mp_profile_set_process(p, 1, "/bin/busy", NULL, NULL), 0);
	text = chrome_render(p);
	val = validate_text(text);
	/* X: 4 × (step + 3 × (op + sub)) + left_open. C: 12 samples kept at
	 * stride 2 = 6 rss; heap: begin, 6 samples, 29 kernel ends and the
	 * end, where left_open also ends (one value per instant) = 36. */
	cr_expect_str_eq(val, "ok X=29 C=42 M=5 i=2 threads=4");
	free(val);
	free(text);
	mp_profile_free(p);
}

/* ---- allocation sites with stacks ---- */

struct loc_spec {
	uint64_t addr;
	uint32_t object;
	uint64_t rel_addr;
	const char *function; /* NULL: no symbol */
	const char *inlined[2]; /* innermost first, NULL-terminated */
};

static void add_locations(struct mp_profile *p, const char *const *objects, uint32_t n_objects,
			  const struct loc_spec *l, uint32_t n)
{
	p->objects = calloc(n_objects, sizeof(*p->objects));
	p->locations = calloc(n, sizeof(*p->locations));
	cr_assert(p->objects && p->locations);
	for (uint32_t i = 0; i < n_objects; i++)
		p->objects[i] = (struct mp_object){ .start = 0x1000 * i,
						    .limit = 0x1000 * (i + 1),
						    .path = strdup(objects[i]) };
	p->n_objects = n_objects;
	for (uint32_t i = 0; i < n; i++) {
		struct mp_location *m = &p->locations[i];

		*m = (struct mp_location){ .addr = l[i].addr,
					   .object = l[i].object,
					   .rel_addr = l[i].rel_addr,
					   .function =
						   l[i].function ? strdup(l[i].function) : NULL };
		while (m->n_inlined < 2 && l[i].inlined[m->n_inlined])
			m->n_inlined++;
		if (m->n_inlined) {
			m->inlined = calloc(m->n_inlined, sizeof(*m->inlined));
			cr_assert_not_null(m->inlined);
			for (uint32_t k = 0; k < m->n_inlined; k++)
				m->inlined[k].function = strdup(l[i].inlined[k]);
		}
	}
	p->n_locations = n;
}

static void add_stacks(struct mp_profile *p, const uint64_t *const *frames,
		       const uint32_t *n_frames, const uint32_t *flags, uint32_t n)
{
	p->stacks = calloc(n, sizeof(*p->stacks));
	cr_assert_not_null(p->stacks);
	for (uint32_t i = 0; i < n; i++) {
		p->stacks[i].n_frames = n_frames[i];
		p->stacks[i].flags = flags[i];
		p->stacks[i].frames = malloc(n_frames[i] * sizeof(uint64_t));
		cr_assert_not_null(p->stacks[i].frames);
		memcpy(p->stacks[i].frames, frames[i], n_frames[i] * sizeof(uint64_t));
	}
	p->n_stacks = n;
	p->stack_depth = 64;
}

static void add_sites(struct mp_profile *p, const struct mp_site *s, uint32_t n)
{
	p->sites = calloc(n, sizeof(*p->sites));
	cr_assert_not_null(p->sites);
	memcpy(p->sites, s, n * sizeof(*s));
	p->n_sites = n;
}

/* A profile taken with stacks: kernels conv (twice) and relu on thread 9,
 * five sites with known stacks in an executable and a library, with an
 * inlined pair, recursion, a symbol-less frame, an unknown address, a site
 * without a stack and two sites sharing one. */
static struct mp_profile *with_stacks(void)
{
	static const char *const names[] = { "conv", "relu" };
	static const struct inv_spec v[] = {
		{ 0, 9, 100, 200, 0 },
		{ 1, 9, 300, 400, 0 },
		{ 0, 9, 500, 600, 0 },
	};
	static const char *const objects[] = { "/usr/bin/app", "/lib/libx.so" };
	static const struct loc_spec locs[] = {
		{ 0x1000, 0, 0x1000, "main", { NULL } },
		{ 0x1100, 0, 0x1100, "run", { "helper_inner", "helper_outer" } },
		{ 0x2000, 1, 0x0, "lib_fn", { NULL } },
		{ 0x2100, 1, 0x100, NULL, { NULL } },
		{ 0x3000, 1, 0x1000, "recurse", { NULL } },
	};
	static const uint64_t s1[] = { 0x2000, 0x1100, 0x1000 };
	static const uint64_t s2[] = { 0x3000, 0x3000, 0x3000, 0x1000 };
	static const uint64_t s3[] = { 0x9999, 0x2100, 0x1000 };
	static const uint64_t *const stacks[] = { s1, s2, s3 };
	static const uint32_t n_frames[] = { 3, 4, 3 }, flags[] = { 0, 0, MP_STACK_F_TRUNCATED };
	const struct mp_site sites[] = {
		{ .caller = 0x2000,
		  .name = 0,
		  .phase = MP_NONE,
		  .tid = 9,
		  .alloc_objects = 2,
		  .alloc_space = 100,
		  .inuse_objects = 1,
		  .inuse_space = 50,
		  .stack = 1 },
		{ .caller = 0x3000,
		  .name = 1,
		  .phase = MP_NONE,
		  .tid = 11,
		  .alloc_objects = 1,
		  .alloc_space = 64,
		  .stack = 2 },
		{ .caller = 0x9999,
		  .name = MP_NONE,
		  .phase = MP_NONE,
		  .tid = 12,
		  .alloc_objects = 1,
		  .alloc_space = 8,
		  .stack = 3 },
		{ .caller = 0x1100,
		  .name = 0,
		  .phase = MP_NONE,
		  .tid = 9,
		  .alloc_objects = 1,
		  .alloc_space = 5,
		  .stack = 0 },
		{ .caller = 0x2000,
		  .name = 0,
		  .phase = MP_NONE,
		  .tid = 10,
		  .alloc_objects = 1,
		  .alloc_space = 7,
		  .stack = 1 },
	};
	struct mp_profile *p = hand_built(names, 2, v, 3, 0, 1000);

	add_locations(p, objects, 2, locs, 5);
	add_stacks(p, stacks, n_frames, flags, 3);
	add_sites(p, sites, 5);
	return p;
}

/* Every site event's sf resolves, through stackFrames alone (read by
 * Python's json module), to exactly its stack, inlined frames expanded;
 * events sit at the end of their kernel's last slice on its thread, or at
 * the window's end; shared frames are written once. */
Test(chrome, site_stacks_resolve)
{
	struct mp_profile *p = with_stacks();
	char *got = chrome_render(p), *val, *sites;

	val = validate_text(got);
	/* Frames: main, run, helper_outer, helper_inner, lib_fn; recurse ×3;
	 * +0x100, 0x9999; run, helper_outer, helper_inner as a root (the
	 * caller-only site). Written once per stack: 20. */
	cr_expect_str_eq(val, "ok X=3 C=5 M=2 i=0 threads=1 sites=5 frames=13");
	sites = sites_of_text(got, NULL);
	cr_expect_str_eq(sites, "(none)|8|1|12|1.000|0x9999;+0x100;main;\n"
				"conv|100|2|9|0.600|lib_fn;helper_inner;helper_outer;run;main;\n"
				"conv|5|1|9|0.600|helper_inner;helper_outer;run;\n"
				"conv|7|1|9|0.600|lib_fn;helper_inner;helper_outer;run;main;\n"
				"relu|64|1|9|0.400|recurse;recurse;recurse;main;\n");
	/* The two sites with one stack refer to one frame. */
	cr_expect(strstr(got, "\"name\":\"lib_fn\",\"pid\":7,\"tid\":9,\"s\":\"t\",\"ts\":0.600,"
			      "\"sf\":5,\"args\":{\"kernel\":\"conv\",\"allocBytes\":100,"),
		  "%s", got);
	cr_expect(strstr(got, "\"sf\":5,\"args\":{\"kernel\":\"conv\",\"allocBytes\":7,"), "%s",
		  got);
	cr_expect(strstr(got, "\"5\":{\"name\":\"lib_fn\",\"category\":\"libx.so\","
			      "\"parent\":\"4\"}"),
		  "%s", got);
	cr_expect(strstr(got, "\"1\":{\"name\":\"main\",\"category\":\"app\"}"), "%s", got);
	cr_expect(strstr(got, "\"kernel\":null,\"allocBytes\":8,\"allocCount\":1,\"inuseBytes\":0,"
			      "\"inuseCount\":0,\"allocTid\":12,\"caller\":\"0x9999\","
			      "\"stackTruncated\":true}"),
		  "%s", got);
	cr_expect(strstr(got, "\"allocTid\":9,\"caller\":\"0x1100\",\"callerOnly\":true}"), "%s",
		  got);
	free(sites);
	free(val);
	free(got);
	mp_profile_free(p);
}

/* Without stacks (stack_depth 0, no stack table) the trace is as before:
 * no site events, no stackFrames. */
Test(chrome, no_site_events_without_stacks)
{
	struct mp_profile *p = with_stacks();
	char *got, *val;

	for (uint32_t i = 0; i < p->n_stacks; i++)
		free(p->stacks[i].frames);
	free(p->stacks);
	p->stacks = NULL;
	p->n_stacks = 0;
	p->stack_depth = 0;
	for (uint32_t i = 0; i < p->n_sites; i++)
		p->sites[i].stack = 0;
	got = chrome_render(p);
	cr_expect_null(strstr(got, "stackFrames"), "%s", got);
	cr_expect_null(strstr(got, "\"cat\":\"site\""), "%s", got);
	val = validate_text(got);
	cr_expect_str_eq(val, "ok X=3 C=5 M=2 i=0 threads=1");
	free(val);
	free(got);
	mp_profile_free(p);
}

/* Frame names and object paths come from the target's ELF symbols: quotes,
 * backslashes, control bytes and invalid UTF-8 come out as valid JSON that
 * reads back to the same bytes (invalid UTF-8 as U+0000..U+00FF); a stack
 * index past the table falls back to the caller. */
Test(chrome, hostile_frame_names_escaped)
{
	struct mp_profile *p = with_stacks();
	char *got, *val, *sites;

	free(p->locations[0].function);
	p->locations[0].function = strdup("ma\"in\\");
	free(p->locations[2].function);
	p->locations[2].function = strdup("ctl\x01\n\t\x7f\x1b[2J");
	free(p->locations[1].inlined[0].function);
	p->locations[1].inlined[0].function = strdup("bad\xff\xfe\xc3(");
	free(p->locations[1].inlined[1].function);
	p->locations[1].inlined[1].function = NULL;
	free(p->objects[1].path);
	p->objects[1].path = strdup("/lib/e\"vil\x02\xc0\xaf.so");
	p->sites[1].stack = 99; /* no such stack */
	got = chrome_render(p);
	val = validate_text(got);
	cr_expect_str_eq(val, "ok X=3 C=5 M=2 i=0 threads=1 sites=5 frames=11");
	cr_expect(strstr(got, "{\"name\":\"ma\\\"in\\\\\",\"category\":\"app\"}"), "%s", got);
	cr_expect(strstr(got, "{\"name\":\"ctl\\u0001\\n\\t\\u007f\\u001b[2J\","
			      "\"category\":\"e\\\"vil\\u0002\\u00c0\\u00af.so\""),
		  "%s", got);
	cr_expect(strstr(got, "{\"name\":\"bad\\u00ff\\u00fe\\u00c3(\",\"category\":\"app\""), "%s",
		  got);
	sites = sites_of_text(got, NULL);
	cr_expect_str_eq(
		sites, "(none)|8|1|12|1.000|0x9999;+0x100;ma\"in\\\\;\n"
		       "conv|100|2|9|0.600|ctl\\x01\\n\\t\\x7f\\x1b[2J;bad\\xff\\xfe\\xc3(;??;run;"
		       "ma\"in\\\\;\n"
		       "conv|5|1|9|0.600|bad\\xff\\xfe\\xc3(;??;run;\n"
		       "conv|7|1|9|0.600|ctl\\x01\\n\\t\\x7f\\x1b[2J;bad\\xff\\xfe\\xc3(;??;run;"
		       "ma\"in\\\\;\n"
		       "relu|64|1|9|0.400|recurse;\n");
	free(sites);
	free(val);
	free(got);
	mp_profile_free(p);
}
