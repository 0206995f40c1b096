#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# mk/debs.sh SUITE ARCH DIR PACKAGE...: Debian's own binary packages of
# another release or architecture, downloaded into DIR and unpacked into
# DIR/root, for the builds that link against them (mk/sysroot.sh). Nothing
# is installed on this machine and nothing is fetched but Debian packages:
# apt runs on a private state (DIR/apt), with the archive keyring the host
# already trusts, so every package is checked as apt checks its own.
# A package already in DIR is not fetched again; the exact names are
# taken (no dependencies followed: the caller names what it links).
set -eu
[ $# -ge 4 ] || { echo "usage: mk/debs.sh SUITE ARCH DIR PACKAGE..." >&2; exit 2; }
suite=$1 arch=$2 dir=$3
shift 3
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
security=${DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
mkdir -p "$dir/apt/lists/partial" "$dir/apt/cache/archives/partial" "$dir/root"
dir=$(cd "$dir" && pwd)

missing=""
for p in "$@"; do
	ls "$dir"/"${p}"_*.deb >/dev/null 2>&1 || missing="$missing $p"
done
[ -z "$missing" ] && exit 0

cat > "$dir/apt/sources.list" <<EOF
deb [arch=$arch] $mirror $suite main
deb [arch=$arch] $mirror $suite-updates main
deb [arch=$arch] $security $suite-security main
EOF
o="-o Dir::Etc::SourceList=$dir/apt/sources.list -o Dir::Etc::SourceParts=/dev/null
   -o Dir::State::Lists=$dir/apt/lists -o Dir::Cache=$dir/apt/cache
   -o Dir::State::status=/dev/null -o APT::Architecture=$arch
   -o APT::Architectures::=$arch -o Debug::NoLocking=1
   -o APT::Sandbox::User=root"
echo "  DEBS $suite/$arch:$missing"
# shellcheck disable=SC2086
apt-get $o -qq update
# Each package at the newest version that downloads: a mirror may list a
# security update whose file it does not hold.
for p in $missing; do
	# shellcheck disable=SC2086
	for v in $(apt-cache $o madison "$p" | awk '{ print $3 }'); do
		# shellcheck disable=SC2086
		(cd "$dir" && apt-get $o -qq download "$p=$v" 2>/dev/null) && break
	done
	ls "$dir"/"${p}"_*.deb >/dev/null 2>&1 ||
		{ echo "mk/debs.sh: cannot download $p ($suite/$arch)" >&2; exit 1; }
	dpkg-deb -x "$dir"/"${p}"_*.deb "$dir/root"
done
