# SPDX-License-Identifier: MIT
# Fixture of tests/python/test_python.c: markers as fast as Python makes
# them, under `memprof run`. A ring that fills drops and counts records;
# the program never sees an exception for it.
import memprof

k = memprof.kernel("tiny")
for _ in range(300000):
    with k:
        pass
print("burst.py: done, dropped %d" % memprof.dropped())
