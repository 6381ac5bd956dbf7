# SPDX-License-Identifier: MIT
"""memprof.torch: PyTorch modules and aten ops as memprof kernels.

    import memprof.torch

    model = build_model()
    memprof.torch.instrument(model)      # module kernels, inference phase
    with torch.no_grad(), memprof.torch.ops():
        model(x)                         # + one kernel per aten op

Module kernels are named by the module's path in its model and its class
(`layer1.0.conv1:Conv2d`; the model itself by its class) and nest as the
modules nest. Op kernels come from PyTorch's RecordFunction callbacks (in
C++, memprof._ops): every aten op, nested ones included, named as
torch.profiler names it (`aten::convolution` inside `aten::conv2d`), with
its tensors' input shapes when asked. Forward passes under no_grad or
inference_mode run in the phase "inference".

While no profiler is attached every hook returns after one check, so a
service can keep them installed and be attached to later by pid.
`memprof run --torch` installs all of it in an unmodified script
(docs/PYTHON.md).
"""
import os
import threading
import warnings
import weakref

import torch

from . import _build, _memprof, kernel

__all__ = ["instrument", "ops", "uninstrument", "ops_unavailable"]

try:
    from . import _ops
    ops_unavailable = None
except ImportError as e:  # built without libtorch-dev, or another PyTorch
    _ops = None
    ops_unavailable = _build.OPS_MISSING or str(e)
    warnings.warn("memprof.torch: op kernels are unavailable (%s); module kernels still work"
                  % ops_unavailable, RuntimeWarning, stacklevel=2)

_attached = _memprof.attached
_module_kernels = weakref.WeakKeyDictionary()  # module -> memprof.kernel
_tls = threading.local()
# auto: the ops of every thread are kernels while a profiler is attached
# (memprof run --torch); blocks, shape_blocks: ops() blocks open, and those
# that asked for shapes
_state = {"handles": None, "phases": True, "auto": False, "auto_shapes": False,
          "blocks": 0, "shape_blocks": 0, "phase": None}


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


def _sync():
    """Registers the op callback while op kernels are wanted (an ops()
    block is open, or --torch) and a profiler is attached, with the ops'
    inputs if any of them asked for shapes, and removes it otherwise:
    while dormant PyTorch runs no callback of ours at all. Called where a
    few Python operations do not count: an ops() block's entry and exit, a
    top-level forward pass's start."""
    if _ops is None:
        return
    st = _state
    shapes = st["shape_blocks"] > 0 or (st["auto"] and st["auto_shapes"])
    if (st["blocks"] or st["auto"]) and _attached():
        _ops.register(shapes)
    elif _ops.registered():
        _ops.unregister()


class ops:
    """ops(shapes=False): a context manager: every aten op this thread runs
    inside the block, nested ones included, is a kernel, when a profiler
    is attached at the block's entry (or, with instrument(), at the start
    of a top-level forward pass inside it). With SHAPES, kernels carry
    their ops' input shapes (PyTorch then boxes every op's arguments: it
    costs)."""

    __slots__ = ("shapes",)

    def __init__(self, shapes=False):
        self.shapes = bool(shapes)

    def __enter__(self):
        if _ops is not None:
            _state["blocks"] += 1
            _state["shape_blocks"] += self.shapes
            _ops.thread_enter()
            _sync()
        return self

    def __exit__(self, *exc):
        if _ops is not None:
            _ops.thread_exit()
            _state["blocks"] -= 1
            _state["shape_blocks"] -= self.shapes
            _sync()
        return False


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
        if _state["auto"] or _state["blocks"]:
            _sync()
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
    module kernels, the phase "load" until the first inference forward, and
    op kernels of every thread while a profiler is attached: from now if
    one is, else from the first forward pass that starts at the top after
    it attached; the callback is removed by the first one after it
    detached. MEMPROF_TORCH_SHAPES=1 adds the ops' input shapes."""
    _state["auto"] = True
    _state["auto_shapes"] = os.environ.get("MEMPROF_TORCH_SHAPES", "") not in ("", "0")
    if _ops is not None:
        _ops.all_threads(True)
    instrument(phases=True)
    _sync()
