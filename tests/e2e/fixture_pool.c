// SPDX-License-Identifier: MIT
/*
 * Thread-pool shape: the dispatcher (main thread) opens kernel "parallel_for",
 * two workers with no kernel of their own allocate 1000 and 3000 bytes, then
 * the dispatcher closes the kernel. A worker allocation made while no kernel
 * is open anywhere (4096 bytes, before the kernel) belongs to no kernel.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include <memprof.h>

static pthread_barrier_t go, done;
static void *blocks[2];

static void *worker(void *arg)
{
	size_t idx = (size_t)(uintptr_t)arg;

	pthread_barrier_wait(&go);
	blocks[idx] = malloc(idx == 0 ? 1000 : 3000);
	pthread_barrier_wait(&done);
	return NULL;
}

int main(void)
{
	pthread_t t[2];
	void *before;

	pthread_barrier_init(&go, NULL, 3);
	pthread_barrier_init(&done, NULL, 3);
	for (size_t i = 0; i < 2; i++)
		if (pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)i))
			return 1;

	before = malloc(4096);
	memprof_kernel_begin("parallel_for");
	pthread_barrier_wait(&go);
	pthread_barrier_wait(&done);
	memprof_kernel_end();

	for (size_t i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	free(blocks[0]);
	free(blocks[1]);
	free(before);
	return 0;
}
