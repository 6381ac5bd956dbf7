#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Checks a memprofd Chrome / Perfetto trace (docs/OUTPUT.md) the way the
trace viewers need it:

* the file is strict JSON (no NaN, no duplicate keys, valid strings), an
  object with a traceEvents array and displayTimeUnit "ns";
* every event has ph, name (string) and pid (integer), and no array value
  at its top level (Perfetto's importer refuses those);
* every "X" event has cat, tid, ts and dur (numbers >= 0) and an args object;
* counters ("C") have ts and numeric args and go strictly forward in time on
  each track (pid, name);
* on every thread the slices nest: a slice that begins inside another ends
  inside it (times compared in exact nanoseconds);
* a process_name metadata event exists and every thread with slices has a
  thread_name;
* instant events ("i") have ts and a scope;
* allocation-site events ("i", cat "site") have a thread, an "sf" that is a
  key of the top-level stackFrames dictionary, and args with allocBytes;
* every stackFrames entry has a string name and category, and its parent
  chain ends at a root without a cycle.

Prints "ok X=.. C=.. M=.. i=.. threads=.." on success (followed by
" sites=.. frames=.." when the trace has stackFrames; site events are not
counted in i), else the first problem, and exits 1."""
import decimal
import json
import sys


def fail(msg):
    print("invalid: " + msg)
    sys.exit(1)


def no_dups(pairs):
    keys = [k for k, _ in pairs]
    if len(keys) != len(set(keys)):
        fail("duplicate key in %r" % keys)
    return dict(pairs)


def bad_constant(c):
    fail("non-JSON constant " + c)


def ns(ev, key):
    v = ev.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, decimal.Decimal)):
        fail("%s: %s is not a number" % (ev, key))
    if v < 0:
        fail("%s: negative %s" % (ev, key))
    return int((decimal.Decimal(v) * 1000).to_integral_value(decimal.ROUND_HALF_EVEN))


def is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def check_frames(frames):
    if not isinstance(frames, dict):
        fail("stackFrames is not an object")
    for key, fr in frames.items():
        if not isinstance(fr, dict) or not isinstance(fr.get("name"), str) \
                or not isinstance(fr.get("category"), str):
            fail("stackFrames[%r]: no string name or category" % key)
        seen = 0
        cur = fr
        while "parent" in cur:
            par = cur["parent"]
            if not isinstance(par, str) or par not in frames:
                fail("stackFrames[%r]: parent %r does not exist" % (key, par))
            seen += 1
            if seen > len(frames):
                fail("stackFrames[%r]: the parent chain has a cycle" % key)
            cur = frames[par]


def main():
    with open(sys.argv[1], "rb") as f:
        raw = f.read()
    try:
        doc = json.loads(raw.decode("utf-8"), object_pairs_hook=no_dups,
                         parse_float=decimal.Decimal, parse_constant=bad_constant)
    except (UnicodeDecodeError, ValueError) as e:
        fail("not JSON: %s" % e)
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        fail("not an object with a traceEvents array")
    if doc.get("displayTimeUnit") != "ns":
        fail("displayTimeUnit is not \"ns\"")

    frames = doc.get("stackFrames")
    if frames is not None:
        check_frames(frames)
    counts = {"X": 0, "C": 0, "M": 0, "i": 0}
    n_sites = 0
    slices = {}
    counters = {}
    process_named = False
    thread_names = set()
    for ev in doc["traceEvents"]:
        if not isinstance(ev, dict):
            fail("event is not an object: %r" % (ev,))
        # Perfetto reads ts and dur by scanning the event's keys and gives up
        # on the whole file at an array value met on the way.
        for k, v in ev.items():
            if isinstance(v, list):
                fail("%r: array value %r at the top level of an event" % (ev, k))
        ph = ev.get("ph")
        if ph not in counts:
            fail("unexpected ph %r" % (ph,))
        if "sf" in ev:
            if frames is None or not is_int(ev["sf"]) or str(ev["sf"]) not in frames:
                fail("%r: sf does not resolve through stackFrames" % (ev,))
        if ph == "i" and ev.get("cat") == "site":
            if "sf" not in ev or not is_int(ev.get("tid")) or ev.get("s") != "t":
                fail("%r: site event without sf, tid or thread scope" % (ev,))
            args = ev.get("args")
            if not isinstance(args, dict) or not is_int(args.get("allocBytes")):
                fail("%r: site event without args.allocBytes" % (ev,))
            n_sites += 1
        else:
            counts[ph] += 1
        if not isinstance(ev.get("name"), str) or not is_int(ev.get("pid")):
            fail("%r: missing name or pid" % (ev,))
        if ph == "M":
            args = ev.get("args")
            if not isinstance(args, dict) or not isinstance(args.get("name"), str):
                fail("%r: metadata without args.name" % (ev,))
            if ev["name"] == "process_name":
                process_named = True
            elif ev["name"] == "thread_name":
                if not is_int(ev.get("tid")):
                    fail("%r: thread_name without tid" % (ev,))
                thread_names.add((ev["pid"], ev["tid"]))
            else:
                fail("unexpected metadata %r" % (ev,))
        elif ph == "X":
            if not isinstance(ev.get("cat"), str) or not is_int(ev.get("tid")):
                fail("%r: slice without cat or tid" % (ev,))
            if not isinstance(ev.get("args"), dict):
                fail("%r: slice without args" % (ev,))
            ts, dur = ns(ev, "ts"), ns(ev, "dur")
            slices.setdefault((ev["pid"], ev["tid"]), []).append((ts, ts + dur, ev))
        elif ph == "C":
            ts = ns(ev, "ts")
            args = ev.get("args")
            if not isinstance(args, dict) or not args:
                fail("%r: counter without args" % (ev,))
            for v in args.values():
                if not is_int(v):
                    fail("%r: counter value is not an integer" % (ev,))
            track = (ev["pid"], ev["name"])
            if track in counters and ts <= counters[track]:
                fail("%r: counter track %r goes back in time" % (ev, track))
            counters[track] = ts
        elif ph == "i":
            ns(ev, "ts")
            if ev.get("s") not in ("g", "p", "t"):
                fail("%r: instant without scope" % (ev,))

    if not process_named:
        fail("no process_name metadata")
    for thread, evs in slices.items():
        if thread not in thread_names:
            fail("thread %r has slices but no thread_name" % (thread,))
        # Viewers sort by begin, longer first on ties; file order breaks
        # remaining ties (Python's sort is stable).
        evs.sort(key=lambda s: (s[0], -s[1]))
        stack = []
        for b, e, ev in evs:
            while stack and stack[-1][1] <= b:
                stack.pop()
            if stack and e > stack[-1][1]:
                fail("thread %r: %r [%d, %d] overlaps %r [%d, %d] without nesting"
                     % (thread, ev["name"], b, e, stack[-1][2]["name"],
                        stack[-1][0], stack[-1][1]))
            stack.append((b, e, ev))
    line = ("ok X=%d C=%d M=%d i=%d threads=%d"
            % (counts["X"], counts["C"], counts["M"], counts["i"], len(slices)))
    if frames is not None:
        line += " sites=%d frames=%d" % (n_sites, len(frames))
    elif n_sites:
        fail("site events without stackFrames")
    print(line)


main()
