# SPDX-License-Identifier: MIT
# Fixture of tests/python/test_python.c: an unmodified PyTorch script (no
# memprof import), run by `memprof run --torch`: a torchvision CNN with
# random weights, inference passes under no_grad. With PROFILE=1 it also
# runs torch.profiler (profile_memory=True) over the last pass and prints
# its per-op CPU memory (PROFILE=all: of every op), to compare with memprof's op kernels.
import os
import sys

import torch
import torchvision

torch.manual_seed(0)
torch.set_num_threads(1)
model = torchvision.models.resnet18()
model.eval()
x = torch.randn(1, 3, 96, 96)
with torch.no_grad():
    for _ in range(2):
        y = model(x)
    if os.environ.get("PROFILE") in ("1", "all"):
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            model(x)
        for e in prof.key_averages():
            if os.environ["PROFILE"] == "all" or e.key in ("aten::native_batch_norm",
                                                           "aten::max_pool2d_with_indices"):
                sys.stdout.write("torch.profiler %s %d %d\n" % (e.key, e.count, e.cpu_memory_usage))
sys.stdout.write("torch_cnn.py: done %s\n" % (tuple(y.shape),))
