# SPDX-License-Identifier: MIT
# The library half of pyframes_main.py's call chains (tests/python/
# test_pyframes.c): each function allocates a tensor of a size of its own.
# The lines marked "@NAME" are the ones the test looks for.
import torch


def lib_tensor():
    return torch.empty(6 << 20, dtype=torch.uint8)  # @lib_tensor


def lib_bytes():
    return bytearray(5 << 20)  # @lib_bytes


def lib_calls_back(fn):
    return fn()  # @lib_calls_back
