# SPDX-License-Identifier: MIT
# Fixture of tests/python/test_python.c: memprof.torch.ops() blocks in a
# script run by plain `memprof run`. Inside the first block (shapes asked)
# aten::add is a kernel with its input shapes and another thread's aten::sub
# is not one; inside the second, aten::mul and a forward pass are kernels
# without shapes; aten::div after them is not. With MEMPROF_TEST_BLOCK_OPS
# set, the op extension cannot be imported: memprof.torch says so once and
# module kernels remain.
import os
import sys
import threading
import warnings

if os.environ.get("MEMPROF_TEST_BLOCK_OPS"):
    sys.modules["memprof._ops"] = None  # its import fails

import torch

with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import memprof.torch
    import memprof.torch  # noqa: F811 (imported again: said once)
for w in caught:
    sys.stdout.write("%s\n" % w.message)
sys.stdout.write("warnings: %d\n" % len(caught))

torch.manual_seed(0)
torch.set_num_threads(1)
model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU())
memprof.torch.instrument(model)
a, b = torch.ones(256, 1024), torch.ones(256, 1024)
x = torch.randn(8, 64)
with torch.no_grad():
    model(x)
    with memprof.torch.ops(shapes=True):
        c = torch.add(a, b)
        t = threading.Thread(target=lambda: torch.sub(a, b))
        t.start()
        t.join()
    with memprof.torch.ops():
        c = torch.mul(c, b)
        model(x)
    c = torch.div(c, b)
sys.stdout.write("torch_ops_block.py: done %s\n" % (tuple(c.shape),))
