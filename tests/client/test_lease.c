// SPDX-License-Identifier: MIT
/*
 * libmemprof gives back the ring of a consumer whose lease is gone
 * (docs/RING.md "A consumer that dies"), and only then. The header is
 * written here as a consumer would have left it, through a file of this
 * process's own (as the daemon opens the ring), with or without a lock on
 * it; tests/service/test_lease.c kills real daemons. The interposer is
 * called through libmemprof's own definitions (dlsym on its handle), so
 * the test means the same in a sanitizer build.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "memprof.h"
#include "ring_abi.h"

static void *(*ip_malloc)(size_t);
static void (*ip_free)(void *);

struct own {
	int fd;
	struct mp_ring_hdr *h;
};

/* This process's ring, opened through /proc/self/fd (a file of its own,
 * as the daemon's), with the interposer's functions. */
static struct own ring_self(void)
{
	static const char want[] = "/memfd:" MP_RING_MEMFD_NAME " (deleted)";
	void *lib = dlopen("libmemprof.so.0", RTLD_NOW | RTLD_NOLOAD);
	struct own o = { .fd = -1 };
	char link[sizeof(want) + 1];
	struct dirent *de;
	DIR *d;

	cr_assert_not_null(lib, "libmemprof not loaded: %s", dlerror());
	ip_malloc = (void *(*)(size_t))dlsym(lib, "malloc");
	ip_free = (void (*)(void *))dlsym(lib, "free");
	cr_assert(ip_malloc && ip_free);
	/* the ring exists from the first marker on (MEMPROF_RING_LAZY=1) */
	cr_assert_eq(memprof_kernel_begin("k"), 0);
	cr_assert_eq(memprof_kernel_end(), 0);
	d = opendir("/proc/self/fd");
	cr_assert_not_null(d);
	while (o.fd < 0 && (de = readdir(d))) {
		ssize_t n = readlinkat(dirfd(d), de->d_name, link, sizeof(link));

		if (n == (ssize_t)sizeof(want) - 1 && !memcmp(link, want, (size_t)n))
			o.fd = openat(dirfd(d), de->d_name, O_RDWR | O_CLOEXEC);
	}
	closedir(d);
	cr_assert_geq(o.fd, 0, "no ring");
	o.h = mmap(NULL, sizeof(*o.h), PROT_READ | PROT_WRITE, MAP_SHARED, o.fd, 0);
	cr_assert_neq(o.h, MAP_FAILED);
	return o;
}

/* The header as a consumer that turned the interposer on in sampled mode
 * with a 1-byte interval (every call a record, none waits) left it, its
 * attached @attached. */
static void as_left(struct own *o, uint32_t attached)
{
	__atomic_store_n(&o->h->alloc_sample_bytes, 1, __ATOMIC_RELAXED);
	__atomic_fetch_add(&o->h->alloc_epoch, 1, __ATOMIC_RELAXED);
	__atomic_store_n(&o->h->alloc_mode, MP_ALLOC_SAMPLED, __ATOMIC_RELEASE);
	__atomic_store_n(&o->h->attached, attached, __ATOMIC_SEQ_CST);
}

static int lock_lease(const struct own *o, short type)
{
	struct flock fl = {
		.l_type = type,
		.l_whence = SEEK_SET,
		.l_start = MP_RING_LEASE_BYTE,
		.l_len = 1,
	};

	return fcntl(o->fd, F_OFD_SETLK, &fl);
}

static uint64_t word(const struct own *o)
{
	return __atomic_load_n(&o->h->attach_word, __ATOMIC_ACQUIRE);
}

static uint64_t ms_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Fills the ring (until a heap record is dropped), then allocates for
 * 50 ms more (the library looks at the lease at most once a millisecond):
 * whether the ring was given back meanwhile. */
static bool released_by_a_full_ring(const struct own *o)
{
	uint64_t end;
	long n = 0;

	while (!__atomic_load_n(&o->h->alloc_drops, __ATOMIC_RELAXED) && word(o)) {
		ip_free(ip_malloc(16));
		cr_assert_lt(++n, 1l << 24, "the ring never filled");
	}
	end = ms_now() + 50;
	while (word(o) && ms_now() < end)
		for (int i = 0; i < 1000; i++)
			ip_free(ip_malloc(16));
	return !word(o);
}

Test(lease, released_once_no_lock_is_held)
{
	struct own o = ring_self();
	uint64_t drops;

	as_left(&o, MP_ATTACHED_LEASE | 7);
	cr_assert(released_by_a_full_ring(&o), "attach_word still %#llx",
		  (unsigned long long)word(&o));
	cr_assert_eq(o.h->attached, 0);
	cr_assert_eq(o.h->alloc_mode, MP_ALLOC_OFF);
	/* dormant: no record, no drop */
	drops = o.h->alloc_drops;
	for (int i = 0; i < 100000; i++)
		ip_free(ip_malloc(16));
	cr_assert_eq(o.h->alloc_drops, drops);
}

Test(lease, kept_while_a_consumer_holds_the_lock)
{
	struct own o = ring_self();
	uint64_t w;

	cr_assert_eq(lock_lease(&o, F_RDLCK), 0);
	as_left(&o, MP_ATTACHED_LEASE | 7);
	w = word(&o);
	cr_assert_not(released_by_a_full_ring(&o), "released while the lease is held");
	cr_assert_eq(word(&o), w);
	/* the consumer dies: its lock goes */
	cr_assert_eq(lock_lease(&o, F_UNLCK), 0);
	cr_assert(released_by_a_full_ring(&o), "not released once the lock went");
}

Test(lease, a_consumer_without_the_lease_is_never_released)
{
	struct own o = ring_self();
	uint64_t w;

	as_left(&o, 1);
	w = word(&o);
	cr_assert_not(released_by_a_full_ring(&o), "an older consumer's ring was released");
	cr_assert_eq(word(&o), w);
}
