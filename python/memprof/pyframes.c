/* SPDX-License-Identifier: MIT */
/*
 * Python frames in the call stacks libmemprof unwinds (docs/PYTHON.md
 * "Python lines"): registered with libmemprof as its frame expander
 * (libclient/expand.h), this walks the allocating thread's own chain of
 * interpreter frames and puts each eval-loop frame's Python frames in its
 * place, innermost first: the frame of the code's name ("qualname@file",
 * interned once per code object in the ring's string table) and its line.
 *
 * It runs inside an allocator call, GIL held or not (PyTorch releases it
 * around its ops): it reads, and never writes, what the interpreter owns.
 * The chain is the calling thread's own, and while the thread is in this
 * call no frame of it is pushed or popped; each frame holds a reference to
 * its code object, and a code object's names and line table never change.
 * The interpreter's layout is that of the headers this file was compiled
 * with: an interpreter of another minor version registers nothing.
 *
 * Past the innermost Python frame, the interpreter's own frames (the calls
 * between one Python frame and the next, its main) are left out, as py-spy
 * leaves them out of its native stacks: they say nothing the Python frames
 * do not, and they would make stacks twice as deep. Below it, the
 * interpreter's functions that allocated stay.
 *
 * Between two allocations of a thread its outer Python frames rarely
 * change: each thread keeps what its walks found frame by frame (the
 * memo, below), in front of the process-wide caches.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define Py_BUILD_CORE 1
#include <internal/pycore_frame.h>
#undef Py_BUILD_CORE

#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "../../libclient/expand.h"
#include "../../libclient/ring_abi.h"
#include "pyframes.h"

/* The Python frames of one walk, innermost first. */
#define PY_FRAMES_MAX 256
/* Code objects named at once (a new one past them is named each time). */
#define CODE_CACHE 16384u
#define CODE_PROBES 8u

/*
 * One code object's name id. seq is even when the entry is whole (0:
 * empty), odd while a thread fills it; the fields are what the code object
 * held when named: a code object freed and another made at its address
 * differs from it in them (both its names would have to be new objects at
 * the old ones' addresses too).
 */
struct code_ent {
	_Atomic uint32_t seq;
	uint32_t id;
	_Atomic(const void *) code;
	const void *qualname, *filename;
	int firstlineno;
	/* Where the last line looked up was found in the code's line table
	 * (line_of()): the next lookup goes on from there, a few entries
	 * away in a body that runs from top to bottom, where
	 * PyCode_Addr2Line() reads the table from its start (on a module of
	 * thousands of lines, the most of a frame's cost). The table it is
	 * of (lt, lt_len: another code object's once at this address is
	 * another table), taken by one thread at a time (busy). */
	_Atomic uint32_t busy;
	const char *lt;
	Py_ssize_t lt_len;
	PyCodeAddressRange range;
};

/* The frame of an instruction of a code object (its name id and line),
 * found by the code object and the instruction's offset, checked as
 * code_ent's: one lookup a frame, where the line table is read from its
 * start (on a big module's code, microseconds). */
#define LINE_CACHE 32768u

struct line_ent {
	_Atomic uint32_t seq;
	int line;
	_Atomic(const void *) code;
	/* and its line table: exec() of one file name's source again makes a
	 * code object at a freed one's address with the same names */
	const void *qualname, *filename, *linetable;
	Py_ssize_t lasti;
	uint32_t id;
};

/*
 * The memo: the Python frames of a thread's last walks, by the frame's
 * address, each with what frame_of() found it to be. A frame whose code
 * object, instruction and owner are its entry's is that frame again,
 * without the code object's instructions or the line cache (a miss in its
 * 1.8 MB, the most of a frame's cost before), in no more time than it
 * takes to check it.
 *
 * A value is that of a code object and an instruction, never of the
 * activation that ran them: one at the frame's address since (the frame
 * popped, another pushed there) has the same value when it runs the same
 * code object at the same instruction, and differs in its code or
 * prev_instr otherwise. A code object freed and another made at its
 * address (a module's code after its import, exec()'s) differs from the
 * entry in its line table object, its own, unless the new one's was made
 * at the old one's address too; and in its qualname and filename objects,
 * the line cache's guard, unless those are shared (interned names, one
 * file name object for both) or new at the old ones' addresses as well: a
 * hit is never staler than the line cache's. A frame is kept only when
 * complete, and so is its frame again: completeness is a matter of its
 * owner, instruction and code object. And only when its value has a name:
 * an unnamed one is named again the next time, as frame_of() does.
 *
 * A thread has one of MEMO_SLOTS memos, the entries in the caches'
 * mapping and only the memo's index in initial-exec TLS: a dlopen()ed
 * module's initial-exec TLS comes out of a surplus of the static TLS block
 * that holds less than 2 KB for all of them (glibc 2.36, 1 KB measured to
 * fit into a python3, 2 KB not), and libgomp and others need their part.
 * Threads past MEMO_SLOTS share one. A walk holds its memo (busy) from its
 * start to its end; one that finds it held (a signal handler's walk
 * interrupting this thread's, another thread's on a shared memo) neither
 * reads nor writes it.
 */
#define MEMO_ENTS 1024u
#define MEMO_SLOTS 32u

struct memo_ent {
	const _PyInterpreterFrame *frame;
	const PyCodeObject *code;
	const _Py_CODEUNIT *prev_instr;
	const void *qualname, *filename, *linetable;
	uint64_t value;
	char owner;
} __attribute__((aligned(64)));

struct memo {
	_Atomic uint32_t busy;
	struct memo_ent ent[MEMO_ENTS];
};

static struct code_ent *cache;
static struct line_ent *lines;
/* the mapping that holds the memos and both caches */
static void *caches_map;
static size_t caches_len;
static struct memo *memos;
static _Atomic uint32_t memo_next;
/* this thread's memo, 1-based (0: none chosen yet) */
static __thread uint32_t memo_slot __attribute__((tls_model("initial-exec")));
static int (*expander_set)(uint64_t lo, uint64_t hi, memprof_expand_fn fn);
static uint32_t (*intern)(const char *s, uint32_t len);
static uint64_t eval_lo, eval_hi;
/* the interpreter's code: the executable segment holding the eval loop */
static uint64_t interp_lo, interp_hi;
static bool registered;

/* @s's characters into @out (at most @max), others than printable ASCII
 * as '?'; the number written. Reads the string in place. */
static size_t put_str(PyObject *s, char *out, size_t max)
{
	Py_ssize_t n;
	unsigned int kind;
	const void *data;
	size_t k = 0;

	if (!s || Py_TYPE(s) != &PyUnicode_Type || !PyUnicode_IS_READY(s))
		return 0;
	n = PyUnicode_GET_LENGTH(s);
	kind = PyUnicode_KIND(s);
	data = PyUnicode_DATA(s);
	for (Py_ssize_t i = 0; i < n && k < max; i++) {
		Py_UCS4 ch = PyUnicode_READ(kind, data, i);

		out[k++] = ch >= 0x20 && ch < 0x7f ? (char)ch : '?';
	}
	return k;
}

/* The string id of @co's "qualname@filename" (a long file name keeps its
 * end), 0 when it could not be interned. */
static uint32_t name_code(PyCodeObject *co)
{
	char buf[MP_NAME_MAX], file[PATH_MAX];
	size_t q = put_str(co->co_qualname, buf, 160), f;

	if (!q)
		buf[q++] = '?';
	buf[q++] = '@';
	f = put_str(co->co_filename, file, sizeof(file));
	if (q + f > sizeof(buf)) {
		size_t keep = sizeof(buf) - q - 3;

		memcpy(buf + q, "...", 3);
		memcpy(buf + q + 3, file + f - keep, keep);
		q = sizeof(buf);
	} else {
		memcpy(buf + q, file, f);
		q += f;
	}
	return intern(buf, (uint32_t)q);
}

static size_t code_slot(const void *co)
{
	return (size_t)(((uintptr_t)co >> 4) * 0x9e3779b97f4a7c15ull >> 40) & (CODE_CACHE - 1);
}

/* @co's name id in *@id: the one named before, else named now and kept;
 * its entry, or NULL when it is not kept. */
static struct code_ent *code_ent_of(PyCodeObject *co, uint32_t *ret_id)
{
	size_t home = code_slot(co);
	struct code_ent *free_ent = NULL;
	uint32_t id;

	for (uint32_t p = 0; p < CODE_PROBES; p++) {
		struct code_ent *e = &cache[(home + p) & (CODE_CACHE - 1)];
		uint32_t s1 = atomic_load_explicit(&e->seq, memory_order_acquire);
		const void *c = atomic_load_explicit(&e->code, memory_order_relaxed);

		if (!s1) {
			if (!free_ent)
				free_ent = e;
			break;
		}
		if (c != co || (s1 & 1))
			continue;
		id = e->id;
		if (e->qualname == co->co_qualname && e->filename == co->co_filename &&
		    e->firstlineno == co->co_firstlineno) {
			atomic_thread_fence(memory_order_acquire);
			if (atomic_load_explicit(&e->seq, memory_order_relaxed) == s1) {
				*ret_id = id;
				return e;
			}
		} else if (!free_ent) {
			/* another code object once at this address */
			free_ent = e;
		}
	}
	*ret_id = id = name_code(co);
	if (id && free_ent) {
		uint32_t s = atomic_load_explicit(&free_ent->seq, memory_order_relaxed);

		/* claimed by one thread at a time; a loser keeps its id unkept */
		if (!(s & 1) && atomic_compare_exchange_strong_explicit(&free_ent->seq, &s, s + 1,
									memory_order_acquire,
									memory_order_relaxed)) {
			atomic_store_explicit(&free_ent->code, NULL, memory_order_relaxed);
			free_ent->id = id;
			free_ent->qualname = co->co_qualname;
			free_ent->filename = co->co_filename;
			free_ent->firstlineno = co->co_firstlineno;
			atomic_store_explicit(&free_ent->code, (const void *)co,
					      memory_order_relaxed);
			atomic_store_explicit(&free_ent->seq, s + 2, memory_order_release);
			return free_ent;
		}
	}
	return NULL;
}

static uint32_t code_id(PyCodeObject *co)
{
	uint32_t id;

	code_ent_of(co, &id);
	return id;
}

/* The line of the instruction at byte @addr of @co (entry @e, NULL: not
 * kept), from where the entry's last lookup left the line table; as
 * PyCode_Addr2Line() where the entry is another thread's right now. The
 * range is used only for the table it was made from, so that its reads
 * stay within @co's own table. */
static int line_of(struct code_ent *e, PyCodeObject *co, int addr)
{
	const char *lt = PyBytes_AS_STRING(co->co_linetable);
	Py_ssize_t n = PyBytes_GET_SIZE(co->co_linetable);
	int line;

	if (!e || atomic_exchange_explicit(&e->busy, 1, memory_order_acquire))
		return PyCode_Addr2Line(co, addr);
	if (e->lt != lt || e->lt_len != n) {
		/* CPython's _PyCode_InitAddressRange() */
		e->range = (PyCodeAddressRange){ .ar_start = -1,
						 .ar_end = 0,
						 .ar_line = -1,
						 .opaque = { .computed_line = co->co_firstlineno,
							     .lo_next = (const uint8_t *)lt,
							     .limit = (const uint8_t *)lt + n } };
		e->lt = lt;
		e->lt_len = n;
	}
	line = _PyCode_CheckLineNumber(addr, &e->range);
	atomic_store_explicit(&e->busy, 0, memory_order_release);
	return line;
}

/* The frame running @co at @prev_instr as MP_PYFRAME(): its code's name
 * id, its line (0: unknown). */
static uint64_t frame_of(PyCodeObject *co, const _Py_CODEUNIT *prev_instr)
{
	Py_ssize_t lasti = prev_instr - _PyCode_CODE(co);
	struct line_ent *e;
	uint32_t s, id;
	int line;

	if (lasti < 0 || lasti >= Py_SIZE(co))
		return MP_PYFRAME(code_id(co), 0);
	e = &lines[(((uintptr_t)co >> 4) * 0x9e3779b97f4a7c15ull +
		    (uint64_t)lasti * 0xff51afd7ed558ccdull) >>
			   40 &
		   (LINE_CACHE - 1)];
	s = atomic_load_explicit(&e->seq, memory_order_acquire);
	if (s && !(s & 1) && atomic_load_explicit(&e->code, memory_order_relaxed) == co &&
	    e->lasti == lasti && e->qualname == co->co_qualname && e->filename == co->co_filename &&
	    e->linetable == co->co_linetable) {
		line = e->line;
		id = e->id;
		atomic_thread_fence(memory_order_acquire);
		if (atomic_load_explicit(&e->seq, memory_order_relaxed) == s)
			return MP_PYFRAME(id, line);
	}
	line = line_of(code_ent_of(co, &id), co, (int)(lasti * (Py_ssize_t)sizeof(_Py_CODEUNIT)));
	/* kept by one thread at a time (another's stays unkept), and only
	 * with a name */
	if (id && !(s & 1) &&
	    atomic_compare_exchange_strong_explicit(&e->seq, &s, s + 1, memory_order_acquire,
						    memory_order_relaxed)) {
		atomic_store_explicit(&e->code, (const void *)co, memory_order_relaxed);
		e->lasti = lasti;
		e->qualname = co->co_qualname;
		e->filename = co->co_filename;
		e->linetable = co->co_linetable;
		e->line = line;
		e->id = id;
		atomic_store_explicit(&e->seq, s + 2, memory_order_release);
	}
	return MP_PYFRAME(id, line);
}

/* This thread's memo, held until memo_end(); NULL: none (a walk this one
 * interrupts holds it, or another thread's walk). */
static struct memo *memo_begin(void)
{
	uint32_t i = memo_slot;
	struct memo *m;

	if (!memos)
		return NULL;
	if (!i) {
		/* a handler's walk between the two lines takes a slot too:
		 * either is this thread's */
		i = atomic_fetch_add_explicit(&memo_next, 1, memory_order_relaxed) % MEMO_SLOTS + 1;
		memo_slot = i;
	}
	m = &memos[i - 1];
	if (atomic_exchange_explicit(&m->busy, 1, memory_order_acquire))
		return NULL;
	return m;
}

static void memo_end(struct memo *m)
{
	if (m)
		atomic_store_explicit(&m->busy, 0, memory_order_release);
}

/* The entry of the frame at @f (frames in one data stack chunk, 16 KB,
 * each in an entry of its own). */
static struct memo_ent *memo_ent(struct memo *m, const _PyInterpreterFrame *f)
{
	return &m->ent[((uintptr_t)f >> 4) & (MEMO_ENTS - 1)];
}

/* The expander (expand.h): each eval-loop frame of @in replaced by the
 * Python frames it runs, the innermost eval-loop frame by the innermost
 * Python frames; an eval-loop frame past the Python frames stays. */
static int expand(const uint64_t *in, int n, uint64_t *out, int max)
{
	const uint64_t elo = eval_lo, ehi = eval_hi, ilo = interp_lo, ihi = interp_hi;
	uint64_t py[PY_FRAMES_MAX];
	bool entry[PY_FRAMES_MAX];
	PyThreadState *ts = PyGILState_GetThisThreadState();
	_PyInterpreterFrame *f;
	struct memo *mo;
	int np = 0, g = 0, m = 0, first = 0, limit, evals = 0, runs = 0;

	if (!ts || !ts->cframe)
		return 0;
	/* as many as fit after the native frames before the first eval loop
	 * (a deep import's dozens of frames past the depth are not read),
	 * and no more runs of them than @in has eval loops: the native
	 * frames end (at the depth) before the outer loops, whose frames
	 * would be read for nothing */
	first = n;
	for (int i = n - 1; i >= 0; i--)
		if (in[i] - elo < ehi - elo) {
			evals++;
			first = i;
		}
	limit = max - first < PY_FRAMES_MAX ? max - first : PY_FRAMES_MAX;
	mo = memo_begin();
	for (f = ts->cframe->current_frame; f && np < limit && runs < evals; f = f->previous) {
		PyCodeObject *co = f->f_code;
		const _Py_CODEUNIT *pi = f->prev_instr;
		struct memo_ent *me = NULL;

		if (!co || Py_TYPE(co) != &PyCode_Type)
			break;
		if (mo) {
			me = memo_ent(mo, f);
			if (me->frame == f && me->code == co && me->prev_instr == pi &&
			    me->owner == f->owner && me->qualname == co->co_qualname &&
			    me->filename == co->co_filename && me->linetable == co->co_linetable) {
				py[np] = me->value;
				entry[np++] = f->is_entry;
				runs += f->is_entry;
				continue;
			}
		}
		if (_PyFrame_IsIncomplete(f)) {
			/* not begun: no line, but it may end a C call's run */
			if (np && f->is_entry && !entry[np - 1]) {
				entry[np - 1] = true;
				runs++;
			}
			continue;
		}
		py[np] = frame_of(co, pi);
		if (me && MP_PYFRAME_NAME(py[np])) {
			me->frame = f;
			me->code = co;
			me->prev_instr = pi;
			me->owner = f->owner;
			me->qualname = co->co_qualname;
			me->filename = co->co_filename;
			me->linetable = co->co_linetable;
			me->value = py[np];
		}
		entry[np++] = f->is_entry;
		runs += f->is_entry;
	}
	memo_end(mo);
	if (!np)
		return 0;
	for (int i = 0; i < n && m < max; i++) {
		if (in[i] < elo || in[i] >= ehi || g == np) {
			/* the interpreter's calls between Python frames */
			if (g && in[i] >= ilo && in[i] < ihi)
				continue;
			out[m++] = in[i];
			continue;
		}
		/* this eval loop's run: up to the frame it was entered with */
		do {
			out[m++] = py[g];
		} while (!entry[g++] && g < np && m < max);
	}
	return m;
}

/* dl_iterate_phdr(): the executable segment holding the eval loop. */
static int find_interp(struct dl_phdr_info *info, size_t size, void *ctx)
{
	uint64_t pc = *(const uint64_t *)ctx;

	(void)size;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		uint64_t lo = info->dlpi_addr + ph->p_vaddr;

		if (ph->p_type == PT_LOAD && (ph->p_flags & PF_X) && pc >= lo &&
		    pc - lo < ph->p_memsz) {
			interp_lo = lo;
			interp_hi = lo + ph->p_memsz;
			return 1;
		}
	}
	return 0;
}

/* A forked child: its ring is new (libclient/ring.c), and the names the
 * caches hold are ids into the parent's string table. Its copies of the
 * caches' pages go (zero: empty), the parent's stay. Only the forking
 * thread lives here, and it is in no walk. */
static void caches_drop(void)
{
	if (caches_map)
		syscall(SYS_madvise, caches_map, caches_len, MADV_DONTNEED);
}

int mp_pyframes_register(void *(*sym)(const char *name), char *err, size_t len)
{
	const ElfW(Sym) *es = NULL;
	Dl_info info;

	if (registered)
		return 0;
	expander_set =
		(int (*)(uint64_t, uint64_t, memprof_expand_fn))sym("memprof__frame_expander");
	intern = (uint32_t(*)(const char *, uint32_t))sym("memprof__intern");
	if (!expander_set || !intern) {
		snprintf(err, len, "libmemprof %s has no frame expander", "in use");
		return -1;
	}
	/* the interpreter this module was built for, its layout as here */
	if ((Py_Version >> 16) != (PY_VERSION_HEX >> 16)) {
		snprintf(err, len, "built for Python %d.%d, running in %lu.%lu", PY_MAJOR_VERSION,
			 PY_MINOR_VERSION, Py_Version >> 24, (Py_Version >> 16) & 0xff);
		return -1;
	}
	if (!dladdr1((void *)_PyEval_EvalFrameDefault, &info, (void **)&es, RTLD_DL_SYMENT) ||
	    !es || !es->st_size || !info.dli_saddr) {
		snprintf(err, len, "the interpreter's eval loop has no symbol size");
		return -1;
	}
	if (!cache) {
		/* the profiler's own memory, as libmemprof's ring: straight
		 * from the kernel, not through the allocator it watches */
		size_t mn = MEMO_SLOTS * sizeof(*memos);
		size_t n = mn + CODE_CACHE * sizeof(*cache) + LINE_CACHE * sizeof(*lines);
		long p = syscall(SYS_mmap, NULL, n, PROT_READ | PROT_WRITE,
				 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

		if (p == -1) {
			snprintf(err, len, "out of memory");
			return -1;
		}
		caches_map = (void *)p;
		caches_len = n;
		if (pthread_atfork(NULL, NULL, caches_drop) != 0) {
			syscall(SYS_munmap, p, n);
			caches_map = NULL;
			snprintf(err, len, "out of memory");
			return -1;
		}
		/* first, the memos' entries on lines of their own */
		memos = (struct memo *)p;
		lines = (struct line_ent *)(p + mn + CODE_CACHE * sizeof(*cache));
		cache = (struct code_ent *)(p + mn);
	}
	eval_lo = (uint64_t)(uintptr_t)info.dli_saddr;
	eval_hi = eval_lo + es->st_size;
	if (!dl_iterate_phdr(find_interp, &eval_lo)) {
		/* then only the eval loop's frames go */
		interp_lo = eval_lo;
		interp_hi = eval_hi;
	}
	if (expander_set(eval_lo, eval_hi, expand) < 0) {
		snprintf(err, len, "libmemprof refused the frame expander");
		return -1;
	}
	registered = true;
	return 0;
}

void mp_pyframes_unregister(void)
{
	if (!registered)
		return;
	/* the cache stays: a thread may be walking still */
	expander_set(0, 0, NULL);
	registered = false;
}

bool mp_pyframes_registered(void)
{
	return registered;
}
