// SPDX-License-Identifier: MIT
#include "hub.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <errno.h>
#include <pthread.h>
#include <string.h>

#include "log.h"
#include "memprof_hub.skel.h"
#include "memprof_probe.h"
#include "util.h"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct memprof_hub_bpf *hub;
static size_t n_targets, n_rss;
static uint64_t used[MP_HUB_SLOTS / 64];
/* Slots whose target has an rss_stat program (--rss-exact, rss mode). */
static uint64_t rss_used[MP_HUB_SLOTS / 64];

static void hub_unload(void)
{
	memprof_hub_bpf__destroy(hub);
	hub = NULL;
	n_rss = 0;
}

static int hub_load(const struct mp_hub_load_opts *lo)
{
	LIBBPF_OPTS(bpf_object_open_opts, oo, .btf_custom_path = lo->btf_custom_path);
	struct bpf_program *progs[3];
	int r;

	hub = memprof_hub_bpf__open_opts(&oo);
	if (!hub)
		return -errno;
	hub->rodata->pidns_dev = lo->pidns_dev;
	hub->rodata->pidns_ino = lo->pidns_ino;
	bpf_program__set_autoload(hub->progs.mp_hub_rss_stat, lo->rss_stat);
	r = memprof_hub_bpf__load(hub);
	if (r < 0)
		goto fail;
	progs[0] = hub->progs.mp_hub_sys_enter;
	progs[1] = hub->progs.mp_hub_sys_exit;
	progs[2] = hub->progs.mp_hub_exec;
	/* rss_stat is attached only while a target has a program for it
	 * (rss_stat_want()): it fires on every page fault of the machine. */
	for (size_t i = 0; i < 3; i++) {
		struct bpf_link **l[] = { &hub->links.mp_hub_sys_enter, &hub->links.mp_hub_sys_exit,
					  &hub->links.mp_hub_exec };

		*l[i] = bpf_program__attach(progs[i]);
		if (!*l[i]) {
			r = -errno;
			goto fail;
		}
	}
	return 0;
fail:
	hub_unload();
	return r;
}

/*
 * The rss_stat link, attached with the first target that has an rss_stat
 * program and detached with the last: a precise or sampled target (no
 * --rss-exact) does not make every counter change of the machine (each
 * page fault of every process) run the hub's program for nothing. The
 * target's program is in its slot before the link exists, so none of its
 * changes after its registration is lost.
 */
static int rss_stat_want(uint32_t slot)
{
	if (bpf_program__fd(hub->progs.mp_hub_rss_stat) < 0)
		return -EOPNOTSUPP; /* a kernel without the tracepoint */
	if (!n_rss) {
		hub->links.mp_hub_rss_stat = bpf_program__attach(hub->progs.mp_hub_rss_stat);
		if (!hub->links.mp_hub_rss_stat) {
			int r = -errno;

			hub->links.mp_hub_rss_stat = NULL;
			return r;
		}
	}
	n_rss++;
	rss_used[slot / 64] |= 1ull << (slot % 64);
	return 0;
}

static void rss_stat_drop(uint32_t slot)
{
	if (!(rss_used[slot / 64] & (1ull << (slot % 64))))
		return;
	rss_used[slot / 64] &= ~(1ull << (slot % 64));
	if (--n_rss == 0) {
		bpf_link__destroy(hub->links.mp_hub_rss_stat);
		hub->links.mp_hub_rss_stat = NULL;
	}
}

static int prog_arrays(struct bpf_map *ret[4])
{
	ret[0] = hub->maps.sys_enter_progs;
	ret[1] = hub->maps.sys_exit_progs;
	ret[2] = hub->maps.exec_progs;
	ret[3] = hub->maps.rss_stat_progs;
	return 4;
}

/* Forget the target's mm: a later target in the slot must not get its
 * page-counter changes (its own program would drop them anyway). A target
 * has one mm per image it ran. */
static void sweep_mm(uint32_t slot)
{
	int fd = bpf_map__fd(hub->maps.mm_slots);
	uint64_t key, next, gone[16];
	size_t n = 0;
	uint32_t v;
	bool first = true;

	for (size_t i = 0; i < MP_HUB_SLOTS && n < ARRAY_SIZE(gone); i++) {
		if (bpf_map_get_next_key(fd, first ? NULL : &key, &next) < 0)
			break;
		first = false;
		key = next;
		if (bpf_map_lookup_elem(fd, &key, &v) == 0 && v == slot)
			gone[n++] = key;
	}
	for (size_t i = 0; i < n; i++)
		bpf_map_delete_elem(fd, &gone[i]);
}

static void unregister(uint32_t slot)
{
	struct bpf_map *arrays[4];

	for (int i = 0; i < prog_arrays(arrays); i++)
		bpf_map_delete_elem(bpf_map__fd(arrays[i]), &slot);
	rss_stat_drop(slot);
	sweep_mm(slot);
	used[slot / 64] &= ~(1ull << (slot % 64));
}

int mp_hub_add(const struct mp_hub_load_opts *lo, pid_t pid, const struct mp_hub_progs *progs,
	       uint32_t *ret_slot)
{
	const int fds[4] = { progs->sys_enter, progs->sys_exit, progs->exec, progs->rss_stat };
	struct bpf_map *arrays[4];
	uint32_t key = (uint32_t)pid, slot = MP_HUB_SLOTS;
	int r = 0;

	pthread_mutex_lock(&lock);
	if (!hub)
		r = hub_load(lo);
	if (r < 0) {
		log_error_errno(r, "pid %d: loading the shared tracepoint programs: %m", (int)pid);
		goto out;
	}
	for (uint32_t i = 0; i < MP_HUB_SLOTS; i++)
		if (!(used[i / 64] & (1ull << (i % 64)))) {
			slot = i;
			break;
		}
	if (slot == MP_HUB_SLOTS) {
		r = log_error_errno(-ENOSPC, "pid %d: %d targets traced already", (int)pid,
				    MP_HUB_SLOTS);
		goto out;
	}
	used[slot / 64] |= 1ull << (slot % 64);
	/* The programs first: the slot goes live with the pid. */
	for (int i = 0; i < prog_arrays(arrays) && r == 0; i++)
		if (fds[i] >= 0 &&
		    bpf_map_update_elem(bpf_map__fd(arrays[i]), &slot, &fds[i], BPF_ANY) < 0)
			r = log_error_errno(-errno,
					    "pid %d: registering its tracepoint programs: %m",
					    (int)pid);
	if (r == 0 && fds[3] >= 0 && (r = rss_stat_want(slot)) < 0)
		log_error_errno(r, "pid %d: attaching the rss_stat tracepoint: %m", (int)pid);
	if (r == 0 &&
	    bpf_map_update_elem(bpf_map__fd(hub->maps.slots), &key, &slot, BPF_NOEXIST) < 0)
		r = errno == EEXIST ?
			    log_error_errno(-EBUSY, "pid %d is traced already", (int)pid) :
			    log_error_errno(-errno, "pid %d: registering it: %m", (int)pid);
	if (r < 0) {
		unregister(slot);
		goto out;
	}
	n_targets++;
	*ret_slot = slot;
out:
	if (!n_targets && hub)
		hub_unload();
	pthread_mutex_unlock(&lock);
	return r;
}

int mp_hub_preload(const struct mp_hub_load_opts *lo)
{
	int r = 0;

	pthread_mutex_lock(&lock);
	if (!hub)
		r = hub_load(lo);
	pthread_mutex_unlock(&lock);
	return r;
}

void mp_hub_unload_unused(void)
{
	pthread_mutex_lock(&lock);
	if (!n_targets && hub)
		hub_unload();
	pthread_mutex_unlock(&lock);
}

void mp_hub_remove(pid_t pid, uint32_t slot)
{
	uint32_t key = (uint32_t)pid, v;

	pthread_mutex_lock(&lock);
	if (hub && slot < MP_HUB_SLOTS &&
	    bpf_map_lookup_elem(bpf_map__fd(hub->maps.slots), &key, &v) == 0 && v == slot) {
		bpf_map_delete_elem(bpf_map__fd(hub->maps.slots), &key);
		unregister(slot);
		if (--n_targets == 0)
			hub_unload();
	}
	pthread_mutex_unlock(&lock);
}
