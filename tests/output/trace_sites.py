#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Prints the allocation-site events of a memprofd Chrome trace, one line
each, sorted: "KERNEL|ALLOC_BYTES|ALLOC_COUNT|TID|TS|CHAIN" where CHAIN is
the event's stack resolved through the top-level stackFrames dictionary
("sf" -> name, then each "parent"), innermost frame first, each name
followed by ";". With --stop NAME the chain ends after the first frame
named NAME (the frames above main depend on the C library). Names are
printed with Python's unicode_escape (a backslash doubled, anything but
printable ASCII as \\xNN or \\uNNNN), so hostile names stay on one line.

An independent reader for the tests: it uses only Python's json module."""
import decimal
import json
import sys


def show(s):
    return s.encode("unicode_escape").decode("ascii")


def main():
    args = sys.argv[1:]
    stop = None
    if len(args) == 3 and args[0] == "--stop":
        stop = args[1]
        args = args[2:]
    with open(args[0], "rb") as f:
        doc = json.loads(f.read().decode("utf-8"), parse_float=decimal.Decimal)
    frames = doc.get("stackFrames", {})
    lines = []
    for ev in doc["traceEvents"]:
        if ev.get("ph") != "i" or ev.get("cat") != "site":
            continue
        chain = ""
        key = str(ev["sf"])
        for _ in range(len(frames) + 1):
            fr = frames[key]
            chain += show(fr["name"]) + ";"
            if fr["name"] == stop or "parent" not in fr:
                break
            key = fr["parent"]
        else:
            raise SystemExit("cycle in stackFrames")
        a = ev["args"]
        kernel = a["kernel"] if a["kernel"] is not None else "(none)"
        lines.append("%s|%d|%d|%d|%s|%s" % (show(kernel), a["allocBytes"], a["allocCount"],
                                          ev["tid"], ev["ts"], chain))
    for line in sorted(lines):
        print(line)


main()
