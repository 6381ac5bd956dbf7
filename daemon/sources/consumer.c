/* SPDX-License-Identifier: MIT */
/*
 * Consumer of the libmemprof marker ring (memprofd side). The ring is written
 * by the profiled process and read by a privileged daemon: it is hostile
 * input. The static header fields are copied and validated once at open and
 * never read again; every slot is copied out before it is validated; every
 * loop has a fixed bound.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/membarrier.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "consumer.h"
#include "consumer_impl.h"
#include "lease.h"
#include "ring_abi.h"
#include "tsc_clock.h"
#include "util.h"

/* Copies @n bytes that another process may be writing. */
static void copy_racy(void *dst, const void *src, size_t n)
{
	const volatile unsigned char *s = src;
	unsigned char *d = dst;

	for (size_t i = 0; i < n; i++)
		d[i] = s[i];
}

static bool region_ok(uint64_t off, uint64_t size, uint64_t align, uint64_t lo, uint64_t hi)
{
	return off % align == 0 && off >= lo && off <= hi && size <= hi - off;
}

static int validate_header(struct mp_consumer *c)
{
	struct mp_ring_hdr h;
	struct {
		uint64_t off, size;
	} reg[4];

	if (c->len < sizeof(h))
		return -EBADMSG;
	copy_racy(&h, c->base, sizeof(h));
	if (h.magic != MP_RING_MAGIC)
		return -EBADMSG;
	if (h.abi_version != MP_RING_ABI_VERSION)
		return -EPROTO;
	if (h.hdr_size != sizeof(h) || h.slot_size != sizeof(struct mp_slot) ||
	    h.thread_size != sizeof(struct mp_thread))
		return -EBADMSG;
	if (h.total_size > c->len || h.slot_count < 2 || (h.slot_count & (h.slot_count - 1)) ||
	    !h.thread_count || h.thread_count > MP_RING_MAX_THREADS ||
	    (uint64_t)h.slot_count * h.thread_count > MP_RING_MAX_SLOTS || !h.str_max ||
	    h.str_max > MP_RING_MAX_STRINGS || !h.blob_size || h.blob_size > MP_RING_MAX_BLOB)
		return -EBADMSG;
	reg[0].off = h.ring_off;
	reg[0].size = (uint64_t)h.thread_count * h.slot_count * sizeof(struct mp_slot);
	reg[1].off = h.threads_off;
	reg[1].size = (uint64_t)h.thread_count * sizeof(struct mp_thread);
	reg[2].off = h.strent_off;
	reg[2].size = (uint64_t)h.str_max * sizeof(mp_strent);
	reg[3].off = h.blob_off;
	reg[3].size = h.blob_size;
	if (!region_ok(reg[0].off, reg[0].size, 64, sizeof(h), h.total_size) ||
	    !region_ok(reg[1].off, reg[1].size, 64, sizeof(h), h.total_size) ||
	    !region_ok(reg[2].off, reg[2].size, 8, sizeof(h), h.total_size) ||
	    !region_ok(reg[3].off, reg[3].size, 1, sizeof(h), h.total_size))
		return -EBADMSG;
	/* Regions must not overlap: a slot must never alias a string or a
	 * thread slot, or one validated value could change another. */
	for (int i = 0; i < 4; i++)
		for (int j = i + 1; j < 4; j++)
			if (reg[i].off < reg[j].off + reg[j].size &&
			    reg[j].off < reg[i].off + reg[i].size)
				return -EBADMSG;

	c->hdr = (struct mp_ring_hdr *)c->base;
	c->slot_count = h.slot_count;
	c->mask = h.slot_count - 1;
	c->thread_count = h.thread_count;
	c->str_max = h.str_max;
	c->blob_size = h.blob_size;
	c->ring_off = h.ring_off;
	c->threads_off = h.threads_off;
	c->strent_off = h.strent_off;
	c->blob_off = h.blob_off;
	c->pid = (pid_t)h.creator_pid;
	return 0;
}

/* Returns the sanitised name of string @id, NULL when the entry is invalid. */
static const char *name_get(struct mp_consumer *c, uint32_t id)
{
	mp_strent e;
	uint32_t off, len;
	char *s;

	if (id >= c->str_max)
		return NULL;
	if (c->names[id])
		return c->names[id];
	e = LOAD((mp_strent *)(c->base + c->strent_off) + id, ACQUIRE);
	off = (uint32_t)(e >> 32);
	len = (uint32_t)e;
	if (!len || len - 1 > MP_NAME_MAX || off > c->blob_size || len - 1 > c->blob_size - off)
		return NULL;
	len--;
	s = malloc(len + 1);
	if (!s)
		return NULL;
	copy_racy(s, c->base + c->blob_off + off, len);
	for (uint32_t i = 0; i < len; i++)
		if (s[i] < 0x20 || s[i] > 0x7e)
			s[i] = '?';
	s[len] = '\0';
	c->names[id] = s;
	return s;
}

const char *mp_consumer_string(struct mp_consumer *c, uint32_t id)
{
	return c && id ? name_get(c, id) : NULL;
}

/* Copies @n 8-byte words another process may be writing (fast enough to fit
 * between two markers of a thread running them flat out). */
static void copy_words(void *dst, const void *src, size_t n)
{
	const uint64_t *s = src;
	uint64_t *d = dst;

	for (size_t i = 0; i < n; i++)
		d[i] = LOAD(&s[i], RELAXED);
}

/* A slot's first cache line (every record's header, a heap record whole
 * but for a realloc's old address): the loop above, unrolled, was a
 * sixth of the instructions of a heap record's read. */
static inline __attribute__((always_inline)) void copy_first_line(struct mp_slot *dst,
								  const struct mp_slot *src)
{
	const uint64_t *s = (const uint64_t *)src;
	uint64_t *d = (uint64_t *)dst;

#pragma GCC unroll 8
	for (size_t i = 0; i < HEAP_WORDS_END / 8; i++)
		d[i] = LOAD(&s[i], RELAXED);
}

/* Consistent copy of one thread slot (seqlock read), bounded. */
static bool thread_snapshot(struct mp_consumer *c, uint32_t i, struct mp_thread *ret)
{
	struct mp_thread *t = thread_at(c, i);
	const size_t fw = sizeof(struct mp_frame) / 8;

	for (int n = 0; n < SNAP_SPINS + SNAP_YIELDS; n++) {
		uint64_t g1, g2;
		uint32_t d, td;

		if (n >= SNAP_SPINS) {
			if (!c->yield_budget)
				return false;
			c->yield_budget--;
			sched_yield();
		}
		g1 = LOAD(&t->gen, ACQUIRE);
		if (g1 & 1)
			continue;
		copy_words(ret, t, offsetof(struct mp_thread, kernels) / 8);
		d = ret->depth < MP_KSTACK_MAX ? ret->depth : MP_KSTACK_MAX;
		td = ret->tag_depth < MP_TSTACK_MAX ? ret->tag_depth : MP_TSTACK_MAX;
		copy_words(ret->kernels, t->kernels, d * fw);
		copy_words(ret->tags, t->tags, td * fw);
		__atomic_thread_fence(__ATOMIC_ACQUIRE);
		g2 = LOAD(&t->gen, RELAXED);
		if (g1 == g2) {
			ret->gen = g1;
			ret->depth = d;
			ret->tag_depth = td;
			return true;
		}
	}
	return false;
}

static int synth_add(struct mp_consumer *c, size_t *cap, uint32_t type, uint32_t tid, uint32_t tseq,
		     uint32_t name_id, uint64_t ts, uint64_t attach_ts)
{
	struct mp_record *r;

	if (c->nsynth == *cap) {
		size_t ncap = *cap ? *cap * 2 : 64;
		struct mp_record *n = realloc(c->synth, ncap * sizeof(*n));

		if (!n)
			return -ENOMEM;
		c->synth = n;
		*cap = ncap;
	}
	r = &c->synth[c->nsynth];
	memset(r, 0, sizeof(*r));
	r->type = type;
	r->flags = MP_REC_F_OPEN_AT_ATTACH;
	r->tid = tid;
	r->seq = tseq;
	r->ts_ns = ts;
	if (!ts) {
		r->ts_ns = attach_ts;
		r->flags |= MP_REC_F_TS_UNKNOWN;
	}
	r->name = name_get(c, name_id);
	if (!r->name)
		return -EBADMSG;
	c->nsynth++;
	return 0;
}

/* Builds the open-at-attach records from every thread slot and remembers
 * each slot's record number so ring records already reflected are skipped. */
static int snapshot(struct mp_consumer *c, uint64_t attach_ts)
{
	struct mp_thread t, phase = { 0 };
	size_t cap = 0;
	int r;

	for (uint32_t i = 0; i < c->thread_count; i++) {
		if (!thread_snapshot(c, i, &t))
			continue; /* never stable: its ring records all pass */
		c->ts[i].snap_valid = true;
		c->ts[i].heap_pre_snap = true;
		c->ts[i].snap_seq = (uint32_t)(t.gen >> 1);
		/* the phase set (or ended: phase_id 0) last, by any thread, as
		 * of its snapshot */
		if (t.phase_order > phase.phase_order)
			phase = t;
		for (uint32_t k = 0; k < t.depth; k++) {
			r = synth_add(c, &cap, MP_REC_KERNEL_BEGIN, t.tid, c->ts[i].snap_seq,
				      t.kernels[k].name_id, t.kernels[k].ts_ns, attach_ts);
			if (r < 0)
				return r;
		}
		for (uint32_t k = 0; k < t.tag_depth; k++) {
			r = synth_add(c, &cap, MP_REC_TAG_BEGIN, t.tid, c->ts[i].snap_seq,
				      t.tags[k].name_id, t.tags[k].ts_ns, attach_ts);
			if (r < 0)
				return r;
		}
	}
	if (phase.phase_id) {
		size_t n = c->nsynth;

		r = synth_add(c, &cap, MP_REC_PHASE, phase.tid, (uint32_t)(phase.gen >> 1),
			      phase.phase_id, phase.phase_ts, attach_ts);
		if (r < 0)
			return r;
		/* the phase comes first */
		if (n) {
			struct mp_record p = c->synth[n];

			memmove(c->synth + 1, c->synth, n * sizeof(p));
			c->synth[0] = p;
		}
	}
	return 0;
}

static void barrier_all(struct mp_consumer *c, bool membarrier)
{
	/* Producers read the attached flag after publishing their stack
	 * update, with no fence of their own (it would cost ~20 ns per
	 * marker). A membarrier makes every running thread pass a full
	 * barrier: afterwards each marker is either in our snapshot or sees
	 * attached != 0 and goes to the ring. The expedited one reaches the
	 * threads of the processes registered for it (the ring's creator
	 * says it is) by IPIs, in microseconds; the global one waits for a
	 * grace period (~10-20 ms). A thread not running passes a full
	 * barrier when it is scheduled again, either way. */
	c->attach_barrier = MP_ATTACH_BARRIER_NONE;
	if (membarrier &&
	    (LOAD(&c->hdr->creator_flags, RELAXED) & MP_RING_F_MEMBARRIER_EXPEDITED) &&
	    syscall(SYS_membarrier, MEMBARRIER_CMD_GLOBAL_EXPEDITED, 0, 0) == 0) {
		c->attach_barrier = MP_ATTACH_BARRIER_EXPEDITED;
		return;
	}
	if (membarrier && syscall(SYS_membarrier, MEMBARRIER_CMD_GLOBAL, 0, 0) == 0) {
		c->attach_barrier = MP_ATTACH_BARRIER_GLOBAL;
		return;
	}
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	if (membarrier) {
		/* Kernel without membarrier: give every producer ample time to
		 * drain its store buffer (not a formal guarantee, see RING.md). */
		struct timespec ts = { .tv_nsec = 20 * 1000 * 1000 };

		nanosleep(&ts, NULL);
		c->attach_barrier = MP_ATTACH_BARRIER_SLEEP;
	}
}

enum mp_attach_barrier mp_consumer_attach_barrier(const struct mp_consumer *c)
{
	return c ? (enum mp_attach_barrier)c->attach_barrier : MP_ATTACH_BARRIER_NONE;
}

/* At the start of every read, once TSC records come: records read in this
 * call are converted against a pair taken just now. */
static inline void tsc_tick(struct mp_consumer *c)
{
	if (c->clk.seen && c->clk.mode == MP_TSC_LIVE)
		mp_tsc_clock_refresh(&c->clk);
}

void mp_consumer_set_tsc_cal(struct mp_consumer *c, const struct mp_tsc_cal *cal)
{
	if (!c)
		return;
	if (!cal) {
		c->clk.mode = MP_TSC_REJECT;
		c->clk.fast = false;
		return;
	}
	c->clk.mode = MP_TSC_FIXED;
	c->clk.cal = *cal;
	c->clk.ready = true;
	c->clk.fast = c->clk.seen;
}

static inline __attribute__((always_inline)) int ts_check(struct mp_consumer *c, uint64_t ns)
{
	return unlikely(ns < c->ts_lo || ns > c->ts_hi) ? mp_cons_ts_outside_(c, ns) : 0;
}

/* The CLOCK_MONOTONIC stamp of a heap record of thread state @t whose
 * clock byte is @clock: 0; 1 or 2 for a stamp before or after the
 * session's window (ts_outside(), before any clamping), or -EBADMSG for a
 * clock this consumer does not believe. */
static inline __attribute__((always_inline)) int heap_ts(struct mp_consumer *c, struct tstate *t,
							 uint8_t clock, uint64_t *ts)
{
	uint64_t ns;
	int e;

	if (unlikely(clock != MP_TS_TSC || !c->clk.fast)) {
		if (likely(clock == MP_TS_MONOTONIC))
			return ts_check(c, *ts);
		if (clock != MP_TS_TSC || c->clk.mode == MP_TSC_REJECT)
			return -EBADMSG;
		if (unlikely(!c->clk.ready || !c->clk.seen)) {
			c->clk.seen = true;
			if (c->clk.mode == MP_TSC_LIVE && !mp_tsc_clock_refresh(&c->clk))
				return -EBADMSG;
		}
		c->clk.fast = c->clk.mode != MP_TSC_REJECT && c->clk.ready && c->clk.seen;
	}
	ns = mp_tsc_clock_to_ns(&c->clk.cal, *ts);
	e = ts_check(c, ns);
	if (e)
		return e;
	if (t) {
		if (ns < t->tsc_last_ns)
			ns = t->tsc_last_ns;
		t->tsc_last_ns = ns;
	}
	*ts = ns;
	return 0;
}

/* Turns the interposer on (@mode, @sample_bytes checked by the caller). */
static void alloc_mode_on(struct mp_consumer *c, uint32_t mode, uint64_t sample_bytes)
{
	/* Interval and epoch before the mode: a thread that sees the mode
	 * sees them too. */
	STORE(&c->hdr->alloc_sample_bytes, mode == MP_ALLOC_SAMPLED ? sample_bytes : 0, RELAXED);
	__atomic_fetch_add(&c->hdr->alloc_epoch, 1, __ATOMIC_RELAXED);
	STORE(&c->hdr->alloc_mode, mode, RELEASE);
	c->alloc_on = true;
	c->heap_ok = true;
}

static int check_opts(const struct mp_consumer_opts *o)
{
	if (!o)
		return 0;
	if (o->alloc_mode > MP_ALLOC_SAMPLED ||
	    (o->alloc_mode == MP_ALLOC_SAMPLED && !o->alloc_sample_bytes) ||
	    o->alloc_stack_bytes > MP_RING_STACK_MAX || o->alloc_stack_depth > MP_FRAMES_MAX)
		return -EINVAL;
	return 0;
}

/*
 * Attach (docs/RING.md "Per-thread state and late attach"): the clock, the
 * interposer on (@o), attached, a barrier on every CPU, then the snapshot.
 * With the interposer on before the snapshot, no kernel begins between the
 * two with its markers recorded and its allocations not; the heap records
 * written before the snapshot are told apart by their tseq (take()).
 */
static int consumer_attach(struct mp_consumer *c, const struct mp_consumer_opts *o, bool membarrier)
{
	int r;

	r = validate_header(c);
	if (r < 0)
		return r;
	r = check_opts(o);
	if (r < 0)
		return r;
	c->ts = calloc(c->thread_count, sizeof(*c->ts));
	c->names = calloc(c->str_max, sizeof(*c->names));
	c->active = malloc(c->thread_count * sizeof(*c->active));
	if (!c->ts || !c->names || !c->active)
		return -ENOMEM;

	c->yield_budget = SNAP_YIELD_BUDGET;
	c->stall_ns = o && o->stall_ns ? o->stall_ns : MP_CONSUMER_STALL_NS;
	mp_tsc_clock_init(&c->clk);
	/* Before anything is written into the ring: the caller's own set-up
	 * (the daemon tells its syscall tracer where the interposer's
	 * in-allocator flag is before the interposer turns on). */
	if (o && o->before_attach) {
		r = o->before_attach(o->ctx, c);
		if (r < 0)
			return r;
	}
	c->attach_ns = mp_now_ns();
	c->stack_depth = o ? o->alloc_stack_depth : 0;
	c->strict = c->map || (o && o->strict);
	c->heap_ok = !c->strict;
	c->ts_lo = c->strict && c->attach_ns > TS_SLACK_NS ? c->attach_ns - TS_SLACK_NS : 0;
	c->ts_hi = c->strict ? c->attach_ns + TS_SLACK_NS : UINT64_MAX;
	c->drops_base = LOAD(&c->hdr->drops, RELAXED);
	c->alloc_drops_base = LOAD(&c->hdr->alloc_drops, RELAXED);
	c->alloc_waits_base = LOAD(&c->hdr->alloc_waits, RELAXED);
	if (c->lease)
		mp_lease_clear(c->hdr);
	if (o && o->alloc_mode) {
		STORE(&c->hdr->alloc_stack_bytes, o->alloc_stack_bytes, RELAXED);
		/* the wrapped allocations' FRAMES too, stacks or not */
		STORE(&c->hdr->alloc_stack_depth, o->alloc_stack_depth, RELAXED);
		STORE(&c->hdr->alloc_max_wait_ns, o->alloc_max_wait_ns, RELAXED);
		alloc_mode_on(c, o->alloc_mode, o->alloc_sample_bytes);
	}
	STORE(&c->hdr->attached, mp_lease_attached(c->hdr, c->lease), SEQ_CST);
	c->attached = true;
	/* every thread now sees the mode and the flag (RING.md) */
	barrier_all(c, membarrier);
	r = snapshot(c, c->attach_ns > ATTACH_TS_EARLY_NS ? c->attach_ns - ATTACH_TS_EARLY_NS : 0);
	if (r < 0)
		return r;

	/* Resume where the previous consumer stopped. If it died between
	 * reading a record and storing tail, that record comes again and the
	 * snapshot's record numbers drop it. */
	for (uint32_t i = 0; i < c->thread_count; i++) {
		c->ts[i].pos = LOAD(&thread_at(c, i)->tail, RELAXED);
		c->ts[i].slots = slot_at(c, i, 0);
		c->ts[i].owner = LOAD(&thread_at(c, i)->tid, RELAXED);
	}
	return 0;
}

static struct mp_consumer *consumer_alloc(void)
{
	return calloc(1, sizeof(struct mp_consumer));
}

void mp_consumer_free(struct mp_consumer *c)
{
	if (!c)
		return;
	if (c->attached) {
		/* Dormant again before the markers stop: nothing waits for a
		 * consumer that is gone. */
		if (c->alloc_on)
			STORE(&c->hdr->alloc_mode, MP_ALLOC_OFF, RELEASE);
		STORE(&c->hdr->attached, 0, RELEASE);
	}
	if (c->names) {
		for (uint32_t i = 0; i < c->str_max; i++)
			free(c->names[i]);
		free(c->names);
	}
	free(c->ts);
	free(c->active);
	free(c->synth);
	free(c->stk);
	if (c->map)
		munmap(c->map, c->map_len);
	free(c);
}

int mp_consumer_open_mem(void *mem, size_t len, struct mp_consumer **ret)
{
	return mp_consumer_open_mem_opts(mem, len, NULL, ret);
}

int mp_consumer_open_mem_opts(void *mem, size_t len, const struct mp_consumer_opts *o,
			      struct mp_consumer **ret)
{
	struct mp_consumer *c;
	int r;

	if (!mem || !ret)
		return -EINVAL;
	c = consumer_alloc();
	if (!c)
		return -ENOMEM;
	c->base = mem;
	c->len = len;
	r = consumer_attach(c, o, false);
	if (r < 0) {
		mp_consumer_free(c);
		return r;
	}
	*ret = c;
	return 0;
}

/* Maps the ring behind @fd; @pid > 0: the header must name that process. */
static int open_fd_pid(int fd, const pid_t *pids, int npids, const struct mp_consumer_opts *o,
		       struct mp_consumer **ret)
{
	struct mp_consumer *c;
	struct stat st;
	void *p;
	int seals, r;

	if (fstat(fd, &st) < 0)
		return -errno;
	if (!S_ISREG(st.st_mode) || st.st_size < (off_t)sizeof(struct mp_ring_hdr))
		return -EBADMSG;
	/* Without a shrink seal the writer could truncate the file under our
	 * mapping and make us fault. */
	seals = fcntl(fd, F_GET_SEALS);
	if (seals < 0 || !(seals & F_SEAL_SHRINK))
		return -EBADMSG;
	if ((uint64_t)st.st_size > (uint64_t)MP_RING_MAX_SLOTS * 256)
		return -EBADMSG;
	p = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		return -errno;
	c = consumer_alloc();
	if (!c) {
		munmap(p, (size_t)st.st_size);
		return -ENOMEM;
	}
	c->map = c->base = p;
	c->map_len = c->len = (size_t)st.st_size;
	r = validate_header(c);
	if (r == 0 && npids) {
		r = -ESRCH;
		for (int i = 0; i < npids; i++)
			if (c->pid == pids[i])
				r = 0;
	}
	if (r == 0) {
		c->lease = mp_lease_take(fd) == 0;
		r = consumer_attach(c, o, true);
	}
	if (r < 0) {
		mp_consumer_free(c);
		return r;
	}
	*ret = c;
	return 0;
}

/* The pid the target sees for itself: the last NSpid entry (pid namespaces). */
static pid_t inner_pid(pid_t pid)
{
	char path[64], buf[4096], *s;
	ssize_t n;
	pid_t last = 0;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	s = strstr(buf, "\nNSpid:");
	if (!s)
		return 0;
	s += 7;
	while (*s && *s != '\n') {
		char *end;
		long v = strtol(s, &end, 10);

		if (end == s)
			break;
		if (v > 0 && v < (1L << 30))
			last = (pid_t)v;
		s = end;
	}
	return last;
}

int mp_consumer_open_pid(pid_t pid, struct mp_consumer **ret)
{
	return mp_consumer_open_pid_opts(pid, NULL, ret);
}

int mp_consumer_open_pid_opts(pid_t pid, const struct mp_consumer_opts *o, struct mp_consumer **ret)
{
	static const char target[] = "/memfd:" MP_RING_MEMFD_NAME " (deleted)";
	char path[64], link[sizeof(target) + 1];
	pid_t pids[2];
	struct dirent *de;
	int r = -ENOENT, dfd, n = 0;
	DIR *d;

	if (pid <= 0 || !ret)
		return -EINVAL;
	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	d = opendir(path);
	if (!d) {
		r = -errno;
		snprintf(path, sizeof(path), "/proc/%d", (int)pid);
		return access(path, F_OK) < 0 ? -ESRCH : r;
	}
	pids[0] = pid;
	pids[1] = inner_pid(pid);
	dfd = dirfd(d);
	while ((de = readdir(d)) && n++ < MAX_FD_SCAN) {
		struct mp_consumer *c = NULL;
		ssize_t len;
		int fd, q;

		if (de->d_name[0] == '.')
			continue;
		len = readlinkat(dfd, de->d_name, link, sizeof(link));
		if (len != (ssize_t)sizeof(target) - 1 || memcmp(link, target, (size_t)len))
			continue;
		/* Opening the link reopens the target's own memfd: only a
		 * process allowed to ptrace-read it gets here, and no other
		 * process can put a file into its fd table. */
		fd = openat(dfd, de->d_name, O_RDWR | O_CLOEXEC);
		if (fd < 0)
			continue;
		q = open_fd_pid(fd, pids, pids[1] ? 2 : 1, o, &c);
		close(fd);
		if (q == 0) {
			closedir(d);
			c->pid = pid;
			*ret = c;
			return 0;
		}
		/* -ESRCH: another process's ring, e.g. inherited across a
		 * fork that bypassed pthread_atfork; keep looking. */
		if (q != -ESRCH && r == -ENOENT)
			r = q;
	}
	closedir(d);
	return r;
}

uint64_t mp_consumer_drops(struct mp_consumer *c)
{
	uint64_t cur, n;

	if (!c || !c->hdr)
		return 0;
	if (c->corruption & MP_CONSUMER_CORRUPT_HEADER)
		return c->drops_seen;
	/* Producers only ever add one at a time, each add an atomic on one
	 * shared line: the count cannot go back, nor grow by more than one
	 * per nanosecond. */
	cur = LOAD(&c->hdr->drops, RELAXED);
	n = cur - c->drops_base;
	if (cur < c->drops_base || n < c->drops_seen || n > mp_now_ns() - c->attach_ns) {
		c->corruption |= MP_CONSUMER_CORRUPT_HEADER;
		return c->drops_seen;
	}
	c->drops_seen = n;
	return n;
}

uint32_t mp_consumer_corruption(const struct mp_consumer *c)
{
	return c ? c->corruption : 0;
}

uint64_t mp_consumer_alloc_drops(const struct mp_consumer *c)
{
	return c && c->hdr ? LOAD(&c->hdr->alloc_drops, RELAXED) - c->alloc_drops_base : 0;
}

int64_t mp_consumer_alloc_tls_off(const struct mp_consumer *c)
{
	return c && c->hdr ? LOAD(&c->hdr->alloc_tls_off, RELAXED) : 0;
}

uint32_t *mp_consumer_bell(struct mp_consumer *c)
{
	if (!c || !c->hdr || !(LOAD(&c->hdr->creator_flags, RELAXED) & MP_RING_F_BELL))
		return NULL;
	return &c->hdr->bell;
}

void mp_consumer_stack_counts(const struct mp_consumer *c, uint64_t *ret_unwound,
			      uint64_t *ret_copied)
{
	*ret_unwound = c ? c->n_unwound : 0;
	*ret_copied = c ? c->n_copied : 0;
}

uint64_t mp_consumer_alloc_waits(const struct mp_consumer *c)
{
	return c && c->hdr ? LOAD(&c->hdr->alloc_waits, RELAXED) - c->alloc_waits_base : 0;
}

int mp_consumer_set_alloc_mode(struct mp_consumer *c, uint32_t mode, uint64_t sample_bytes)
{
	if (!c || !c->hdr || mode > MP_ALLOC_SAMPLED || (mode == MP_ALLOC_SAMPLED && !sample_bytes))
		return -EINVAL;
	if (mode == MP_ALLOC_OFF) {
		STORE(&c->hdr->alloc_mode, MP_ALLOC_OFF, RELEASE);
		c->alloc_on = false;
		return 0;
	}
	alloc_mode_on(c, mode, sample_bytes);
	return 0;
}

int mp_consumer_set_wrappers(struct mp_consumer *c, const uint64_t *lohi, uint32_t n,
			     uint32_t stack_bytes)
{
	if (!c || !c->hdr || n > MP_RING_WRAP_MAX || stack_bytes > MP_RING_STACK_MAX)
		return -EINVAL;
	/* off while the table changes: an allocation in between carries
	 * no stack, or one it does not need */
	STORE(&c->hdr->wrap_hi, 0, RELAXED);
	STORE(&c->hdr->wrap_lo, 0, RELEASE);
	if (!n)
		return 0;
	for (uint32_t i = 0; i < n; i++) {
		STORE(&c->hdr->wrap[i].lo, lohi[2 * i], RELAXED);
		STORE(&c->hdr->wrap[i].hi, lohi[2 * i + 1], RELAXED);
	}
	STORE(&c->hdr->wrap_count, n, RELAXED);
	STORE(&c->hdr->wrap_stack_bytes, stack_bytes, RELAXED);
	STORE(&c->hdr->wrap_lo, lohi[0], RELEASE);
	STORE(&c->hdr->wrap_hi, lohi[2 * n - 1], RELEASE);
	return 0;
}

int mp_consumer_set_alloc_stacks(struct mp_consumer *c, uint32_t bytes)
{
	if (!c || !c->hdr || bytes > MP_RING_STACK_MAX)
		return -EINVAL;
	STORE(&c->hdr->alloc_stack_bytes, bytes, RELAXED);
	return 0;
}

int mp_consumer_set_alloc_stack_depth(struct mp_consumer *c, uint32_t depth)
{
	if (!c || !c->hdr || depth > MP_FRAMES_MAX)
		return -EINVAL;
	c->stack_depth = depth;
	STORE(&c->hdr->alloc_stack_depth, depth, RELAXED);
	return 0;
}

pid_t mp_consumer_pid(const struct mp_consumer *c)
{
	return c ? c->pid : 0;
}

const char *mp_record_type_name(uint32_t type)
{
	switch (type) {
	case MP_REC_KERNEL_BEGIN:
		return "kernel_begin";
	case MP_REC_KERNEL_END:
		return "kernel_end";
	case MP_REC_INPUT_SHAPE:
		return "input_shape";
	case MP_REC_OUTPUT_SHAPE:
		return "output_shape";
	case MP_REC_PHASE:
		return "phase";
	case MP_REC_PHASE_END:
		return "phase_end";
	case MP_REC_TAG_BEGIN:
		return "tag_begin";
	case MP_REC_TAG_END:
		return "tag_end";
	case MP_REC_ALLOC:
		return "alloc";
	case MP_REC_FREE:
		return "free";
	case MP_REC_REALLOC:
		return "realloc";
	case MP_REC_POOL_ALLOC:
		return "pool_alloc";
	case MP_REC_POOL_FREE:
		return "pool_free";
	case MP_REC_POOL_RESET:
		return "pool_reset";
	case MP_REC_POOL_DECLARE:
		return "pool_declare";
	case MP_REC_STACK:
		return "stack";
	case MP_REC_FRAMES:
		return "frames";
	default:
		return "unknown";
	}
}

static int fail(struct mp_consumer *c, int err)
{
	c->err = err;
	if (err == -EBADMSG)
		c->corruption |= MP_CONSUMER_CORRUPT_RECORDS;
	return err;
}

/* Pool records: dims[0] kind, then ALLOC: ptr, size, caller; FREE: ptr,
 * caller; RESET: caller; DECLARE: nothing. */
static int decode_pool(struct mp_consumer *c, const struct mp_slot *copy, struct mp_record *r)
{
	static const uint8_t words[] = { [MP_REC_POOL_ALLOC - MP_REC_POOL_ALLOC] = 4,
					 [MP_REC_POOL_FREE - MP_REC_POOL_ALLOC] = 3,
					 [MP_REC_POOL_RESET - MP_REC_POOL_ALLOC] = 2,
					 [MP_REC_POOL_DECLARE - MP_REC_POOL_ALLOC] = 1 };
	const uint64_t *w = (const uint64_t *)copy->dims;

	if (copy->flags || copy->rank != words[copy->type - MP_REC_POOL_ALLOC] ||
	    w[0] > MP_POOL_KIND_DEVICE)
		return -EBADMSG;
	r->pool.kind = (uint32_t)w[0];
	switch (copy->type) {
	case MP_REC_POOL_ALLOC:
		r->pool.addr = w[1];
		r->pool.size = w[2];
		r->pool.caller = w[3];
		break;
	case MP_REC_POOL_FREE:
		r->pool.addr = w[1];
		r->pool.caller = w[2];
		break;
	case MP_REC_POOL_RESET:
		r->pool.caller = w[1];
		break;
	}
	r->name = name_get(c, copy->name_id);
	return r->name ? 0 : -EBADMSG;
}

/* Validates the copy of a slot of the ring of @t and decodes it into @r.
 * *@dirty says whether @r holds fields a heap record does not set (a heap
 * record into a clean @r only writes its own fields: the read's one
 * record, reused). */
static inline __attribute__((always_inline)) int decode(struct mp_consumer *c, struct tstate *t,
							const struct mp_slot *copy,
							struct mp_record *r, bool *dirty)
{
	bool heap = mp_record_is_heap(copy->type);

	if (*dirty || !heap)
		memset(r, 0, sizeof(*r));
	*dirty = !heap;
	r->type = copy->type;
	r->flags = copy->flags;
	r->tid = copy->tid;
	r->ts_ns = copy->ts_ns;
	r->seq = copy->tseq;
	if (heap) {
		/* fn: a builtin allocator function (enum mp_alloc_fn); a
		 * scaled sample is only an allocation. */
		if (copy->rank || copy->name_id >= MP_HEAP_FN_MAX ||
		    (copy->flags & ~MP_REC_HEAP_FLAGS) ||
		    (copy->flags && copy->type == MP_REC_FREE))
			return -EBADMSG;
		r->fn = copy->name_id;
		r->stack = NULL; /* a STACK record sets it after us */
		r->heap.addr = (uint64_t)copy->dims[0];
		r->heap.size = (uint64_t)copy->dims[1];
		r->heap.caller = (uint64_t)copy->dims[2];
		r->heap.old_addr = copy->type == MP_REC_REALLOC ? (uint64_t)copy->dims[3] : 0;
		return heap_ts(c, t, copy->clock, &r->ts_ns);
	}
	if (copy->flags & ~MP_REC_F_THREAD_EXIT)
		return -EBADMSG;
	switch (copy->type) {
	case MP_REC_KERNEL_BEGIN:
	case MP_REC_PHASE:
	case MP_REC_TAG_BEGIN:
		if (copy->flags || copy->rank)
			return -EBADMSG;
		r->name = name_get(c, copy->name_id);
		if (!r->name)
			return -EBADMSG;
		return 0;
	case MP_REC_INPUT_SHAPE:
	case MP_REC_OUTPUT_SHAPE:
		if (copy->flags || copy->rank > MP_MAX_RANK)
			return -EBADMSG;
		r->rank = copy->rank;
		memcpy(r->dims, copy->dims, copy->rank * sizeof(r->dims[0]));
		return 0;
	case MP_REC_KERNEL_END:
	case MP_REC_TAG_END:
		return copy->rank ? -EBADMSG : 0;
	case MP_REC_PHASE_END:
		return copy->flags || copy->rank || copy->name_id ? -EBADMSG : 0;
	case MP_REC_POOL_ALLOC:
	case MP_REC_POOL_FREE:
	case MP_REC_POOL_RESET:
	case MP_REC_POOL_DECLARE:
		return decode_pool(c, copy, r);
	default:
		return -EBADMSG;
	}
}

static inline __attribute__((always_inline)) bool tid_check(struct mp_consumer *c, struct tstate *t,
							    uint32_t tid)
{
	return likely(tid == t->tid) || mp_cons_tid_ok_(c, t, tid);
}

/* The one stack a record carries, with its descriptor: the largest the
 * ring may hold (a longer one is malformed). */
#define STACK_ARENA (sizeof(struct mp_rec_stack) + MP_RING_STACK_MAX)

/* The payload bytes of a STACK or FRAMES record in @copy (a FRAMES
 * record's n words; beyond the ring's reach when malformed), and whether
 * they are more than the consumer takes (a unit skipped whole). */
static uint64_t payload_len(const struct mp_consumer *c, const struct mp_slot *copy, bool *ret_over)
{
	uint64_t n = (uint64_t)copy->dims[0],
		 depth = c->stack_depth ? c->stack_depth : MP_FRAMES_MAX;

	if (copy->type == MP_REC_STACK) {
		*ret_over = (uint64_t)copy->dims[3] > MP_RING_STACK_MAX;
		return copy->flags ? UINT64_MAX : (uint64_t)copy->dims[3];
	}
	*ret_over = !n || n > depth;
	if ((copy->flags & ~MP_FRAMES_F_TRUNCATED) || n > UINT64_MAX / 8)
		return UINT64_MAX;
	return n * 8;
}

/*
 * A STACK or FRAMES record at position t->pos of ring @ring (its first
 * cache line in @copy), with its continuation slots and the heap record it
 * belongs to: taken all together into @r (the heap record, carrying the
 * stack), or not at all. Returns the slots taken, 0 when they are not all
 * there yet, -EBADMSG for a malformed one. *@bad: 0, or the unit is taken
 * to be skipped: 1 or 2, its heap record's stamp is outside the window
 * (heap_ts()); 3, the stack is longer than MP_RING_STACK_MAX, or the
 * frames are none or more than the depth asked for.
 */
static int take_stack(struct mp_consumer *c, uint32_t ring, struct tstate *t,
		      const struct mp_slot *copy, struct mp_record *r, bool *dirty, int *bad)
{
	uint64_t len, k, pos = t->pos;
	struct mp_rec_stack *st;
	struct mp_slot *s, heap;
	unsigned char *bytes;
	uint64_t seq;
	bool over;
	int ret;

	len = payload_len(c, copy, &over);
	/* a length whose unit could not fit the ring cannot be skipped */
	if (copy->rank || copy->name_id || len > (uint64_t)c->slot_count * 128)
		return -EBADMSG;
	k = (len + MP_STACK_SLOT_BYTES - 1) / MP_STACK_SLOT_BYTES;
	if (k + 2 > c->slot_count)
		return -EBADMSG;
	/* The STACK record is published last: every other slot is there. */
	s = slot_at(c, ring, pos + k + 1);
	seq = LOAD(&s->seq, ACQUIRE);
	if (seq != pos + k + 2)
		return (int64_t)(seq - (pos + k + 2)) > 0 ? -EBADMSG : 0;
	if (over) {
		*bad = 3;
		return (int)(k + 2);
	}
	copy_words(&heap, s, HEAP_WORDS_END / 8);
	if (heap.type == MP_REC_REALLOC)
		heap.dims[3] = (int64_t)LOAD(&s->dims[3], RELAXED);
	if (heap.type != MP_REC_ALLOC && heap.type != MP_REC_REALLOC)
		return -EBADMSG;
	if (!c->stk && !(c->stk = malloc(STACK_ARENA)))
		return -ENOMEM;
	st = (struct mp_rec_stack *)c->stk;
	bytes = (unsigned char *)(st + 1);
	for (uint64_t j = 0; j < k; j++) {
		uint64_t n = len - j * MP_STACK_SLOT_BYTES;

		s = slot_at(c, ring, pos + 1 + j);
		if (LOAD(&s->seq, ACQUIRE) != pos + 2 + j)
			return -EBADMSG;
		n = n < MP_STACK_SLOT_BYTES ? n : MP_STACK_SLOT_BYTES;
		/* whole words (the payload and the arena are 8-aligned) */
		copy_words(bytes + j * MP_STACK_SLOT_BYTES, (unsigned char *)s + sizeof(s->seq),
			   n / 8);
		copy_racy(bytes + j * MP_STACK_SLOT_BYTES + (n & ~7ull),
			  (unsigned char *)s + sizeof(s->seq) + (n & ~7ull), n & 7);
	}
	ret = decode(c, t, &heap, r, dirty);
	if (ret < 0)
		return ret;
	*bad = ret;
	if (copy->type == MP_REC_FRAMES)
		*st = (struct mp_rec_stack){ .frames = (const uint64_t *)bytes,
					     .n_frames = (uint32_t)(len / 8),
					     .truncated = copy->flags & MP_FRAMES_F_TRUNCATED };
	else
		*st = (struct mp_rec_stack){ .ip = (uint64_t)copy->dims[0],
					     .sp = (uint64_t)copy->dims[1],
					     .bp = (uint64_t)copy->dims[2],
					     .len = (uint32_t)len,
					     .bytes = bytes };
	r->stack = st;
	return (int)(k + 2);
}

/* Whether a heap record numbered @tseq precedes the attach snapshot of its
 * ring @t: written before the last marker the snapshot reflects, so under a
 * stack of its thread the profile never sees (the kernels that ended
 * before the snapshot are not in it). A heap record numbered as the
 * snapshot came after that marker, under the stack the snapshot took, and
 * is kept. Once a record is not before it, none after it is (tseq never
 * goes back along a ring; a hostile ring's records just pass). */
static bool heap_before_snapshot(struct tstate *t, uint32_t tseq)
{
	if ((int32_t)(tseq - t->snap_seq) < 0)
		return true;
	t->heap_pre_snap = false;
	return false;
}

/* A heap record (most of them) at slot @s of ring @t, published: what
 * decode() does, each field read once straight from the slot into @r. The
 * same returns as take(). */
static inline __attribute__((always_inline)) int take_heap(struct mp_consumer *c, struct tstate *t,
							   struct mp_slot *s, uint8_t type,
							   struct mp_record *r, bool *skipped,
							   bool *dirty)
{
	uint8_t flags = LOAD(&s->flags, RELAXED), rank = LOAD(&s->rank, RELAXED);
	uint8_t clock = LOAD(&s->clock, RELAXED);
	uint32_t fn = LOAD(&s->name_id, RELAXED);
	int e;

	t->pos++;
	if (*dirty)
		memset(r, 0, sizeof(*r));
	*dirty = false;
	r->type = type;
	r->flags = flags;
	r->tid = LOAD(&s->tid, RELAXED);
	r->ts_ns = LOAD(&s->ts_ns, RELAXED);
	r->seq = LOAD(&s->tseq, RELAXED);
	if (unlikely(t->heap_pre_snap) && heap_before_snapshot(t, r->seq)) {
		*skipped = true;
		return 0;
	}
	/* fn: a builtin allocator function (enum mp_alloc_fn); a scaled
	 * sample is only an allocation. */
	if (rank || fn >= MP_HEAP_FN_MAX || (flags & ~MP_REC_HEAP_FLAGS) ||
	    (flags && type == MP_REC_FREE)) {
		c->err_pending = -EBADMSG;
		return -EBADMSG;
	}
	if (unlikely(!c->heap_ok))
		return mp_cons_reject_(c, MP_CONSUMER_REJECT_MODE, skipped);
	if (!tid_check(c, t, r->tid))
		return mp_cons_reject_(c, MP_CONSUMER_REJECT_THREAD, skipped);
	r->fn = fn;
	r->stack = NULL;
	r->heap.addr = (uint64_t)LOAD(&s->dims[0], RELAXED);
	r->heap.size = (uint64_t)LOAD(&s->dims[1], RELAXED);
	r->heap.caller = (uint64_t)LOAD(&s->dims[2], RELAXED);
	r->heap.old_addr = type == MP_REC_REALLOC ? (uint64_t)LOAD(&s->dims[3], RELAXED) : 0;
	e = heap_ts(c, t, clock, &r->ts_ns);
	if (e < 0) {
		c->err_pending = e;
		return e;
	}
	if (unlikely(e))
		return mp_cons_ts_reject_(c, t, e, r->seq, skipped);
	return 1;
}

/* A STACK record at slot @s of ring @i (its first cache line in @copy),
 * published: with its continuation slots and its heap record, all of them
 * or none yet (take_stack()). The same returns as take(). */
static int take_stacked(struct mp_consumer *c, uint32_t i, struct tstate *t, struct mp_slot *s,
			struct mp_slot *copy, struct mp_record *r, bool *skipped, bool *dirty)
{
	int e, bad = 0;

	copy->dims[3] = (int64_t)LOAD(&s->dims[3], RELAXED);
	e = take_stack(c, i, t, copy, r, dirty, &bad);
	if (e <= 0) {
		if (e < 0)
			c->err_pending = e;
		return e;
	}
	t->pos += (uint64_t)e;
	if (bad == 3)
		return mp_cons_reject_(c, MP_CONSUMER_REJECT_STACK, skipped);
	if (unlikely(t->heap_pre_snap) && heap_before_snapshot(t, r->seq)) {
		*skipped = true;
		return 0;
	}
	if (!c->heap_ok)
		return mp_cons_reject_(c, MP_CONSUMER_REJECT_MODE, skipped);
	if (!tid_check(c, t, r->tid))
		return mp_cons_reject_(c, MP_CONSUMER_REJECT_THREAD, skipped);
	if (bad)
		return mp_cons_ts_reject_(c, t, bad, r->seq, skipped);
	if (r->stack->frames)
		c->n_unwound++;
	else
		c->n_copied++;
	return 1;
}

/* A marker, shape or pool record at slot @s of ring @t (its first cache
 * line in @copy), published. The same returns as take(). */
static inline __attribute__((always_inline)) int
take_marker(struct mp_consumer *c, struct tstate *t, struct mp_slot *s, struct mp_slot *copy,
	    struct mp_record *r, bool *skipped, bool *dirty)
{
	int e;

	/* dims (the second cache line) only for shapes and pool records;
	 * dims[3] is a realloc's old address */
	if (copy->type == MP_REC_INPUT_SHAPE || copy->type == MP_REC_OUTPUT_SHAPE ||
	    (copy->type >= MP_REC_POOL_ALLOC && copy->type <= MP_REC_POOL_DECLARE))
		copy_words(copy->dims, s->dims, sizeof(copy->dims) / 8);
	else if (copy->type == MP_REC_REALLOC)
		copy->dims[3] = (int64_t)LOAD(&s->dims[3], RELAXED);
	t->pos++;
	/* (Heap records went take_heap().) A marker, shape or pool record
	 * numbered up to the snapshot is reflected in it. */
	if (t->snap_valid && (int32_t)(copy->tseq - t->snap_seq) <= 0) {
		*skipped = true;
		return 0;
	}
	t->heap_pre_snap = false;
	e = decode(c, t, copy, r, dirty);
	if (e < 0) {
		c->err_pending = e;
		return e;
	}
	if (!tid_check(c, t, r->tid))
		return mp_cons_reject_(c, MP_CONSUMER_REJECT_THREAD, skipped);
	return 1;
}

/* The next record of ring @i, decoded into @r: 1 when taken, 0 when that
 * ring has nothing more published (or the record was already reflected in
 * the attach snapshot: *@skipped is then set), negative errno when it is
 * corrupted (stored in err_pending). */
static inline __attribute__((always_inline)) int
take(struct mp_consumer *c, uint32_t i, struct mp_record *r, bool *skipped, bool *dirty)
{
	struct tstate *t = &c->ts[i];
	struct mp_slot *s = t->slots + (t->pos & c->mask);
	uint64_t seq = LOAD(&s->seq, ACQUIRE);
	struct mp_slot copy;
	uint8_t type;

	if (seq != t->pos + 1) {
		/* Not published yet; a later lap cannot be there before we
		 * free this one. */
		if ((int64_t)(seq - (t->pos + 1)) > 0)
			c->err_pending = -EBADMSG;
		return 0;
	}
	type = LOAD(&s->type, RELAXED);
	if (likely(mp_record_is_heap(type)))
		return take_heap(c, t, s, type, r, skipped, dirty);
	/* the first cache line: every record's header, and a heap record
	 * whole but for a realloc's old address */
	copy_first_line(&copy, s);
	if (copy.type == MP_REC_STACK || copy.type == MP_REC_FRAMES)
		return take_stacked(c, i, t, s, &copy, r, skipped, dirty);
	return take_marker(c, t, s, &copy, r, skipped, dirty);
}

/* release: our copies are done before the producer may reuse the slots */
static void store_tail(struct mp_consumer *c, uint32_t i)
{
	if (c->ts[i].pos != LOAD(&thread_at(c, i)->tail, RELAXED))
		STORE(&thread_at(c, i)->tail, c->ts[i].pos, RELEASE);
}

/* mp_consumer_complete_ns() over every ring but @skip. */
static uint64_t complete_except(const struct mp_consumer *c, uint32_t skip)
{
	uint64_t min = UINT64_MAX;

	for (uint32_t i = 0; i < c->thread_count; i++)
		if (i != skip && c->ts[i].done_ns < min)
			min = c->ts[i].done_ns;
	return min;
}

/* A read told @now_ns finds records in ring @t: unless a mark is pending,
 * every record at or past a whole ring beyond the position now is written
 * after now_ns (the writer needs the slot a lap behind it freed, and we
 * free nothing before this read). */
static void lap_mark(const struct mp_consumer *c, struct tstate *t, uint64_t now_ns)
{
	if (t->lap_ns)
		return;
	t->lap_pos = t->pos + c->slot_count;
	t->lap_ns = now_ns;
}

/* After a read of ring @t that left records: past its lap mark, the ring
 * counts as read up to the mark's time (its stamps may say less: a hostile
 * writer flooding old stamps holds the bound back one lap's read at most). */
static void lap_passed(struct tstate *t)
{
	if (!t->lap_ns || (int64_t)(t->pos - t->lap_pos) < 0)
		return;
	if (t->lap_ns > t->done_ns)
		t->done_ns = t->lap_ns;
	t->lap_ns = 0;
}

/* A read told @now_ns stopped at a published record of ring @t it could
 * not take (a STACK record whose unit is not all there: libmemprof
 * publishes the STACK record last, so only a hostile writer does this).
 * Stuck at the same position for stall_ns, the ring counts as read up to
 * stall_ns before each read: it cannot hold everything back for ever. A
 * ring that moves, however slowly, or that the reads have not reached
 * yet, never counts as read past what was read of it. */
static void stuck_at(struct mp_consumer *c, struct tstate *t, uint64_t now_ns)
{
	if (!t->stuck_ns || t->stuck_pos != t->pos) {
		t->stuck_pos = t->pos;
		t->stuck_ns = now_ns;
		return;
	}
	if (now_ns - t->stuck_ns >= c->stall_ns)
		mp_cons_ring_stuck_(c, t);
	if (now_ns - t->stuck_ns >= c->stall_ns && now_ns - c->stall_ns > t->done_ns)
		t->done_ns = now_ns - c->stall_ns;
}

/* Whether the slot at ring @i's next position is published; a lap ahead
 * is corruption (stored in err_pending, reported after the records before
 * it). */
static inline bool ring_has_next(struct mp_consumer *c, uint32_t i)
{
	uint64_t pos = c->ts[i].pos, seq = LOAD(&c->ts[i].slots[pos & c->mask].seq, ACQUIRE);

	if (likely(seq == pos + 1))
		return true;
	if ((int64_t)(seq - (pos + 1)) > 0)
		c->err_pending = -EBADMSG;
	return false;
}

/* The attach snapshot's records (MP_CONSUMER_RING_SYNTH), before any
 * ring's: how many, up to @max, or the negative return of @cb. */
static int hand_synth(struct mp_consumer *c, size_t max, mp_consumer_ring_cb cb, void *ctx)
{
	int n = 0;

	while (c->next_synth < c->nsynth && (size_t)n < max) {
		int r = cb(ctx, MP_CONSUMER_RING_SYNTH, &c->synth[c->next_synth++]);

		if (r < 0)
			return r;
		n++;
	}
	return n;
}

/*
 * First every thread slot, with one load each (most are idle): the empty
 * ones count as read up to @now_ns before any record is handed over, so
 * that the caller may release records while it reads
 * (mp_consumer_complete_ns() is then the ring being read's progress). The
 * rings with records go to c->active; returns how many. A ring a lap ahead
 * ends the look (its error, in err_pending, is reported after the records
 * of the rings before it). *@scanned: the slots looked at.
 */
static uint32_t look(struct mp_consumer *c, uint64_t now_ns, size_t *scanned)
{
	uint32_t nact = 0;

	for (uint32_t k = 0; k < c->thread_count && !c->err_pending; k++) {
		uint32_t i = (c->scan_start + k) % c->thread_count;
		struct tstate *t = &c->ts[i];

		(*scanned)++;
		if (ring_has_next(c, i)) {
			c->active[nact++] = i;
			lap_mark(c, t, now_ns);
		} else if (!c->err_pending) {
			t->done_ns = now_ns;
			t->lap_ns = 0;
			t->stuck_ns = 0;
		}
	}
	return nact;
}

void mp_consumer_set_prefetch(struct mp_consumer *c, mp_consumer_pf pf, void *ctx)
{
	c->pf = pf;
	c->pf_ctx = ctx;
}

/* The heap record MP_CONSUMER_PF_AHEAD slots past ring @t's position, if
 * published, shown to the prefetch hook (its fields are read once each,
 * and only as hints). */
static inline __attribute__((always_inline)) void peek_ahead(const struct mp_consumer *c,
							     const struct tstate *t)
{
	const struct mp_slot *s = t->slots + ((t->pos + MP_CONSUMER_PF_AHEAD) & c->mask);
	uint8_t type;

	if (LOAD(&s->seq, ACQUIRE) != t->pos + MP_CONSUMER_PF_AHEAD + 1)
		return;
	type = LOAD(&s->type, RELAXED);
	if (!mp_record_is_heap(type))
		return;
	c->pf(c->pf_ctx, (uint64_t)LOAD(&s->dims[0], RELAXED),
	      type == MP_REC_REALLOC ? (uint64_t)LOAD(&s->dims[3], RELAXED) : 0);
}

/*
 * Hands ring @i's records to @cb in the ring's order, straight from the
 * slots into @rec (one record, reused), until the ring has none ready, the
 * read's limits (@max records, READ_SCAN_BUDGET slots) or a corrupt one.
 * Returns 1 when it stopped at a published record it could not take, else
 * 0, or the negative return of @cb.
 */
static inline __attribute__((always_inline)) int read_ring(struct mp_consumer *c, uint32_t i,
							   size_t max, size_t *n, size_t *scanned,
							   struct mp_record *rec, bool *dirty,
							   mp_consumer_ring_cb cb, void *ctx)
{
	struct tstate *t = &c->ts[i];
	bool stopped = false;
	int r;

	/* the other rings do not move while this one is read */
	c->others_ns = complete_except(c, i);
	c->reading = i + 1;
	while (*n < max && *scanned < READ_SCAN_BUDGET) {
		bool skipped = false;

		r = take(c, i, rec, &skipped, dirty);
		(*scanned)++;
		if (skipped)
			continue;
		if (r <= 0) {
			stopped = r == 0;
			break;
		}
		/* the ring's records still to come are stamped no earlier
		 * (one thread's clock, TSC stamps clamped) */
		if (rec->ts_ns > t->done_ns)
			t->done_ns = rec->ts_ns;
		if (c->pf)
			peek_ahead(c, t);
		r = cb(ctx, i, rec);
		(*n)++;
		if (r < 0) {
			c->reading = 0;
			store_tail(c, i);
			return r;
		}
		/* Give the space back as we go: a producer waiting for room
		 * (precise mode) or dropping goes on while we read the
		 * rest. */
		if (!(*n % TAIL_EVERY))
			store_tail(c, i);
	}
	c->reading = 0;
	store_tail(c, i);
	return stopped;
}

/* After a read of ring @i told @now_ns (@stopped: at a published record it
 * could not take): false when it caught up, true when it has records
 * left. */
static bool ring_left(struct mp_consumer *c, uint32_t i, bool stopped, uint64_t now_ns)
{
	struct tstate *t = &c->ts[i];

	/* caught up: what comes next is published after now_ns */
	if (!ring_has_next(c, i)) {
		t->done_ns = now_ns;
		t->lap_ns = t->stuck_ns = 0;
		return false;
	}
	lap_passed(t);
	if (stopped)
		stuck_at(c, t, now_ns);
	else
		t->stuck_ns = 0;
	return true;
}

int mp_consumer_read_rings_at(struct mp_consumer *c, size_t max, uint64_t now_ns,
			      mp_consumer_ring_cb cb, void *ctx)
{
	struct mp_record rec;
	bool dirty = true;
	size_t n = 0, scanned = 0;
	uint32_t nact, cut = UINT32_MAX;
	int r, look_err;

	if (!c || !cb)
		return -EINVAL;
	if (c->err)
		return c->err;
	tsc_tick(c);
	if (now_ns - c->heads_ns >= c->stall_ns / 4)
		mp_cons_check_heads_(c, now_ns);
	r = hand_synth(c, max, cb, ctx);
	if (r < 0)
		return r;
	n = (size_t)r;
	nact = look(c, now_ns, &scanned);
	look_err = c->err_pending;
	c->err_pending = 0;
	for (uint32_t k = 0; k < nact && n < max && scanned < READ_SCAN_BUDGET && !c->err_pending;
	     k++) {
		uint32_t i = c->active[k];

		r = read_ring(c, i, max, &n, &scanned, &rec, &dirty, cb, ctx);
		if (r < 0)
			return r;
		/* the next read starts with the ring after the one the
		 * limit cut, so that every ring with records is served in
		 * turn (none left unread while others keep the budget) */
		cut = i;
		if (!c->err_pending && !ring_left(c, i, r == 1, now_ns))
			cut = UINT32_MAX;
	}
	if (!c->err_pending)
		c->err_pending = look_err;
	c->scan_start = cut != UINT32_MAX ? (cut + 1) % c->thread_count :
					    (c->scan_start + 1) % c->thread_count;
	if (!n && c->err_pending)
		return fail(c, c->err_pending);
	return n > INT32_MAX ? INT32_MAX : (int)n;
}

uint64_t mp_consumer_complete_others_ns(const struct mp_consumer *c)
{
	if (c && c->reading)
		return c->others_ns;
	return mp_consumer_complete_ns(c);
}

uint64_t mp_consumer_complete_ns(const struct mp_consumer *c)
{
	uint64_t min = UINT64_MAX;

	if (!c)
		return UINT64_MAX;
	if (!c->ts)
		return 0;
	for (uint32_t i = 0; i < c->thread_count; i++)
		if (c->ts[i].done_ns < min)
			min = c->ts[i].done_ns;
	return min;
}
