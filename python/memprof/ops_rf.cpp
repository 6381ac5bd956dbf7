// SPDX-License-Identifier: MIT
/*
 * Op kernels from PyTorch's RecordFunction: the only C++ of the package,
 * because RecordFunction has no C API.
 *
 * One global callback (scope FUNCTION: every aten op that goes through the
 * dispatcher, nested ones included, as torch.profiler sees them) begins a
 * kernel named as torch.profiler names the op and ends it when the op
 * returns. The callbacks hold no lock, take no GIL, allocate nothing and
 * make no syscall: a kernel is libmemprof's marker path, whose name cache
 * is keyed by the name's pointer (an op's schema name, stable for the
 * process). The callback is registered only while op kernels are wanted
 * (memprof.torch's Python side registers and removes it); registered and
 * no profiler attached, it returns after the attached check.
 */
#include <ATen/record_function.h>

#include <cerrno>
#include <cstdio>

#include "ops.h"

namespace
{

struct mp_py_binding lib;
at::CallbackHandle handle = at::INVALID_CALLBACK_HANDLE;
bool handle_shapes;
std::atomic<bool> all_threads{ false };
// the ops' inputs are there when any callback asked for them (torch.profiler
// with record_shapes too): shapes only when ours did
std::atomic<bool> shapes_on{ false };

/*
 * A thread's record of the ops it is inside: bit d of began says whether
 * the op at nesting depth d began a kernel, so that its end ends one only
 * then (the profiler may attach or detach while an op runs; an op deeper
 * than 64 begins none). An op's start and end run on its thread, in
 * nesting order (PyTorch's async RPC ops excepted, which end elsewhere).
 * ops counts the thread's memprof.torch.ops() blocks. initial-exec: no
 * __tls_get_addr, which may allocate.
 */
struct rf_tls {
	uint64_t began;
	uint32_t depth;
	uint32_t ops;
};
__thread rf_tls tls __attribute__((tls_model("initial-exec")));

constexpr unsigned MAX_DEPTH = 64;
constexpr int MAX_SHAPES = 16; // per op, as the Python markers
constexpr size_t MAX_RANK = 8; // MEMPROF_MAX_RANK

/* The shape of @t, if it has one a kernel can carry; 1 if given. */
int tensor_shape(const at::Tensor &t)
{
	if (!t.defined())
		return 0;
	try {
		c10::IntArrayRef s = t.sizes();

		if (s.size() > MAX_RANK)
			return 0;
		return lib.input_shape(s.data(), (int)s.size()) >= 0;
	} catch (...) {
		// symbolic or nested sizes: no shape
		return 0;
	}
}

void input_shapes(const at::RecordFunction &fn)
{
	int n = 0;

	for (const c10::IValue &v : fn.inputs()) {
		if (v.isTensor()) {
			n += tensor_shape(v.toTensor());
		} else if (v.isList()) {
			for (const c10::IValue &w : v.toListRef()) {
				if (w.isTensor())
					n += tensor_shape(w.toTensor());
				if (n >= MAX_SHAPES)
					return;
			}
		}
		if (n >= MAX_SHAPES)
			return;
	}
}

std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction &fn)
{
	uint32_t d = tls.depth++;
	uint64_t bit = d < MAX_DEPTH ? 1ull << d : 0;
	int r;

	tls.began &= ~bit;
	if (!bit || !(tls.ops || all_threads.load(std::memory_order_relaxed)) || !lib.attached())
		return nullptr;
	r = lib.kernel_begin(fn.name());
	// -ENOSPC: the record was dropped (and counted) but the kernel is
	// open on the thread's stack, and must be ended
	if (r < 0 && r != -ENOSPC)
		return nullptr;
	tls.began |= bit;
	if (shapes_on.load(std::memory_order_relaxed) && fn.needsInputs())
		input_shapes(fn);
	return nullptr;
}

void on_end(const at::RecordFunction &, at::ObserverContext *)
{
	uint32_t d;

	if (!tls.depth) // began before this thread's record existed
		return;
	d = --tls.depth;
	if (d < MAX_DEPTH && (tls.began >> d & 1)) {
		tls.began &= ~(1ull << d);
		lib.kernel_end();
	}
}

} // namespace

void mp_ops_init(const struct mp_py_binding *b)
{
	lib = *b;
}

int mp_ops_register(int shapes, char *err, size_t len)
{
	at::CallbackHandle h;

	if (handle != at::INVALID_CALLBACK_HANDLE && handle_shapes == !!shapes)
		return 0;
	try {
		h = at::addGlobalCallback(at::RecordFunctionCallback(on_start, on_end)
						  .needsInputs(!!shapes)
						  .scopes({ at::RecordScope::FUNCTION }));
	} catch (const std::exception &e) {
		snprintf(err, len, "%s", e.what());
		return -1;
	}
	// the one it replaces goes after: no op runs under neither
	mp_ops_unregister();
	handle = h;
	handle_shapes = !!shapes;
	shapes_on.store(handle_shapes, std::memory_order_relaxed);
	return 0;
}

void mp_ops_unregister(void)
{
	if (handle == at::INVALID_CALLBACK_HANDLE)
		return;
	try {
		at::removeCallback(handle);
	} catch (...) {
		// an unknown handle: nothing registered
	}
	handle = at::INVALID_CALLBACK_HANDLE;
}

int mp_ops_registered(void)
{
	if (handle == at::INVALID_CALLBACK_HANDLE)
		return 0;
	return handle_shapes ? 2 : 1;
}

void mp_ops_all_threads(int on)
{
	all_threads.store(on != 0, std::memory_order_relaxed);
}

int mp_ops_all_threads_on(void)
{
	return all_threads.load(std::memory_order_relaxed);
}

void mp_ops_thread_enter(void)
{
	tls.ops++;
}

void mp_ops_thread_exit(void)
{
	if (tls.ops)
		tls.ops--;
}
