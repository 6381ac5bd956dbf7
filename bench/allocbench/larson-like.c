// SPDX-License-Identifier: MIT
/*
 * larson-like: the allocation shape of mimalloc-bench's larson (Larson and
 * Krishnan's server simulation), written for memprofd's benchmarks; not
 * larson. Unlike larson, which runs for a fixed time and reports a rate,
 * it does a fixed amount of work, so that its run time is its cost.
 *
 * The main thread fills an array of THREADS * CHUNKS blocks of MIN-MAX
 * bytes. Each of THREADS workers owns a slice of CHUNKS slots and, ROUNDS *
 * CHUNKS times, frees a random slot's block and puts a new one of random
 * size in its place; then it starts its successor on the same slice and
 * exits, GENERATIONS times over. A block is freed by a later thread than
 * the one that allocated it (the main thread's, then each predecessor's):
 * frees across threads, and threads that come and go while their blocks
 * live on. Each block carries its slot, checked when it is freed.
 *
 *   larson-like [THREADS [GENERATIONS [CHUNKS [ROUNDS [MIN [MAX]]]]]]
 *               default 2 threads, 30 generations, 5000 chunks, 100 rounds,
 *               8-1000 bytes
 *
 * Prints "larson-like: ok ..." and exits 0, or says what was wrong and
 * exits 1.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct worker {
	pthread_t *tids; /* one per generation, each written once */
	int gen;
	char **slots;
	uint32_t *sizes;
	uint32_t first, chunks, rounds, min, max;
	int generations_left;
	uint64_t rng;
	unsigned long long pairs;
	int failed;
};

static uint64_t next_rand(uint64_t *s)
{
	uint64_t x = *s;

	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return *s = x;
}

/* A block holds its slot in its first 4 bytes and (slot ^ size) in its
 * last; the sizes are kept beside the slots, as larson keeps them. */
static char *make_block(uint32_t slot, uint32_t size)
{
	char *p = malloc(size);

	if (p) {
		memcpy(p, &slot, sizeof(slot));
		p[size - 1] = (char)(slot ^ size);
	}
	return p;
}

static int block_ok(const char *p, uint32_t slot, uint32_t size)
{
	uint32_t s;

	memcpy(&s, p, sizeof(s));
	return s == slot && p[size - 1] == (char)(slot ^ size);
}

static void *work(void *arg)
{
	struct worker *w = arg;
	uint32_t range = w->max - w->min;
	unsigned long long n = (unsigned long long)w->rounds * w->chunks;

	for (unsigned long long i = 0; i < n; i++) {
		uint32_t victim = (uint32_t)(next_rand(&w->rng) % w->chunks),
			 slot = w->first + victim;
		uint32_t size = w->min + (range ? (uint32_t)(next_rand(&w->rng) % range) : 0);

		if (!block_ok(w->slots[slot], slot, w->sizes[slot])) {
			w->failed = 1;
			return NULL;
		}
		free(w->slots[slot]);
		w->slots[slot] = make_block(slot, size);
		w->sizes[slot] = size;
		if (!w->slots[slot]) {
			w->failed = 1;
			return NULL;
		}
		w->pairs++;
	}
	/* the successor runs on the same slice; the main thread joins it
	 * after this one, through the next tid */
	if (--w->generations_left > 0 && pthread_create(&w->tids[++w->gen], NULL, work, w) != 0)
		w->failed = 1;
	return NULL;
}

int main(int argc, char **argv)
{
	long a[6] = { 2, 30, 5000, 100, 8, 1000 };
	unsigned long long pairs = 0;
	int failed = 0;

	for (int i = 1; i < argc && i <= 6; i++)
		a[i - 1] = atol(argv[i]);
	if (a[0] < 1 || a[1] < 1 || a[2] < 1 || a[3] < 1 || a[4] < 5 || a[5] < a[4]) {
		fprintf(stderr,
			"usage: larson-like [THREADS [GENERATIONS [CHUNKS [ROUNDS [MIN>=5 [MAX]]]]]]\n");
		return 2;
	}
	uint32_t threads = (uint32_t)a[0], chunks = (uint32_t)a[2];
	char **slots = malloc((size_t)threads * chunks * sizeof(char *));
	uint32_t *sizes = malloc((size_t)threads * chunks * sizeof(uint32_t));
	struct worker *w = calloc(threads, sizeof(*w));
	pthread_t *tids = calloc((size_t)threads * (size_t)a[1], sizeof(pthread_t));
	uint64_t rng = 4141;

	if (!slots || !sizes || !w || !tids) {
		fprintf(stderr, "larson-like: out of memory\n");
		return 1;
	}
	for (uint32_t s = 0; s < threads * chunks; s++) {
		uint32_t range = (uint32_t)(a[5] - a[4]);
		sizes[s] = (uint32_t)a[4] + (range ? (uint32_t)(next_rand(&rng) % range) : 0);
		slots[s] = make_block(s, sizes[s]);
		if (!slots[s]) {
			fprintf(stderr, "larson-like: out of memory\n");
			return 1;
		}
	}
	for (uint32_t t = 0; t < threads; t++) {
		w[t] = (struct worker){ .tids = tids + (size_t)t * (size_t)a[1],
					.slots = slots,
					.sizes = sizes,
					.first = t * chunks,
					.chunks = chunks,
					.rounds = (uint32_t)a[3],
					.min = (uint32_t)a[4],
					.max = (uint32_t)a[5],
					.generations_left = (int)a[1],
					.rng = next_rand(&rng) | 1 };
		if (pthread_create(&w[t].tids[0], NULL, work, &w[t]) != 0) {
			fprintf(stderr, "larson-like: pthread_create failed\n");
			return 1;
		}
	}
	for (uint32_t t = 0; t < threads; t++) {
		/* each generation has set the next one's tid before it returned */
		for (int g = 0; g < a[1]; g++) {
			pthread_join(w[t].tids[g], NULL);
			if (w[t].failed)
				break;
		}
		failed |= w[t].failed || w[t].generations_left != 0;
		pairs += w[t].pairs;
	}
	for (uint32_t s = 0; s < threads * chunks; s++) {
		if (!block_ok(slots[s], s, sizes[s]))
			failed = 1;
		free(slots[s]);
	}
	free(slots);
	free(sizes);
	free(tids);
	free(w);
	if (failed || pairs != (unsigned long long)threads * a[1] * a[3] * chunks) {
		fprintf(stderr,
			"larson-like: a block was not what its slot held, or work was lost\n");
		return 1;
	}
	printf("larson-like: ok, %llu replacements by %ld threads in %ld generations\n", pairs,
	       a[0], a[1]);
	return 0;
}
