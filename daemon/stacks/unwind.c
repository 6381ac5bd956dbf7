// SPDX-License-Identifier: MIT
#include <dwarf.h>
#include <errno.h>
#include <gelf.h>
#include <stdlib.h>
#include <string.h>

#include "inline.h"
#include "modules.h"
#include "symtab.h"
#include "unwind.h"

/* x86-64 DWARF register numbers (System V psABI). */
#define DWARF_RBP 6
#define DWARF_RSP 7
#define DWARF_RA 16

/* The rule cache: per code address, the CFI rules of its frame when they
 * are the simple ones -O2 code has (CFA = rsp or rbp + offset, return
 * address and rbp saved at CFA + offset, or rbp unchanged). A hash table
 * by address (linear probing, at most half full) that grows from
 * RULE_MIN to RULE_MAX slots (24 bytes each: 24 MiB at most); full, a new
 * address's rule is looked up every time. Filled from libdw on a miss. A PyTorch
 * program's stacks hold some 40,000 return addresses: the direct-mapped
 * table of 16,384 slots this replaces missed on a third of them. */
#define RULE_MIN 4096u
#define RULE_MAX (1u << 20)

enum rule_kind {
	RULE_EMPTY = 0,
	RULE_STEP, /* the simple rules below */
	RULE_LAST, /* the return address is undefined: the outermost frame */
	RULE_SLOW, /* anything else: libdwfl unwinds the whole stack */
};

enum { RBP_SAME = 0, RBP_SAVED, RBP_LOST };

struct rule {
	uint64_t pc;
	uint8_t kind;
	uint8_t cfa_reg; /* DWARF_RSP or DWARF_RBP */
	uint8_t rbp;
	int32_t cfa_off, ra_off, rbp_off;
};

struct range {
	uint64_t start, end;
};

struct mp_unwinder {
	pid_t pid;
	Dwfl *dwfl;
	bool attached;
	struct range *ranges; /* code mappings, sorted */
	size_t n_ranges;
	/* The unwind in progress. */
	const struct mp_unwind_regs *regs;
	const unsigned char *stack;
	size_t len;
	uint64_t *frames;
	uint32_t max, n;
	bool more;
	bool refused; /* a read outside the slice and the files */
	struct rule *rules; /* n_rules_cap slots, allocated at first use */
	uint32_t n_rules, n_rules_cap, max_rules; /* slots: used, allocated, bound */
	struct rule scratch; /* a rule the full table has no room for */
	bool no_rules; /* mp_unwinder_set_rule_cache(false) */
	uint64_t fast, slow; /* stacks unwound by the rule walk / by libdwfl */
	uint64_t fills; /* rules looked up in libdw */
};

/* Stack memory: the copied slice only; anything else is either code or
 * data of a mapped file (read through libdwfl from the file) or refused. */
static bool read_file_word(Dwfl *dwfl, Dwarf_Addr addr, Dwarf_Word *result)
{
	Dwfl_Module *mod = dwfl_addrmodule(dwfl, addr);
	Dwarf_Addr off = addr, bias;
	Elf_Scn *scn;
	Elf_Data *d;
	GElf_Shdr sh;

	if (!mod)
		return false;
	scn = dwfl_module_address_section(mod, &off, &bias);
	if (!scn || !gelf_getshdr(scn, &sh) || sh.sh_type == SHT_NOBITS)
		return false;
	d = elf_getdata(scn, NULL);
	if (!d || !d->d_buf || off > d->d_size || d->d_size - off < sizeof(*result))
		return false;
	memcpy(result, (const char *)d->d_buf + off, sizeof(*result));
	return true;
}

static bool memory_read(Dwfl *dwfl, Dwarf_Addr addr, Dwarf_Word *result, void *arg)
{
	struct mp_unwinder *u = arg;
	uint64_t sp = u->regs->sp;

	if (addr >= sp && addr - sp <= u->len && u->len - (addr - sp) >= sizeof(*result)) {
		memcpy(result, u->stack + (addr - sp), sizeof(*result));
		return true;
	}
	if (read_file_word(dwfl, addr, result))
		return true;
	u->refused = true;
	return false;
}

static pid_t next_thread(Dwfl *dwfl, void *arg, void **thread_argp)
{
	(void)dwfl, (void)arg, (void)thread_argp;
	return 0; /* one thread, reached through get_thread only */
}

static bool get_thread(Dwfl *dwfl, pid_t tid, void *arg, void **thread_argp)
{
	(void)dwfl, (void)tid;
	*thread_argp = arg;
	return true;
}

static bool set_initial_registers(Dwfl_Thread *thread, void *arg)
{
	struct mp_unwinder *u = arg;
	Dwarf_Word regs[2] = { u->regs->bp, u->regs->sp };

	if (!dwfl_thread_state_registers(thread, DWARF_RBP, 2, regs))
		return false;
	dwfl_thread_state_register_pc(thread, u->regs->ip);
	return true;
}

static const Dwfl_Thread_Callbacks thread_callbacks = {
	.next_thread = next_thread,
	.get_thread = get_thread,
	.memory_read = memory_read,
	.set_initial_registers = set_initial_registers,
};

static int range_cmp(const void *a, const void *b)
{
	const struct range *x = a, *y = b;

	return x->start < y->start ? -1 : x->start > y->start;
}

/* A fresh Dwfl with one module per code file of @maps. */
static int build(struct mp_unwinder *u, const struct mp_procmaps *maps)
{
	struct {
		const char *path;
		uint64_t bias;
	} *seen = NULL;
	size_t n_seen = 0;
	Dwfl_Module *first = NULL;
	int r = -ENOMEM;

	u->dwfl = dwfl_begin(&mp_dwfl_callbacks);
	u->ranges = calloc(maps->n ? maps->n : 1, sizeof(*u->ranges));
	seen = calloc(maps->n ? maps->n : 1, sizeof(*seen));
	if (!u->dwfl || !u->ranges || !seen)
		goto out;
	dwfl_report_begin(u->dwfl);
	for (size_t i = 0; i < maps->n; i++) {
		const struct mp_mapping *m = &maps->maps[i];
		Dwfl_Module *mod;
		uint64_t bias;
		bool dup = false;

		if (!mp_mapping_is_code(m))
			continue;
		u->ranges[u->n_ranges++] = (struct range){ m->start, m->end };
		/* One module per loaded file: a file has several mappings
		 * but one bias (only another load, dlmopen, has another). */
		for (size_t j = 0; j < n_seen && !dup; j++)
			dup = !strcmp(seen[j].path, m->path) &&
			      seen[j].bias == m->start - m->offset;
		if (dup)
			continue;
		seen[n_seen].path = m->path;
		seen[n_seen].bias = m->start - m->offset;
		if (mp_dwfl_report_mapping(u->dwfl, m, u->pid, (unsigned int)n_seen++, &mod,
					   &bias) == 0 &&
		    !first)
			first = mod;
	}
	dwfl_report_end(u->dwfl, NULL, NULL);
	qsort(u->ranges, u->n_ranges, sizeof(*u->ranges), range_cmp);
	r = 0;
	/* The machine (and so the unwinder backend) comes from an ELF file;
	 * without one only the innermost frame is known. */
	if (first) {
		Dwarf_Addr bias;
		Elf *elf = dwfl_module_getelf(first, &bias);

		u->attached = elf && dwfl_attach_state(u->dwfl, elf, u->pid ? u->pid : 1,
						       &thread_callbacks, u);
	}
out:
	free(seen);
	return r;
}

static void teardown(struct mp_unwinder *u)
{
	/* the rules came from the modules going away */
	if (u->rules)
		memset(u->rules, 0, u->n_rules_cap * sizeof(*u->rules));
	u->n_rules = 0;
	if (u->dwfl)
		mp_dwfl_end(u->dwfl);
	free(u->ranges);
	u->dwfl = NULL;
	u->ranges = NULL;
	u->n_ranges = 0;
	u->attached = false;
}

int mp_unwinder_new(pid_t pid, const struct mp_procmaps *maps, struct mp_unwinder **ret)
{
	struct mp_unwinder *u;
	int r;

	if (!maps)
		return -EINVAL;
	u = calloc(1, sizeof(*u));
	if (!u)
		return -ENOMEM;
	u->pid = pid;
	u->max_rules = RULE_MAX;
	r = build(u, maps);
	if (r < 0) {
		mp_unwinder_free(u);
		return r;
	}
	*ret = u;
	return 0;
}

void mp_unwinder_free(struct mp_unwinder *u)
{
	if (!u)
		return;
	teardown(u);
	free(u->rules);
	free(u);
}

int mp_unwinder_set_maps(struct mp_unwinder *u, const struct mp_procmaps *maps)
{
	teardown(u);
	return build(u, maps);
}

bool mp_unwinder_knows(const struct mp_unwinder *u, uint64_t addr)
{
	size_t lo = 0, hi = u->n_ranges;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (addr < u->ranges[mid].start)
			hi = mid;
		else if (addr >= u->ranges[mid].end)
			lo = mid + 1;
		else
			return true;
	}
	return false;
}

static int on_frame(Dwfl_Frame *state, void *arg)
{
	struct mp_unwinder *u = arg;
	Dwarf_Addr pc;
	bool activation;

	if (!dwfl_frame_pc(state, &pc, &activation) || !pc)
		return DWARF_CB_ABORT;
	if (u->n == u->max) {
		u->more = true;
		return DWARF_CB_ABORT;
	}
	u->frames[u->n++] = pc;
	return DWARF_CB_OK;
}

/* Where a location or value of libdw's is, as CFA + offset: the forms
 * dwarf_frame_register gives for the offset(N) rule. */
static bool cfa_offset(const Dwarf_Op *ops, size_t nops, int32_t *ret)
{
	int64_t off;

	if (nops == 1 && ops[0].atom == DW_OP_call_frame_cfa) {
		*ret = 0;
		return true;
	}
	if (nops != 2 || ops[0].atom != DW_OP_call_frame_cfa || ops[1].atom != DW_OP_plus_uconst)
		return false;
	off = (int64_t)ops[1].number;
	if (off < INT32_MIN || off > INT32_MAX)
		return false;
	*ret = (int32_t)off;
	return true;
}

/* The rules of the frame at @pc from the module's CFI (.eh_frame first,
 * as libdwfl's unwinder does, then .debug_frame). */
static void rule_fill(struct mp_unwinder *u, uint64_t pc, struct rule *ru)
{
	Dwfl_Module *mod = dwfl_addrmodule(u->dwfl, pc);
	Dwarf_Op ops_mem[3], *ops;
	Dwarf_Frame *frame = NULL;
	size_t nops;

	*ru = (struct rule){ .pc = pc, .kind = RULE_SLOW };
	if (!mod)
		return;
	for (int i = 0; i < 2 && !frame; i++) {
		Dwarf_Addr bias;
		Dwarf_CFI *cfi =
			i ? dwfl_module_dwarf_cfi(mod, &bias) : dwfl_module_eh_cfi(mod, &bias);

		if (cfi && dwarf_cfi_addrframe(cfi, pc - bias, &frame) != 0)
			frame = NULL;
	}
	if (!frame) {
		/* No CFI: the frame-pointer walk, as libdwfl's x86-64
		 * fallback (rbp points at the saved rbp, the return address
		 * above it). */
		*ru = (struct rule){ .pc = pc,
				     .kind = RULE_STEP,
				     .cfa_reg = DWARF_RBP,
				     .cfa_off = 16,
				     .ra_off = -8,
				     .rbp = RBP_SAVED,
				     .rbp_off = -16 };
		return;
	}
	/* The return address: undefined ends the stack. */
	if (dwarf_frame_register(frame, DWARF_RA, ops_mem, &ops, &nops) != 0)
		goto out;
	if (nops == 0 && ops == ops_mem) {
		ru->kind = RULE_LAST;
		goto out;
	}
	if (!cfa_offset(ops, nops, &ru->ra_off))
		goto out;
	/* The CFA: register + offset. */
	if (dwarf_frame_cfa(frame, &ops, &nops) != 0 || nops != 1)
		goto out;
	if (ops[0].atom == DW_OP_bregx &&
	    (ops[0].number == DWARF_RSP || ops[0].number == DWARF_RBP)) {
		ru->cfa_reg = (uint8_t)ops[0].number;
		if ((int64_t)ops[0].number2 < INT32_MIN || (int64_t)ops[0].number2 > INT32_MAX)
			goto out;
		ru->cfa_off = (int32_t)(int64_t)ops[0].number2;
	} else if (ops[0].atom == DW_OP_breg0 + DWARF_RSP ||
		   ops[0].atom == DW_OP_breg0 + DWARF_RBP) {
		ru->cfa_reg = (uint8_t)(ops[0].atom - DW_OP_breg0);
		if ((int64_t)ops[0].number < INT32_MIN || (int64_t)ops[0].number > INT32_MAX)
			goto out;
		ru->cfa_off = (int32_t)(int64_t)ops[0].number;
	} else {
		goto out;
	}
	/* rbp: unchanged, saved, or (callee-saved registers never are)
	 * undefined. */
	if (dwarf_frame_register(frame, DWARF_RBP, ops_mem, &ops, &nops) != 0)
		goto out;
	if (nops == 0)
		ru->rbp = ops ? RBP_LOST : RBP_SAME;
	else if (cfa_offset(ops, nops, &ru->rbp_off))
		ru->rbp = RBP_SAVED;
	else
		goto out;
	ru->kind = RULE_STEP;
out:
	free(frame);
}

static uint32_t rule_home(uint64_t pc, uint32_t cap)
{
	pc *= 0x9e3779b97f4a7c15ull;
	return (uint32_t)(pc >> 32) & (cap - 1);
}

/* Twice the slots, the rules rehashed; false without memory (the table
 * stays as it is). */
static bool rules_grow(struct mp_unwinder *u)
{
	uint32_t cap = u->n_rules_cap	       ? u->n_rules_cap * 2 :
		       u->max_rules < RULE_MIN ? u->max_rules :
						 RULE_MIN;
	struct rule *t = calloc(cap, sizeof(*t));

	if (!t)
		return false;
	for (uint32_t i = 0; i < u->n_rules_cap; i++) {
		uint32_t j = rule_home(u->rules[i].pc, cap);

		if (u->rules[i].kind == RULE_EMPTY)
			continue;
		while (t[j].kind != RULE_EMPTY)
			j = (j + 1) & (cap - 1);
		t[j] = u->rules[i];
	}
	free(u->rules);
	u->rules = t;
	u->n_rules_cap = cap;
	return true;
}

static const struct rule *rule_at(struct mp_unwinder *u, uint64_t pc)
{
	uint32_t j;

	if (!u->rules && !rules_grow(u))
		return NULL;
	for (j = rule_home(pc, u->n_rules_cap); u->rules[j].kind != RULE_EMPTY;
	     j = (j + 1) & (u->n_rules_cap - 1))
		if (u->rules[j].pc == pc)
			return &u->rules[j];
	/* A miss: into the free slot the probe ended at, while the table
	 * is at most half full (grown if it may); full, the rule is looked
	 * up for this frame alone. */
	u->fills++;
	if (2 * (u->n_rules + 1) > u->n_rules_cap) {
		if (u->n_rules_cap < u->max_rules && rules_grow(u)) {
			u->fills--;
			return rule_at(u, pc);
		}
		rule_fill(u, pc, &u->scratch);
		return &u->scratch;
	}
	u->n_rules++;
	rule_fill(u, pc, &u->rules[j]);
	return &u->rules[j];
}

static bool slice_word(const struct mp_unwind_regs *regs, const unsigned char *stack, size_t len,
		       uint64_t addr, uint64_t *ret)
{
	if (addr < regs->sp || addr - regs->sp > len || len - (addr - regs->sp) < 8)
		return false;
	memcpy(ret, stack + (addr - regs->sp), 8);
	return true;
}

/*
 * The walk with cached rules: what libdwfl computes for these frames, at a
 * fraction of its cost (it builds a frame state and looks the CFI up anew
 * at every frame of every stack). Returns the number of frames, or -1
 * when a frame needs more than the cached rules can say (libdwfl then
 * unwinds the stack, with the same result format).
 */
static int fast_unwind(struct mp_unwinder *u, const struct mp_unwind_regs *regs,
		       const unsigned char *stack, size_t len, uint32_t max, uint64_t *frames,
		       bool *ret_truncated)
{
	uint64_t pc = regs->ip, sp = regs->sp, bp = regs->bp;
	bool bp_known = true;
	uint32_t n = 0;

	for (;;) {
		/* A return address is looked up at the call: pc - 1. */
		const struct rule *ru = rule_at(u, n ? pc - 1 : pc);
		uint64_t cfa, ra, nbp = bp;

		if (!ru || ru->kind == RULE_SLOW)
			return -1;
		if (n == max) {
			*ret_truncated = ru->kind != RULE_LAST;
			return (int)n;
		}
		frames[n++] = pc;
		if (ru->kind == RULE_LAST) {
			*ret_truncated = false;
			return (int)n;
		}
		if (ru->cfa_reg == DWARF_RBP && !bp_known)
			return -1;
		cfa = (ru->cfa_reg == DWARF_RSP ? sp : bp) + (uint64_t)(int64_t)ru->cfa_off;
		if (!slice_word(regs, stack, len, cfa + (uint64_t)(int64_t)ru->ra_off, &ra))
			return -1; /* the slice ends (or a file's data): as libdwfl says */
		if (ru->rbp == RBP_SAVED) {
			if (!slice_word(regs, stack, len, cfa + (uint64_t)(int64_t)ru->rbp_off,
					&nbp))
				return -1;
		} else if (ru->rbp == RBP_LOST) {
			bp_known = false;
		}
		if (!ra)
			return -1; /* how that ends is libdwfl's to say */
		pc = ra;
		sp = cfa;
		bp = nbp;
	}
}

int mp_unwind(struct mp_unwinder *u, const struct mp_unwind_regs *regs, const void *stack,
	      size_t len, uint32_t max_depth, uint64_t *ret_frames, bool *ret_truncated)
{
	int r;

	if (!max_depth || max_depth > MP_UNWIND_MAX_DEPTH || (len && !stack))
		return -EINVAL;
	*ret_truncated = false;
	if (!regs->ip)
		return 0;
	if (!u->attached) {
		ret_frames[0] = regs->ip;
		*ret_truncated = true;
		return 1;
	}
	r = u->no_rules ? -1 :
			  fast_unwind(u, regs, stack, len, max_depth, ret_frames, ret_truncated);
	if (r > 0) {
		u->fast++;
		return r;
	}
	u->slow++;
	u->regs = regs;
	u->stack = stack;
	u->len = len;
	u->frames = ret_frames;
	u->max = max_depth;
	u->n = 0;
	u->more = false;
	u->refused = false;
	r = dwfl_getthread_frames(u->dwfl, u->pid ? u->pid : 1, on_frame, u);
	if (u->n == 0) {
		/* Not even the first frame (no state): the address alone. */
		ret_frames[0] = regs->ip;
		u->n = 1;
		r = -1;
	}
	/* 0: the outermost frame says it is the last (CFI marks its return
	 * address undefined), unless libdwfl took a refused read for the end;
	 * anything else ended early. */
	*ret_truncated = u->more || r != 0 || u->refused;
	u->regs = NULL;
	u->stack = NULL;
	return (int)u->n;
}

void mp_unwinder_set_rule_cache(struct mp_unwinder *u, bool on)
{
	u->no_rules = !on;
}

void mp_unwinder_stats(const struct mp_unwinder *u, uint64_t *ret_fast, uint64_t *ret_slow)
{
	if (ret_fast)
		*ret_fast = u->fast;
	if (ret_slow)
		*ret_slow = u->slow;
}

void mp_unwinder_set_rule_slots(struct mp_unwinder *u, uint32_t max)
{
	uint32_t m = 8;

	while (m < max && m < RULE_MAX)
		m *= 2;
	u->max_rules = m;
	/* before the first rule */
	free(u->rules);
	u->rules = NULL;
	u->n_rules = u->n_rules_cap = 0;
}

uint64_t mp_unwinder_rule_fills(const struct mp_unwinder *u)
{
	return u->fills;
}

int mp_unwinder_sym_frames(struct mp_unwinder *u, uint64_t addr, struct mp_sym_frame *ret, int max)
{
	Dwfl_Module *mod = u->dwfl && addr ? dwfl_addrmodule(u->dwfl, addr - 1) : NULL;

	return mod ? mp_sym_frames(mod, addr - 1, ret, max) : 0;
}
