#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Checks `memprof diff --format json` against its schema (docs/OUTPUT.md
"memprof diff"): strict JSON (no duplicate keys, no NaN), every key with its
type, enumerations, changes sorted by decreasing |delta| with unknown ones
last, delta = new - old, the relative change, limits consistent with the
changes they name and the result with the limits.

Usage: validate_diff.py FILE. Prints "ok changes=N limits=M exceeded=K
result=R" and exits 0, or prints "error: ..." and exits 1.
"""
import json
import math
import sys

SCOPES = {"profile", "kernel", "phase", "owner", "tag", "phase_owner", "phase_tag"}
MAPS = {"mapped", "maps_peak", "maps_live"}
METRICS = {
    "profile": {"alloc", "peak", "rss"} | MAPS,
    "kernel": {"alloc", "peak_added", "peak_live", "rss", "mapped", "maps_peak"},
    "phase": {"alloc", "peak_live", "rss", "mapped", "maps_peak"},
    "owner": {"alloc", "peak_live", "peak_share"} | MAPS,
    "tag": {"alloc", "peak_live", "peak_share"} | MAPS,
    "phase_owner": {"peak_share"},
    "phase_tag": {"peak_share"},
}
PRESENCE = {"both", "appeared", "vanished"}
STATUS = {"unchanged", "changed", "unknown", "noise", "ok", "fail"}
MODES = {"precise", "sampled", "rss", "unknown"}


class Bad(Exception):
    pass


def no_dups(pairs):
    d = {}
    for k, v in pairs:
        if k in d:
            raise Bad("duplicate key %r" % k)
        d[k] = v
    return d


def no_constant(c):
    raise Bad("non-standard number %s" % c)


def keys(obj, want, where):
    if not isinstance(obj, dict):
        raise Bad("%s is not an object" % where)
    if list(obj.keys()) != want:
        raise Bad("%s has keys %s, want %s" % (where, list(obj.keys()), want))


def is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def is_num(v):
    return (is_int(v) or isinstance(v, float)) and not isinstance(v, bool)


def check(cond, msg):
    if not cond:
        raise Bad(msg)


def check_profile(p, where):
    keys(p, ["file", "pid", "exe", "traceMode", "sampleBytes", "stderr"], where)
    check(isinstance(p["file"], str), where + ".file")
    check(is_int(p["pid"]), where + ".pid")
    check(p["exe"] is None or isinstance(p["exe"], str), where + ".exe")
    check(p["traceMode"] in MODES, where + ".traceMode")
    check(is_int(p["sampleBytes"]) and p["sampleBytes"] >= 0, where + ".sampleBytes")
    check(isinstance(p["stderr"], bool), where + ".stderr")


def check_where(o, where):
    check(o["scope"] in SCOPES, where + ": scope %r" % o["scope"])
    if o["scope"] == "profile":
        check(o["name"] is None, where + ": the profile has no name")
    else:
        check(isinstance(o["name"], str), where + ": name")


def check_change(c, i):
    where = "changes[%d]" % i
    keys(c, ["scope", "name", "metric", "presence", "status", "old", "new", "delta",
             "relativePercent", "stderr", "allowed"], where)
    check_where(c, where)
    check(c["metric"] in METRICS[c["scope"]], where + ": metric %r" % c["metric"])
    check(c["presence"] in PRESENCE, where + ": presence")
    check(c["scope"] != "profile" or c["presence"] == "both", where + ": profile presence")
    check(c["status"] in STATUS, where + ": status")
    check(is_int(c["stderr"]) and c["stderr"] >= 0, where + ": stderr")
    check(c["allowed"] is None or (is_int(c["allowed"]) and c["allowed"] >= 0),
          where + ": allowed")
    if c["status"] == "unknown":
        check(c["old"] is None and c["new"] is None and c["delta"] is None and
              c["relativePercent"] is None, where + ": unknown figures are null")
        return
    for k in ("old", "new", "delta"):
        check(is_int(c[k]), where + ": " + k)
    check(c["delta"] == c["new"] - c["old"], where + ": delta != new - old")
    if c["presence"] == "appeared":
        check(c["old"] == 0, where + ": appeared with an old figure")
    if c["presence"] == "vanished":
        check(c["new"] == 0, where + ": vanished with a new figure")
    if c["old"] == 0:
        check(c["relativePercent"] is None, where + ": relative change from 0")
    else:
        rel = 100.0 * c["delta"] / abs(c["old"])
        check(is_num(c["relativePercent"]) and
              math.isclose(c["relativePercent"], rel, rel_tol=1e-9, abs_tol=1e-9),
              where + ": relativePercent %r, want %r" % (c["relativePercent"], rel))
    st, delta, allowed = c["status"], c["delta"], c["allowed"]
    if st in ("unchanged", "changed"):
        check(allowed is None and (delta == 0) == (st == "unchanged"), where + ": " + st)
    elif st == "ok":
        check(allowed is not None and delta <= allowed, where + ": ok over the limit")
    elif st == "noise":
        check(delta != 0, where + ": noise without a change")
    elif st == "fail":
        check(allowed is not None and delta > allowed, where + ": fail within the limit")


def check_order(changes):
    seen_unknown = False
    prev = None
    for i, c in enumerate(changes):
        if c["status"] == "unknown":
            seen_unknown = True
            continue
        check(not seen_unknown, "changes[%d]: a known change after an unknown one" % i)
        if prev is not None:
            check(abs(c["delta"]) <= prev, "changes[%d]: not sorted by |delta|" % i)
        prev = abs(c["delta"])
    ids = [(c["scope"], c["name"], c["metric"]) for c in changes]
    check(len(ids) == len(set(ids)), "a figure twice in changes")


def check_limit(lim, i, changes):
    where = "limits[%d]" % i
    has_pct = "percent" in lim
    keys(lim, ["limit", "scope", "name", "metric", "percent" if has_pct else "bytes",
               "matched", "unknown", "failed", "exceeded", "worst"], where)
    check(isinstance(lim["limit"], str), where + ".limit")
    check_where(lim, where)
    check(lim["metric"] in METRICS[lim["scope"]], where + ".metric")
    check(is_num(lim.get("percent", lim.get("bytes"))), where + ": value")
    for k in ("matched", "unknown", "failed"):
        check(is_int(lim[k]) and lim[k] >= 0, where + "." + k)
    check(lim["unknown"] + lim["failed"] <= lim["matched"], where + ": counts")
    check(lim["exceeded"] == (lim["failed"] > 0), where + ".exceeded")
    if not lim["exceeded"]:
        check(lim["worst"] is None, where + ".worst without failure")
        return
    w = lim["worst"]
    keys(w, ["scope", "name", "delta", "relativePercent", "stderr", "allowed"], where + ".worst")
    match = [c for c in changes if (c["scope"], c["name"], c["metric"]) ==
             (w["scope"], w["name"], lim["metric"])]
    check(len(match) == 1, where + ".worst names no change")
    check(match[0]["status"] == "fail" and match[0]["delta"] == w["delta"],
          where + ".worst disagrees with its change")
    check(w["delta"] > w["allowed"], where + ".worst within what is allowed")


def validate(doc):
    keys(doc, ["format", "version", "old", "new", "sigmas", "warnings", "appeared",
               "vanished", "changes", "limits", "exceeded", "result"], "document")
    check(doc["format"] == "memprof-diff" and doc["version"] == 1, "format/version")
    check_profile(doc["old"], "old")
    check_profile(doc["new"], "new")
    check(is_num(doc["sigmas"]) and doc["sigmas"] >= 0, "sigmas")
    check(all(isinstance(w, str) for w in doc["warnings"]), "warnings")
    for key, pres in (("appeared", "appeared"), ("vanished", "vanished")):
        for i, e in enumerate(doc[key]):
            keys(e, ["scope", "name"], "%s[%d]" % (key, i))
            check_where(e, "%s[%d]" % (key, i))
        named = {(e["scope"], e["name"]) for e in doc[key]}
        want = {(c["scope"], c["name"]) for c in doc["changes"] if c["presence"] == pres}
        check(named == want, key + " disagrees with the changes")
    for i, c in enumerate(doc["changes"]):
        check_change(c, i)
    check_order(doc["changes"])
    for i, lim in enumerate(doc["limits"]):
        check_limit(lim, i, doc["changes"])
    exceeded = sum(1 for lim in doc["limits"] if lim["exceeded"])
    check(doc["exceeded"] == exceeded, "exceeded count")
    check(doc["result"] == ("fail" if exceeded else "pass"), "result")
    fails = sum(1 for c in doc["changes"] if c["status"] == "fail")
    check((fails > 0) == (exceeded > 0), "failed changes without an exceeded limit")
    return "ok changes=%d limits=%d exceeded=%d result=%s" % (
        len(doc["changes"]), len(doc["limits"]), exceeded, doc["result"])


def main():
    try:
        with open(sys.argv[1], encoding="utf-8") as f:
            doc = json.load(f, object_pairs_hook=no_dups, parse_constant=no_constant)
        print(validate(doc))
    except (Bad, ValueError, KeyError, TypeError, IndexError) as e:
        print("error: %s" % e)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
