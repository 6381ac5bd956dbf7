// SPDX-License-Identifier: MIT
#include <dwarf.h>
#include <errno.h>
#include <gelf.h>
#include <stdlib.h>
#include <string.h>

#include "inline.h"
#include "modules.h"
#include "unwind.h"

/* x86-64 DWARF register numbers (System V psABI). */
#define DWARF_RBP 6
#define DWARF_RSP 7

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
		seen[n_seen++].bias = m->start - m->offset;
		if (mp_dwfl_report_mapping(u->dwfl, m, u->pid, &mod, &bias) == 0 && !first)
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
	if (u->dwfl)
		dwfl_end(u->dwfl);
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

int mp_unwinder_sym_frames(struct mp_unwinder *u, uint64_t addr, struct mp_sym_frame *ret, int max)
{
	Dwfl_Module *mod = u->dwfl && addr ? dwfl_addrmodule(u->dwfl, addr - 1) : NULL;

	return mod ? mp_sym_frames(mod, addr - 1, ret, max) : 0;
}
