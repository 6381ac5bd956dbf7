# SPDX-License-Identifier: MIT
# A preforked worker (tests/python/test_pyframes.c,
# forked_worker_attached_by_pid): the parent, profiled with call stacks,
# allocates (its frame walker names this file's code objects in its ring's
# string table), then forks; the worker writes its pid to argv[1], waits
# for a profiler to attach to it by pid, and allocates 21 MiB in
# child_alloc. The lines marked "@NAME" are the ones the test looks for.
import os
import sys
import time

import memprof


def parent_alloc():
    return bytearray(20 << 20)


def child_alloc():
    return bytearray(21 << 20)  # @fork_child_alloc


def worker():
    with open(sys.argv[1] + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.rename(sys.argv[1] + ".tmp", sys.argv[1])
    t0 = time.monotonic()
    while not memprof.attached():
        if time.monotonic() - t0 > 60:
            os._exit(3)
        time.sleep(0.01)
    x = child_alloc()  # @fork_worker
    time.sleep(0.3)
    del x
    os._exit(0)


held = [parent_alloc() for _ in range(3)]
pid = os.fork()
if pid == 0:
    worker()  # @fork_module
_, status = os.waitpid(pid, 0)
print("worker status", status, flush=True)
