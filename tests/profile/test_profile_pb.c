/* SPDX-License-Identifier: MIT */
/*
 * memprof.proto storage: a profile using every part of the model survives
 * write → read identical; corrupted, truncated and inconsistent files are
 * refused with -EBADMSG and a reason.
 */
#include <fcntl.h>
#include <math.h>
#include <unistd.h>
#include <zlib.h>

#include "helpers.h"
#include "memprof.pb-c.h"
#include "outfile.h"
#include "profile_pb.h"

#define U MP_UNKNOWN

static const char *resolve(void *ctx, uint64_t addr)
{
	(void)ctx;
	if (addr < 0x2000)
		return "/usr/lib/libxnnpack.so.1";
	if (addr < 0x3000)
		return "/opt/app/bin/runner";
	return NULL;
}

static void sample(struct stream *s, uint64_t rss, uint64_t pss)
{
	struct mp_rss_sample smp = {
		.ts_ns = tick(s),
		.vm_rss = rss,
		.rss_anon = rss - 4096,
		.rss_file = 4096,
		.rss_shmem = 0,
		.vm_hwm = rss + 8192,
		.vm_swap = 0,
		.pss = pss,
	};

	cr_assert_eq(mp_correlator_on_rss(s->c, &smp), 0);
}

static void stat_ev(struct stream *s, uint32_t tid, uint32_t member, int64_t v)
{
	struct mp_rss_stat_event ev = {
		.ts_ns = tick(s), .tid = tid, .member = member, .value = v
	};

	cr_assert_eq(mp_correlator_on_rss_stat(s->c, &ev), 0);
}

/* A profile with every kind of content. */
static struct mp_profile *rich_profile(void)
{
	struct mp_correlator_opts o = { .resolve_owner = resolve,
					.max_invocations = 5,
					.max_rss_points = 4 };
	struct mp_record open = { .type = MP_REC_KERNEL_BEGIN,
				  .flags = MP_REC_F_OPEN_AT_ATTACH,
				  .tid = 1,
				  .ts_ns = 10,
				  .name = "session" };
	struct stream s;
	struct mp_profile *p;
	struct block b1, b2;

	stream_init(&s, &o);
	cr_assert_eq(mp_correlator_add_owner_rule(s.c, "libxnn*=xnnpack"), 0);
	cr_assert_eq(mp_correlator_on_record(s.c, &open), 0);
	stat_ev(&s, 1, MP_RSS_ANON, 1 << 20);
	sample(&s, 8 << 20, U);
	phase(&s, "load");
	tag_begin(&s, 1, "weights");
	b1 = alloc_from(&s, 1, 4096, 0x1100);
	tag_end(&s, 1);
	sample(&s, 9 << 20, 7 << 20);
	phase(&s, "inference");
	kbegin(&s, 1, "conv");
	shape(&s, 1, true, 4, (int64_t)1, (int64_t)3, (int64_t)224, (int64_t)224);
	shape(&s, 1, true, 4, (int64_t)64, (int64_t)3, (int64_t)7, (int64_t)7);
	kbegin(&s, 1, "im2col");
	tag_begin(&s, 1, "activations");
	b2 = alloc_from(&s, 2, 100000, 0x2100);
	stat_ev(&s, 2, MP_RSS_ANON, (1 << 20) + 102400);
	tag_end(&s, 1);
	kend(&s, 1);
	shape(&s, 1, false, 4, (int64_t)1, (int64_t)64, (int64_t)-1, (int64_t)INT64_MIN);
	release(&s, 1, &b2);
	kend(&s, 1);
	kend(&s, 9); /* unmatched */
	for (int i = 0; i < 4; i++) {
		sample(&s, (10 + i) << 20, U);
		kbegin(&s, 3, "relu");
		alloc_from(&s, 3, 8 + i, 0x5000);
		kend(&s, 3);
	}
	shape(&s, 5, true, 1, (int64_t)1); /* orphan */
	unknown_free(&s, 1, 0x99);
	release(&s, 1, &b1);
	kbegin(&s, 4, "never_ends");
	p = finish(&s);
	cr_assert_eq(mp_profile_set_process(p, 1234, "/opt/app/bin/runner", "deadbeef00",
					    "runner --model m.pte"),
		     0);
	p->rss_interval_ns = 10000000;
	p->pss_interval_ns = 1000000000;
	p->rss_exact = true;
	p->trace_mode = MP_TRACE_SAMPLED;
	p->sample_bytes = 4096;
	p->duty_on_ns = 10000000;
	p->duty_period_ns = 100000000;
	p->duty_active_ns = 250000000;
	p->drops_ring = 2;
	p->drops_bpf = 3;
	/* Hardening fields (lost markers, exec, corruption) travel too. */
	p->marker_gaps = 4;
	p->corruption = MP_CORRUPT_RING_HEADER | MP_CORRUPT_RING_RECORDS;
	p->exec_count = 3;
	p->execs = calloc(2, sizeof(*p->execs));
	cr_assert_not_null(p->execs);
	p->execs[0] = (struct mp_exec){ .ts_ns = 77, .tid = 9, .kernels_closed = 2 };
	p->execs[1] = (struct mp_exec){ .ts_ns = 78, .tid = 9, .path = strdup("/bin/true") };
	p->n_execs = 2;
	p->invocations[1].flags |= MP_INV_F_MARKERS_LOST | MP_INV_F_EXEC;
	p->kernels[0].markers_lost = 5;
	/* Sanity: the content the round trip must carry is really there. */
	cr_assert_eq(p->n_invocations, 5);
	cr_assert_eq(p->invocations_dropped, 3);
	cr_assert_eq(p->n_phases, 2);
	cr_assert_eq(p->n_owners, 3);
	cr_assert_eq(p->n_tags, 3);
	cr_assert_gt(p->n_rss, 1);
	cr_assert(p->truncated);
	return p;
}

Test(profile_pb, round_trip_bare_and_file)
{
	struct mp_profile *p = rich_profile(), *q = NULL, *r = NULL;
	const char *why = "unset";
	uint8_t *buf;
	size_t len;

	cr_assert_eq(mp_profile_encode(p, &buf, &len), 0);
	cr_assert_eq(mp_profile_decode(buf, len, &q, &why), 0, "%s", why);
	free(buf);
	expect_profile_eq(q, p);

	cr_assert_eq(mp_profile_file_encode(p, &buf, &len), 0);
	cr_assert_eq(mp_profile_file_decode(buf, len, &r, &why), 0, "%s", why);
	free(buf);
	expect_profile_eq(r, p);
	mp_profile_free(p);
	mp_profile_free(q);
	mp_profile_free(r);
}

Test(profile_pb, save_load)
{
	struct mp_profile *p = rich_profile(), *q = NULL;
	char dir[] = "/tmp/memprof-test-XXXXXX", path[64];
	const char *why = NULL;

	cr_assert_not_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/p.memprof", dir);
	cr_assert_eq(mp_profile_save(p, path), 0);
	cr_assert_eq(mp_profile_load(path, &q, &why), 0, "%s", why ? why : "");
	expect_profile_eq(q, p);
	cr_expect_eq(mp_profile_load(dir, &q, &why), -EBADMSG);
	unlink(path);
	cr_expect_eq(mp_profile_load(path, &q, &why), -ENOENT);
	rmdir(dir);
	mp_profile_free(p);
	mp_profile_free(q);
}

/* Every truncation and every single-bit corruption of a file is refused. */
/* A message of 8 MiB or more is checksummed in two halves on two threads
 * (the halves' CRCs combined): the header holds zlib's CRC-32 of the
 * whole, as for a small one, also with a byte changed in either half. */
Test(profile_pb, checksum_of_a_large_message)
{
	const size_t len = (9u << 20) + 12345;
	uint8_t *m = malloc(len), hdr[MP_PROFILE_FILE_HEADER];
	uint64_t x = 88172645463325252ull;
	uint32_t got, want;

	cr_assert_not_null(m);
	for (size_t i = 0; i < len; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		m[i] = (uint8_t)x;
	}
	for (int k = 0; k < 3; k++) {
		if (k)
			m[k == 1 ? 100 : len - 100] ^= 0x20;
		mp_profile_file_header(m, len, hdr);
		memcpy(&got, hdr + 12, 4);
		want = (uint32_t)crc32(crc32(0, Z_NULL, 0), m, (uInt)len);
		cr_assert_eq(got, want, "case %d: %08x, zlib %08x", k, got, want);
	}
	free(m);
}

Test(profile_pb, corrupted_and_truncated_files_refused)
{
	struct mp_profile *p = rich_profile(), *q;
	const char *why;
	uint8_t *buf;
	size_t len;

	cr_assert_eq(mp_profile_file_encode(p, &buf, &len), 0);
	for (size_t l = 0; l < len; l++) {
		why = NULL;
		q = NULL;
		cr_expect_eq(mp_profile_file_decode(buf, l, &q, &why), -EBADMSG,
			     "truncated at %zu accepted", l);
		cr_expect_not_null(why);
		cr_expect_null(q);
	}
	for (size_t i = 0; i < len; i++) {
		for (int bit = 0; bit < 8; bit += 3) {
			int r;

			buf[i] ^= 1u << bit;
			why = NULL;
			q = NULL;
			r = mp_profile_file_decode(buf, len, &q, &why);
			cr_expect(r == -EBADMSG || r == -EPROTONOSUPPORT,
				  "flip byte %zu bit %d: %d", i, bit, r);
			cr_expect_not_null(why);
			cr_expect_null(q);
			buf[i] ^= 1u << bit;
		}
	}
	buf = realloc(buf, len + 1);
	buf[len] = 0;
	cr_expect_eq(mp_profile_file_decode(buf, len + 1, &q, &why), -EBADMSG);
	cr_expect_str_eq(why, "trailing bytes after the profile");
	free(buf);
	mp_profile_free(p);
}

/* Bare messages that protobuf accepts but that break the model's rules. */
static int decode_msg(const Memprof__Profile *m, const char **why)
{
	size_t len = memprof__profile__get_packed_size(m);
	uint8_t *buf = malloc(len + 1);
	struct mp_profile *q = NULL;
	int r;

	memprof__profile__pack(m, buf);
	r = mp_profile_decode(buf, len, &q, why);
	free(buf);
	mp_profile_free(q);
	return r;
}

Test(profile_pb, inconsistent_messages_refused)
{
	char *names[] = { "k" };
	Memprof__Pool pool = MEMPROF__POOL__INIT, *pools[] = { &pool };
	Memprof__Invocation inv = MEMPROF__INVOCATION__INIT, *invs[] = { &inv };
	Memprof__Kernel ker = MEMPROF__KERNEL__INIT, *kers[] = { &ker };
	Memprof__Bucket bk = MEMPROF__BUCKET__INIT, *bks[] = { &bk };
	int64_t dims[9] = { 0 };
	Memprof__Shape shp = MEMPROF__SHAPE__INIT, *shps[] = { &shp };
	Memprof__Profile m = MEMPROF__PROFILE__INIT;
	const char *why;

	pool.name = "(unknown)";
	m.format_version = 1;
	m.n_kernel_names = 1;
	m.kernel_names = names;
	m.n_owners = 1;
	m.owners = pools;
	m.n_tags = 1;
	m.tags = pools;
	m.n_invocations = 1;
	m.invocations = invs;
	m.n_kernels = 1;
	m.kernels = kers;
	inv.parent = MP_NONE;
	inv.phase = MP_NONE;
	cr_assert_eq(decode_msg(&m, &why), 0, "%s", why);

	m.format_version = 0;
	cr_expect_eq(decode_msg(&m, &why), -EBADMSG);
	m.format_version = 99;
	cr_expect_eq(decode_msg(&m, &why), -EPROTONOSUPPORT);
	m.format_version = 1;

	inv.name = 1;
	cr_expect_eq(decode_msg(&m, &why), -EBADMSG);
	cr_expect_str_eq(why, "invocation names no kernel");
	inv.name = 0;
	inv.parent = 0; /* itself: a cycle */
	cr_expect_eq(decode_msg(&m, &why), -EBADMSG);
	cr_expect_str_eq(why, "invocation parent is not an earlier invocation");
	inv.parent = MP_NONE;
	inv.phase = 0;
	cr_expect_eq(decode_msg(&m, &why), -EBADMSG);
	cr_expect_str_eq(why, "invocation phase out of range");
	inv.phase = MP_NONE;

	shp.n_dims = 9;
	shp.dims = dims;
	inv.n_input_shapes = 1;
	inv.input_shapes = shps;
	cr_expect_eq(decode_msg(&m, &why), -EBADMSG);
	cr_expect_str_eq(why, "shape rank above the maximum");
	inv.n_input_shapes = 0;

	bk.id = 1;
	inv.n_owners = 1;
	inv.owners = bks;
	cr_expect_eq(decode_msg(&m, &why), -EBADMSG);
	cr_expect_str_eq(why, "owner/tag bucket refers to no owner/tag");
	inv.n_owners = 0;
	ker.n_tags = 1;
	ker.tags = bks;
	cr_expect_eq(decode_msg(&m, &why), -EBADMSG);
	ker.n_tags = 0;

	ker.name = 3;
	cr_expect_eq(decode_msg(&m, &why), -EBADMSG);
	cr_expect_str_eq(why, "kernel aggregate names no kernel");
	ker.name = 0;
	cr_expect_eq(decode_msg(&m, &why), 0);

	/* The tracing mode and its parameters. */
	Memprof__Sampling smp = MEMPROF__SAMPLING__INIT;
	const struct {
		int mode;
		uint64_t sample_bytes, on, period, active;
		const char *why; /* NULL: accepted */
	} modes[] = {
		{ MEMPROF__TRACE_MODE__TRACE_MODE_PRECISE, 0, 0, 0, 0, NULL },
		{ MEMPROF__TRACE_MODE__TRACE_MODE_SAMPLED, 512, 1, 2, 7, NULL },
		{ MEMPROF__TRACE_MODE__TRACE_MODE_RSS, 0, 0, 0, 0, NULL },
		{ 3, 0, 0, 0, 0, "unknown tracing mode (written by a newer memprofd?)" },
		{ -1, 0, 0, 0, 0, "unknown tracing mode (written by a newer memprofd?)" },
		{ MEMPROF__TRACE_MODE__TRACE_MODE_SAMPLED, 0, 0, 0, 0,
		  "sampled mode without a sampling interval" },
		{ MEMPROF__TRACE_MODE__TRACE_MODE_PRECISE, 4096, 0, 0, 0,
		  "sampling interval set outside sampled mode" },
		{ MEMPROF__TRACE_MODE__TRACE_MODE_PRECISE, 0, 5, 5, 0,
		  "duty cycle ON not within (0, PERIOD)" },
		{ MEMPROF__TRACE_MODE__TRACE_MODE_PRECISE, 0, 0, 5, 0,
		  "duty cycle ON not within (0, PERIOD)" },
		{ MEMPROF__TRACE_MODE__TRACE_MODE_PRECISE, 0, 1, 0, 0,
		  "duty cycle ON or active time without a PERIOD" },
		{ MEMPROF__TRACE_MODE__TRACE_MODE_PRECISE, 0, 0, 0, 1,
		  "duty cycle ON or active time without a PERIOD" },
		{ MEMPROF__TRACE_MODE__TRACE_MODE_RSS, 0, 1, 5, 1,
		  "duty cycle in rss mode (no allocator probes to cycle)" },
	};
	m.sampling = &smp;
	for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++) {
		smp.trace_mode = modes[i].mode;
		smp.sample_bytes = modes[i].sample_bytes;
		smp.duty_on_ns = modes[i].on;
		smp.duty_period_ns = modes[i].period;
		smp.duty_active_ns = modes[i].active;
		why = NULL;
		if (modes[i].why) {
			cr_expect_eq(decode_msg(&m, &why), -EBADMSG, "modes[%zu]", i);
			cr_expect_str_eq(why ? why : "(null)", modes[i].why, "modes[%zu]", i);
		} else {
			cr_expect_eq(decode_msg(&m, &why), 0, "modes[%zu]: %s", i, why);
		}
	}
	m.sampling = NULL;

	cr_expect_eq(mp_profile_decode("\xff\xff\xff", 3, &(struct mp_profile *){ NULL }, &why),
		     -EBADMSG);
	cr_expect_str_eq(why, "corrupted or truncated protobuf data");
}

/* A decoded profile renders like the original (the renderers only read
 * the model). */
Test(profile_pb, decoded_renders_identically)
{
	struct mp_profile *p = rich_profile(), *q = NULL;
	uint8_t *buf;
	size_t len;
	char *a, *b;

	cr_assert_eq(mp_profile_file_encode(p, &buf, &len), 0);
	cr_assert_eq(mp_profile_file_decode(buf, len, &q, NULL), 0);
	free(buf);
	for (int f = MP_REPORT_TABLE; f <= MP_REPORT_TFJS; f++) {
		a = render(p, f, NULL);
		b = render(q, f, NULL);
		cr_expect_str_eq(a, b);
		free(a);
		free(b);
	}
	a = render(p, MP_REPORT_TFJS, "conv");
	b = render(q, MP_REPORT_TFJS, "conv");
	cr_expect_str_eq(a, b);
	cr_expect_str_eq(a,
			 "{\"newBytes\":0,\"newTensors\":0,\"peakBytes\":104096,\"kernels\":["
			 "{\"name\":\"im2col\",\"bytesAdded\":100000,\"totalBytesSnapshot\":104096,"
			 "\"tensorsAdded\":1,\"totalTensorsSnapshot\":2,\"inputShapes\":[],"
			 "\"outputShapes\":[]}]}\n");
	free(a);
	free(b);
	mp_profile_free(p);
	mp_profile_free(q);
}

/* Symbols as mp_symbolize_profile() leaves them, so the clone covers
 * every array of the model. */
static void add_symbols(struct mp_profile *p)
{
	p->n_objects = 2;
	p->objects = calloc(2, sizeof(*p->objects));
	p->objects[0] = (struct mp_object){ .start = 0x1000,
					    .limit = 0x2000,
					    .path = strdup("/usr/lib/libxnnpack.so.1"),
					    .build_id = strdup("abcdef"),
					    .flags = MP_OBJ_F_FUNCTIONS };
	p->objects[1] = (struct mp_object){ .start = 0x2000,
					    .limit = 0x3000,
					    .file_offset = 0x1000,
					    .path = strdup("/opt/app/bin/runner") };
	p->n_locations = 2;
	p->locations = calloc(2, sizeof(*p->locations));
	p->locations[0] = (struct mp_location){
		.addr = 0x1100, .object = 0, .rel_addr = 0x100, .function = strdup("xnn_alloc")
	};
	p->locations[1] = (struct mp_location){ .addr = 0x2100,
						.object = 1,
						.rel_addr = 0x1100,
						.function = strdup("run"),
						.file = strdup("run.c"),
						.line = 42 };
}

/* A clone is the same profile (it encodes to the same bytes), owns all of
 * its memory (it outlives the original), and keeps the implied capacity
 * of the small arrays (the correlator extends a snapshot's buckets). */
Test(profile_pb, clone_is_deep_and_identical)
{
	struct mp_profile *p = rich_profile(), *q = NULL;
	uint8_t *a, *b;
	size_t alen, blen;
	bool extended = false;

	add_symbols(p);
	/* Call stacks and inlined frames are owned by the clone too. */
	p->n_stacks = 1;
	p->stacks = calloc(1, sizeof(*p->stacks));
	p->stacks[0] = (struct mp_stack){ .n_frames = 2, .flags = MP_STACK_F_TRUNCATED };
	p->stacks[0].frames = calloc(2, sizeof(uint64_t));
	p->stacks[0].frames[0] = 0x1100;
	p->stacks[0].frames[1] = 0x2100;
	p->sites[0].stack = 1;
	p->locations[1].n_inlined = 1;
	p->locations[1].inlined = calloc(1, sizeof(*p->locations[1].inlined));
	p->locations[1].inlined[0] = (struct mp_inline_frame){ .function = strdup("run_inner"),
							       .file = strdup("run.h"),
							       .line = 7 };
	cr_assert_eq(mp_profile_clone(p, &q), 0);
	expect_profile_eq(q, p);
	cr_assert_eq(mp_profile_file_encode(p, &a, &alen), 0);
	mp_profile_free(p);
	cr_assert_eq(mp_profile_file_encode(q, &b, &blen), 0);
	cr_assert_eq(alen, blen);
	cr_assert_eq(memcmp(a, b, alen), 0);
	cr_assert_eq(q->n_objects, 2);
	cr_assert_eq(q->n_locations, 2);
	cr_assert_str_eq(q->locations[1].file, "run.c");
	cr_assert_eq(q->n_stacks, 1);
	cr_assert_eq(q->stacks[0].frames[1], 0x2100);
	cr_assert_eq(q->locations[1].n_inlined, 1);
	cr_assert_str_eq(q->locations[1].inlined[0].function, "run_inner");
	for (uint32_t i = 0; i < q->n_invocations; i++) {
		struct mp_invocation *v = &q->invocations[i];

		if (v->n_owners == 1) {
			v->owners[1] = v->owners[0]; /* room of the implied capacity 2 */
			extended = true;
		}
	}
	cr_assert(extended);
	free(a);
	free(b);
	mp_profile_free(q);
	cr_assert_eq(mp_profile_clone(NULL, &q), -EINVAL);
}

/* Sampled mode's variances (docs/PROFILE.md "Sampled figures") survive the
 * file; a hostile file's negative or NaN variance reads as 0. */
Test(profile_pb, sampled_variances_round_trip_and_hostile_ones_read_as_zero)
{
	struct mp_profile *p = rich_profile(), *q = NULL;
	Memprof__Profile *m;
	const char *why = "unset";
	uint8_t *buf;
	size_t len;

	p->mem.alloc_var = 1.5e12;
	p->mem.free_var = 2.5e11;
	p->added_var = 3.25e10;
	p->peak_var = 4.5e9;
	p->peak_bias_bound = 123456.5;
	p->kernels[0].incl.alloc_var = 7e8;
	cr_assert_eq(mp_profile_encode(p, &buf, &len), 0);
	cr_assert_eq(mp_profile_decode(buf, len, &q, &why), 0, "%s", why);
	cr_assert_eq(q->mem.alloc_var, 1.5e12);
	cr_assert_eq(q->mem.free_var, 2.5e11);
	cr_assert_eq(q->added_var, 3.25e10);
	cr_assert_eq(q->peak_var, 4.5e9);
	cr_assert_eq(q->peak_bias_bound, 123456.5);
	cr_assert_eq(q->kernels[0].incl.alloc_var, 7e8);
	mp_profile_free(q);
	q = NULL;

	m = memprof__profile__unpack(NULL, len, buf);
	cr_assert_not_null(m);
	free(buf);
	m->peak_var = NAN;
	m->new_bytes_var = -1;
	m->peak_bias_bound = INFINITY;
	m->heap->alloc_var = -HUGE_VAL;
	len = memprof__profile__get_packed_size(m);
	buf = malloc(len);
	memprof__profile__pack(m, buf);
	memprof__profile__free_unpacked(m, NULL);
	cr_assert_eq(mp_profile_decode(buf, len, &q, &why), 0, "%s", why);
	cr_assert_eq(q->peak_var, 0);
	cr_assert_eq(q->added_var, 0);
	cr_assert_eq(q->peak_bias_bound, 0);
	cr_assert_eq(q->mem.alloc_var, 0);
	cr_assert_eq(q->mem.free_var, 2.5e11);
	free(buf);
	mp_profile_free(q);
	mp_profile_free(p);
}
