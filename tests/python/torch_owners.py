# SPDX-License-Identifier: MIT
# Fixture of tests/python/test_python.c: a plain PyTorch script (no memprof
# import) whose tensor memory dwarfs the interpreter's: five passes of two
# convolutions over a batch of 8x3x128x128. Every tensor is allocated by
# libtorch_cpu through libc10's c10::alloc_cpu (a default wrapper).
import sys

import torch

torch.manual_seed(0)
torch.set_num_threads(1)
model = torch.nn.Sequential(
    torch.nn.Conv2d(3, 32, 3, padding=1),
    torch.nn.ReLU(),
    torch.nn.Conv2d(32, 64, 3, padding=1),
    torch.nn.ReLU(),
    torch.nn.AdaptiveAvgPool2d(1),
)
model.eval()
x = torch.randn(8, 3, 128, 128)
with torch.no_grad():
    for _ in range(5):
        y = model(x)
sys.stdout.write("torch_owners.py: done %s\n" % (tuple(y.shape),))
