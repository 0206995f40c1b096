#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Makes gpu-carry-py/bundle.tar.xz, what tests/gpu/torch_cache.py needs on a
# GPU machine without Debian's packages: the static daemon and CLI
# (stripped), and redis-server with the libraries it links beyond glibc and
# libstdc++ (for the second-daemon-through-Redis run). xz keeps it under the
# device tool's 64 MiB carry. Run from anywhere in the tree.
set -eu
cd "$(dirname "$0")/../.."
make STATIC=1 B=build-static build-static/ptxcached build-static/ptxcache
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
mkdir -p "$d/redis/lib"
strip -o "$d/ptxcached" build-static/ptxcached
strip -o "$d/ptxcache" build-static/ptxcache
cp -L "$(command -v redis-server)" "$d/redis/redis-server"
for lib in $(ldd "$(command -v redis-server)" | awk '/=> \//{print $3}'); do
	case $(basename "$lib") in
	libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|libstdc++*|libgcc_s*) ;;
	*) cp -L "$lib" "$d/redis/lib/" ;;
	esac
done
mkdir -p gpu-carry-py
tar -C "$d" -cJf gpu-carry-py/bundle.tar.xz .
ls -l gpu-carry-py/bundle.tar.xz
