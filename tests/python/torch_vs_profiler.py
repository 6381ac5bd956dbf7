# SPDX-License-Identifier: MIT
# Fixture of tests/python/test_python.c: an unmodified PyTorch script run by
# `memprof run --torch`: torchvision's resnet18 with random weights, five
# inference passes at 1x3x224x224 on one thread. The first warms PyTorch
# and oneDNN up; the next three run each under torch.profiler (CPU,
# profile_memory=True), whose every op is printed as
# "torch.profiler PASS NAME CALLS CPU_MEMORY_BYTES"; memprof's op kernels
# of the last are compared with them. Three, because torch.profiler's
# figures of the shortest ops (aten::empty) differ from pass to pass: it
# leaves some allocations made at their edges to no op.
import sys

import torch
import torchvision
from torch.profiler import ProfilerActivity, profile

torch.manual_seed(0)
torch.set_num_threads(1)
model = torchvision.models.resnet18()
model.eval()
x = torch.randn(1, 3, 224, 224)
with torch.no_grad():
    model(x)
    profs = []
    for _ in range(3):
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            model(x)
        profs.append(prof)
    y = model(x)
for i, prof in enumerate(profs):
    for e in prof.key_averages():
        sys.stdout.write("torch.profiler %d %s %d %d\n" % (i + 2, e.key, e.count,
                                                          e.cpu_memory_usage))
sys.stdout.write("torch_vs_profiler.py: done %s\n" % (tuple(y.shape),))
