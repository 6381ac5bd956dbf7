// SPDX-License-Identifier: MIT
/* daemon/util/hashmap: the hash functions, and the index map checked
 * against a plain array under forced collisions, wrap-around, removal in
 * the middle of a probe chain, growth, bounds and random churn. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "hashmap.h"

/* The caller's side of an intern table: keys stored by id. */
struct keys {
	uint64_t k[20000];
	unsigned eq_calls;
};

static bool eq_key(const void *ctx, uint32_t id, const void *key)
{
	struct keys *t = (struct keys *)ctx;

	t->eq_calls++;
	return t->k[id] == *(const uint64_t *)key;
}

static uint64_t h_full(uint64_t k)
{
	return mp_hash_u64(k);
}

static uint64_t h_const(uint64_t k)
{
	(void)k;
	return 42;
}

/* Folds to the last slot of the smallest table: chains wrap to slot 0. */
static uint64_t h_last(uint64_t k)
{
	(void)k;
	return 15;
}

/* Eight hashes only: long clusters that overlap each other. */
static uint64_t h_weak(uint64_t k)
{
	return k & 7;
}

static int find(struct mp_hashmap *m, struct keys *t, uint64_t (*h)(uint64_t), uint64_t key,
		uint32_t *ret_id)
{
	return mp_hashmap_find(m, h(key), eq_key, t, &key, ret_id);
}

static struct keys *keys_new(void)
{
	struct keys *t = calloc(1, sizeof(*t));

	cr_assert_not_null(t);
	return t;
}

Test(hash, functions)
{
	const char zero[9] = { 0 };

	cr_assert_eq(mp_hash_u64(0), 0);
	cr_assert_neq(mp_hash_u64(1), mp_hash_u64(2));
	/* One flipped input bit changes many output bits. */
	for (unsigned b = 0; b < 64; b++) {
		uint64_t d = mp_hash_u64(0x1234) ^ mp_hash_u64(0x1234 ^ 1ull << b);

		cr_assert_geq(__builtin_popcountll(d), 12, "bit %u", b);
	}
	cr_assert_eq(mp_hash_str("kernel"), mp_hash_bytes("kernel", 6, 0));
	cr_assert_neq(mp_hash_str("kernel"), mp_hash_str("kernel2"));
	cr_assert_neq(mp_hash_str("ab"), mp_hash_str("ba"));
	/* Zero bytes still count through the length. */
	for (size_t i = 0; i < 9; i++)
		for (size_t j = i + 1; j <= 9; j++)
			cr_assert_neq(mp_hash_bytes(zero, i, 0), mp_hash_bytes(zero, j, 0));
	cr_assert_neq(mp_hash_bytes("abc", 3, 0), mp_hash_bytes("abc", 3, 1));
	cr_assert_neq(mp_hash_combine(mp_hash_combine(0, 1), 2),
		      mp_hash_combine(mp_hash_combine(0, 2), 1));
	cr_assert_eq(mp_hash_combine(7, 9), mp_hash_combine(7, 9));
}

Test(hashmap, empty_and_free)
{
	struct mp_hashmap m;
	struct keys *t = keys_new();
	uint32_t id = 77;

	mp_hashmap_init(&m, 0);
	cr_assert_eq(m.max, MP_HASHMAP_MAX_ENTRIES);
	cr_assert_eq(find(&m, t, h_full, 5, &id), -ENOENT);
	cr_assert_eq(id, 77);
	cr_assert_eq(mp_hashmap_remove(&m, 5, 0), -ENOENT);
	cr_assert_eq(mp_hashmap_count(&m), 0);
	cr_assert_null(m.slots);
	mp_hashmap_reset(&m);
	mp_hashmap_free(&m);
	mp_hashmap_free(NULL);
	cr_assert_eq(t->eq_calls, 0);
	free(t);
}

static bool eq_str(const void *ctx, uint32_t id, const void *key)
{
	return strcmp(((const char *const *)ctx)[id], key) == 0;
}

/* The intern pattern: ids in order of first sight, duplicates found. */
Test(hashmap, intern_strings)
{
	static const char *const in[] = { "", "alloc",	"free", "alloc",
					  "", "kernel", "free", "kernel2" };
	static const uint32_t want[] = { 0, 1, 2, 1, 0, 3, 2, 4 };
	const char *tab[8];
	uint32_t n = 0;
	struct mp_hashmap m;

	mp_hashmap_init(&m, 8);
	for (size_t i = 0; i < 8; i++) {
		uint32_t id;
		int r = mp_hashmap_intern(&m, mp_hash_str(in[i]), eq_str, tab, in[i], n, &id);

		cr_assert_geq(r, 0);
		if (r == 1)
			tab[n++] = in[i];
		cr_assert_eq(id, want[i], "%s: %u", in[i], id);
	}
	cr_assert_eq(n, 5);
	cr_assert_eq(mp_hashmap_count(&m), 5);
	mp_hashmap_free(&m);
}

/* Every key under one hash: one chain, walked and shifted. */
static void chain(uint64_t (*h)(uint64_t))
{
	struct keys *t = keys_new();
	struct mp_hashmap m;
	uint32_t id;
	const uint32_t n = 10;

	mp_hashmap_init(&m, 0);
	for (uint32_t i = 0; i < n; i++) {
		t->k[i] = 1000 + i;
		cr_assert_eq(mp_hashmap_insert(&m, h(t->k[i]), i), 0);
	}
	cr_assert_eq(m.mask, 15);
	for (uint32_t i = 0; i < n; i++) {
		cr_assert_eq(find(&m, t, h, 1000 + i, &id), 0);
		cr_assert_eq(id, i);
	}
	/* The middle, then the head, then the tail of the chain. */
	cr_assert_eq(mp_hashmap_remove(&m, h(t->k[4]), 4), 0);
	cr_assert_eq(mp_hashmap_remove(&m, h(t->k[4]), 4), -ENOENT);
	cr_assert_eq(mp_hashmap_remove(&m, h(t->k[0]), 0), 0);
	cr_assert_eq(mp_hashmap_remove(&m, h(t->k[9]), 9), 0);
	cr_assert_eq(mp_hashmap_count(&m), n - 3);
	for (uint32_t i = 0; i < n; i++) {
		int r = find(&m, t, h, 1000 + i, &id);

		if (i == 0 || i == 4 || i == 9) {
			cr_assert_eq(r, -ENOENT, "%u", i);
		} else {
			cr_assert_eq(r, 0, "%u", i);
			cr_assert_eq(id, i);
		}
	}
	/* A shifted chain has no hole: its slots are contiguous from home. */
	for (uint32_t s = 0, home = (uint32_t)(h(0) ^ h(0) >> 32) & m.mask; s < n - 3; s++)
		cr_assert_neq(m.slots[(home + s) & m.mask].id1, 0, "slot %u", s);
	/* Removing by a wrong hash or id finds nothing. */
	cr_assert_eq(mp_hashmap_remove(&m, h(t->k[1]) + 1, 1), -ENOENT);
	cr_assert_eq(mp_hashmap_remove(&m, h(t->k[1]), 12), -ENOENT);
	mp_hashmap_free(&m);
	free(t);
}

Test(hashmap, collisions_one_chain)
{
	chain(h_const);
}

Test(hashmap, collisions_wrap_around)
{
	chain(h_last);
}

/* Only the 32 bits kept in the slot select the equality calls. */
Test(hashmap, eq_only_on_hash_match)
{
	struct keys *t = keys_new();
	struct mp_hashmap m;
	uint32_t id;

	mp_hashmap_init(&m, 0);
	for (uint32_t i = 0; i < 1000; i++) {
		t->k[i] = i;
		cr_assert_eq(mp_hashmap_insert(&m, h_full(i), i), 0);
	}
	t->eq_calls = 0;
	for (uint32_t i = 0; i < 1000; i++) {
		cr_assert_eq(find(&m, t, h_full, i, &id), 0);
		cr_assert_eq(id, i);
	}
	cr_assert_eq(t->eq_calls, 1000);
	t->eq_calls = 0;
	cr_assert_eq(find(&m, t, h_full, 5000, &id), -ENOENT);
	cr_assert_eq(t->eq_calls, 0);
	mp_hashmap_free(&m);
	free(t);
}

Test(hashmap, growth_keeps_entries)
{
	struct keys *t = keys_new();
	struct mp_hashmap m;
	uint32_t id, last_mask = 0;

	mp_hashmap_init(&m, 0);
	for (uint32_t i = 0; i < 20000; i++) {
		t->k[i] = i * 7919ull + 3;
		cr_assert_eq(mp_hashmap_insert(&m, h_full(t->k[i]), i), 0);
		cr_assert_leq((uint64_t)mp_hashmap_count(&m) * 4, ((uint64_t)m.mask + 1) * 3);
		if (m.mask != last_mask) {
			for (uint32_t j = 0; j <= i; j++) {
				cr_assert_eq(find(&m, t, h_full, t->k[j], &id), 0);
				cr_assert_eq(id, j);
			}
			last_mask = m.mask;
		}
	}
	cr_assert_eq(mp_hashmap_count(&m), 20000);
	cr_assert_eq(m.mask + 1, 32768);
	mp_hashmap_free(&m);
	free(t);
}

Test(hashmap, bound)
{
	struct keys *t = keys_new();
	struct mp_hashmap m;
	uint32_t id;

	mp_hashmap_init(&m, 5);
	for (uint32_t i = 0; i < 5; i++) {
		t->k[i] = i;
		cr_assert_eq(mp_hashmap_intern(&m, h_full(i), eq_key, t, &t->k[i], i, &id), 1);
	}
	t->k[5] = 5;
	cr_assert_eq(mp_hashmap_intern(&m, h_full(5), eq_key, t, &t->k[5], 5, &id), -ENOSPC);
	cr_assert_eq(mp_hashmap_insert(&m, h_full(5), 5), -ENOSPC);
	/* Full, yet what is there is still found. */
	cr_assert_eq(mp_hashmap_intern(&m, h_full(3), eq_key, t, &t->k[3], 5, &id), 0);
	cr_assert_eq(id, 3);
	cr_assert_eq(mp_hashmap_count(&m), 5);
	/* Room again after a removal. */
	cr_assert_eq(mp_hashmap_remove(&m, h_full(1), 1), 0);
	cr_assert_eq(mp_hashmap_insert(&m, h_full(5), 5), 0);
	cr_assert_eq(mp_hashmap_reserve(&m, 6), -ENOSPC);
	cr_assert_eq(mp_hashmap_insert(&m, 0, MP_HASHMAP_MAX_ENTRIES), -EINVAL);
	cr_assert_eq(mp_hashmap_remove(&m, 0, UINT32_MAX), -ENOENT);
	mp_hashmap_free(&m);
	free(t);
}

Test(hashmap, reserve_and_reset)
{
	struct keys *t = keys_new();
	struct mp_hashmap m;
	struct mp_hashmap_slot *slots;
	uint32_t id;

	mp_hashmap_init(&m, 0);
	cr_assert_eq(mp_hashmap_reserve(&m, 1000), 0);
	slots = m.slots;
	cr_assert_not_null(slots);
	for (uint32_t i = 0; i < 1000; i++) {
		t->k[i] = i;
		cr_assert_eq(mp_hashmap_insert(&m, h_full(i), i), 0);
	}
	cr_assert_eq(m.slots, slots, "reserved room grew again");
	cr_assert_eq(mp_hashmap_reserve(&m, 10), 0);
	cr_assert_eq(m.slots, slots, "reserve shrank");
	mp_hashmap_reset(&m);
	cr_assert_eq(m.slots, slots);
	cr_assert_eq(mp_hashmap_count(&m), 0);
	for (uint32_t i = 0; i < 1000; i++)
		cr_assert_eq(find(&m, t, h_full, i, &id), -ENOENT);
	cr_assert_eq(mp_hashmap_insert(&m, h_full(3), 3), 0);
	cr_assert_eq(find(&m, t, h_full, 3, &id), 0);
	cr_assert_eq(id, 3);
	mp_hashmap_free(&m);
	cr_assert_null(m.slots);
	/* Usable again after free. */
	cr_assert_eq(mp_hashmap_insert(&m, h_full(3), 3), 0);
	mp_hashmap_free(&m);
	free(t);
}

/* Random inserts and removes against a presence array, with a good hash
 * and with one that makes overlapping clusters. */
static void churn(uint64_t (*h)(uint64_t), uint32_t nkeys, unsigned steps)
{
	struct keys *t = keys_new();
	bool *in = calloc(nkeys, sizeof(*in));
	struct mp_hashmap m;
	uint32_t count = 0, id;
	uint64_t rng = 0x243f6a8885a308d3ull;

	cr_assert_not_null(in);
	for (uint32_t i = 0; i < nkeys; i++)
		t->k[i] = mp_hash_u64(i + 1);
	mp_hashmap_init(&m, nkeys);
	for (unsigned s = 0; s < steps; s++) {
		uint32_t i;

		rng = rng * 6364136223846793005ull + 1442695040888963407ull;
		i = (uint32_t)(rng >> 33) % nkeys;
		if (rng >> 63) {
			int r = mp_hashmap_intern(&m, h(t->k[i]), eq_key, t, &t->k[i], i, &id);

			cr_assert_eq(r, in[i] ? 0 : 1);
			cr_assert_eq(id, i);
			count += !in[i];
			in[i] = true;
		} else {
			cr_assert_eq(mp_hashmap_remove(&m, h(t->k[i]), i), in[i] ? 0 : -ENOENT);
			count -= in[i];
			in[i] = false;
		}
		cr_assert_eq(mp_hashmap_count(&m), count);
		if (s % 997 == 0) {
			for (uint32_t k = 0; k < nkeys; k++) {
				int r = find(&m, t, h, t->k[k], &id);

				cr_assert_eq(r, in[k] ? 0 : -ENOENT, "step %u key %u", s, k);
				if (in[k])
					cr_assert_eq(id, k);
			}
		}
	}
	mp_hashmap_free(&m);
	free(in);
	free(t);
}

Test(hashmap, random_against_reference)
{
	churn(h_full, 3000, 200000);
}

Test(hashmap, random_clustered)
{
	churn(h_weak, 300, 50000);
}
