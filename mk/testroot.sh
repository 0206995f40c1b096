#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# mk/testroot.sh DIR: a Debian 11 system (bullseye, glibc 2.31, Python
# 3.9) in DIR, for the tests that install the wheel and the tarball where
# Debian 12 is not (tests/test_oldsystem.py): debootstrap's minbase with
# python3-venv, made once and kept (DIR/.done); a later run reuses it.
# As root (debootstrap needs it), from Debian's archive alone.
set -eu
[ $# = 1 ] || { echo "usage: mk/testroot.sh DIR" >&2; exit 2; }
dir=$1
[ -e "$dir/.done" ] && exit 0
[ "$(id -u)" = 0 ] || { echo "mk/testroot.sh: debootstrap needs root" >&2; exit 1; }
command -v debootstrap >/dev/null || { echo "mk/testroot.sh: no debootstrap (mk/deps.sh installs it)" >&2; exit 1; }
rm -rf "$dir" && mkdir -p "$dir"
echo "  DEBOOTSTRAP bullseye $dir"
debootstrap --variant=minbase --include=python3-venv bullseye "$dir" \
	"${DEBIAN_MIRROR:-http://deb.debian.org/debian}" > "$dir.log" 2>&1 ||
	{ tail -20 "$dir.log" >&2; exit 1; }
# Tests run in copies of it (tests/sysroot.py): it is not changed after this.
rm -rf "$dir/var/cache/apt/archives"/*.deb
touch "$dir/.done"
