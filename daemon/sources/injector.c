// SPDX-License-Identifier: MIT
#include <dirent.h>
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <inttypes.h>
#include <linux/audit.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/ptrace.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "injector.h"
#include "log.h"
#include "procmaps.h"
#include "rcall.h"
#include "seccomp_eval.h"
#include "symbols.h"
#include "unwind.h"
#include "util.h"

#ifndef PTRACE_SECCOMP_GET_FILTER
#define PTRACE_SECCOMP_GET_FILTER 0x420c
#endif

/* A thread's stack copied for the safe-point walk, and the frames
 * walked. */
#define STACK_COPY (32u << 10)
#define WALK_DEPTH 64
/* Room a call needs below a thread's stack pointer. */
#define STACK_ROOM (64u << 10)
#define MAX_THREADS 65536

struct thread {
	pid_t tid;
	int sig; /* a signal that stopped it, given back when it runs on */
	bool gone;
};

struct threads {
	pid_t pid;
	struct thread *v;
	size_t n, cap;
};

/* A range of code no thread may be in when the loader is called. */
struct unsafe {
	uint64_t lo, hi;
	const char *what;
};

struct ctx {
	const struct mp_inject_opts *o;
	char *why;
	struct threads ts;
	struct mp_procmaps *maps;
	struct mp_symbols *syms;
	struct unsafe *unsafe;
	size_t n_unsafe;
	uint64_t dlopen_fn, dlerror_fn, inject_fn;
};

__attribute__((format(printf, 3, 4))) static int refuse(struct ctx *c, int err, const char *fmt,
							...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(c->why, MP_INJECT_WHY_MAX, fmt, ap);
	va_end(ap);
	return err;
}

const char *mp_inject_lib(const char *fallback)
{
	const char *env[] = { "MEMPROF_INJECT_LIB", "MEMPROF_PRELOAD_LIB" };

	for (size_t i = 0; i < 2; i++) {
		const char *v = getenv(env[i]);

		if (v && v[0])
			return access(v, R_OK) == 0 ? v : NULL;
	}
	return fallback && access(fallback, R_OK) == 0 ? fallback : NULL;
}

/* ---- before the target is touched ---- */

int mp_inject_check_exe(int fd, bool *ret_dynamic, char *why)
{
	Elf64_Ehdr eh;
	Elf64_Phdr ph;

	*ret_dynamic = false;
	if (pread(fd, &eh, sizeof(eh), 0) != (ssize_t)sizeof(eh) || memcmp(eh.e_ident, ELFMAG, 4)) {
		snprintf(why, MP_INJECT_WHY_MAX, "the executable is not an ELF file");
		return -EOPNOTSUPP;
	}
	if (eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_machine != EM_X86_64) {
		snprintf(why, MP_INJECT_WHY_MAX,
			 "a %s process (ELF class %u, machine %u): only x86-64 takes libmemprof",
			 eh.e_ident[EI_CLASS] == ELFCLASS32 ? "32-bit" : "foreign-arch",
			 eh.e_ident[EI_CLASS], eh.e_machine);
		return -EOPNOTSUPP;
	}
	for (unsigned i = 0; i < eh.e_phnum && i < 256; i++) {
		off_t off = (off_t)eh.e_phoff + (off_t)i * eh.e_phentsize;

		if (eh.e_phentsize < sizeof(ph) ||
		    pread(fd, &ph, sizeof(ph), off) != (ssize_t)sizeof(ph))
			break;
		if (ph.p_type == PT_INTERP)
			*ret_dynamic = true;
	}
	return 0;
}

/* The executable of the target: see mp_inject_check_exe(). */
static int check_exe(struct ctx *c, bool *ret_dynamic)
{
	char path[64];
	int fd, r;

	snprintf(path, sizeof(path), "/proc/%d/exe", (int)c->o->pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? -ESRCH :
					 refuse(c, -errno, "cannot read the executable: %m");
	r = mp_inject_check_exe(fd, ret_dynamic, c->why);
	close(fd);
	return r;
}

/* A "Key:\tvalue" number of /proc/PID/status; -1 when absent. */
static long status_field(pid_t pid, const char *key)
{
	char path[64], line[256];
	size_t klen = strlen(key);
	long v = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "re");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, key, klen) && line[klen] == ':') {
			v = strtol(line + klen + 1, NULL, 10);
			break;
		}
	fclose(f);
	return v;
}

static int check_policy(struct ctx *c)
{
	const char *yama = c->o->yama_path ? c->o->yama_path : "/proc/sys/kernel/yama/ptrace_scope";
	long tracer = status_field(c->o->pid, "TracerPid");
	long sc = status_field(c->o->pid, "Seccomp");
	FILE *f;
	int scope = 0;

	if (c->o->pid == getpid())
		return refuse(c, -EINVAL, "the daemon itself");
	f = fopen(yama, "re");
	if (f) {
		if (fscanf(f, "%d", &scope) != 1)
			scope = 0;
		fclose(f);
	}
	if (scope >= 3)
		return refuse(c, -EPERM, "ptrace is forbidden (Yama ptrace_scope is %d)", scope);
	if (tracer > 0)
		return refuse(c, -EOPNOTSUPP, "another tracer holds it (pid %ld)", tracer);
	if (sc == 1)
		return refuse(c, -EOPNOTSUPP, "seccomp strict mode allows no loader");
	return 0;
}

/* Whether the ELF file @fd needs a sanitizer runtime (DT_NEEDED). */
static bool needs_sanitizer(int fd)
{
	Elf_Scn *scn = NULL;
	bool bad = false;
	Elf *e;

	if (elf_version(EV_CURRENT) == EV_NONE)
		return false;
	e = elf_begin(fd, ELF_C_READ, NULL);
	while (e && (scn = elf_nextscn(e, scn))) {
		GElf_Shdr sh;
		Elf_Data *d;

		if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_DYNAMIC || !sh.sh_entsize)
			continue;
		d = elf_getdata(scn, NULL);
		for (size_t i = 0; d && i < sh.sh_size / sh.sh_entsize; i++) {
			GElf_Dyn dyn;
			const char *s;

			if (!gelf_getdyn(d, (int)i, &dyn))
				break;
			if (dyn.d_tag != DT_NEEDED)
				continue;
			s = elf_strptr(e, sh.sh_link, dyn.d_un.d_val);
			if (s &&
			    (strstr(s, "libasan") || strstr(s, "libubsan") || strstr(s, "libtsan")))
				bad = true;
		}
	}
	elf_end(e);
	return bad;
}

/* The target must see our libmemprof at the same path, and it must be one
 * that a plain process can load: a sanitizer build's would abort it. */
static int check_lib(struct ctx *c)
{
	char path[PATH_MAX + 32];
	struct stat ours, theirs;
	bool bad;
	int fd;

	if (!c->o->lib)
		return refuse(c, -ENOENT, "no libmemprof to load (set MEMPROF_INJECT_LIB)");
	if (c->o->lib[0] != '/')
		return refuse(c, -EINVAL, "libmemprof's path %s is not absolute", c->o->lib);
	snprintf(path, sizeof(path), "/proc/%d/root%s", (int)c->o->pid, c->o->lib);
	if (stat(c->o->lib, &ours) < 0)
		return refuse(c, -errno, "%s: %m", c->o->lib);
	if (stat(path, &theirs) < 0 || ours.st_dev != theirs.st_dev || ours.st_ino != theirs.st_ino)
		return refuse(c, -EOPNOTSUPP,
			      "the target does not see %s (another mount namespace)", c->o->lib);
	fd = open(c->o->lib, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return refuse(c, -errno, "%s: %m", c->o->lib);
	bad = needs_sanitizer(fd);
	close(fd);
	if (bad)
		return refuse(c, -EOPNOTSUPP,
			      "%s is a sanitizer build, which would abort a plain process",
			      c->o->lib);
	return 0;
}

/* ---- where things are in the target ---- */

/* The run-time address of @sym: the mapping of its object's file that
 * holds its file offset. 0 when none does. */
static uint64_t runtime_addr(const struct mp_procmaps *maps, const struct mp_symbol *sym)
{
	for (size_t i = 0; i < maps->n; i++) {
		const struct mp_mapping *m = &maps->maps[i];

		if (!(m->perms & MP_MAP_X) || strcmp(m->path, sym->path))
			continue;
		if (sym->offset >= m->offset && sym->offset - m->offset < m->end - m->start)
			return m->start + (sym->offset - m->offset);
	}
	return 0;
}

static uint64_t lookup(struct ctx *c, const char *name, const char *object, uint64_t *ret_size)
{
	struct mp_symbol s;

	if (mp_symbols_lookup(c->syms, name, object, &s) < 0)
		return 0;
	if (ret_size)
		*ret_size = s.size;
	return runtime_addr(c->maps, &s);
}

static int add_unsafe(struct ctx *c, uint64_t lo, uint64_t hi, const char *what)
{
	struct unsafe *v;

	if (!lo || hi <= lo)
		return 0;
	v = realloc(c->unsafe, (c->n_unsafe + 1) * sizeof(*v));
	if (!v)
		return -ENOMEM;
	c->unsafe = v;
	v[c->n_unsafe++] = (struct unsafe){ lo, hi, what };
	return 0;
}

/* Functions that hold the allocator's or the loader's locks while they
 * run (or wait for them): no thread may be inside one when another calls
 * dlopen, which takes them too. */
static const char *const lock_holders[] = {
	"malloc",	"free",		  "calloc",	    "realloc",	       "reallocarray",
	"memalign",	"posix_memalign", "aligned_alloc",  "valloc",	       "pvalloc",
	"malloc_trim",	"malloc_stats",	  "malloc_info",    "mallinfo",	       "mallinfo2",
	"mallopt",	"fork",		  "_Fork",	    "vfork",	       "dl_iterate_phdr",
	"dladdr",	"dladdr1",	  "dlinfo",	    "dlsym",	       "dlvsym",
	"dlopen",	"dlmopen",	  "dlclose",	    "dlerror",	       "pthread_create",
	"pthread_exit", "exit",		  "__libc_freeres", "memprof__inject",
};

/* The loader's code (the object that defines _dl_debug_state), and the
 * lock holders' code. */
static int find_unsafe(struct ctx *c)
{
	struct mp_symbol ld;
	int r = 0;

	if (mp_symbols_lookup(c->syms, "_dl_debug_state", NULL, &ld) == 0)
		for (size_t i = 0; i < c->maps->n && r == 0; i++) {
			const struct mp_mapping *m = &c->maps->maps[i];

			if ((m->perms & MP_MAP_X) && !strcmp(m->path, ld.path))
				r = add_unsafe(c, m->start, m->end, "the dynamic loader");
		}
	for (size_t i = 0; i < sizeof(lock_holders) / sizeof(lock_holders[0]) && r == 0; i++) {
		uint64_t size = 0, at = lookup(c, lock_holders[i], NULL, &size);

		r = add_unsafe(c, at, at + size, lock_holders[i]);
	}
	return r;
}

static const char *unsafe_at(const struct ctx *c, uint64_t pc)
{
	for (size_t i = 0; i < c->n_unsafe; i++)
		if (pc >= c->unsafe[i].lo && pc < c->unsafe[i].hi)
			return c->unsafe[i].what;
	return NULL;
}

/* The loader's dlopen and dlerror, and memprof__inject when libmemprof is
 * there already. No dlopen: a static executable, or one that loads no
 * library with a loader we can call. */
static int find_functions(struct ctx *c, bool dynamic)
{
	c->dlopen_fn = lookup(c, "dlopen", NULL, NULL);
	c->dlerror_fn = lookup(c, "dlerror", NULL, NULL);
	c->inject_fn = lookup(c, "memprof__inject", NULL, NULL);
	if (!dynamic && !c->inject_fn)
		return refuse(c, -EOPNOTSUPP,
			      "a static executable: no dynamic loader to load libmemprof");
	if (!c->dlopen_fn && !c->inject_fn)
		return refuse(c, -EOPNOTSUPP, "the process has no dlopen (no libc loaded)");
	return 0;
}

/* ---- the threads ---- */

static bool known(const struct threads *ts, pid_t tid)
{
	for (size_t i = 0; i < ts->n; i++)
		if (ts->v[i].tid == tid)
			return true;
	return false;
}

/* Waits for @t's stop after an interrupt: 0 (stopped; a signal that came
 * first is kept for later), or it is gone. */
static int wait_stopped(struct thread *t)
{
	int st, r;

	for (int i = 0; i < 16; i++) {
		r = mp_rcall_wait(t->tid, 1000000000ull, &st);
		if (r == -ECHILD || (r == 0 && (WIFEXITED(st) || WIFSIGNALED(st)))) {
			t->gone = true;
			return 0;
		}
		if (r < 0)
			return r;
		if (!WIFSTOPPED(st))
			continue;
		if (st >> 16 == PTRACE_EVENT_STOP)
			return 0;
		/* a signal-delivery stop: the thread is stopped; the signal
		 * goes with it when it runs on */
		if (WSTOPSIG(st) != SIGTRAP)
			t->sig = WSTOPSIG(st);
		return 0;
	}
	return -ETIMEDOUT;
}

static int seize(struct ctx *c, pid_t tid)
{
	struct threads *ts = &c->ts;
	struct thread *v;

	if (ts->n == ts->cap) {
		size_t cap = ts->cap ? ts->cap * 2 : 16;

		if (cap > MAX_THREADS)
			return refuse(c, -E2BIG, "more than %d threads", MAX_THREADS);
		v = realloc(ts->v, cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		ts->v = v;
		ts->cap = cap;
	}
	if (ptrace(PTRACE_SEIZE, tid, NULL, NULL) < 0) {
		if (errno == ESRCH)
			return 0;
		if (errno == EPERM)
			return refuse(c, -EPERM,
				      "ptrace refused (EPERM: another tracer, Yama, or no "
				      "CAP_SYS_PTRACE over it)");
		return refuse(c, -errno, "ptrace(PTRACE_SEIZE, %d): %m", (int)tid);
	}
	ts->v[ts->n++] = (struct thread){ .tid = tid };
	if (ptrace(PTRACE_INTERRUPT, tid, NULL, NULL) < 0) {
		ts->v[ts->n - 1].gone = errno == ESRCH;
		return errno == ESRCH ? 0 : -errno;
	}
	return wait_stopped(&ts->v[ts->n - 1]);
}

/* Seizes and stops every thread of the process, until a pass over its
 * task list finds no new one. */
static int seize_all(struct ctx *c)
{
	char path[64];
	bool added = true;
	int r = 0;

	snprintf(path, sizeof(path), "/proc/%d/task", (int)c->o->pid);
	for (int pass = 0; added && pass < 64 && r == 0; pass++) {
		DIR *d = opendir(path);
		struct dirent *e;

		if (!d)
			return errno == ENOENT ? -ESRCH : -errno;
		added = false;
		while (r == 0 && (e = readdir(d))) {
			pid_t tid = (pid_t)strtol(e->d_name, NULL, 10);

			if (tid <= 0 || known(&c->ts, tid))
				continue;
			added = true;
			r = seize(c, tid);
		}
		closedir(d);
	}
	if (r == 0 && !c->ts.n)
		r = -ESRCH;
	return r;
}

/* Every thread but @skip (SIZE_MAX: none) runs on. */
static void resume_all(struct ctx *c, size_t skip)
{
	for (size_t i = 0; i < c->ts.n; i++) {
		struct thread *t = &c->ts.v[i];

		if (i == skip)
			continue;
		if (!t->gone && ptrace(PTRACE_CONT, t->tid, NULL, (void *)(uintptr_t)t->sig) < 0)
			t->gone = errno == ESRCH;
		t->sig = 0;
	}
}

static int stop_all(struct ctx *c, size_t skip)
{
	int r;

	for (size_t i = 0; i < c->ts.n; i++) {
		struct thread *t = &c->ts.v[i];

		if (t->gone || i == skip)
			continue;
		if (ptrace(PTRACE_INTERRUPT, t->tid, NULL, NULL) < 0) {
			t->gone = errno == ESRCH;
			continue;
		}
		r = wait_stopped(t);
		if (r < 0)
			return r;
	}
	/* threads started while they ran */
	return seize_all(c);
}

/* Every thread detached. A detach needs the thread stopped: one whose
 * stop never came is stopped first, so that no thread stays traced by a
 * daemon that goes on living (its next signal would stop it for good). */
static void release_all(struct ctx *c)
{
	for (size_t i = 0; i < c->ts.n; i++) {
		struct thread *t = &c->ts.v[i];

		if (t->gone || ptrace(PTRACE_DETACH, t->tid, NULL, (void *)(uintptr_t)t->sig) == 0)
			continue;
		if (ptrace(PTRACE_INTERRUPT, t->tid, NULL, NULL) == 0 && wait_stopped(t) == 0 &&
		    !t->gone && ptrace(PTRACE_DETACH, t->tid, NULL, (void *)(uintptr_t)t->sig) < 0)
			log_error("pid %d: thread %d could not be detached: %m", (int)c->o->pid,
				  (int)t->tid);
	}
	free(c->ts.v);
	c->ts = (struct threads){ 0 };
}

/* ---- the safe point ---- */

/* Where thread @t is unsafe: the unsafe code one of its frames is in, or
 * NULL. *@ret_room: whether its stack has room for the call. */
static const char *thread_unsafe(struct ctx *c, struct mp_unwinder *u, const struct thread *t,
				 struct user_regs_struct *regs, bool *ret_room, void *stack)
{
	uint64_t frames[WALK_DEPTH];
	const struct mp_mapping *m;
	const char *what;
	bool trunc = false;
	ssize_t n;
	int nf;

	*ret_room = false;
	if (ptrace(PTRACE_GETREGS, t->tid, NULL, regs) < 0)
		return NULL;
	what = unsafe_at(c, regs->rip);
	if (what)
		return what;
	m = mp_procmaps_find(c->maps, regs->rsp);
	*ret_room = m && (regs->rsp - m->start >= STACK_ROOM || !strcmp(m->path, "[stack]"));
	n = m ? mp_rcall_read(c->o->pid, regs->rsp, stack,
			      m->end - regs->rsp < STACK_COPY ? m->end - regs->rsp : STACK_COPY) :
		0;
	if (!u || n <= 0)
		return NULL;
	nf = mp_unwind(u, &(struct mp_unwind_regs){ regs->rip, regs->rsp, regs->rbp }, stack,
		       (size_t)n, WALK_DEPTH, frames, &trunc);
	for (int i = 1; i < nf; i++) {
		what = unsafe_at(c, frames[i] - 1);
		if (what)
			return what;
	}
	return NULL;
}

/* Looks at every thread: the one to call in (the process's main thread
 * when it can), or -EAGAIN with @why saying which thread is where. */
static int pick(struct ctx *c, struct mp_unwinder *u, size_t *ret)
{
	size_t best = SIZE_MAX;
	void *stack = malloc(STACK_COPY);
	int r = 0;

	if (!stack)
		return -ENOMEM;
	for (size_t i = 0; i < c->ts.n && r == 0; i++) {
		struct thread *t = &c->ts.v[i];
		struct user_regs_struct regs;
		const char *what;
		bool room;

		if (t->gone)
			continue;
		what = thread_unsafe(c, u, t, &regs, &room, stack);
		if (what) {
			r = refuse(c, -EAGAIN, "thread %d stayed inside %s", (int)t->tid, what);
			break;
		}
		if (!room || t->sig)
			continue;
		if (best == SIZE_MAX || t->tid == c->o->pid)
			best = i;
	}
	free(stack);
	if (r == 0 && best == SIZE_MAX)
		r = refuse(c, -EAGAIN, "no thread with room on its stack");
	if (r == 0)
		*ret = best;
	return r;
}

/* Stops and resumes the threads until they are all at a safe point, for at
 * most the safe-point bound. */
static int find_safe_point(struct ctx *c, size_t *ret, uint32_t *ret_tries)
{
	uint64_t bound = c->o->safepoint_ns ? c->o->safepoint_ns : MP_INJECT_DEFAULT_SAFEPOINT_NS;
	uint64_t end = mp_now_ns() + bound;
	struct mp_unwinder *u = NULL;
	int r;

	/* without an unwinder the program counters alone are looked at */
	if (mp_unwinder_new(c->o->pid, c->maps, &u) < 0)
		u = NULL;
	for (*ret_tries = 1;; ++*ret_tries) {
		r = pick(c, u, ret);
		if (r != -EAGAIN || mp_now_ns() >= end)
			break;
		resume_all(c, SIZE_MAX);
		nanosleep(&(struct timespec){ .tv_nsec = 2000000 }, NULL);
		r = stop_all(c, SIZE_MAX);
		if (r < 0)
			break;
	}
	mp_unwinder_free(u);
	if (r == -EAGAIN) {
		char was[MP_INJECT_WHY_MAX];

		snprintf(was, sizeof(was), "%s", c->why);
		r = refuse(c, -ETIMEDOUT, "no safe point within %" PRIu64 " ms: %s",
			   bound / 1000000, was);
	}
	return r;
}

/* ---- seccomp ---- */

/* The system calls that dlopen() and libmemprof's constructor make, with
 * the arguments that matter to a filter. A filter may refuse the ones not
 * needed with an error (libmemprof does without), never by killing. */
static const struct {
	int nr;
	uint64_t args[6];
	bool needed;
	const char *name;
} loader_calls[] = {
	{ SYS_openat, { (uint64_t)AT_FDCWD, 0, O_RDONLY | O_CLOEXEC }, true, "openat" },
	{ SYS_newfstatat, { 0, 0, 0, AT_EMPTY_PATH }, true, "newfstatat" },
	{ SYS_fstat, { 0 }, false, "fstat" },
	{ SYS_read, { 0 }, true, "read" },
	{ SYS_pread64, { 0 }, false, "pread64" },
	{ SYS_mmap, { 0, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE | MAP_DENYWRITE }, true, "mmap" },
	{ SYS_mmap, { 0, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_FIXED }, true, "mmap" },
	{ SYS_mmap, { 0, 4096, PROT_READ | PROT_WRITE, MAP_SHARED }, true, "mmap" },
	{ SYS_mprotect, { 0, 4096, PROT_READ }, true, "mprotect" },
	{ SYS_mprotect, { 0, 4096, PROT_READ | PROT_WRITE }, true, "mprotect" },
	{ SYS_munmap, { 0 }, true, "munmap" },
	{ SYS_close, { 0 }, true, "close" },
	{ SYS_memfd_create, { 0, MFD_CLOEXEC | MFD_ALLOW_SEALING }, true, "memfd_create" },
	{ SYS_ftruncate, { 0 }, true, "ftruncate" },
	{ SYS_fcntl, { 0, F_ADD_SEALS }, false, "fcntl" },
	{ SYS_getpid, { 0 }, false, "getpid" },
	{ SYS_gettid, { 0 }, false, "gettid" },
	{ SYS_getrandom, { 0 }, false, "getrandom" },
	{ SYS_membarrier, { 0 }, false, "membarrier" },
	{ SYS_prctl, { 0 }, false, "prctl" },
	{ SYS_brk, { 0 }, false, "brk" },
	{ SYS_futex, { 0 }, false, "futex" },
	{ SYS_madvise, { 0 }, false, "madvise" },
	{ SYS_clock_gettime, { 0 }, false, "clock_gettime" },
};

static int check_filter(struct ctx *c, const struct sock_filter *prog, size_t n)
{
	for (size_t i = 0; i < sizeof(loader_calls) / sizeof(loader_calls[0]); i++) {
		struct seccomp_data d = { .nr = loader_calls[i].nr, .arch = AUDIT_ARCH_X86_64 };
		uint32_t act;

		memcpy(d.args, loader_calls[i].args, sizeof(d.args));
		if (mp_seccomp_eval(prog, n, &d, &act) < 0)
			return refuse(c, -EOPNOTSUPP, "a seccomp filter could not be read");
		if (mp_seccomp_allows(act))
			continue;
		if (!loader_calls[i].needed && MP_SECCOMP_ACTION(act) == SECCOMP_RET_ERRNO)
			continue;
		return refuse(c, -EOPNOTSUPP, "seccomp blocks %s, which the loader needs",
			      loader_calls[i].name);
	}
	return 0;
}

/* Every filter of thread @tid lets the loader run. Reading a filter takes
 * CAP_SYS_ADMIN: without it, a filtered process is refused. */
static int check_seccomp(struct ctx *c, pid_t tid)
{
	int r = 0;

	if (status_field(c->o->pid, "Seccomp") != 2)
		return 0;
	for (unsigned long i = 0; r == 0 && i < 512; i++) {
		long n = ptrace(PTRACE_SECCOMP_GET_FILTER, tid, (void *)i, NULL);
		struct sock_filter *prog;

		if (n < 0 && errno == ENOENT)
			return 0;
		if (n <= 0 || n > BPF_MAXINSNS)
			return refuse(c, -EOPNOTSUPP,
				      "seccomp filters that cannot be read here (%s)",
				      n < 0 ? strerror(errno) : "empty");
		prog = calloc((size_t)n, sizeof(*prog));
		if (!prog)
			return -ENOMEM;
		if (ptrace(PTRACE_SECCOMP_GET_FILTER, tid, (void *)i, prog) != n)
			r = refuse(c, -EOPNOTSUPP, "seccomp filter %lu changed while read", i);
		else
			r = check_filter(c, prog, (size_t)n);
		free(prog);
	}
	return r;
}

/* ---- the calls ---- */

/* @fn(a0, @a1) in thread @t (index @self), a0 being @str copied into the
 * target when given. A call that does not return within the bound while
 * the other threads are stopped gets as long again with them running (a
 * lock it waits for may be held by one of them); then it is abandoned and
 * the thread put back where it was. */
static int call(struct ctx *c, struct mp_rthread *t, size_t self, uint64_t fn, uint64_t a1,
		const char *str, const char *what, uint64_t *ret)
{
	uint64_t tmo = c->o->timeout_ns ? c->o->timeout_ns : MP_INJECT_DEFAULT_TIMEOUT_NS;
	int r = mp_rcall_start(t, fn, 0, a1, str, str ? strlen(str) + 1 : 0);

	if (r == 0)
		r = mp_rcall_finish(t, tmo, ret);
	if (r == -ETIMEDOUT) {
		resume_all(c, self);
		r = mp_rcall_finish(t, tmo, ret);
		if (stop_all(c, self) < 0 && r == 0)
			r = -ETIMEDOUT;
	}
	if (r == -ETIMEDOUT)
		return refuse(c, r, "%s did not return within %" PRIu64 " ms (abandoned)", what,
			      tmo / 1000000);
	if (r == -EFAULT)
		return refuse(c, r, "%s faulted at 0x%" PRIx64, what, *ret);
	if (r < 0)
		return refuse(c, r, "%s: %s", what, strerror(-r));
	return 0;
}

/* dlopen(lib, RTLD_NOW) in the target, then where memprof__inject went. */
static int load(struct ctx *c, struct mp_rthread *t, size_t self, struct mp_inject_result *ret)
{
	uint64_t handle = 0, msg_at = 0;
	char msg[200] = "";
	int r;

	r = call(c, t, self, c->dlopen_fn, RTLD_NOW, c->o->lib, "dlopen()", &handle);
	if (r < 0)
		return r;
	if (!handle) {
		if (c->dlerror_fn &&
		    call(c, t, self, c->dlerror_fn, 0, NULL, "dlerror()", &msg_at) == 0 && msg_at) {
			ssize_t n = mp_rcall_read(c->o->pid, msg_at, msg, sizeof(msg) - 1);

			msg[n > 0 ? n : 0] = '\0';
		}
		return refuse(c, -ENOEXEC, "dlopen(%s) failed: %s", c->o->lib,
			      msg[0] ? msg : "no reason given");
	}
	ret->loaded = true;
	mp_procmaps_free(c->maps);
	c->maps = NULL;
	mp_symbols_free(c->syms);
	c->syms = NULL;
	r = mp_procmaps_read(c->o->pid, &c->maps);
	if (r == 0)
		r = mp_symbols_new(c->o->pid, &c->syms);
	if (r < 0)
		return refuse(c, r, "reading the process after dlopen: %s", strerror(-r));
	c->inject_fn = lookup(c, "memprof__inject", NULL, NULL);
	if (!c->inject_fn)
		return refuse(c, -ENOENT, "%s has no memprof__inject (another version?)",
			      c->o->lib);
	return 0;
}

/* What is known before a thread is stopped. */
static int prepare(struct ctx *c)
{
	bool dynamic;
	int r;

	r = check_exe(c, &dynamic);
	if (r == 0)
		r = check_policy(c);
	if (r < 0)
		return r;
	r = mp_procmaps_read(c->o->pid, &c->maps);
	if (r == 0)
		r = mp_symbols_new(c->o->pid, &c->syms);
	if (r == -ENOENT)
		r = -ESRCH;
	if (r < 0)
		return refuse(c, r, "reading the process: %s", strerror(-r));
	r = find_functions(c, dynamic);
	if (r == 0 && !c->inject_fn)
		r = check_lib(c);
	if (r == 0)
		r = find_unsafe(c);
	return r;
}

/* Stopped, at a safe point: the calls, and every register put back. */
static int inject_stopped(struct ctx *c, struct mp_inject_result *ret)
{
	struct mp_rthread t = { 0 };
	uint64_t rv = 0;
	size_t self = 0;
	int r, v;

	r = find_safe_point(c, &self, &ret->tries);
	if (r == 0)
		r = check_seccomp(c, c->ts.v[self].tid);
	if (r < 0)
		return r;
	t.tid = c->ts.v[self].tid;
	r = mp_rcall_save(&t);
	if (r < 0) {
		mp_rcall_release(&t);
		return refuse(c, r, "saving thread %d's registers: %s", (int)t.tid, strerror(-r));
	}
	if (!c->inject_fn)
		r = load(c, &t, self, ret);
	if (r == 0)
		r = call(c, &t, self, c->inject_fn, 0, NULL, "memprof__inject()", &rv);
	v = mp_rcall_restore(&t);
	if (v < 0)
		log_error("pid %d: thread %d's registers could not be put back: %s", (int)c->o->pid,
			  (int)t.tid, strerror(-v));
	if (t.pending_sig)
		c->ts.v[self].sig = t.pending_sig;
	mp_rcall_release(&t);
	if (r < 0)
		return r;
	v = (int32_t)rv;
	if (v == -EALREADY)
		ret->first = true;
	else if (v < 0)
		return refuse(c, v, "memprof__inject() failed: %s", strerror(-v));
	else
		ret->slots = v;
	return 0;
}

int mp_inject(const struct mp_inject_opts *o, struct mp_inject_result *ret, char *why)
{
	struct ctx c = { .o = o, .why = why };
	uint64_t t0;
	int r;

	why[0] = '\0';
	*ret = (struct mp_inject_result){ 0 };
	r = prepare(&c);
	if (r == 0) {
		t0 = mp_now_ns();
		r = seize_all(&c);
		if (r == 0)
			r = inject_stopped(&c, ret);
		ret->threads = (uint32_t)c.ts.n;
		release_all(&c);
		ret->stopped_ns = mp_now_ns() - t0;
	}
	if (r < 0 && !why[0])
		refuse(&c, r, "%s", strerror(-r));
	free(c.unsafe);
	mp_symbols_free(c.syms);
	mp_procmaps_free(c.maps);
	return r;
}
