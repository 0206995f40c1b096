#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Install what ptxcache needs to build and test, from Debian's packages.
# As root it installs whatever is missing; otherwise it names the command to run.
# `mk/deps.sh bench` does the same for what only `make bench` uses (the chart),
# `mk/deps.sh fuzz` for what only `make fuzz` uses (clang and libFuzzer),
# `mk/deps.sh podman` for running the image under podman in tests/test_image.py.
set -e
PKGS="llvm-22 llvm-22-dev llvm-22-tools libsqlite3-dev libevent-dev libmsgpack-dev
libzstd-dev libxxhash-dev libseccomp-dev libssl-dev libjson-c-dev libhiredis-dev redis-server pkg-config python3 sqlite3
python3-msgpack zstd systemd debhelper dh-python dpkg-dev lintian python3-venv python3-pip
python3-build binutils debootstrap qemu-user-static gcc-aarch64-linux-gnu
g++-aarch64-linux-gnu umoci python3-yaml lld"  # zstd: unpacks tests/corpus; systemd: systemd-analyze,
# systemd-socket-activate for tests/test_systemd.py; debhelper, dh-python, dpkg-dev,
# lintian: make deb and tests/test_deb.py; python3-msgpack: the Python package's
# codec (python/ptxcache; tests/test_python.py compares it with its own);
# python3-venv, python3-pip, python3-build, binutils (objdump, strip): make
# wheel and tests/test_wheel.py (a fresh venv, pip install --no-index);
# debootstrap, qemu-user-static, gcc- and g++-aarch64-linux-gnu: make wheel
# ARCH=aarch64 and tests/test_oldsystem.py (a Debian 11 root, the aarch64
# programs under qemu-user);
# umoci: make image writes the OCI image from scratch with it (layout,
# layer, config), tests/test_image.py unpacks it; python3-yaml:
# tests/test_kubernetes.py parses deploy/kubernetes/ (Debian ships no
# validator against Kubernetes' schemas); lld: the dynamic builds link
# the daemons with it (the Makefile), a quarter of ld.bfd's time
[ "${1:-}" = bench ] && PKGS="python3-matplotlib"
[ "${1:-}" = fuzz ] && PKGS="clang libclang-rt-14-dev"  # make fuzz: libFuzzer
# `mk/deps.sh podman`: what tests/test_image.py needs to run the image under
# podman as well as in a chroot: runc (crun refuses a hybrid cgroup
# hierarchy) and catatonit (podman run --init: the daemon is not PID 1)
[ "${1:-}" = podman ] && PKGS="podman runc catatonit"
missing=""
for p in $PKGS; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" ||
		missing="$missing $p"
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" != 0 ]; then
	echo "ptxcache: missing packages:$missing" >&2
	echo "ptxcache: install them with: sudo apt-get install$missing" >&2
	exit 1
fi
echo "ptxcache: installing$missing"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends $missing >/dev/null
