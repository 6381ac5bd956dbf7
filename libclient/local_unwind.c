/* SPDX-License-Identifier: MIT */
/*
 * The in-process unwinder (local_unwind.h): DWARF CFI of the loaded objects,
 * interpreted into the simple rules -O2 code has and cached per pc.
 *
 * The unwind info of a pc is found with glibc's _dl_find_object()
 * (lock-free, async-signal-safe): its PT_GNU_EH_FRAME segment, whose
 * .eh_frame_hdr table is binary-searched for the FDE, whose CIE gives the
 * initial rules. Every read of that data stays inside the object's
 * mapping; every read of the stack inside the bounds the caller gives.
 *
 * The rules are cached in one process-wide table, mapped at the first
 * use, filled without locks: a slot's key is claimed with a CAS, its
 * value (the rule and the generation it was computed in) is valid once
 * nonzero and of the current generation. mp_unwind_forget() (dlclose)
 * starts a new generation. Full, a rule is computed for the frame alone.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <link.h>
#include <sys/auxv.h>
#include <sys/mman.h>

#include "ring_abi.h"
#include "local_unwind.h"

#define DWARF_RBP 6
#define DWARF_RSP 7
#define DWARF_RA 16

/* The rule of a frame: enum mp_lu_kind, then for MP_LU_STEP the CFA's
 * register and offset, the return address's offset from the CFA, and
 * rbp: unchanged, saved at CFA + rbp_off, or lost (undefined). */
enum { RBP_SAME = 0, RBP_SAVED, RBP_LOST };
struct lrule {
	uint8_t kind;
	uint8_t cfa_reg;
	uint8_t rbp;
	int32_t cfa_off, ra_off, rbp_off;
};

/* ---- bounded reads of an object's unwind info ---- */

struct rd {
	uintptr_t p, end; /* the object's mapping ends at end */
	bool bad;
};

static uint64_t rd_n(struct rd *r, unsigned n)
{
	uint64_t v = 0;

	if (r->bad || r->end - r->p < n || r->p > r->end) {
		r->bad = true;
		return 0;
	}
	__builtin_memcpy(&v, (const void *)r->p, n); /* little-endian */
	r->p += n;
	return v;
}

static uint64_t rd_uleb(struct rd *r)
{
	uint64_t v = 0;

	for (unsigned s = 0; s < 64; s += 7) {
		uint64_t b = rd_n(r, 1);

		v |= (b & 0x7f) << s;
		if (!(b & 0x80))
			return v;
	}
	r->bad = true;
	return 0;
}

static int64_t rd_sleb(struct rd *r)
{
	uint64_t v = 0, b = 0x80;
	unsigned s = 0;

	while (b & 0x80) {
		if (s >= 64) {
			r->bad = true;
			return 0;
		}
		b = rd_n(r, 1);
		v |= (b & 0x7f) << s;
		s += 7;
	}
	if (s < 64 && (b & 0x40))
		v |= ~0ull << s;
	return (int64_t)v;
}

#define PE_OMIT 0xff

/* A pointer in encoding @enc: absolute or relative to the field (pcrel)
 * or to @datarel (0: not allowed); anything else is bad. */
static uint64_t rd_enc(struct rd *r, uint8_t enc, uintptr_t datarel)
{
	uintptr_t at = r->p;
	uint64_t v;

	switch (enc & 0x0f) {
	case 0x00:
	case 0x04:
	case 0x0c:
		v = rd_n(r, 8);
		break;
	case 0x01:
		v = rd_uleb(r);
		break;
	case 0x02:
		v = rd_n(r, 2);
		break;
	case 0x03:
		v = rd_n(r, 4);
		break;
	case 0x09:
		v = (uint64_t)rd_sleb(r);
		break;
	case 0x0a:
		v = (uint64_t)(int64_t)(int16_t)rd_n(r, 2);
		break;
	case 0x0b:
		v = (uint64_t)(int64_t)(int32_t)rd_n(r, 4);
		break;
	default:
		r->bad = true;
		return 0;
	}
	switch (enc & 0x70) {
	case 0x00:
		return v;
	case 0x10:
		return v + at;
	case 0x30:
		if (datarel)
			return v + datarel;
		break;
	}
	r->bad = true;
	return 0;
}

/* ---- CIE, FDE and the CFA program ---- */

struct cie {
	uint64_t code_align;
	int64_t data_align;
	uint8_t fde_enc;
	bool aug_z;
	uintptr_t insns, end;
};

/* Where a length-prefixed entry at @r's position ends: *@ret_end. */
static bool entry_len(struct rd *r, uintptr_t *ret_end)
{
	uint64_t len = rd_n(r, 4);

	if (len == 0xffffffffu)
		len = rd_n(r, 8);
	if (r->bad || !len || len > r->end - r->p)
		return false;
	*ret_end = r->p + len;
	return true;
}

/* A CIE whose rules the simple walk can follow: RA column 16, no signal
 * frame, only augmentations it knows. */
static bool cie_parse(uintptr_t at, uintptr_t map_end, struct cie *c)
{
	struct rd r = { .p = at, .end = map_end };
	uintptr_t end, aug_end = 0;
	char aug[8];
	unsigned na = 0;
	uint8_t ver;

	if (!entry_len(&r, &end))
		return false;
	r.end = end;
	if (rd_n(&r, 4) != 0)
		return false; /* not a CIE */
	ver = (uint8_t)rd_n(&r, 1);
	if (ver != 1 && ver != 3)
		return false;
	for (;;) {
		uint8_t ch = (uint8_t)rd_n(&r, 1);

		if (r.bad || !ch)
			break;
		if (na == sizeof(aug))
			return false;
		aug[na++] = (char)ch;
	}
	c->code_align = rd_uleb(&r);
	c->data_align = rd_sleb(&r);
	if ((ver == 1 ? rd_n(&r, 1) : rd_uleb(&r)) != DWARF_RA)
		return false;
	c->fde_enc = 0; /* absptr */
	c->aug_z = na && aug[0] == 'z';
	if (c->aug_z) {
		uint64_t alen = rd_uleb(&r);

		if (r.bad || alen > r.end - r.p)
			return false;
		aug_end = r.p + alen;
	}
	for (unsigned i = c->aug_z; i < na; i++) {
		switch (aug[i]) {
		case 'R':
			c->fde_enc = (uint8_t)rd_n(&r, 1);
			break;
		case 'L':
			rd_n(&r, 1);
			break;
		case 'P': {
			uint8_t e = (uint8_t)rd_n(&r, 1);

			/* the personality pointer is skipped, never followed */
			rd_enc(&r, e & 0x7f, r.p);
			break;
		}
		default: /* 'S' (a signal frame) and the unknown */
			return false;
		}
	}
	if (r.bad || !c->code_align)
		return false;
	c->insns = c->aug_z ? aug_end : r.p;
	c->end = end;
	return c->insns <= end;
}

/* One register's rule, for the two the walk follows (RA, rbp). */
enum { R_UNSPEC = 0, R_UNDEF, R_SAME, R_OFF, R_OTHER };
struct regrule {
	uint8_t kind;
	int64_t off;
};

struct cfa_state {
	uint8_t cfa_reg;
	bool cfa_ok; /* register + offset (not an expression) */
	int64_t cfa_off;
	struct regrule ra, bp;
};

#define REMEMBER_MAX 8

struct cfa_run {
	struct cfa_state st, init, saved[REMEMBER_MAX];
	unsigned nsaved;
	const struct cie *cie;
};

static struct regrule *reg_of(struct cfa_state *s, uint64_t reg)
{
	return reg == DWARF_RA ? &s->ra : reg == DWARF_RBP ? &s->bp : NULL;
}

static void set_reg(struct cfa_state *s, uint64_t reg, uint8_t kind, int64_t off)
{
	struct regrule *g = reg_of(s, reg);

	if (g)
		*g = (struct regrule){ .kind = kind, .off = off };
}

static void restore_reg(struct cfa_run *x, uint64_t reg)
{
	struct regrule *g = reg_of(&x->st, reg);

	if (g)
		*g = *reg_of(&x->init, reg);
}

/* Skips a DWARF expression block. */
static void skip_block(struct rd *r)
{
	uint64_t n = rd_uleb(r);

	if (r->bad || n > r->end - r->p)
		r->bad = true;
	else
		r->p += n;
}

/* The extended opcodes (low six bits zero): false on one the simple walk
 * does not follow where it matters, or a bad program. */
static bool cfa_ext(struct cfa_run *x, struct rd *r, uint8_t op, uint64_t *loc, uint64_t pc,
		    bool *stop)
{
	struct cfa_state *s = &x->st;
	const struct cie *c = x->cie;
	uint64_t reg, d;

	switch (op) {
	case 0x00: /* nop */
		return true;
	case 0x02: /* advance_loc1 */
	case 0x03: /* advance_loc2 */
	case 0x04: /* advance_loc4 */
		d = rd_n(r, op == 0x02 ? 1 : op == 0x03 ? 2 : 4) * c->code_align;
		*loc += d;
		*stop = pc < *loc;
		return true;
	case 0x05: /* offset_extended */
		reg = rd_uleb(r);
		set_reg(s, reg, R_OFF, (int64_t)rd_uleb(r) * c->data_align);
		return true;
	case 0x11: /* offset_extended_sf */
		reg = rd_uleb(r);
		set_reg(s, reg, R_OFF, rd_sleb(r) * c->data_align);
		return true;
	case 0x2f: /* GNU_negative_offset_extended */
		reg = rd_uleb(r);
		set_reg(s, reg, R_OFF, -(int64_t)rd_uleb(r) * c->data_align);
		return true;
	case 0x06: /* restore_extended */
		restore_reg(x, rd_uleb(r));
		return true;
	case 0x07: /* undefined */
		set_reg(s, rd_uleb(r), R_UNDEF, 0);
		return true;
	case 0x08: /* same_value */
		set_reg(s, rd_uleb(r), R_SAME, 0);
		return true;
	case 0x09: /* register */
		reg = rd_uleb(r);
		rd_uleb(r);
		set_reg(s, reg, R_OTHER, 0);
		return true;
	case 0x14: /* val_offset */
	case 0x15: /* val_offset_sf */
		reg = rd_uleb(r);
		if (op == 0x14)
			rd_uleb(r);
		else
			rd_sleb(r);
		set_reg(s, reg, R_OTHER, 0);
		return true;
	case 0x10: /* expression */
	case 0x16: /* val_expression */
		set_reg(s, rd_uleb(r), R_OTHER, 0);
		skip_block(r);
		return true;
	case 0x0a: /* remember_state */
		if (x->nsaved == REMEMBER_MAX)
			return false;
		x->saved[x->nsaved++] = *s;
		return true;
	case 0x0b: /* restore_state */
		if (!x->nsaved)
			return false;
		*s = x->saved[--x->nsaved];
		return true;
	case 0x0c: /* def_cfa */
		s->cfa_reg = (uint8_t)rd_uleb(r);
		s->cfa_off = (int64_t)rd_uleb(r);
		s->cfa_ok = true;
		return true;
	case 0x12: /* def_cfa_sf */
		s->cfa_reg = (uint8_t)rd_uleb(r);
		s->cfa_off = rd_sleb(r) * c->data_align;
		s->cfa_ok = true;
		return true;
	case 0x0d: /* def_cfa_register */
		s->cfa_reg = (uint8_t)rd_uleb(r);
		return s->cfa_ok;
	case 0x0e: /* def_cfa_offset */
		s->cfa_off = (int64_t)rd_uleb(r);
		return s->cfa_ok;
	case 0x13: /* def_cfa_offset_sf */
		s->cfa_off = rd_sleb(r) * c->data_align;
		return s->cfa_ok;
	case 0x0f: /* def_cfa_expression */
		s->cfa_ok = false;
		skip_block(r);
		return true;
	case 0x2e: /* GNU_args_size */
		rd_uleb(r);
		return true;
	default: /* set_loc and the rest */
		return false;
	}
}

/* Runs the program [@p, @end) from @loc while the location is at most
 * @pc. false: not simple, or bad. */
static bool cfa_exec(struct cfa_run *x, uintptr_t p, uintptr_t end, uint64_t loc, uint64_t pc)
{
	struct rd r = { .p = p, .end = end };
	bool stop = false;

	while (r.p < r.end && !stop) {
		uint8_t op = (uint8_t)rd_n(&r, 1);

		switch (op >> 6) {
		case 1: /* advance_loc */
			loc += (uint64_t)(op & 0x3f) * x->cie->code_align;
			stop = pc < loc;
			break;
		case 2: /* offset */
			set_reg(&x->st, op & 0x3f, R_OFF,
				(int64_t)rd_uleb(&r) * x->cie->data_align);
			break;
		case 3: /* restore */
			restore_reg(x, op & 0x3f);
			break;
		default:
			if (!cfa_ext(x, &r, op, &loc, pc, &stop))
				return false;
		}
		if (r.bad)
			return false;
	}
	return true;
}

/* The rule at @pc of the FDE at @fde (the object's mapping ends at
 * @map_end), as memprofd's rule_fill() reads libdw's answer. */
static enum mp_lu_kind fde_rule(uintptr_t fde, uintptr_t map_end, uint64_t pc, struct lrule *ru)
{
	struct rd r = { .p = fde, .end = map_end };
	struct cfa_run x = { 0 };
	uintptr_t end, cie_at;
	struct cie cie;
	uint64_t begin, range;
	const struct cfa_state *s = &x.st;

	if (!entry_len(&r, &end))
		return MP_LU_HARD;
	r.end = end;
	cie_at = r.p;
	cie_at -= (uint32_t)rd_n(&r, 4);
	if (r.bad || cie_at == r.p - 4 || !cie_parse(cie_at, map_end, &cie))
		return MP_LU_HARD;
	begin = rd_enc(&r, cie.fde_enc, 0);
	range = rd_enc(&r, cie.fde_enc & 0x0f, 0);
	if (cie.aug_z)
		skip_block(&r);
	if (r.bad)
		return MP_LU_HARD;
	if (pc < begin || pc - begin >= range)
		return MP_LU_NOFDE;
	x.cie = &cie;
	/* libdw starts from the x86-64 ABI's rules: rbp unchanged */
	x.st.bp.kind = R_SAME;
	if (!cfa_exec(&x, cie.insns, cie.end, begin, UINT64_MAX))
		return MP_LU_HARD;
	x.init = x.st;
	if (!cfa_exec(&x, r.p, end, begin, pc))
		return MP_LU_HARD;
	if (s->ra.kind == R_UNDEF)
		return MP_LU_LAST;
	if (s->ra.kind != R_OFF || !s->cfa_ok ||
	    (s->cfa_reg != DWARF_RSP && s->cfa_reg != DWARF_RBP) || s->cfa_off < INT32_MIN ||
	    s->cfa_off > INT32_MAX || s->ra.off < INT32_MIN || s->ra.off > INT32_MAX)
		return MP_LU_HARD;
	*ru = (struct lrule){ .kind = MP_LU_STEP,
			      .cfa_reg = s->cfa_reg,
			      .cfa_off = (int32_t)s->cfa_off,
			      .ra_off = (int32_t)s->ra.off };
	switch (s->bp.kind) {
	case R_UNSPEC:
	case R_SAME:
		ru->rbp = RBP_SAME;
		break;
	case R_UNDEF:
		ru->rbp = RBP_LOST;
		break;
	case R_OFF:
		if (s->bp.off < INT32_MIN || s->bp.off > INT32_MAX)
			return MP_LU_HARD;
		ru->rbp = RBP_SAVED;
		ru->rbp_off = (int32_t)s->bp.off;
		break;
	default:
		return MP_LU_HARD;
	}
	return MP_LU_STEP;
}

/* The span of the main program's loaded segments, from its program
 * headers (getauxval: async-signal-safe), found once: for it,
 * _dl_find_object() may give only the segment holding the address, and
 * its unwind info lies in another. Empty when unknown. */
static uintptr_t main_lo, main_hi;
static int main_state; /* 0 not yet, 1 known */

static void main_span(void)
{
	const ElfW(Phdr) *ph = (const ElfW(Phdr) *)getauxval(AT_PHDR);
	unsigned long n = getauxval(AT_PHNUM);
	uintptr_t bias = 0, lo = UINTPTR_MAX, hi = 0;

	for (unsigned long i = 0; ph && i < n; i++)
		if (ph[i].p_type == PT_PHDR)
			bias = (uintptr_t)ph - ph[i].p_vaddr;
	for (unsigned long i = 0; ph && i < n; i++) {
		if (ph[i].p_type != PT_LOAD)
			continue;
		if (bias + ph[i].p_vaddr < lo)
			lo = bias + ph[i].p_vaddr;
		if (bias + ph[i].p_vaddr + ph[i].p_memsz > hi)
			hi = bias + ph[i].p_vaddr + ph[i].p_memsz;
	}
	if (lo < hi) {
		__atomic_store_n(&main_lo, lo, __ATOMIC_RELAXED);
		__atomic_store_n(&main_hi, hi, __ATOMIC_RELAXED);
	}
	__atomic_store_n(&main_state, 1, __ATOMIC_RELEASE);
}

/* The FDE of @pc through the object's .eh_frame_hdr search table. */
static enum mp_lu_kind rule_lookup(uint64_t pc, struct lrule *ru)
{
	struct dl_find_object fo;
	uintptr_t hdr, table, map_start, map_end, fde;
	uint64_t count, lo, hi;
	uint8_t enc_ptr, enc_count, enc_table;
	struct rd r;

	if (_dl_find_object((void *)(uintptr_t)pc, &fo) != 0 || !fo.dlfo_eh_frame)
		return MP_LU_NOFDE;
	hdr = (uintptr_t)fo.dlfo_eh_frame;
	map_start = (uintptr_t)fo.dlfo_map_start;
	map_end = (uintptr_t)fo.dlfo_map_end;
	if (hdr < map_start || hdr >= map_end) {
		/* the main program's unwind info in another of its segments */
		if (!__atomic_load_n(&main_state, __ATOMIC_ACQUIRE))
			main_span();
		if (pc < __atomic_load_n(&main_lo, __ATOMIC_RELAXED) ||
		    pc >= __atomic_load_n(&main_hi, __ATOMIC_RELAXED))
			return MP_LU_HARD;
		map_start = main_lo;
		map_end = main_hi;
		if (hdr < map_start || hdr >= map_end)
			return MP_LU_HARD;
	}
	r = (struct rd){ .p = hdr, .end = map_end };
	if (rd_n(&r, 1) != 1)
		return MP_LU_HARD;
	enc_ptr = (uint8_t)rd_n(&r, 1);
	enc_count = (uint8_t)rd_n(&r, 1);
	enc_table = (uint8_t)rd_n(&r, 1);
	/* the table: (initial location, FDE) pairs, datarel sdata4, sorted */
	if (enc_ptr == PE_OMIT || enc_count == PE_OMIT || enc_table != 0x3b)
		return MP_LU_HARD;
	rd_enc(&r, enc_ptr, hdr);
	count = rd_enc(&r, enc_count, hdr);
	table = r.p;
	if (r.bad || count > (map_end - table) / 8)
		return MP_LU_HARD;
	if (!count)
		return MP_LU_NOFDE;
	lo = 0;
	hi = count;
	while (hi - lo > 1) {
		uint64_t mid = lo + (hi - lo) / 2;
		int32_t loc;

		__builtin_memcpy(&loc, (const void *)(table + mid * 8), 4);
		if (hdr + (uint64_t)(int64_t)loc <= pc)
			lo = mid;
		else
			hi = mid;
	}
	{
		int32_t w[2];

		__builtin_memcpy(w, (const void *)(table + lo * 8), 8);
		if (hdr + (uint64_t)(int64_t)w[0] > pc)
			return MP_LU_NOFDE;
		fde = hdr + (uint64_t)(int64_t)w[1];
	}
	if (fde < map_start || fde >= map_end)
		return MP_LU_HARD;
	return fde_rule(fde, map_end, pc, ru);
}

/* ---- the rule cache ---- */

/* The table reserves CACHE_SLOTS slots and uses the first 2^cache_bits:
 * 2^CACHE_BITS_MIN (1 MiB) at first, four times as many once half of them
 * hold a pc (a big runtime's code has more distinct return addresses than
 * that: PyTorch's import unwinds through ~80,000). Pages never used are
 * never touched, so a small program pays for what it uses. */
#define CACHE_BITS_MIN 16
#define CACHE_BITS_MAX 18
#define CACHE_SLOTS (1u << CACHE_BITS_MAX) /* 4 MiB reserved */
#define CACHE_PROBE 16

struct centry {
	uint64_t key, val;
};

static struct centry *cache;
static int cache_state; /* 0 none, 1 mapping, 2 ready, 3 failed */
static uint32_t cache_gen = 1;
static uint32_t cache_bits = CACHE_BITS_MIN;
static uint32_t cache_used; /* pcs that took a slot since cache_bits last grew */

/* A rule as one word: generation (16 bits, never 0) << 48, the offsets
 * (cfa 24 bits signed; ra, rbp in words, 8 bits signed), the kind,
 * register and rbp rule. 0: not cacheable. */
static uint64_t rule_pack(enum mp_lu_kind k, const struct lrule *ru, uint32_t gen)
{
	uint64_t v = (uint64_t)(gen & 0xffff) << 48 | k;

	if (k != MP_LU_STEP)
		return v;
	if (ru->cfa_off < -(1 << 23) || ru->cfa_off >= (1 << 23) || ru->ra_off % 8 ||
	    ru->rbp_off % 8 || ru->ra_off / 8 < -128 || ru->ra_off / 8 > 127 ||
	    ru->rbp_off / 8 < -128 || ru->rbp_off / 8 > 127)
		return 0;
	return v | (uint64_t)(ru->cfa_reg == DWARF_RBP) << 3 | (uint64_t)ru->rbp << 4 |
	       (uint64_t)(uint8_t)(int8_t)(ru->ra_off / 8) << 8 |
	       (uint64_t)(uint8_t)(int8_t)(ru->rbp_off / 8) << 16 |
	       ((uint64_t)(uint32_t)ru->cfa_off & 0xffffff) << 24;
}

static enum mp_lu_kind rule_unpack(uint64_t v, struct lrule *ru)
{
	enum mp_lu_kind k = (enum mp_lu_kind)(v & 7);
	int32_t cfa = (int32_t)((v >> 24) & 0xffffff);

	if (k != MP_LU_STEP)
		return k;
	*ru = (struct lrule){ .kind = MP_LU_STEP,
			      .cfa_reg = (v >> 3) & 1 ? DWARF_RBP : DWARF_RSP,
			      .rbp = (uint8_t)((v >> 4) & 3),
			      .cfa_off = cfa >= (1 << 23) ? cfa - (1 << 24) : cfa,
			      .ra_off = (int8_t)(uint8_t)(v >> 8) * 8,
			      .rbp_off = (int8_t)(uint8_t)(v >> 16) * 8 };
	return k;
}

static __attribute__((cold, noinline)) void cache_map(void)
{
	int zero = 0, saved;
	uint64_t in;
	void *m;

	if (!__atomic_compare_exchange_n(&cache_state, &zero, 1, false, __ATOMIC_ACQ_REL,
					 __ATOMIC_RELAXED))
		return;
	/* Our memory, not the program's: with in_alloc set, memprofd's
	 * syscall tracepoints leave it out of the anonymous mappings; the
	 * allocator's caller never sees errno change. */
	saved = errno;
	in = mp_alloc_tls.in_alloc;
	mp_alloc_tls.in_alloc = 1;
	atomic_signal_fence(memory_order_seq_cst);
	m = mmap(NULL, CACHE_SLOTS * sizeof(struct centry), PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	atomic_signal_fence(memory_order_seq_cst);
	mp_alloc_tls.in_alloc = in;
	errno = saved;
	if (m == MAP_FAILED) {
		__atomic_store_n(&cache_state, 3, __ATOMIC_RELEASE);
		return;
	}
	__atomic_store_n(&cache, (struct centry *)m, __ATOMIC_RELEASE);
	__atomic_store_n(&cache_state, 2, __ATOMIC_RELEASE);
}

static enum mp_lu_kind rule_of(uint64_t pc, struct lrule *ru)
{
	struct centry *t = __atomic_load_n(&cache, __ATOMIC_ACQUIRE);
	uint32_t gen = __atomic_load_n(&cache_gen, __ATOMIC_ACQUIRE);
	uint32_t bits = __atomic_load_n(&cache_bits, __ATOMIC_RELAXED);
	uint32_t mask = (1u << bits) - 1;
	enum mp_lu_kind k;
	uint64_t h, v;

	/* 0 is the key of an empty slot (and never code) */
	if (!pc)
		return MP_LU_NOFDE;
	if (__builtin_expect(!t, 0)) {
		if (!__atomic_load_n(&cache_state, __ATOMIC_RELAXED))
			cache_map();
		return rule_lookup(pc, ru);
	}
	h = pc * 0x9e3779b97f4a7c15ull >> (64 - bits);
	for (unsigned i = 0; i < CACHE_PROBE; i++) {
		struct centry *e = &t[(h + i) & mask];
		uint64_t key = __atomic_load_n(&e->key, __ATOMIC_ACQUIRE);

		if (!key) {
			uint64_t zero = 0;

			if (!__atomic_compare_exchange_n(&e->key, &zero, pc, false,
							 __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
				if (zero != pc)
					continue;
			} else if (bits < CACHE_BITS_MAX &&
				   __atomic_add_fetch(&cache_used, 1, __ATOMIC_RELAXED) ==
					   (mask + 1) / 2) {
				/* half full: four times the slots (the pcs
				 * cached so far are looked up again once) */
				__atomic_store_n(&cache_used, 0, __ATOMIC_RELAXED);
				__atomic_store_n(&cache_bits, bits + 2, __ATOMIC_RELAXED);
			}
			key = pc;
		}
		if (key != pc)
			continue;
		v = __atomic_load_n(&e->val, __ATOMIC_ACQUIRE);
		if (v && (v >> 48) == (gen & 0xffff))
			return rule_unpack(v, ru);
		k = rule_lookup(pc, ru);
		/* no FDE now may be code a later dlopen maps: not kept */
		v = k == MP_LU_NOFDE ? 0 : rule_pack(k, ru, gen);
		if (v)
			__atomic_store_n(&e->val, v, __ATOMIC_RELEASE);
		return k;
	}
	return rule_lookup(pc, ru);
}

void mp_unwind_forget(void)
{
	struct centry *t = __atomic_load_n(&cache, __ATOMIC_ACQUIRE);
	uint32_t g = __atomic_add_fetch(&cache_gen, 1, __ATOMIC_ACQ_REL);
	uint32_t used = 1u << __atomic_load_n(&cache_bits, __ATOMIC_RELAXED);

	if (!(g & 0xffff))
		__atomic_add_fetch(&cache_gen, 1, __ATOMIC_ACQ_REL);
	/* values of the old generation no longer match; clearing them
	 * keeps a generation that wraps around from reviving one (a slot
	 * holding none is left untouched: its page may never have been) */
	for (uint32_t i = 0; t && i < used; i++)
		if (__atomic_load_n(&t[i].val, __ATOMIC_RELAXED))
			__atomic_store_n(&t[i].val, 0, __ATOMIC_RELAXED);
}

uint32_t mp_unwind_cache_slots(void)
{
	return 1u << __atomic_load_n(&cache_bits, __ATOMIC_RELAXED);
}

enum mp_lu_kind mp_unwind_rule_kind(uint64_t pc)
{
	struct lrule ru;

	return rule_of(pc, &ru);
}

/* ---- the walk ---- */

static bool stack_word(uint64_t lo, uint64_t lim, uint64_t addr, uint64_t *ret)
{
	if (addr < lo || addr >= lim || lim - addr < 8)
		return false;
	__builtin_memcpy(ret, (const void *)(uintptr_t)addr, 8);
	return true;
}

/* A frame of the memo's last walk with the registers @pc, @sp, @bp,
 * @bp_known at walk position @n, searched from *@scan on (the frames' sp
 * ascend): its index, or -1. */
static int memo_find(const struct mp_unwind_memo_frame *old, uint32_t old_n, uint32_t *scan,
		     uint64_t pc, uint64_t sp, uint64_t bp, bool bp_known, uint32_t n)
{
	const struct mp_unwind_memo_frame *f;

	while (*scan < old_n && old[*scan].sp < sp)
		(*scan)++;
	if (*scan >= old_n)
		return -1;
	f = &old[*scan];
	if (f->sp != sp || f->pc != pc || f->bp != bp || f->bp_known != bp_known ||
	    (*scan == 0) != (n == 0) || !f->kind)
		return -1;
	return (int)*scan;
}

/* Whether the step from the memo's frame @j to @j + 1 reads what it read:
 * the return address, and rbp where it was saved. */
static inline __attribute__((always_inline)) bool memo_holds(const struct mp_unwind_memo_frame *old,
							     uint32_t old_n, uint32_t j,
							     uint64_t lo, uint64_t lim)
{
	const struct mp_unwind_memo_frame *f = &old[j], *g;
	uint64_t w;

	if (j + 1 >= old_n || f->ra_off == MP_UNWIND_MEMO_NONE)
		return false;
	g = &old[j + 1];
	if (!stack_word(lo, lim, g->sp + (uint64_t)(int64_t)f->ra_off, &w) || w != g->pc)
		return false;
	return f->rbp_off == MP_UNWIND_MEMO_NONE ||
	       (stack_word(lo, lim, g->sp + (uint64_t)(int64_t)f->rbp_off, &w) && w == g->bp);
}

/* How many frames after the memo's frame @j (whose step holds) have a
 * step that holds too, at most @budget: the run a walk replays at once.
 * The stack words are read one after another without the walk's
 * bookkeeping between them, so that their loads overlap. */
static uint32_t memo_run(const struct mp_unwind_memo_frame *old, uint32_t old_n, uint32_t j,
			 uint64_t lo, uint64_t lim, uint32_t budget)
{
	uint32_t e = j + 1;

	while (e - j <= budget && memo_holds(old, old_n, e, lo, lim))
		e++;
	return e - 1 - j;
}

static inline int16_t memo_off(int32_t off)
{
	return off > MP_UNWIND_MEMO_NONE && off <= INT16_MAX ? (int16_t)off : MP_UNWIND_MEMO_NONE;
}

/* The registers of a walk at its current frame, and the stack's bounds. */
struct walk {
	uint64_t pc, sp, bp, lo, lim;
	bool bp_known;
};

/* The frame the walk @w is at, of rule @kind, recorded (where its step
 * read: not yet). */
static inline void memo_rec(struct mp_unwind_memo_frame *r, const struct walk *w,
			    enum mp_lu_kind kind)
{
	*r = (struct mp_unwind_memo_frame){ .pc = w->pc,
					    .sp = w->sp,
					    .bp = w->bp,
					    .ra_off = MP_UNWIND_MEMO_NONE,
					    .rbp_off = MP_UNWIND_MEMO_NONE,
					    .kind = (uint8_t)kind,
					    .bp_known = w->bp_known };
}

/* The walk @w moved to the memo's frame @g. */
static inline void walk_to(struct walk *w, const struct mp_unwind_memo_frame *g)
{
	w->pc = g->pc;
	w->sp = g->sp;
	w->bp = g->bp;
	w->bp_known = g->bp_known;
}

/* The memo's frames @j + 1 .. @j + @c taken as they are, each one the walk
 * would record and count past the caller: into @rec, and their return
 * addresses into @ret_frames from @k on (below @depth). */
static inline void memo_take(const struct mp_unwind_memo_frame *old, uint32_t j, uint32_t c,
			     struct mp_unwind_memo_frame *rec, uint64_t *ret_frames, uint32_t k,
			     uint32_t depth)
{
	__builtin_memcpy(rec, &old[j + 1], c * sizeof(*rec));
	for (uint32_t i = 1; i <= c; i++, k++)
		if (k < depth)
			ret_frames[k] = old[j + i].pc;
}

/* A walk at the frame of the registers @regs (ip, sp, bp), reading the
 * stack in [sp, @lim). */
static inline struct walk walk_at(const uint64_t regs[3], uint64_t lim)
{
	return (struct walk){ .pc = regs[0],
			      .sp = regs[1],
			      .bp = regs[2],
			      .lo = regs[1],
			      .lim = lim,
			      .bp_known = true };
}

/* The step to the caller's frame by the frame's rule @ru; where it read
 * into @rec (when not NULL). false when the walk cannot go on. */
static bool step_rule(struct walk *w, const struct lrule *ru, struct mp_unwind_memo_frame *rec)
{
	uint64_t cfa, ra, nbp = w->bp;

	if (ru->cfa_reg == DWARF_RBP && !w->bp_known)
		return false;
	cfa = (ru->cfa_reg == DWARF_RSP ? w->sp : w->bp) + (uint64_t)(int64_t)ru->cfa_off;
	if (cfa <= w->sp || !stack_word(w->lo, w->lim, cfa + (uint64_t)(int64_t)ru->ra_off, &ra))
		return false;
	if (ru->rbp == RBP_SAVED) {
		if (!stack_word(w->lo, w->lim, cfa + (uint64_t)(int64_t)ru->rbp_off, &nbp))
			return false;
	} else if (ru->rbp == RBP_LOST) {
		w->bp_known = false;
	}
	if (!ra)
		return false;
	if (rec) {
		rec->ra_off = memo_off(ru->ra_off);
		rec->rbp_off = ru->rbp == RBP_SAVED ? memo_off(ru->rbp_off) : MP_UNWIND_MEMO_NONE;
		/* a saved rbp the memo cannot check: not replayed */
		if (ru->rbp == RBP_SAVED && rec->rbp_off == MP_UNWIND_MEMO_NONE)
			rec->ra_off = MP_UNWIND_MEMO_NONE;
	}
	w->pc = ra;
	w->sp = cfa;
	w->bp = nbp;
	return true;
}

/* The memo's last walk into *@old (none when the rule cache changed
 * since, generation @gen), and the buffer this walk records into; NULL
 * when a walk this one interrupts holds the memo. */
static struct mp_unwind_memo_frame *memo_begin(struct mp_unwind_memo *memo, uint32_t gen,
					       const struct mp_unwind_memo_frame **old,
					       uint32_t *old_n)
{
	*old = NULL;
	*old_n = 0;
	if (!memo || memo->busy)
		return NULL;
	memo->busy = 1;
	atomic_signal_fence(memory_order_seq_cst);
	if (memo->gen == gen && memo->cur < 2 && memo->n[memo->cur] < MP_UNWIND_MEMO_FRAMES) {
		*old = memo->f[memo->cur];
		*old_n = memo->n[memo->cur];
	}
	return memo->f[memo->cur == 1 ? 0 : 1];
}

/* The walk's @nn frames recorded become the memo's last walk when it
 * succeeded (@ok); the memo is free again. */
static void memo_end(struct mp_unwind_memo *memo, uint32_t gen, uint32_t nn, bool ok)
{
	if (ok) {
		memo->n[memo->cur == 1 ? 0 : 1] = nn;
		memo->cur = memo->cur == 1 ? 0 : 1;
		memo->gen = gen;
	}
	atomic_signal_fence(memory_order_seq_cst);
	memo->busy = 0;
}

int mp_unwind_local(const uint64_t regs[3], uint64_t lim, uint64_t caller, uint32_t depth,
		    uint64_t *ret_frames, bool *ret_truncated, bool (*stop)(uint64_t pc),
		    struct mp_unwind_memo *memo)
{
	struct walk w = walk_at(regs, lim);
	uint32_t max = depth + MP_FRAMES_OWN_MAX, n = 0, k = 0, old_n, scan = 0, nn = 0;
	uint32_t gen = __atomic_load_n(&cache_gen, __ATOMIC_ACQUIRE);
	const struct mp_unwind_memo_frame *old;
	struct mp_unwind_memo_frame *rec;
	bool found = false, trunc = false, ok = false;
	int j = -1;

	if (!depth || depth > MP_FRAMES_MAX || !w.pc || !caller)
		return -1;
	if (max > MP_FRAMES_MAX)
		max = MP_FRAMES_MAX;
	/* a walk that interrupts another (a signal handler's) has none */
	rec = memo_begin(memo, gen, &old, &old_n);
	for (;;) {
		/* a frame's own pc for the first, a return address after (and
		 * first, when the walk begins at the caller's frame) */
		uint64_t rpc = n || w.pc == caller ? w.pc - 1 : w.pc;
		struct lrule ru;
		enum mp_lu_kind kind;
		bool have_ru = false;

		if (j < 0 && old_n)
			j = memo_find(old, old_n, &scan, w.pc, w.sp, w.bp, w.bp_known, n);
		if (j >= 0) {
			kind = (enum mp_lu_kind)old[j].kind;
		} else {
			kind = rule_of(rpc, &ru);
			have_ru = true;
		}
		if (kind != MP_LU_STEP && kind != MP_LU_LAST)
			break;
		if (rec)
			memo_rec(&rec[nn], &w, kind);
		nn++;
		if (n == max) {
			trunc = kind != MP_LU_LAST;
			ok = true;
			break;
		}
		n++;
		found = found || w.pc == caller;
		if (found) {
			if (k < depth)
				ret_frames[k] = w.pc;
			k++;
		}
		if (kind == MP_LU_LAST || (stop && k >= 2 && stop(w.pc))) {
			trunc = kind != MP_LU_LAST;
			ok = true;
			break;
		}
		if (j >= 0 && memo_holds(old, old_n, (uint32_t)j, w.lo, w.lim)) {
			/* the same words as the last walk: its next frame, and
			 * the c after it whose own steps hold as well */
			uint32_t c = found && !stop ? memo_run(old, old_n, (uint32_t)j, w.lo, w.lim,
							       max - n) :
						      0;

			rec[nn - 1].ra_off = old[j].ra_off;
			rec[nn - 1].rbp_off = old[j].rbp_off;
			memo_take(old, (uint32_t)j, c, rec + nn, ret_frames, k, depth);
			nn += c;
			n += c;
			k += c;
			memo->replayed += c + 1;
			j += (int)c + 1;
			walk_to(&w, &old[j]);
			continue;
		}
		j = -1;
		if ((!have_ru && rule_of(rpc, &ru) != kind) ||
		    !step_rule(&w, &ru, rec ? &rec[nn - 1] : NULL))
			break;
	}
	ok = ok && found;
	if (rec)
		memo_end(memo, gen, nn, ok);
	if (!ok)
		return -1;
	if (k > depth) {
		k = depth;
		trunc = true;
	}
	*ret_truncated = trunc;
	return (int)k;
}

/* The rule of the return address @pc into an allocator wrapper: the same
 * one call after call (operator new's call of malloc), so the thread
 * keeps its last one beside the shared cache, whose slot is a cache miss
 * once the program has run a while. A signal handler that allocates may
 * rewrite it under a reader: the reader copies it, then checks that its
 * pc still holds. */
static __thread struct {
	uint64_t pc;
	uint32_t gen;
	uint32_t kind;
	struct lrule ru;
} wrap_rule __attribute__((tls_model("initial-exec")));

static enum mp_lu_kind wrapper_rule(uint64_t pc, struct lrule *ru)
{
	uint32_t gen = __atomic_load_n(&cache_gen, __ATOMIC_ACQUIRE);
	enum mp_lu_kind k;

	if (wrap_rule.pc == pc) {
		uint32_t g, kind;

		atomic_signal_fence(memory_order_seq_cst);
		g = wrap_rule.gen;
		kind = wrap_rule.kind;
		*ru = wrap_rule.ru;
		atomic_signal_fence(memory_order_seq_cst);
		if (wrap_rule.pc == pc && g == gen)
			return (enum mp_lu_kind)kind;
	}
	k = rule_of(pc, ru);
	if (k == MP_LU_STEP) {
		wrap_rule.pc = 0;
		atomic_signal_fence(memory_order_seq_cst);
		wrap_rule.gen = gen;
		wrap_rule.kind = (uint32_t)k;
		wrap_rule.ru = *ru;
		atomic_signal_fence(memory_order_seq_cst);
		wrap_rule.pc = pc;
	}
	return k;
}

int mp_unwind_local_past(const uint64_t regs[3], uint64_t lim, uint32_t depth, uint64_t *ret_frames,
			 bool (*stop)(uint64_t pc))
{
	struct walk w = walk_at(regs, lim);
	uint32_t k = 0;

	if (!w.pc || depth > MP_FRAMES_MAX)
		return -1;
	while (k < depth) {
		struct lrule ru;
		enum mp_lu_kind kind;

		ret_frames[k++] = w.pc;
		if (k >= 2 && stop(w.pc))
			return (int)k;
		/* every frame's pc a return address: its call's rule */
		kind = k == 1 ? wrapper_rule(w.pc - 1, &ru) : rule_of(w.pc - 1, &ru);
		if (kind != MP_LU_STEP || !step_rule(&w, &ru, NULL))
			return -1;
	}
	return -1;
}
