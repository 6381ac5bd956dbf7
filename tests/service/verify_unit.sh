#!/bin/sh
# SPDX-License-Identifier: MIT
# systemd-analyze verify on the configured unit, its ExecStart pointing at
# the memprofd just built (the installed path does not exist yet), and the
# offline security review staying at or below the exposure in SERVICE.md.
set -eu
unit="$1" memprofd="$2" max_exposure="$3"
command -v systemd-analyze >/dev/null || { echo "systemd-analyze missing"; exit 1; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
sed "s|^ExecStart=[^ ]*memprofd |ExecStart=$memprofd |; s|^Documentation=.*|Documentation=https://example.invalid/SERVICE.md|" \
	"$unit" >"$dir/memprofd.service"
grep -q "^ExecStart=$memprofd " "$dir/memprofd.service"
systemd-analyze verify "$dir/memprofd.service"
score=$(systemd-analyze security --offline=true "$dir/memprofd.service" 2>&1 |
	sed -n 's/.*Overall exposure level for memprofd.service: \([0-9.]*\).*/\1/p')
echo "exposure: $score (at most $max_exposure)"
[ -n "$score" ]
awk -v s="$score" -v m="$max_exposure" 'BEGIN { exit !(s <= m) }'
