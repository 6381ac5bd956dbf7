# SPDX-License-Identifier: MIT
# Writes the CNN of cnn.py as an ONNX file (argv[1]) with torch.onnx.export
# (its TorchScript exporter writes the protobuf itself: Debian 12's
# PyTorch 1.13 needs no onnx package for it). The file appears whole or not
# at all: it is written next to its name and renamed.
import os
import sys

import torch

from cnn import model_and_input

out = sys.argv[1]
tmp = "%s.tmp.%d" % (out, os.getpid())
model, x = model_and_input()
try:
    torch.onnx.export(model, x, tmp, input_names=["input"], output_names=["output"],
                      opset_version=13)
    os.rename(tmp, out)
finally:
    if os.path.exists(tmp):
        os.unlink(tmp)
sys.stdout.write("export_onnx.py: wrote %s\n" % out)
