# SPDX-License-Identifier: MIT
"""memprof.torch: PyTorch modules and aten ops as memprof kernels.

    import memprof.torch

    model = build_model()
    memprof.torch.instrument(model)      # module kernels, inference phase
    with torch.no_grad(), memprof.torch.ops():
        model(x)                         # + one kernel per aten op

Module kernels are named by the module's path in its model and its class
(`layer1.0.conv1:Conv2d`; the model itself by its class) and nest as the
modules nest. Op kernels are named as torch.profiler names them
(`aten::native_batch_norm`) and carry their tensors' shapes, which makes
the tf.profile view. Forward passes under no_grad or inference_mode run in
the phase "inference".

While no profiler is attached every hook returns after one check, so a
service can keep them installed and be attached to later by pid.
`memprof run --torch` installs all of it in an unmodified script
(docs/PYTHON.md).
"""
import threading
import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from . import _memprof, kernel

__all__ = ["instrument", "ops", "uninstrument"]

_attached = _memprof.attached
_module_kernels = weakref.WeakKeyDictionary()  # module -> memprof.kernel
_op_names = {}  # OpOverload -> "aten::name"
_tls = threading.local()
_state = {"handles": None, "phases": True, "ops_in_forward": False, "phase": None}


def _stack():
    s = getattr(_tls, "stack", None)
    if s is None:
        s = _tls.stack = []
    return s


def _name_tree(root):
    """Names every module under @root by its path, the first time @root
    runs a forward pass at the top (or when instrument() is given it)."""
    for path, m in root.named_modules():
        if m not in _module_kernels:
            cls = type(m).__name__
            _module_kernels[m] = kernel("%s:%s" % (path, cls) if path else cls)
    return _module_kernels[root]


def _tensor_shapes(values, out):
    for v in values:
        if isinstance(v, torch.Tensor):
            out.append(v.shape)
        elif isinstance(v, (list, tuple)):
            for w in v:
                if isinstance(w, torch.Tensor):
                    out.append(w.shape)
        if len(out) >= 16:
            del out[16:]
            break
    return out


class _Ops(TorchDispatchMode):
    """Each aten op that reaches the dispatcher's Python key, as a kernel."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if kwargs is None:
            kwargs = {}
        if not _attached():
            return func(*args, **kwargs)
        name = _op_names.get(func)
        if name is None:
            name = _op_names[func] = func._schema.name
        k = kernel(name)
        k.__enter__()
        try:
            ins = _tensor_shapes(args, [])
            if ins:
                _memprof.input_shapes(ins)
            res = func(*args, **kwargs)
            outs = _tensor_shapes(res if isinstance(res, (list, tuple)) else (res,), [])
            if outs:
                _memprof.output_shapes(outs)
        finally:
            k.__exit__(None, None, None)
        return res


def ops():
    """A context manager: every aten op dispatched inside the block on this
    thread is a kernel (when a profiler is attached)."""
    return _Ops()


def _set_phase(name):
    if _state["phase"] != name:
        _state["phase"] = name
        _memprof.phase_begin(name)


def _pre(module, inputs):
    # forward passes are followed even while dormant, so that a profiler
    # attached in the middle of one waits for the next at the top (names
    # are paths from the top-level module)
    depth = getattr(_tls, "depth", 0)
    _tls.depth = depth + 1
    if not depth:
        _tls.top = module
    if not _attached():
        return
    stack = _stack()
    if not stack and depth:
        return
    k = _module_kernels.get(module)
    if k is None:
        k = _name_tree(module) if not stack else kernel(type(module).__name__)
        _module_kernels[module] = k
    if not stack:
        if _state["phases"] and (not torch.is_grad_enabled() or torch.is_inference_mode_enabled()):
            _set_phase("inference")
        if _state["ops_in_forward"]:
            mode = _Ops()
            mode.__enter__()
            _tls.mode = mode
    k.__enter__()
    stack.append(module)


def _post(module, inputs, output):
    # the top module's end resets the count (a forward that raised skipped
    # its inner modules' ends)
    _tls.depth = 0 if module is getattr(_tls, "top", None) else getattr(_tls, "depth", 1) - 1
    stack = getattr(_tls, "stack", None)
    if not stack or module not in stack:
        return
    # a forward that raised left its inner modules open: end them too
    while stack:
        m = stack.pop()
        _memprof_end()
        if m is module:
            break
    if not stack:
        mode = getattr(_tls, "mode", None)
        if mode is not None:
            _tls.mode = None
            mode.__exit__(None, None, None)


def _memprof_end():
    try:
        _END.__exit__(None, None, None)
    except _memprof.Error:
        pass


_END = kernel("(end)")  # any kernel object: __exit__ ends the innermost


def instrument(model=None, phases=True):
    """Make every nn.Module forward a kernel, from now on, in every model
    (global module hooks: models built earlier are covered too). MODEL, if
    given, is named now (its submodules by path); other models are named
    the first time they run at the top. With PHASES, a top-level forward
    under no_grad or inference_mode switches the phase to "inference"."""
    _state["phases"] = phases
    if model is not None:
        _name_tree(model)
    if _state["handles"] is None:
        mod = torch.nn.modules.module
        _state["handles"] = (mod.register_module_forward_pre_hook(_pre),
                             mod.register_module_forward_hook(_post))
    return model


def uninstrument():
    """Remove the hooks instrument() installed."""
    h = _state["handles"]
    if h is not None:
        for x in h:
            x.remove()
        _state["handles"] = None


def _auto():
    """What `memprof run --torch` installs (memprof/_boot/sitecustomize.py):
    module kernels, op kernels inside top-level forward passes, the phase
    "load" until the first inference forward."""
    _state["ops_in_forward"] = True
    instrument(phases=True)
