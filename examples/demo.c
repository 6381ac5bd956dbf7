// SPDX-License-Identifier: MIT
/*
 * memprof-demo: a tiny CNN inference (conv2d -> relu -> matmul -> softmax)
 * marked with libmemprof, with allocation sizes fixed so a profile of it can
 * be asserted byte for byte. examples/README.md lists the expected figures.
 *
 * Usage: memprof-demo [STEPS]   (default 3)
 *
 * Every heap allocation the demo makes goes through demo_alloc()/demo_free(),
 * which keep the demo's own account; nothing else allocates after main starts
 * (stdout is given a static buffer), so a tracer attached before main sees
 * exactly these blocks. The conv2d and relu outputs are slices of an
 * activation arena (one malloc, reset after every step), recorded with
 * libmemprof's pools API as a runtime's arena allocator would.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include <memprof.h>

#define C_IN 3
#define HW 16
#define C_OUT 16
#define K 3
#define CLASSES 10
#define FEATURES (C_OUT * HW * HW) /* 4096 */

struct account {
	size_t live, peak, blocks;
};

static struct account acct;

/* The activation arena: a bump allocator over one malloc'd block. */
struct arena {
	unsigned char *base;
	size_t size, used;
	int pool; /* memprof_pool_declare() */
};

static struct arena act;

static void *arena_alloc(struct arena *a, size_t bytes)
{
	void *p;

	if (bytes > a->size - a->used) {
		fprintf(stderr, "memprof-demo: activation arena full\n");
		exit(1);
	}
	p = a->base + a->used;
	a->used += bytes;
	memprof_pool_alloc(a->pool, p, bytes);
	return p;
}

static void arena_reset(struct arena *a)
{
	a->used = 0;
	memprof_pool_reset(a->pool);
}

static void *demo_alloc(size_t nmemb, size_t size, int zeroed)
{
	void *p = zeroed ? calloc(nmemb, size) : malloc(nmemb * size);

	if (!p) {
		fprintf(stderr, "memprof-demo: out of memory\n");
		exit(1);
	}
	acct.live += nmemb * size;
	acct.blocks++;
	if (acct.live > acct.peak)
		acct.peak = acct.live;
	return p;
}

static void demo_free(void *p, size_t bytes)
{
	free(p);
	acct.live -= bytes;
	acct.blocks--;
}

static void phase_begin(const char *name)
{
	memprof_phase(name);
	/* per-phase peaks start from what is live when the phase begins */
	acct.peak = acct.live;
}

struct model {
	float *conv_w; /* [16,3,3,3] */
	float *conv_b; /* [16] */
	float *fc_w; /* [4096,10] */
	float *fc_b; /* [10] */
};

#define CONV_W_N (C_OUT * C_IN * K * K) /* 432 floats, 1728 B */
#define CONV_B_N C_OUT /* 16 floats, 64 B */
#define FC_W_N (FEATURES * CLASSES) /* 40960 floats, 163840 B */
#define FC_B_N CLASSES /* 10 floats, 40 B */
#define WEIGHTS_N (CONV_W_N + CONV_B_N + FC_W_N + FC_B_N)

static uint32_t lcg_state = 12345;

/* Deterministic pseudo-random values in [-0.5, 0.5). */
static float next_value(void)
{
	lcg_state = lcg_state * 1664525u + 1013904223u;
	return (float)(lcg_state >> 8) / (float)(1u << 24) - 0.5f;
}

/* Reads the "file" into a staging buffer, then copies it into four weight
 * tensors: the staging copy makes the load peak twice the weights. */
static void load_weights(struct model *m)
{
	static const int64_t s_conv_w[] = { C_OUT, C_IN, K, K }, s_conv_b[] = { C_OUT },
			     s_fc_w[] = { FEATURES, CLASSES }, s_fc_b[] = { CLASSES };
	float *staging, *src;

	memprof_kernel_begin("load_weights");
	staging = demo_alloc(WEIGHTS_N, sizeof(float), 0);
	for (size_t i = 0; i < WEIGHTS_N; i++)
		staging[i] = next_value() * 0.2f;
	memprof_tag_begin("weights");
	m->conv_w = demo_alloc(CONV_W_N, sizeof(float), 0);
	m->conv_b = demo_alloc(CONV_B_N, sizeof(float), 0);
	m->fc_w = demo_alloc(FC_W_N, sizeof(float), 0);
	m->fc_b = demo_alloc(FC_B_N, sizeof(float), 0);
	memprof_tag_end();
	src = staging;
	memcpy(m->conv_w, src, sizeof(float) * CONV_W_N);
	src += CONV_W_N;
	memcpy(m->conv_b, src, sizeof(float) * CONV_B_N);
	src += CONV_B_N;
	memcpy(m->fc_w, src, sizeof(float) * FC_W_N);
	src += FC_W_N;
	memcpy(m->fc_b, src, sizeof(float) * FC_B_N);
	demo_free(staging, sizeof(float) * WEIGHTS_N);
	memprof_kernel_output_shape(s_conv_w, 4);
	memprof_kernel_output_shape(s_conv_b, 1);
	memprof_kernel_output_shape(s_fc_w, 2);
	memprof_kernel_output_shape(s_fc_b, 1);
	memprof_kernel_end();
}

static const int64_t s_input[] = { 1, C_IN, HW, HW };
static const int64_t s_conv_out[] = { 1, C_OUT, HW, HW };
static const int64_t s_conv_w[] = { C_OUT, C_IN, K, K };
static const int64_t s_conv_b[] = { C_OUT };
static const int64_t s_flat[] = { 1, FEATURES };
static const int64_t s_fc_w[] = { FEATURES, CLASSES };
static const int64_t s_fc_b[] = { CLASSES };
static const int64_t s_logits[] = { 1, CLASSES };

#define COLS (C_IN * K * K) /* 27 */
#define PIXELS (HW * HW) /* 256 */

/* 3x3, stride 1, padding 1, through an im2col workspace [27,256]. */
static float *conv2d(const struct model *m, const float *x)
{
	float *y, *col;

	memprof_kernel_begin("conv2d");
	memprof_kernel_input_shape(s_input, 4);
	memprof_kernel_input_shape(s_conv_w, 4);
	memprof_kernel_input_shape(s_conv_b, 1);
	memprof_kernel_output_shape(s_conv_out, 4);
	y = arena_alloc(&act, sizeof(float) * C_OUT * PIXELS);
	memprof_tag_begin("workspace");
	col = demo_alloc(COLS * PIXELS, sizeof(float), 0);
	memprof_tag_end();
	for (int c = 0; c < C_IN; c++)
		for (int ky = 0; ky < K; ky++)
			for (int kx = 0; kx < K; kx++)
				for (int oy = 0; oy < HW; oy++)
					for (int ox = 0; ox < HW; ox++) {
						int iy = oy + ky - 1, ix = ox + kx - 1;
						int row = (c * K + ky) * K + kx;
						int in = iy >= 0 && iy < HW && ix >= 0 && ix < HW;

						col[row * PIXELS + oy * HW + ox] =
							in ? x[(c * HW + iy) * HW + ix] : 0.0f;
					}
	for (int o = 0; o < C_OUT; o++)
		for (int p = 0; p < PIXELS; p++) {
			float acc = m->conv_b[o];

			for (int r = 0; r < COLS; r++)
				acc += m->conv_w[o * COLS + r] * col[r * PIXELS + p];
			y[o * PIXELS + p] = acc;
		}
	demo_free(col, sizeof(float) * COLS * PIXELS);
	memprof_kernel_end();
	return y;
}

static float *relu(const float *x)
{
	float *y;

	memprof_kernel_begin("relu");
	memprof_kernel_input_shape(s_conv_out, 4);
	memprof_kernel_output_shape(s_conv_out, 4);
	y = arena_alloc(&act, sizeof(float) * FEATURES);
	for (int i = 0; i < FEATURES; i++)
		y[i] = x[i] > 0.0f ? x[i] : 0.0f;
	memprof_kernel_end();
	return y;
}

/* [1,4096] x [4096,10] + [10], accumulated in double in a workspace. */
static float *matmul(const struct model *m, const float *x)
{
	double *acc;
	float *y;

	memprof_kernel_begin("matmul");
	memprof_kernel_input_shape(s_flat, 2);
	memprof_kernel_input_shape(s_fc_w, 2);
	memprof_kernel_input_shape(s_fc_b, 1);
	memprof_kernel_output_shape(s_logits, 2);
	y = demo_alloc(CLASSES, sizeof(float), 0);
	memprof_tag_begin("workspace");
	acc = demo_alloc(CLASSES, sizeof(double), 1);
	memprof_tag_end();
	for (int k = 0; k < FEATURES; k++)
		for (int j = 0; j < CLASSES; j++)
			acc[j] += (double)x[k] * m->fc_w[k * CLASSES + j];
	for (int j = 0; j < CLASSES; j++)
		y[j] = (float)acc[j] + m->fc_b[j];
	demo_free(acc, sizeof(double) * CLASSES);
	memprof_kernel_end();
	return y;
}

static float *softmax(const float *x)
{
	MEMPROF_KERNEL("softmax");
	float *y, *e, max = x[0], sum = 0.0f;

	memprof_kernel_input_shape(s_logits, 2);
	memprof_kernel_output_shape(s_logits, 2);
	y = demo_alloc(CLASSES, sizeof(float), 0);
	memprof_tag_begin("workspace");
	e = demo_alloc(CLASSES, sizeof(float), 0);
	memprof_tag_end();
	for (int j = 1; j < CLASSES; j++)
		if (x[j] > max)
			max = x[j];
	for (int j = 0; j < CLASSES; j++) {
		e[j] = expf(x[j] - max);
		sum += e[j];
	}
	for (int j = 0; j < CLASSES; j++)
		y[j] = e[j] / sum;
	demo_free(e, sizeof(float) * CLASSES);
	return y;
}

/* One inference; returns the predicted class and its probability. */
static int infer(const struct model *m, int step, float *ret_prob)
{
	float *x, *c, *r, *l, *p;
	int best = 0;

	memprof_tag_begin("activations");
	/* the input tensor is created outside any kernel, as a runtime does */
	x = demo_alloc(C_IN * HW * HW, sizeof(float), 1);
	for (int i = 0; i < C_IN * HW * HW; i++)
		x[i] = next_value() + 0.01f * (float)step;
	c = conv2d(m, x);
	r = relu(c);
	l = matmul(m, r);
	p = softmax(l);
	memprof_tag_end();
	for (int j = 1; j < CLASSES; j++)
		if (p[j] > p[best])
			best = j;
	*ret_prob = p[best];
	/* end of step: the activations are released */
	demo_free(x, sizeof(float) * C_IN * HW * HW);
	(void)c;
	(void)r;
	arena_reset(&act);
	demo_free(l, sizeof(float) * CLASSES);
	demo_free(p, sizeof(float) * CLASSES);
	return best;
}

static double elapsed(const struct timespec *a, const struct timespec *b)
{
	return (double)(b->tv_sec - a->tv_sec) + (double)(b->tv_nsec - a->tv_nsec) * 1e-9;
}

static double tv_elapsed(const struct timeval *a, const struct timeval *b)
{
	return (double)(b->tv_sec - a->tv_sec) + (double)(b->tv_usec - a->tv_usec) * 1e-6;
}

int main(int argc, char **argv)
{
	static char stdout_buf[4096];
	struct model m;
	size_t load_peak, load_live, infer_peak;
	long steps = 3;
	struct timespec t0, t1;
	struct rusage u0, u1;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	getrusage(RUSAGE_SELF, &u0);
	/* a static buffer: stdio would otherwise malloc one on first output */
	setvbuf(stdout, stdout_buf, _IOLBF, sizeof(stdout_buf));
	if (argc > 2 || (argc == 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")))) {
		printf("usage: %s [STEPS]\n", argv[0]);
		return argc == 2 ? 0 : 2;
	}
	if (argc == 2) {
		char *end;

		errno = 0;
		steps = strtol(argv[1], &end, 10);
		if (errno || *end || end == argv[1] || steps < 1 || steps > 1000000) {
			fprintf(stderr, "memprof-demo: STEPS must be 1..1000000, not '%s'\n",
				argv[1]);
			return 2;
		}
	}
	printf("memprof-demo (libmemprof %s): load 4 weight tensors, then %ld inference "
	       "step(s) of conv2d -> relu -> matmul -> softmax on a 1x3x16x16 input\n",
	       memprof_version(), steps);

	phase_begin("load");
	load_weights(&m);
	load_peak = acct.peak;
	load_live = acct.live;

	phase_begin("inference");
	/* room for the conv2d and relu outputs of one step */
	act.size = 2 * sizeof(float) * FEATURES;
	act.base = demo_alloc(act.size, 1, 0);
	act.pool = memprof_pool_declare("activations", MEMPROF_POOL_HOST);
	for (long s = 0; s < steps; s++) {
		float prob;
		int cls = infer(&m, (int)s, &prob);

		printf("step %ld: class %d (p=%.4f)\n", s, cls, prob);
	}
	infer_peak = acct.peak;

	phase_begin("teardown");
	demo_free(m.conv_w, sizeof(float) * CONV_W_N);
	demo_free(m.conv_b, sizeof(float) * CONV_B_N);
	demo_free(m.fc_w, sizeof(float) * FC_W_N);
	demo_free(m.fc_b, sizeof(float) * FC_B_N);
	demo_free(act.base, act.size);

	printf("load: peak %zu bytes, %zu bytes of weights live after\n", load_peak, load_live);
	printf("inference: peak %zu bytes\n", infer_peak);
	printf("end: %zu bytes in %zu blocks live, dropped markers %llu\n", acct.live, acct.blocks,
	       (unsigned long long)memprof_dropped());
	/* MEMPROF_DEMO_TIME set: main's own runtime on stderr (bench/run), the
	 * same span traced or not, without the tool's start-up and teardown */
	clock_gettime(CLOCK_MONOTONIC, &t1);
	getrusage(RUSAGE_SELF, &u1);
	if (getenv("MEMPROF_DEMO_TIME"))
		fprintf(stderr,
			"memprof-demo: %.6f s, user %.6f s, sys %.6f s, faults %ld, switches %ld+%ld\n",
			elapsed(&t0, &t1), tv_elapsed(&u0.ru_utime, &u1.ru_utime),
			tv_elapsed(&u0.ru_stime, &u1.ru_stime), u1.ru_minflt - u0.ru_minflt,
			u1.ru_nvcsw - u0.ru_nvcsw, u1.ru_nivcsw - u0.ru_nivcsw);
	return 0;
}
