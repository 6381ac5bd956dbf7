# SPDX-License-Identifier: MIT
# Fixture of tests/python/test_python.c: a python3 that never imports
# memprof, attached by `memprofd --pid`. Usage: plain_attach.py READY GO.
# Creates READY, waits for GO, then allocates 8 MiB it keeps and 3 MiB it
# drops before exiting.
import os
import sys
import time

MIB = 1 << 20
ready, go = sys.argv[1], sys.argv[2]
with open(ready, "w"):
    pass
deadline = time.monotonic() + 120
while not os.path.exists(go):
    if time.monotonic() > deadline:
        sys.exit("plain_attach.py: no %s within 120 s" % go)
    time.sleep(0.01)

keep = bytearray(8 * MIB)
t = bytearray(3 * MIB)
del t
assert "memprof" not in sys.modules
sys.stdout.write("plain_attach.py: done\n")
sys.stdout.flush()
os._exit(0)  # keep: no teardown frees after the figures
