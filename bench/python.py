# SPDX-License-Identifier: MIT
"""bench/python.py: the cost of the memprof Python package and of
memprof.torch (run by bench/run; `BENCH_ONLY=python bench/run` runs only
these). Every figure is a ratio to a baseline measured in the same process
or the same invocation, alternating, fastest of the rounds.

Modes (Debian's /usr/bin/python3, which python3-torch belongs to):
  markers OUT.json      ns per marker against a Python function call
  torch-markers OUT.json  ns per module kernel and per op kernel on a CNN
                        forward pass, and the dormant hooks' overhead
  cnn                   the five-pass CNN script timed by bench/run
"""
import json
import sys
import time

ROUNDS = 7


def best(fn, n):
    """Fastest of ROUNDS, in ns per iteration."""
    t = []
    for _ in range(ROUNDS):
        t0 = time.perf_counter_ns()
        fn(n)
        t.append((time.perf_counter_ns() - t0) / n)
    return min(t)


def markers(out):
    import memprof

    k = memprof.kernel("bench")

    def call(n):
        def f():
            pass
        for _ in range(n):
            f()

    def with_kept(n):
        for _ in range(n):
            with k:
                pass

    def with_new(n):
        kernel = memprof.kernel
        for _ in range(n):
            with kernel("bench"):
                pass

    @memprof.kernel("bench")
    def deco():
        pass

    def decorated(n):
        for _ in range(n):
            deco()

    def attached(n):
        a = memprof.attached
        for _ in range(n):
            a()

    n = 200000
    r = {"attached": memprof.attached(), "call": best(call, n)}
    for name, fn in (("with_kept", with_kept), ("with_new", with_new),
                     ("decorated", decorated), ("attached_check", attached)):
        r[name] = best(fn, n)
    json.dump(r, open(out, "w"))


def _model():
    import torch
    import torchvision

    torch.manual_seed(0)
    torch.set_num_threads(1)
    m = torchvision.models.resnet18()
    m.eval()
    return torch, m, torch.randn(1, 3, 64, 64)


def torch_markers(out):
    """Alternating rounds in one process: forward passes with no hooks,
    with memprof.torch's module hooks, with module hooks and op kernels."""
    import memprof.torch as mt
    from torch.utils._python_dispatch import TorchDispatchMode

    torch, m, x = _model()
    counts = {"ops": 0, "modules": 0}

    class Count(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            counts["ops"] += 1
            return func(*args, **(kwargs or {}))

    h = torch.nn.modules.module.register_module_forward_pre_hook(
        lambda mod, inp: counts.__setitem__("modules", counts["modules"] + 1))
    with torch.no_grad(), Count():
        m(x)
    h.remove()

    passes = 5
    t = {"plain": [], "modules": [], "modules+ops": []}
    with torch.no_grad():
        for _ in range(3):
            m(x)
        for _ in range(ROUNDS * 2):
            t0 = time.perf_counter_ns()
            for _ in range(passes):
                m(x)
            t["plain"].append(time.perf_counter_ns() - t0)
            mt.instrument(m)
            t0 = time.perf_counter_ns()
            for _ in range(passes):
                m(x)
            t["modules"].append(time.perf_counter_ns() - t0)
            with mt.ops():
                t0 = time.perf_counter_ns()
                for _ in range(passes):
                    m(x)
                t["modules+ops"].append(time.perf_counter_ns() - t0)
            mt.uninstrument()
    r = {k: min(v) / passes for k, v in t.items()}
    r["n_modules"], r["n_ops"] = counts["modules"], counts["ops"]
    r["attached"] = mt._attached()
    json.dump(r, open(out, "w"))


def cnn():
    """Five inference passes of a CNN with random weights (the script
    `memprof run --torch` is timed on, import and model build included)."""
    torch, m, _ = _model()
    x = torch.randn(1, 3, 224, 224)
    with torch.no_grad():
        for _ in range(5):
            m(x)


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "markers":
        markers(sys.argv[2])
    elif mode == "torch-markers":
        torch_markers(sys.argv[2])
    elif mode == "cnn":
        cnn()
    else:
        sys.exit("bench/python.py: unknown mode %r" % mode)
