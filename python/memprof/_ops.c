/* SPDX-License-Identifier: MIT */
/*
 * _ops: aten ops as memprof kernels, from PyTorch's RecordFunction
 * callbacks (ops_rf.cpp). memprof.torch drives it; this side is the
 * CPython module. It is a module of its own, linked with libtorch, so that
 * `import memprof` never loads PyTorch.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "binding.h"
#include "ops.h"

static PyObject *fn_register(PyObject *self, PyObject *shapes)
{
	char err[512];
	int on = PyObject_IsTrue(shapes);

	if (on < 0)
		return NULL;
	if (mp_ops_register(on, err, sizeof(err)) < 0) {
		PyErr_Format(PyExc_RuntimeError, "memprof: PyTorch refused the op callback: %s",
			     err);
		return NULL;
	}
	Py_RETURN_NONE;
}

static PyObject *fn_unregister(PyObject *self, PyObject *unused)
{
	mp_ops_unregister();
	Py_RETURN_NONE;
}

static PyObject *fn_registered(PyObject *self, PyObject *unused)
{
	return PyLong_FromLong(mp_ops_registered());
}

static PyObject *fn_all_threads(PyObject *self, PyObject *on)
{
	int v = PyObject_IsTrue(on);

	if (v < 0)
		return NULL;
	mp_ops_all_threads(v);
	Py_RETURN_NONE;
}

static PyObject *fn_thread_enter(PyObject *self, PyObject *unused)
{
	mp_ops_thread_enter();
	Py_RETURN_NONE;
}

static PyObject *fn_thread_exit(PyObject *self, PyObject *unused)
{
	mp_ops_thread_exit();
	Py_RETURN_NONE;
}

static PyMethodDef functions[] = {
	{ "register", fn_register, METH_O,
	  "Register the op callback (with the ops' input shapes if the argument is true)." },
	{ "unregister", fn_unregister, METH_NOARGS, "Remove the op callback." },
	{ "registered", fn_registered, METH_NOARGS,
	  "0: no op callback; 1: registered; 2: registered with input shapes." },
	{ "all_threads", fn_all_threads, METH_O,
	  "Whether the ops of every thread are kernels, or only those inside thread_enter()." },
	{ "thread_enter", fn_thread_enter, METH_NOARGS,
	  "This thread's ops are kernels until the matching thread_exit()." },
	{ "thread_exit", fn_thread_exit, METH_NOARGS, "Ends one thread_enter()." },
	{ NULL, NULL, 0, NULL },
};

static struct PyModuleDef module = {
	PyModuleDef_HEAD_INIT,
	.m_name = "memprof._ops",
	.m_doc = "aten ops as memprof kernels (RecordFunction); use memprof.torch.",
	.m_size = -1,
	.m_methods = functions,
};

/* The entry points memprof._memprof bound: one libmemprof for both. */
static int bind(void)
{
	PyObject *mod = PyImport_ImportModule("memprof._memprof");
	PyObject *cap;
	const struct mp_py_binding *b;

	if (!mod)
		return -1;
	cap = PyObject_GetAttrString(mod, MP_PY_BINDING_ATTR);
	Py_DECREF(mod);
	if (!cap)
		return -1;
	b = PyCapsule_GetPointer(cap, MP_PY_BINDING_NAME);
	Py_DECREF(cap);
	if (!b)
		return -1;
	if (b->size < sizeof(*b)) {
		PyErr_SetString(PyExc_ImportError,
				"memprof: memprof._memprof is older than memprof._ops");
		return -1;
	}
	mp_ops_init(b);
	return 0;
}

PyMODINIT_FUNC PyInit__ops(void);
PyMODINIT_FUNC PyInit__ops(void)
{
	if (bind() < 0)
		return NULL;
	return PyModule_Create(&module);
}
