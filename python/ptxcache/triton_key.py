# SPDX-License-Identifier: Apache-2.0
"""Triton's installation hash, computed once per installation, not once per
process.

``triton_key()`` (``triton/runtime/cache.py``) is Triton's version for
every cache key: a SHA-256 of its own files (the frontend, the compiler
and backend modules, ``libtriton.so``, the language modules) and its
version. Every fresh process computes it once (an ``lru_cache``), and
PyTorch asks for it on every ``torch.compile`` (the FX graph and
AOTAutograd keys, ``CacheBase.get_system()``): 0.35 s of a warm
process's 1.5 s on an H200 (tests/gpu/README.md, issue 29), as much with
Inductor's local caches as with the daemon.

The answer depends on the files below Triton's package directory alone
(Triton 3.6's function reads nothing else; which ``libtriton`` file it
hashes is named by the interpreter's ``EXT_SUFFIX``, also part of the
fingerprint), so it is kept on ptxcached (namespace ``triton-key``, the caller's scope)
under a fingerprint of that directory: the path, and for every file under
it its relative path, device, inode, size, and modification and change
times in nanoseconds (``os.stat``; a file rewritten in place changes its
change time, one replaced gets another inode). A process whose
fingerprint is found gets the stored answer; any other computes it with
Triton's own function and stores it. A daemon that is down is a miss:
Triton's own function answers, as without this module.

install() replaces the name ``triton_key`` in PyTorch's
``torch._inductor.runtime.triton_compat`` (where PyTorch takes it from at
each call) and in Triton's own ``triton.runtime.cache`` (where Triton's
``get_cache_key()`` takes it from, for every kernel that ``compile()``
loads from Triton's cache) with one function that does the above,
calling the one it replaced on a miss. ``PTXCACHE_TRITON_KEY=0`` leaves
both alone. Measured on an H200 (tests/gpu/triton_key_check.py):
PyTorch's ``get_system()`` took 0.57 s in a fresh process without it and
0.20 s with the answer stored, equal to Triton's own. With PyTorch's name
alone, a warm process still paid Triton's function once, 0.34 s, in the
first kernel's ``compile()`` (cProfile of the 16-layer LLM,
tests/gpu/README.md).
"""
from __future__ import annotations

import hashlib
import logging
import os
import sysconfig
import threading
from typing import Any, Callable

__all__ = ["install", "fingerprint", "NAMESPACE", "MODULE", "TRITON_MODULE", "ENV", "counts"]

log = logging.getLogger(__name__)

NAMESPACE = "triton-key"
MODULE = "torch._inductor.runtime.triton_compat"
TRITON_MODULE = "triton.runtime.cache"
ENV = "PTXCACHE_TRITON_KEY"
_MARK = "_ptxcache_triton_key"

# This process: "stored" (found on the daemon), "computed" (Triton's own).
counts = {"stored": 0, "computed": 0}
# One replacement per function replaced (by id: the replacement holds it),
# so that both modules' names ask the daemon once.
_replacements: dict[int, Callable[[], str]] = {}


def fingerprint(root: str) -> str:
    """A hash of what identifies every file under root (see the module's
    comment); "" if root cannot be read."""
    h = hashlib.sha256()
    h.update(os.path.realpath(root).encode("utf-8", "surrogateescape") + b"\0")
    # Which libtriton.<EXT_SUFFIX> Triton hashes is the interpreter's.
    h.update(("%s\0" % sysconfig.get_config_var("EXT_SUFFIX")).encode())
    n = 0
    for d, dirs, files in os.walk(root):
        dirs.sort()
        dirs[:] = [x for x in dirs if x != "__pycache__"]
        for f in sorted(files):
            p = os.path.join(d, f)
            try:
                st = os.stat(p)
            except OSError:
                continue
            rel = os.path.relpath(p, root).encode("utf-8", "surrogateescape")
            h.update(b"%s\0%d %d %d %d %d\n" % (rel, st.st_dev, st.st_ino, st.st_size,
                                                 st.st_mtime_ns, st.st_ctime_ns))
            n += 1
    return h.hexdigest() if n else ""


def _triton_root() -> str | None:
    import importlib.util
    spec = importlib.util.find_spec("triton")
    locs = list(spec.submodule_search_locations or []) if spec else []
    return locs[0] if locs else None


# Held while the key is looked up (the daemon, then Triton's own hash): a
# child after fork() gets a new one (another thread may have held it).
_lock = threading.Lock()


def _after_fork() -> None:
    global _lock
    _lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


def _wrap(orig: Callable[[], str]) -> Callable[[], str]:
    memo: list[str] = []

    def triton_key() -> str:
        if memo:
            return memo[0]
        with _lock:
            if memo:
                return memo[0]
            memo.append(_lookup(orig))
            return memo[0]

    setattr(triton_key, _MARK, True)
    triton_key.__wrapped__ = orig  # type: ignore[attr-defined]
    return triton_key


def _lookup(orig: Callable[[], str]) -> str:
    from .artifacts import store
    root = _triton_root()
    fp = fingerprint(root) if root else ""
    if fp:
        v = store().get(NAMESPACE, fp)
        if v is not None:
            try:
                counts["stored"] += 1
                return v.decode("utf-8")
            except UnicodeDecodeError:
                pass
    k = orig()
    counts["computed"] += 1
    if fp and isinstance(k, str):
        store().put(NAMESPACE, fp, k.encode("utf-8"))
    return k


def install(module: Any) -> bool:
    """Replace module.triton_key (once). True if it is replaced."""
    if os.environ.get(ENV) == "0":
        return False
    orig = getattr(module, "triton_key", None)
    if orig is None or not callable(orig):
        return False
    if getattr(orig, _MARK, False):
        return True
    if id(orig) not in _replacements:
        _replacements[id(orig)] = _wrap(orig)
    module.triton_key = _replacements[id(orig)]
    return True
