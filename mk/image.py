# SPDX-License-Identifier: Apache-2.0
"""make image: the OCI image of ptxcached, from scratch (no base image).

The static programs (make STATIC=1: every library but glibc linked in)
need glibc's loader and a few of its libraries, so the root file system
is those and nothing else:

- /usr/bin/ptxcached and /usr/bin/ptxcache, stripped;
- the program interpreter they name (PT_INTERP, readelf -l) and the
  libraries they NEED (objdump -p), each library's own NEEDED followed,
  copied from this machine's /lib/<multiarch> to the same paths;
- /etc/passwd and /etc/group with root and the non-root user ptxcache
  (UID, default 65532, its group the same number), /etc/nsswitch.conf
  (files, then DNS for host names);
- /tmp (1777); /run/ptxcache and /var/cache/ptxcache owned by ptxcache,
  the image's two volumes: the socket directory and the cache;
  /proc, /dev, /sys as empty mount points.

The layer is one tar written here (tarfile: names sorted, owner set per
entry, every mtime SOURCE_DATE_EPOCH), so building needs no root. umoci
(Debian's package) makes the rest: the OCI layout (umoci init, new), the
layer (umoci raw add-layer), the config (user UID:UID, entrypoint
ptxcached with the socket and cache flags, the volumes, created at the
same epoch), under the reference NAME:TAG. Then the layout is packed as an
oci-archive tar, which `podman load` takes (as localhost/NAME:TAG) and
`skopeo copy oci-archive:FILE docker://REGISTRY/NAME:TAG` pushes.

usage: mk/image.py --programs DIR --out DIR [--name ptxcache] [--tag VERSION] [--uid 65532]
"""
from __future__ import annotations

import argparse
import datetime
import io
import json
import os
import platform
import re
import shutil
import subprocess
import tarfile
import tempfile

SOCKET_DIR = "/run/ptxcache"
CACHE_DIR = "/var/cache/ptxcache"
PROGRAMS = ("ptxcached", "ptxcache")
MULTIARCH = {"x86_64": "x86_64-linux-gnu", "aarch64": "aarch64-linux-gnu"}


def _out(argv: list[str]) -> str:
    return subprocess.run(argv, capture_output=True, text=True, check=True).stdout


def needed(path: str) -> list[str]:
    return re.findall(r"^\s*NEEDED\s+(\S+)", _out(["objdump", "-p", path]), re.M)


def interpreter(path: str) -> str | None:
    m = re.search(r"Requesting program interpreter: (\S+)\]", _out(["readelf", "-l", path]))
    return m.group(1) if m else None


def libraries(programs: list[str]) -> dict[str, str]:
    """{path in the image: file on this machine} for the loader and every
    library the programs need, transitively."""
    multiarch = MULTIARCH[platform.machine()]
    libdir = "/lib/" + multiarch
    out: dict[str, str] = {}
    todo = list(programs)
    seen: set[str] = set()
    while todo:
        p = todo.pop()
        interp = interpreter(p)
        if interp and interp not in out:
            out[interp] = os.path.realpath(interp)
        for name in needed(p):
            if name in seen:
                continue
            seen.add(name)
            src = os.path.join(libdir, name)
            if not os.path.exists(src):
                raise SystemExit("image: %s needs %s, not found in %s" % (p, name, libdir))
            out[os.path.join(libdir, name)] = os.path.realpath(src)
            todo.append(src)
    return out


def layer(programs: dict[str, str], libs: dict[str, str], uid: int, epoch: int) -> bytes:
    """The root file system as one tar, entries sorted."""
    entries: dict[str, tuple] = {}     # path: (kind, mode, uid, data or source)

    def parents(path: str) -> None:
        d = os.path.dirname(path)
        while d not in ("", "/") and d not in entries:
            entries[d] = ("dir", 0o755, 0, None)
            d = os.path.dirname(d)

    def add(path: str, kind: str, mode: int, owner: int, what) -> None:
        parents(path)
        entries[path] = (kind, mode, owner, what)

    passwd = ("root:x:0:0:root:/root:/sbin/nologin\n"
              "ptxcache:x:%d:%d:ptxcache compile service:%s:/sbin/nologin\n" % (uid, uid, CACHE_DIR))
    group = "root:x:0:\nptxcache:x:%d:\n" % uid
    add("/etc/passwd", "file", 0o644, 0, passwd.encode())
    add("/etc/group", "file", 0o644, 0, group.encode())
    add("/etc/nsswitch.conf", "file", 0o644, 0, b"passwd: files\ngroup: files\nhosts: files dns\n")
    for path, src in sorted(programs.items()):
        add(path, "src", 0o755, 0, src)
    first: dict[str, str] = {}      # file on this machine: its first path here
    for path, src in sorted(libs.items(), key=lambda kv: (len(kv[0]), kv[0])):
        if src in first:    # the loader, as PT_INTERP and as NEEDED: one file
            add(path, "link", 0o777, 0, os.path.relpath(first[src], os.path.dirname(path)))
        else:
            first[src] = path
            add(path, "src", 0o755, 0, src)
    add("/tmp", "dir", 0o1777, 0, None)
    for d in ("/proc", "/dev", "/sys"):
        add(d, "dir", 0o555 if d != "/dev" else 0o755, 0, None)
    add(SOCKET_DIR, "dir", 0o755, uid, None)
    add(CACHE_DIR, "dir", 0o700, uid, None)

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
        for path in sorted(entries):
            kind, mode, owner, what = entries[path]
            info = tarfile.TarInfo(path.lstrip("/"))
            info.mtime = epoch
            info.mode = mode
            info.uid = info.gid = owner
            info.uname = info.gname = ""
            if kind == "dir":
                info.type = tarfile.DIRTYPE
                t.addfile(info)
            elif kind == "link":
                info.type = tarfile.SYMTYPE
                info.linkname = what
                t.addfile(info)
            else:
                data = what if kind == "file" else open(what, "rb").read()
                info.size = len(data)
                t.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def umoci(*args: str) -> None:
    subprocess.run(["umoci"] + list(args), check=True)


def pack_dir(src: str, dest: str, epoch: int) -> None:
    """The layout directory as a tar (oci-archive), reproducibly."""
    with tarfile.open(dest + ".tmp", "w", format=tarfile.PAX_FORMAT) as t:
        for top, dirs, files in os.walk(src):
            dirs.sort()
            for name in sorted(dirs + files):
                full = os.path.join(top, name)
                info = t.gettarinfo(full, os.path.relpath(full, src))
                info.mtime = epoch
                info.uid = info.gid = 0
                info.uname = info.gname = ""
                if info.isfile():
                    with open(full, "rb") as f:
                        t.addfile(info, f)
                else:
                    t.addfile(info)
    os.replace(dest + ".tmp", dest)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--programs", required=True, help="directory of the static ptxcached and ptxcache")
    ap.add_argument("--out", required=True)
    ap.add_argument("--name", default="ptxcache")
    ap.add_argument("--tag", required=True)
    ap.add_argument("--uid", type=int, default=65532)
    ap.add_argument("--strip", default="strip")
    a = ap.parse_args()
    sde = os.environ.get("SOURCE_DATE_EPOCH", "")
    epoch = int(sde) if sde.isdigit() else 0

    layout = os.path.join(a.out, "oci")
    archive = os.path.join(a.out, "%s-%s.oci.tar" % (a.name, a.tag))
    shutil.rmtree(layout, ignore_errors=True)
    os.makedirs(a.out, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="ptxcache-image-")
    try:
        progs = {}
        for p in PROGRAMS:
            dst = os.path.join(tmp, p)
            subprocess.run([a.strip, "-o", dst, os.path.join(a.programs, p)], check=True)
            progs["/usr/bin/" + p] = dst
        libs = libraries(list(progs.values()))
        tar = os.path.join(tmp, "rootfs.tar")
        data = layer(progs, libs, a.uid, epoch)
        with open(tar, "wb") as f:
            f.write(data)

        # The layout's reference is NAME:TAG (a ref.name may hold a colon),
        # which podman load takes as the image's name.
        ref = "%s:%s:%s" % (layout, a.name, a.tag)
        created = datetime.datetime.fromtimestamp(epoch, datetime.timezone.utc).strftime(
            "%Y-%m-%dT%H:%M:%SZ")
        umoci("init", "--layout", layout)
        umoci("new", "--image", ref)
        umoci("raw", "add-layer", "--image", ref, "--history.created", created,
              "--history.created_by", "mk/image.py (make image)",
              "--history.comment", "ptxcached, ptxcache and the glibc they need", tar)
        entry = ["/usr/bin/ptxcached", "--socket", SOCKET_DIR + "/ptxcached.sock",
                 "--cache-dir", CACHE_DIR]
        cfg = ["config", "--no-history", "--image", ref, "--created", created,
               "--author", "ptxcache", "--config.user", "%d:%d" % (a.uid, a.uid),
               "--config.workingdir", "/", "--config.env", "PATH=/usr/bin",
               "--config.volume", SOCKET_DIR, "--config.volume", CACHE_DIR,
               "--config.label", "org.opencontainers.image.title=" + a.name,
               "--config.label", "org.opencontainers.image.version=" + a.tag,
               "--config.stopsignal", "SIGTERM"]
        for e in entry:
            cfg += ["--config.entrypoint", e]
        umoci(*cfg)
        umoci("gc", "--layout", layout)
        pack_dir(layout, archive, epoch)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    index = json.load(open(os.path.join(layout, "index.json")))
    digest = index["manifests"][0]["digest"].split(":", 1)[1]
    manifest = json.load(open(os.path.join(layout, "blobs", "sha256", digest)))
    compressed = sum(l["size"] for l in manifest["layers"])
    print("image %s:%s: %d files, %.1f MB unpacked, %.1f MB compressed layer; "
          "%s (layout), %s (oci-archive, %.1f MB)"
          % (a.name, a.tag, len(libs) + len(progs) + 3, len(data) / 1e6, compressed / 1e6,
             layout, archive, os.path.getsize(archive) / 1e6))


if __name__ == "__main__":
    main()
