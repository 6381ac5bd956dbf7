/* SPDX-License-Identifier: MIT */
/*
 * _memprof: the CPython binding of libmemprof (docs/PYTHON.md).
 *
 * The module binds the copy of libmemprof the process already has (preloaded
 * by `memprof run`, linked, or opened by someone else) and opens one only
 * when there is none, so that markers and the interposer share one ring.
 * Every entry point is resolved once, at import; a marker is then one call
 * through a pointer, with no allocation after the marker object exists.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <dlfcn.h>
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "binding.h"
#include "pyframes.h"

#define MAX_RANK 8 /* MEMPROF_MAX_RANK */
#define MAX_SHAPES 16 /* shapes per side of one kernel */

static struct lib {
	int (*kernel_begin)(const char *);
	int (*kernel_end)(void);
	int (*input_shape)(const int64_t *, int);
	int (*output_shape)(const int64_t *, int);
	int (*phase)(const char *);
	int (*phase_end)(void); /* NULL: library older than 0.3 */
	int (*attached)(void); /* NULL: library older than 0.3 */
	int (*tag_begin)(const char *);
	int (*tag_end)(void);
	int (*pool_declare)(const char *, int);
	int (*pool_alloc)(int, const void *, uint64_t);
	int (*pool_free)(int, const void *);
	int (*pool_reset)(int);
	uint64_t (*dropped)(void);
	const char *(*version)(void);
	const char *(*strerror)(int);
	void *handle; /* where they were found (NULL: the global scope) */
	char path[4096];
} lib;

/* Why the Python frames walker is not registered ("" when it is). */
static char pyframes_reason[256];

static PyObject *memprof_error; /* memprof.Error, an OSError */

/* A library older than 0.3 cannot say: markers always written. */
static int attached_unknown(void)
{
	return 1;
}

/* For memprof._ops (binding.h), filled once the library is bound. */
static struct mp_py_binding binding;

/* A record the ring had no room for is dropped and counted (the profile's
 * drops): never an exception in the program being profiled. */
static int not_dropped(int r)
{
	return r == -ENOSPC ? 0 : r;
}

static PyObject *raise_lib(int r)
{
	PyObject *args = Py_BuildValue("(is)", -r, lib.strerror(r));

	if (args) {
		PyErr_SetObject(memprof_error, args);
		Py_DECREF(args);
	}
	return NULL;
}

/* ---- binding ---------------------------------------------------------- */

static void *sym(void *h, const char *name)
{
	return h ? dlsym(h, name) : dlsym(RTLD_DEFAULT, name);
}

static int resolve(void *h)
{
	struct {
		const char *name;
		void **slot;
		int required;
	} t[] = {
		{ "memprof_kernel_begin", (void **)&lib.kernel_begin, 1 },
		{ "memprof_kernel_end", (void **)&lib.kernel_end, 1 },
		{ "memprof_kernel_input_shape", (void **)&lib.input_shape, 1 },
		{ "memprof_kernel_output_shape", (void **)&lib.output_shape, 1 },
		{ "memprof_phase", (void **)&lib.phase, 1 },
		{ "memprof_phase_end", (void **)&lib.phase_end, 0 },
		{ "memprof_attached", (void **)&lib.attached, 0 },
		{ "memprof_tag_begin", (void **)&lib.tag_begin, 1 },
		{ "memprof_tag_end", (void **)&lib.tag_end, 1 },
		{ "memprof_pool_declare", (void **)&lib.pool_declare, 1 },
		{ "memprof_pool_alloc", (void **)&lib.pool_alloc, 1 },
		{ "memprof_pool_free", (void **)&lib.pool_free, 1 },
		{ "memprof_pool_reset", (void **)&lib.pool_reset, 1 },
		{ "memprof_dropped", (void **)&lib.dropped, 1 },
		{ "memprof_version", (void **)&lib.version, 1 },
		{ "memprof_strerror", (void **)&lib.strerror, 1 },
	};
	size_t i;

	for (i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		*t[i].slot = sym(h, t[i].name);
		if (!*t[i].slot && t[i].required)
			return -1;
	}
	lib.handle = h;
	return 0;
}

static void *lib_sym(const char *name)
{
	return sym(lib.handle, name);
}

/* Where the bound copy lives, for memprof.library. */
static void note_path(void)
{
	Dl_info info;

	if (dladdr((void *)lib.kernel_begin, &info) && info.dli_fname)
		snprintf(lib.path, sizeof(lib.path), "%s", info.dli_fname);
}

/* An address inside this extension, for dladdr. */
static void bind_library_anchor(void)
{
}

/* In a build tree, python/memprof/ sits beside libclient/. */
static const char *build_tree_copy(char *buf, size_t len)
{
	Dl_info info;
	char *slash;

	if (!dladdr((void *)bind_library_anchor, &info) || !info.dli_fname)
		return NULL;
	snprintf(buf, len, "%s", info.dli_fname);
	slash = strrchr(buf, '/');
	if (!slash || (size_t)(slash - buf) + sizeof("/../../libclient/libmemprof.so.0") > len)
		return NULL;
	strcpy(slash, "/../../libclient/libmemprof.so.0");
	return buf;
}

/* The copy already in the process, else MEMPROF_LIBRARY, else the
 * dynamic linker's search (libmemprof.so.0), else @fallback (the
 * directory meson installed it to), else the build tree's. */
static int bind_library(const char *fallback)
{
	char tree[4096];
	const char *env = getenv("MEMPROF_LIBRARY");
	const char *cands[4] = { env && *env ? env : NULL, "libmemprof.so.0", fallback,
				 build_tree_copy(tree, sizeof(tree)) };
	const char *err;
	void *h;
	size_t i;

	if (resolve(NULL) == 0)
		goto out;
	h = dlopen("libmemprof.so.0", RTLD_NOW | RTLD_NOLOAD);
	if (h && resolve(h) == 0)
		goto out;
	for (i = 0; i < 4; i++) {
		if (!cands[i])
			continue;
		h = dlopen(cands[i], RTLD_NOW | RTLD_GLOBAL);
		if (h && resolve(h) == 0)
			goto out;
	}
	err = dlerror();
	PyErr_Format(PyExc_ImportError,
		     "memprof: libmemprof not found in the process, by MEMPROF_LIBRARY, "
		     "the library path or %s (%s)",
		     fallback, err ? err : "no such file");
	return -1;
out:
	note_path();
	binding = (struct mp_py_binding){
		.size = sizeof(binding),
		.kernel_begin = lib.kernel_begin,
		.kernel_end = lib.kernel_end,
		.input_shape = lib.input_shape,
		.attached = lib.attached ? lib.attached : attached_unknown,
	};
	return 0;
}

/* ---- shapes ----------------------------------------------------------- */

struct shapes {
	int n;
	int rank[MAX_SHAPES];
	int64_t dims[MAX_SHAPES][MAX_RANK];
};

static int is_int_seq(PyObject *seq)
{
	Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);

	return n > 0 && PyLong_Check(PySequence_Fast_GET_ITEM(seq, 0));
}

static int one_shape(struct shapes *s, PyObject *shape, const char *what)
{
	PyObject *f = PySequence_Fast(shape, "a shape is a tuple of ints");
	Py_ssize_t n, i;
	int r = -1;

	if (!f)
		return -1;
	n = PySequence_Fast_GET_SIZE(f);
	if (n > MAX_RANK) {
		PyErr_Format(PyExc_ValueError, "memprof: %s shape of rank %zd (at most %d)", what,
			     n, MAX_RANK);
		goto out;
	}
	if (s->n == MAX_SHAPES) {
		PyErr_Format(PyExc_ValueError, "memprof: more than %d %s shapes", MAX_SHAPES, what);
		goto out;
	}
	for (i = 0; i < n; i++) {
		long long v = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(f, i));

		if (v == -1 && PyErr_Occurred())
			goto out;
		s->dims[s->n][i] = (int64_t)v;
	}
	s->rank[s->n++] = (int)n;
	r = 0;
out:
	Py_DECREF(f);
	return r;
}

/* None, one shape (a tuple of ints), or a sequence of shapes. */
static int parse_shapes(struct shapes *s, PyObject *arg, const char *what)
{
	PyObject *f;
	Py_ssize_t i;
	int r = 0;

	s->n = 0;
	if (!arg || arg == Py_None)
		return 0;
	f = PySequence_Fast(arg, "shapes are a tuple of ints or a sequence of them");
	if (!f)
		return -1;
	if (is_int_seq(f)) {
		r = one_shape(s, f, what);
	} else {
		for (i = 0; i < PySequence_Fast_GET_SIZE(f) && r == 0; i++)
			r = one_shape(s, PySequence_Fast_GET_ITEM(f, i), what);
	}
	Py_DECREF(f);
	return r;
}

/* ---- kernel and tag: context managers and decorators ------------------ */

typedef struct {
	PyObject_HEAD PyObject *name; /* str; its UTF-8 is cached by CPython */
	const char *utf8;
	int tag;
	struct shapes in, out;
} Marker;

static int marker_init_common(Marker *m, PyObject *name, int tag)
{
	if (!PyUnicode_Check(name)) {
		PyErr_SetString(PyExc_TypeError, "memprof: a name is a str");
		return -1;
	}
	m->utf8 = PyUnicode_AsUTF8(name);
	if (!m->utf8)
		return -1;
	if (!*m->utf8) {
		PyErr_SetString(PyExc_ValueError, "memprof: a name is not empty");
		return -1;
	}
	Py_INCREF(name);
	Py_XSETREF(m->name, name);
	m->tag = tag;
	return 0;
}

static int kernel_init(Marker *m, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "name", "inputs", "outputs", NULL };
	PyObject *name, *in = NULL, *out = NULL;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "U|OO:kernel", kwlist, &name, &in, &out))
		return -1;
	if (marker_init_common(m, name, 0) < 0)
		return -1;
	if (parse_shapes(&m->in, in, "input") < 0 || parse_shapes(&m->out, out, "output") < 0)
		return -1;
	return 0;
}

static int tag_init(Marker *m, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "name", NULL };
	PyObject *name;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "U:tag", kwlist, &name))
		return -1;
	return marker_init_common(m, name, 1);
}

static void marker_dealloc(Marker *m)
{
	Py_XDECREF(m->name);
	Py_TYPE(m)->tp_free((PyObject *)m);
}

static int marker_begin(Marker *m)
{
	int r, i;

	if (m->tag)
		return lib.tag_begin(m->utf8);
	r = lib.kernel_begin(m->utf8);
	for (i = 0; r >= 0 && i < m->in.n; i++)
		r = lib.input_shape(m->in.dims[i], m->in.rank[i]);
	for (i = 0; r >= 0 && i < m->out.n; i++)
		r = lib.output_shape(m->out.dims[i], m->out.rank[i]);
	return r;
}

static PyObject *marker_enter(Marker *m, PyObject *unused)
{
	int r;

	if (!m->utf8) {
		PyErr_SetString(PyExc_RuntimeError, "memprof: marker not initialised");
		return NULL;
	}
	r = not_dropped(marker_begin(m));
	if (r < 0)
		return raise_lib(r);
	Py_INCREF(m);
	return (PyObject *)m;
}

static PyObject *marker_exit(Marker *m, PyObject *const *args, Py_ssize_t nargs)
{
	int r = not_dropped(m->tag ? lib.tag_end() : lib.kernel_end());

	if (r < 0)
		return raise_lib(r);
	Py_RETURN_FALSE;
}

/* @marker: wraps the function in memprof.__init__'s _decorate. */
static PyObject *marker_call(Marker *m, PyObject *args, PyObject *kw)
{
	PyObject *mod, *deco, *fn, *res;

	if (kw || PyTuple_GET_SIZE(args) != 1 || !PyCallable_Check(PyTuple_GET_ITEM(args, 0))) {
		PyErr_SetString(
			PyExc_TypeError,
			"memprof: a marker decorates one callable: @memprof.kernel(\"name\")");
		return NULL;
	}
	fn = PyTuple_GET_ITEM(args, 0);
	mod = PyImport_ImportModule("memprof");
	if (!mod)
		return NULL;
	deco = PyObject_GetAttrString(mod, "_decorate");
	Py_DECREF(mod);
	if (!deco)
		return NULL;
	res = PyObject_CallFunctionObjArgs(deco, (PyObject *)m, fn, NULL);
	Py_DECREF(deco);
	return res;
}

static PyObject *marker_repr(Marker *m)
{
	return PyUnicode_FromFormat("memprof.%s(%R)", m->tag ? "tag" : "kernel", m->name);
}

static PyObject *marker_get_name(Marker *m, void *unused)
{
	if (!m->name)
		Py_RETURN_NONE;
	Py_INCREF(m->name);
	return m->name;
}

static PyMethodDef marker_methods[] = {
	{ "__enter__", (PyCFunction)(void (*)(void))marker_enter, METH_NOARGS,
	  "Begin the marker." },
	{ "__exit__", (PyCFunction)(void (*)(void))marker_exit, METH_FASTCALL, "End the marker." },
	{ NULL, NULL, 0, NULL },
};

static PyGetSetDef marker_getset[] = {
	{ "name", (getter)(void (*)(void))marker_get_name, NULL, "The marker's name.", NULL },
	{ NULL, NULL, NULL, NULL, NULL },
};

static PyTypeObject kernel_type = {
	PyVarObject_HEAD_INIT(NULL, 0).tp_name = "memprof.kernel",
	.tp_basicsize = sizeof(Marker),
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "kernel(name, inputs=None, outputs=None)\n\n"
		  "A kernel: a region whose allocations memprof attributes to NAME.\n"
		  "Use it as a context manager (`with memprof.kernel(\"matmul\"):`) or\n"
		  "a decorator (`@memprof.kernel(\"matmul\")`). Kernels nest per\n"
		  "thread. INPUTS and OUTPUTS are shapes: a tuple of ints, or a\n"
		  "sequence of them; they make the tf.profile view. A kernel object\n"
		  "can be kept and entered again.",
	.tp_new = PyType_GenericNew,
	.tp_init = (initproc)(void (*)(void))kernel_init,
	.tp_dealloc = (destructor)(void (*)(void))marker_dealloc,
	.tp_call = (ternaryfunc)(void (*)(void))marker_call,
	.tp_repr = (reprfunc)(void (*)(void))marker_repr,
	.tp_methods = marker_methods,
	.tp_getset = marker_getset,
};

static PyTypeObject tag_type = {
	PyVarObject_HEAD_INIT(NULL, 0).tp_name = "memprof.tag",
	.tp_basicsize = sizeof(Marker),
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "tag(name)\n\n"
		  "Allocations made on this thread while the tag is open are owned\n"
		  "by NAME (the TAG table). A context manager or a decorator.",
	.tp_new = PyType_GenericNew,
	.tp_init = (initproc)(void (*)(void))tag_init,
	.tp_dealloc = (destructor)(void (*)(void))marker_dealloc,
	.tp_call = (ternaryfunc)(void (*)(void))marker_call,
	.tp_repr = (reprfunc)(void (*)(void))marker_repr,
	.tp_methods = marker_methods,
	.tp_getset = marker_getset,
};

/* ---- functions -------------------------------------------------------- */

static PyObject *check(int r)
{
	r = not_dropped(r);
	if (r < 0)
		return raise_lib(r);
	Py_RETURN_NONE;
}

static PyObject *fn_phase_begin(PyObject *self, PyObject *name)
{
	const char *s;

	if (!PyUnicode_Check(name)) {
		PyErr_SetString(PyExc_TypeError, "memprof: a name is a str");
		return NULL;
	}
	s = PyUnicode_AsUTF8(name);
	if (!s)
		return NULL;
	if (!*s) {
		PyErr_SetString(PyExc_ValueError, "memprof: a name is not empty");
		return NULL;
	}
	return check(lib.phase(s));
}

static PyObject *fn_phase_end(PyObject *self, PyObject *unused)
{
	if (!lib.phase_end)
		return check(-ENOSYS);
	return check(lib.phase_end());
}

static PyObject *fn_attached(PyObject *self, PyObject *unused)
{
	if (!lib.attached)
		return check(-ENOSYS);
	return PyBool_FromLong(lib.attached());
}

static PyObject *fn_dropped(PyObject *self, PyObject *unused)
{
	return PyLong_FromUnsignedLongLong(lib.dropped());
}

static PyObject *fn_pool_declare(PyObject *self, PyObject *args)
{
	const char *name;
	int kind, r;

	if (!PyArg_ParseTuple(args, "si:pool_declare", &name, &kind))
		return NULL;
	r = lib.pool_declare(name, kind);
	if (r < 0)
		return raise_lib(r);
	return PyLong_FromLong(r);
}

static PyObject *fn_pool_alloc(PyObject *self, PyObject *args)
{
	unsigned long long addr, size;
	int pool;

	if (!PyArg_ParseTuple(args, "iKK:pool_alloc", &pool, &addr, &size))
		return NULL;
	return check(lib.pool_alloc(pool, (const void *)(uintptr_t)addr, size));
}

static PyObject *fn_pool_free(PyObject *self, PyObject *args)
{
	unsigned long long addr;
	int pool;

	if (!PyArg_ParseTuple(args, "iK:pool_free", &pool, &addr))
		return NULL;
	return check(lib.pool_free(pool, (const void *)(uintptr_t)addr));
}

static PyObject *fn_pool_reset(PyObject *self, PyObject *args)
{
	int pool;

	if (!PyArg_ParseTuple(args, "i:pool_reset", &pool))
		return NULL;
	return check(lib.pool_reset(pool));
}

/* A shape for the innermost open kernel of this thread (after the kernel
 * began: an op's outputs are known only once it ran). */
static PyObject *shape_common(PyObject *arg, int out)
{
	struct shapes s;
	int i, r = 0;

	if (parse_shapes(&s, arg, out ? "output" : "input") < 0)
		return NULL;
	for (i = 0; r >= 0 && i < s.n; i++)
		r = out ? lib.output_shape(s.dims[i], s.rank[i]) :
			  lib.input_shape(s.dims[i], s.rank[i]);
	return check(r);
}

static PyObject *fn_input_shapes(PyObject *self, PyObject *arg)
{
	return shape_common(arg, 0);
}

static PyObject *fn_output_shapes(PyObject *self, PyObject *arg)
{
	return shape_common(arg, 1);
}

/* python_frames(on): the walker registered with libmemprof or not. */
static PyObject *fn_python_frames(PyObject *self, PyObject *on)
{
	int v = PyObject_IsTrue(on);

	if (v < 0)
		return NULL;
	if (!v)
		mp_pyframes_unregister();
	else if (mp_pyframes_register(lib_sym, pyframes_reason, sizeof(pyframes_reason)) == 0)
		pyframes_reason[0] = '\0';
	return PyBool_FromLong(mp_pyframes_registered());
}

static PyObject *fn_python_frames_reason(PyObject *self, PyObject *unused)
{
	return PyUnicode_FromString(pyframes_reason);
}

static PyMethodDef functions[] = {
	{ "input_shapes", fn_input_shapes, METH_O,
	  "Input shapes (a tuple of ints, or a sequence of them) of the innermost open kernel." },
	{ "output_shapes", fn_output_shapes, METH_O,
	  "Output shapes (a tuple of ints, or a sequence of them) of the innermost open kernel." },
	{ "phase_begin", fn_phase_begin, METH_O, "Make NAME the process-wide phase." },
	{ "phase_end", fn_phase_end, METH_NOARGS, "End the current phase." },
	{ "attached", fn_attached, METH_NOARGS, "True while a profiler is attached." },
	{ "dropped", fn_dropped, METH_NOARGS, "Records dropped because the ring was full." },
	{ "pool_declare", fn_pool_declare, METH_VARARGS, "Declare a pool; returns its id." },
	{ "pool_alloc", fn_pool_alloc, METH_VARARGS, "A slice of a pool handed out." },
	{ "pool_free", fn_pool_free, METH_VARARGS, "A slice of a pool given back." },
	{ "pool_reset", fn_pool_reset, METH_VARARGS, "Every live slice of a pool given back." },
	{ "python_frames", fn_python_frames, METH_O,
	  "Python frames in call stacks on (True) or off (False); returns whether they are." },
	{ "python_frames_reason", fn_python_frames_reason, METH_NOARGS,
	  "Why Python frames are off (\"\" when they are on or were never asked for)." },
	{ NULL, NULL, 0, NULL },
};

static struct PyModuleDef module = {
	PyModuleDef_HEAD_INIT,
	.m_name = "memprof._memprof",
	.m_doc = "CPython binding of libmemprof; use the memprof package.",
	.m_size = -1,
	.m_methods = functions,
};

PyMODINIT_FUNC PyInit__memprof(void);
PyMODINIT_FUNC PyInit__memprof(void)
{
	PyObject *m, *cap;

	if (bind_library(MP_LIBDIR "/libmemprof.so.0") < 0)
		return NULL;
	if (PyType_Ready(&kernel_type) < 0 || PyType_Ready(&tag_type) < 0)
		return NULL;
	m = PyModule_Create(&module);
	if (!m)
		return NULL;
	memprof_error = PyErr_NewExceptionWithDoc(
		"memprof.Error", "An error reported by libmemprof (errno, message).", PyExc_OSError,
		NULL);
	if (!memprof_error || PyModule_AddObject(m, "Error", memprof_error) < 0)
		goto fail;
	Py_INCREF(memprof_error);
	Py_INCREF(&kernel_type);
	if (PyModule_AddObject(m, "kernel", (PyObject *)&kernel_type) < 0)
		goto fail;
	Py_INCREF(&tag_type);
	if (PyModule_AddObject(m, "tag", (PyObject *)&tag_type) < 0)
		goto fail;
	if (PyModule_AddStringConstant(m, "library", lib.path) < 0 ||
	    PyModule_AddStringConstant(m, "library_version", lib.version()) < 0)
		goto fail;
	cap = PyCapsule_New(&binding, MP_PY_BINDING_NAME, NULL);
	if (!cap || PyModule_AddObject(m, MP_PY_BINDING_ATTR, cap) < 0) {
		Py_XDECREF(cap);
		goto fail;
	}
	return m;
fail:
	Py_DECREF(m);
	return NULL;
}
