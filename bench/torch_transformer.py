# SPDX-License-Identifier: MIT
"""bench/torch_transformer.py: what op kernels cost on a transformer.

A GPT-like decoder (token and position embeddings, pre-norm blocks of
causal self-attention and an MLP, written with plain modules so that every
op goes through the dispatcher: no fused fast path), random weights, one
thread, inference under no_grad. A step is one forward pass of a batch.

Modes (Debian's /usr/bin/python3):
  steps [--profiler]     times STEPS steps after a warm-up and prints one
                         JSON line: ms per step (fastest of ROUNDS rounds),
                         aten ops per step. Run plain, under
                         `memprof run --torch`, or with --profiler inside
                         torch.profiler (CPU, profile_memory=True).
  op-cost OUT.json       alternating rounds in one process: steps without
                         op kernels, inside memprof.torch.ops() and inside
                         ops(shapes=True), and the same for a loop of one
                         tiny op (aten::neg on one element, no allocation);
                         under `memprof run` that is the cost of an op
                         kernel attached, without it the cost of a
                         registered callback while dormant.
bench/python.py's transformer mode runs them all and prints the table.
"""
import json
import sys
import time

import torch
from torch import nn

VOCAB, CTX, DIM, HEADS, LAYERS, BATCH, SEQ = 512, 64, 64, 4, 12, 1, 32
ROUNDS, STEPS = 5, 10


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(DIM), nn.LayerNorm(DIM)
        self.qkv, self.proj = nn.Linear(DIM, 3 * DIM), nn.Linear(DIM, DIM)
        self.fc, self.out = nn.Linear(DIM, 4 * DIM), nn.Linear(4 * DIM, DIM)
        self.act = nn.GELU()
        self.register_buffer("mask", torch.tril(torch.ones(CTX, CTX)).view(1, 1, CTX, CTX))

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(DIM, dim=2)
        q = q.view(b, t, HEADS, c // HEADS).transpose(1, 2)
        k = k.view(b, t, HEADS, c // HEADS).transpose(1, 2)
        v = v.view(b, t, HEADS, c // HEADS).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / (c // HEADS) ** 0.5)
        att = att.masked_fill(self.mask[:, :, :t, :t] == 0, float("-inf"))
        att = torch.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
        x = x + self.proj(y)
        return x + self.out(self.act(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok, self.pos = nn.Embedding(VOCAB, DIM), nn.Embedding(CTX, DIM)
        self.blocks = nn.Sequential(*[Block() for _ in range(LAYERS)])
        self.ln = nn.LayerNorm(DIM)
        self.head = nn.Linear(DIM, VOCAB, bias=False)

    def forward(self, idx):
        pos = torch.arange(idx.shape[1]).unsqueeze(0)
        return self.head(self.ln(self.blocks(self.tok(idx) + self.pos(pos))))


def build():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    m = GPT()
    m.eval()
    return m, torch.randint(0, VOCAB, (BATCH, SEQ))


def ops_per_step(m, x):
    """Every op RecordFunction sees in one step, nested ones included (as
    torch.profiler counts them)."""
    from torch.profiler import ProfilerActivity, profile

    with torch.no_grad(), profile(activities=[ProfilerActivity.CPU]) as prof:
        m(x)
    return sum(e.count for e in prof.key_averages())


def timed(m, x, n):
    t0 = time.perf_counter_ns()
    for _ in range(n):
        m(x)
    return (time.perf_counter_ns() - t0) / n


def steps(profiler):
    m, x = build()
    n_ops = ops_per_step(m, x)
    with torch.no_grad():
        for _ in range(2):
            m(x)
        if profiler:
            from torch.profiler import ProfilerActivity, profile
            with profile(activities=[ProfilerActivity.CPU], profile_memory=True):
                best = min(timed(m, x, STEPS) for _ in range(ROUNDS))
        else:
            best = min(timed(m, x, STEPS) for _ in range(ROUNDS))
    print(json.dumps({"step_ms": best / 1e6, "ops": n_ops}))


def tiny(n):
    """n calls of one op on a one-element tensor, written into an existing
    one (no allocation): the op's own work is a few ns, what is measured
    is the way through Python and the dispatcher, and the callback."""
    a, b = torch.ones(1), torch.empty(1)
    neg = torch.neg
    t0 = time.perf_counter_ns()
    for _ in range(n):
        neg(a, out=b)
    return (time.perf_counter_ns() - t0) / n


def op_cost(out):
    import contextlib

    import memprof.torch as mt

    m, x = build()
    n_ops = ops_per_step(m, x)
    variants = (("plain", contextlib.nullcontext), ("ops", mt.ops),
                ("ops_shapes", lambda: mt.ops(shapes=True)))
    t = {k: [] for k, _ in variants}
    tt = {k: [] for k, _ in variants}
    n_tiny = 5000
    with torch.no_grad():
        for _ in range(2):
            m(x)
        # the order rotated every round, so that none is always first
        for r in range(ROUNDS * 4):
            for k in range(len(variants)):
                name, ctx = variants[(k + r) % len(variants)]
                with ctx():
                    t[name].append(timed(m, x, STEPS))
                    tt[name].append(tiny(n_tiny))
    r = {k: min(v) for k, v in t.items()}
    r.update({"tiny_" + k: min(v) for k, v in tt.items()})
    r["n_ops"] = n_ops
    r["attached"] = mt._attached()
    json.dump(r, open(out, "w"))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "steps":
        steps("--profiler" in sys.argv[2:])
    elif len(sys.argv) > 2 and sys.argv[1] == "op-cost":
        op_cost(sys.argv[2])
    else:
        sys.exit("usage: torch_transformer.py steps [--profiler] | op-cost OUT.json")
