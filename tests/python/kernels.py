# SPDX-License-Identifier: MIT
# Fixture of tests/python/test_python.c, run by `memprof run`: kernels,
# phases, tags and shapes marked with the memprof package, each allocating a
# known number of bytes (bytearray(n) is one malloc of n + a small header).
import sys

import memprof

MIB = 1 << 20
assert memprof.attached(), "memprof run attaches before the script starts"
keep = []

with memprof.phase("load"):
    with memprof.kernel("load_weights", outputs=(1024, 2048)):
        keep.append(bytearray(8 * MIB))

k = memprof.kernel("matmul", inputs=[(64, 128), (128, 32)], outputs=(64, 32))


@memprof.kernel("softmax")
def softmax():
    t = bytearray(3 * MIB)  # a temporary: allocated and freed inside
    del t


with memprof.phase("inference"):
    for _ in range(3):
        with k:
            keep.append(bytearray(1 * MIB))
        softmax()
    with memprof.tag("kv_cache"):
        keep.append(bytearray(2 * MIB))

# A long name: the table shows it in full.
with memprof.kernel("encoder.layers.11.self_attention.output_projection:Linear"):
    keep.append(bytearray(4096))

# Outside any phase: this free must not count in "inference".
del keep[:]
sys.stdout.write("kernels.py: done\n")
