/* tests/peers/burst.c: many threads that start, allocate and exit
 * together, with figures known in advance. THREADS threads (argv[1],
 * default 32) wait at a barrier, each allocates BLOCKS blocks (argv[2],
 * default 2000) of 16 + (i * 7 + t) % 200 bytes, waits at a second
 * barrier (every block of every thread is live there: the heap's peak),
 * frees all its blocks but the first, and returns; main joins them and
 * frees nothing. The first blocks, 16 + t % 200 bytes each, are leaked.
 * Nothing depends on the schedule but which thread frees when. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_THREADS 256

static pthread_barrier_t start, full;
static int blocks = 2000;
static void *volatile leaked[MAX_THREADS];

static void *work(void *arg)
{
	intptr_t t = (intptr_t)arg;
	void **p = calloc(blocks, sizeof(*p));

	if (!p)
		abort();
	pthread_barrier_wait(&start);
	for (int i = 0; i < blocks; i++) {
		size_t n = 16 + (size_t)(i * 7 + t) % 200;

		p[i] = malloc(n);
		if (!p[i])
			abort();
		memset(p[i], (int)t, n);
	}
	pthread_barrier_wait(&full);
	leaked[t] = p[0];
	for (int i = 1; i < blocks; i++)
		free(p[i]);
	free(p);
	return NULL;
}

int main(int argc, char **argv)
{
	pthread_t tid[MAX_THREADS];
	int threads = argc > 1 ? atoi(argv[1]) : 32;

	if (argc > 2)
		blocks = atoi(argv[2]);
	if (threads < 1 || threads > MAX_THREADS || blocks < 1)
		return 2;
	pthread_barrier_init(&start, NULL, (unsigned)threads);
	pthread_barrier_init(&full, NULL, (unsigned)threads);
	for (intptr_t t = 0; t < threads; t++)
		if (pthread_create(&tid[t], NULL, work, (void *)t) != 0)
			return 1;
	for (int t = 0; t < threads; t++)
		pthread_join(tid[t], NULL);
	return 0;
}
