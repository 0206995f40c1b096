# SPDX-License-Identifier: Apache-2.0
"""Inductor's hash of PyTorch's installation, computed once per
installation, not once per process.

``torch._inductor.codecache.torch_key()`` is a SHA-256 of
``torch.__version__``, of every module that ``pkgutil`` finds below
PyTorch's package directory (``_TORCH_PATH``; the packages' modules,
recursively: names and file contents, extension modules included) and of
two files of Inductor's (``codegen/aoti_runtime/interface.cpp``,
``script.ld``). It is part of the FX graph, AOTAutograd and autotune keys
and of the compile workers' command line; each fresh process computes it
once (0.09-0.14 s on an H100, issue 58), with or without Inductor's local
caches.

Its answer depends on those files alone, so it is kept on ptxcached
(namespace ``torch-key``, the caller's scope) under a fingerprint of
them: the root's path, ``torch.__version__``, the import suffixes (which
files are modules), and for every file in the root and in each directory
below it that is a package (has an ``__init__.*``; pkgutil descends into
no other) and for the two extra files: its relative path, device, inode,
size, and modification and change times in nanoseconds. This covers
every file the hash reads (and more). A process whose fingerprint is
found gets the stored answer; any other computes it with PyTorch's own
function and stores it. A daemon that is down is a miss.

PyTorch wraps the function with ``torch_key_cache`` (a one-value cache
with ``set`` and ``clear``), and its modules import the wrapper under
their own names (``async_compile``, ``compile_worker``): install() leaves
that wrapper in place and replaces, in its closure, the function it
calls on an empty cache (the cell ``func``) with one that asks the
daemon first. ``set`` (the compile workers' key from their parent) and
``clear`` stay PyTorch's. ``PTXCACHE_TORCH_KEY=0`` leaves it alone; so
does an fbcode build (``config.is_fbcode()``: the hash is another there).

PyTorch's names touched (checked against 2.11's source):
``torch._inductor.codecache``: ``torch_key`` (a closure over ``_cache``
and ``func``; the cell ``func`` is replaced), ``_TORCH_PATH``,
``config.is_fbcode``; ``torch.__version__``.
"""
from __future__ import annotations

import hashlib
import importlib.machinery
import logging
import os
import sys
import threading
import types
from typing import Any, Callable

__all__ = ["install", "fingerprint", "NAMESPACE", "MODULE", "ENV", "counts"]

log = logging.getLogger(__name__)

NAMESPACE = "torch-key"
MODULE = "torch._inductor.codecache"
ENV = "PTXCACHE_TORCH_KEY"
EXTRA = ("codegen/aoti_runtime/interface.cpp", "script.ld")  # below codecache's directory
MAX_FILES = 200000
_MARK = "_ptxcache_torch_key"

# This process: "stored" (found on the daemon), "computed" (PyTorch's own).
counts = {"stored": 0, "computed": 0}
_lock = threading.Lock()


def _stat_line(h: Any, rel: str, path: str) -> None:
    try:
        st = os.stat(path)
        h.update(b"%s\0%d %d %d %d %d\n" % (rel.encode("utf-8", "surrogateescape"), st.st_dev,
                                             st.st_ino, st.st_size, st.st_mtime_ns,
                                             st.st_ctime_ns))
    except OSError:
        h.update(b"%s\0absent\n" % rel.encode("utf-8", "surrogateescape"))


def fingerprint(root: str, version: str, extra: list[str]) -> str:
    """A hash of what identifies every file torch_key() may read (see the
    module's comment); "" if root cannot be read or holds too many."""
    h = hashlib.sha256()
    h.update(os.path.realpath(root).encode("utf-8", "surrogateescape") + b"\0")
    h.update(version.encode("utf-8", "surrogateescape") + b"\0")
    h.update(" ".join(importlib.machinery.all_suffixes()).encode() + b"\0")
    n = 0
    todo = [(root, True)]
    while todo:
        d, top = todo.pop()
        try:
            with os.scandir(d) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError:
            if top:
                return ""
            continue
        if not top and not any(e.name.startswith("__init__.") for e in entries):
            continue        # not a package: pkgutil does not look inside
        for e in entries:
            if e.name == "__pycache__":
                continue
            try:
                is_dir = e.is_dir()
            except OSError:
                is_dir = False
            if is_dir:
                todo.append((e.path, False))
                continue
            _stat_line(h, os.path.relpath(e.path, root), e.path)
            n += 1
            if n > MAX_FILES:
                return ""
        todo.sort(reverse=True)   # a fixed order: depth first, by name
    for p in extra:
        _stat_line(h, "extra:" + p, p)
    return h.hexdigest() if n else ""


def _wrap(orig: Callable[[], bytes], module: Any) -> Callable[[], bytes]:
    def torch_key() -> bytes:
        from .artifacts import store
        with _lock:
            fp = ""
            try:
                root = module._TORCH_PATH
                here = os.path.dirname(module.__file__)
                torch = sys.modules.get("torch")
                fp = fingerprint(root, str(getattr(torch, "__version__", "")),
                                 [os.path.join(here, x) for x in EXTRA])
            except Exception:
                log.debug("ptxcache: no fingerprint of PyTorch's files", exc_info=True)
            if fp:
                v = store().get(NAMESPACE, fp)
                if isinstance(v, bytes) and len(v) == 32:
                    counts["stored"] += 1
                    return v
            k = orig()
            counts["computed"] += 1
            if fp and isinstance(k, bytes) and len(k) == 32:
                store().put(NAMESPACE, fp, k)
            return k

    setattr(torch_key, _MARK, True)
    torch_key.__wrapped__ = orig  # type: ignore[attr-defined]
    return torch_key


def _func_cell(fn: Any) -> Any:
    code = getattr(fn, "__code__", None)
    cells = getattr(fn, "__closure__", None)
    if not isinstance(fn, types.FunctionType) or code is None or not cells:
        return None
    names = code.co_freevars
    if "func" not in names or "_cache" not in names or len(names) != len(cells):
        return None
    cell = cells[names.index("func")]
    try:
        f = cell.cell_contents
    except ValueError:
        return None
    return cell if callable(f) else None


def install(module: Any) -> bool:
    """Make codecache.torch_key() ask the daemon before hashing (once).
    True if it does."""
    if os.environ.get(ENV) == "0":
        return False
    fn = getattr(module, "torch_key", None)
    cell = _func_cell(fn)
    is_fbcode = getattr(getattr(module, "config", None), "is_fbcode", None)
    if (cell is None or not hasattr(fn, "set") or not callable(is_fbcode)
            or not isinstance(getattr(module, "_TORCH_PATH", None), str)):
        log.info("ptxcache: %s.torch_key is not what this was written for; it stays PyTorch's",
                 MODULE)
        return False
    if getattr(cell.cell_contents, _MARK, False):
        return True
    try:
        if is_fbcode():
            return False
    except Exception:
        return False
    cell.cell_contents = _wrap(cell.cell_contents, module)
    return True
