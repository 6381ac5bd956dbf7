// SPDX-License-Identifier: MIT
/*
 * Acceptance on runtimes nobody here wrote: Debian's PyTorch running a
 * resnet18 (torch_infer.py) and onnxruntime-node running the same network
 * exported to ONNX by torch.onnx.export (export_onnx.py, ort_infer.js),
 * each under `memprof run`. The figures are checked against what does not
 * come from memprof: the pprof file decoded with protobuf-c's code for
 * profile.proto, the runtimes' own libraries as owners, the RSS the kernel
 * reports, and heaptrack's peak heap on the same script.
 *
 * onnxruntime-node is an npm package that scripts/install-deps installs
 * into /var/cache/memprof-tests/node ($MEMPROF_TEST_NODE_PREFIX): under CI
 * (CI=true) a missing runtime or tool fails the test; elsewhere the test is
 * skipped and says what to install.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "../common/helpers.h"
#include "profile.h"
#include "profile.pb-c.h"
#include "profile_pb.h"

#ifndef REAL_SRC_DIR
#error "REAL_SRC_DIR must name tests/real in the source tree"
#endif
#ifndef NODE_BIN /* "" when meson found none */
#error "NODE_BIN must name node"
#endif
#ifndef HEAPTRACK_BIN
#error "HEAPTRACK_BIN must name heaptrack"
#endif
#ifndef HEAPTRACK_PRINT_BIN
#error "HEAPTRACK_PRINT_BIN must name heaptrack_print"
#endif

/* Debian's interpreter, which python3-torch is built for (not the first
 * python3 on PATH, which may be another one) */
#define PYTHON "/usr/bin/python3"
#define TORCH_DIR "/usr/lib/python3/dist-packages/torchvision"
#define NODE_PREFIX "/var/cache/memprof-tests/node"
#define PASSES "3"

static char dir[256];

static void setup(void)
{
	mp_test_need_root("memprof run");
	mp_test_tmpdir(dir, sizeof(dir), "real");
	/* The runtimes run as a user runs them: meson test sets a random
	 * MALLOC_PERTURB_, which makes glibc fill every block it hands out
	 * and takes back (pages touched, a slower import of torch). */
	cr_assert_eq(unsetenv("MALLOC_PERTURB_"), 0);
}

static void teardown(void)
{
	mp_test_rmtree(dir);
}

TestSuite(real, .init = setup, .fini = teardown);

static bool in_ci(void)
{
	const char *ci = getenv("CI");

	return ci && !strcmp(ci, "true");
}

/* A runtime or tool the test needs is missing: a failure in CI, where
 * scripts/install-deps has run, a skip that says why elsewhere. */
#define need(cond, ...)                                      \
	do {                                                 \
		if (!(cond)) {                               \
			if (in_ci())                         \
				cr_assert_fail(__VA_ARGS__); \
			cr_skip_test(__VA_ARGS__);           \
		}                                            \
	} while (0)

static void need_torch(void)
{
	need(access(PYTHON, X_OK) == 0 && access(TORCH_DIR, F_OK) == 0,
	     "%s with python3-torch and python3-torchvision is missing "
	     "(scripts/install-deps installs them)",
	     PYTHON);
}

/* The node_modules directory holding onnxruntime-node. */
static const char *need_ort(void)
{
	static char path[512];
	const char *prefix = getenv("MEMPROF_TEST_NODE_PREFIX");
	char pkg[600];

	need_torch(); /* the model is exported by PyTorch */
	need(NODE_BIN[0], "node is missing (scripts/install-deps installs nodejs)");
	if (!prefix || !prefix[0])
		prefix = NODE_PREFIX;
	snprintf(path, sizeof(path), "%s/node_modules", prefix);
	snprintf(pkg, sizeof(pkg), "%s/onnxruntime-node/package.json", path);
	need(access(pkg, R_OK) == 0,
	     "onnxruntime-node is not installed in %s (scripts/install-deps installs it there; "
	     "MEMPROF_TEST_NODE_PREFIX names another npm prefix)",
	     prefix);
	return path;
}

static void need_heaptrack(void)
{
	need(HEAPTRACK_BIN[0] && HEAPTRACK_PRINT_BIN[0],
	     "heaptrack is missing (scripts/install-deps installs it)");
}

static char *src(const char *name)
{
	static char buf[4][512];
	static int i;
	char *p = buf[i++ % 4];

	snprintf(p, 512, "%s/%s", REAL_SRC_DIR, name);
	return p;
}

static char *in_dir(const char *name)
{
	static char buf[8][512];
	static int i;
	char *p = buf[i++ % 8];

	snprintf(p, 512, "%s/%s", dir, name);
	return p;
}

static char *read_file(const char *path, size_t *ret_len)
{
	FILE *f = fopen(path, "re");
	char *buf = NULL;
	size_t len = 0, n;
	FILE *m;
	char chunk[65536];

	cr_assert_not_null(f, "open %s", path);
	cr_assert_not_null(m = open_memstream(&buf, &len));
	while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
		fwrite(chunk, 1, n, m);
	fclose(f);
	cr_assert_eq(fclose(m), 0);
	if (ret_len)
		*ret_len = len;
	return buf;
}

/* Runs @argv (as the suite runs memprof: mp_test_spawn) with its stdout
 * in the file @out; its exit status. stderr goes to the test's log. */
static int run_to(char *const argv[], const char *out)
{
	int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600), st;
	pid_t pid;

	cr_assert_geq(fd, 0, "%s", out);
	pid = mp_test_spawn(argv, fd, -1);
	close(fd);
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFEXITED(st), "%s died by signal %d", argv[0], WTERMSIG(st));
	return WEXITSTATUS(st);
}

static time_t mtime(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 ? st.st_mtime : 0;
}

/* The ONNX file of the CNN, exported by Debian's PyTorch into the build
 * tree once (again when the scripts that make it change). */
static const char *onnx_model(void)
{
	const char *model = mp_test_build_path("tests/real/cnn.onnx");
	time_t t = mtime(model);
	char *argv[] = { PYTHON, src("export_onnx.py"), (char *)model, NULL };
	int st;

	if (t && t >= mtime(src("export_onnx.py")) && t >= mtime(src("cnn.py")))
		return model;
	st = run_to(argv, in_dir("export.out"));
	cr_assert_eq(st, 0, "export_onnx.py exited %d:\n%s", st,
		     read_file(in_dir("export.out"), NULL));
	cr_assert_gt(mtime(model), 0, "export_onnx.py wrote no %s", model);
	return model;
}

/* `memprof run OPTS... -- node ort_infer.js MODEL PASSES`, its stdout in
 * out.txt; checks that both ran to the end. */
static void run_node(char **opts, int n_opts)
{
	const char *modules = need_ort(), *model = onnx_model();
	char *argv[32];
	char *out;
	int n = 0, st;

	argv[n++] = mp_test_build_path("cli/memprof");
	argv[n++] = "run";
	for (int i = 0; i < n_opts; i++)
		argv[n++] = opts[i];
	argv[n++] = "--";
	argv[n++] = NODE_BIN;
	argv[n++] = src("ort_infer.js");
	argv[n++] = (char *)model;
	argv[n++] = PASSES;
	argv[n] = NULL;
	cr_assert_eq(setenv("NODE_PATH", modules, 1), 0);
	st = run_to(argv, in_dir("out.txt"));
	out = read_file(in_dir("out.txt"), NULL);
	cr_assert_eq(st, 0, "memprof run -- node exited %d:\n%s", st, out);
	cr_assert_not_null(strstr(out, "ort_infer.js: done " PASSES " passes [1,1000]"), "%s", out);
	free(out);
}

/* `memprof run OPTS... -- python3 torch_infer.py PASSES`, as run_node. */
static void run_torch(char **opts, int n_opts)
{
	char *argv[32];
	char *out;
	int n = 0, st;

	need_torch();
	argv[n++] = mp_test_build_path("cli/memprof");
	argv[n++] = "run";
	for (int i = 0; i < n_opts; i++)
		argv[n++] = opts[i];
	argv[n++] = "--";
	argv[n++] = PYTHON;
	argv[n++] = src("torch_infer.py");
	argv[n++] = PASSES;
	argv[n] = NULL;
	st = run_to(argv, in_dir("out.txt"));
	out = read_file(in_dir("out.txt"), NULL);
	cr_assert_eq(st, 0, "memprof run -- python3 exited %d:\n%s", st, out);
	cr_assert_not_null(strstr(out, "torch_infer.py: done " PASSES " passes (1, 1000)"), "%s",
			   out);
	free(out);
}

static struct mp_profile *load(const char *path)
{
	struct mp_profile *p = NULL;
	const char *why = NULL;

	cr_assert_eq(mp_profile_load(path, &p, &why), 0, "%s: %s", path, why ? why : "?");
	return p;
}

/* The profile of a default `memprof run` (memprof.proto) of the runtime. */
static struct mp_profile *profile_node(void)
{
	char *opts[] = { "--print", "none", "-o", in_dir("n.pb") };

	run_node(opts, 4);
	return load(in_dir("n.pb"));
}

static struct mp_profile *profile_torch(void)
{
	char *opts[] = { "--print", "none", "-o", in_dir("t.pb") };

	run_torch(opts, 4);
	return load(in_dir("t.pb"));
}

static bool starts_with(const char *s, const char *prefix)
{
	return s && !strncmp(s, prefix, strlen(prefix));
}

static const char *base_name(const char *path)
{
	const char *s = strrchr(path, '/');

	return s ? s + 1 : path;
}

/* The owner with the most bytes allocated, and every owner in the log. */
static const struct mp_pool *top_owner(const struct mp_profile *p)
{
	const struct mp_pool *top = NULL;

	for (uint32_t i = 0; i < p->n_owners; i++) {
		const struct mp_pool *o = &p->owners[i];

		cr_log_info("owner %-40s %12" PRIu64 " B allocated (%.1f%%), peak %" PRIu64 " B",
			    o->name, o->mem.alloc_bytes,
			    100.0 * (double)o->mem.alloc_bytes / (double)p->mem.alloc_bytes,
			    o->peak_bytes);
		if (!top || o->mem.alloc_bytes > top->mem.alloc_bytes)
			top = o;
	}
	cr_assert_not_null(top, "no owner");
	return top;
}

/* Bytes allocated by the owners named @prefix*. */
static uint64_t owner_bytes(const struct mp_profile *p, const char *prefix)
{
	uint64_t sum = 0;

	for (uint32_t i = 0; i < p->n_owners; i++)
		if (starts_with(p->owners[i].name, prefix))
			sum += p->owners[i].mem.alloc_bytes;
	return sum;
}

/* ---- onnxruntime-node ---- */

/* `--stacks` on node with libonnxruntime loaded: memprof exits with node's
 * status and writes a profile that decodes, with stacks through the
 * runtime's library. */
Test(real, node_stacks_profile_written, .timeout = 300)
{
	char *opts[] = { "--stacks", "--print", "none", "-o", in_dir("n.pb") };
	struct mp_profile *p;
	uint32_t through_ort = 0;

	run_node(opts, 5);
	p = load(in_dir("n.pb"));
	cr_assert_gt(p->stack_depth, 0, "a --stacks run with no stack depth");
	cr_assert_gt(p->n_sites, 0);
	cr_assert_gt(p->n_stacks, 0);
	for (uint32_t i = 0; i < p->n_stacks; i++) {
		const struct mp_stack *s = &p->stacks[i];
		bool ort = false;

		for (uint32_t j = 0; j < s->n_frames && !ort; j++) {
			const struct mp_location *l = mp_profile_location(p, s->frames[j]);

			ort = l && l->object < p->n_objects &&
			      starts_with(base_name(p->objects[l->object].path), "libonnxruntime");
		}
		through_ort += ort;
	}
	cr_expect_gt(through_ort, 0, "no stack through libonnxruntime among %" PRIu32, p->n_stacks);
	mp_profile_free(p);
}

/* The heap (the malloc family) is memory the process touched: its peak
 * never exceeds the RSS peak, whatever V8 reserves in mappings. */
Test(real, node_heap_peak_within_rss, .timeout = 300)
{
	struct mp_profile *p = profile_node();
	uint64_t rss = p->rss_peak;

	if (p->vm_hwm != MP_UNKNOWN && p->vm_hwm > rss)
		rss = p->vm_hwm;
	cr_log_info("node: heap peak %" PRIu64 " B, RSS peak %" PRIu64 " B (VmHWM %" PRIu64
		    "), allocated %" PRIu64 " B",
		    p->peak_bytes, p->rss_peak, p->vm_hwm, p->mem.alloc_bytes);
	cr_assert_gt(p->rss_samples, 0, "no RSS sample");
	cr_assert_gt(p->peak_bytes, 0);
	cr_expect_leq(p->peak_bytes, rss,
		      "node: heap peak %" PRIu64 " B above the RSS peak %" PRIu64 " B",
		      p->peak_bytes, rss);
	mp_profile_free(p);
}

/* The bytes are onnxruntime's: its library is the top owner, not the
 * allocator wrappers it calls (operator new in libstdc++). */
Test(real, node_top_owner_onnxruntime, .timeout = 300)
{
	struct mp_profile *p = profile_node();
	const struct mp_pool *top = top_owner(p);

	cr_expect(starts_with(top->name, "libonnxruntime"),
		  "node: top owner %s (%" PRIu64 " of %" PRIu64 " B), not libonnxruntime",
		  top->name, top->mem.alloc_bytes, p->mem.alloc_bytes);
	mp_profile_free(p);
}

/* ---- PyTorch ---- */

static uint8_t *gunzip(const uint8_t *in, size_t len, size_t *ret_len)
{
	z_stream z = { 0 };
	size_t cap = 1 << 24;
	uint8_t *out = malloc(cap);
	int r = Z_OK;

	cr_assert_not_null(out);
	cr_assert_eq(inflateInit2(&z, 15 + 16), Z_OK);
	z.next_in = (Bytef *)in;
	z.avail_in = len;
	while (r != Z_STREAM_END) {
		if (z.total_out == cap)
			cr_assert_not_null(out = realloc(out, cap *= 2));
		z.next_out = out + z.total_out;
		z.avail_out = cap - z.total_out;
		r = inflate(&z, Z_NO_FLUSH);
		cr_assert(r == Z_OK || r == Z_STREAM_END, "%s: not a whole gzip stream (%d)",
			  "pprof", r);
	}
	*ret_len = z.total_out;
	inflateEnd(&z);
	return out;
}

/* The sum of sample type @type over every sample of the gzipped pprof
 * file @path, decoded with protobuf-c's code for profile.proto; the
 * number of samples with more than one location in *@ret_deep. */
static int64_t pprof_sum(const char *path, const char *type, size_t *ret_samples, size_t *ret_deep)
{
	size_t zlen, len, deep = 0;
	char *z = read_file(path, &zlen);
	uint8_t *raw = gunzip((const uint8_t *)z, zlen, &len);
	Perftools__Profiles__Profile *m = perftools__profiles__profile__unpack(NULL, len, raw);
	int64_t sum = 0;
	size_t col = SIZE_MAX;

	cr_assert_not_null(m, "%s does not decode as profile.proto", path);
	for (size_t i = 0; i < m->n_sample_type; i++) {
		int64_t t = m->sample_type[i]->type;

		if (t >= 0 && (size_t)t < m->n_string_table && !strcmp(m->string_table[t], type))
			col = i;
	}
	cr_assert_neq(col, SIZE_MAX, "%s has no sample type %s", path, type);
	for (size_t i = 0; i < m->n_sample; i++) {
		cr_assert_gt(m->sample[i]->n_value, col);
		sum += m->sample[i]->value[col];
		deep += m->sample[i]->n_location_id > 1;
	}
	*ret_samples = m->n_sample;
	*ret_deep = deep;
	perftools__profiles__profile__free_unpacked(m, NULL);
	free(raw);
	free(z);
	return sum;
}

/* The `--stacks` pprof holds every byte the run allocated (its JSON
 * report's heap.allocBytes) within 1%: no site, stack or sample lost on the
 * way out of a real runtime's thousands of stacks. */
Test(real, torch_pprof_holds_every_byte, .timeout = 600)
{
	char *opts[] = {
		"--stacks", "--format", "pprof", "-o", in_dir("t.pb.gz"), "--print", "json"
	};
	json_object *root, *heap, *v;
	size_t samples, deep;
	int64_t alloc, sum;

	run_torch(opts, 7);
	root = json_object_from_file(in_dir("out.txt"));
	/* the script's line comes first; the report is the rest */
	if (!root) {
		char *out = read_file(in_dir("out.txt"), NULL), *brace = strchr(out, '{');

		cr_assert_not_null(brace, "no JSON report in:\n%s", out);
		root = json_tokener_parse(brace);
		cr_assert_not_null(root, "the JSON report does not parse");
		free(out);
	}
	cr_assert(json_object_object_get_ex(root, "heap", &heap), "no heap in the JSON report");
	cr_assert(json_object_object_get_ex(heap, "allocBytes", &v), "no heap.allocBytes");
	alloc = json_object_get_int64(v);
	json_object_put(root);
	sum = pprof_sum(in_dir("t.pb.gz"), "alloc_space", &samples, &deep);
	cr_log_info("torch --stacks: allocated %" PRId64 " B, pprof alloc_space %" PRId64
		    " B in %zu samples (%zu with a stack)",
		    alloc, sum, samples, deep);
	cr_assert_gt(alloc, 0);
	cr_expect_gt(deep, samples / 2, "most samples should carry a stack: %zu of %zu", deep,
		     samples);
	cr_expect(sum >= alloc - alloc / 100 && sum <= alloc + alloc / 100,
		  "pprof alloc_space %" PRId64 " B, the run allocated %" PRId64 " B (%+.2f%%)", sum,
		  alloc, 100.0 * (double)(sum - alloc) / (double)alloc);
}

/* The bytes are PyTorch's operators': libtorch_cpu is the top owner, and
 * c10's allocator (c10::alloc_cpu, which every tensor goes through) holds
 * under 5% of the bytes: owners are named past the allocator's wrappers. */
Test(real, torch_top_owner_libtorch_cpu, .timeout = 300)
{
	struct mp_profile *p = profile_torch();
	const struct mp_pool *top = top_owner(p);
	uint64_t c10 = owner_bytes(p, "libc10");

	cr_expect(starts_with(top->name, "libtorch_cpu"),
		  "torch: top owner %s (%" PRIu64 " of %" PRIu64 " B), not libtorch_cpu", top->name,
		  top->mem.alloc_bytes, p->mem.alloc_bytes);
	cr_expect_lt(c10 * 20, p->mem.alloc_bytes,
		     "torch: libc10 owns %" PRIu64 " of %" PRIu64 " B allocated (%.1f%%)", c10,
		     p->mem.alloc_bytes, 100.0 * (double)c10 / (double)p->mem.alloc_bytes);
	mp_profile_free(p);
}

/* heaptrack_print's "peak heap memory consumption: 52.35M after ..." in
 * bytes (its units are powers of 1000: a 123456789-byte block is
 * "123.53M" with the C runtime's own blocks). */
static uint64_t heaptrack_peak(const char *text)
{
	static const char key[] = "peak heap memory consumption: ";
	const char *l = strstr(text, key);
	double v;
	char unit = 0;
	int n = 0;

	cr_assert_not_null(l, "no peak heap in heaptrack_print's output:\n%s", text);
	cr_assert_geq(sscanf(l + strlen(key), "%lf%n%c", &v, &n, &unit), 1, "%s", l);
	switch (unit) {
	case 'B':
		break;
	case 'K':
		v *= 1e3;
		break;
	case 'M':
		v *= 1e6;
		break;
	case 'G':
		v *= 1e9;
		break;
	default:
		cr_assert_fail("unit '%c' in: %.80s", unit, l);
	}
	return (uint64_t)v;
}

/* The heap peak (the malloc family, mappings apart) is heaptrack's peak
 * heap on the same script within 10%. */
Test(real, torch_heap_peak_like_heaptrack, .timeout = 600)
{
	char *ht[] = { HEAPTRACK_BIN,	      "-o",   in_dir("ht"), PYTHON,
		       src("torch_infer.py"), PASSES, NULL };
	/* the summary alone, no backtraces */
	char *pr[] = {
		HEAPTRACK_PRINT_BIN, "-p", "0", "-a", "0", "-T", "0", "-l", "0", NULL, NULL
	};
	char data[600], *out;
	struct mp_profile *p;
	uint64_t theirs;
	int st;

	need_heaptrack();
	p = profile_torch();
	st = run_to(ht, in_dir("ht.out"));
	out = read_file(in_dir("ht.out"), NULL);
	cr_assert_eq(st, 0, "heaptrack exited %d:\n%s", st, out);
	cr_assert_not_null(strstr(out, "torch_infer.py: done " PASSES " passes"), "%s", out);
	free(out);
	/* heaptrack adds the compressor's suffix to -o */
	snprintf(data, sizeof(data), "%s.zst", in_dir("ht"));
	if (access(data, R_OK) != 0)
		snprintf(data, sizeof(data), "%s.gz", in_dir("ht"));
	cr_assert_eq(access(data, R_OK), 0, "heaptrack wrote no %s(.zst|.gz)", in_dir("ht"));
	pr[9] = data;
	st = run_to(pr, in_dir("htp.out"));
	out = read_file(in_dir("htp.out"), NULL);
	cr_assert_eq(st, 0, "heaptrack_print exited %d", st);
	theirs = heaptrack_peak(out);
	free(out);
	cr_log_info("torch: heap peak %" PRIu64 " B, heaptrack %" PRIu64 " B, RSS peak %" PRIu64
		    " B",
		    p->peak_bytes, theirs, p->rss_peak);
	cr_expect(p->peak_bytes * 10 >= theirs * 9 && p->peak_bytes * 10 <= theirs * 11,
		  "torch: heap peak %" PRIu64 " B, heaptrack's %" PRIu64 " B (%+.1f%%)",
		  p->peak_bytes, theirs,
		  100.0 * ((double)p->peak_bytes - (double)theirs) / (double)theirs);
	mp_profile_free(p);
}

/* `--stacks` with the default options keeps every stack of PyTorch: its
 * static initializers alone make more than 2^18 distinct stacks, and the
 * table drops none of them, each read back from the file with its
 * frames. */
Test(real, torch_stacks_none_dropped, .timeout = 600)
{
	char *opts[] = { "--stacks", "--print", "none", "-o", in_dir("t.pb") };
	struct mp_profile *p;
	uint64_t frames = 0;

	run_torch(opts, 5);
	p = load(in_dir("t.pb"));
	for (uint32_t i = 0; i < p->n_stacks; i++) {
		cr_assert_geq(p->stacks[i].n_frames, 1);
		cr_assert_leq(p->stacks[i].n_frames, p->stack_depth);
		frames += p->stacks[i].n_frames;
	}
	cr_log_info("torch --stacks: %" PRIu32 " stacks, %" PRIu64 " frames, bounds %" PRIu32
		    " stacks and %" PRIu64 " frames",
		    p->n_stacks, frames, p->limits.stacks, p->limits.stack_frames);
	cr_assert_eq(p->limits.reached & MP_LIMIT_STACKS, 0,
		     "stack table full: %" PRIu64 " allocations kept their caller alone",
		     p->stacks_dropped);
	cr_assert_eq(p->stacks_dropped, 0);
	cr_assert_gt(p->n_stacks, 1u << 18, "%" PRIu32 " stacks", p->n_stacks);
	mp_profile_free(p);
}

/* Allocations stay at a wrapper (operator new, c10's allocator) only when
 * the daemon could not look past it: those made between a library's
 * loading and the daemon's publishing of its wrappers carry no stack. On
 * PyTorch, whose import maps ~400 libraries while it allocates, that
 * window of a few milliseconds held 6 allocations on one machine and
 * 1,620 (0.15%) on another; at most 1% of those charged past the wrappers
 * (the profile's wrappers.fallbacks against wrappers.skipped). Wrapped
 * allocations that lost their stack would leave all of them. */
Test(real, torch_few_left_at_a_wrapper, .timeout = 300)
{
	struct mp_profile *p = profile_torch();

	cr_log_info("torch: wrappers: %" PRIu32 " functions in %" PRIu32 " objects, %" PRIu64
		    " allocations charged past them, %" PRIu64 " left at a wrapper",
		    p->wrappers.functions, p->wrappers.objects, p->wrappers.skipped,
		    p->wrappers.fallbacks);
	cr_assert(p->wrappers.on && p->wrappers.default_list, "the default wrapper list is off");
	cr_assert_gt(p->wrappers.skipped, 100000, "%" PRIu64 " allocations charged past wrappers",
		     p->wrappers.skipped);
	cr_expect_leq(p->wrappers.fallbacks * 100, p->wrappers.skipped,
		      "torch: %" PRIu64 " allocations left at a wrapper, %" PRIu64
		      " charged past them (%.3f%%, at most 1%%)",
		      p->wrappers.fallbacks, p->wrappers.skipped,
		      100.0 * (double)p->wrappers.fallbacks / (double)p->wrappers.skipped);
	mp_profile_free(p);
}
