# SPDX-License-Identifier: Apache-2.0
"""The package's one switch for every JIT on the node:

    PTXCACHE_JIT=1 python3 serve.py

or, from code, before the first compile:

    import ptxcache.jit
    ptxcache.jit.enable()

It turns on, each where its own switch does not say 0:

| JIT | how | its own switch |
| --- | --- | --- |
| Triton, Inductor (and their ptxas) | their own caches' backends (ptxcache.torch) | PTXCACHE_TORCH=0 |
| JAX | its persistent compilation cache, per key, with leases (ptxcache.jax) | PTXCACHE_JAX=0 |
| CuPy, DeepGEMM, a directory you declare | their cache directories, file by file (ptxcache.jitdirs, which says why numba-cuda's, FlashInfer's and vLLM's are left out) | PTXCACHE_JIT_DIRS_OFF=1 (or a list of kinds) |

``PTXCACHE_TORCH=1``, the switch before this one, keeps turning on the
first row alone.

ptxcache.pth runs enable_on_import() at start-up in every Python process
that has either set (children inherit PTXCACHE_JIT). That imports no part:
one finder at the front of sys.meta_path turns a part on when the import
of one of its JIT's top-level modules begins (PARTS), before the JIT's
code runs. A process that imports no JIT (a shell tool, a data loader)
pays this module and nothing else: no package import, no thread, no
socket; a process that does pays each part's import inside its JIT's,
which is ten to a hundred times longer. enable() turns every part on now
(a program that calls it, and a directory declared in PTXCACHE_JIT_DIRS,
whose files must be in place before the program starts).
"""
from __future__ import annotations

import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:   # typing is 15 ms of a start that imports no JIT
    from typing import Any

__all__ = ["enable", "enable_on_import", "turn_on_waiting", "state", "ENV_SWITCH", "on", "PARTS"]

ENV_SWITCH = "PTXCACHE_JIT"

# part: (its own switch, its module and the function that turns it on,
# the top-level modules whose import turns it on). jitdirs' are its served
# KINDS' modules (tests/test_python.py holds the two lists together).
PARTS: dict[str, tuple[str | None, str, str, tuple[str, ...]]] = {
    "torch": ("PTXCACHE_TORCH", "torch", "enable", ("torch", "triton")),
    "jax": ("PTXCACHE_JAX", "jax", "install_on_import", ("jax",)),
    "jitdirs": (None, "jitdirs", "enable", ("cupy", "deep_gemm")),
}

_state: dict[str, Any] = {}


def on(env: dict | None = None, name: str = ENV_SWITCH) -> bool:
    """Whether a switch variable is set to something other than 0."""
    env = os.environ if env is None else env
    return env.get(name, "0") not in ("", "0")


def _wanted(parts: tuple[str, ...]) -> list[str]:
    """The parts whose own switch is not 0 (jitdirs reads its own,
    PTXCACHE_JIT_DIRS_OFF); the others' state says why."""
    out = []
    for name in parts:
        switch = PARTS[name][0]
        if switch and os.environ.get(switch) == "0":
            _state[name] = "off (%s=0)" % switch
        else:
            out.append(name)
    return out


def _turn_on(name: str) -> None:
    """One part, now; a part that fails is logged and the others go on."""
    import importlib
    _switch, module, func, _modules = PARTS[name]
    try:
        _state[name] = getattr(importlib.import_module("." + module, __package__), func)()
    except Exception as e:
        import logging
        logging.getLogger(__name__).warning("ptxcache: cannot enable %s", name, exc_info=True)
        _state[name] = "failed: %s" % e


def enable() -> dict[str, Any]:
    """Every part whose own switch is not 0, now; what each did. Safe to
    call more than once."""
    os.environ.setdefault(ENV_SWITCH, "1")
    for name in _wanted(tuple(PARTS)):
        _turn_on(name)
    return dict(_state)


class _OnImport:
    """A meta path finder that turns a part on when the import of one of
    its JIT's top-level modules begins, then answers that import with the
    spec of the finders the part put before it (a part's own hooks: the
    jitdirs gate waits on the JIT's module itself), and None for every
    other name. It stays on sys.meta_path: removing an entry while the
    import system walks the list would skip the finder after it."""

    def __init__(self, waiting: dict[str, list[str]]) -> None:
        self.waiting = waiting      # top-level module -> parts

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        parts = self.waiting.pop(name, None) if path is None else None
        if not parts:
            return None
        for part in parts:
            for other in PARTS[part][3]:        # its other modules: on already
                if part in self.waiting.get(other, ()):
                    self.waiting[other].remove(part)
            _turn_on(part)
        for finder in list(sys.meta_path):
            if finder is self:
                break
            spec = finder.find_spec(name, path, target) if hasattr(finder, "find_spec") else None
            if spec is not None:
                return spec
        return None


def turn_on_waiting() -> None:
    """The parts enable_on_import() left waiting for their JIT's import,
    now (`python3 -m ptxcache status`: what a program that imports them
    gets)."""
    for finder in sys.meta_path:
        if isinstance(finder, _OnImport):
            for name in sorted({p for ps in finder.waiting.values() for p in ps}):
                _turn_on(name)
            finder.waiting.clear()


def enable_on_import(parts: tuple[str, ...] = tuple(PARTS)) -> dict[str, Any]:
    """Each of parts whose own switch is not 0, when its JIT's import begins
    (or now, where that JIT is imported already); what was done. Declared
    JIT directories (PTXCACHE_JIT_DIRS) turn jitdirs on now. Sets no
    switch: ptxcache.pth calls it for whichever switch is set."""
    waiting: dict[str, list[str]] = {}
    for name in _wanted(parts):
        modules = PARTS[name][3]
        if any(m in sys.modules for m in modules) or \
                (name == "jitdirs" and os.environ.get("PTXCACHE_JIT_DIRS", "").strip()):
            _turn_on(name)
            continue
        _state[name] = "when %s is imported" % " or ".join(modules)
        for m in modules:
            waiting.setdefault(m, []).append(name)
    if waiting and not any(isinstance(f, _OnImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _OnImport(waiting))
    return dict(_state)


def state() -> dict[str, Any]:
    """What enable() did in this process ({} if it was not called)."""
    return dict(_state)
