# SPDX-License-Identifier: Apache-2.0
"""The tree's own PEP 517 build backend (pyproject.toml: backend-path mk).

Standard library only, so that a wheel builds with nothing fetched
(``pip wheel --no-build-isolation --no-index .``, ``python3 -m build
--no-isolation``, ``make wheel``):

- ``build_wheel`` runs the Makefile for the static daemon and CLI
  (``make STATIC=1 B=build-static ptxcached ptxcache``: every library but
  glibc linked in, tests/gpu/README.md), strips them, and writes the wheel
  with zipfile: the package (python/ptxcache), ``ptxcache.pth``, the two
  programs as the wheel's scripts (pip puts them in the environment's bin/,
  on its PATH), the man pages under its data, and the dist-info with a
  RECORD of SHA-256 digests.
- The programs link against Debian 11's glibc (the Makefile's sysroot,
  mk/sysroot.sh), so that they import nothing newer than GLIBC_2.28.
- The platform tag says what the programs need of the C library: every
  ``GLIBC_x.y`` symbol version they import (``readelf``, which reads an
  ELF of any architecture), the highest giving ``manylinux_2_y_<arch>``,
  the architecture that of the ELF header; a program that needs any
  shared library but glibc's own fails the build, as the tag would then
  lie.
- ``build_sdist`` writes the source tree (``git ls-files``, or the MANIFEST
  an earlier sdist left) with PKG-INFO; a wheel built from it runs the same
  Makefile.

$PTXCACHE_WHEEL_ARCH the architecture (default: this machine's; aarch64
on x86_64 cross-compiles, ``make wheel ARCH=aarch64``); $PTXCACHE_WHEEL_B
the Makefile's build directory (default build-static, build-static-ARCH
for another architecture); $PTXCACHE_WHEEL_JOBS make's -j (default: the
cores).
"""
from __future__ import annotations

import base64
import csv
import hashlib
import io
import os
import platform
import re
import shutil
import subprocess
import tarfile
import tempfile
import zipfile

try:
    import tomllib
except ImportError:     # Python < 3.11
    tomllib = None  # type: ignore[assignment]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROGRAMS = ("ptxcached", "ptxcache")
MANPAGES = (("man1", "ptxcache.1"), ("man5", "ptxcached.conf.5"), ("man8", "ptxcached.8"))
# The libraries glibc itself is made of: the only ones the programs may need.
GLIBC_LIBS = {"libc.so.6", "libm.so.6", "libdl.so.2", "librt.so.1", "libpthread.so.0",
              "ld-linux-x86-64.so.2", "ld-linux-aarch64.so.1"}
# Zip entries get this time (1980-01-01, or SOURCE_DATE_EPOCH): the same
# tree gives the same wheel.
EPOCH = (1980, 1, 1, 0, 0, 0)


def _metadata() -> dict:
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        if tomllib is None:
            raise RuntimeError("building ptxcache's wheel needs Python 3.11 or later (tomllib)")
        return tomllib.load(f)["project"]


def _name_version() -> tuple[str, str]:
    p = _metadata()
    return p["name"], p["version"]


def _pkg_info() -> str:
    p = _metadata()
    lines = ["Metadata-Version: 2.1", "Name: %s" % p["name"], "Version: %s" % p["version"],
             "Summary: %s" % p["description"], "License: %s" % p["license"]["text"],
             "Requires-Python: %s" % p["requires-python"]]
    for a in p.get("authors", []):
        lines.append("Author: %s" % a["name"])
    for c in p.get("classifiers", []):
        lines.append("Classifier: %s" % c)
    for extra, reqs in p.get("optional-dependencies", {}).items():
        lines.append("Provides-Extra: %s" % extra)
        for r in reqs:
            lines.append('Requires-Dist: %s; extra == "%s"' % (r, extra))
    lines.append("Description-Content-Type: text/markdown")
    with open(os.path.join(ROOT, p.get("readme", "README.md")), encoding="utf-8") as f:
        readme = f.read()
    return "\n".join(lines) + "\n\n" + readme


def _arch() -> str:
    return os.environ.get("PTXCACHE_WHEEL_ARCH") or platform.machine()


def _build_programs() -> str:
    """make STATIC=1 for the two programs; their directory."""
    arch = _arch()
    default_b = "build-static" if arch == platform.machine() else "build-static-" + arch
    b = os.environ.get("PTXCACHE_WHEEL_B", default_b)
    jobs = os.environ.get("PTXCACHE_WHEEL_JOBS", str(os.cpu_count() or 1))
    targets = ["%s/%s" % (b, p) for p in PROGRAMS]
    subprocess.run(["make", "-C", ROOT, "-j" + jobs, "STATIC=1", "ARCH=" + arch, "B=" + b] + targets,
                   check=True)
    return os.path.join(ROOT, b)


def _strip(src: str, dst: str) -> None:
    """strip for the program's own architecture (binutils of the cross
    toolchain where it is another)."""
    arch = elf_arch(src)
    tool = "strip" if arch == platform.machine() else "%s-linux-gnu-strip" % arch
    subprocess.run([tool, "-o", dst, src], check=True)


# ELF e_machine values (elf.h) and the names manylinux tags use.
ELF_MACHINES = {62: "x86_64", 183: "aarch64"}


def elf_arch(path: str) -> str:
    with open(path, "rb") as f:
        head = f.read(20)
    if head[:4] != b"\x7fELF" or head[5] != 1:
        raise RuntimeError("%s is not a little-endian ELF file" % path)
    machine = int.from_bytes(head[18:20], "little")
    if machine not in ELF_MACHINES:
        raise RuntimeError("%s is for ELF machine %d: no manylinux tag for it" % (path, machine))
    return ELF_MACHINES[machine]


def glibc_needs(paths: list[str]) -> tuple[int, int]:
    """The highest GLIBC_x.y version the programs import (readelf, any
    architecture), after checking that they need no shared library but
    glibc's."""
    best = (2, 17)
    for p in paths:
        dyn = subprocess.run(["readelf", "-d", "-W", p], capture_output=True, text=True,
                             check=True).stdout
        needed = set(re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", dyn))
        if needed - GLIBC_LIBS:
            raise RuntimeError("%s needs %s besides glibc: no manylinux tag would be true"
                               % (p, ", ".join(sorted(needed - GLIBC_LIBS))))
        syms = subprocess.run(["readelf", "--dyn-syms", "-W", p], capture_output=True,
                              text=True, check=True).stdout
        for major, minor in re.findall(r"@GLIBC_(\d+)\.(\d+)\b", syms):
            best = max(best, (int(major), int(minor)))
    return best


def platform_tag(paths: list[str]) -> str:
    major, minor = glibc_needs(paths)
    arches = {elf_arch(p) for p in paths}
    if len(arches) != 1:
        raise RuntimeError("the programs are for %s: one wheel, one architecture" % sorted(arches))
    return "manylinux_%d_%d_%s" % (major, minor, arches.pop())


def _record_line(arc: str, data: bytes) -> list[str]:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return [arc, "sha256=" + digest, str(len(data))]


def _date() -> tuple:
    sde = os.environ.get("SOURCE_DATE_EPOCH")
    if sde and sde.isdigit():
        import time
        t = time.gmtime(max(int(sde), 315532800))
        return tuple(t[:6])
    return EPOCH


def _add(z: zipfile.ZipFile, record: list, arc: str, data: bytes, mode: int = 0o644) -> None:
    info = zipfile.ZipInfo(arc, _date())
    info.external_attr = (0o100000 | mode) << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    z.writestr(info, data)
    record.append(_record_line(arc, data))


def build_wheel(wheel_directory: str, config_settings: dict | None = None,
                metadata_directory: str | None = None) -> str:
    name, version = _name_version()
    bdir = _build_programs()
    tmp = tempfile.mkdtemp(prefix="ptxcache-wheel-")
    try:
        progs = []
        for p in PROGRAMS:
            dst = os.path.join(tmp, p)
            _strip(os.path.join(bdir, p), dst)
            progs.append(dst)
        tag = "py3-none-" + platform_tag(progs)
        dist = "%s-%s" % (name, version)
        wheel_name = "%s-%s.whl" % (dist, tag)
        out = os.path.join(wheel_directory, wheel_name)
        record: list = []
        with zipfile.ZipFile(out + ".part", "w") as z:
            pkg = os.path.join(ROOT, "python", "ptxcache")
            for f in sorted(os.listdir(pkg)):
                if f.endswith(".py"):
                    with open(os.path.join(pkg, f), "rb") as fh:
                        _add(z, record, "ptxcache/" + f, fh.read())
            with open(os.path.join(ROOT, "python", "ptxcache.pth"), "rb") as fh:
                _add(z, record, "ptxcache.pth", fh.read())
            for p in progs:
                with open(p, "rb") as fh:
                    _add(z, record, "%s.data/scripts/%s" % (dist, os.path.basename(p)), fh.read(),
                         0o755)
            for section, page in MANPAGES:
                with open(os.path.join(ROOT, "man", page), "rb") as fh:
                    _add(z, record, "%s.data/data/share/man/%s/%s" % (dist, section, page), fh.read())
            di = "%s.dist-info" % dist
            _add(z, record, di + "/METADATA", _pkg_info().encode())
            _add(z, record, di + "/WHEEL", ("Wheel-Version: 1.0\nGenerator: ptxcache mk/wheel_backend.py\n"
                                            "Root-Is-Purelib: false\nTag: %s\n" % tag).encode())
            _add(z, record, di + "/top_level.txt", b"ptxcache\n")
            with open(os.path.join(ROOT, "LICENSE"), "rb") as fh:
                _add(z, record, di + "/LICENSE", fh.read())
            buf = io.StringIO()
            w = csv.writer(buf, lineterminator="\n")
            w.writerows(record)
            w.writerow([di + "/RECORD", "", ""])
            info = zipfile.ZipInfo(di + "/RECORD", _date())
            info.external_attr = (0o100644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, buf.getvalue())
        os.replace(out + ".part", out)
        return wheel_name
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def source_files() -> list[str]:
    """The tree's files, relative: what git tracks, or the MANIFEST an sdist
    carries."""
    r = subprocess.run(["git", "-C", ROOT, "ls-files", "-z"], capture_output=True)
    if r.returncode == 0 and r.stdout:
        files = [f for f in r.stdout.decode().split("\0") if f]
    else:
        with open(os.path.join(ROOT, "MANIFEST"), encoding="utf-8") as f:
            files = [line.rstrip("\n") for line in f if line.strip()]
    return [f for f in files if os.path.isfile(os.path.join(ROOT, f))]


def build_sdist(sdist_directory: str, config_settings: dict | None = None) -> str:
    name, version = _name_version()
    base = "%s-%s" % (name, version)
    out = os.path.join(sdist_directory, base + ".tar.gz")
    files = source_files()
    mtime = 315532800

    def add_bytes(t: tarfile.TarFile, arc: str, data: bytes) -> None:
        ti = tarfile.TarInfo(arc)
        ti.size, ti.mtime, ti.mode = len(data), mtime, 0o644
        t.addfile(ti, io.BytesIO(data))

    with tarfile.open(out + ".part", "w:gz", format=tarfile.PAX_FORMAT) as t:
        for f in sorted(files):
            ti = t.gettarinfo(os.path.join(ROOT, f), arcname="%s/%s" % (base, f))
            ti.uid = ti.gid = 0
            ti.uname = ti.gname = ""
            ti.mtime = mtime
            with open(os.path.join(ROOT, f), "rb") as fh:
                t.addfile(ti, fh)
        add_bytes(t, base + "/PKG-INFO", _pkg_info().encode())
        add_bytes(t, base + "/MANIFEST", "".join(f + "\n" for f in sorted(files)).encode())
    os.replace(out + ".part", out)
    return base + ".tar.gz"


def get_requires_for_build_wheel(config_settings: dict | None = None) -> list[str]:
    return []


def get_requires_for_build_sdist(config_settings: dict | None = None) -> list[str]:
    return []
