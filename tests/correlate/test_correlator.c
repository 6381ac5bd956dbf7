/* SPDX-License-Identifier: MIT */
/*
 * Correlator and renderers on synthetic streams. Each event advances the
 * clock by 1 ns, so every kernel here is far shorter than a microsecond:
 * attribution must come from ordering alone.
 */
#include <inttypes.h>

#include "../profile/helpers.h"

#define U MP_UNKNOWN
#define MEM(added, tensors, ab, ac, fb, fc)                                              \
	{                                                                                \
		.bytes_added = (added), .tensors_added = (tensors), .alloc_bytes = (ab), \
		.alloc_count = (ac), .free_bytes = (fb), .free_count = (fc)              \
	}

static char *names_square[] = { "square" };

/*
 * tf.profile example 1 (tfjs PR, engine_test.ts), in C:
 *   x = tf.tensor1d([1, 2, 3]);      12 bytes, outside any kernel
 *   x2 = x.square(); x2.dispose();   twice
 */
static struct mp_profile *tfjs_example1(void)
{
	struct stream s;
	struct block y;

	stream_init(&s, NULL);
	alloc(&s, 1, 12); /* x, never freed: it is the result */
	for (int i = 0; i < 2; i++) {
		kbegin(&s, 1, "square");
		shape(&s, 1, true, 1, (int64_t)3);
		y = alloc(&s, 1, 12);
		shape(&s, 1, false, 1, (int64_t)3);
		kend(&s, 1);
		release(&s, 1, &y);
	}
	return finish(&s);
}

Test(tfjs, example1_model)
{
	struct mp_profile *p = tfjs_example1();
	struct mp_shape in[] = { SHAPE(3) }, out[] = { SHAPE(3) };
	struct mp_bucket b12[] = { { .id = 0, .alloc_bytes = 12, .alloc_count = 1 } };
	struct mp_bucket b24[] = { { .id = 0, .alloc_bytes = 24, .alloc_count = 2 } };
	struct mp_invocation invs[2];
	struct mp_kernel kernels[] = { {
		.name = 0,
		.calls = 2,
		.total_ns = 8,
		.min_ns = 4,
		.max_ns = 4,
		.incl = MEM(24, 2, 24, 2, 0, 0),
		.excl = MEM(24, 2, 24, 2, 0, 0),
		.peak_bytes = 24,
		.peak_added = 12,
		.n_owners = 1,
		.owners = b24,
		.n_tags = 1,
		.tags = b24,
	} };
	struct mp_pool owners[] = { { .name = "(unknown)",
				      .mem = MEM(12, 1, 36, 3, 24, 2),
				      .live_bytes = 12,
				      .live_count = 1,
				      .peak_bytes = 24,
				      .peak_share = 24 } };
	struct mp_pool tags[] = { { .name = "(untagged)",
				    .mem = MEM(12, 1, 36, 3, 24, 2),
				    .live_bytes = 12,
				    .live_count = 1,
				    .peak_bytes = 24,
				    .peak_share = 24 } };

	for (int i = 0; i < 2; i++)
		invs[i] = (struct mp_invocation){
			.name = 0,
			.tid = 1,
			.parent = MP_NONE,
			.depth = 0,
			.phase = MP_NONE,
			.begin_ns = 1002 + 6 * i,
			.end_ns = 1006 + 6 * i,
			.incl = MEM(12, 1, 12, 1, 0, 0),
			.excl = MEM(12, 1, 12, 1, 0, 0),
			.total_bytes_snapshot = 24,
			.total_tensors_snapshot = 2,
			.peak_bytes = 24,
			.peak_added = 12,
			.rss_begin = U,
			.rss_end = U,
			.n_inputs = 1,
			.inputs = in,
			.n_outputs = 1,
			.outputs = out,
			.n_owners = 1,
			.owners = b12,
			.n_tags = 1,
			.tags = b12,
		};
	struct mp_profile want = {
		.format_version = MP_PROFILE_FORMAT_VERSION,
		.clock = MP_CLOCK_MONOTONIC,
		.begin_ns = 1000,
		.end_ns = 1014,
		.mem = MEM(12, 1, 36, 3, 24, 2),
		.peak_bytes = 24,
		.peak_tensors = 2,
		.peak_parts = true,
		.n_names = 1,
		.names = names_square,
		.n_invocations = 2,
		.invocations = invs,
		.n_kernels = 1,
		.kernels = kernels,
		.n_owners = 1,
		.owners = owners,
		.n_tags = 1,
		.tags = tags,
		.rss_stride = 1,
		.vm_hwm = U,
		.maps_resident_peak = U,
		.maps_recorded = true,
		.n_sites = 2,
		.sites =
			(struct mp_site[]){
				{ 0, MP_NONE, MP_NONE, 0, 1, 1, 12, 1, 12, 0, 0, 0, 1, 12, 0, 0 },
				{ 0, 0, MP_NONE, 0, 1, 2, 24, 0, 0, 0, 0, 0, 1, 12, 0, 0 } },
	};

	expect_profile_eq(p, &want);
	mp_profile_free(p);
}

Test(tfjs, example1_rendered)
{
	struct mp_profile *p = tfjs_example1();
	char *txt = render(p, MP_REPORT_TFJS, NULL);

	cr_expect_str_eq(txt, "{\"newBytes\":12,\"newTensors\":1,\"peakBytes\":24,\"kernels\":["
			      "{\"name\":\"square\",\"bytesAdded\":12,\"totalBytesSnapshot\":24,"
			      "\"tensorsAdded\":1,\"totalTensorsSnapshot\":2,"
			      "\"inputShapes\":[[3]],\"outputShapes\":[[3]]},"
			      "{\"name\":\"square\",\"bytesAdded\":12,\"totalBytesSnapshot\":24,"
			      "\"tensorsAdded\":1,\"totalTensorsSnapshot\":2,"
			      "\"inputShapes\":[[3]],\"outputShapes\":[[3]]}]}\n");
	free(txt);
	mp_profile_free(p);
}

/*
 * tf.profile example 2:
 *   a = tf.tensor2d([1, 2], [1, 2]);          8 bytes
 *   b = tf.tensor2d([1, 2, 3, 4], [2, 2]);    16 bytes
 *   c = a.matMul(b);                          8 bytes inside matMul
 */
static struct mp_profile *tfjs_example2(void)
{
	struct stream s;

	stream_init(&s, NULL);
	alloc(&s, 1, 8);
	alloc(&s, 1, 16);
	kbegin(&s, 1, "matMul");
	shape(&s, 1, true, 2, (int64_t)1, (int64_t)2);
	shape(&s, 1, true, 2, (int64_t)2, (int64_t)2);
	alloc(&s, 1, 8);
	shape(&s, 1, false, 2, (int64_t)1, (int64_t)2);
	kend(&s, 1);
	return finish(&s);
}

Test(tfjs, example2_model)
{
	struct mp_profile *p = tfjs_example2();
	static char *names[] = { "matMul" };
	struct mp_shape in[] = { SHAPE(1, 2), SHAPE(2, 2) }, out[] = { SHAPE(1, 2) };
	struct mp_bucket b8[] = { { .id = 0, .alloc_bytes = 8, .alloc_count = 1 } };
	struct mp_invocation invs[] = { {
		.name = 0,
		.tid = 1,
		.parent = MP_NONE,
		.phase = MP_NONE,
		.begin_ns = 1003,
		.end_ns = 1008,
		.incl = MEM(8, 1, 8, 1, 0, 0),
		.excl = MEM(8, 1, 8, 1, 0, 0),
		.total_bytes_snapshot = 32,
		.total_tensors_snapshot = 3,
		.peak_bytes = 32,
		.peak_added = 8,
		.retained_bytes = 8,
		.retained_count = 1,
		.rss_begin = U,
		.rss_end = U,
		.n_inputs = 2,
		.inputs = in,
		.n_outputs = 1,
		.outputs = out,
		.n_owners = 1,
		.owners = b8,
		.n_tags = 1,
		.tags = b8,
	} };
	struct mp_kernel kernels[] = { {
		.name = 0,
		.calls = 1,
		.total_ns = 5,
		.min_ns = 5,
		.max_ns = 5,
		.incl = MEM(8, 1, 8, 1, 0, 0),
		.excl = MEM(8, 1, 8, 1, 0, 0),
		.peak_bytes = 32,
		.peak_added = 8,
		.retained_bytes = 8,
		.retained_count = 1,
		.n_owners = 1,
		.owners = b8,
		.n_tags = 1,
		.tags = b8,
	} };
	struct mp_pool owners[] = { { .name = "(unknown)",
				      .mem = MEM(32, 3, 32, 3, 0, 0),
				      .live_bytes = 32,
				      .live_count = 3,
				      .peak_bytes = 32,
				      .peak_share = 32 } };
	struct mp_pool tags[] = { { .name = "(untagged)",
				    .mem = MEM(32, 3, 32, 3, 0, 0),
				    .live_bytes = 32,
				    .live_count = 3,
				    .peak_bytes = 32,
				    .peak_share = 32 } };
	struct mp_profile want = {
		.format_version = MP_PROFILE_FORMAT_VERSION,
		.clock = MP_CLOCK_MONOTONIC,
		.begin_ns = 1000,
		.end_ns = 1009,
		.mem = MEM(32, 3, 32, 3, 0, 0),
		.peak_bytes = 32,
		.peak_parts = true,
		.peak_tensors = 3,
		.n_names = 1,
		.names = names,
		.n_invocations = 1,
		.invocations = invs,
		.n_kernels = 1,
		.kernels = kernels,
		.n_owners = 1,
		.owners = owners,
		.n_tags = 1,
		.tags = tags,
		.rss_stride = 1,
		.vm_hwm = U,
		.maps_resident_peak = U,
		.maps_recorded = true,
		.n_sites = 2,
		.sites =
			(struct mp_site[]){
				{ 0, MP_NONE, MP_NONE, 0, 1, 2, 24, 2, 24, 0, 0, 0, 2, 24, 0, 0 },
				{ 0, 0, MP_NONE, 0, 1, 1, 8, 1, 8, 0, 0, 0, 1, 8, 0, 0 } },
	};

	expect_profile_eq(p, &want);
	mp_profile_free(p);
}

Test(tfjs, example2_rendered)
{
	struct mp_profile *p = tfjs_example2();
	char *txt = render(p, MP_REPORT_TFJS, NULL);

	cr_expect_str_eq(txt, "{\"newBytes\":32,\"newTensors\":3,\"peakBytes\":32,\"kernels\":["
			      "{\"name\":\"matMul\",\"bytesAdded\":8,\"totalBytesSnapshot\":32,"
			      "\"tensorsAdded\":1,\"totalTensorsSnapshot\":3,"
			      "\"inputShapes\":[[1,2],[2,2]],\"outputShapes\":[[1,2]]}]}\n");
	free(txt);
	mp_profile_free(p);
}

/* The same computations wrapped in an outer kernel "predict": the region
 * "predict" reports exactly what tf.profile reports for the callback. */
Test(tfjs, region_outer_kernel)
{
	struct stream s;
	struct mp_profile *p;
	struct block y;
	char *txt;

	stream_init(&s, NULL);
	alloc(&s, 1, 100); /* before the region: not part of it */
	kbegin(&s, 1, "predict");
	alloc(&s, 1, 12);
	for (int i = 0; i < 2; i++) {
		kbegin(&s, 1, "square");
		shape(&s, 1, true, 1, (int64_t)3);
		y = alloc(&s, 1, 12);
		shape(&s, 1, false, 1, (int64_t)3);
		kend(&s, 1);
		release(&s, 1, &y);
	}
	kend(&s, 1);
	kbegin(&s, 1, "after");
	alloc(&s, 1, 1000);
	kend(&s, 1);
	p = finish(&s);

	txt = render(p, MP_REPORT_TFJS, "predict");
	cr_expect_str_eq(txt, "{\"newBytes\":12,\"newTensors\":1,\"peakBytes\":124,\"kernels\":["
			      "{\"name\":\"square\",\"bytesAdded\":12,\"totalBytesSnapshot\":124,"
			      "\"tensorsAdded\":1,\"totalTensorsSnapshot\":3,"
			      "\"inputShapes\":[[3]],\"outputShapes\":[[3]]},"
			      "{\"name\":\"square\",\"bytesAdded\":12,\"totalBytesSnapshot\":124,"
			      "\"tensorsAdded\":1,\"totalTensorsSnapshot\":3,"
			      "\"inputShapes\":[[3]],\"outputShapes\":[[3]]}]}\n");
	free(txt);
	/* The second invocation of "square" alone: no nested kernels. */
	txt = render(p, MP_REPORT_TFJS, "square#2");
	cr_expect_str_eq(txt,
			 "{\"newBytes\":12,\"newTensors\":1,\"peakBytes\":124,\"kernels\":[]}\n");
	free(txt);
	{
		FILE *f = fopen("/dev/null", "w");

		cr_assert_not_null(f);
		cr_expect_eq(mp_report_write(p, MP_REPORT_TFJS, "square#3", f), -ENOENT);
		cr_expect_eq(mp_report_write(p, MP_REPORT_TFJS, "nosuch", f), -ENOENT);
		fclose(f);
	}
	mp_profile_free(p);
}

/* Nested kernels: inclusive figures contain the inner kernels, exclusive
 * ones do not. */
Test(correlator, nested_inclusive_exclusive)
{
	static char *names[] = { "conv", "pad", "gemm" };
	struct mp_bucket b_conv[] = { { .id = 0,
					.alloc_bytes = 700,
					.alloc_count = 3,
					.free_bytes = 100,
					.free_count = 1 } };
	struct mp_bucket b_pad[] = {
		{ .id = 0, .alloc_bytes = 100, .alloc_count = 1, .free_bytes = 0, .free_count = 0 }
	};
	struct mp_bucket b_gemm[] = { { .id = 0,
					.alloc_bytes = 400,
					.alloc_count = 1,
					.free_bytes = 100,
					.free_count = 1 } };
	struct mp_invocation want[3];
	struct stream s;
	struct mp_profile *p;
	struct block padbuf;

	stream_init(&s, NULL);
	kbegin(&s, 1, "conv"); /* 1001 */
	alloc(&s, 1, 200); /* 1002 conv itself */
	kbegin(&s, 1, "pad"); /* 1003 */
	padbuf = alloc(&s, 1, 100); /* 1004 */
	kend(&s, 1); /* 1005 */
	kbegin(&s, 1, "gemm"); /* 1006 */
	alloc(&s, 1, 400); /* 1007 */
	release(&s, 1, &padbuf); /* 1008: gemm frees pad's buffer */
	kend(&s, 1); /* 1009 */
	kend(&s, 1); /* 1010 */
	p = finish(&s); /* 1011 */

	want[0] = (struct mp_invocation){
		.name = 0,
		.tid = 1,
		.parent = MP_NONE,
		.depth = 0,
		.phase = MP_NONE,
		.begin_ns = 1001,
		.end_ns = 1010,
		.incl = MEM(600, 2, 700, 3, 100, 1),
		.excl = MEM(200, 1, 200, 1, 0, 0),
		.total_bytes_snapshot = 600,
		.total_tensors_snapshot = 2,
		.peak_bytes = 700,
		.peak_added = 700,
		.retained_bytes = 200,
		.retained_count = 1,
		.rss_begin = U,
		.rss_end = U,
		.n_owners = 1,
		.owners = b_conv,
		.n_tags = 1,
		.tags = b_conv,
	};
	want[1] = (struct mp_invocation){
		.name = 1,
		.tid = 1,
		.parent = 0,
		.depth = 1,
		.phase = MP_NONE,
		.begin_ns = 1003,
		.end_ns = 1005,
		.incl = MEM(100, 1, 100, 1, 0, 0),
		.excl = MEM(100, 1, 100, 1, 0, 0),
		.total_bytes_snapshot = 300,
		.total_tensors_snapshot = 2,
		.peak_bytes = 300,
		.peak_added = 100,
		.retained_bytes = 0,
		.retained_count = 0,
		.rss_begin = U,
		.rss_end = U,
		.n_owners = 1,
		.owners = b_pad,
		.n_tags = 1,
		.tags = b_pad,
	};
	want[2] = (struct mp_invocation){
		.name = 2,
		.tid = 1,
		.parent = 0,
		.depth = 1,
		.phase = MP_NONE,
		.begin_ns = 1006,
		.end_ns = 1009,
		.incl = MEM(300, 0, 400, 1, 100, 1),
		.excl = MEM(300, 0, 400, 1, 100, 1),
		.total_bytes_snapshot = 600,
		.total_tensors_snapshot = 2,
		.peak_bytes = 700,
		.peak_added = 400,
		.retained_bytes = 400,
		.retained_count = 1,
		.rss_begin = U,
		.rss_end = U,
		.n_owners = 1,
		.owners = b_gemm,
		.n_tags = 1,
		.tags = b_gemm,
	};
	cr_assert_eq(p->n_names, 3);
	for (uint32_t i = 0; i < 3; i++)
		expect_str_eq("names", p->names[i], names[i]);
	EXPECT_ARRAY("invocations", p->invocations, p->n_invocations, want, 3, expect_inv_eq);
	mp_profile_free(p);
}

/* A thread pool: the kernel is begun on the dispatcher (tid 1), the work
 * allocates on workers 2 and 3, which have no kernel of their own. */
Test(correlator, thread_pool_cross_thread)
{
	struct mp_bucket b[] = { { .id = 0,
				   .alloc_bytes = 3072,
				   .alloc_count = 3,
				   .free_bytes = 1024,
				   .free_count = 1 } };
	struct mp_invocation want[2];
	struct mp_kernel wk;
	struct stream s;
	struct mp_profile *p;
	struct block w2;

	stream_init(&s, NULL);
	kbegin(&s, 1, "xnn_run"); /* 1001 */
	alloc(&s, 1, 0); /* 1002: zero-size allocation on the dispatcher */
	w2 = alloc(&s, 2, 1024); /* 1003 worker 2 */
	alloc(&s, 3, 2048); /* 1004 worker 3 */
	release(&s, 3, &w2); /* 1005 worker 3 frees worker 2's block */
	kbegin(&s, 4, "io"); /* 1006 another thread's own kernel */
	alloc(&s, 4, 5); /* 1007 charged to io, not cross-thread */
	kend(&s, 4); /* 1008 */
	kend(&s, 1); /* 1009 */
	alloc(&s, 2, 7); /* 1010 nothing open: no kernel */
	p = finish(&s);

	want[0] = (struct mp_invocation){
		.name = 0,
		.tid = 1,
		.parent = MP_NONE,
		.phase = MP_NONE,
		.begin_ns = 1001,
		.end_ns = 1009,
		.incl = MEM(2048, 2, 3072, 3, 1024, 1),
		.excl = MEM(2048, 2, 3072, 3, 1024, 1),
		.total_bytes_snapshot = 2053,
		.total_tensors_snapshot = 3,
		.peak_bytes = 3072,
		.peak_added = 3072,
		.retained_bytes = 2048,
		.retained_count = 2,
		.cross_thread_allocs = 2,
		.cross_thread_bytes = 3072,
		.rss_begin = U,
		.rss_end = U,
		.n_owners = 1,
		.owners = b,
		.n_tags = 1,
		.tags = b,
	};
	struct mp_bucket b5[] = { { .id = 0, .alloc_bytes = 5, .alloc_count = 1 } };
	want[1] = (struct mp_invocation){
		.name = 1,
		.tid = 4,
		.parent = MP_NONE,
		.phase = MP_NONE,
		.begin_ns = 1006,
		.end_ns = 1008,
		.incl = MEM(5, 1, 5, 1, 0, 0),
		.excl = MEM(5, 1, 5, 1, 0, 0),
		.total_bytes_snapshot = 2053,
		.total_tensors_snapshot = 3,
		.peak_bytes = 2053,
		.peak_added = 5,
		.retained_bytes = 5,
		.retained_count = 1,
		.rss_begin = U,
		.rss_end = U,
		.n_owners = 1,
		.owners = b5,
		.n_tags = 1,
		.tags = b5,
	};
	EXPECT_ARRAY("invocations", p->invocations, p->n_invocations, want, 2, expect_inv_eq);
	wk = (struct mp_kernel){
		.name = 0,
		.calls = 1,
		.total_ns = 8,
		.min_ns = 8,
		.max_ns = 8,
		.incl = want[0].incl,
		.excl = want[0].excl,
		.peak_bytes = 3072,
		.peak_added = 3072,
		.retained_bytes = 2048,
		.retained_count = 2,
		.cross_thread_allocs = 2,
		.cross_thread_bytes = 3072,
		.n_owners = 1,
		.owners = b,
		.n_tags = 1,
		.tags = b,
	};
	expect_kernel_eq("kernels[0]", &p->kernels[0], &wk);
	expect_mem_eq("mem", &p->mem, &(struct mp_mem_stats)MEM(2060, 4, 3084, 5, 1024, 1));
	mp_profile_free(p);
}

/* Owners: two libraries allocate inside one kernel; the split is exact and
 * each call site is resolved once. */
struct fake_maps {
	unsigned calls;
};

static const char *fake_resolve(void *ctx, uint64_t addr)
{
	struct fake_maps *m = ctx;

	m->calls++;
	if (addr >= 0x7f0000001000 && addr < 0x7f0000002000)
		return "/usr/lib/x86_64-linux-gnu/libxnnpack.so.0.1";
	if (addr >= 0x7f0000005000 && addr < 0x7f0000006000)
		return "/opt/et/lib/libexecutorch_core.so";
	if (addr >= 0x400000 && addr < 0x500000)
		return "/usr/bin/et_runner";
	return NULL;
}

Test(correlator, owners_split_exactly)
{
	struct fake_maps maps = { 0 };
	struct mp_correlator_opts o = { .resolve_owner = fake_resolve, .resolve_ctx = &maps };
	struct stream s;
	struct mp_profile *p;
	struct block x1;

	stream_init(&s, &o);
	cr_assert_eq(mp_correlator_add_owner_rule(s.c, "libxnnpack*=xnnpack"), 0);
	cr_assert_eq(mp_correlator_add_owner_rule(s.c, "libexecutorch*=executorch"), 0);
	cr_expect_eq(mp_correlator_add_owner_rule(s.c, "nonsense"), -EINVAL);
	cr_expect_eq(mp_correlator_add_owner_rule(s.c, "=x"), -EINVAL);
	kbegin(&s, 1, "forward");
	x1 = alloc_from(&s, 1, 4096, 0x7f0000001100);
	alloc_from(&s, 2, 8192, 0x7f0000001100); /* worker, same call site */
	alloc_from(&s, 1, 100, 0x7f0000005200);
	alloc_from(&s, 1, 28, 0x7f0000005200);
	alloc_from(&s, 1, 1, 0x400100); /* the executable */
	alloc_from(&s, 1, 2, 0x12345678); /* unknown mapping */
	release(&s, 1, &x1); /* charged back to xnnpack */
	kend(&s, 1);
	p = finish(&s);

	/* 4 distinct call sites, each resolved once. */
	cr_expect_eq(maps.calls, 4);
	struct mp_pool want_owners[] = {
		{ .name = "(unknown)",
		  .mem = MEM(2, 1, 2, 1, 0, 0),
		  .live_bytes = 2,
		  .live_count = 1,
		  .peak_bytes = 2 },
		{ .name = "xnnpack",
		  .mem = MEM(8192, 1, 12288, 2, 4096, 1),
		  .live_bytes = 8192,
		  .live_count = 1,
		  .peak_bytes = 12288 },
		{ .name = "executorch",
		  .mem = MEM(128, 2, 128, 2, 0, 0),
		  .live_bytes = 128,
		  .live_count = 2,
		  .peak_bytes = 128 },
		{ .name = "et_runner",
		  .mem = MEM(1, 1, 1, 1, 0, 0),
		  .live_bytes = 1,
		  .live_count = 1,
		  .peak_bytes = 1 },
	};
	EXPECT_ARRAY("owners", p->owners, p->n_owners, want_owners, 4, expect_pool_eq);
	struct mp_bucket want_b[] = {
		{ .id = 1,
		  .alloc_bytes = 12288,
		  .alloc_count = 2,
		  .free_bytes = 4096,
		  .free_count = 1 },
		{ .id = 2, .alloc_bytes = 128, .alloc_count = 2 },
		{ .id = 3, .alloc_bytes = 1, .alloc_count = 1 },
		{ .id = 0, .alloc_bytes = 2, .alloc_count = 1 },
	};
	expect_buckets_eq("invocations[0].owners", p->invocations[0].owners,
			  p->invocations[0].n_owners, want_b, 4);
	expect_buckets_eq("kernels[0].owners", p->kernels[0].owners, p->kernels[0].n_owners, want_b,
			  4);
	mp_profile_free(p);
}

/* ExecuTorch's question: weights during load, activations during
 * inference, each reported apart and exactly, with phase peaks. */
Test(correlator, tags_and_phase_peaks)
{
	struct stream s;
	struct mp_profile *p;
	struct block w1, a1, a2, scratch;

	stream_init(&s, NULL);
	phase(&s, "load"); /* 1001 */
	tag_begin(&s, 1, "weights"); /* 1002 */
	w1 = alloc(&s, 1, 1000); /* 1003 */
	alloc(&s, 1, 3000); /* 1004 */
	tag_end(&s, 1); /* 1005 */
	scratch = alloc(&s, 1, 500); /* 1006 untagged load scratch */
	release(&s, 1, &scratch); /* 1007: load peak 4500 */
	phase(&s, "inference"); /* 1008: live 4000 */
	tag_begin(&s, 2, "activations"); /* 1009 on the inference thread */
	kbegin(&s, 2, "op"); /* 1010 */
	a1 = alloc(&s, 2, 200); /* 1011 */
	a2 = alloc(&s, 2, 300); /* 1012: inference peak 4500 */
	release(&s, 2, &a1); /* 1013 */
	tag_begin(&s, 2, "scratch"); /* 1014: innermost tag wins */
	alloc(&s, 2, 50); /* 1015 */
	tag_end(&s, 2); /* 1016 */
	release(&s, 2, &a2); /* 1017 */
	kend(&s, 2); /* 1018 */
	tag_end(&s, 2); /* 1019 */
	tag_end(&s, 2); /* 1020 unmatched */
	release(&s, 1, &w1); /* 1021: frees a weight during inference */
	p = finish(&s); /* 1022 */

	struct mp_pool want_tags[] = {
		{ .name = "(untagged)",
		  .mem = MEM(0, 0, 500, 1, 500, 1),
		  .live_bytes = 0,
		  .live_count = 0,
		  .peak_bytes = 500 },
		{ .name = "weights",
		  .mem = MEM(3000, 1, 4000, 2, 1000, 1),
		  .live_bytes = 3000,
		  .live_count = 1,
		  .peak_bytes = 4000 },
		{ .name = "activations",
		  .mem = MEM(0, 0, 500, 2, 500, 2),
		  .live_bytes = 0,
		  .live_count = 0,
		  .peak_bytes = 500 },
		{ .name = "scratch",
		  .mem = MEM(50, 1, 50, 1, 0, 0),
		  .live_bytes = 50,
		  .live_count = 1,
		  .peak_bytes = 50 },
	};
	EXPECT_ARRAY("tags", p->tags, p->n_tags, want_tags, 4, expect_pool_eq);
	struct mp_phase want_phases[] = {
		{ .name = "load",
		  .first_ns = 1001,
		  .duration_ns = 7,
		  .entries = 1,
		  .mem = MEM(4000, 2, 4500, 3, 500, 1),
		  .peak_bytes = 4500 },
		{ .name = "inference",
		  .first_ns = 1008,
		  .duration_ns = 14,
		  .entries = 1,
		  .mem = MEM(-950, 0, 550, 3, 1500, 3),
		  .peak_bytes = 4500 },
	};
	EXPECT_ARRAY("phases", p->phases, p->n_phases, want_phases, 2, expect_phase_eq);
	struct mp_bucket want_b[] = {
		{ .id = 2,
		  .alloc_bytes = 500,
		  .alloc_count = 2,
		  .free_bytes = 500,
		  .free_count = 2 },
		{ .id = 3, .alloc_bytes = 50, .alloc_count = 1 },
	};
	expect_buckets_eq("invocations[0].tags", p->invocations[0].tags, p->invocations[0].n_tags,
			  want_b, 2);
	cr_expect_eq(p->invocations[0].phase, 1);
	cr_expect_eq(p->unmatched_tag_ends, 1);
	mp_profile_free(p);
}

/* Phase peaks differ: a big load peak, a smaller inference peak, with the
 * same phase entered twice. */
Test(correlator, phase_peaks_reentered)
{
	struct stream s;
	struct mp_profile *p;
	struct block tmp, act;

	stream_init(&s, NULL);
	phase(&s, "load"); /* 1001 */
	alloc(&s, 1, 10000); /* 1002 */
	tmp = alloc(&s, 1, 50000); /* 1003: load peak 60000 */
	release(&s, 1, &tmp); /* 1004 */
	phase(&s, "inference"); /* 1005 */
	act = alloc(&s, 1, 2000); /* 1006: inference peak 12000; re-entry at 10001 is below */
	release(&s, 1, &act); /* 1007 */
	phase(&s, "load"); /* 1008 */
	alloc(&s, 1, 1); /* 1009 */
	phase(&s, "inference"); /* 1010 */
	p = finish(&s); /* 1011 */

	struct mp_phase want[] = {
		{ .name = "load",
		  .first_ns = 1001,
		  .duration_ns = 6,
		  .entries = 2,
		  .mem = MEM(10001, 2, 60001, 3, 50000, 1),
		  .peak_bytes = 60000 },
		{ .name = "inference",
		  .first_ns = 1005,
		  .duration_ns = 4,
		  .entries = 2,
		  .mem = MEM(0, 0, 2000, 1, 2000, 1),
		  .peak_bytes = 12000 },
	};
	EXPECT_ARRAY("phases", p->phases, p->n_phases, want, 2, expect_phase_eq);
	cr_expect_eq(p->peak_bytes, 60000);
	mp_profile_free(p);
}

/* Markers lost or cut short: END without BEGIN, BEGIN never ended, a kernel
 * already open when the daemon attached, frees of blocks from before
 * attach. */
Test(correlator, unmatched_truncated_open_at_attach)
{
	struct stream s;
	struct mp_profile *p;
	struct mp_record open = { .type = MP_REC_KERNEL_BEGIN,
				  .flags = MP_REC_F_OPEN_AT_ATTACH,
				  .tid = 7,
				  .ts_ns = 500,
				  .name = "session" };
	struct block b;

	stream_init(&s, NULL);
	cr_assert_eq(mp_correlator_on_record(s.c, &open), 0); /* begun at 500, before attach */
	kend(&s, 9); /* 1001 no kernel open on 9 */
	unknown_free(&s, 7, 0xdea0); /* 1002 */
	unknown_free(&s, 7, 0xbee0); /* 1003 */
	b = alloc(&s, 7, 64); /* 1004 */
	kbegin(&s, 7, "step"); /* 1005 */
	release(&s, 7, &b); /* 1006 */
	alloc(&s, 7, 16); /* 1007 */
	/* step and session never end */
	p = finish(&s); /* 1008 */

	struct mp_bucket bs[] = { { .id = 0, .alloc_bytes = 64, .alloc_count = 1 } };
	struct mp_bucket bst[] = {
		{ .id = 0, .alloc_bytes = 16, .alloc_count = 1, .free_bytes = 64, .free_count = 1 }
	};
	struct mp_bucket bsess[] = {
		{ .id = 0, .alloc_bytes = 80, .alloc_count = 2, .free_bytes = 64, .free_count = 1 }
	};
	struct mp_invocation want[] = {
		{ .name = 0,
		  .tid = 7,
		  .parent = MP_NONE,
		  .depth = 0,
		  .phase = MP_NONE,
		  .flags = MP_INV_F_OPEN_AT_ATTACH | MP_INV_F_TRUNCATED,
		  .begin_ns = 500,
		  .end_ns = 1008,
		  .incl = MEM(16, 1, 80, 2, 64, 1),
		  .excl = MEM(64, 1, 64, 1, 0, 0),
		  .total_bytes_snapshot = 16,
		  .total_tensors_snapshot = 1,
		  .peak_bytes = 64,
		  .peak_added = 64,
		  .retained_bytes = 0,
		  .retained_count = 0,
		  .rss_begin = U,
		  .rss_end = U,
		  .n_owners = 1,
		  .owners = bsess,
		  .n_tags = 1,
		  .tags = bsess },
		{ .name = 1,
		  .tid = 7,
		  .parent = 0,
		  .depth = 1,
		  .phase = MP_NONE,
		  .flags = MP_INV_F_TRUNCATED,
		  .begin_ns = 1005,
		  .end_ns = 1008,
		  .incl = MEM(-48, 0, 16, 1, 64, 1),
		  .excl = MEM(-48, 0, 16, 1, 64, 1),
		  .total_bytes_snapshot = 16,
		  .total_tensors_snapshot = 1,
		  .peak_bytes = 64,
		  .peak_added = 0,
		  .retained_bytes = 16,
		  .retained_count = 1,
		  .rss_begin = U,
		  .rss_end = U,
		  .n_owners = 1,
		  .owners = bst,
		  .n_tags = 1,
		  .tags = bst },
	};
	(void)bs;
	EXPECT_ARRAY("invocations", p->invocations, p->n_invocations, want, 2, expect_inv_eq);
	cr_expect_eq(p->unmatched_ends, 1);
	cr_expect_eq(p->unknown_frees, 2);
	cr_expect(p->truncated);
	cr_expect_eq(p->kernels[0].open_at_attach, 1);
	cr_expect_eq(p->kernels[0].truncated, 1);
	cr_expect_eq(p->kernels[1].truncated, 1);
	/* Unknown frees never make anything negative. */
	expect_mem_eq("mem", &p->mem, &(struct mp_mem_stats)MEM(16, 1, 80, 2, 64, 1));
	cr_expect_eq(p->owners[0].live_bytes, 16);
	cr_expect_eq(p->tags[0].live_bytes, 16);
	mp_profile_free(p);
}

/* Only unknown frees: every figure stays at zero, none wraps negative. */
Test(correlator, unknown_frees_never_negative)
{
	struct stream s;
	struct mp_profile *p;
	struct block bogus = { .addr = 0x1, .size = 4096, .user = 0 };

	stream_init(&s, NULL);
	kbegin(&s, 1, "k");
	for (int i = 0; i < 5; i++)
		unknown_free(&s, 1, 0x1000 + 16 * (uint64_t)i);
	/* A free the tracer should not have paired: refused, counted. */
	release(&s, 1, &bogus);
	kend(&s, 1);
	p = finish(&s);

	expect_mem_eq("mem", &p->mem, &(struct mp_mem_stats)MEM(0, 0, 0, 0, 0, 0));
	expect_mem_eq("inv.incl", &p->invocations[0].incl,
		      &(struct mp_mem_stats)MEM(0, 0, 0, 0, 0, 0));
	cr_expect_eq(p->unknown_frees, 5);
	cr_expect_eq(p->accounting_errors, 1);
	cr_expect_eq(p->peak_bytes, 0);
	cr_expect_eq(p->owners[0].live_bytes, 0);
	mp_profile_free(p);
}

/* The free_mapped hook of the next test: [0x10000, 0x20000) is mapped;
 * counts its calls. */
static bool mapped_below(void *ctx, uint64_t addr, uint64_t ts_ns)
{
	(void)ts_ns;
	++*(int *)ctx;
	return addr >= 0x10000 && addr < 0x20000;
}

/* Unknown frees of the malloc family at addresses no malloc returns are
 * refused by reason, reach no figure and are no unknown frees; the rest
 * are. Known frees never ask the hook. */
Test(correlator, implausible_unknown_frees_refused_by_reason)
{
	int asked = 0;
	struct mp_correlator_opts o = { .free_mapped = mapped_below, .free_ctx = &asked };
	struct mp_heap_event custom = {
		.kind = MP_HEAP_UNKNOWN_FREE, .fn = MP_FN_CUSTOM, .tid = 1, .addr = 0x10003
	};
	struct stream s;
	struct mp_profile *p;
	struct block b;

	stream_init(&s, &o);
	kbegin(&s, 1, "k");
	b = alloc(&s, 1, 64);
	release(&s, 1, &b);
	cr_expect_eq(asked, 0);
	unknown_free(&s, 1, 0x10010); /* mapped, aligned: an unknown free */
	unknown_free(&s, 1, 0x10008);
	unknown_free(&s, 1, 0x10004); /* misaligned */
	unknown_free(&s, 1, 0x1000f);
	unknown_free(&s, 1, 0x30000); /* unmapped */
	unknown_free(&s, 1, 1ull << 56); /* past every address space */
	/* a function named on the command line: not held to malloc's rules */
	custom.ts_ns = tick(&s);
	mp_correlator_on_heap(s.c, &custom);
	kend(&s, 1);
	p = finish(&s);

	cr_expect_eq(p->unknown_frees, 3);
	cr_expect_eq(p->rejected[MP_REJECT_FREE_MISALIGNED], 2);
	cr_expect_eq(p->rejected[MP_REJECT_FREE_UNMAPPED], 1);
	cr_expect_eq(p->rejected[MP_REJECT_FREE], 1);
	cr_expect_eq(asked, 3, "the hook was asked %d times", asked);
	cr_expect(p->corruption & MP_CORRUPT_RECORDS_REJECTED);
	expect_mem_eq("mem", &p->mem, &(struct mp_mem_stats)MEM(0, 0, 64, 1, 64, 1));
	mp_profile_free(p);
}

/* The free_internal hook of the next test: callers in [0x7000, 0x8000)
 * are inside the allocator's object. */
static bool inside_allocator(void *ctx, uint64_t caller)
{
	++*(int *)ctx;
	return caller >= 0x7000 && caller < 0x8000;
}

/* An unknown free the allocator made itself (glibc's thread cache flushed
 * at a thread's exit, through free's entry) is counted apart: no unknown
 * free, no refusal even where the address looks unmapped, no figure; the
 * address checks that need no caller come first; known frees never ask. */
Test(correlator, the_allocators_own_unknown_frees_counted_apart)
{
	int asked = 0;
	struct mp_correlator_opts o = { .free_mapped = mapped_below,
					.free_internal = inside_allocator,
					.free_ctx = &asked };
	struct mp_heap_event ev = { .kind = MP_HEAP_UNKNOWN_FREE, .fn = MP_FN_FREE, .tid = 1 };
	const uint64_t addrs[] = { 0x30000, 0x10010, 0x30008, 0x10004, 1ull << 56 };
	const uint64_t callers[] = { 0x7010, 0x7ff0, 0x9000, 0x7010, 0x7010 };
	struct stream s;
	struct mp_profile *p;
	struct block b;
	int mapped_asked;

	stream_init(&s, &o);
	kbegin(&s, 1, "k");
	b = alloc(&s, 1, 64);
	b.caller = 0x7010;
	release(&s, 1, &b);
	cr_expect_eq(asked, 0);
	for (size_t i = 0; i < sizeof(addrs) / sizeof(addrs[0]); i++) {
		ev.ts_ns = tick(&s);
		ev.addr = addrs[i];
		ev.caller = callers[i];
		mp_correlator_on_heap(s.c, &ev);
	}
	kend(&s, 1);
	p = finish(&s);

	/* two inside (one unmapped), one outside and unmapped: refused;
	 * misaligned and past every address space: refused before asking */
	cr_expect_eq(p->internal_frees, 2);
	cr_expect_eq(p->unknown_frees, 0);
	cr_expect_eq(p->rejected[MP_REJECT_FREE_UNMAPPED], 1);
	cr_expect_eq(p->rejected[MP_REJECT_FREE_MISALIGNED], 1);
	cr_expect_eq(p->rejected[MP_REJECT_FREE], 1);
	mapped_asked = asked - 3;
	cr_expect_eq(mapped_asked, 1, "free_mapped asked %d times", mapped_asked);
	expect_mem_eq("mem", &p->mem, &(struct mp_mem_stats)MEM(0, 0, 64, 1, 64, 1));
	mp_profile_free(p);
}

static void rss_sample(struct stream *s, uint64_t vm_rss)
{
	struct mp_rss_sample smp = {
		.ts_ns = tick(s),
		.vm_rss = vm_rss,
		.rss_anon = vm_rss / 2,
		.rss_file = vm_rss / 2,
		.rss_shmem = 0,
		.vm_hwm = vm_rss + 1,
		.vm_swap = 0,
		.pss = U,
	};

	cr_assert_eq(mp_correlator_on_rss(s->c, &smp), 0);
}

/* RSS at begin is the last sample at or before the begin (the first after
 * it when there is none before), RSS at end the first sample at or after the
 * end: the pair brackets the kernel. */
Test(correlator, rss_delta_from_samples)
{
	struct stream s;
	struct mp_profile *p;

	stream_init(&s, NULL);
	rss_sample(&s, 1 << 20); /* 1001 */
	s.ts += 10;
	kbegin(&s, 1, "a"); /* 1012: last before: 1001 */
	rss_sample(&s, 2 << 20); /* 1013 */
	s.ts += 20;
	kend(&s, 1); /* 1034: first after: 1037 */
	s.ts += 2;
	rss_sample(&s, 5 << 20); /* 1037 */
	kbegin(&s, 1, "a"); /* 1038: last before: 1037 */
	s.ts += 10;
	kend(&s, 1); /* 1049: first after: 1100 */
	s.ts += 50;
	rss_sample(&s, 9 << 20); /* 1100 */
	kbegin(&s, 1, "b"); /* 1101: last before: 1100 */
	p = finish(&s); /* 1102: no sample after: the last one, 1100 */

	cr_assert_eq(p->n_invocations, 3);
	cr_expect_eq(p->invocations[0].rss_begin, 1 << 20);
	cr_expect_eq(p->invocations[0].rss_end, 5 << 20);
	cr_expect_eq(p->invocations[1].rss_begin, 5 << 20);
	cr_expect_eq(p->invocations[1].rss_end, 9 << 20);
	cr_expect_eq(p->invocations[2].rss_begin, 9 << 20);
	cr_expect_eq(p->invocations[2].rss_end, 9 << 20);
	cr_expect_eq(p->kernels[0].rss_delta_sum, 8 << 20);
	cr_expect_eq(p->kernels[0].rss_calls, 2);
	cr_expect_eq(p->kernels[1].rss_delta_sum, 0);
	cr_expect_eq(p->kernels[1].rss_calls, 1);
	cr_expect_eq(p->rss_peak, 9 << 20);
	cr_expect_eq(p->vm_hwm, (9 << 20) + 1);
	struct mp_rss_point pts[] = {
		{ 1001, 1 << 20, 1 << 19, 1 << 19, 0, 0, U, 0, 0 },
		{ 1013, 2 << 20, 1 << 20, 1 << 20, 0, 0, U, 0, 0 },
		{ 1037, 5 << 20, 5 << 19, 5 << 19, 0, 0, U, 0, 0 },
		{ 1100, 9 << 20, 9 << 19, 9 << 19, 0, 0, U, 0, 0 },
	};
	EXPECT_ARRAY("rss", p->rss, p->n_rss, pts, 4, expect_rss_point_eq);
	mp_profile_free(p);
}

static void rss_stat(struct stream *s, uint32_t tid, uint32_t member, int64_t value)
{
	struct mp_rss_stat_event ev = {
		.ts_ns = tick(s), .tid = tid, .member = member, .value = value
	};

	cr_assert_eq(mp_correlator_on_rss_stat(s->c, &ev), 0);
}

/* Exact RSS (rss_stat): every counter change charged by thread like an
 * allocation, nested kernels inclusive/exclusive. */
Test(correlator, rss_exact_from_rss_stat)
{
	struct stream s;
	struct mp_profile *p;

	stream_init(&s, NULL);
	rss_stat(&s, 1, MP_RSS_ANON, 100 << 12); /* baseline */
	rss_stat(&s, 1, MP_RSS_FILE, 50 << 12); /* baseline */
	kbegin(&s, 1, "outer");
	rss_stat(&s, 1, MP_RSS_ANON, 101 << 12); /* +1 page, outer */
	kbegin(&s, 1, "inner");
	rss_stat(&s, 1, MP_RSS_ANON, 104 << 12); /* +3 pages, inner */
	rss_stat(&s, 2, MP_RSS_FILE, 52 << 12); /* +2 pages, worker -> inner */
	rss_stat(&s, 1, MP_RSS_SWAPENTS, 7 << 12); /* not RSS */
	kend(&s, 1);
	rss_stat(&s, 1, MP_RSS_ANON, 103 << 12); /* -1 page, outer */
	rss_stat(&s, 0, MP_RSS_ANON, 90 << 12); /* reclaim by another task */
	kend(&s, 1);
	rss_stat(&s, 1, MP_RSS_ANON, 91 << 12); /* outside kernels */
	p = finish(&s);

	cr_assert_eq(p->n_invocations, 2);
	cr_expect_eq(p->invocations[0].rss_exact_incl, 5 << 12);
	cr_expect_eq(p->invocations[0].rss_exact_excl, 0);
	cr_expect_eq(p->invocations[1].rss_exact_incl, 5 << 12);
	cr_expect_eq(p->invocations[1].rss_exact_excl, 5 << 12);
	cr_expect_eq(p->kernels[0].rss_exact_incl, 5 << 12);
	cr_expect_eq(p->kernels[0].rss_exact_excl, 0);
	cr_expect_eq(p->rss_exact_unattributed, -(13 << 12) + (1 << 12));
	mp_profile_free(p);
}

/* Beyond the record cap, invocations still count in the aggregates. */
Test(correlator, invocation_cap)
{
	struct mp_correlator_opts o = { .max_invocations = 2 };
	struct stream s;
	struct mp_profile *p;
	struct block b[3];

	stream_init(&s, &o);
	for (int i = 0; i < 3; i++) {
		kbegin(&s, 1, "k");
		shape(&s, 1, true, 1, (int64_t)i);
		b[i] = alloc(&s, 1, 10 + i);
		kend(&s, 1);
	}
	release(&s, 1, &b[2]);
	release(&s, 1, &b[0]);
	p = finish(&s);

	cr_expect_eq(p->n_invocations, 2);
	cr_expect_eq(p->invocations_dropped, 1);
	cr_expect_eq(p->kernels[0].calls, 3);
	expect_mem_eq("kernels[0].incl", &p->kernels[0].incl,
		      &(struct mp_mem_stats)MEM(33, 3, 33, 3, 0, 0));
	cr_expect_eq(p->kernels[0].retained_bytes, 11);
	cr_expect_eq(p->invocations[0].retained_bytes, 0);
	cr_expect_eq(p->invocations[1].retained_bytes, 11);
	mp_profile_free(p);
}

/* A bounded RSS timeline halves its resolution instead of growing. */
Test(correlator, rss_timeline_downsampled)
{
	struct mp_correlator_opts o = { .max_rss_points = 4 };
	struct stream s;
	struct mp_profile *p;

	stream_init(&s, &o);
	for (uint64_t i = 0; i < 10; i++)
		rss_sample(&s, (i + 1) * 4096);
	p = finish(&s);

	/* Samples 0..9 at 1001..1010: stride 4 keeps samples 0, 4, 8. */
	struct mp_rss_point pts[] = {
		{ 1001, 4096, 2048, 2048, 0, 0, U, 0, 0 },
		{ 1005, 5 * 4096, 5 * 2048, 5 * 2048, 0, 0, U, 0, 0 },
		{ 1009, 9 * 4096, 9 * 2048, 9 * 2048, 0, 0, U, 0, 0 },
	};
	EXPECT_ARRAY("rss", p->rss, p->n_rss, pts, 3, expect_rss_point_eq);
	cr_expect_eq(p->rss_stride, 4);
	cr_expect_eq(p->rss_samples, 10);
	cr_expect_eq(p->rss_peak, 10 * 4096);
	mp_profile_free(p);
}

/* Names come from a hostile process: the JSON stays valid whatever they
 * hold. */
Test(report, hostile_names_escaped)
{
	struct stream s;
	struct mp_profile *p;
	char *txt;

	stream_init(&s, NULL);
	kbegin(&s, 1, "a\"b\\c\n\x01\x7f\xff\xc3\xa9");
	kend(&s, 1);
	p = finish(&s);
	txt = render(p, MP_REPORT_TFJS, NULL);
	cr_expect_str_eq(txt,
			 "{\"newBytes\":0,\"newTensors\":0,\"peakBytes\":0,\"kernels\":["
			 "{\"name\":\"a\\\"b\\\\c\\n\\u0001\\u007f\\u00ff\xc3\xa9\","
			 "\"bytesAdded\":0,\"totalBytesSnapshot\":0,\"tensorsAdded\":0,"
			 "\"totalTensorsSnapshot\":0,\"inputShapes\":[],\"outputShapes\":[]}]}\n");
	free(txt);
	mp_profile_free(p);
}

Test(report, table_example2)
{
	struct mp_profile *p = tfjs_example2();
	char *txt;

	cr_assert_eq(mp_profile_set_process(p, 4242, "/usr/bin/tfjs\x1b[2J", NULL, "tfjs a b"), 0);
	p->drops_ring = 3;
	txt = render(p, MP_REPORT_TABLE, NULL);
	cr_expect_str_eq(
		txt,
		"memprofd profile: pid 4242 /usr/bin/tfjs?[2J\n"
		"window: 0.000 s\n"
		"mode: precise\n"
		"heap: new 32 B in 3 blocks, peak 32 B, allocated 32 B in 3 blocks, freed 0 B in 0 "
		"blocks, unknown frees 0\n"
		"\n"
		"KERNEL                              CALLS    BYTES_ADDED    ALLOC_BYTES     "
		"PEAK_ADDED      PEAK_LIVE      RSS_DELTA      TIME_MS\n"
		"matMul                                  1              8              8        "
		"      8             32              -        0.000\n"
		"\n"
		"OWNER                               ALLOC_BYTES     LIVE_BYTES     PEAK_BYTES      "
		"NET_BYTES\n"
		"(unknown)                                    32             32             32      "
		"       32\n"
		"\n"
		"TAG                                 ALLOC_BYTES     LIVE_BYTES     PEAK_BYTES      "
		"NET_BYTES\n"
		"(untagged)                                   32             32             32      "
		"       32\n"
		"\n"
		"PEAK                             OWNER                                     BYTES   "
		"SHARE\n"
		"(process)                        (unknown)                                    32  "
		"100.0%\n"
		"\n"
		"drops: ring 3, bpf 0, invocations beyond cap 0, markers 0; unmatched ends 0; "
		"truncated: no\n");
	free(txt);
	mp_profile_free(p);
}

/* The heap figures mean something else in each tracing mode: the table
 * says which, right under the window. */
Test(report, table_names_the_mode)
{
	static const char head[] = "memprofd profile: pid 0 ?\n"
				   "window: 0.000 s\n";
	static const char body[] =
		"heap: new 32 B in 3 blocks, peak 32 B, allocated 32 B in 3 blocks, freed 0 B in 0 "
		"blocks, unknown frees 0\n"
		"\n"
		"KERNEL                              CALLS    BYTES_ADDED    ALLOC_BYTES     "
		"PEAK_ADDED      PEAK_LIVE      RSS_DELTA      TIME_MS\n"
		"matMul                                  1              8              8        "
		"      8             32              -        0.000\n"
		"\n"
		"OWNER                               ALLOC_BYTES     LIVE_BYTES     PEAK_BYTES      "
		"NET_BYTES\n"
		"(unknown)                                    32             32             32      "
		"       32\n"
		"\n"
		"TAG                                 ALLOC_BYTES     LIVE_BYTES     PEAK_BYTES      "
		"NET_BYTES\n"
		"(untagged)                                   32             32             32      "
		"       32\n"
		"\n"
		"PEAK                             OWNER                                     BYTES   "
		"SHARE\n"
		"(process)                        (unknown)                                    32  "
		"100.0%\n"
		"\n"
		"drops: ring 0, bpf 0, invocations beyond cap 0, markers 0; unmatched ends 0; "
		"truncated: no\n";
	const struct {
		uint32_t mode;
		uint64_t sample_bytes, on, period, active;
		const char *lines;
		uint32_t path;
		const char *reason;
	} cases[] = {
		{ 1, 4096, 0, 0, 0,
		  "mode: sampled, mean interval 4096 B (heap figures are estimates)\n", 0, NULL },
		{ 2, 0, 0, 0, 0,
		  "mode: rss (no allocator probes: heap figures are the break (brk), anonymous "
		  "mmaps the mappings)\n",
		  0, NULL },
		{ 0, 0, 10000000, 1000000000, 2500000000,
		  "mode: precise\n"
		  "duty cycle 10ms/1s, active 2.500 s: heap figures cover only those windows\n",
		  0, NULL },
		{ 1, 65536, 1500, 1000001, 3000,
		  "mode: sampled, mean interval 65536 B (heap figures are estimates)\n"
		  "duty cycle 1500ns/1000001ns, active 0.000 s: heap figures cover only those "
		  "windows\n",
		  0, NULL },
		{ 7, 0, 0, 0, 0, "mode: unknown (7)\n", 0, NULL },
		/* rss mode on the eBPF tracer attaches no uprobe */
		{ 2, 0, 0, 0, 0,
		  "mode: rss (no allocator probes: heap figures are the break (brk), anonymous "
		  "mmaps the mappings)\n"
		  "path: none (rss mode: no allocator probes)\n",
		  MP_PATH_BPF, "" },
		{ 0, 0, 0, 0, 0, "mode: precise\npath: eBPF uprobes\n", MP_PATH_BPF, "" },
		{ 0, 0, 0, 0, 0, "mode: precise\npath: eBPF uprobes (not injected: traced)\n",
		  MP_PATH_BPF, "not injected: traced" },
		{ 0, 0, 0, 0, 0, "mode: precise\npath: in-process (libmemprof interposer)\n",
		  MP_PATH_INPROCESS, "" },
		{ 0, 0, 0, 0, 0,
		  "mode: precise\npath: in-process (libmemprof injected by ptrace: 6 GOT slots, 1 "
		  "threads held 4.0 ms)\n",
		  MP_PATH_INPROCESS, "injected by ptrace: 6 GOT slots, 1 threads held 4.0 ms" },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct mp_profile *p = tfjs_example2();
		char want[4096], *txt;

		p->trace_mode = cases[i].mode;
		p->sample_bytes = cases[i].sample_bytes;
		p->duty_on_ns = cases[i].on;
		p->duty_period_ns = cases[i].period;
		p->duty_active_ns = cases[i].active;
		p->tracer_path = cases[i].path;
		snprintf(p->tracer_path_reason, sizeof(p->tracer_path_reason), "%s",
			 cases[i].reason ? cases[i].reason : "");
		snprintf(want, sizeof(want), "%s%s%s", head, cases[i].lines, body);
		txt = render(p, MP_REPORT_TABLE, NULL);
		cr_expect_str_eq(txt, want, "cases[%zu]:\n%s", i, txt);
		free(txt);
		mp_profile_free(p);
	}
}

Test(report, json_is_the_whole_model)
{
	struct mp_profile *p = tfjs_example2();
	const char *src = getenv("MEMPROF_SOURCE_ROOT");
	char path[4096], *want = NULL, *txt;
	enum mp_report_format fmt;
	size_t len = 0;
	FILE *f;

	cr_assert_not_null(src, "MEMPROF_SOURCE_ROOT is not set (run through meson test)");
	cr_assert_eq(mp_profile_set_process(p, 77, "/opt/bin/\"demo\"", "0123abcd", "demo --x"), 0);
	p->drops_bpf = 5;
	txt = render(p, MP_REPORT_JSON, NULL);
	snprintf(path, sizeof(path), "%s/tests/profile/golden/example2.json", src);
	f = fopen(path, "r");
	cr_assert_not_null(f, "%s: %m", path);
	cr_assert_gt(getdelim(&want, &len, '\0', f), 0);
	fclose(f);
	cr_expect_str_eq(txt, want, "JSON differs from %s:\n%s", path, txt);
	free(want);
	free(txt);
	cr_expect_eq(mp_report_format_parse("tfjs", &fmt), 0);
	cr_expect_eq(fmt, MP_REPORT_TFJS);
	cr_expect_eq(mp_report_format_parse("table", &fmt), 0);
	cr_expect_eq(fmt, MP_REPORT_TABLE);
	cr_expect_eq(mp_report_format_parse("json", &fmt), 0);
	cr_expect_eq(fmt, MP_REPORT_JSON);
	cr_expect_eq(mp_report_format_parse("xml", &fmt), -EINVAL);
	mp_profile_free(p);
}

/* A long pseudo-random stream over several threads (kernels nesting and
 * crossing threads, tags, phases, frees from other threads, unknown frees,
 * markers lost): the figures must stay consistent with a simple model kept
 * by the test. */
static uint64_t lcg(uint64_t *x)
{
	*x = *x * 6364136223846793005ull + 1442695040888963407ull;
	return *x >> 33;
}

static const char *stress_resolve(void *ctx, uint64_t addr)
{
	static const char *libs[] = { "/lib/liba.so", "/lib/libb.so", NULL, "/bin/app" };

	(void)ctx;
	return libs[addr & 3];
}

Test(correlator, random_stream_invariants)
{
	static const char *knames[] = { "conv", "gemm", "relu", "pool", "softmax" };
	static const char *tnames[] = { "weights", "activations", "scratch" };
	static const char *pnames[] = { "load", "inference" };
	struct mp_correlator_opts o = { .resolve_owner = stress_resolve };
	enum { NBLK = 4096, NTHR = 4 };
	struct block *live = calloc(NBLK, sizeof(*live));
	bool *in_kernel = calloc(NBLK, sizeof(*in_kernel));
	unsigned depth[NTHR] = { 0 }, open_total = 0, nlive = 0;
	uint64_t x = 42, live_bytes = 0, peak = 0, outside_alloc = 0, retained = 0;
	struct stream s;
	struct mp_profile *p;

	cr_assert(live && in_kernel);
	stream_init(&s, &o);
	for (int i = 0; i < 200000; i++) {
		uint32_t tid = 1 + lcg(&x) % NTHR;
		unsigned op = lcg(&x) % 100;

		if (op < 8 && depth[tid - 1] < 6) {
			kbegin(&s, tid, knames[lcg(&x) % 5]);
			depth[tid - 1]++;
			open_total++;
		} else if (op < 16) {
			kend(&s, tid); /* may be unmatched */
			if (depth[tid - 1]) {
				depth[tid - 1]--;
				open_total--;
			}
		} else if (op < 18) {
			shape(&s, tid, op & 1, 2, (int64_t)lcg(&x), (int64_t)-1);
		} else if (op < 20) {
			tag_begin(&s, tid, tnames[lcg(&x) % 3]);
		} else if (op < 22) {
			tag_end(&s, tid);
		} else if (op < 23) {
			phase(&s, pnames[lcg(&x) % 2]);
		} else if (op < 60 && nlive < NBLK) {
			uint64_t size = lcg(&x) % 100000;

			live[nlive] = alloc_from(&s, tid, size, 0x1000 + lcg(&x) % 64);
			in_kernel[nlive] = open_total > 0;
			if (!open_total)
				outside_alloc += size;
			else
				retained += size;
			nlive++;
			live_bytes += size;
			if (live_bytes > peak)
				peak = live_bytes;
		} else if (op < 95 && nlive) {
			uint32_t k = lcg(&x) % nlive;

			release(&s, tid, &live[k]);
			live_bytes -= live[k].size;
			if (in_kernel[k])
				retained -= live[k].size;
			live[k] = live[--nlive];
			in_kernel[k] = in_kernel[nlive];
		} else {
			unknown_free(&s, tid, lcg(&x));
		}
	}
	p = finish(&s);

	cr_expect_eq(p->mem.bytes_added, (int64_t)live_bytes);
	cr_expect_eq(p->mem.tensors_added, (int64_t)nlive);
	cr_expect_eq(p->peak_bytes, peak);
	cr_expect_eq(p->invocations_dropped, 0);
	cr_expect_eq(p->accounting_errors, 0);

	uint64_t sum_owner = 0, sum_tag = 0, sum_calls = 0, sum_excl = 0, sum_ret = 0;

	for (uint32_t i = 0; i < p->n_owners; i++)
		sum_owner += p->owners[i].live_bytes;
	for (uint32_t i = 0; i < p->n_tags; i++)
		sum_tag += p->tags[i].live_bytes;
	for (uint32_t i = 0; i < p->n_kernels; i++)
		sum_calls += p->kernels[i].calls;
	cr_expect_eq(sum_owner, live_bytes);
	cr_expect_eq(sum_tag, live_bytes);
	cr_expect_eq(sum_calls, p->n_invocations);
	cr_expect_eq(p->n_owners, 4); /* (unknown), liba, libb, app */
	cr_expect_eq(p->n_tags, 4);
	cr_expect_eq(p->n_phases, 2);
	/* The stream really exercised what it is meant to. */
	uint64_t cross = 0;

	for (uint32_t i = 0; i < p->n_kernels; i++)
		cross += p->kernels[i].cross_thread_allocs;
	fprintf(stderr,
		"stress: %u invocations, %" PRIu64 " cross-thread, %" PRIu64
		" unmatched ends, %" PRIu64 " orphan shapes, %" PRIu64 " allocs\n",
		p->n_invocations, cross, p->unmatched_ends, p->orphan_shapes, p->mem.alloc_count);
	cr_expect_gt(p->n_invocations, 1000);
	cr_expect_gt(cross, 100);
	cr_expect_gt(p->unmatched_ends, 100);
	cr_expect_gt(p->unmatched_tag_ends, 100);
	for (uint32_t i = 0; i < p->n_invocations; i++) {
		const struct mp_invocation *v = &p->invocations[i];
		uint64_t ob = 0, tb = 0, of = 0;

		sum_excl += v->excl.alloc_bytes;
		sum_ret += v->retained_bytes;
		cr_expect_eq(v->incl.bytes_added,
			     (int64_t)(v->incl.alloc_bytes - v->incl.free_bytes));
		cr_expect_leq(v->excl.alloc_bytes, v->incl.alloc_bytes);
		cr_expect_leq(v->peak_added, v->incl.alloc_bytes);
		cr_expect_geq(v->end_ns, v->begin_ns);
		if (v->parent != MP_NONE) {
			cr_expect_lt(v->parent, i);
			cr_expect_eq(p->invocations[v->parent].tid, v->tid);
			cr_expect_eq(p->invocations[v->parent].depth + 1, v->depth);
		}
		for (uint32_t k = 0; k < v->n_owners; k++) {
			ob += v->owners[k].alloc_bytes;
			of += v->owners[k].free_bytes;
		}
		for (uint32_t k = 0; k < v->n_tags; k++)
			tb += v->tags[k].alloc_bytes;
		cr_expect_eq(ob, v->incl.alloc_bytes);
		cr_expect_eq(of, v->incl.free_bytes);
		cr_expect_eq(tb, v->incl.alloc_bytes);
	}
	cr_expect_eq(sum_excl + outside_alloc, p->mem.alloc_bytes);
	cr_expect_eq(sum_ret, retained);
	mp_profile_free(p);
	free(live);
	free(in_kernel);
}

static void snapshot_and_drop(struct stream *s)
{
	struct mp_profile *q = NULL;

	cr_assert_eq(mp_correlator_snapshot(s->c, s->ts, &q), 0);
	mp_profile_free(q);
}

/* A stream with a bit of everything, cut after @stop events; with @snap the
 * correlator is snapshotted along the way. */
static struct stream snapshot_stream(int stop, bool snap, struct mp_profile **ret_snap)
{
	struct stream s;
	struct block b[4];
	int n = 0;

	stream_init(&s, NULL);
#define STEP(x)                                \
	do {                                   \
		if (n++ == stop)               \
			goto out;              \
		x;                             \
		if (snap && n == 6)            \
			snapshot_and_drop(&s); \
	} while (0)
	STEP(phase(&s, "load"));
	STEP(rss_sample(&s, 1 << 20));
	STEP(kbegin(&s, 1, "outer"));
	STEP(b[0] = alloc(&s, 1, 100));
	STEP(kbegin(&s, 1, "inner"));
	STEP(tag_begin(&s, 2, "act"));
	STEP(b[1] = alloc(&s, 2, 50));
	STEP(rss_sample(&s, 3 << 20));
	STEP(kend(&s, 1));
	STEP(release(&s, 1, &b[0]));
	STEP(phase(&s, "inference"));
	STEP(b[2] = alloc(&s, 3, 7));
	STEP(kend(&s, 1));
	STEP(b[3] = alloc(&s, 1, 9));
	(void)b;
#undef STEP
out:
	if (ret_snap)
		cr_assert_eq(mp_correlator_snapshot(s.c, s.ts, ret_snap), 0);
	return s;
}

/* A snapshot is exactly the profile finish would give at that moment, and
 * taking one changes nothing in the final profile. */
Test(correlator, snapshot_equals_finish)
{
	for (int stop = 0; stop <= 14; stop++) {
		struct mp_profile *snap = NULL, *fin, *plain;
		struct stream s = snapshot_stream(stop, false, &snap);
		uint64_t end = s.ts;

		cr_assert_eq(mp_correlator_finish(s.c, end, &fin), 0);
		mp_correlator_free(s.c);
		expect_profile_eq(snap, fin);
		mp_profile_free(snap);
		mp_profile_free(fin);

		s = snapshot_stream(stop, true, NULL);
		cr_assert_eq(mp_correlator_finish(s.c, s.ts, &fin), 0);
		mp_correlator_free(s.c);
		s = snapshot_stream(stop, false, NULL);
		cr_assert_eq(mp_correlator_finish(s.c, s.ts, &plain), 0);
		mp_correlator_free(s.c);
		expect_profile_eq(fin, plain);
		mp_profile_free(fin);
		mp_profile_free(plain);
	}
}

/* The name and slice tables well past their first growth: every name is
 * found again, names past the bound go to "(other)", and every slice
 * allocated is found at its free. */
Test(correlator, name_and_slice_tables_past_their_growth)
{
	const uint32_t n = 70000, slices = 5000;
	const struct mp_mempool *mp;
	struct mp_profile *p;
	struct stream s;
	char name[32];

	stream_init(&s, NULL);
	for (uint32_t i = 0; i < n; i++) {
		snprintf(name, sizeof(name), "k%u", i);
		kbegin(&s, 1, name);
		kend(&s, 1);
	}
	kbegin(&s, 1, "k7");
	kend(&s, 1);
	for (uint32_t i = 0; i < 2 * slices; i++) {
		uint64_t addr = 0x100000 + 64 * (uint64_t)(i < slices ? i : 2 * slices - 1 - i);
		struct mp_record r = { .type = i < slices ? MP_REC_POOL_ALLOC : MP_REC_POOL_FREE,
				       .tid = 1,
				       .ts_ns = tick(&s),
				       .name = "arena",
				       .seq = next_seq(&s, 1) };

		r.pool.kind = MP_POOL_KIND_HOST;
		r.pool.addr = addr;
		r.pool.size = i < slices ? 48 : 0;
		cr_assert_eq(mp_correlator_on_record(s.c, &r), 0);
	}
	p = finish(&s);
	cr_assert_eq(p->n_names, 65535);
	cr_assert_str_eq(p->names[65534], "(other)");
	cr_assert_eq(mp_profile_kernel(p, "(other)")->calls, n - 65534);
	cr_assert_eq(mp_profile_kernel(p, "k7")->calls, 2);
	cr_assert_eq(mp_profile_kernel(p, "k65533")->calls, 1);
	cr_assert_eq(p->n_mempools, 1);
	mp = &p->mempools[0];
	cr_assert_eq(mp->mem.alloc_count, slices);
	cr_assert_eq(mp->mem.free_count, slices);
	cr_assert_eq(mp->mem.free_bytes, 48ull * slices);
	cr_assert_eq(mp->peak_bytes, 48ull * slices);
	cr_assert_eq(mp->live_bytes, 0);
	cr_assert_eq(mp->unknown_frees, 0);
	cr_assert_eq(p->accounting_errors, 0);
	cr_assert_eq(p->dropped_markers, 0);
	mp_profile_free(p);
}
