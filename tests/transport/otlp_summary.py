#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Summarizes an OTLP ExportProfilesServiceRequest as decoded by
`protoc --decode` (the independent decoder; this only reads its text
output): checks the dictionary's zero entries and prints

  resource KEY=VALUE
  profile TYPE/UNIT samples=N
  sum TYPE ATTR=VALUE TOTAL        (per memprof.* sample attribute value)
  mapping PATH build_id=ID
  error TEXT                       (a broken reference or zero entry)
"""
import re
import subprocess
import sys

TOKEN = re.compile(r'\s*(?:([A-Za-z_][A-Za-z0-9_]*)\s*(\{|:\s*("(?:[^"\\]|\\.)*"|[^\s]+))|(\}))')


def unescape(s):
    return bytes(s[1:-1], "latin-1").decode("unicode_escape").encode("latin-1").decode(
        "utf-8", "replace")


def parse(text):
    """protoc text format → nested dicts of lists."""
    stack = [{}]
    for line in text.splitlines():
        m = TOKEN.match(line)
        if not m:
            continue
        name, brace, value, close = m.groups()
        if close:
            stack.pop()
        elif brace == "{":
            child = {}
            stack[-1].setdefault(name, []).append(child)
            stack.append(child)
        else:
            v = unescape(value) if value.startswith('"') else value
            stack[-1].setdefault(name, []).append(v)
    return stack[0]


def one(d, k, default=None):
    v = d.get(k)
    return v[0] if v else default


def anyvalue(v, strings):
    if v is None:
        return None
    if "string_value" in v:
        return one(v, "string_value")
    if "int_value" in v:
        return int(one(v, "int_value"))
    if "string_value_strindex" in v:
        return strings[int(one(v, "string_value_strindex"))]
    return None


def main():
    proto_dir, body = sys.argv[1], sys.argv[2]
    with open(body, "rb") as f:
        out = subprocess.run(
            ["protoc", "-I", proto_dir, "--decode=memprof.otlp.ExportProfilesServiceRequest",
             proto_dir + "/otlp_profiles.proto"], stdin=f, capture_output=True, check=True)
    req = parse(out.stdout.decode())
    d = one(req, "dictionary", {})
    strings = d.get("string_table", [])
    if not strings or strings[0] != "":
        print("error string_table[0] is not \"\"")
    for table in ("mapping_table", "location_table", "function_table", "attribute_table",
                  "stack_table"):
        t = d.get(table, [])
        if not t or t[0] != {}:
            print("error %s[0] is not the zero value" % table)
    attrs = d.get("attribute_table", [])
    for m in d.get("mapping_table", [])[1:]:
        bid = [anyvalue(one(attrs[int(i)], "value"), strings)
               for i in m.get("attribute_indices", [])
               if strings[int(one(attrs[int(i)], "key_strindex", 0))] ==
               "process.executable.build_id.gnu"]
        print("mapping %s build_id=%s" % (strings[int(one(m, "filename_strindex", 0))],
                                          bid[0] if bid else ""))
    for rp in req.get("resource_profiles", []):
        for kv in one(rp, "resource", {}).get("attributes", []):
            print("resource %s=%s" % (one(kv, "key"), anyvalue(one(kv, "value"), strings)))
        for sp in rp.get("scope_profiles", []):
            for p in sp.get("profiles", []):
                vt = one(p, "sample_type", {})
                ty = strings[int(one(vt, "type_strindex", 0))]
                unit = strings[int(one(vt, "unit_strindex", 0))]
                samples = p.get("samples", [])
                print("profile %s/%s samples=%d" % (ty, unit, len(samples)))
                sums = {}
                for s in samples:
                    v = sum(int(x) for x in s.get("values", []))
                    st = int(one(s, "stack_index", 0))
                    if st <= 0 or st >= len(d.get("stack_table", [])):
                        print("error sample stack_index %d" % st)
                    for i in s.get("attribute_indices", []):
                        a = attrs[int(i)]
                        key = strings[int(one(a, "key_strindex", 0))]
                        val = anyvalue(one(a, "value"), strings)
                        sums[(key, val)] = sums.get((key, val), 0) + v
                for (key, val), total in sorted(sums.items(), key=str):
                    if key.startswith("memprof."):
                        print("sum %s %s=%s %d" % (ty, key, val, total))
    return 0


if __name__ == "__main__":
    sys.exit(main())
