# SPDX-License-Identifier: Apache-2.0
"""The one switch: Triton's and Inductor's caches, and their ptxas, on the
node's ptxcached.

    import ptxcache.torch
    ptxcache.torch.enable()          # before the first torch.compile

or, for a job whose code cannot change, the environment alone:

    PTXCACHE_TORCH=1 python3 train.py

(the ``ptxcache.pth`` file installed with the package runs enable() in
every Python process that has PTXCACHE_TORCH set, compile workers
included, as the import of torch or triton begins: ptxcache.jit).

enable() sets, in this process's environment (so compile workers inherit
them), each of these that is not set already (a value you set wins, so
``TORCHINDUCTOR_AUTOTUNE_REMOTE_CACHE=0`` keeps that one off):

    TRITON_CACHE_MANAGER=triton.runtime.cache:RemoteCacheManager
    TRITON_REMOTE_CACHE_BACKEND=ptxcache.triton:Backend
    TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE=1          and the other switches
                                                   (not the bundled autotune
                                                   cache: inductor.NOT_SWITCHED_ON)
    TRITON_PTXAS_PATH=<the ptxas front>            when one is found
    PTXCACHE_PTXAS=<Triton's own ptxas>            the front's fallback

sets the same switches in PyTorch's config modules if they are imported
already, and installs the Inductor backends (ptxcache.inductor) now or the
moment PyTorch imports its remote_cache module (and ptxcache.autotune, the
moment it imports triton_heuristics; ptxcache.pgo, a job id for Dynamo's
profile of dynamic shapes where the user set none, the moment it imports
torch.compiler.config; ptxcache.bytecode and ptxcache.torch_key, the
moments it imports their modules), and starts ptxcache.prefetch's thread,
which fetches the entries the job's last process used while PyTorch
imports. It never imports PyTorch or Triton itself.
"""
from __future__ import annotations

import logging
import os
import site
import sys
from typing import Any

from . import front, inductor, pgo, prefetch
from . import triton as triton_adapter

__all__ = ["enable", "planned_environment", "ENV_SWITCH", "pth_installed"]

log = logging.getLogger(__name__)

ENV_SWITCH = "PTXCACHE_TORCH"
_PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_state: dict[str, Any] = {}


def pth_installed() -> bool:
    """True if this interpreter's site directories hold ptxcache.pth, so
    child processes with PTXCACHE_TORCH set run the hook too."""
    dirs = []
    try:
        dirs += site.getsitepackages()
    except AttributeError:
        pass
    try:
        if site.ENABLE_USER_SITE:
            dirs.append(site.getusersitepackages())
    except AttributeError:
        pass
    return any(os.path.isfile(os.path.join(d, "ptxcache.pth")) for d in dirs)


def _child_path() -> str | None:
    """A directory holding this package and nothing else, for PYTHONPATH:
    TRITON_REMOTE_CACHE_BACKEND names ptxcache.triton, and a child process
    whose interpreter cannot import it (a venv without this site's
    packages) would fail its compiles. The package's own parent where that
    is all it holds (a source tree's python/), else a link to the package
    in $XDG_CACHE_HOME/ptxcache/python/; None if neither can be had."""
    pkg = os.path.join(_PACKAGE_PARENT, "ptxcache")
    try:
        if set(os.listdir(_PACKAGE_PARENT)) <= {"ptxcache", "ptxcache.pth", "__pycache__"}:
            return _PACKAGE_PARENT
        link = front.user_cache_path("python", "ptxcache")
        if not (os.path.islink(link) and os.readlink(link) == pkg):
            front.link_to(link, pkg)
        return os.path.dirname(link)
    except OSError as e:
        log.debug("ptxcache: no directory for PYTHONPATH: %s", e)
        return None


def planned_environment(ptxas: bool = True) -> dict[str, tuple[str, str]]:
    """{variable: (value, why)} that enable() would set where unset."""
    env: dict[str, tuple[str, str]] = {
        "TRITON_CACHE_MANAGER": (triton_adapter.MANAGER_SPEC, "Triton's remote cache manager"),
        "TRITON_REMOTE_CACHE_BACKEND": (triton_adapter.BACKEND_SPEC, "its backend: ptxcached"),
    }
    workers = pth_installed()
    for cache, (var, _mod, _attr) in inductor.SWITCHES.items():
        if cache in inductor.NOT_SWITCHED_ON:
            continue
        if cache == "RemoteAutotuneCache" and not workers:
            # Autotune results are also read in Inductor's compile workers,
            # which run the hook only when ptxcache.pth is installed;
            # elsewhere they would try Redis and warn for every kernel.
            continue
        env[var] = ("1", cache)
    if ptxas:
        p, how = front.find_front()
        if p:
            env["TRITON_PTXAS_PATH"] = (p, "the ptxas front (%s)" % how)
            real = front.triton_ptxas()
            if real:
                env["PTXCACHE_PTXAS"] = (real, "the front's fallback: Triton's own ptxas")
    return env


def enable(ptxas: bool = True) -> dict[str, Any]:
    """Turn it all on (see the module's comment); returns what was set and
    what was kept. Safe to call more than once."""
    set_now: dict[str, str] = {}
    kept: dict[str, str] = {}
    for var, (value, _why) in planned_environment(ptxas).items():
        if var in os.environ:
            if os.environ[var] != value:
                kept[var] = os.environ[var]
            continue
        os.environ[var] = value
        set_now[var] = value
    # Children (Inductor's compile workers) run the hook too where the
    # .pth is installed, and must be able to import this package whatever
    # their interpreter.
    os.environ.setdefault(ENV_SWITCH, "1")
    d = _child_path()
    pp = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if d and d not in pp:
        os.environ["PYTHONPATH"] = os.pathsep.join([d] + pp)
        set_now["PYTHONPATH"] = os.environ["PYTHONPATH"]
    # PyTorch's config modules read their variables when first imported:
    # those imported already get the value directly (unless you set it).
    for cache, (var, mod, attr) in inductor.SWITCHES.items():
        m = sys.modules.get(mod)
        if m is not None and os.environ.get(var) == "1" and getattr(m, attr, None) is not True:
            try:
                setattr(m, attr, True)
            except Exception:
                log.warning("ptxcache: cannot set %s.%s", mod, attr, exc_info=True)
    how = inductor.install_on_import()
    prefetch.start()        # the job's entries fetched while torch imports
    _state.update(enabled=True, set=set_now, kept=kept, inductor=how)
    if kept:
        log.info("ptxcache: kept your settings of %s", ", ".join(sorted(kept)))
    return dict(_state)


def state() -> dict[str, Any]:
    """What enable() did in this process ({} if it was not called), and
    under "pgo" the job id given to PyTorch's PGO profile (ptxcache.pgo;
    {} until PyTorch imports torch.compiler.config)."""
    return dict(_state, pgo=pgo.state()) if _state else {}
