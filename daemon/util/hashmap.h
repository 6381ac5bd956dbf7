/* SPDX-License-Identifier: MIT */
/*
 * The daemon's one hash function family and its one hash map.
 *
 * The map is an index: it maps a 64-bit hash to the 32-bit id of an entry
 * that the caller keeps in its own array (string tables, stack tables,
 * site tables). Keeping the entries outside lets every table store what it
 * needs, contiguously and in insertion order, while the map stays 8 bytes a
 * slot. A slot holds the id and 32 bits of the hash, so the map grows
 * without asking the caller to hash again, and a lookup calls the caller's
 * equality function only when those 32 bits match.
 *
 * Open addressing with linear probing and backward-shift deletion (no
 * tombstones, so a table that churns never degrades). Lookups never
 * allocate. Bounded: past the maximum the caller sets, inserts fail with
 * -ENOSPC, so a hostile target cannot grow a table without limit.
 */
#ifndef MP_HASHMAP_H
#define MP_HASHMAP_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The 64-bit finalizer of MurmurHash3 (fmix64): every input bit flips
 * about half the output bits, so the low bits can index a table. */
static inline uint64_t mp_hash_u64(uint64_t v)
{
	v ^= v >> 33;
	v *= 0xff51afd7ed558ccdull;
	v ^= v >> 33;
	v *= 0xc4ceb9fe1a85ec53ull;
	v ^= v >> 33;
	return v;
}

/* Mixes @v into the running hash @h: hashes a tuple field by field. The
 * result depends on the order of the fields. */
static inline uint64_t mp_hash_combine(uint64_t h, uint64_t v)
{
	return mp_hash_u64(h ^ (v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2)));
}

/* Hashes @len bytes at @p, starting from @seed. */
uint64_t mp_hash_bytes(const void *p, size_t len, uint64_t seed);
/* Hashes the NUL-terminated string @s (without the NUL). */
uint64_t mp_hash_str(const char *s);

/* Largest number of entries a map can hold, whatever bound the caller sets. */
#define MP_HASHMAP_MAX_ENTRIES (1u << 30)

struct mp_hashmap_slot {
	uint32_t id1; /* the entry's id + 1; 0 marks an empty slot */
	uint32_t h32; /* 32 bits of the entry's hash */
};

struct mp_hashmap {
	struct mp_hashmap_slot *slots; /* NULL until the first insert */
	uint32_t mask; /* number of slots - 1 */
	uint32_t n;
	uint32_t max; /* 0: MP_HASHMAP_MAX_ENTRIES */
};

/* Whether entry @id of the caller equals @key. */
typedef bool (*mp_hashmap_eq_fn)(const void *ctx, uint32_t id, const void *key);

/* An empty map that will hold at most @max_entries entries (0 or more than
 * MP_HASHMAP_MAX_ENTRIES: MP_HASHMAP_MAX_ENTRIES). Allocates nothing. A
 * zeroed struct mp_hashmap is the same as one initialised with 0. */
void mp_hashmap_init(struct mp_hashmap *m, uint32_t max_entries);
/* Frees the slots; the map is then empty and may be used again. NULL is a
 * no-op. */
void mp_hashmap_free(struct mp_hashmap *m);
/* Empties the map and keeps its slots for reuse. */
void mp_hashmap_reset(struct mp_hashmap *m);

static inline uint32_t mp_hashmap_count(const struct mp_hashmap *m)
{
	return m->n;
}

/* Makes room for @n entries in all without growing again. 0, -ENOSPC past
 * the bound, or -ENOMEM (the map is unchanged). */
int mp_hashmap_reserve(struct mp_hashmap *m, uint32_t n);

/* The 32 bits of @hash a slot keeps, from both halves so that a caller's
 * hash with weak high or low bits still spreads. */
static inline uint32_t mp_hashmap_fold(uint64_t hash)
{
	return (uint32_t)(hash ^ hash >> 32);
}

/* Fetches the slot where a lookup of @hash begins into the cache, ahead
 * of the lookup. */
static inline void mp_hashmap_prefetch(const struct mp_hashmap *m, uint64_t hash)
{
	if (m->slots)
		__builtin_prefetch(&m->slots[mp_hashmap_fold(hash) & m->mask]);
}

/* The id of the entry with @hash for which @eq(@ctx, id, @key) holds, in
 * *@ret_id. 0 or -ENOENT (*@ret_id untouched). Never allocates. Inline so
 * that a static @eq inlines into the probe loop: stacks are looked up on
 * the event path. */
static inline int mp_hashmap_find(const struct mp_hashmap *m, uint64_t hash, mp_hashmap_eq_fn eq,
				  const void *ctx, const void *key, uint32_t *ret_id)
{
	uint32_t h32 = mp_hashmap_fold(hash), j;

	if (!m->slots)
		return -ENOENT;
	for (j = h32 & m->mask; m->slots[j].id1; j = (j + 1) & m->mask) {
		const struct mp_hashmap_slot *s = &m->slots[j];

		if (s->h32 == h32 && eq(ctx, s->id1 - 1, key)) {
			*ret_id = s->id1 - 1;
			return 0;
		}
	}
	return -ENOENT;
}

/* Adds @id (< MP_HASHMAP_MAX_ENTRIES) under @hash. The caller has made sure
 * no equal entry is in the map (duplicates are kept, and a find returns one
 * of them). 0, -EINVAL for an id out of range, -ENOSPC past the bound, or
 * -ENOMEM (the map is unchanged). */
int mp_hashmap_insert(struct mp_hashmap *m, uint64_t hash, uint32_t id);

/* The intern step: the id of the entry equal to @key in *@ret_id and 0,
 * or, when there is none, adds @new_id under @hash, sets *@ret_id to
 * @new_id and returns 1. Negative errno as mp_hashmap_insert. The caller
 * stores the new entry at @new_id before its next lookup. */
static inline int mp_hashmap_intern(struct mp_hashmap *m, uint64_t hash, mp_hashmap_eq_fn eq,
				    const void *ctx, const void *key, uint32_t new_id,
				    uint32_t *ret_id)
{
	int r = mp_hashmap_find(m, hash, eq, ctx, key, ret_id);

	if (r == 0)
		return 0;
	r = mp_hashmap_insert(m, hash, new_id);
	if (r < 0)
		return r;
	*ret_id = new_id;
	return 1;
}

/* Removes @id, added under @hash. 0 or -ENOENT. Never allocates. */
int mp_hashmap_remove(struct mp_hashmap *m, uint64_t hash, uint32_t id);

#endif /* MP_HASHMAP_H */
