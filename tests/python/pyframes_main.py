# SPDX-License-Identifier: MIT
# Known Python call chains across two files (tests/python/test_pyframes.c):
# main's functions call pyframes_lib's, which call back into main; each
# allocates a tensor (PyTorch allocates it with the GIL released) or a
# bytearray (the GIL held) of a size of its own, kept to the end.
import os
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402

import pyframes_lib  # noqa: E402

held = []


def main_tensor():
    return torch.empty(7 << 20, dtype=torch.uint8)  # @main_tensor


def outer():
    held.append(pyframes_lib.lib_tensor())  # @outer_lib_tensor
    held.append(pyframes_lib.lib_bytes())  # @outer_lib_bytes
    held.append(pyframes_lib.lib_calls_back(main_tensor))  # @outer_calls_back


def in_thread():
    held.append(torch.empty(9 << 20, dtype=torch.uint8))  # @in_thread


outer()  # @module_outer
t = threading.Thread(target=in_thread, name="py-worker")
t.start()
t.join()
print("tid", threading.get_native_id(), "worker", t.native_id, flush=True)
print("pyframes done", flush=True)
