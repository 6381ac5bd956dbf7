# SPDX-License-Identifier: MIT
# Fixture of tests/real/test_real.c: an unmodified PyTorch script (no
# memprof import) that runs the CNN of cnn.py for PASSES (argv[1], default
# 5) inference passes on the CPU.
import sys

import torch

from cnn import model_and_input

passes = int(sys.argv[1]) if len(sys.argv) > 1 else 5
torch.set_num_threads(2)
model, x = model_and_input()
with torch.no_grad():
    for _ in range(passes):
        y = model(x)
sys.stdout.write("torch_infer.py: done %d passes %s\n" % (passes, tuple(y.shape)))
