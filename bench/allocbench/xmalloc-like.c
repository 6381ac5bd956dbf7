// SPDX-License-Identifier: MIT
/*
 * xmalloc-like: the allocation shape of mimalloc-bench's xmalloc-test
 * (Lever and Boreham's producer/consumer test), written for memprofd's
 * benchmarks; not xmalloc-test. Unlike xmalloc-test, which runs for a
 * fixed time and reports a rate, it moves a fixed number of blocks, so that
 * its run time is its cost.
 *
 * WORKERS producer threads each allocate BATCHES batches of 4096 blocks of
 * SIZE bytes (0: sizes from 8 to 2048 bytes in xmalloc-test's steps),
 * writing a pattern into each, and hand each batch (itself a heap block)
 * to a shared queue of at most 100 batches; WORKERS consumer threads take
 * batches, check the pattern and free every block: every block is freed by
 * another thread than the one that allocated it.
 *
 *   xmalloc-like [WORKERS [BATCHES [SIZE]]]    default 2 workers, 1200
 *                                              batches each, 64 bytes
 *
 * Prints "xmalloc-like: ok ..." and exits 0, or says what was wrong and
 * exits 1.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PER_BATCH 4096
#define QUEUE_LIMIT 100

struct batch {
	struct batch *next;
	uint32_t sizes[PER_BATCH];
	void *blocks[PER_BATCH];
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t not_empty = PTHREAD_COND_INITIALIZER, not_full = PTHREAD_COND_INITIALIZER;
static struct batch *queue;
static int queued, producers_left;
static long batches_per_producer;
static int fixed_size;

static const uint32_t step_sizes[] = { 8,   12,	 16,  24,  32,	48,   64,   96,	 128,
				       192, 256, 384, 512, 768, 1024, 1536, 2048 };

struct consumer {
	pthread_t tid;
	unsigned long long freed;
	int bad;
};

static void put(struct batch *b)
{
	pthread_mutex_lock(&lock);
	while (queued >= QUEUE_LIMIT)
		pthread_cond_wait(&not_full, &lock);
	b->next = queue;
	queue = b;
	queued++;
	pthread_cond_signal(&not_empty);
	pthread_mutex_unlock(&lock);
}

/* The next batch, or NULL once every producer is done and the queue empty. */
static struct batch *take(void)
{
	struct batch *b;

	pthread_mutex_lock(&lock);
	while (!queue && producers_left > 0)
		pthread_cond_wait(&not_empty, &lock);
	b = queue;
	if (b) {
		queue = b->next;
		queued--;
		pthread_cond_signal(&not_full);
	}
	pthread_mutex_unlock(&lock);
	return b;
}

static void *produce(void *arg)
{
	uint64_t rng = (uintptr_t)arg * 0x9e3779b97f4a7c15u + 1;

	for (long n = 0; n < batches_per_producer; n++) {
		struct batch *b = malloc(sizeof(*b));
		if (!b)
			abort();
		for (int i = 0; i < PER_BATCH; i++) {
			rng ^= rng << 13;
			rng ^= rng >> 7;
			rng ^= rng << 17;
			uint32_t size = fixed_size ? (uint32_t)fixed_size :
						     step_sizes[rng % (sizeof(step_sizes) /
								       sizeof(step_sizes[0]))];
			b->sizes[i] = size;
			b->blocks[i] = malloc(size);
			if (!b->blocks[i])
				abort();
			memset(b->blocks[i], i % 256, size > 128 ? 128 : size);
		}
		put(b);
	}
	pthread_mutex_lock(&lock);
	producers_left--;
	pthread_cond_broadcast(&not_empty);
	pthread_mutex_unlock(&lock);
	return NULL;
}

static void *consume(void *arg)
{
	struct consumer *c = arg;
	struct batch *b;
	int bad = 0;

	while ((b = take())) {
		for (int i = 0; i < PER_BATCH; i++) {
			const unsigned char *p = b->blocks[i];
			uint32_t n = b->sizes[i] > 128 ? 128 : b->sizes[i];
			for (uint32_t k = 0; k < n; k++)
				bad |= p[k] != (unsigned char)(i % 256);
			free(b->blocks[i]);
		}
		free(b);
		c->freed += PER_BATCH;
	}
	c->bad = bad;
	return NULL;
}

int main(int argc, char **argv)
{
	int workers = argc > 1 ? atoi(argv[1]) : 2;
	unsigned long long freed = 0;
	int bad = 0;

	batches_per_producer = argc > 2 ? atol(argv[2]) : 1200;
	fixed_size = argc > 3 ? atoi(argv[3]) : 64;
	if (workers < 1 || workers > 256 || batches_per_producer < 1 || fixed_size < 0) {
		fprintf(stderr, "usage: xmalloc-like [WORKERS 1-256 [BATCHES [SIZE, 0: mixed]]]\n");
		return 2;
	}
	pthread_t *prod = calloc((size_t)workers, sizeof(*prod));
	struct consumer *cons = calloc((size_t)workers, sizeof(*cons));

	if (!prod || !cons) {
		fprintf(stderr, "xmalloc-like: out of memory\n");
		return 1;
	}
	producers_left = workers;
	for (int i = 0; i < workers; i++) {
		if (pthread_create(&cons[i].tid, NULL, consume, &cons[i]) != 0 ||
		    pthread_create(&prod[i], NULL, produce, (void *)(uintptr_t)(i + 1)) != 0) {
			fprintf(stderr, "xmalloc-like: pthread_create failed\n");
			return 1;
		}
	}
	for (int i = 0; i < workers; i++)
		pthread_join(prod[i], NULL);
	for (int i = 0; i < workers; i++) {
		pthread_join(cons[i].tid, NULL);
		freed += cons[i].freed;
		bad |= cons[i].bad;
	}
	free(prod);
	free(cons);
	if (bad || freed != (unsigned long long)workers * batches_per_producer * PER_BATCH) {
		fprintf(stderr, "xmalloc-like: %llu blocks freed, %llu expected%s\n", freed,
			(unsigned long long)workers * batches_per_producer * PER_BATCH,
			bad ? ", a block's pattern was overwritten" : "");
		return 1;
	}
	printf("xmalloc-like: ok, %llu blocks moved from %d producers to %d consumers\n", freed,
	       workers, workers);
	return 0;
}
