#!/bin/sh
# The tree configures and compiles on a machine without kernel BTF: in a
# private mount namespace, /sys/kernel/btf is hidden under an empty tmpfs,
# then a fresh build directory is set up and compiled. Needs root (unshare
# -m, mount). Usage: build_without_btf.sh SOURCE_ROOT
set -eu

src=$1
tmp=$(mktemp -d /tmp/memprof-build-XXXXXX)
trap 'rm -rf "$tmp"' EXIT

unshare -m sh -eu -c '
	mount --make-rprivate /
	mount -t tmpfs none /sys/kernel/btf
	if [ -e /sys/kernel/btf/vmlinux ]; then
		echo "not ok: /sys/kernel/btf/vmlinux is still visible" >&2
		exit 1
	fi
	meson setup "$2/b" "$1" >"$2/setup.log" 2>&1 || { cat "$2/setup.log" >&2; exit 1; }
	meson compile -C "$2/b" >"$2/compile.log" 2>&1 || { tail -50 "$2/compile.log" >&2; exit 1; }
' sh "$src" "$tmp"
# The BPF object was really built, from the committed vmlinux.h.
test -s "$tmp/b/bpf/memprof.skel.h"
test -x "$tmp/b/cli/memprofd"
echo "ok: built without /sys/kernel/btf"
