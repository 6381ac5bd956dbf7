# SPDX-License-Identifier: MIT
# Fixture of tests/python/test_python.c: a long-running PyTorch "service",
# started under `memprof env --torch` with no profiler attached. It writes
# READY (its first pass done) and runs inference passes until STOP exists;
# a profiler attached in between must see its module and op kernels.
import os
import sys

import torch
import torchvision

torch.set_num_threads(1)
model = torchvision.models.resnet18()
model.eval()
x = torch.randn(1, 3, 64, 64)
ready, stop = sys.argv[1], sys.argv[2]
with torch.no_grad():
    model(x)
    open(ready, "w").close()
    while not os.path.exists(stop):
        model(x)
