# SPDX-License-Identifier: MIT
# `memprof run` (libmemprof preloaded, or --torch) puts this directory first
# on the child's PYTHONPATH: the interpreter runs it at startup (its
# sitecustomize hook), before the script. It imports memprof, whose import
# puts Python frames into the call stacks libmemprof unwinds. With
# MEMPROF_TORCH=1 (--torch) it also starts the phase "load", ends the phase
# at exit (so teardown belongs to no phase), and instruments PyTorch as soon
# as the script imports it (memprof.torch: module and op kernels, the
# "inference" phase). A sitecustomize of the user's own, further on the
# path, still runs.
import atexit
import importlib.machinery
import importlib.util
import os
import sys


def _torch_ready():
    import memprof.torch
    memprof.torch._auto()


class _WatchTorch:
    """Instruments torch right after its import, without importing it in
    a script that never does."""

    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec("torch")
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            _torch_ready()

        spec.loader.exec_module = exec_module
        return spec


def _boot():
    torch = os.environ.get("MEMPROF_TORCH") == "1"
    try:
        import memprof
    except ImportError as e:
        sys.stderr.write("memprof%s: %s\n" % (" --torch" if torch else "", e))
        return
    if not torch:
        return
    memprof._memprof.phase_begin("load")
    atexit.register(memprof._memprof.phase_end)
    if "torch" in sys.modules:
        _torch_ready()
    else:
        sys.meta_path.insert(0, _WatchTorch())


def _chain():
    """Runs the next sitecustomize on the path, as the interpreter would
    have without this one."""
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)


_boot()
_chain()
