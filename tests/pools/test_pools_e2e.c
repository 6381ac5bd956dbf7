// SPDX-License-Identifier: MIT
/*
 * Pools end to end: the real memprof binary, real BPF, fixtures on stub
 * device runtimes (stub_device.h) and an arena on the pools API. Every
 * figure asserted is exact: the fixtures are deterministic.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/helpers.h"
#include "profile.h"
#include "profile_pb.h"

static void need_root(void)
{
	mp_test_need_root("BPF");
}

/* `memprof run -o PATH --print none OPTS... -- PROG [ARG]`. */
static void memprof_run(const char *prog, const char *arg, const char *const *opts,
			const char *path)
{
	static char out[4096];
	char *argv[24];
	int n = 0;

	argv[n++] = mp_test_build_path("cli/memprof");
	argv[n++] = "run";
	argv[n++] = "-o";
	argv[n++] = (char *)path;
	argv[n++] = "--print";
	argv[n++] = "none";
	for (; opts && *opts && n < 20; opts++)
		argv[n++] = (char *)*opts;
	argv[n++] = "--";
	argv[n++] = (char *)prog;
	if (arg)
		argv[n++] = (char *)arg;
	argv[n] = NULL;
	cr_assert_eq(mp_test_run_capture(argv, out, sizeof(out)), 0, "memprof run %s failed", prog);
}

/* The profile of FIXTURE run with OPTS, loaded. */
static struct mp_profile *profile_of(const char *fixture, const char *const *opts)
{
	char path[4200], dir[256];
	struct mp_profile *p = NULL;
	const char *why = NULL;

	mp_test_tmpdir(dir, sizeof(dir), "pools");
	snprintf(path, sizeof(path), "%s/profile.memprof", dir);
	memprof_run(mp_test_build_path(fixture), NULL, opts, path);
	cr_assert_eq(mp_profile_load(path, &p, &why), 0, "loading %s: %s", path, why ? why : "");
	mp_test_rmtree(dir);
	return p;
}

static uint32_t pool_index(const struct mp_profile *p, const char *name)
{
	const struct mp_mempool *mp = mp_profile_mempool(p, name);

	cr_assert_not_null(mp, "no pool %s", name);
	return (uint32_t)(mp - p->mempools);
}

static void expect_mempool(const struct mp_profile *p, const struct mp_mempool *want)
{
	const struct mp_mempool *g = &p->mempools[pool_index(p, want->name)];

	cr_expect_eq(g->kind, want->kind, "%s kind", want->name);
	cr_expect_eq(g->source, want->source, "%s source", want->name);
	cr_expect(!memcmp(&g->mem, &want->mem, sizeof(g->mem)),
		  "%s: slices alloc %llu/%llu free %llu/%llu added %lld/%lld", want->name,
		  (unsigned long long)g->mem.alloc_bytes, (unsigned long long)g->mem.alloc_count,
		  (unsigned long long)g->mem.free_bytes, (unsigned long long)g->mem.free_count,
		  (long long)g->mem.bytes_added, (long long)g->mem.tensors_added);
	cr_expect_eq(g->live_bytes, want->live_bytes, "%s live %llu", want->name,
		     (unsigned long long)g->live_bytes);
	cr_expect_eq(g->live_count, want->live_count, "%s live count", want->name);
	cr_expect_eq(g->peak_bytes, want->peak_bytes, "%s peak %llu", want->name,
		     (unsigned long long)g->peak_bytes);
	cr_expect_eq(g->resets, want->resets, "%s resets", want->name);
	cr_expect_eq(g->unknown_frees, want->unknown_frees, "%s unknown frees", want->name);
}

/* Kernel @kernel's bucket of pool @pool is exactly @want (id ignored). */
static void expect_kernel_pool(const struct mp_profile *p, const char *kernel, const char *pool,
			       uint64_t calls, const struct mp_pool_bucket *want)
{
	const struct mp_kernel *k = mp_profile_kernel(p, kernel);
	const struct mp_pool_bucket *b;

	cr_assert_not_null(k, "no kernel %s", kernel);
	cr_expect_eq(k->calls, calls, "%s: %llu calls", kernel, (unsigned long long)k->calls);
	b = mp_pool_bucket_find(k->pools, k->n_pools, pool_index(p, pool));
	cr_assert_not_null(b, "%s has no bucket of pool %s", kernel, pool);
	cr_expect(b->alloc_bytes == want->alloc_bytes && b->alloc_count == want->alloc_count &&
			  b->free_bytes == want->free_bytes && b->free_count == want->free_count &&
			  b->peak_added == want->peak_added && b->peak_bytes == want->peak_bytes,
		  "%s/%s: alloc %llu/%llu free %llu/%llu peak_added %llu peak %llu", kernel, pool,
		  (unsigned long long)b->alloc_bytes, (unsigned long long)b->alloc_count,
		  (unsigned long long)b->free_bytes, (unsigned long long)b->free_count,
		  (unsigned long long)b->peak_added, (unsigned long long)b->peak_bytes);
	/* Device and arena slices are never in the heap figures: these
	 * kernels make no host allocation at all. */
	cr_expect_eq(k->incl.alloc_count, 0, "%s: %llu heap allocations", kernel,
		     (unsigned long long)k->incl.alloc_count);
	cr_expect_eq(k->incl.free_count, 0, "%s: heap frees", kernel);
}

/* Phase @phase's bucket of pool @pool is exactly @want (id ignored). */
static void expect_phase_pool(const struct mp_profile *p, const char *phase, const char *pool,
			      const struct mp_pool_bucket *want)
{
	const struct mp_phase *ph = mp_profile_phase(p, phase);
	const struct mp_pool_bucket *b;

	cr_assert_not_null(ph, "no phase %s", phase);
	b = mp_pool_bucket_find(ph->pools, ph->n_pools, pool_index(p, pool));
	cr_assert_not_null(b, "phase %s has no bucket of pool %s", phase, pool);
	cr_expect(b->alloc_bytes == want->alloc_bytes && b->alloc_count == want->alloc_count &&
			  b->free_bytes == want->free_bytes && b->free_count == want->free_count &&
			  b->peak_added == want->peak_added && b->peak_bytes == want->peak_bytes &&
			  b->live_end == want->live_end,
		  "phase %s/%s: alloc %llu/%llu free %llu/%llu peak_added %llu peak %llu end %llu",
		  phase, pool, (unsigned long long)b->alloc_bytes,
		  (unsigned long long)b->alloc_count, (unsigned long long)b->free_bytes,
		  (unsigned long long)b->free_count, (unsigned long long)b->peak_added,
		  (unsigned long long)b->peak_bytes, (unsigned long long)b->live_end);
}

static uint32_t tag_index(const struct mp_profile *p, const char *name)
{
	const struct mp_pool *t = mp_profile_tag(p, name);

	cr_assert_not_null(t, "no tag %s", name);
	return (uint32_t)(t - p->tags);
}

/* Pool @pool's slices under tag @tag over the run: allocated and freed
 * bytes/slices, peak live (live at the end: allocated - freed). */
static void expect_pool_tag(const struct mp_profile *p, const char *pool, const char *tag,
			    uint64_t ab, uint64_t ac, uint64_t fb, uint64_t fc, uint64_t peak)
{
	const struct mp_pool_tag *t =
		mp_pool_tag_find(&p->mempools[pool_index(p, pool)], tag_index(p, tag));

	cr_assert_not_null(t, "pool %s has no tag %s", pool, tag);
	cr_expect(t->mem.alloc_bytes == ab && t->mem.alloc_count == ac && t->mem.free_bytes == fb &&
			  t->mem.free_count == fc && t->peak_bytes == peak &&
			  t->live_bytes == ab - fb && t->live_count == ac - fc,
		  "%s/%s: alloc %llu/%llu free %llu/%llu peak %llu live %llu/%llu", pool, tag,
		  (unsigned long long)t->mem.alloc_bytes, (unsigned long long)t->mem.alloc_count,
		  (unsigned long long)t->mem.free_bytes, (unsigned long long)t->mem.free_count,
		  (unsigned long long)t->peak_bytes, (unsigned long long)t->live_bytes,
		  (unsigned long long)t->live_count);
}

/* Kernel @kernel's slices of pool @pool under tag @tag (inclusive). */
static void expect_kernel_pool_tag(const struct mp_profile *p, const char *kernel, const char *pool,
				   const char *tag, uint64_t ab, uint64_t ac, uint64_t fb,
				   uint64_t fc)
{
	const struct mp_kernel *k = mp_profile_kernel(p, kernel);
	const struct mp_pool_tag_bucket *b;

	cr_assert_not_null(k, "no kernel %s", kernel);
	b = mp_pool_tag_bucket_find(k->pool_tags, k->n_pool_tags, pool_index(p, pool),
				    tag_index(p, tag));
	cr_assert_not_null(b, "%s has no bucket of %s/%s", kernel, pool, tag);
	cr_expect(b->alloc_bytes == ab && b->alloc_count == ac && b->free_bytes == fb &&
			  b->free_count == fc,
		  "%s %s/%s: alloc %llu/%llu free %llu/%llu", kernel, pool, tag,
		  (unsigned long long)b->alloc_bytes, (unsigned long long)b->alloc_count,
		  (unsigned long long)b->free_bytes, (unsigned long long)b->free_count);
}

#define B(ab, ac, fb, fc, pa, pk)                       \
	(&(struct mp_pool_bucket){ .alloc_bytes = (ab), \
				   .alloc_count = (ac), \
				   .free_bytes = (fb),  \
				   .free_count = (fc),  \
				   .peak_added = (pa),  \
				   .peak_bytes = (pk) })
#define W 1048576u /* the weights */

/* What fixture-device does in pool "cuda" seen through cudaMalloc and
 * cudaFree, and (@driver) through cuMemAlloc_v2/cuMemFree_v2 called
 * directly. A call of the runtime that calls the driver counts once. */
static void expect_device(const struct mp_profile *p, bool driver)
{
	uint64_t mm_alloc = driver ? 3 * 8192 : 0, mm_allocs = driver ? 3 : 0;

	expect_kernel_pool(p, "load_weights", "cuda", 1, B(W, 1, 0, 0, W, W));
	expect_kernel_pool(p, "conv", "cuda", 3,
			   B(3 * (65536 + 16384), 6, 3 * 16384, 3, 81920, W + 65536 + 16384));
	/* the failed cudaMalloc(999) and cudaFree(&bad) record nothing */
	expect_kernel_pool(p, "relu", "cuda", 3,
			   B(3 * 32768, 3, 3 * 65536, 3, 32768, W + 65536 + 32768));
	expect_kernel_pool(p, "matmul", "cuda", 3,
			   B(mm_alloc, mm_allocs, 3 * 32768 + mm_alloc, 3 + mm_allocs,
			     driver ? 8192 : 0, W + 32768 + (driver ? 8192 : 0)));
	/* peak per phase: load vs inference */
	expect_phase_pool(p, "load", "cuda",
			  &(struct mp_pool_bucket){ .alloc_bytes = W,
						    .alloc_count = 1,
						    .peak_added = W,
						    .peak_bytes = W,
						    .live_end = W });
	expect_phase_pool(p, "inference", "cuda",
			  &(struct mp_pool_bucket){ .alloc_bytes = 245760 + 98304 + mm_alloc,
						    .alloc_count = 9 + mm_allocs,
						    .free_bytes = 49152 + 196608 + 98304 + mm_alloc,
						    .free_count = 9 + mm_allocs,
						    .peak_added = 65536 + 32768,
						    .peak_bytes = W + 65536 + 32768,
						    .live_end = W });
	expect_mempool(p, &(struct mp_mempool){
				  .name = "cuda",
				  .kind = MP_POOL_KIND_DEVICE,
				  .source = MP_POOL_SRC_PROBE,
				  .mem = { .bytes_added = W,
					   .tensors_added = 1,
					   .alloc_bytes = W + 245760 + 98304 + mm_alloc,
					   .alloc_count = 10 + mm_allocs,
					   .free_bytes = 49152 + 196608 + 98304 + mm_alloc,
					   .free_count = 9 + mm_allocs },
				  .live_bytes = W,
				  .live_count = 1,
				  .peak_bytes = W + 65536 + 32768,
			  });
	/* the weights were allocated under tag "weights" (the tag markers
	 * come through the ring, the device calls through BPF) */
	expect_pool_tag(p, "cuda", "weights", W, 1, 0, 0, W);
	expect_pool_tag(p, "cuda", "(untagged)", 245760 + 98304 + mm_alloc, 9 + mm_allocs,
			49152 + 196608 + 98304 + mm_alloc, 9 + mm_allocs, 65536 + 32768);
	expect_kernel_pool_tag(p, "load_weights", "cuda", "weights", W, 1, 0, 0);
	expect_kernel_pool_tag(p, "conv", "cuda", "(untagged)", 3 * (65536 + 16384), 6, 3 * 16384,
			       3);
	cr_expect_eq(mp_profile_tag(p, "weights")->mem.alloc_count, 0,
		     "device memory in heap tags");
}

Test(pools, device_preset_cuda)
{
	static const char *const opts[] = { "--device", "cuda", NULL };
	struct mp_profile *p;

	need_root();
	p = profile_of("tests/pools/fixture-device", opts);
	expect_device(p, true);
	expect_kernel_pool(p, "load_weights", "cuda-host", 1, B(4096, 1, 0, 0, 4096, 4096));
	expect_mempool(p, &(struct mp_mempool){
				  .name = "cuda-host",
				  .kind = MP_POOL_KIND_HOST,
				  .source = MP_POOL_SRC_PROBE,
				  .mem = { .bytes_added = 4096,
					   .tensors_added = 1,
					   .alloc_bytes = 4096,
					   .alloc_count = 1 },
				  .live_bytes = 4096,
				  .live_count = 1,
				  .peak_bytes = 4096,
			  });
	mp_profile_free(p);
}

Test(pools, device_hand_written_spec)
{
	static const char *const opts[] = {
		"--alloc", "cudaMalloc@libcudart.so*:ptr=*arg0,size=arg1,ok=ret==0,pool=cuda",
		"--free",  "cudaFree@libcudart.so*:ptr=arg0,ok=ret==0,pool=cuda",
		NULL,
	};
	struct mp_profile *p;

	need_root();
	p = profile_of("tests/pools/fixture-device", opts);
	expect_device(p, false);
	cr_expect_eq(p->n_mempools, 1);
	mp_profile_free(p);
}

Test(pools, device_preset_hip)
{
	static const char *const opts[] = { "--device", "hip", NULL };
	struct mp_profile *p;

	need_root();
	p = profile_of("tests/pools/fixture-hip", opts);
	/* attention encloses softmax: inclusive figures */
	expect_kernel_pool(p, "attention", "hip", 2, B(2 * 5120, 4, 2 * 5120, 4, 5120, 5120));
	expect_kernel_pool(p, "softmax", "hip", 2, B(2 * 1024, 2, 2 * 1024, 2, 1024, 5120));
	expect_kernel_pool(p, "attention", "hip-host", 2, B(1024, 2, 1024, 2, 512, 512));
	expect_mempool(p, &(struct mp_mempool){
				  .name = "hip",
				  .kind = MP_POOL_KIND_DEVICE,
				  .source = MP_POOL_SRC_PROBE,
				  .mem = { .alloc_bytes = 10240,
					   .alloc_count = 4,
					   .free_bytes = 10240,
					   .free_count = 4 },
				  .peak_bytes = 5120,
			  });
	mp_profile_free(p);
}

Test(pools, arena_slices_and_the_backing_malloc)
{
	const struct mp_kernel *load;
	struct mp_profile *p;

	need_root();
	p = profile_of("tests/pools/fixture-arena", NULL);
	/* host view: the arena is one 1 MiB malloc */
	load = mp_profile_kernel(p, "load_arena");
	cr_assert_not_null(load);
	cr_expect_eq(load->incl.alloc_bytes, W);
	cr_expect_eq(load->incl.alloc_count, 1);
	cr_expect_eq(p->mem.alloc_bytes, W, "heap: %llu B", (unsigned long long)p->mem.alloc_bytes);
	cr_expect_eq(p->mem.alloc_count, 1);
	cr_expect_eq(p->peak_bytes, W);
	/* slices have owners as blocks do: the caller's object */
	for (uint32_t i = 0; i < p->n_sites; i++)
		cr_expect_str_eq(p->owners[p->sites[i].owner].name, "fixture-arena", "site %u", i);
	/* pool view: its slices, per kernel */
	expect_kernel_pool(p, "conv", "activations", 3, B(750000, 6, 150000, 3, 250000, 250000));
	expect_kernel_pool(p, "fc", "activations", 3, B(900000, 3, 0, 0, 300000, 500000));
	expect_kernel_pool(p, "reset", "activations", 3, B(0, 0, 1500000, 6, 0, 500000));
	expect_mempool(p, &(struct mp_mempool){
				  .name = "activations",
				  .kind = MP_POOL_KIND_HOST,
				  .source = MP_POOL_SRC_API,
				  .mem = { .alloc_bytes = 1650000,
					   .alloc_count = 9,
					   .free_bytes = 1650000,
					   .free_count = 9 },
				  .peak_bytes = 500000,
				  .resets = 3,
			  });
	/* per tag: conv's output under "act", its scratch under "tmp"
	 * (freed after the tag ended: still tmp's), fc's output untagged;
	 * the resets free each slice from its own tag */
	expect_pool_tag(p, "activations", "act", 600000, 3, 600000, 3, 200000);
	expect_pool_tag(p, "activations", "tmp", 150000, 3, 150000, 3, 50000);
	expect_pool_tag(p, "activations", "(untagged)", 900000, 3, 900000, 3, 300000);
	expect_kernel_pool_tag(p, "conv", "activations", "act", 600000, 3, 0, 0);
	expect_kernel_pool_tag(p, "conv", "activations", "tmp", 150000, 3, 150000, 3);
	expect_kernel_pool_tag(p, "fc", "activations", "(untagged)", 900000, 3, 0, 0);
	expect_kernel_pool_tag(p, "reset", "activations", "act", 0, 0, 600000, 3);
	expect_kernel_pool_tag(p, "reset", "activations", "(untagged)", 0, 0, 900000, 3);
	cr_expect_null(mp_pool_tag_bucket_find(mp_profile_kernel(p, "reset")->pool_tags,
					       mp_profile_kernel(p, "reset")->n_pool_tags,
					       pool_index(p, "activations"), tag_index(p, "tmp")));
	/* slices are never in the heap's tag figures */
	cr_expect_eq(mp_profile_tag(p, "act")->mem.alloc_count, 0);
	mp_profile_free(p);
}

/* The fenced block of @rel (under the source root) that begins with
 * @first, in *@ret (malloc'd). */
static void doc_block(const char *rel, const char *first, char **ret)
{
	const char *root = getenv("MEMPROF_SOURCE_ROOT");
	char path[4096], fence[256], *text = NULL, *at, *end;
	size_t cap = 0;
	FILE *f;

	cr_assert_not_null(root, "MEMPROF_SOURCE_ROOT unset (run through meson test)");
	snprintf(path, sizeof(path), "%s/%s", root, rel);
	f = fopen(path, "r");
	cr_assert_not_null(f, "%s", path);
	cr_assert_gt(getdelim(&text, &cap, '\0', f), 0, "%s", path);
	fclose(f);
	snprintf(fence, sizeof(fence), "```\n%s", first);
	at = strstr(text, fence);
	cr_assert_not_null(at, "%s shows no block beginning %s", rel, first);
	at += 4;
	end = strstr(at, "\n```");
	cr_assert_not_null(end, "%s: unterminated block", rel);
	*ret = strndup(at, (size_t)(end - at) + 1);
	free(text);
}

/* `memprof report` of `memprof run OPTS -- PROG ARG`, in @out. */
static void report_of(const char *prog, const char *arg, const char *const *opts, char *out,
		      size_t cap)
{
	char dir[256], path[4200];
	char *report[] = { mp_test_build_path("cli/memprof"), "report", path, NULL };

	mp_test_tmpdir(dir, sizeof(dir), "pools-doc");
	snprintf(path, sizeof(path), "%s/profile.memprof", dir);
	memprof_run(prog, arg, opts, path);
	cr_assert_eq(mp_test_run_capture(report, out, cap), 0, "memprof report failed");
	mp_test_rmtree(dir);
}

/* The demo's table, as the READMEs show it: its activation arena is a pool
 * whose slices are made under tag "activations". */
Test(pools, demo_table_matches_readmes)
{
	static char out[65536];
	const char *const readmes[] = { "README.md", "examples/README.md" };

	need_root();
	report_of(DEMO_PATH, "3", NULL, out, sizeof(out));
	for (size_t i = 0; i < sizeof(readmes) / sizeof(readmes[0]); i++) {
		char *block;

		doc_block(readmes[i], "pools (a separate view", &block);
		cr_expect(strstr(out, block), "%s shows\n%s\nthe demo prints\n%s", readmes[i],
			  block, out);
		free(block);
	}
}

/* docs/TRACER.md's GPU check, on the stub runtime: both commands print the
 * POOL section the document shows (the spec's without the line naming the
 * preset's unused pools), and the heap never sees the 1 MiB. */
Test(pools, tracer_doc_gpu_check)
{
	static const char *const preset[] = { "--device", "cuda", NULL };
	static const char *const spec[] = {
		"--alloc", "cudaMalloc@libcudart.so*:ptr=*arg0,size=arg1,ok=ret==0,pool=cuda",
		"--free",  "cudaFree@libcudart.so*:ptr=arg0,ok=ret==0,pool=cuda",
		NULL,
	};
	static const char unused[] = "unused pools (not shown): cuda-managed, cuda-host\n";
	static char out[65536];
	const char *fixture = mp_test_build_path("tests/pools/fixture-cuda-check");
	char *block, *line;

	need_root();
	doc_block("docs/TRACER.md", "pools (a separate view", &block);
	report_of(fixture, NULL, preset, out, sizeof(out));
	cr_expect(strstr(out, block), "TRACER.md shows\n%s\n--device cuda prints\n%s", block, out);
	cr_expect(strstr(out, "\nheap: new 0 B in 0 blocks"), "%s", out);
	line = strstr(block, unused);
	cr_assert_not_null(line, "TRACER.md: no unused pools line in\n%s", block);
	memmove(line, line + strlen(unused), strlen(line + strlen(unused)) + 1);
	report_of(fixture, NULL, spec, out, sizeof(out));
	cr_expect(strstr(out, block), "TRACER.md shows\n%s\nthe spec prints\n%s", block, out);
	free(block);
}

/* The rest of the CUDA preset: cudaMallocManaged freed by cudaFree (found
 * in the managed pool), cudaMallocAsync/cudaFreeAsync, pinned memory by
 * the driver and the runtime; `memprof report --format tfjs --pool`. */
Test(pools, device_preset_cuda_managed_async_host)
{
	static const char *const preset[] = { "--device", "cuda", NULL };
	static char out[65536];
	char dir[256], path[4200];
	char *tfjs[] = { mp_test_build_path("cli/memprof"),
			 "report",
			 path,
			 "--format",
			 "tfjs",
			 "--pool",
			 "cuda-managed",
			 NULL };
	const char *fixture = mp_test_build_path("tests/pools/fixture-device-more");
	struct mp_profile *p;
	const char *why = NULL;

	need_root();
	mp_test_tmpdir(dir, sizeof(dir), "pools-more");
	snprintf(path, sizeof(path), "%s/profile.memprof", dir);
	memprof_run(fixture, NULL, preset, path);
	cr_assert_eq(mp_profile_load(path, &p, &why), 0, "%s", why ? why : "");
	expect_kernel_pool(p, "managed", "cuda-managed", 1, B(8192, 1, 8192, 1, 8192, 8192));
	expect_kernel_pool(p, "async", "cuda", 1, B(2048, 1, 2048, 1, 2048, 2048));
	expect_kernel_pool(p, "pinned", "cuda-host", 1, B(1536, 2, 1536, 2, 1536, 1536));
	expect_mempool(p, &(struct mp_mempool){
				  .name = "cuda-managed",
				  .kind = MP_POOL_KIND_DEVICE,
				  .source = MP_POOL_SRC_PROBE,
				  .mem = { .alloc_bytes = 8192,
					   .alloc_count = 1,
					   .free_bytes = 8192,
					   .free_count = 1 },
				  .peak_bytes = 8192,
			  });
	cr_expect_eq(p->mempools[pool_index(p, "cuda")].unknown_frees, 0);
	cr_expect_eq(p->mem.alloc_count, 0, "device memory in the heap");
	mp_profile_free(p);
	cr_assert_eq(mp_test_run_capture(tfjs, out, sizeof(out)), 0, "memprof report failed");
	cr_expect_str_eq(out, "{\"newBytes\":0,\"newTensors\":0,\"peakBytes\":8192,\"kernels\":["
			      "{\"name\":\"managed\",\"bytesAdded\":0,\"totalBytesSnapshot\":0,"
			      "\"tensorsAdded\":0,\"totalTensorsSnapshot\":0,\"inputShapes\":[],"
			      "\"outputShapes\":[]},"
			      "{\"name\":\"async\",\"bytesAdded\":0,\"totalBytesSnapshot\":0,"
			      "\"tensorsAdded\":0,\"totalTensorsSnapshot\":0,\"inputShapes\":[],"
			      "\"outputShapes\":[]},"
			      "{\"name\":\"pinned\",\"bytesAdded\":0,\"totalBytesSnapshot\":0,"
			      "\"tensorsAdded\":0,\"totalTensorsSnapshot\":0,\"inputShapes\":[],"
			      "\"outputShapes\":[]}]}\n");
	mp_test_rmtree(dir);
}
