#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# mk/sysroot.sh ARCH DIR: what `make STATIC=1` links the programs against,
# so that they run on every glibc from 2.28 on (manylinux_2_28, PyTorch's
# own floor), built from Debian's packages alone:
#
#   DIR/glibc/root     Debian 11's C library (glibc 2.31: libc6, libc6-dev),
#                      the --sysroot of the link. The programs are compiled
#                      against the toolchain's own headers, as the static
#                      libraries below were; the link binds each symbol to
#                      the oldest version 2.31 has, and compat/glibc.c
#                      covers the few that 2.31 lacks or versions after 2.28.
#   DIR/static         the static libraries linked in, one link each, and
#                      nothing else: a name that is not here does not link.
#   DIR/deps/root      aarch64 only: Debian 12's arm64 development packages
#                      (headers, static libraries, LLVM 22), for the cross
#                      build; on x86_64 the host's own are used.
#
# Everything is kept, so a second run fetches nothing.
set -eu
[ $# = 2 ] || { echo "usage: mk/sysroot.sh x86_64|aarch64 DIR" >&2; exit 2; }
arch=$1 dir=$2
case $arch in
x86_64)  deb=amd64 triplet=x86_64-linux-gnu ;;
aarch64) deb=arm64 triplet=aarch64-linux-gnu ;;
*) echo "mk/sysroot.sh: no sysroot for $arch (x86_64, aarch64)" >&2; exit 2 ;;
esac
here=$(dirname "$0")
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)

"$here/debs.sh" bullseye "$deb" "$dir/glibc" libc6 libc6-dev
# The packages' absolute links (/lib64/ld-linux-x86-64.so.2) made
# relative, so that they point into the sysroot, not at this host's files.
root=$dir/glibc/root
find "$root" -type l | while read -r l; do
	t=$(readlink "$l")
	case $t in
	/*) up=$(dirname "${l#"$root"/}" | sed 's|[^/][^/]*|..|g')
	    ln -sfn "$up$t" "$l" ;;
	esac
done

# The libraries the Makefile names (-lNAME) in its STATIC link, and where
# each comes from.
libs="sqlite3 z event msgpackc zstd crypto hiredis xxhash seccomp json-c xml2"
if [ "$arch" = "$(uname -m)" ]; then
	libdir=/usr/lib/$triplet
else
	"$here/debs.sh" bookworm "$deb" "$dir/deps" libsqlite3-dev zlib1g-dev \
		libmsgpack-dev libzstd-dev libssl-dev libhiredis-dev libxxhash-dev \
		libseccomp-dev libjson-c-dev libxml2-dev libevent-dev \
		linux-libc-dev llvm-22-dev
	libdir=$dir/deps/root/usr/lib/$triplet
fi
rm -rf "$dir/static" && mkdir -p "$dir/static"
for l in $libs; do
	[ -e "$libdir/lib$l.a" ] || { echo "mk/sysroot.sh: no $libdir/lib$l.a" >&2; exit 1; }
	ln -s "$libdir/lib$l.a" "$dir/static/lib$l.a"
done
touch "$dir/.done"
