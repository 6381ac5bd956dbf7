# SPDX-License-Identifier: MIT
# The CNN of the real-runtime tests (tests/real/test_real.c), for
# torch_infer.py (Debian's PyTorch) and export_onnx.py (the same network in
# ONNX for onnxruntime-node): torchvision's resnet18 with random weights
# (nothing is downloaded), and a fixed input.
import torch
import torchvision

# Small enough for a few seconds in a test, large enough that the runtime's
# own buffers dominate the interpreter's.
SHAPE = (1, 3, 112, 112)


def model_and_input():
    torch.manual_seed(0)
    model = torchvision.models.resnet18()
    model.eval()
    return model, torch.randn(*SHAPE)
