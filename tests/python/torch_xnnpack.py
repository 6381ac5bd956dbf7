# SPDX-License-Identifier: MIT
# Fixture of tests/python/test_python.c (docs/PYTHON.md "Who held the
# peak"): torchvision's resnet18 (random weights) scripted and rewritten
# for XNNPACK by torch.utils.mobile_optimizer, as an ExecuTorch-style
# deployment runs it, then PASSES (default 2) inference passes on a
# 1x3xSIZExSIZE input (default 112). No memprof import: `memprof run
# --torch` makes the phases load and inference.
import sys

import torch
import torchvision
from torch.utils.mobile_optimizer import optimize_for_mobile

passes = int(sys.argv[1]) if len(sys.argv) > 1 else 2
size = int(sys.argv[2]) if len(sys.argv) > 2 else 112
torch.manual_seed(0)
torch.set_num_threads(1)
model = torchvision.models.resnet18().eval()
mobile = optimize_for_mobile(torch.jit.script(model))
x = torch.randn(1, 3, size, size)
with torch.no_grad():
    for _ in range(passes):
        y = mobile(x)
sys.stdout.write("torch_xnnpack.py: done %s\n" % (tuple(y.shape),))
