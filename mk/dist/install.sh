#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# install.sh: installs ptxcache from this tarball (make dist) on any Linux
# node with glibc and, for the service, systemd; POSIX sh and POSIX
# utilities alone (mkdir, cp, mv, chmod, ln, sed, grep, id).
#
#   sudo ./install.sh                       # PREFIX=/usr/local
#   sudo PREFIX=/opt/ptxcache ./install.sh
#   DESTDIR=/tmp/stage ./install.sh         # staged: no user is created
#
# It installs the programs in PREFIX/bin, the ptxas front's link in
# PREFIX/lib/ptxcache, the systemd units in PREFIX/lib/systemd/system (the
# service's ExecStart= filled in for PREFIX), the sysusers.d snippet in
# PREFIX/lib/sysusers.d, the man pages in PREFIX/share/man, and the sample
# configuration as /etc/ptxcache/ptxcached.conf (the daemon reads it there
# whatever the PREFIX), never over an existing one. Run as root with no
# DESTDIR, it creates the service's user and group `ptxcache` unless they
# exist: with systemd-sysusers if the node has it, else useradd (and
# groupadd), else adduser. Each thing it does is one line on stdout.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
PREFIX=${PREFIX:-/usr/local}
DESTDIR=${DESTDIR:-}
case "$PREFIX" in
/*) ;;
*) echo "install.sh: PREFIX must be an absolute path, not '$PREFIX'" >&2; exit 2 ;;
esac
case "${1:-}" in
-h|--help) sed -n '3,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
"") ;;
*) echo "install.sh: no arguments (PREFIX and DESTDIR come from the environment)" >&2; exit 2 ;;
esac

D=$DESTDIR
bindir=$PREFIX/bin
unitdir=$PREFIX/lib/systemd/system
sysusersdir=$PREFIX/lib/sysusers.d
frontdir=$PREFIX/lib/ptxcache
mandir=$PREFIX/share/man
confdir=/etc/ptxcache

say() { echo "install.sh: $*"; }

# put SRC DST MODE: a copy, mode set, and its line.
put() {
	mkdir -p "$(dirname "$2")"
	cp "$1" "$2.new.$$"
	chmod "$3" "$2.new.$$"
	mv -f "$2.new.$$" "$2"
	say "installed $2"
}

put "$here/bin/ptxcached" "$D$bindir/ptxcached" 755
put "$here/bin/ptxcache" "$D$bindir/ptxcache" 755

# The ptxas front under the name Triton runs (TRITON_PTXAS_PATH).
mkdir -p "$D$frontdir"
ln -sf ../../bin/ptxcache "$D$frontdir/ptxas"
say "linked $D$frontdir/ptxas -> ../../bin/ptxcache"

mkdir -p "$D$unitdir"
sed -e "s|@BINDIR@|$bindir|g" "$here/systemd/ptxcached.service.in" > "$D$unitdir/ptxcached.service.new.$$"
chmod 644 "$D$unitdir/ptxcached.service.new.$$"
mv -f "$D$unitdir/ptxcached.service.new.$$" "$D$unitdir/ptxcached.service"
say "installed $D$unitdir/ptxcached.service (ExecStart=$bindir/ptxcached)"
put "$here/systemd/ptxcached.socket" "$D$unitdir/ptxcached.socket" 644
put "$here/systemd/ptxcache.sysusers" "$D$sysusersdir/ptxcache.conf" 644

for page in man1/ptxcache.1 man5/ptxcached.conf.5 man8/ptxcached.8; do
	put "$here/man/$(basename "$page")" "$D$mandir/$page" 644
done

if [ -e "$D$confdir/ptxcached.conf" ]; then
	say "kept $D$confdir/ptxcached.conf (exists; the sample is $here/systemd/ptxcached.conf)"
else
	put "$here/systemd/ptxcached.conf" "$D$confdir/ptxcached.conf" 644
fi

# The service's user and group.
if [ -n "$D" ]; then
	say "no user created (DESTDIR is set): create 'ptxcache' on the node (systemd-sysusers)"
elif [ "$(id -u)" != 0 ]; then
	say "no user created (not root): as root, run systemd-sysusers $sysusersdir/ptxcache.conf"
elif grep -q '^ptxcache:' /etc/passwd 2>/dev/null || id ptxcache >/dev/null 2>&1; then
	say "user ptxcache exists"
else
	nologin=/bin/false
	for s in /usr/sbin/nologin /sbin/nologin; do
		[ -x "$s" ] && { nologin=$s; break; }
	done
	if command -v systemd-sysusers >/dev/null 2>&1; then
		systemd-sysusers "$sysusersdir/ptxcache.conf"
		say "created user and group ptxcache with systemd-sysusers"
	elif command -v useradd >/dev/null 2>&1; then
		grep -q '^ptxcache:' /etc/group 2>/dev/null || groupadd --system ptxcache
		useradd --system --gid ptxcache --home-dir /var/lib/ptxcache --no-create-home \
			--shell "$nologin" --comment "ptxcache compile service" ptxcache
		say "created user and group ptxcache with useradd"
	elif command -v adduser >/dev/null 2>&1; then
		if adduser --help 2>&1 | grep -q -- '--system'; then
			adduser --system --group --home /var/lib/ptxcache --no-create-home \
				--shell "$nologin" ptxcache >/dev/null
		else    # BusyBox
			addgroup -S ptxcache
			adduser -S -D -H -h /var/lib/ptxcache -s "$nologin" -G ptxcache ptxcache
		fi
		say "created user and group ptxcache with adduser"
	else
		echo "install.sh: no systemd-sysusers, useradd or adduser: create the system user and group 'ptxcache' by hand" >&2
		exit 1
	fi
fi

if [ -z "$D" ]; then
	say "next: systemctl daemon-reload && systemctl enable --now ptxcached.socket"
	say "next: usermod -aG ptxcache USER, for each user of the service"
fi
