# SPDX-License-Identifier: MIT
"""bench/python.py: the cost of the memprof Python package and of
memprof.torch (run by bench/run; `BENCH_ONLY=python bench/run` runs only
these). Every figure is a ratio to a baseline measured in the same process
or the same invocation, alternating, fastest of the rounds.

Modes (Debian's /usr/bin/python3, which python3-torch belongs to):
  markers OUT.json      ns per marker against a Python function call
  torch-markers OUT.json  ns per module kernel and per op kernel (with
                        input shapes) on a CNN forward pass, and the
                        dormant hooks' overhead
  cnn                   the five-pass CNN script timed by bench/run
  transformer MEMPROF   op kernels on a GPT-like decoder
                        (bench/torch_transformer.py): per-op cost attached
                        and dormant, and the script untraced, under
                        `MEMPROF run --torch` and under torch.profiler
                        (profile_memory=True); prints section 6's rows
"""
import json
import os
import subprocess
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
    with memprof.torch's module hooks, with module hooks and op kernels
    (with input shapes)."""
    import memprof.torch as mt
    from torch.profiler import ProfilerActivity, profile

    torch, m, x = _model()
    counts = {"modules": 0}

    h = torch.nn.modules.module.register_module_forward_pre_hook(
        lambda mod, inp: counts.__setitem__("modules", counts["modules"] + 1))
    # every op RecordFunction sees, nested ones included: each is a kernel
    with torch.no_grad(), profile(activities=[ProfilerActivity.CPU]) as prof:
        m(x)
    counts["ops"] = sum(e.count for e in prof.key_averages())
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
            with mt.ops(shapes=True):
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


def _run_json(cmd, env=None):
    """The last line of @cmd's output that is a JSON object, and the
    command's wall time; (None, error) if it failed."""
    t0 = time.monotonic()
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.monotonic() - t0
    lines = [x for x in r.stdout.splitlines() if x.startswith("{")]
    if r.returncode != 0 or not lines:
        return None, (r.stderr or r.stdout)[-300:].replace("\n", " ")
    return json.loads(lines[-1]), wall


def transformer(memprof, rounds=5):
    """Section 6's transformer rows (markdown on stdout)."""
    py = sys.executable if sys.executable.startswith("/usr/bin/") else "/usr/bin/python3"
    here = os.path.dirname(os.path.abspath(__file__))
    tt = os.path.join(here, "torch_transformer.py")
    build = os.path.dirname(os.path.dirname(os.path.abspath(memprof)))
    env = dict(os.environ, PYTHONPATH=os.path.join(build, "python"))
    env.pop("MEMPROF_TORCH_SHAPES", None)
    tmp = os.environ.get("TMPDIR", "/tmp")
    cost = {}
    for name, cmd, e in (("dormant", [py, tt, "op-cost"], env),
                         ("attached", [memprof, "run", "--print", "none", "--", py, tt, "op-cost"],
                          None)):
        f = os.path.join(tmp, "memprof-bench-transformer-%s-%d.json" % (name, os.getpid()))
        r = subprocess.run(cmd + [f], env=e, capture_output=True, text=True)
        if r.returncode != 0:
            print("transformer: failed: `%s`: %s" % (" ".join(cmd), r.stderr[-300:]))
            return
        cost[name] = json.load(open(f))
        os.unlink(f)
    runs = [("untraced", [py, tt, "steps"], env),
            ("`memprof run` (allocations only, no kernels)",
             [memprof, "run", "--print", "none", "--", py, tt, "steps"], None),
            ("`memprof run --torch`",
             [memprof, "run", "--print", "none", "--torch", "--", py, tt, "steps"], None),
            ("torch.profiler (`profile_memory=True`)", [py, tt, "steps", "--profiler"], env)]
    step = {n: [] for n, _, _ in runs}
    wall = {n: [] for n, _, _ in runs}
    err = {}
    for r_ in range(rounds):
        for k in range(len(runs)):
            name, cmd, e = runs[(k + r_) % len(runs)]
            res, w = _run_json(cmd, e)
            if res is None:
                err[name] = w
                continue
            step[name].append(res["step_ms"])
            wall[name].append(w)
    d, a = cost["dormant"], cost["attached"]
    n = a["n_ops"]
    lines = ["",
             "Op kernels on a transformer (`bench/torch_transformer.py`: a GPT-like decoder, 12 "
             "pre-norm blocks of causal self-attention and an MLP, width 64, random weights, "
             "one sequence of 32 tokens, inference on one thread; %d aten ops a step, nested ones "
             "included, as torch.profiler counts them). Per-op costs are from alternating rounds "
             "in one process (fastest of 20, the order rotated each round): steps without op kernels against steps inside "
             "`memprof.torch.ops()`, and a loop of one tiny op (`torch.neg(a, out=b)` on one "
             "element) likewise; `attached` runs under `memprof run`, `dormant` without a "
             "profiler.\n" % n,
             "| op kernel | per op, transformer step | per op, tiny op | target |",
             "|---|---|---|---|"]

    def per_op(r, key):
        return ((r[key] - r["plain"]) / n, r["tiny_" + key] - r["tiny_plain"])

    for label, r, key, target in (
            ("attached", a, "ops", "<= 2 us"),
            ("attached, with input shapes (`ops(shapes=True)`)", a, "ops_shapes", ""),
            ("dormant, inside an `ops()` block (no callback registered)", d, "ops",
             "not measurable"),
            ("dormant, inside `ops(shapes=True)`", d, "ops_shapes", "not measurable")):
        s_, t_ = per_op(r, key)
        lines.append("| %s | %+.0f ns | %+.0f ns | %s |" % (label, s_, t_, target))
    lines.append("\nThe tiny op costs %.0f ns untraced (%.0f ns in the attached process). The "
                 "same script, whole steps: fastest step of 5 rounds of 10 steps after 2 warm-up "
                 "steps, and the whole command's wall time (import, model build and the "
                 "profile's writing included), fastest of %d alternating runs:\n"
                 % (d["tiny_plain"], a["tiny_plain"], rounds))
    lines.append("| run | ms a step | ratio | wall s | ratio | target |")
    lines.append("|---|---|---|---|---|---|")
    base = min(step["untraced"]) if step["untraced"] else None
    wbase = min(wall["untraced"]) if wall["untraced"] else None
    for name, _, _ in runs:
        if not step[name]:
            lines.append("| %s | failed: %s | | | | |" % (name, err.get(name, "?")))
            continue
        sm, wm = min(step[name]), min(wall[name])
        target = "<= 1.5x" if "--torch" in name else ""
        lines.append("| %s | %.1f | %s | %.2f | %s | %s |" % (
            name, sm, "%.2fx" % (sm / base) if base else "", wm,
            "%.2fx" % (wm / wbase) if wbase else "", target))
    print("\n".join(lines))


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "markers":
        markers(sys.argv[2])
    elif mode == "torch-markers":
        torch_markers(sys.argv[2])
    elif mode == "cnn":
        cnn()
    elif mode == "transformer":
        transformer(sys.argv[2])
    else:
        sys.exit("bench/python.py: unknown mode %r" % mode)
