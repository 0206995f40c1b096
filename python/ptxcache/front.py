# SPDX-License-Identifier: Apache-2.0
"""Finding the ptxas front: the ``ptxcache`` binary called by the name
``ptxas`` (client/ptxas.c), which Triton runs through TRITON_PTXAS_PATH.

In this order:
1. ``$PTXCACHE_FRONT``: the path of such a ``ptxas`` (a symlink to ptxcache);
2. the link ``make install`` and the Debian package install,
   ``PREFIX/lib/ptxcache/ptxas``, beside the ``ptxcache`` on PATH or in /usr
   and /usr/local;
3. a ``ptxcache`` binary (``$PTXCACHE_BIN``, else this environment's
   scripts directory, where pip puts the wheel's, else on PATH, else the
   ``build/ptxcache`` of the source tree this package sits in), for which a
   link named ``ptxas`` is made in ``$XDG_CACHE_HOME/ptxcache/front/``
   (``~/.cache/ptxcache/front/``).

Also: the ptxas Triton ships (``triton/backends/nvidia/bin/ptxas``), found
without importing Triton, for the front to run when the daemon cannot
answer (PTXCACHE_PTXAS), so that fallback is the very assembler Triton
would have run.
"""
from __future__ import annotations

import importlib.util
import os
import shutil
import sysconfig

__all__ = ["find_front", "find_ptxcache_binary", "triton_ptxas"]

_HERE = os.path.dirname(os.path.abspath(__file__))


def _executable(p: str | None) -> bool:
    return bool(p) and os.path.isfile(p) and os.access(p, os.X_OK)  # type: ignore[arg-type]


def user_cache_path(*parts: str) -> str:
    """$XDG_CACHE_HOME/ptxcache/PARTS (~/.cache/ptxcache/PARTS)."""
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "ptxcache", *parts)


def link_to(link: str, target: str) -> None:
    """Make link a symbolic link to target, replacing whatever it was in one
    rename, so that a process reading it concurrently sees one or the other
    (its directory made, 0700, if missing). Raises OSError."""
    os.makedirs(os.path.dirname(link), mode=0o700, exist_ok=True)
    tmp = "%s.%d" % (link, os.getpid())
    if os.path.lexists(tmp):
        os.unlink(tmp)
    os.symlink(target, tmp)
    os.replace(tmp, link)


def find_ptxcache_binary() -> tuple[str | None, str]:
    """(path of the ptxcache binary, how it was found), or (None, why not)."""
    p = os.environ.get("PTXCACHE_BIN")
    if p:
        return (p, "PTXCACHE_BIN") if _executable(p) else (None, "PTXCACHE_BIN=%s is not executable" % p)
    # This environment's own programs (a venv's bin/, where pip put the
    # wheel's), which need not be on PATH, then PATH.
    p = os.path.join(sysconfig.get_path("scripts"), "ptxcache")
    if _executable(p):
        return p, "this environment's scripts"
    p = shutil.which("ptxcache")
    if p:
        return os.path.abspath(p), "PATH"
    p = os.path.join(os.path.dirname(os.path.dirname(_HERE)), "build", "ptxcache")
    if _executable(p):
        return p, "the source tree's build/"
    return None, "no ptxcache binary (PTXCACHE_BIN, PATH, the source tree's build/)"


def find_front(make_link: bool = True) -> tuple[str | None, str]:
    """(path of a ptxas front, how it was found), or (None, why not)."""
    p = os.environ.get("PTXCACHE_FRONT")
    if p:
        return (p, "PTXCACHE_FRONT") if _executable(p) else (None, "PTXCACHE_FRONT=%s is not executable" % p)
    binary, how = find_ptxcache_binary()
    prefixes = []
    if binary:
        prefixes.append(os.path.dirname(os.path.dirname(os.path.realpath(binary))))
        prefixes.append(os.path.dirname(os.path.dirname(binary)))
    prefixes += ["/usr", "/usr/local"]
    for prefix in prefixes:
        link = os.path.join(prefix, "lib", "ptxcache", "ptxas")
        if _executable(link):
            return link, "installed"
    if not binary:
        return None, how
    link = user_cache_path("front", "ptxas")
    try:
        if os.path.islink(link) and os.readlink(link) == binary:
            return link, "link to %s (%s)" % (binary, how)
        if not make_link:
            return None, "no installed front (ptxcache at %s)" % binary
        link_to(link, binary)
    except OSError as e:
        return None, "cannot make the front's link '%s': %s" % (link, e.strerror or e)
    return link, "link to %s (%s)" % (binary, how)


def triton_ptxas() -> str | None:
    """The ptxas inside the installed Triton package, if any (Triton is
    located, not imported)."""
    try:
        spec = importlib.util.find_spec("triton")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for loc in spec.submodule_search_locations:
        p = os.path.join(loc, "backends", "nvidia", "bin", "ptxas")
        if _executable(p):
            return p
    return None
