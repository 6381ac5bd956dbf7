// SPDX-License-Identifier: MIT
#include "tracer.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <capstone/capstone.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "heap_event.h"
#include "memprof.skel.h"
#include "memprof_probe.h"
#include "symbols.h"

_Static_assert(MP_FN_MMAP == 10 && MP_FN_MUNMAP == 11 && MP_FN_MREMAP == 12,
	       "bpf/memprof.bpf.c hard-codes these");
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
};

struct probe {
	struct mp_probe_info info;
	char *name;
	char *path;
	struct bpf_link *entry, *ret;
};

struct mp_tracer {
	struct mp_tracer_opts opts;
	struct mp_tracer_func extra[MP_TRACER_MAX_EXTRA];
	struct memprof_bpf *skel;
	struct ring_buffer *rb;
	struct bpf_link *sys_links[4];
	struct probe probes[MP_MAX_PROBES];
	struct bpf_link *hint_link;
	struct mp_probe_info infos[MP_MAX_PROBES];
	size_t n_probes;
	int pidfd, epfd;
	bool exited, exec_pending;
	/* during consume */
	mp_raw_cb cb;
	void *cb_ctx;
	int cb_err;
	int n_delivered;
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

static void detach_probes(struct mp_tracer *t)
{
	for (size_t i = 0; i < t->n_probes; i++) {
		bpf_link__destroy(t->probes[i].entry);
		bpf_link__destroy(t->probes[i].ret);
		free(t->probes[i].name);
		free(t->probes[i].path);
	}
	memset(t->probes, 0, sizeof(t->probes));
	t->n_probes = 0;
	bpf_link__destroy(t->hint_link);
	t->hint_link = NULL;
}

void mp_tracer_free(struct mp_tracer *t)
{
	if (!t)
		return;
	detach_probes(t);
	for (size_t i = 0; i < sizeof(t->sys_links) / sizeof(t->sys_links[0]); i++)
		bpf_link__destroy(t->sys_links[i]);
	ring_buffer__free(t->rb);
	memprof_bpf__destroy(t->skel);
	if (t->epfd >= 0)
		close(t->epfd);
	if (t->pidfd >= 0)
		close(t->pidfd);
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
	if (!p->name || !p->path) {
		free(p->name);
		free(p->path);
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
	uo.bpf_cookie = MP_COOKIE(fn, kind, a, b, c, 0);
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
	p->entry = bpf_program__attach_uprobe_opts(t->skel->progs.mp_entry, t->opts.pid,
						   sym.root_path, sym.offset, &uo);
	if (!p->entry)
		return -errno;
	uo.retprobe = true;
	p->ret = bpf_program__attach_uprobe_opts(t->skel->progs.mp_return, t->opts.pid,
						 sym.root_path, sym.offset, &uo);
	if (!p->ret)
		return -errno;
	return 0;
}

static int attach_probes(struct mp_tracer *t, struct mp_symbols *syms)
{
	struct mp_symbol sym;
	int r;

	for (size_t i = 0; i < sizeof(builtins) / sizeof(builtins[0]); i++) {
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

		r = attach_one(t, syms, MP_FN_CUSTOM + (uint32_t)i, f->name,
			       f->object[0] ? f->object : NULL,
			       f->is_free ? MP_KIND_FREE : MP_KIND_ALLOC, f->arg, 0, 0);
		if (r < 0)
			return r == -ENOENT ? -ENXIO : r;
	}
	for (size_t i = 0; i < t->n_probes; i++)
		t->infos[i] = t->probes[i].info;
	/* Best effort: without it mremap's caller is a word of its frame. */
	if (mp_symbols_lookup(syms, "mremap", NULL, &sym) == 0)
		t->hint_link =
			bpf_program__attach_uprobe_opts(t->skel->progs.mp_caller_hint, t->opts.pid,
							sym.root_path, sym.offset, NULL);
	return 0;
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/* Resolve and attach; right after an exec, wait (bounded) for the dynamic
 * loader to map every needed object first. */
static int resolve_and_attach(struct mp_tracer *t, bool after_exec)
{
	uint64_t deadline = now_ns() + MP_EXEC_SETTLE_NS;
	struct mp_symbols *syms = NULL;
	int r;

	for (;;) {
		r = mp_symbols_new(t->opts.pid, &syms);
		if (r < 0)
			return r == -ENOENT ? -ESRCH : r;
		if (!after_exec || mp_symbols_complete(syms) || now_ns() > deadline)
			break;
		mp_symbols_free(syms);
		syms = NULL;
		usleep(1000);
	}
	r = attach_probes(t, syms);
	mp_symbols_free(syms);
	if (r < 0)
		detach_probes(t);
	return r;
}

static int on_sample(void *ctx, void *data, size_t size)
{
	struct mp_tracer *t = ctx;
	struct mp_raw_event ev;
	int r;

	if (size < sizeof(ev))
		return 0;
	memcpy(&ev, data, sizeof(ev));
	if (ev.type == MP_RAW_EXEC)
		t->exec_pending = true;
	t->n_delivered++;
	r = t->cb ? t->cb(t->cb_ctx, &ev) : 0;
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

int mp_tracer_new(const struct mp_tracer_opts *opts, struct mp_tracer **ret)
{
	struct mp_tracer *t;
	struct epoll_event ee = { .events = EPOLLIN };
	int r;

	if (opts->n_extra > MP_TRACER_MAX_EXTRA)
		return -EINVAL;
	r = check_target(opts->pid);
	if (r < 0)
		return r;
	t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->pidfd = t->epfd = -1;
	t->opts = *opts;
	if (opts->n_extra)
		memcpy(t->extra, opts->extra, opts->n_extra * sizeof(*opts->extra));
	t->opts.extra = t->extra;

	t->pidfd = pidfd_open_(opts->pid);
	if (t->pidfd < 0) {
		r = -errno;
		goto fail;
	}
	t->skel = memprof_bpf__open();
	if (!t->skel) {
		r = -errno;
		goto fail;
	}
	t->skel->rodata->target_tgid = (uint32_t)opts->pid;
	if (opts->ring_bytes) {
		uint32_t rb = opts->ring_bytes;

		if (rb < (uint32_t)getpagesize() || (rb & (rb - 1))) {
			r = -EINVAL;
			goto fail;
		}
		r = bpf_map__set_max_entries(t->skel->maps.events, rb);
		if (r < 0)
			goto fail;
		if (t->skel->rodata->wakeup_bytes > rb / 4)
			t->skel->rodata->wakeup_bytes = rb / 4;
	}
	bpf_program__set_autoload(t->skel->progs.mp_rss_stat, opts->rss_exact);
	r = memprof_bpf__load(t->skel);
	if (r < 0)
		goto fail;
	t->sys_links[0] = bpf_program__attach(t->skel->progs.mp_sys_enter);
	t->sys_links[1] = t->sys_links[0] ? bpf_program__attach(t->skel->progs.mp_sys_exit) : NULL;
	t->sys_links[2] = t->sys_links[1] ? bpf_program__attach(t->skel->progs.mp_exec) : NULL;
	if (!t->sys_links[2]) {
		r = -errno;
		goto fail;
	}
	if (opts->rss_exact) {
		t->sys_links[3] = bpf_program__attach(t->skel->progs.mp_rss_stat);
		if (!t->sys_links[3]) {
			r = -errno;
			goto fail;
		}
	}
	t->rb = ring_buffer__new(bpf_map__fd(t->skel->maps.events), on_sample, t, NULL);
	if (!t->rb) {
		r = -errno;
		goto fail;
	}
	r = resolve_and_attach(t, false);
	if (r < 0)
		goto fail;
	t->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (t->epfd < 0) {
		r = -errno;
		goto fail;
	}
	ee.data.fd = ring_buffer__epoll_fd(t->rb);
	if (epoll_ctl(t->epfd, EPOLL_CTL_ADD, ee.data.fd, &ee) < 0) {
		r = -errno;
		goto fail;
	}
	ee.data.fd = t->pidfd;
	if (epoll_ctl(t->epfd, EPOLL_CTL_ADD, t->pidfd, &ee) < 0) {
		r = -errno;
		goto fail;
	}
	*ret = t;
	return 0;
fail:
	mp_tracer_free(t);
	return r;
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
		detach_probes(t);
		ev.ts_ns = now_ns();
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
		detach_probes(t);
		r = resolve_and_attach(t, true);
		/* A new image without an allocator (static, no malloc) is
		 * still traced for its mappings. */
		if (r < 0 && r != -ENOENT)
			return r;
	}
	return t->n_delivered;
}

uint64_t mp_tracer_drops(const struct mp_tracer *t)
{
	int ncpu = libbpf_num_possible_cpus();
	uint32_t zero = 0;
	uint64_t *v, sum = 0;

	if (ncpu <= 0)
		return 0;
	v = calloc((size_t)ncpu, sizeof(*v));
	if (!v)
		return 0;
	if (!bpf_map_lookup_elem(bpf_map__fd(t->skel->maps.drops), &zero, v))
		for (int i = 0; i < ncpu; i++)
			sum += v[i];
	free(v);
	return sum;
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

int mp_tracer_parse_func(const char *spec, bool is_free, struct mp_tracer_func *ret)
{
	struct mp_tracer_func f = { .is_free = is_free };
	const char *colon = strrchr(spec, ':'), *at, *key = is_free ? "ptr=arg" : "size=arg";
	size_t nlen;
	char *end;
	unsigned long arg;

	if (!colon || strncmp(colon + 1, key, strlen(key)))
		return -EINVAL;
	arg = strtoul(colon + 1 + strlen(key), &end, 10);
	if (*end || end == colon + 1 + strlen(key) || arg > 5)
		return -EINVAL;
	f.arg = (uint32_t)arg;
	at = memchr(spec, '@', (size_t)(colon - spec));
	nlen = (size_t)((at ? at : colon) - spec);
	if (!nlen || nlen >= sizeof(f.name))
		return -EINVAL;
	memcpy(f.name, spec, nlen);
	if (at) {
		size_t olen = (size_t)(colon - at - 1);

		if (!olen || olen >= sizeof(f.object))
			return -EINVAL;
		memcpy(f.object, at + 1, olen);
	}
	*ret = f;
	return 0;
}
