# SPDX-License-Identifier: MIT
# Fixture of tests/python/test_python.c: kernels.py's work in a plain
# python3 started without memprof (the package on PYTHONPATH, imported, no
# profiler), attached later by `memprofd --pid`. Usage: kernels_attach.py
# READY GO. Creates READY once the package is imported, waits until a
# profiler is attached and GO exists, then runs kernels.py unchanged (its
# own check that a profiler is attached then holds).
import os
import runpy
import sys
import time

import memprof

ready, go = sys.argv[1], sys.argv[2]
with open(ready, "w"):
    pass
deadline = time.monotonic() + 120
while not (memprof.attached() and os.path.exists(go)):
    if time.monotonic() > deadline:
        sys.exit("kernels_attach.py: no profiler attached and %s within 120 s" % go)
    time.sleep(0.01)

runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), "kernels.py"),
               run_name="__main__")
sys.stdout.write("kernels_attach.py: done\n")
