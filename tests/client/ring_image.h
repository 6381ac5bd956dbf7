/* SPDX-License-Identifier: MIT */
/* Builds ring images by hand (corruption tests and the fuzz target). */
#ifndef RING_IMAGE_H
#define RING_IMAGE_H

#include <stdlib.h>
#include <string.h>

#include "ring_abi.h"

struct img {
	unsigned char *mem;
	size_t len;
	struct mp_ring_hdr *h;
	struct mp_slot *slots;
	struct mp_thread *thr;
	mp_strent *ent;
	char *blob;
	uint32_t nslots;
};

static inline size_t img_align(size_t v, size_t a)
{
	return (v + a - 1) & ~(a - 1);
}

/* A valid, empty ring with the given sizes. */
static inline void img_init(struct img *m, uint32_t slots, uint32_t threads, uint32_t strs,
			    uint32_t blob)
{
	struct mp_ring_layout l = mp_ring_layout_of(slots, threads, strs, blob);

	m->nslots = slots;
	m->len = l.end;
	m->mem = aligned_alloc(128, img_align(m->len, 128));
	memset(m->mem, 0, m->len);
	m->h = (struct mp_ring_hdr *)m->mem;
	m->slots = (struct mp_slot *)(m->mem + l.ring_off);
	m->thr = (struct mp_thread *)(m->mem + l.threads_off);
	m->ent = (mp_strent *)(m->mem + l.strent_off);
	m->blob = (char *)m->mem + l.blob_off;
	*m->h = (struct mp_ring_hdr){
		.magic = MP_RING_MAGIC,
		.abi_version = MP_RING_ABI_VERSION,
		.hdr_size = sizeof(struct mp_ring_hdr),
		.total_size = m->len,
		.creator_pid = 4242,
		.slot_size = sizeof(struct mp_slot),
		.slot_count = slots,
		.thread_size = sizeof(struct mp_thread),
		.thread_count = threads,
		.str_max = strs,
		.blob_size = blob,
		.ring_off = l.ring_off,
		.threads_off = l.threads_off,
		.strent_off = l.strent_off,
		.blob_off = l.blob_off,
	};
}

/* Sets string @id to @s at blob offset @off. */
static inline void img_str(struct img *m, uint32_t id, uint32_t off, const char *s)
{
	size_t n = strlen(s);

	memcpy(m->blob + off, s, n + 1);
	m->ent[id] = ((uint64_t)off << 32) | (n + 1);
}

/* Publishes a record at position @pos of thread slot @ring's ring. */
static inline struct mp_slot *img_put(struct img *m, uint64_t pos, uint8_t type, uint32_t tid,
				      uint32_t tseq, uint32_t ring, uint32_t name_id)
{
	uint64_t mask = m->nslots - 1; /* not the header's: it may be scribbled on */
	struct mp_slot *s = &m->slots[(size_t)ring * m->nslots + (pos & mask)];

	memset(s, 0, sizeof(*s));
	s->seq = pos + 1;
	s->type = type;
	s->tid = tid;
	s->ts_ns = 1000 + pos;
	s->tseq = tseq;
	s->name_id = name_id;
	return s;
}

#endif
