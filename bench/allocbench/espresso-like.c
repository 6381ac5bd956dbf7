// SPDX-License-Identifier: MIT
/*
 * espresso-like: the allocation shape of mimalloc-bench's espresso (a
 * two-level logic minimizer over cubes in positional notation), written for
 * memprofd's benchmarks; not espresso.
 *
 * Each cube is its own heap block (a header word and 2 bits per variable:
 * 8 bytes here); sets of cubes are arrays grown by realloc; every merge
 * attempt builds a temporary cube that dies at once, the cubes of a level
 * live until the next level is built, and the prime implicants to the end.
 * Single thread. The work is the prime implicants of COUNT random functions
 * of VARS variables (ON-set density PCT %) by iterated consensus of
 * adjacent cubes (Quine-McCluskey); the result is checked: every prime
 * covers only ON minterms, none can be enlarged, and together they cover
 * the ON-set, and maximal implicants grown from ON minterms at random
 * are among them.
 *
 *   espresso-like [COUNT [VARS [PCT]]]     default 8 functions, 16 vars, 40 %
 *
 * Prints "espresso-like: ok ..." and exits 0, or says what was wrong and
 * exits 1.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_VARS 24
#define WORDS ((2 * MAX_VARS + 31) / 32)

struct cube {
	uint32_t ndc; /* variables that are don't-care */
	uint32_t w[];
};

struct family {
	size_t n, cap;
	struct cube **c;
};

static unsigned nvars, nwords;
static unsigned long long cubes_made;

static void die(const char *what)
{
	fprintf(stderr, "espresso-like: %s\n", what);
	exit(1);
}

static void *xmalloc(size_t n)
{
	void *p = malloc(n);

	if (!p)
		die("out of memory");
	return p;
}

/* 1: the variable is 0, 2: it is 1, 3: don't care */
static unsigned lit(const struct cube *c, unsigned v)
{
	return (c->w[v / 16] >> (2 * (v % 16))) & 3;
}

static void set_lit(struct cube *c, unsigned v, unsigned l)
{
	c->w[v / 16] = (c->w[v / 16] & ~(3u << (2 * (v % 16)))) | l << (2 * (v % 16));
}

static struct cube *cube_new(void)
{
	struct cube *c = xmalloc(sizeof(*c) + nwords * sizeof(uint32_t));

	memset(c, 0, sizeof(*c) + nwords * sizeof(uint32_t));
	cubes_made++;
	return c;
}

static struct cube *cube_copy(const struct cube *a)
{
	struct cube *c = xmalloc(sizeof(*c) + nwords * sizeof(uint32_t));

	memcpy(c, a, sizeof(*c) + nwords * sizeof(uint32_t));
	cubes_made++;
	return c;
}

static uint64_t cube_hash(const struct cube *c)
{
	uint64_t h = 0x84222325cbf29ce4u;

	for (unsigned i = 0; i < nwords; i++)
		h = (h ^ c->w[i]) * 0x100000001b3u;
	return h ^ (h >> 29);
}

static int cube_eq(const struct cube *a, const struct cube *b)
{
	return memcmp(a->w, b->w, nwords * sizeof(uint32_t)) == 0;
}

static void fam_add(struct family *f, struct cube *c)
{
	if (f->n == f->cap) {
		size_t cap = f->cap ? 2 * f->cap : 16;
		struct cube **p = realloc(f->c, cap * sizeof(*p));
		if (!p)
			die("out of memory");
		f->c = p;
		f->cap = cap;
	}
	f->c[f->n++] = c;
}

/* Open addressing over the indexes of a family's cubes. */
struct table {
	size_t mask;
	long *slot; /* index + 1, 0 empty */
};

static void table_init(struct table *t, size_t n)
{
	size_t size = 64;

	while (size < 2 * n)
		size *= 2;
	t->mask = size - 1;
	t->slot = calloc(size, sizeof(long));
	if (!t->slot)
		die("out of memory");
}

static long table_find(const struct table *t, const struct family *f, const struct cube *c)
{
	for (size_t i = cube_hash(c) & t->mask;; i = (i + 1) & t->mask) {
		if (t->slot[i] == 0)
			return -1;
		if (cube_eq(f->c[t->slot[i] - 1], c))
			return t->slot[i] - 1;
	}
}

/* Adds f's cube @idx unless an equal one is there; 0 if it was. */
static int table_add(struct table *t, const struct family *f, long idx)
{
	size_t i = cube_hash(f->c[idx]) & t->mask;

	for (; t->slot[i]; i = (i + 1) & t->mask)
		if (cube_eq(f->c[t->slot[i] - 1], f->c[idx]))
			return 0;
	t->slot[i] = idx + 1;
	return 1;
}

static uint64_t splitmix(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15u);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
	return z ^ (z >> 31);
}

/* The minterms of @c in turn, through @fn; stops at the first nonzero. */
static int for_minterms(const struct cube *c, int (*fn)(uint32_t m, void *arg), void *arg)
{
	uint32_t base = 0, dc = 0;

	for (unsigned v = 0; v < nvars; v++) {
		unsigned l = lit(c, v);
		if (l == 2)
			base |= 1u << v;
		else if (l == 3)
			dc |= 1u << v;
	}
	uint32_t sub = 0;
	do {
		int r = fn(base | sub, arg);
		if (r)
			return r;
		sub = (sub - dc) & dc;
	} while (sub);
	return 0;
}

static uint8_t *on, *covered;

static int not_on(uint32_t m, void *arg)
{
	(void)arg;
	return !(on[m / 8] >> (m % 8) & 1);
}

static int mark(uint32_t m, void *arg)
{
	(void)arg;
	covered[m / 8] |= 1u << (m % 8);
	return 0;
}

static void check(const struct family *primes, size_t on_count)
{
	size_t bytes = ((size_t)1 << nvars) / 8;

	memset(covered, 0, bytes);
	for (size_t i = 0; i < primes->n; i++) {
		struct cube *p = primes->c[i];
		if (for_minterms(p, not_on, NULL))
			die("a prime covers an OFF minterm");
		for_minterms(p, mark, NULL);
		for (unsigned v = 0; v < nvars; v++) {
			unsigned l = lit(p, v);
			if (l == 3)
				continue;
			set_lit(p, v, 3 - l);
			int off = for_minterms(p, not_on, NULL);
			set_lit(p, v, l);
			if (!off)
				die("a prime could be enlarged");
		}
	}
	if (memcmp(on, covered, bytes) != 0)
		die("the primes do not cover the ON-set");
	(void)on_count;
}

/* Every prime implicant is in @primes: ON minterms picked at random are
 * raised, one variable after the other from a random one, to a prime
 * implicant (raising what could not be raised earlier cannot succeed
 * later: a larger cube only covers more), which must be there. */
static void check_complete(const struct family *primes, uint64_t *seed)
{
	struct table t;
	struct cube *c = cube_new();

	table_init(&t, primes->n);
	for (size_t i = 0; i < primes->n; i++)
		table_add(&t, primes, (long)i);
	for (uint32_t m = 0; m < 1u << nvars; m += 1 + (uint32_t)(splitmix(seed) % 8)) {
		if (!(on[m / 8] >> (m % 8) & 1))
			continue;
		for (unsigned v = 0; v < nvars; v++)
			set_lit(c, v, (m >> v & 1) ? 2 : 1);
		unsigned first = (unsigned)(splitmix(seed) % nvars);
		for (unsigned k = 0; k < nvars; k++) {
			unsigned v = (first + k) % nvars, l = lit(c, v);
			set_lit(c, v, 3);
			if (for_minterms(c, not_on, NULL))
				set_lit(c, v, l);
		}
		if (table_find(&t, primes, c) < 0)
			die("a prime implicant is missing");
	}
	free(c);
	free(t.slot);
}

/* The prime implicants of the ON-set, as a new family. */
static struct family primes_of(struct family *cur)
{
	struct family primes = { 0 };

	while (cur->n) {
		struct family next = { 0 };
		struct table t, nt;
		uint8_t *used = calloc(cur->n, 1);

		if (!used)
			die("out of memory");
		table_init(&t, cur->n);
		table_init(&nt, cur->n * 2);
		for (size_t i = 0; i < cur->n; i++)
			table_add(&t, cur, (long)i);
		for (size_t i = 0; i < cur->n; i++) {
			for (unsigned v = 0; v < nvars; v++) {
				if (lit(cur->c[i], v) != 1)
					continue;
				/* the neighbour with v = 1, and the merged cube */
				struct cube *c = cube_copy(cur->c[i]);
				set_lit(c, v, 2);
				long j = table_find(&t, cur, c);
				if (j < 0) {
					free(c);
					continue;
				}
				used[i] = used[j] = 1;
				set_lit(c, v, 3);
				c->ndc++;
				fam_add(&next, c);
				if (next.n * 2 > nt.mask) {
					free(nt.slot);
					table_init(&nt, next.n * 2);
					for (size_t k = 0; k + 1 < next.n; k++)
						table_add(&nt, &next, (long)k);
				}
				if (!table_add(&nt, &next, (long)next.n - 1))
					free(next.c[--next.n]);
			}
		}
		for (size_t i = 0; i < cur->n; i++) {
			if (used[i])
				free(cur->c[i]);
			else
				fam_add(&primes, cur->c[i]);
		}
		free(used);
		free(t.slot);
		free(nt.slot);
		free(cur->c);
		*cur = next;
	}
	return primes;
}

int main(int argc, char **argv)
{
	int count = argc > 1 ? atoi(argv[1]) : 8;
	int vars = argc > 2 ? atoi(argv[2]) : 16;
	int pct = argc > 3 ? atoi(argv[3]) : 40;
	uint64_t seed = 0x6573707265737373u;
	size_t total_primes = 0;

	if (count < 1 || vars < 4 || vars > MAX_VARS || pct < 1 || pct > 99) {
		fprintf(stderr, "usage: espresso-like [COUNT [VARS 4-%d [PCT 1-99]]]\n", MAX_VARS);
		return 2;
	}
	nvars = (unsigned)vars;
	nwords = (2 * nvars + 31) / 32;
	on = xmalloc(((size_t)1 << nvars) / 8);
	covered = xmalloc(((size_t)1 << nvars) / 8);
	for (int f = 0; f < count; f++) {
		struct family cur = { 0 };
		size_t on_count = 0;

		memset(on, 0, ((size_t)1 << nvars) / 8);
		for (uint32_t m = 0; m < 1u << nvars; m++) {
			if (splitmix(&seed) % 100 >= (unsigned)pct)
				continue;
			on[m / 8] |= 1u << (m % 8);
			on_count++;
			struct cube *c = cube_new();
			for (unsigned v = 0; v < nvars; v++)
				set_lit(c, v, (m >> v & 1) ? 2 : 1);
			fam_add(&cur, c);
		}
		struct family primes = primes_of(&cur);
		check(&primes, on_count);
		check_complete(&primes, &seed);
		total_primes += primes.n;
		for (size_t i = 0; i < primes.n; i++)
			free(primes.c[i]);
		free(primes.c);
	}
	free(on);
	free(covered);
	printf("espresso-like: ok, %d functions, %zu primes, %llu cubes allocated\n", count,
	       total_primes, cubes_made);
	return 0;
}
