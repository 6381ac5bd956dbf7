#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""tests/peers/battery.py: programs from peers' test suites, profiled three
ways and compared (docs/PROFILE.md, "The peers' battery").

Every program is built into a temporary directory and run under
`memprof run` (the in-process path), `memprof run --no-preload` (the eBPF
path) and heaptrack. For each run the table gives the calls to allocation
functions, the bytes they allocated, the bytes leaked (live at the end), the
heap peak, and for memprof the unknown frees, the corruption found and the
events dropped. Each program's verdict compares both paths with heaptrack
(and with each other): the figures must be equal, except for the differences
named in ALLOWANCES, each bounded; any other difference fails the battery.

mimalloc's test/test-stress.c and test/main-override.c come from Debian's
source package, fetched outside the tree by scripts/fetch-peers into
$MEMPROF_PEERS_DIR (default /var/cache/memprof/peers); without them the
battery is skipped (exit 77). heaptrack's own tests/manual cannot be had
from Debian's mirror here; tests/peers has programs of the same shapes.

Usage: battery.py --memprof BUILD/cli/memprof --source tests/peers
(as root; meson test -C build peers runs it so).
"""
import argparse
import glob
import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

SKIP = 77
PEERS_DIR = os.environ.get("MEMPROF_PEERS_DIR", "/var/cache/memprof/peers")

# Bytes one block of ld.so may differ by between two tools: 4 TLS modules
# of the DTV (16 bytes each), or 8 objects in a scope list (8 bytes each).
LDSO_PER_BLOCK = 64
POOL_MAX = 128 * 1024
# main-override.c frees two blocks it made with mi_reallocarray and
# mi_reallocarr, entry points no tool probes.
MI_UNSEEN_FREES = 2

ALLOWANCES = {
    "pool": "libstdc++'s emergency pool for exceptions: one block its constructor "
            "allocates before the entry point, where memprof attaches; heaptrack counts it "
            "(and frees it at exit). A C program has libstdc++ only under heaptrack, whose "
            "preload library needs it. Bound: 1 block of at most 128 KiB, allocated before "
            "main",
    "ld.so": "ld.so's own blocks (a new thread's DTV, the global scope a dlopen grows) are "
             "sized by the TLS modules and objects loaded, and each tool loads its own "
             "(libmemprof: 1 TLS module; heaptrack: 3, libheaptrack_preload, libunwind and "
             "libstdc++). Bound: as many blocks, each within 64 B; the peak within their "
             "total difference",
    "schedule": "the threads allocate and free at once: the peak is that of one run's "
                "interleaving, not of the program, and is not compared across runs. Bound: "
                "leaked <= peak <= bytes allocated on each run",
    "mi-names": "the program calls mimalloc by its own names (mimalloc-override.h turns "
                "malloc into mi_malloc): heaptrack hooks mi_malloc, mi_calloc, mi_realloc and "
                "mi_free by name, the eBPF path probes libmimalloc's malloc, calloc, realloc and "
                "free, which are the same functions, and the in-process path interposes the "
                "standard names only. Nobody sees mi_reallocarray and mi_reallocarr: the eBPF "
                "path sees the frees of their 2 blocks, counted as unknown frees (no look at "
                "the maps after them judged them: the process has exited). Bound: in "
                "process, exactly heaptrack's figures less the executable's own blocks; with "
                "eBPF, exactly heaptrack's and at most 2 frees of blocks never seen",
    "drops": "the eBPF path lost events (its ring buffer was full): its figures are bounds, "
             "as drops.heapBound says, and are checked as such against heaptrack's",
}


class Program:
    def __init__(self, name, build, args, schedule=False, mi_names=False, dlopen=False):
        self.name = name
        self.build = build      # builds it: returns [exe, its fixed arguments]
        self.args = args
        self.schedule = schedule
        self.mi_names = mi_names
        self.dlopen = dlopen


def sh(cmd, log=None):
    """Runs cmd, appends its output to log; its output, or RuntimeError."""
    env = dict(os.environ)
    env.pop("MALLOC_PERTURB_", None)    # meson's: no extra work in the targets
    out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         env=env)
    if log:
        with open(log, "a") as f:
            f.write("$ " + " ".join(cmd) + "\n" + out.stdout)
    if out.returncode != 0:
        raise RuntimeError("%s exited %d:\n%s" % (" ".join(cmd), out.returncode,
                                                  out.stdout[-4000:]))
    return out.stdout


def mimalloc_test_dir():
    found = sorted(glob.glob(os.path.join(PEERS_DIR, "mimalloc-*", "test", "test-stress.c")))
    return os.path.dirname(found[-1]) if found else None


def build_programs(src, mi, tmp):
    """The programs, each a Program whose build() compiles it in tmp."""
    cflags = ["-O1", "-fno-builtin"]

    def cc(out, srcs, extra=()):
        exe = os.path.join(tmp, out)
        sh(["cc"] + cflags + ["-o", exe] + srcs + list(extra))
        return exe

    def own(name, extra=()):
        return lambda: [cc(name, [os.path.join(src, name + ".c")], extra)]

    def threaded():
        exe = os.path.join(tmp, "threaded")
        sh(["c++"] + cflags + ["-std=c++17", "-pthread", "-o", exe,
                               os.path.join(src, "threaded.cpp")])
        return [exe]

    def dlopen():
        lib = os.path.join(tmp, "libpeers_dlopen.so")
        sh(["cc"] + cflags + ["-shared", "-fPIC", "-o", lib, os.path.join(src, "dlopen_lib.c")])
        return [cc("dlopen", [os.path.join(src, "dlopen_main.c")], ["-ldl"]), lib]

    def stress(out, extra=()):
        # mimalloc's stress test over the standard malloc/realloc/free
        return lambda: [cc(out, [os.path.join(mi, "test-stress.c")],
                           ["-O2", "-DUSE_STD_MALLOC", "-pthread"] + list(extra))]

    def override():
        return [cc("main-override", [os.path.join(mi, "main-override.c")], ["-lmimalloc"])]

    return [
        Program("leak", own("leak"), []),
        Program("peak", own("peak"), []),
        Program("dlopen", dlopen, [], dlopen=True),
        Program("threaded", threaded, [], schedule=True),
        Program("burst", own("burst", ["-pthread"]), ["32", "20000"]),
        Program("test-stress", stress("test-stress"), ["16", "10", "3"], schedule=True),
        Program("test-stress/mi", stress("test-stress-mi", ["-lmimalloc"]), ["16", "10", "2"],
                schedule=True),
        Program("main-override", override, [], mi_names=True),
    ]


# ---------------------------------------------------------------- memprof

def memprof_run(memprof, cmd, out, log, bpf):
    opts = ["--no-preload"] if bpf else []
    t = time.monotonic()
    sh([memprof, "run", "--print", "none", "-o", out] + opts + ["--"] + cmd, log)
    secs = time.monotonic() - t
    j = json.loads(sh([memprof, "report", out, "--format", "json"]))
    heap = j["heap"]
    owners = {o["name"]: o["heap"] for o in j.get("owners", [])}
    ld = next((h for n, h in owners.items() if n.startswith("ld-linux")), {})
    drops = j.get("drops", {})
    corr = j.get("corruption", {})
    rejected = corr.get("rejected", {})
    bad = [k for k, v in corr.items() if k != "rejected" and v]
    bad += ["rejected %s %d" % (k, v) for k, v in rejected.items() if v]
    return {
        "calls": heap["allocCount"], "bytes": heap["allocBytes"],
        "leaked": heap["bytesAdded"], "peak": j["peakBytes"],
        "unknown": j.get("unknownFrees", 0), "corruption": bad, "rejected": rejected,
        "drops_bpf": drops.get("bpf", 0), "drops_heap": drops.get("heap", 0),
        "lost_allocs": drops.get("bpfAllocs", 0) + drops.get("bpfReallocs", 0)
        + max(0, drops.get("bpf", 0) - drops.get("bpfAllocs", 0) - drops.get("bpfFrees", 0)
              - drops.get("bpfReallocs", 0) - drops.get("bpfOthers", 0)),
        "bound": drops.get("heapBound"),
        "internal": j.get("anomalies", {}).get("allocatorInternalFrees", 0),
        "ld_calls": ld.get("allocCount", 0), "ld_bytes": ld.get("allocBytes", 0),
        "ld_leaked": ld.get("bytesAdded", 0),
        "unowned": owners.get("(unknown)", {}).get("allocBytes", 0),
        "owners": {n: h["allocCount"] for n, h in owners.items() if h["allocCount"]},
        "secs": secs,
    }


# ---------------------------------------------------------------- heaptrack

def read_lines(path):
    if path.endswith(".gz"):
        with gzip.open(path, "rt", errors="replace") as f:
            yield from f
        return
    p = subprocess.Popen(["zstd", "-dc", path], stdout=subprocess.PIPE, text=True,
                         errors="replace")
    yield from p.stdout
    if p.wait() != 0:
        raise RuntimeError("zstd -dc %s failed" % path)


def heaptrack_data(path, exe):
    """Exact figures from heaptrack's data file: 's' strings, 'i' code
    addresses (module, then function/file/line per inlined frame), 't'
    trace nodes (address, parent), 'a' allocation kinds (size, trace),
    '+'/'-' an allocation/free of a kind; numbers in hex. Every block is
    put in one category by its trace: the emergency pool (libstdc++,
    allocated under ld.so's _dl_init, before main), another block from
    before main, ld.so's own, the executable's own, or any other."""
    strings, ips, traces, kinds = [None], [None], [None], []
    cat_of_trace = {}
    exe_base = os.path.basename(exe)

    def frames(t):
        while t:
            ip, parent = traces[t]
            yield ips[ip]
            t = parent

    def category(t):
        if t in cat_of_trace:
            return cat_of_trace[t]
        fs = list(frames(t))
        inner = os.path.basename(strings[fs[0][0]]) if fs and fs[0][0] else ""
        funcs = {strings[f] for fr in fs for f in fr[1] if f}
        if "_dl_init" in funcs:
            c = "pool" if inner.startswith("libstdc++") else "pre-main"
        elif inner.startswith("ld-linux"):
            c = "ld"
        elif inner == exe_base:
            c = "exe"
        else:
            c = "other"
        cat_of_trace[t] = c
        return c

    cats = {c: {"calls": 0, "bytes": 0, "leaked": 0, "max": 0}
            for c in ("pool", "pre-main", "ld", "exe", "other")}
    live = {"all": 0, "base": 0, "noexe": 0}
    peak = dict(live)
    frees = 0
    for line in read_lines(path):
        tag = line[:1]
        if tag == "+" or tag == "-":
            size, c = kinds[int(line[2:], 16)]
            d = size if tag == "+" else -size
            st = cats[c]
            if tag == "+":
                st["calls"] += 1
                st["bytes"] += size
                st["max"] = max(st["max"], size)
            else:
                frees += 1
            st["leaked"] += d
            live["all"] += d
            if c != "pool":
                live["base"] += d
                if c != "exe":
                    live["noexe"] += d
            for k in live:
                peak[k] = max(peak[k], live[k])
        elif tag == "a":
            size, trace = line.split()[1:3]
            kinds.append((int(size, 16), category(int(trace, 16))))
        elif tag == "t":
            ip, parent = line.split()[1:3]
            traces.append((int(ip, 16), int(parent, 16)))
        elif tag == "i":
            f = [int(x, 16) for x in line.split()[1:]]
            # module, then (function, file, line) per frame
            ips.append((f[1] if len(f) > 1 else 0, f[2::3]))
        elif tag == "s":
            # 's LEN STRING' (format 3) or 's STRING'
            m = re.match(r"s ([0-9a-f]+) (.*)$", line.rstrip("\n"))
            if m and int(m.group(1), 16) == len(m.group(2).encode()):
                strings.append(m.group(2))
            else:
                strings.append(line[2:].rstrip("\n"))
    return cats, peak, frees


def heaptrack_print_summary(ht_print, data):
    """heaptrack's own summary (calls exact, sizes rounded): a check of the
    reading above."""
    text = sh([ht_print, "-f", data, "-p", "0", "-a", "0", "-T", "0", "-l", "0",
               "--disable-builtin-suppressions", "--disable-embedded-suppressions"])
    units = {"B": 1, "K": 1e3, "M": 1e6, "G": 1e9}

    def size(label):
        m = re.search(label + r": ([0-9.]+)([BKMG])", text)
        return float(m.group(1)) * units[m.group(2)] if m else None

    m = re.search(r"calls to allocation functions: (\d+)", text)
    return (int(m.group(1)) if m else None, size("peak heap memory consumption"),
            size("total memory leaked"))


def heaptrack_run(ht, ht_print, cmd, prefix, log):
    t = time.monotonic()
    sh([ht, "-o", prefix] + cmd, log)
    secs = time.monotonic() - t
    data = next((prefix + s for s in (".zst", ".gz") if os.path.exists(prefix + s)), None)
    if not data:
        raise RuntimeError("heaptrack wrote no %s.zst or .gz" % prefix)
    cats, peak, frees = heaptrack_data(data, cmd[0])
    r = {
        "calls": sum(c["calls"] for c in cats.values()),
        "bytes": sum(c["bytes"] for c in cats.values()),
        "leaked": sum(c["leaked"] for c in cats.values()),
        "peak": peak["all"], "frees": frees, "cats": cats, "peaks": peak, "secs": secs,
    }
    calls, hpeak, hleaked = heaptrack_print_summary(ht_print, data)
    r["print_ok"] = (calls == r["calls"] and hpeak is not None and hleaked is not None
                     and abs(hpeak - r["peak"]) <= 0.005 * r["peak"] + 10
                     and abs(hleaked - r["leaked"]) <= 0.005 * r["leaked"] + 10)
    r["print"] = (calls, hpeak, hleaked)
    return r


def reference(h, without_exe=False):
    """heaptrack's figures less the pool (and the executable's own blocks)."""
    cats = h["cats"]
    keep = [c for c in cats if c != "pool" and not (without_exe and c == "exe")]
    ref = {k: sum(cats[c][k] for c in keep) for k in ("calls", "bytes", "leaked")}
    ref["peak"] = h["peaks"]["noexe" if without_exe else "base"]
    ref["ld_calls"] = cats["ld"]["calls"]
    ref["ld_bytes"] = cats["ld"]["bytes"]
    ref["ld_leaked"] = cats["ld"]["leaked"]
    return ref


# ---------------------------------------------------------------- checks

class Verdict:
    def __init__(self):
        self.fails = []
        self.allowed = {}   # allowance -> what it allowed, per path

    def fail(self, label, msg):
        self.fails.append("%s: %s" % (label, msg))

    def allow(self, name, label, what):
        self.allowed.setdefault(name, []).append("%s %s" % (label, what) if label else what)


def compare(x, ref, prog, label, v):
    """x (one memprof path) against ref (heaptrack's, after the pool and,
    for mi-names in process, the executable's own blocks)."""
    lost = x["drops_bpf"] or x["drops_heap"]
    ld_bound = LDSO_PER_BLOCK * max(ref["ld_calls"], x["ld_calls"])
    unseen = x["unknown"]
    if prog.mi_names and label == "eBPF" and unseen and not x["corruption"]:
        # frees of the blocks mi_reallocarray and mi_reallocarr made
        if unseen > MI_UNSEEN_FREES:
            v.fail(label, "%d frees of blocks never seen, more than the program's %d"
                   % (unseen, MI_UNSEEN_FREES))
        v.allow("mi-names", label, "%d frees of blocks never seen" % unseen)
    else:
        if x["corruption"]:
            # what the daemon made of the frees of blocks it never saw
            v.fail(label, "corruption: %s (unknown frees %d, allocator-internal frees %d, "
                   "events lost %d, of them allocations %d)"
                   % (", ".join(x["corruption"]), x["unknown"], x["internal"],
                      x["drops_bpf"] + x["drops_heap"], x["lost_allocs"]))
        if x["unknown"] > (x["lost_allocs"] if lost else 0):
            v.fail(label, "%d unknown frees (%d allocations lost)"
                   % (x["unknown"], x["lost_allocs"] if lost else 0))

    if lost:
        v.allow("drops", label, "%d events lost, figures %s bounds"
                % (x["drops_bpf"] + x["drops_heap"], x["bound"]))
        if x["drops_heap"]:
            v.fail(label, "%d heap records dropped in process (precise mode waits)"
                   % x["drops_heap"])
        if not x["bound"]:
            v.fail(label, "events lost, but no drops.heapBound")
        # the allocated totals are lower bounds whenever anything was lost
        if x["calls"] > ref["calls"] or x["bytes"] > ref["bytes"] + ld_bound:
            v.fail(label, "events lost, yet calls %d > %d or bytes %d > %d"
                   % (x["calls"], ref["calls"], x["bytes"], ref["bytes"]))
        for k in ("leaked", "peak"):
            if k == "peak" and prog.schedule:
                continue
            if x["bound"] == "lower" and x[k] > ref[k] + ld_bound:
                v.fail(label, "%s %d, a lower bound, above the true %d" % (k, x[k], ref[k]))
            if x["bound"] == "upper" and x[k] < ref[k] - ld_bound:
                v.fail(label, "%s %d, an upper bound, below the true %d" % (k, x[k], ref[k]))
        if x["bound"] != "exact":
            return

    if x["calls"] != ref["calls"] or x["ld_calls"] != ref["ld_calls"]:
        v.fail(label, "calls %d (ld.so %d), heaptrack %d (ld.so %d)"
               % (x["calls"], x["ld_calls"], ref["calls"], ref["ld_calls"]))
    if x["bytes"] - x["ld_bytes"] != ref["bytes"] - ref["ld_bytes"]:
        v.fail(label, "bytes %d (ld.so %d), heaptrack %d (ld.so %d)"
               % (x["bytes"], x["ld_bytes"], ref["bytes"], ref["ld_bytes"]))
    if x["leaked"] - x["ld_leaked"] != ref["leaked"] - ref["ld_leaked"]:
        v.fail(label, "leaked %d (ld.so %d), heaptrack %d (ld.so %d)"
               % (x["leaked"], x["ld_leaked"], ref["leaked"], ref["ld_leaked"]))
    ld_bytes = x["ld_bytes"] - ref["ld_bytes"]
    ld_leaked = x["ld_leaked"] - ref["ld_leaked"]
    if ld_bytes or ld_leaked:
        if abs(ld_bytes) > ld_bound or abs(ld_leaked) > ld_bound or ld_bytes % 8:
            v.fail(label, "ld.so's %d blocks: %+d B, leaked %+d B: beyond %d B a block"
                   % (x["ld_calls"], ld_bytes, ld_leaked, LDSO_PER_BLOCK))
        v.allow("ld.so", label, "%+d B in %d blocks, leaked %+d B"
                % (ld_bytes, x["ld_calls"], ld_leaked))
    if prog.schedule:
        v.allow("schedule", label, "peak %+d B" % (x["peak"] - ref["peak"]))
        if not x["leaked"] <= x["peak"] <= x["bytes"]:
            v.fail(label, "peak %d outside [leaked %d, bytes %d]"
                   % (x["peak"], x["leaked"], x["bytes"]))
    elif abs(x["peak"] - ref["peak"]) > abs(ld_bytes):
        v.fail(label, "peak %d, heaptrack %d (ld.so's blocks differ by %d B)"
               % (x["peak"], ref["peak"], ld_bytes))


def judge(prog, a, b, h):
    v = Verdict()
    cats = h["cats"]
    pool = cats["pool"]
    if pool["calls"]:
        v.allow("pool", "", "%d B in %d block" % (pool["bytes"], pool["calls"]))
        if pool["calls"] > 1 or pool["max"] > POOL_MAX:
            v.fail("heaptrack", "%d blocks allocated by libstdc++ before main (%d B)"
                   % (pool["calls"], pool["bytes"]))
    if cats["pre-main"]["calls"]:
        v.fail("heaptrack", "%d blocks (%d B) allocated before main, not by libstdc++"
               % (cats["pre-main"]["calls"], cats["pre-main"]["bytes"]))
    if not h["print_ok"]:
        v.fail("heaptrack", "heaptrack_print says calls %s, peak %s, leaked %s, not what its "
               "data file reads" % h["print"])
    if prog.mi_names:
        exe = cats["exe"]
        if not exe["calls"]:
            v.fail("heaptrack", "no call of the program to mimalloc seen")
        v.allow("mi-names", "in-process", "%d calls, %d B the program made by mimalloc's names"
                % (exe["calls"], exe["bytes"]))
        compare(a, reference(h, without_exe=True), prog, "in-process", v)
    else:
        compare(a, reference(h), prog, "in-process", v)
    compare(b, reference(h), prog, "eBPF", v)
    if prog.dlopen:
        if a["calls"] != b["calls"]:
            v.fail("dlopen", "%d allocations in process, %d with eBPF" % (a["calls"], b["calls"]))
        for label, x in (("in-process", a), ("eBPF", b)):
            if x["unowned"]:
                v.fail(label, "%d B owned by (unknown); owners %s" % (x["unowned"], x["owners"]))
    return v


# ---------------------------------------------------------------- main

def fmt(n):
    return "-" if n is None else "{:,}".format(n)


def row(prog, path, x):
    mp = "unknown" in x
    drops = corruption = unknown = "-"
    if mp:
        unknown = fmt(x["unknown"])
        corruption = ", ".join(c.replace("rejected ", "") for c in x["corruption"]
                               if c != "recordsRejected") or "none"
        drops = "0"
        if x["drops_bpf"] or x["drops_heap"]:
            drops = "%d (%s)" % (x["drops_bpf"] + x["drops_heap"], x["bound"])
    return ("%-15s %-10s %9s %15s %12s %13s %7s %-10s %s"
            % (prog, path, fmt(x["calls"]), fmt(x["bytes"]), fmt(x["leaked"]), fmt(x["peak"]),
               unknown, corruption, drops))


def missing_tools():
    need = ["heaptrack", "heaptrack_print", "cc", "c++"]
    missing = [t for t in need if not shutil.which(t)]
    if not os.path.exists("/usr/include/mimalloc-override.h"):
        missing.append("libmimalloc-dev")
    return missing


def run_program(prog, memprof, tmp):
    cmd = prog.build() + prog.args
    stem = os.path.join(tmp, prog.name.replace("/", "-"))
    log = stem + ".log"
    a = memprof_run(memprof, cmd, stem + ".inproc.memprof", log, False)
    b = memprof_run(memprof, cmd, stem + ".bpf.memprof", log, True)
    h = heaptrack_run("heaptrack", "heaptrack_print", cmd, stem + ".heaptrack", log)
    print("%-15s in-process %.1f s, eBPF %.1f s, heaptrack %.1f s"
          % (prog.name, a["secs"], b["secs"], h["secs"]), flush=True)
    return a, b, h


def report(results):
    print("\n%-15s %-10s %9s %15s %12s %13s %7s %-10s %s"
          % ("program", "path", "calls", "bytes", "leaked", "peak", "unknown", "corruption",
             "drops"))
    for prog, runs, v in results:
        for path, x in zip(("in-process", "eBPF", "heaptrack"), runs):
            print(row(prog.name, path, x))
    print()
    for prog, runs, v in results:
        print("%-4s %s" % ("FAIL" if v.fails else "ok", prog.name))
        for f in v.fails:
            print("       " + f)
        for name, what in v.allowed.items():
            print("       allowed %s: %s" % (name, "; ".join(what)))
    print("\nallowances:")
    for name, why in ALLOWANCES.items():
        print("  %-9s %s" % (name, why))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--memprof", required=True, help="the build's cli/memprof")
    ap.add_argument("--source", required=True, help="tests/peers")
    ap.add_argument("--only", action="append", help="run only this program (repeatable)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    opt = ap.parse_args()

    mi = mimalloc_test_dir()
    if not mi:
        print("SKIP: mimalloc's test sources are not in %s: fetch them with "
              "scripts/fetch-peers (apt-get source mimalloc, as root; MEMPROF_PEERS_DIR "
              "sets the directory)" % PEERS_DIR)
        return SKIP
    missing = missing_tools()
    if missing:
        print("SKIP: %s missing (scripts/install-deps installs them)" % ", ".join(missing))
        return SKIP
    if os.geteuid() != 0:
        print("SKIP: memprof run needs root")
        return SKIP

    print("mimalloc's tests from %s; heaptrack's tests/manual are not served by Debian's "
          "mirror here: tests/peers has programs of their shapes" % mi, flush=True)
    tmp = tempfile.mkdtemp(prefix="memprof-peers-")
    start = time.monotonic()
    results, failed = [], False
    try:
        for prog in build_programs(opt.source, mi, tmp):
            if opt.only and prog.name not in opt.only:
                continue
            try:
                runs = run_program(prog, opt.memprof, tmp)
            except RuntimeError as e:
                print("FAIL %s: %s" % (prog.name, e))
                failed = True
                continue
            v = judge(prog, *runs)
            results.append((prog, runs, v))
            failed |= bool(v.fails)
        report(results)
        print("\n%s in %.0f s" % ("FAIL" if failed else "ok", time.monotonic() - start))
    finally:
        if opt.keep or failed:
            print("programs, profiles and logs kept in " + tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
