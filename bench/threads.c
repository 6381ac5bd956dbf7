// SPDX-License-Identifier: MIT
/*
 * Many short threads, each one kernel invocation with an allocation in
 * it, for counting what the profile keeps of them (not timed):
 *
 *   memprof run [--stacks] [--tracer bpf] -o P -- build/bench/bench-threads N BATCH
 *   memprof report P     # kernel "t": CALLS must be N
 *
 * Threads start BATCH at a time (all BATCH alive at once, released by a
 * barrier, more than the ring's 512 thread slots when BATCH > 512), N in
 * all, each with a 64 KiB stack.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include <memprof.h>

static pthread_barrier_t bar;

static void *worker(void *arg)
{
	void *volatile p;

	(void)arg;
	pthread_barrier_wait(&bar);
	memprof_kernel_begin("t");
	p = malloc(100);
	free(p);
	memprof_kernel_end();
	return NULL;
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 5000, batch = argc > 2 ? atoi(argv[2]) : 1000;
	pthread_attr_t at;
	pthread_t *t;

	if (n <= 0 || batch <= 0 || !(t = calloc((size_t)batch, sizeof(*t)))) {
		fprintf(stderr, "usage: bench-threads N BATCH\n");
		return 2;
	}
	pthread_attr_init(&at);
	pthread_attr_setstacksize(&at, 64u << 10);
	for (int done = 0; done < n; done += batch) {
		int k = n - done < batch ? n - done : batch;

		pthread_barrier_init(&bar, NULL, (unsigned)k);
		for (int i = 0; i < k; i++)
			if (pthread_create(&t[i], &at, worker, NULL)) {
				perror("pthread_create");
				return 1;
			}
		for (int i = 0; i < k; i++)
			pthread_join(t[i], NULL);
		pthread_barrier_destroy(&bar);
	}
	free(t);
	return 0;
}
