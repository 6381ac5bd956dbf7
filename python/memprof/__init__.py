# SPDX-License-Identifier: MIT
"""memprof: mark kernels, phases and tags for the memprof memory profiler.

    import memprof

    with memprof.phase("load"):
        model = build()

    with memprof.phase("inference"):
        with memprof.kernel("matmul", inputs=[(64, 64), (64, 64)], outputs=(64, 64)):
            y = a @ b

    @memprof.kernel("preprocess")
    def preprocess(x): ...

A profiler (`memprof run -- python3 app.py`, or `memprofd --pid PID` on a
process that has libmemprof) attributes every allocation made inside a
kernel to it. With no profiler attached, a marker costs about as much as a
Python function call and records nothing. See docs/PYTHON.md.
"""
import atexit as _atexit
import functools as _functools
import os as _os
import threading as _threading

from . import _memprof

__all__ = [
    "Error", "kernel", "tag", "phase", "Pool", "attached", "dropped",
    "library", "library_version", "python_frames",
]

Error = _memprof.Error
kernel = _memprof.kernel
tag = _memprof.tag
library = _memprof.library
library_version = _memprof.library_version
attached = _memprof.attached
dropped = _memprof.dropped


def python_frames(on=True):
    """Python frames in the call stacks of --stacks profiles (on by default
    from the first `import memprof`, off with MEMPROF_PYTHON_FRAMES=0):
    each eval-loop frame of an allocating thread is replaced by the Python
    frames it runs, function, file and line. Returns whether they are on;
    _memprof.python_frames_reason() says why not."""
    return _memprof.python_frames(bool(on))


if _os.environ.get("MEMPROF_PYTHON_FRAMES", "1") != "0":
    python_frames(True)
    # off before the interpreter tears its threads' state down
    _atexit.register(_memprof.python_frames, False)


def _decorate(marker, fn):
    """The wrapper behind @memprof.kernel(...) and @memprof.tag(...)."""
    @_functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with marker:
            return fn(*args, **kwargs)
    return wrapper


_phase_lock = _threading.Lock()
_phase_stack = []


class phase:
    """phase(name): make NAME the process-wide phase ("load", "inference").

    Called on its own, the phase lasts until the next one. Used as a
    context manager, it ends when the block exits: the enclosing phase (if
    any) is current again, else no phase is.
    """

    __slots__ = ("name", "_entered")

    def __init__(self, name):
        if not isinstance(name, str):
            raise TypeError("memprof: a name is a str")
        self.name = name
        self._entered = False
        with _phase_lock:
            _memprof.phase_begin(name)
            _phase_stack.append(name)

    def __enter__(self):
        self._entered = True
        return self

    def __exit__(self, *exc):
        with _phase_lock:
            # this phase and whatever was set inside the block without a
            # block of its own
            while _phase_stack and _phase_stack[-1] != self.name:
                _phase_stack.pop()
            if _phase_stack:
                _phase_stack.pop()
            if _phase_stack:
                _memprof.phase_begin(_phase_stack[-1])
            else:
                _memprof.phase_end()
        return False

    def __repr__(self):
        return "memprof.phase(%r)" % (self.name,)


class Pool:
    """Pool(name, device=False): an arena or device memory the program
    manages itself. Its slices (alloc/free/reset) are reported as the POOL
    table; device pools never count in host RSS figures."""

    __slots__ = ("name", "id")

    def __init__(self, name, device=False):
        self.name = name
        self.id = _memprof.pool_declare(name, 1 if device else 0)

    def alloc(self, addr, size):
        """Slice [addr, addr + size) handed out."""
        _memprof.pool_alloc(self.id, addr, size)

    def free(self, addr):
        """The slice at addr given back."""
        _memprof.pool_free(self.id, addr)

    def reset(self):
        """Every live slice given back at once."""
        _memprof.pool_reset(self.id)

    def __repr__(self):
        return "memprof.Pool(%r)" % (self.name,)
