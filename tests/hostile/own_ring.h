/* SPDX-License-Identifier: MIT */
/*
 * For test targets that play with their own marker ring the way a hostile
 * process could: find the memfd libmemprof created (/proc/self/fd), map it
 * writable and locate the calling thread's ring.
 */
#ifndef MP_TEST_OWN_RING_H
#define MP_TEST_OWN_RING_H

#include <dirent.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ring_abi.h"

struct own_ring {
	unsigned char *base;
	size_t len;
	struct mp_ring_hdr *hdr;
};

static inline int own_ring_map(struct own_ring *r)
{
	static const char want[] = "/memfd:" MP_RING_MEMFD_NAME " (deleted)";
	char path[300], link[sizeof(want) + 1];
	struct dirent *de;
	struct stat st;
	DIR *d = opendir("/proc/self/fd");
	int fd = -1;

	if (!d)
		return -1;
	while ((de = readdir(d))) {
		ssize_t n;

		snprintf(path, sizeof(path), "/proc/self/fd/%s", de->d_name);
		n = readlink(path, link, sizeof(link));
		if (n == (ssize_t)sizeof(want) - 1 && !memcmp(link, want, (size_t)n)) {
			fd = open(path, O_RDWR | O_CLOEXEC);
			break;
		}
	}
	closedir(d);
	if (fd < 0 || fstat(fd, &st) < 0)
		return -1;
	r->len = (size_t)st.st_size;
	r->base = mmap(NULL, r->len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (r->base == MAP_FAILED)
		return -1;
	r->hdr = (struct mp_ring_hdr *)r->base;
	return 0;
}

/* Waits (at most 20 s) until a consumer has attached. */
static inline bool own_ring_wait_attached(const struct own_ring *r)
{
	for (int i = 0; i < 20000; i++) {
		if (__atomic_load_n(&r->hdr->attached, __ATOMIC_ACQUIRE))
			return true;
		usleep(1000);
	}
	return false;
}

static inline struct mp_thread *own_thread(const struct own_ring *r, uint32_t *ret_index)
{
	uint32_t tid = (uint32_t)gettid();

	for (uint32_t i = 0; i < r->hdr->thread_count; i++) {
		struct mp_thread *t = (struct mp_thread *)(r->base + r->hdr->threads_off) + i;

		if (t->state == 1 && t->tid == tid) {
			*ret_index = i;
			return t;
		}
	}
	return NULL;
}

/* The slot of position @pos in the ring of thread slot @i. */
static inline struct mp_slot *own_slot(const struct own_ring *r, uint32_t i, uint64_t pos)
{
	return (struct mp_slot *)(r->base + r->hdr->ring_off) + (uint64_t)i * r->hdr->slot_count +
	       (pos & (r->hdr->slot_count - 1));
}

/* Waits (at most 20 s) until the consumer has read every record this
 * thread wrote. Write a marker after own_ring_wait_attached() and wait for
 * it: the consumer has then taken its attach snapshot and reads live
 * records (markers written between the attach flag and the snapshot are
 * only in the snapshot, and a kernel that closed there is in neither). */
static inline bool own_ring_wait_read(const struct own_ring *r)
{
	uint32_t i;
	struct mp_thread *t = own_thread(r, &i);

	for (int n = 0; t && n < 20000; n++) {
		if (__atomic_load_n(&t->tail, __ATOMIC_ACQUIRE) >=
		    __atomic_load_n(&t->head, __ATOMIC_RELAXED))
			return true;
		usleep(1000);
	}
	return false;
}

#endif /* MP_TEST_OWN_RING_H */
