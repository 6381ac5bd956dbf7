// SPDX-License-Identifier: MIT
/*
 * The objects whose allocator calls bypass what is traced (gotcheck.h):
 * the interposer on the in-process path, the probed functions on the eBPF
 * path (libmemprof's, where it is preloaded). Found while the process lives, a few objects at a time so
 * that the thread draining the rings is never held long. An object found
 * bypassing is named only if it still does at a look at least
 * UNSEEN_CONFIRM_NS later: a deep-bound library is patched just after its
 * dlopen returns, and a look in between must not name it.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gotcheck.h"
#include "log.h"
#include "tracer.h"
#include "util.h"

#include "session_impl.h"

#define UNSEEN_EVERY_NS (250 * 1000 * 1000ull) /* between looks at new objects */
#define UNSEEN_SOON_NS (20 * 1000 * 1000ull) /* the next, with objects left */
#define UNSEEN_STEP_NS (2 * 1000 * 1000ull) /* one look's budget */
#define UNSEEN_CONFIRM_NS (10 * 1000 * 1000ull)
#define UNSEEN_OBJECTS 4096 /* objects remembered as looked at */

struct seen_obj {
	uint64_t start, inode;
	uint64_t suspect_ns; /* found bypassing then (0: not) */
	bool done;
};

struct mp_unseen {
	uint64_t next_ns;
	/* every object looked at, none left to confirm, none loaded since:
	 * no look until the loader says it mapped one (mp_sess_unseen_changed) */
	bool clean;
	/* The maps the looks go through, read again only once the loader
	 * mapped an object since (maps_stale) and for the final look: a
	 * process that maps 400 libraries (import torch) took ~1.7 ms a read
	 * of its maps, and a read per look, 163 of them. */
	struct mp_procmaps *maps;
	bool maps_stale;
	struct seen_obj objs[UNSEEN_OBJECTS];
	uint32_t n;
	uint64_t count;
	uint32_t n_names;
	char names[MP_PROFILE_MAX_UNSEEN][MP_PROFILE_UNSEEN_LEN];
};

static const char *base_name(const char *p)
{
	const char *s = strrchr(p, '/');

	return s ? s + 1 : p;
}

static struct seen_obj *obj_of(struct mp_unseen *u, const struct mp_mapping *m)
{
	for (uint32_t i = 0; i < u->n; i++)
		if (u->objs[i].start == m->start && u->objs[i].inode == m->inode)
			return &u->objs[i];
	if (u->n == UNSEEN_OBJECTS)
		return NULL;
	u->objs[u->n] = (struct seen_obj){ .start = m->start, .inode = m->inode };
	return &u->objs[u->n++];
}

/* Whether @m is of an object whose functions are the traced ones. */
static bool ours(void *ctx, const struct mp_mapping *m)
{
	const struct session *s = ctx;
	const struct mp_probe_info *pi;
	size_t n;

	if (s->path == MP_PATH_INPROCESS)
		return !strncmp(base_name(m->path), "libmemprof", 10);
	n = mp_tracer_probes(s->tracer, &pi);
	for (size_t i = 0; i < n; i++)
		if (pi[i].path && !strcmp(pi[i].path, m->path))
			return true;
	return false;
}

/* One object: looked at now, named at its second sighting. */
static void look_at(struct session *s, const struct mp_gotcheck *g, const struct mp_mapping *m,
		    struct seen_obj *o, uint64_t now, bool final)
{
	struct mp_unseen *u = s->unseen;
	char what[MP_PROFILE_UNSEEN_LEN];
	int r;

	if (o->suspect_ns && now - o->suspect_ns < UNSEEN_CONFIRM_NS) {
		if (!final)
			return;
		usleep((useconds_t)((UNSEEN_CONFIRM_NS - (now - o->suspect_ns)) / 1000));
	}
	r = mp_gotcheck(g, m, what, sizeof(what));
	if (r != 1) {
		o->done = true;
		return;
	}
	if (!o->suspect_ns) {
		o->suspect_ns = now ? now : 1;
		return;
	}
	o->done = true;
	u->count++;
	log_debug("pid %d: %s calls the allocator past the interposer: %s", (int)s->o->pid, m->path,
		  what);
	/* cut to the room a name has */
	if (u->n_names < MP_PROFILE_MAX_UNSEEN &&
	    snprintf(u->names[u->n_names++], MP_PROFILE_UNSEEN_LEN, "%s: %s", m->path, what) < 0)
		u->names[u->n_names - 1][0] = '\0';
}

void mp_sess_unseen_step(struct session *s, bool final)
{
	uint64_t now = mp_now_ns(), t0;
	struct mp_procmaps *maps;
	struct mp_unseen *u;
	unsigned int looked = 0;
	bool left = false;
	char path[64];
	int memfd;

	struct mp_gotcheck g = { .pid = s->o->pid, .ours = ours, .ctx = s };
	const struct mp_probe_info *pi;

	/* the in-process path once libmemprof runs; the eBPF one with probes */
	if (s->exited ||
	    (s->path == MP_PATH_INPROCESS ? !s->ring :
					    !s->tracer || !mp_tracer_probes(s->tracer, &pi)))
		return;
	if (!s->unseen && !(s->unseen = calloc(1, sizeof(*s->unseen))))
		return;
	u = s->unseen;
	if (!final && (u->clean || now < u->next_ns))
		return;
	if (!u->maps || u->maps_stale || final) {
		if (mp_procmaps_read(s->o->pid, &maps) < 0)
			return;
		mp_procmaps_free(u->maps);
		u->maps = maps;
		u->maps_stale = false;
	}
	maps = u->maps;
	/* the budget is the looks' (at least one a step: a read of the maps
	 * alone can take longer than the budget) */
	t0 = mp_now_ns();
	snprintf(path, sizeof(path), "/proc/%d/mem", (int)s->o->pid);
	memfd = open(path, O_RDONLY | O_CLOEXEC);
	g.memfd = memfd;
	g.maps = maps;
	for (size_t i = 0; memfd >= 0 && i < maps->n; i++) {
		const struct mp_mapping *m = &maps->maps[i];
		struct seen_obj *o;

		/* one executable mapping per object; not a traced one */
		if (!(m->perms & MP_MAP_X) || m->path[0] != '/' || ours(s, m) ||
		    !(o = obj_of(s->unseen, m)) || o->done)
			continue;
		if (!final && looked && mp_now_ns() - t0 > UNSEEN_STEP_NS) {
			left = true;
			break;
		}
		look_at(s, &g, m, o, mp_now_ns(), final);
		looked++;
		left |= !o->done;
	}
	if (memfd >= 0)
		close(memfd);
	u->next_ns = mp_now_ns() + (left ? UNSEEN_SOON_NS : UNSEEN_EVERY_NS);
	/* without /proc/PID/mem (gone, or not ours to read) the next look
	 * waits for the next object loaded, not the next tick */
	u->clean = !left;
}

void mp_sess_unseen_changed(struct session *s)
{
	if (s->unseen) {
		s->unseen->clean = false;
		s->unseen->maps_stale = true;
	}
}

bool mp_sess_unseen_pending(const struct session *s)
{
	return s->unseen && !s->unseen->clean && !s->exited;
}

void mp_sess_unseen_fill(const struct session *s, struct mp_profile *p)
{
	const struct mp_unseen *u = s->unseen;

	if (!u)
		return;
	p->unseen_objects = u->count;
	p->n_unseen_names = u->n_names;
	memcpy(p->unseen_names, u->names, sizeof(u->names));
}

void mp_sess_unseen_free(struct mp_unseen *u)
{
	if (u)
		mp_procmaps_free(u->maps);
	free(u);
}
