// SPDX-License-Identifier: MIT
/*
 * cfrac-like: the allocation shape of mimalloc-bench's cfrac (factoring
 * with a bignum library whose every result is a fresh heap block), written
 * for memprofd's benchmarks; not cfrac.
 *
 * Numbers are immutable and reference counted: each add, subtract,
 * multiply and remainder returns a new block of 8 + 4 * limbs bytes (16-48
 * here) and the operands are released when the caller drops them, so
 * nearly every block dies within a few operations, from a single thread.
 * The work is Pollard's rho (Brent's cycle finding) on COUNT semiprimes
 * p * q with p of BITS bits; each factor found is checked against p and q.
 *
 *   cfrac-like [COUNT [BITS]]     default 10 semiprimes, 36-bit p
 *
 * Prints "cfrac-like: ok ..." and exits 0, or says what was wrong and
 * exits 1.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_LIMBS 16

struct num {
	unsigned refs;
	unsigned n; /* limbs in use, no leading zero limb; 0 is zero */
	uint32_t d[];
};

static unsigned long long live_nums, made_nums;
static unsigned long max_r; /* a cycle longer than this: the arithmetic is wrong */

static void die(const char *what)
{
	fprintf(stderr, "cfrac-like: %s\n", what);
	exit(1);
}

static struct num *num_new(unsigned n)
{
	struct num *a;

	if (n > MAX_LIMBS)
		die("number too large");
	a = malloc(sizeof(*a) + (n ? n : 1) * sizeof(uint32_t));
	if (!a)
		die("out of memory");
	a->refs = 1;
	a->n = n;
	live_nums++;
	made_nums++;
	return a;
}

static struct num *num_ref(struct num *a)
{
	a->refs++;
	return a;
}

static void num_drop(struct num *a)
{
	if (a && --a->refs == 0) {
		live_nums--;
		free(a);
	}
}

static struct num *num_trim(struct num *a)
{
	while (a->n && a->d[a->n - 1] == 0)
		a->n--;
	return a;
}

static struct num *num_u64(uint64_t v)
{
	struct num *a = num_new(2);

	a->d[0] = (uint32_t)v;
	a->d[1] = (uint32_t)(v >> 32);
	return num_trim(a);
}

static int num_cmp(const struct num *a, const struct num *b)
{
	if (a->n != b->n)
		return a->n < b->n ? -1 : 1;
	for (unsigned i = a->n; i-- > 0;)
		if (a->d[i] != b->d[i])
			return a->d[i] < b->d[i] ? -1 : 1;
	return 0;
}

static struct num *num_add(const struct num *a, const struct num *b)
{
	unsigned n = a->n > b->n ? a->n : b->n;
	struct num *r = num_new(n + 1);
	uint64_t c = 0;

	for (unsigned i = 0; i < n; i++) {
		c += (uint64_t)(i < a->n ? a->d[i] : 0) + (i < b->n ? b->d[i] : 0);
		r->d[i] = (uint32_t)c;
		c >>= 32;
	}
	r->d[n] = (uint32_t)c;
	return num_trim(r);
}

/* |a - b| */
static struct num *num_absdiff(const struct num *a, const struct num *b)
{
	if (num_cmp(a, b) < 0) {
		const struct num *t = a;
		a = b;
		b = t;
	}
	struct num *r = num_new(a->n);
	int64_t borrow = 0;

	for (unsigned i = 0; i < a->n; i++) {
		int64_t t = (int64_t)a->d[i] - (i < b->n ? b->d[i] : 0) - borrow;
		borrow = t < 0;
		r->d[i] = (uint32_t)t;
	}
	return num_trim(r);
}

static struct num *num_mul(const struct num *a, const struct num *b)
{
	struct num *r = num_new(a->n + b->n);

	memset(r->d, 0, r->n * sizeof(uint32_t));
	for (unsigned i = 0; i < a->n; i++) {
		uint64_t c = 0;
		for (unsigned j = 0; j < b->n; j++) {
			c += (uint64_t)a->d[i] * b->d[j] + r->d[i + j];
			r->d[i + j] = (uint32_t)c;
			c >>= 32;
		}
		r->d[i + b->n] = (uint32_t)c;
	}
	return num_trim(r);
}

/* a mod m, m != 0: long division (Knuth's algorithm D) on the stack, the
 * remainder a new number. */
static struct num *num_mod(const struct num *a, const struct num *m)
{
	unsigned n = m->n, s;
	uint32_t un[2 * MAX_LIMBS + 1], vn[MAX_LIMBS];
	struct num *r;

	if (n == 0)
		die("remainder by zero");
	if (num_cmp(a, m) < 0) {
		r = num_new(a->n);
		memcpy(r->d, a->d, a->n * sizeof(uint32_t));
		return r;
	}
	if (n == 1) {
		uint64_t rem = 0;
		for (unsigned i = a->n; i-- > 0;)
			rem = ((rem << 32) | a->d[i]) % m->d[0];
		return num_u64(rem);
	}
	s = (unsigned)__builtin_clz(m->d[n - 1]);
	for (unsigned i = n - 1; i > 0; i--)
		vn[i] = (m->d[i] << s) | (s ? m->d[i - 1] >> (32 - s) : 0);
	vn[0] = m->d[0] << s;
	un[a->n] = s ? a->d[a->n - 1] >> (32 - s) : 0;
	for (unsigned i = a->n - 1; i > 0; i--)
		un[i] = (a->d[i] << s) | (s ? a->d[i - 1] >> (32 - s) : 0);
	un[0] = a->d[0] << s;
	for (unsigned j = a->n - n + 1; j-- > 0;) {
		uint64_t top = ((uint64_t)un[j + n] << 32) | un[j + n - 1];
		uint64_t qhat = top / vn[n - 1], rhat = top % vn[n - 1];

		while (qhat >> 32 || qhat * vn[n - 2] > ((rhat << 32) | un[j + n - 2])) {
			qhat--;
			rhat += vn[n - 1];
			if (rhat >> 32)
				break;
		}
		int64_t t, k = 0;
		for (unsigned i = 0; i < n; i++) {
			uint64_t p = qhat * vn[i];
			t = (int64_t)un[i + j] - k - (int64_t)(p & 0xffffffffu);
			un[i + j] = (uint32_t)t;
			k = (int64_t)(p >> 32) - (t >> 32);
		}
		t = (int64_t)un[j + n] - k;
		un[j + n] = (uint32_t)t;
		if (t < 0) {
			uint64_t c = 0;
			for (unsigned i = 0; i < n; i++) {
				c += (uint64_t)un[i + j] + vn[i];
				un[i + j] = (uint32_t)c;
				c >>= 32;
			}
			un[j + n] += (uint32_t)c;
		}
	}
	r = num_new(n);
	for (unsigned i = 0; i < n; i++)
		r->d[i] = (un[i] >> s) | (s ? un[i + 1] << (32 - s) : 0);
	if (num_cmp(num_trim(r), m) >= 0)
		die("a remainder not below its modulus: the arithmetic is wrong");
	return r;
}

static struct num *num_gcd(struct num *a, struct num *b)
{
	unsigned steps = 0;

	num_ref(a);
	num_ref(b);
	while (b->n) {
		/* Euclid takes fewer steps than 1.5 per bit */
		if (++steps > 48 * MAX_LIMBS)
			die("gcd does not end: the arithmetic is wrong");
		struct num *t = num_mod(a, b);
		num_drop(a);
		a = b;
		b = t;
	}
	num_drop(b);
	return a;
}

static int num_eq_u64(const struct num *a, uint64_t v)
{
	struct num *b = num_u64(v);
	int eq = num_cmp(a, b) == 0;

	num_drop(b);
	return eq;
}

/* y^2 + c mod n */
static struct num *step(struct num *y, const struct num *c, const struct num *n)
{
	struct num *sq = num_mul(y, y), *s = num_add(sq, c), *r = num_mod(s, n);

	num_drop(sq);
	num_drop(s);
	return r;
}

/* A nontrivial factor of n (Brent's variant of Pollard's rho), or n. */
static struct num *rho(struct num *n, uint64_t c0)
{
	struct num *c = num_u64(c0), *y = num_u64(2), *q = num_u64(1), *g = num_u64(1);
	struct num *x = NULL, *ys = NULL;
	unsigned long r = 1, m = 64;

	while (num_eq_u64(g, 1)) {
		num_drop(x);
		x = num_ref(y);
		for (unsigned long i = 0; i < r; i++) {
			struct num *t = step(y, c, n);
			num_drop(y);
			y = t;
		}
		for (unsigned long k = 0; k < r && num_eq_u64(g, 1); k += m) {
			num_drop(ys);
			ys = num_ref(y);
			for (unsigned long i = 0; i < m && i < r - k; i++) {
				struct num *t = step(y, c, n), *d, *p;
				num_drop(y);
				y = t;
				d = num_absdiff(x, y);
				p = num_mul(q, d);
				num_drop(q);
				q = num_mod(p, n);
				num_drop(p);
				num_drop(d);
			}
			num_drop(g);
			g = num_gcd(q, n);
		}
		r *= 2;
		if (r > max_r)
			die("no factor within the bound: the arithmetic is wrong");
	}
	if (num_cmp(g, n) == 0) {
		/* the batch overshot: walk again one step at a time */
		do {
			struct num *t = step(ys, c, n), *d;
			num_drop(ys);
			ys = t;
			d = num_absdiff(x, ys);
			num_drop(g);
			g = num_gcd(d, n);
			num_drop(d);
		} while (num_eq_u64(g, 1));
	}
	num_drop(c);
	num_drop(x);
	num_drop(y);
	num_drop(ys);
	num_drop(q);
	return g;
}

static uint64_t mulmod(uint64_t a, uint64_t b, uint64_t m)
{
	return (uint64_t)((unsigned __int128)a * b % m);
}

static uint64_t powmod(uint64_t b, uint64_t e, uint64_t m)
{
	uint64_t r = 1;

	for (b %= m; e; e >>= 1, b = mulmod(b, b, m))
		if (e & 1)
			r = mulmod(r, b, m);
	return r;
}

/* Deterministic Miller-Rabin for 64-bit numbers. */
static int is_prime(uint64_t n)
{
	static const uint64_t bases[] = { 2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37 };
	uint64_t d = n - 1;
	int s = 0;

	if (n < 2)
		return 0;
	for (unsigned i = 0; i < sizeof(bases) / sizeof(bases[0]); i++)
		if (n % bases[i] == 0)
			return n == bases[i];
	while ((d & 1) == 0) {
		d >>= 1;
		s++;
	}
	for (unsigned i = 0; i < sizeof(bases) / sizeof(bases[0]); i++) {
		uint64_t x = powmod(bases[i], d, n);
		if (x == 1 || x == n - 1)
			continue;
		int comp = 1;
		for (int k = 1; k < s && comp; k++) {
			x = mulmod(x, x, n);
			comp = x != n - 1;
		}
		if (comp)
			return 0;
	}
	return 1;
}

static uint64_t next_prime(uint64_t v)
{
	v |= 1;
	while (!is_prime(v))
		v += 2;
	return v;
}

static uint64_t splitmix(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15u);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
	return z ^ (z >> 31);
}

int main(int argc, char **argv)
{
	int count = argc > 1 ? atoi(argv[1]) : 10, bits = argc > 2 ? atoi(argv[2]) : 36;
	uint64_t seed = 17545186520507317ull;

	if (count < 1 || bits < 8 || bits > 60) {
		fprintf(stderr, "usage: cfrac-like [COUNT [BITS 8-60]]\n");
		return 2;
	}
	max_r = 1ul << (bits / 2 + 8);
	for (int i = 0; i < count; i++) {
		uint64_t p = next_prime((splitmix(&seed) >> (64 - bits)) | 1ull << (bits - 1));
		uint64_t q = next_prime(splitmix(&seed) >> 4 | 1ull << 59);
		struct num *np = num_u64(p), *nq = num_u64(q), *n = num_mul(np, nq);
		struct num *f = rho(n, 1 + (uint64_t)i);

		if (num_cmp(f, np) != 0 && num_cmp(f, nq) != 0) {
			fprintf(stderr, "cfrac-like: %llu * %llu: factor not found\n",
				(unsigned long long)p, (unsigned long long)q);
			return 1;
		}
		num_drop(f);
		num_drop(np);
		num_drop(nq);
		num_drop(n);
	}
	if (live_nums != 0) {
		fprintf(stderr, "cfrac-like: %llu numbers never released\n", live_nums);
		return 1;
	}
	printf("cfrac-like: ok, %d semiprimes factored, %llu numbers allocated\n", count,
	       made_nums);
	return 0;
}
