// SPDX-License-Identifier: MIT
#include "tracer.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <capstone/capstone.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <linux/capability.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "duty.h"
#include "heap_event.h"
#include "kernel_btf.h"
#include "hub.h"
#include "memprof.skel.h"
#include "memprof_probe.h"
#include "release.h"
#include "symbols.h"
#include "util.h"

_Static_assert(MP_FN_CUSTOM + MP_TRACER_MAX_EXTRA <= 0xff,
	       "the attach cookie holds the function in 8 bits");

#define MP_MAX_PROBES (MP_FN_BUILTIN_COUNT + MP_TRACER_MAX_EXTRA)
/* How long to wait for the dynamic loader of an exec'd target. */
#define MP_EXEC_SETTLE_NS (2ULL * 1000 * 1000 * 1000)

struct builtin {
	uint32_t fn;
	const char *name;
	uint32_t kind;
	uint32_t a, b, c;
};

/* Aliases resolve to one address (glibc: memalign == aligned_alloc); the
 * first name here wins. */
static const struct builtin builtins[] = {
	{ MP_FN_MALLOC, "malloc", MP_KIND_ALLOC, 0, 0, 0 },
	{ MP_FN_FREE, "free", MP_KIND_FREE, 0, 0, 0 },
	{ MP_FN_CALLOC, "calloc", MP_KIND_CALLOC, 0, 1, 0 },
	{ MP_FN_REALLOC, "realloc", MP_KIND_REALLOC, 0, 1, 0 },
	{ MP_FN_REALLOCARRAY, "reallocarray", MP_KIND_REALLOCARRAY, 0, 1, 2 },
	{ MP_FN_POSIX_MEMALIGN, "posix_memalign", MP_KIND_MEMALIGN_OUT, 0, 0, 2 },
	{ MP_FN_ALIGNED_ALLOC, "aligned_alloc", MP_KIND_ALLOC, 1, 0, 0 },
	{ MP_FN_MEMALIGN, "memalign", MP_KIND_ALLOC, 1, 0, 0 },
	{ MP_FN_VALLOC, "valloc", MP_KIND_ALLOC, 0, 0, 0 },
	{ MP_FN_PVALLOC, "pvalloc", MP_KIND_ALLOC, 0, 0, 0 },
};

static const char *const fn_names[MP_FN_BUILTIN_COUNT] = {
	[MP_FN_MALLOC] = "malloc",
	[MP_FN_CALLOC] = "calloc",
	[MP_FN_REALLOC] = "realloc",
	[MP_FN_REALLOCARRAY] = "reallocarray",
	[MP_FN_FREE] = "free",
	[MP_FN_POSIX_MEMALIGN] = "posix_memalign",
	[MP_FN_ALIGNED_ALLOC] = "aligned_alloc",
	[MP_FN_MEMALIGN] = "memalign",
	[MP_FN_VALLOC] = "valloc",
	[MP_FN_PVALLOC] = "pvalloc",
	[MP_FN_MMAP] = "mmap",
	[MP_FN_MUNMAP] = "munmap",
	[MP_FN_MREMAP] = "mremap",
	[MP_FN_BRK] = "brk",
};

struct probe {
	struct mp_probe_info info;
	char *name;
	char *path;
	char *root_path; /* what the kernel opens */
	struct bpf_link *entry, *ret; /* perf-event uprobes */
	bool is_free; /* mp_free only, no return probe */
	bool is_pool; /* mp_pool_entry/mp_pool_return */
	uint64_t cookie;
};

/* Multi-uprobe links: one per (object, program), see attach_multi(). */
#define MP_MAX_MULTI (4 * (MP_MAX_PROBES + 1))

struct mp_tracer {
	struct mp_tracer_opts opts;
	struct mp_tracer_func extra[MP_TRACER_MAX_EXTRA];
	struct memprof_bpf *skel;
	struct ring_buffer *rb;
	/* The ring buffer's consumer and producer positions, mapped read-only
	 * (mp_tracer_drained(); libbpf 1.1 has no accessor). NULL: unknown. */
	const uint64_t *rb_pos[2];
	size_t rb_page;
	/* The stack of the event being delivered (NULL outside). */
	const struct mp_raw_stack_view *cur_stack;
	/* The path of the MP_RAW_OBJECT being delivered (NULL outside). */
	const char *cur_path;
	/* The system-wide programs run through the hub (hub.h). */
	bool in_hub;
	uint32_t hub_slot;
	struct probe probes[MP_MAX_PROBES];
	struct bpf_link *hint_link;
	struct bpf_link *dl_link; /* _dl_debug_state (mp_dl_state) */
	bool multi; /* uprobe_multi links instead of perf-event uprobes */
	int multi_fds[MP_MAX_MULTI];
	size_t n_multi;
	struct mp_probe_info infos[MP_MAX_PROBES];
	size_t n_probes;
	int pidfd, epfd;
	bool exited, exec_pending;
	/* duty cycle; duty.on: the allocator probes are attached */
	int dutyfd;
	struct mp_duty duty;
	/* during consume */
	mp_raw_cb cb;
	void *cb_ctx;
	int cb_err;
	int n_delivered;
	uint64_t delivered_total; /* events from the ring buffer, ever */
	uint64_t n_heap_events; /* allocator events since attach */
	/* mp_tracer_detach_begin(): the thread detaching the probes */
	pthread_t detach_th;
	bool detaching;
	/* release_in_child(): the write end the grandchild waits on */
	int release_go;
	bool handed_off;
};

const char *mp_alloc_fn_name(uint32_t fn)
{
	if (fn < MP_FN_BUILTIN_COUNT && fn_names[fn])
		return fn_names[fn];
	return "custom";
}

const char *mp_tracer_fn_name(const struct mp_tracer *t, uint32_t fn)
{
	if (fn >= MP_FN_CUSTOM && fn - MP_FN_CUSTOM < t->opts.n_extra)
		return t->extra[fn - MP_FN_CUSTOM].name;
	return mp_alloc_fn_name(fn);
}

/* The stack of the threads that close links: a thread's static TLS comes
 * out of its stack, and the daemon's is 70 KiB (collect.c, sampling.c):
 * pthread_create() refuses a smaller stack (64 KiB did, and every link
 * was then closed one after the other). Address space only. */
#define CLOSER_STACK (1u << 20)

static void *close_thread(void *arg)
{
	close((int)(intptr_t)arg);
	return NULL;
}

/*
 * Releasing a multi-uprobe link waits for an RCU-tasks-trace grace period
 * (tens of ms); releases made concurrently share grace periods, so each
 * link is closed in a thread of its own. (Perf-event uprobes cannot be
 * helped this way: their release holds the kernel's event_mutex across
 * three grace periods, 80-230 ms per probe, one after the other.)
 */
static void close_parallel(int *fds, size_t n)
{
	pthread_t th[MP_MAX_MULTI];
	bool started[MP_MAX_MULTI] = { false };
	pthread_attr_t attr;
	bool attr_ok = pthread_attr_init(&attr) == 0;

	if (attr_ok)
		pthread_attr_setstacksize(&attr, CLOSER_STACK);
	for (size_t i = 0; i < n && i < MP_MAX_MULTI; i++) {
		if (fds[i] < 0)
			continue;
		if (n > 1 && pthread_create(&th[i], attr_ok ? &attr : NULL, close_thread,
					    (void *)(intptr_t)fds[i]) == 0)
			started[i] = true;
		else
			close(fds[i]);
		fds[i] = -1;
	}
	for (size_t i = 0; i < n && i < MP_MAX_MULTI; i++)
		if (started[i])
			pthread_join(th[i], NULL);
	if (attr_ok)
		pthread_attr_destroy(&attr);
}

/* The links closed; what was probed (mp_tracer_probes()) stays known: the
 * detach thread runs this while the session still reads it. */
static void close_links(struct mp_tracer *t)
{
	close_parallel(t->multi_fds, t->n_multi);
	t->n_multi = 0;
	for (size_t i = 0; i < t->n_probes; i++) {
		bpf_link__destroy(t->probes[i].entry);
		bpf_link__destroy(t->probes[i].ret);
		t->probes[i].entry = t->probes[i].ret = NULL;
	}
	bpf_link__destroy(t->hint_link);
	t->hint_link = NULL;
	bpf_link__destroy(t->dl_link);
	t->dl_link = NULL;
}

/* Every open link's fd, at most @max. */
static size_t link_fds(const struct mp_tracer *t, int *fds, size_t max)
{
	size_t n = 0;

#define ADD_FD(fd)                       \
	do {                             \
		int fd_ = (fd);          \
		if (fd_ >= 0 && n < max) \
			fds[n++] = fd_;  \
	} while (0)
	for (size_t i = 0; i < t->n_multi; i++)
		ADD_FD(t->multi_fds[i]);
	for (size_t i = 0; i < t->n_probes; i++) {
		if (t->probes[i].entry)
			ADD_FD(bpf_link__fd(t->probes[i].entry));
		if (t->probes[i].ret)
			ADD_FD(bpf_link__fd(t->probes[i].ret));
	}
	if (t->hint_link)
		ADD_FD(bpf_link__fd(t->hint_link));
	if (t->dl_link)
		ADD_FD(bpf_link__fd(t->dl_link));
#undef ADD_FD
	return n;
}

/* The links handed to a process that releases them: the holder started
 * early (mp_release_to_holder()), else a grandchild forked now
 * (mp_release_in_child()); false when neither could be done. */
static bool release_in_child(struct mp_tracer *t)
{
	int fds[MP_MAX_MULTI + 2 * MP_MAX_PROBES + 2];
	size_t n = link_fds(t, fds, ARRAY_SIZE(fds));

	if (!n)
		return false;
	t->release_go = mp_release_to_holder(fds, n);
	if (t->release_go < 0)
		t->release_go = mp_release_in_child(fds, n);
	return t->release_go >= 0;
}

static void detach_probes(struct mp_tracer *t)
{
	close_links(t);
	for (size_t i = 0; i < t->n_probes; i++) {
		free(t->probes[i].name);
		free(t->probes[i].path);
		free(t->probes[i].root_path);
	}
	memset(t->probes, 0, sizeof(t->probes));
	t->n_probes = 0;
}

/* The links handed to a grandchild that releases them, and ours closed
 * (cheap: they are not the last references); false when not asked for or
 * the grandchild could not be started. */
static bool hand_off_links(struct mp_tracer *t)
{
	if (!t->opts.release_in_child || !release_in_child(t))
		return false;
	close_links(t);
	close(t->release_go);
	t->release_go = -1;
	t->handed_off = true;
	return true;
}

static void *detach_thread(void *arg)
{
	close_links(arg);
	return NULL;
}

void mp_tracer_detach_begin(struct mp_tracer *t)
{
	pthread_attr_t attr;
	bool attr_ok;

	if (!t || t->detaching || (!t->n_multi && !t->n_probes && !t->hint_link && !t->dl_link))
		return;
	if (hand_off_links(t))
		return;
	attr_ok = pthread_attr_init(&attr) == 0;
	if (attr_ok)
		pthread_attr_setstacksize(&attr, CLOSER_STACK);
	t->detaching = pthread_create(&t->detach_th, attr_ok ? &attr : NULL, detach_thread, t) == 0;
	if (attr_ok)
		pthread_attr_destroy(&attr);
}

bool mp_tracer_detaching(const struct mp_tracer *t)
{
	return t->detaching || t->handed_off;
}

void mp_tracer_free(struct mp_tracer *t)
{
	if (!t)
		return;
	if (t->detaching)
		pthread_join(t->detach_th, NULL);
	if (!t->detaching)
		(void)hand_off_links(t);
	detach_probes(t);
	if (t->in_hub)
		mp_hub_remove(t->opts.pid, t->hub_slot);
	ring_buffer__free(t->rb);
	for (int i = 0; i < 2; i++)
		if (t->rb_pos[i])
			munmap((void *)t->rb_pos[i], t->rb_page);
	memprof_bpf__destroy(t->skel);
	if (t->epfd >= 0)
		close(t->epfd);
	if (t->pidfd >= 0)
		close(t->pidfd);
	if (t->dutyfd >= 0)
		close(t->dutyfd);
	free(t);
}

static int cs_reg_of_arg(uint32_t arg)
{
	static const int regs[] = { X86_REG_RDI, X86_REG_RSI, X86_REG_RDX,
				    X86_REG_RCX, X86_REG_R8,  X86_REG_R9 };

	return arg < 6 ? regs[arg] : X86_REG_INVALID;
}

/*
 * Where a free-like entry probe can go instead of the function entry; see
 * docs/TRACER.md for why each accepted pattern is equivalent. Only
 * instructions that change nothing but flags (test) or nothing at all
 * (endbr64) may be skipped, so the stack pointer — and the return address at
 * *sp — is the same as at entry; the only path around the probe point is
 * "pointer == NULL", which is not an event.
 */
/* Does any direct jump or call in @code (the whole function) land on
 * @target? Undecodable code counts as yes: nothing is proven then. */
static bool jumped_to(csh h, const uint8_t *code, size_t len, uint64_t target)
{
	cs_insn *insn = NULL;
	size_t n = cs_disasm(h, code, len, 0, 0, &insn), covered = 0;
	bool hit = false;

	for (size_t i = 0; i < n && !hit; i++) {
		const cs_x86 *x = &insn[i].detail->x86;

		covered = insn[i].address + insn[i].size;
		if (!cs_insn_group(h, &insn[i], CS_GRP_JUMP) &&
		    !cs_insn_group(h, &insn[i], CS_GRP_CALL))
			continue;
		for (uint8_t k = 0; k < x->op_count; k++)
			if (x->operands[k].type == X86_OP_IMM &&
			    (uint64_t)x->operands[k].imm == target)
				hit = true;
	}
	if (n)
		cs_free(insn, n);
	return hit || covered != len;
}

uint64_t mp_tracer_place_free_probe(const uint8_t *code, size_t len, uint32_t ptr_arg)
{
	csh h;
	cs_insn *insn = NULL;
	size_t n, i = 0;
	uint64_t delta = 0;
	int reg = cs_reg_of_arg(ptr_arg);

	if (reg == X86_REG_INVALID || cs_open(CS_ARCH_X86, CS_MODE_64, &h))
		return 0;
	cs_option(h, CS_OPT_DETAIL, CS_OPT_ON);
	n = cs_disasm(h, code, len, 0, 4, &insn);
	if (i < n && insn[i].id == X86_INS_ENDBR64) {
		delta = insn[i].address + insn[i].size;
		i++;
	}
	if (i + 1 < n && insn[i].id == X86_INS_TEST && insn[i].detail->x86.op_count == 2 &&
	    insn[i].detail->x86.operands[0].type == X86_OP_REG &&
	    insn[i].detail->x86.operands[1].type == X86_OP_REG &&
	    insn[i].detail->x86.operands[0].reg == (x86_reg)reg &&
	    insn[i].detail->x86.operands[1].reg == (x86_reg)reg && insn[i + 1].id == X86_INS_JE)
		delta = insn[i + 1].address + insn[i + 1].size;
	if (n)
		cs_free(insn, n);
	/* A jump back to the probe point would hit it twice per call. */
	if (delta && jumped_to(h, code, len, delta))
		delta = 0;
	cs_close(&h);
	return delta;
}

static int attach_one(struct mp_tracer *t, struct mp_symbols *syms, uint32_t fn, const char *name,
		      const char *object, uint32_t kind, uint32_t a, uint32_t b, uint32_t c)
{
	LIBBPF_OPTS(bpf_uprobe_opts, uo);
	struct mp_symbol sym;
	struct probe *p;
	uint64_t delta = 0;
	int r;

	if (t->n_probes >= MP_MAX_PROBES)
		return -E2BIG;
	r = mp_symbols_lookup(syms, name, object, &sym);
	if (r < 0)
		return r;
	p = &t->probes[t->n_probes];
	p->info.fn = fn;
	p->info.offset = sym.offset;
	p->info.alias_of = -1;
	p->name = strdup(name);
	p->path = strdup(sym.path);
	p->root_path = strdup(sym.root_path);
	if (!p->name || !p->path || !p->root_path) {
		free(p->name);
		free(p->path);
		free(p->root_path);
		p->name = p->path = p->root_path = NULL;
		return -ENOMEM;
	}
	p->info.name = p->name;
	p->info.path = p->path;
	t->n_probes++;
	for (size_t i = 0; i + 1 < t->n_probes; i++) {
		if (t->probes[i].info.offset == sym.offset &&
		    !strcmp(t->probes[i].info.path, sym.path)) {
			/* Two probes at one address would both fire. */
			p->info.alias_of = (int)i;
			return 0;
		}
	}
	if (kind == MP_KIND_FREE && fn == MP_FN_FREE && !t->opts.naive_placement) {
		uint8_t code[64];
		size_t len;

		if (mp_symbols_read_code(syms, &sym, code, sizeof(code), &len) == 0)
			delta = mp_tracer_place_free_probe(code, len, a);
	}
	p->info.probe_delta = delta;
	p->is_free = kind == MP_KIND_FREE && fn == MP_FN_FREE;
	p->is_pool = kind == MP_KIND_POOL;
	/* pool functions: @c holds the MP_POOL_F_* flags */
	p->cookie = p->is_pool ? MP_POOL_COOKIE(fn, a, b, c) : MP_COOKIE(fn, kind, a, b, c, 0);
	/* Multi-uprobe links are made per object once every probe is known. */
	if (t->multi)
		return 0;
	uo.bpf_cookie = p->cookie;
	/* Builtin free needs no return probe; a custom free may be built on
	 * free, so it is tracked from entry to return like an allocation,
	 * which makes the inner free a nested call. */
	if (kind == MP_KIND_FREE && fn == MP_FN_FREE) {
		p->entry = bpf_program__attach_uprobe_opts(t->skel->progs.mp_free, t->opts.pid,
							   sym.root_path, sym.offset + delta, &uo);
		if (!p->entry)
			return -errno;
		return 0;
	}
	/* Return probe first, see attach_multi(). */
	uo.retprobe = true;
	p->ret = bpf_program__attach_uprobe_opts(p->is_pool ? t->skel->progs.mp_pool_return :
							      t->skel->progs.mp_return,
						 t->opts.pid, sym.root_path, sym.offset, &uo);
	if (!p->ret)
		return -errno;
	uo.retprobe = false;
	p->entry = bpf_program__attach_uprobe_opts(p->is_pool ? t->skel->progs.mp_pool_entry :
								t->skel->progs.mp_entry,
						   t->opts.pid, sym.root_path, sym.offset, &uo);
	if (!p->entry)
		return -errno;
	return 0;
}

/* BPF_LINK_CREATE for BPF_TRACE_UPROBE_MULTI (kernel 6.6+), which libbpf
 * 1.1 does not know: the link_create layout of union bpf_attr. */
struct uprobe_multi_attr {
	uint32_t prog_fd;
	uint32_t target_fd;
	uint32_t attach_type;
	uint32_t flags;
	uint64_t path;
	uint64_t offsets;
	uint64_t ref_ctr_offsets;
	uint64_t cookies;
	uint32_t cnt;
	uint32_t um_flags;
	uint32_t pid;
	uint32_t pad;
};

#define MP_BPF_LINK_CREATE 28
#define MP_BPF_TRACE_UPROBE_MULTI 48
#define MP_BPF_F_UPROBE_MULTI_RETURN 1

static int link_uprobe_multi(struct mp_tracer *t, struct bpf_program *prog, const char *path,
			     const uint64_t *offsets, const uint64_t *cookies, uint32_t cnt,
			     bool retprobe)
{
	struct uprobe_multi_attr a = {
		.prog_fd = (uint32_t)bpf_program__fd(prog),
		.attach_type = MP_BPF_TRACE_UPROBE_MULTI,
		.path = (uint64_t)(uintptr_t)path,
		.offsets = (uint64_t)(uintptr_t)offsets,
		.cookies = (uint64_t)(uintptr_t)cookies,
		.cnt = cnt,
		.um_flags = retprobe ? MP_BPF_F_UPROBE_MULTI_RETURN : 0,
		.pid = (uint32_t)t->opts.pid,
	};
	int fd = (int)syscall(__NR_bpf, MP_BPF_LINK_CREATE, &a, sizeof(a));

	return fd < 0 ? -errno : fd;
}

/* One link per (object, program) for every probe recorded by attach_one(). */
static int attach_multi(struct mp_tracer *t)
{
	bool done[MP_MAX_PROBES] = { false };

	for (size_t i = 0; i < t->n_probes; i++) {
		uint64_t offs[3][MP_MAX_PROBES], cookies[3][MP_MAX_PROBES];
		/* [0] allocation functions, [1] free, [2] pool functions */
		uint32_t n[3] = { 0, 0, 0 };

		if (done[i] || t->probes[i].info.alias_of >= 0)
			continue;
		for (size_t j = i; j < t->n_probes; j++) {
			struct probe *p = &t->probes[j];
			int k = p->is_pool ? 2 : p->is_free;

			if (done[j] || p->info.alias_of >= 0 ||
			    strcmp(p->root_path, t->probes[i].root_path))
				continue;
			done[j] = true;
			offs[k][n[k]] = p->info.offset + p->info.probe_delta;
			cookies[k][n[k]++] = p->cookie;
		}
		for (int k = 0; k < 3; k++) {
			/* Return probes first: a call whose entry is seen
			 * must have its return seen too, or it would stay
			 * "in progress" and make every later call at the same
			 * depth look nested (nothing would be reported). */
			struct bpf_program *progs[3][2] = {
				{ t->skel->progs.mp_return, t->skel->progs.mp_entry },
				{ t->skel->progs.mp_free, NULL },
				{ t->skel->progs.mp_pool_return, t->skel->progs.mp_pool_entry },
			};

			if (!n[k])
				continue;
			for (int r = 0; r < 2 && progs[k][r]; r++) {
				int fd;

				if (t->n_multi >= MP_MAX_MULTI)
					return -E2BIG;
				fd = link_uprobe_multi(t, progs[k][r], t->probes[i].root_path,
						       offs[k], cookies[k], n[k], k != 1 && r == 0);
				if (fd < 0)
					return fd;
				t->multi_fds[t->n_multi++] = fd;
			}
		}
	}
	return 0;
}

/* Cookie arguments of a pool function: ptr argument, size argument, flags. */
static void pool_probe_args(const struct mp_tracer_func *f, uint32_t *ret_a, uint32_t *ret_b,
			    uint32_t *ret_flags)
{
	uint32_t flags = 0;

	if (f->is_free) {
		*ret_a = f->arg;
		flags |= MP_POOL_F_FREE | MP_POOL_F_NO_SIZE;
	} else {
		*ret_a = f->ptr_arg;
		if (f->ptr == MP_FUNC_PTR_OUT)
			flags |= MP_POOL_F_DEREF;
		else
			flags |= MP_POOL_F_PTR_RET;
	}
	*ret_b = f->is_free ? 0 : f->arg;
	if (f->ok == MP_FUNC_OK_ZERO)
		flags |= MP_POOL_F_OK_ZERO;
	else if (f->ok == MP_FUNC_OK_NONZERO)
		flags |= MP_POOL_F_OK_NONZERO;
	*ret_flags = flags;
}

/* Best effort: the dynamic loader's notice of every load (bpf/memprof.bpf.c
 * mp_dl_state), where _r_debug is the loader's own (not copied into the
 * executable). Without it, objects loaded later are found in /proc while
 * the process lives. */
static void attach_dl_state(struct mp_tracer *t, struct mp_symbols *syms)
{
	struct mp_symbol fn, data;

	if (mp_symbols_lookup(syms, "_dl_debug_state", NULL, &fn) < 0 ||
	    mp_symbols_lookup_data(syms, "_r_debug", NULL, &data) < 0 || fn.object != data.object)
		return;
	t->skel->bss->r_debug_delta = (int64_t)(data.vaddr - fn.vaddr);
	if (t->multi) {
		uint64_t off = fn.offset, cookie = 0;
		int fd = link_uprobe_multi(t, t->skel->progs.mp_dl_state, fn.root_path, &off,
					   &cookie, 1, false);

		if (fd >= 0 && t->n_multi < MP_MAX_MULTI)
			t->multi_fds[t->n_multi++] = fd;
		else if (fd >= 0)
			close(fd);
		return;
	}
	t->dl_link = bpf_program__attach_uprobe_opts(t->skel->progs.mp_dl_state, t->opts.pid,
						     fn.root_path, fn.offset, NULL);
}

static int attach_probes(struct mp_tracer *t, struct mp_symbols *syms)
{
	struct mp_symbol sym;
	int r;

	for (size_t i = 0; i < sizeof(builtins) / sizeof(builtins[0]) && !t->opts.no_heap_probes;
	     i++) {
		const struct builtin *b = &builtins[i];

		r = attach_one(t, syms, b->fn, b->name, NULL, b->kind, b->a, b->b, b->c);
		/* An allocator need not provide every entry point, but
		 * without malloc and free there is nothing to trace. */
		if (r == -ENOENT && b->fn != MP_FN_MALLOC && b->fn != MP_FN_FREE)
			continue;
		if (r < 0)
			return r;
	}
	for (size_t i = 0; i < t->opts.n_extra; i++) {
		const struct mp_tracer_func *f = &t->extra[i];
		uint32_t kind = f->is_free ? MP_KIND_FREE : MP_KIND_ALLOC, a = f->arg, b = 0, c = 0;

		if (f->pool[0]) {
			kind = MP_KIND_POOL;
			pool_probe_args(f, &a, &b, &c);
		} else if (f->ptr == MP_FUNC_PTR_OUT) {
			/* posix_memalign's shape, on the heap */
			kind = MP_KIND_MEMALIGN_OUT;
			a = f->ptr_arg;
			c = f->arg;
		}
		r = attach_one(t, syms, MP_FN_CUSTOM + (uint32_t)i, f->name,
			       f->object[0] ? f->object : NULL, kind, a, b, c);
		if (r == -ENOENT && f->optional)
			continue;
		if (r < 0)
			return r == -ENOENT ? -ENXIO : r;
	}
	for (size_t i = 0; i < t->n_probes; i++)
		t->infos[i] = t->probes[i].info;
	if (t->multi) {
		r = attach_multi(t);
		if (r < 0)
			return r;
	}
	/* Best effort: without it mremap's caller is a word of its frame. */
	if (mp_symbols_lookup(syms, "mremap", NULL, &sym) == 0) {
		if (t->multi) {
			uint64_t off = sym.offset, cookie = 0;
			int fd = link_uprobe_multi(t, t->skel->progs.mp_caller_hint, sym.root_path,
						   &off, &cookie, 1, false);

			if (fd >= 0)
				t->multi_fds[t->n_multi++] = fd;
		} else {
			t->hint_link = bpf_program__attach_uprobe_opts(
				t->skel->progs.mp_caller_hint, t->opts.pid, sym.root_path,
				sym.offset, NULL);
		}
	}
	attach_dl_state(t, syms);
	return 0;
}

/* Resolve and attach; right after an exec, wait (bounded) for the dynamic
 * loader to map every needed object first. */
static int resolve_and_attach(struct mp_tracer *t, bool after_exec)
{
	uint64_t deadline = mp_now_ns() + MP_EXEC_SETTLE_NS;
	struct mp_symbols *syms = NULL;
	int r;

	for (;;) {
		r = mp_symbols_new(t->opts.pid, &syms);
		if (r < 0)
			return r == -ENOENT ? -ESRCH : r;
		if (!after_exec || mp_symbols_complete(syms) || mp_now_ns() > deadline)
			break;
		mp_symbols_free(syms);
		syms = NULL;
		usleep(1000);
	}
	r = attach_probes(t, syms);
	/* Calls in progress while the probes were (re)attached may lack
	 * their return probe: a new generation makes their state stale. */
	__atomic_add_fetch(&t->skel->bss->attach_gen, 1, __ATOMIC_SEQ_CST);
	mp_symbols_free(syms);
	if (r < 0)
		detach_probes(t);
	return r;
}

uint64_t mp_tracer_sample_estimate(uint64_t size, uint64_t interval)
{
	double p;

	if (!interval || size >= interval || !size)
		return size;
	/* Probability that a Poisson process of rate 1/interval puts a
	 * sample point in @size bytes. */
	p = -expm1(-(double)size / (double)interval);
	return (uint64_t)llround((double)size / p);
}

/* E[-ln U | U in ((i)/n, (i+1)/n)] in 16.16: the antiderivative of -ln u
 * is u - u ln u. Exact conditional means keep the mean draw at 1. */
static void fill_exp_table(volatile uint32_t *tab, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		double a = (double)i / (double)n, b = (double)(i + 1) / (double)n;
		double fa = a > 0 ? a - a * log(a) : 0, fb = b - b * log(b);

		tab[i] = (uint32_t)llround((fb - fa) / (b - a) * 65536.0);
	}
}

const struct mp_raw_stack_view *mp_tracer_stack(const struct mp_tracer *t)
{
	return t->cur_stack;
}

const char *mp_tracer_object_path(const struct mp_tracer *t)
{
	return t->cur_path;
}

/* The registers and stack slice after the event of a stack record. */
static bool stack_view(const void *data, size_t size, struct mp_raw_stack_view *ret)
{
	struct mp_raw_stack st;

	if (size < sizeof(struct mp_raw_event) + sizeof(st))
		return false;
	memcpy(&st, (const char *)data + sizeof(struct mp_raw_event), sizeof(st));
	if (st.len > size - sizeof(struct mp_raw_event) - sizeof(st))
		return false;
	*ret = (struct mp_raw_stack_view){ .ip = st.ip,
					   .sp = st.sp,
					   .bp = st.bp,
					   .bytes = (const char *)data +
						    sizeof(struct mp_raw_event) + sizeof(st),
					   .len = st.len };
	return true;
}

static int on_sample(void *ctx, void *data, size_t size)
{
	struct mp_tracer *t = ctx;
	struct mp_raw_stack_view sv;
	struct mp_raw_event ev;
	int r;

	if (size < sizeof(ev))
		return 0;
	memcpy(&ev, data, sizeof(ev));
	if (ev.type & MP_RAW_F_STACK) {
		ev.type &= ~MP_RAW_F_STACK;
		if (stack_view(data, size, &sv))
			t->cur_stack = &sv;
	}
	if (ev.type & MP_RAW_F_SCALED) {
		ev.type &= ~MP_RAW_F_SCALED;
		ev.size = mp_tracer_sample_estimate(ev.size, t->opts.sample_bytes);
		if (t->opts.mark_scaled)
			ev.fn |= MP_LIVE_FN_SCALED;
	}
	if (ev.type == MP_RAW_EXEC)
		t->exec_pending = true;
	if (ev.type == MP_RAW_OBJECT) {
		/* the target wrote the path: bounded, NUL-terminated here */
		size_t room = size - sizeof(ev);

		if (size <= sizeof(ev) || room > MP_OBJECT_PATH_MAX ||
		    !memchr((const char *)data + sizeof(ev), '\0', room))
			return 0;
		t->cur_path = (const char *)data + sizeof(ev);
	}
	if (ev.type == MP_RAW_ALLOC || ev.type == MP_RAW_FREE || ev.type == MP_RAW_REALLOC)
		t->n_heap_events++;
	t->n_delivered++;
	t->delivered_total++;
	r = t->cb ? t->cb(t->cb_ctx, &ev) : 0;
	t->cur_stack = NULL;
	t->cur_path = NULL;
	if (r < 0) {
		t->cb_err = r;
		return r;
	}
	return 0;
}

static int pidfd_open_(pid_t pid)
{
	return (int)syscall(SYS_pidfd_open, pid, 0);
}

static int check_target(pid_t pid)
{
	char path[64], buf[4096];
	FILE *f;
	int tgid = -1;

	if (pid <= 0)
		return -EINVAL;
	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "re");
	if (!f)
		return errno == ENOENT ? -ESRCH : -errno;
	while (fgets(buf, sizeof(buf), f))
		if (sscanf(buf, "Tgid: %d", &tgid) == 1)
			break;
	fclose(f);
	/* Probes filter on the process; a thread id would be a surprise. */
	return tgid == pid ? 0 : -EINVAL;
}

/* PROC_PID_INIT_INO of include/linux/proc_ns.h: fixed by the kernel. */
#define MP_PID_INIT_INO 0xEFFFFFFCULL

/*
 * The daemon's pid namespace when it is not the initial one (a container,
 * `unshare -p`): the target's pid is then a pid of that namespace, and the
 * BPF programs translate the initial-namespace ids they see. 0 in *ret_ino:
 * the initial namespace, nothing to translate.
 */
static int own_pidns(uint64_t *ret_dev, uint64_t *ret_ino)
{
	struct stat st;

	if (stat("/proc/self/ns/pid", &st) < 0)
		return -errno;
	*ret_dev = (uint64_t)st.st_dev;
	*ret_ino = (uint64_t)st.st_ino == MP_PID_INIT_INO ? 0 : (uint64_t)st.st_ino;
	return 0;
}

/* What the running kernel offers, read once from its BTF. */
/* The duty timer expired: switch the allocator probes off or on. Frees of
 * blocks allocated in an ON window are missed while OFF (see TRACER.md). */
static int duty_toggle(struct mp_tracer *t)
{
	uint64_t exp, now = mp_now_ns();
	int r;

	if (read(t->dutyfd, &exp, sizeof(exp)) != sizeof(exp))
		return 0;
	if (t->duty.on) {
		detach_probes(t);
		return mp_timer_arm(t->dutyfd, mp_duty_switched_off(&t->duty, now), 0);
	}
	r = resolve_and_attach(t, false);
	if (r < 0 && r != -ENOENT)
		return r;
	return mp_timer_arm(t->dutyfd, mp_duty_switched_on(&t->duty, mp_now_ns()), 0);
}

uint32_t mp_tracer_ring_bytes(uint32_t mode, uint32_t configured)
{
	if (configured)
		return configured;
	return mode == MP_TRACE_RSS ? MP_TRACER_RSS_RING_BYTES : MP_TRACER_RING_BYTES;
}

/* A CO-RE candidate vmlinux lacks (struct mm_rss_stat___old on kernels >=
 * 6.2) sends libbpf < 1.2 through the module BTFs, whose iteration
 * (BPF_BTF_GET_NEXT_ID) needs CAP_SYS_ADMIN: the service has no such
 * capability, and its default mode, rss, failed to load (found by
 * tests/systemd). Without CAP_SYS_ADMIN, relocations go against vmlinux's
 * BTF alone (btf_custom_path: libbpf then never looks at modules). With
 * it, libbpf's default is kept: the custom path costs a second parse of
 * vmlinux's BTF per load (~10 MiB of heap while loading). */
static const char *core_btf_path(void)
{
	struct __user_cap_header_struct h = { .version = _LINUX_CAPABILITY_VERSION_3 };
	struct __user_cap_data_struct d[_LINUX_CAPABILITY_U32S_3];

	if (syscall(SYS_capget, &h, d) == 0 && (d[0].effective & (1u << CAP_SYS_ADMIN)))
		return NULL;
	return access(MP_VMLINUX_BTF, R_OK) == 0 ? MP_VMLINUX_BTF : NULL;
}

/* The skeleton opened and configured through its rodata and map sizes,
 * not loaded yet. */
static int tracer_open(struct mp_tracer *t)
{
	const struct mp_tracer_opts *opts = &t->opts;
	LIBBPF_OPTS(bpf_object_open_opts, open_opts, .btf_custom_path = core_btf_path());
	int r;

	t->skel = memprof_bpf__open_opts(&open_opts);
	if (!t->skel)
		return -errno;
	t->skel->rodata->target_tgid = (uint32_t)opts->pid;
	{
		uint64_t ns_dev = 0, ns_ino = 0;

		r = own_pidns(&ns_dev, &ns_ino);
		if (r < 0)
			return r;
		t->skel->rodata->pidns_dev = ns_dev;
		t->skel->rodata->pidns_ino = ns_ino;
	}
	if (opts->mode > MP_TRACE_RSS || (opts->mode == MP_TRACE_SAMPLED && !opts->sample_bytes) ||
	    (opts->sample_bytes >> 40) || !mp_duty_valid(opts->duty_on_ns, opts->duty_period_ns))
		return -EINVAL;
	if (opts->mode == MP_TRACE_SAMPLED) {
		t->skel->rodata->sample_bytes = opts->sample_bytes;
		fill_exp_table(t->skel->rodata->exp_table, MP_EXP_TABLE);
		/* on the in-process path only --alloc functions' blocks */
		r = bpf_map__set_max_entries(t->skel->maps.sampled,
					     opts->sampled_max	   ? opts->sampled_max :
					     !opts->no_heap_probes ? MP_TRACER_SAMPLED_MAX :
					     opts->n_extra	   ? MP_TRACER_SAMPLED_MAX_EXTRA :
								     1);
		if (r < 0)
			return r;
	}
	t->skel->rodata->trace_brk = opts->mode == MP_TRACE_RSS;
	if (opts->stack_bytes > MP_STACK_MAX_BYTES)
		return -EINVAL;
	if (opts->stack_bytes && opts->mode != MP_TRACE_RSS) {
		int ncpu = libbpf_num_possible_cpus();

		t->skel->rodata->stack_bytes = opts->stack_bytes;
		r = ncpu < 0 ? ncpu : bpf_map__set_max_entries(t->skel->maps.stackbuf, ncpu);
		if (r < 0)
			return r;
	}
	if (opts->wrap_stack_bytes > MP_STACK_MAX_BYTES)
		return -EINVAL;
	if (opts->wrap_stack_bytes && !opts->stack_bytes && opts->mode != MP_TRACE_RSS) {
		int ncpu = libbpf_num_possible_cpus();

		t->skel->rodata->wrap_stack_bytes = opts->wrap_stack_bytes;
		r = ncpu < 0 ? ncpu : bpf_map__set_max_entries(t->skel->maps.stackbuf, ncpu);
		if (r < 0)
			return r;
	}
	if (opts->mode == MP_TRACE_RSS)
		t->opts.rss_exact = true;
	t->skel->rodata->page_size = (__u32)getpagesize();
	/* The members userspace names (enum mp_rss_member) are the first 4. */
	t->skel->rodata->nr_mm_counters =
		mp_kernel_facts()->nr_mm_counters < 4 ? mp_kernel_facts()->nr_mm_counters : 4;
	if (t->opts.rss_exact && !mp_kernel_facts()->rss_stat)
		return -EOPNOTSUPP;
	t->multi = !opts->perf_uprobes && mp_kernel_facts()->uprobe_multi;
	if (t->multi) {
		struct bpf_program *up[] = {
			t->skel->progs.mp_entry,      t->skel->progs.mp_return,
			t->skel->progs.mp_free,	      t->skel->progs.mp_caller_hint,
			t->skel->progs.mp_pool_entry, t->skel->progs.mp_pool_return,
			t->skel->progs.mp_dl_state
		};

		for (size_t i = 0; i < ARRAY_SIZE(up); i++)
			bpf_program__set_expected_attach_type(up[i], MP_BPF_TRACE_UPROBE_MULTI);
	}
	if (mp_tracer_ring_bytes(opts->mode, opts->ring_bytes) != MP_TRACER_RING_BYTES) {
		uint32_t rb = mp_tracer_ring_bytes(opts->mode, opts->ring_bytes);

		if (rb < (uint32_t)getpagesize() || (rb & (rb - 1)))
			return -EINVAL;
		r = bpf_map__set_max_entries(t->skel->maps.events, rb);
		if (r < 0)
			return r;
		if (t->skel->rodata->wakeup_bytes > rb / 4)
			t->skel->rodata->wakeup_bytes = rb / 4;
	}
	bpf_program__set_autoload(t->skel->progs.mp_rss_stat, t->opts.rss_exact);
	if ((opts->no_heap_probes || opts->mode == MP_TRACE_RSS)) {
		bpf_program__set_autoload(t->skel->progs.mp_entry, false);
		bpf_program__set_autoload(t->skel->progs.mp_return, false);
		bpf_program__set_autoload(t->skel->progs.mp_free, false);
	}
	if (!opts->n_extra || opts->mode == MP_TRACE_RSS) {
		bpf_program__set_autoload(t->skel->progs.mp_pool_entry, false);
		bpf_program__set_autoload(t->skel->progs.mp_pool_return, false);
	}
	return 0;
}

/* The system-wide tracepoint programs run through the daemon's hub (one
 * attachment per hook for all targets), not attached one set per target:
 * N sets would all run on every syscall and page fault of the machine
 * (docs/TRACER.md, "Many targets"). */
/* How the hub is loaded when it is not: 0 or the error of reading the
 * daemon's pid namespace. */
static int hub_opts(struct mp_hub_load_opts *lo)
{
	uint64_t ns_dev = 0, ns_ino = 0;
	int r = own_pidns(&ns_dev, &ns_ino);

	*lo = (struct mp_hub_load_opts){
		.btf_custom_path = core_btf_path(),
		.rss_stat = mp_kernel_facts()->rss_stat,
		.pidns_dev = ns_dev,
		.pidns_ino = ns_ino,
	};
	return r;
}

static int hub_register(struct mp_tracer *t)
{
	struct mp_hub_load_opts lo;
	struct mp_hub_progs progs = {
		.sys_enter = bpf_program__fd(t->skel->progs.mp_sys_enter),
		.sys_exit = bpf_program__fd(t->skel->progs.mp_sys_exit),
		.exec = bpf_program__fd(t->skel->progs.mp_exec),
		.rss_stat = t->opts.rss_exact ? bpf_program__fd(t->skel->progs.mp_rss_stat) : -1,
	};
	int r = hub_opts(&lo);

	if (r < 0)
		return r;
	r = mp_hub_add(&lo, t->opts.pid, &progs, &t->hub_slot);
	if (r < 0)
		return r;
	t->in_hub = true;
	return 0;
}

/* The hub loaded (when it is not) in a thread of its own while the
 * tracer's programs load: two verifications and two reads of the
 * kernel's BTF side by side, ~10-15 ms off every attach here. Best effort:
 * hub_register() loads it itself otherwise. */
static void *hub_preload_thread(void *arg)
{
	struct mp_hub_load_opts lo;

	(void)arg;
	if (hub_opts(&lo) == 0)
		mp_hub_preload(&lo);
	return NULL;
}

/* The consumer page (offset 0) and the producer page (one page on) of the
 * ring buffer: read-only mappings of both are allowed. Best effort: without
 * them mp_tracer_drained() says false and the session keeps its lag. */
static void map_positions(struct mp_tracer *t)
{
	int fd = bpf_map__fd(t->skel->maps.events);

	t->rb_page = (size_t)sysconf(_SC_PAGESIZE);
	for (int i = 0; i < 2; i++) {
		void *p =
			mmap(NULL, t->rb_page, PROT_READ, MAP_SHARED, fd, (off_t)(i * t->rb_page));

		t->rb_pos[i] = p == MAP_FAILED ? NULL : p;
	}
}

/* Loaded: the process-wide programs registered with the hub, the ring
 * buffer open and, unless in rss mode, the allocator probes attached. */
static int tracer_load_attach(struct mp_tracer *t)
{
	int r;

	r = hub_register(t);
	if (r < 0)
		return r;
	t->rb = ring_buffer__new(bpf_map__fd(t->skel->maps.events), on_sample, t, NULL);
	if (!t->rb)
		return -errno;
	map_positions(t);
	if (t->opts.mode != MP_TRACE_RSS) {
		r = resolve_and_attach(t, false);
		if (r < 0)
			return r;
		mp_duty_switched_on(&t->duty, mp_now_ns());
	}
	return 0;
}

static int epoll_add_in(int epfd, int fd)
{
	struct epoll_event ee = { .events = EPOLLIN, .data.fd = fd };

	return epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ee) < 0 ? -errno : 0;
}

/* One epoll fd for the session: ring buffer, target exit, duty timer. */
static int tracer_setup_epoll(struct mp_tracer *t)
{
	const struct mp_tracer_opts *opts = &t->opts;
	int r;

	t->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (t->epfd < 0)
		return -errno;
	r = epoll_add_in(t->epfd, ring_buffer__epoll_fd(t->rb));
	if (r == 0)
		r = epoll_add_in(t->epfd, t->pidfd);
	if (r < 0 || !opts->duty_period_ns || opts->mode == MP_TRACE_RSS)
		return r;
	t->dutyfd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
	r = t->dutyfd < 0 ? -errno : mp_timer_arm(t->dutyfd, opts->duty_on_ns, 0);
	if (r == 0)
		r = epoll_add_in(t->epfd, t->dutyfd);
	return r;
}

int mp_tracer_new(const struct mp_tracer_opts *opts, struct mp_tracer **ret)
{
	struct mp_tracer *t;
	int r;

	if (opts->n_extra > MP_TRACER_MAX_EXTRA)
		return -EINVAL;
	r = check_target(opts->pid);
	if (r < 0)
		return r;
	t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->pidfd = t->epfd = t->dutyfd = t->release_go = -1;
	for (size_t i = 0; i < MP_MAX_MULTI; i++)
		t->multi_fds[i] = -1;
	t->opts = *opts;
	/* best effort: without it, the release forks at detach */
	if (opts->release_in_child)
		mp_release_holder_start();
	mp_duty_init(&t->duty, opts->duty_on_ns, opts->duty_period_ns);
	if (opts->n_extra)
		memcpy(t->extra, opts->extra, opts->n_extra * sizeof(*opts->extra));
	t->opts.extra = t->extra;

	t->pidfd = pidfd_open_(opts->pid);
	r = t->pidfd < 0 ? -errno : 0;
	if (r == 0)
		r = tracer_open(t);
	if (r == 0) {
		pthread_attr_t attr;
		pthread_t th;
		bool attr_ok = pthread_attr_init(&attr) == 0, started;

		/* libbpf takes deep stacks (its BTF walks): the default size
		 * but for the static TLS (CLOSER_STACK) */
		if (attr_ok)
			pthread_attr_setstacksize(&attr, 8 * CLOSER_STACK);
		started =
			pthread_create(&th, attr_ok ? &attr : NULL, hub_preload_thread, NULL) == 0;
		if (attr_ok)
			pthread_attr_destroy(&attr);
		r = memprof_bpf__load(t->skel);
		if (started)
			pthread_join(th, NULL);
		if (r == 0)
			r = tracer_load_attach(t);
	}
	if (r == 0)
		r = tracer_setup_epoll(t);
	if (r < 0) {
		mp_tracer_free(t);
		mp_hub_unload_unused();
		return r;
	}
	*ret = t;
	return 0;
}

int mp_tracer_fd(const struct mp_tracer *t)
{
	return t->epfd;
}

static int drain(struct mp_tracer *t)
{
	int r = ring_buffer__consume(t->rb);

	if (t->cb_err)
		return t->cb_err;
	return r < 0 ? r : 0;
}

int mp_tracer_consume(struct mp_tracer *t, mp_raw_cb cb, void *ctx)
{
	struct pollfd pfd = { .fd = t->pidfd, .events = POLLIN };
	int r;

	if (t->exited)
		return -ESRCH;
	t->cb = cb;
	t->cb_ctx = ctx;
	t->cb_err = 0;
	t->n_delivered = 0;
	r = drain(t);
	if (r < 0)
		return r;
	if (poll(&pfd, 1, 0) == 1) {
		struct mp_raw_event ev = {
			.type = MP_RAW_EXIT,
			.pid = (uint32_t)t->opts.pid,
			.tid = (uint32_t)t->opts.pid,
		};

		/* Everything the target emitted is in the ring by now. */
		r = drain(t);
		if (r < 0)
			return r;
		t->exited = true;
		/* The duty cycle's active time ends with the target. */
		mp_duty_switched_off(&t->duty, mp_now_ns());
		/* while the session builds the profile */
		mp_tracer_detach_begin(t);
		ev.ts_ns = mp_now_ns();
		t->n_delivered++;
		if (cb) {
			r = cb(ctx, &ev);
			if (r < 0)
				return r;
		}
		return t->n_delivered;
	}
	if (t->exec_pending) {
		t->exec_pending = false;
		/* With the probes off (rss mode, duty OFF) there is nothing to
		 * move; the next ON window attaches to the new image. */
		if (t->opts.mode != MP_TRACE_RSS && t->duty.on) {
			detach_probes(t);
			r = resolve_and_attach(t, true);
		} else {
			r = 0;
		}
		/* A new image without an allocator (static, no malloc) is
		 * still traced for its mappings. */
		if (r < 0 && r != -ENOENT)
			return r;
	}
	if (t->dutyfd >= 0) {
		r = duty_toggle(t);
		if (r < 0)
			return r;
	}
	return t->n_delivered;
}

void mp_tracer_set_inproc_tls(struct mp_tracer *t, int64_t tls_off)
{
	__atomic_store_n(&t->skel->bss->inproc_tls_off, tls_off, __ATOMIC_SEQ_CST);
}

uint64_t mp_tracer_delivered(const struct mp_tracer *t)
{
	return t ? t->delivered_total : 0;
}

void mp_tracer_set_idle(struct mp_tracer *t, bool idle)
{
	__atomic_store_n(&t->skel->bss->consumer_idle, idle ? 1u : 0u, __ATOMIC_SEQ_CST);
}

void mp_tracer_set_wrappers(struct mp_tracer *t, const uint64_t *lohi, uint32_t n)
{
	struct memprof_bpf__bss *b = t->skel->bss;

	if (n > MP_WRAP_MAX)
		n = MP_WRAP_MAX;
	/* off while the table changes (a torn read adds or misses a stack) */
	__atomic_store_n(&b->wrap_hi, 0, __ATOMIC_SEQ_CST);
	__atomic_store_n(&b->wrap_lo, 0, __ATOMIC_SEQ_CST);
	if (!n)
		return;
	for (uint32_t i = 0; i < n; i++) {
		b->wrap[i].lo = lohi[2 * i];
		b->wrap[i].hi = lohi[2 * i + 1];
	}
	__atomic_store_n(&b->wrap_count, n, __ATOMIC_SEQ_CST);
	__atomic_store_n(&b->wrap_lo, lohi[0], __ATOMIC_SEQ_CST);
	__atomic_store_n(&b->wrap_hi, lohi[2 * n - 1], __ATOMIC_SEQ_CST);
}

static uint64_t percpu_sum_at(const struct bpf_map *map, uint32_t key)
{
	int ncpu = libbpf_num_possible_cpus();
	uint64_t *v, sum = 0;

	if (ncpu <= 0)
		return 0;
	v = calloc((size_t)ncpu, sizeof(*v));
	if (!v)
		return 0;
	if (!bpf_map_lookup_elem(bpf_map__fd(map), &key, v))
		for (int i = 0; i < ncpu; i++)
			sum += v[i];
	free(v);
	return sum;
}

static uint64_t percpu_sum(const struct bpf_map *map)
{
	return percpu_sum_at(map, 0);
}

uint64_t mp_tracer_drops(const struct mp_tracer *t)
{
	uint64_t kinds[MP_DROP_KINDS], sum = 0;

	mp_tracer_drops_by_kind(t, kinds);
	for (int i = 0; i < MP_DROP_KINDS; i++)
		sum += kinds[i];
	return sum;
}

void mp_tracer_drops_by_kind(const struct mp_tracer *t, uint64_t ret[MP_DROP_KINDS])
{
	for (uint32_t i = 0; i < MP_DROP_KINDS; i++)
		ret[i] = percpu_sum_at(t->skel->maps.drops, i);
}

uint64_t mp_tracer_unmatched(const struct mp_tracer *t)
{
	return percpu_sum(t->skel->maps.unmatched);
}

bool mp_tracer_drained(const struct mp_tracer *t)
{
	if (!t || !t->rb_pos[0] || !t->rb_pos[1])
		return false;
	/* libbpf stores the consumer position in this thread; the producer's
	 * is the kernel's release store after each reservation */
	return __atomic_load_n(t->rb_pos[0], __ATOMIC_ACQUIRE) ==
	       __atomic_load_n(t->rb_pos[1], __ATOMIC_ACQUIRE);
}

uint64_t mp_tracer_heap_events(const struct mp_tracer *t)
{
	return t->n_heap_events;
}

bool mp_tracer_duty_on(const struct mp_tracer *t)
{
	return t->duty.on;
}

uint64_t mp_tracer_duty_on_ns(const struct mp_tracer *t)
{
	return mp_duty_active_ns(&t->duty, mp_now_ns());
}

bool mp_tracer_multi_uprobes(const struct mp_tracer *t)
{
	return t->multi;
}

bool mp_tracer_exited(const struct mp_tracer *t)
{
	return t->exited;
}

size_t mp_tracer_probes(const struct mp_tracer *t, const struct mp_probe_info **ret_probes)
{
	*ret_probes = t->infos;
	return t->n_probes;
}
