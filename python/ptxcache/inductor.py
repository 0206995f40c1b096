# SPDX-License-Identifier: Apache-2.0
"""Inductor's remote caches on ptxcached.

PyTorch defines five remote caches in ``torch._inductor.remote_cache``, each
a ``RemoteCache`` subclass that, in open-source builds, talks to Redis
unless its class attribute ``backend_override_cls`` names a callable that
returns the backend to use instead. install() sets that attribute on each
to a backend of this module; PyTorch then needs no ``redis`` module. Each
cache is switched on by its own setting (switches(); enable() in
ptxcache.torch sets them, but those of NOT_SWITCHED_ON).

| PyTorch's cache class        | what it holds                          | namespace                 | leases |
|------------------------------|----------------------------------------|---------------------------|--------|
| RemoteFxGraphCache           | compiled FX graphs (code, Triton bundle) | inductor-fx             | yes    |
| RemoteAOTAutogradCache       | AOTAutograd entries (point at FX graphs) | inductor-aot            | no     |
| RemoteAutotuneCache          | a kernel's best config                 | inductor-autotune         | no     |
| RemoteBundledAutotuneCache   | a graph's best configs together        | inductor-bundled-autotune | no     |
| RemoteDynamoPGOCache         | Dynamo's profile of dynamic shapes     | dynamo-pgo                | no     |

Leases only where the get and the put come from the same process and the
same compile, one after the other: an FX graph is looked up, compiled, then
stored. Autotune results are read in compile workers and written by the
parent after benchmarking; a PGO profile is read at the first compile and
written at exit; an AOTAutograd entry is stored only once both of its
graphs are (each already produced once through its own lease). A lease
there would hold other processes up for nothing.

An FX graph lease that its compile did not fill (Inductor decided not to
store the graph) is released when the same thread looks up its next graph,
and otherwise ends with the process or the daemon's lease timeout.

The backends never raise: a daemon that is down or refuses answers misses
(one warning per process), and Inductor's local caches carry on.

PyTorch's names this package touches (all in private modules; the
version is checked against TESTED_TORCH and each name is looked up, never
assumed):
- torch._inductor.remote_cache: the classes RemoteFxGraphCache,
  RemoteAOTAutogradCache, RemoteAutotuneCache, RemoteBundledAutotuneCache,
  RemoteDynamoPGOCache and their class attribute backend_override_cls
  (set); RemoteCacheBackend (a base class: its __init__, get, put and the
  _get/_put they call);
- the switches, set only where their module is already imported (else the
  environment variables do it): torch._inductor.config.fx_graph_remote_cache,
  .autotune_remote_cache, .bundled_autotune_remote_cache,
  torch._functorch.config.enable_remote_autograd_cache,
  torch._dynamo.config.automatic_dynamic_remote_pgo; torch.__version__;
- torch.compiler.config.job_id (ptxcache.pgo: set where it is None and
  the user's variables are unset).

The same import hook installs ptxcache.autotune (a warm process believes
the coordinate-descent results it finds) right after PyTorch imports
torch._inductor.runtime.triton_heuristics, ptxcache.triton_key
(Triton's installation hash kept on the daemon) right after
torch._inductor.runtime.triton_compat and triton.runtime.cache are
imported, and ptxcache.pgo (a job id for
Dynamo's profile of dynamic shapes, where the user set none) right after
it imports torch.compiler.config, ptxcache.bytecode (output code modules'
bytecode) right after torch._inductor.runtime.compile_tasks, and
ptxcache.torch_key (PyTorch's installation hash) right after
torch._inductor.codecache.

``InductorArtifacts`` is the logic as a plain class; the classes handed to
PyTorch add its ``RemoteCacheBackend`` as a base (for its cache_stats) and
are made only when PyTorch is imported.
"""
from __future__ import annotations

import importlib
import logging
import sys
import threading
from typing import Any

from . import autotune, bytecode, pgo, torch_key, triton_key
from .hooks import wrapped_spec
from .artifacts import ArtifactStore, store

__all__ = ["InductorArtifacts", "CACHES", "install", "installed", "install_on_import",
           "switches", "TESTED_TORCH", "MODULE", "NOT_SWITCHED_ON"]

log = logging.getLogger(__name__)

MODULE = "torch._inductor.remote_cache"
# The PyTorch versions whose sources this was written against and tested on.
TESTED_TORCH = ("2.11",)

# PyTorch's RemoteCache subclass -> (our namespace, whether a miss takes a lease).
CACHES: dict[str, tuple[str, bool]] = {
    "RemoteFxGraphCache": ("inductor-fx", True),
    "RemoteAOTAutogradCache": ("inductor-aot", False),
    "RemoteAutotuneCache": ("inductor-autotune", False),
    "RemoteBundledAutotuneCache": ("inductor-bundled-autotune", False),
    "RemoteDynamoPGOCache": ("dynamo-pgo", False),
}

# The switch of each cache: its environment variable (read when PyTorch's
# config module is imported) and the config attribute behind it.
SWITCHES: dict[str, tuple[str, str, str]] = {
    "RemoteFxGraphCache": ("TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE", "torch._inductor.config",
                           "fx_graph_remote_cache"),
    "RemoteAOTAutogradCache": ("TORCHINDUCTOR_AUTOGRAD_REMOTE_CACHE", "torch._functorch.config",
                               "enable_remote_autograd_cache"),
    "RemoteAutotuneCache": ("TORCHINDUCTOR_AUTOTUNE_REMOTE_CACHE", "torch._inductor.config",
                            "autotune_remote_cache"),
    "RemoteBundledAutotuneCache": ("TORCHINDUCTOR_BUNDLED_AUTOTUNE_REMOTE_CACHE",
                                   "torch._inductor.config", "bundled_autotune_remote_cache"),
    "RemoteDynamoPGOCache": ("TORCH_DYNAMO_AUTOMATIC_DYNAMIC_REMOTE_PGO", "torch._dynamo.config",
                             "automatic_dynamic_remote_pgo"),
}


# The caches whose switch enable() leaves alone (the backend is installed:
# a user who sets the switch gets it), and why.
NOT_SWITCHED_ON: dict[str, str] = {
    # PyTorch 2.11's AutotuneCacheBundler holds one bundle from a graph's
    # compile (begin_compile, where the bundle misses) to that graph's
    # first call (end_compile in CompiledFxGraph.__call__) and asserts that
    # none is held at the next begin_compile. AOTAutograd compiles a
    # training graph's backward right after its forward, before the
    # forward runs, where the backward saves symbolic sizes (dynamic
    # shapes): the backward's compile fails (InductorError: AssertionError,
    # runtime/autotune_cache.py begin_compile), on an H200 a 16-layer
    # Llama's cold training step with the switch on (tests/gpu/README.md,
    # the LLM section). RemoteAutotuneCache keeps every kernel's result.
    "RemoteBundledAutotuneCache": "PyTorch 2.11's bundle asserts when a training graph's "
                                  "backward compiles before its forward runs (dynamic shapes)",
}


def switches() -> dict[str, tuple[str, str, str]]:
    """{cache class: (environment variable, config module, attribute)}."""
    return dict(SWITCHES)


class InductorArtifacts:
    """PyTorch's RemoteCacheBackend interface (get/put of bytes, and the
    _get/_put its base class wraps) for one namespace."""

    namespace = ""
    lease = False

    def __init__(self, artifacts: ArtifactStore | None = None) -> None:
        self._store = artifacts

    def _st(self) -> ArtifactStore:
        return self._store if self._store is not None else store()

    def _get(self, key: str) -> bytes | None:
        try:
            st = self._st()
            if self.lease:
                # This thread looking up another key is done with the last
                # one: a lease it did not fill will never be filled.
                st.release_thread(self.namespace, keep=key)
            return st.get(self.namespace, key, lease=self.lease)
        except Exception:
            log.warning("ptxcache: Inductor cache lookup failed", exc_info=True)
            return None

    def _put(self, key: str, data: bytes) -> None:
        try:
            if isinstance(data, str):
                data = data.encode("utf-8")
            self._st().put(self.namespace, key, bytes(data))
        except Exception:
            log.warning("ptxcache: Inductor cache store failed", exc_info=True)

    # Without PyTorch's base class, get and put are the same calls.
    def get(self, key: str) -> bytes | None:
        return self._get(key)

    def put(self, key: str, data: bytes) -> None:
        self._put(key, data)


def plain_backends() -> dict[str, type]:
    """{cache class name: a backend class without PyTorch's base}, for tests."""
    return {name: type(_backend_name(name), (InductorArtifacts,), {"namespace": ns, "lease": lease})
            for name, (ns, lease) in CACHES.items()}


def _backend_name(cache: str) -> str:
    return "Ptxcache" + cache.replace("Remote", "", 1) + "Backend"


_made: dict[str, type] = {}
_lock = threading.Lock()


def _torch_backend(base: type, cache: str) -> type:
    if cache not in _made:
        ns, lease = CACHES[cache]

        def __init__(self: Any) -> None:
            try:
                base.__init__(self)     # sets the name PyTorch's stats use
            except TypeError:
                pass
            InductorArtifacts.__init__(self)

        cls = type(_backend_name(cache), (InductorArtifacts, base),
                   {"namespace": ns, "lease": lease, "__init__": __init__, "__module__": __name__,
                    # PyTorch's base wraps _get/_put with its stats.
                    "get": base.get, "put": base.put})
        _made[cache] = cls
    return _made[cache]


def installed(module: Any = None) -> dict[str, str]:
    """{cache class: "ptxcache" | "other override" | "none" | "absent"}:
    which of PyTorch's remote caches use this package's backend."""
    module = module or sys.modules.get(MODULE)
    out = {}
    for cache in CACHES:
        cls = getattr(module, cache, None) if module is not None else None
        if cls is None:
            out[cache] = "absent"
            continue
        o = getattr(cls, "backend_override_cls", None)
        if o is None:
            out[cache] = "none"
        elif getattr(o, "__module__", "") == __name__:
            out[cache] = "ptxcache"
        else:
            out[cache] = "other override"
    return out


def install(module: Any = None) -> dict[str, str]:
    """Set backend_override_cls on each of PyTorch's remote cache classes
    (importing torch._inductor.remote_cache unless given it), leaving alone
    any that someone else overrode. Returns installed()."""
    with _lock:
        if module is None:
            module = importlib.import_module(MODULE)
        _check_version()
        base = getattr(module, "RemoteCacheBackend", None)
        for cache in CACHES:
            cls = getattr(module, cache, None)
            if cls is None:
                log.info("ptxcache: this PyTorch has no %s.%s", MODULE, cache)
                continue
            if not hasattr(cls, "backend_override_cls"):
                log.warning("ptxcache: %s.%s takes no backend override in this PyTorch; "
                            "it stays off", MODULE, cache)
                continue
            o = cls.backend_override_cls
            if o is not None and getattr(o, "__module__", "") != __name__:
                log.info("ptxcache: %s.%s already has a backend override (%r); kept",
                         MODULE, cache, o)
                continue
            cls.backend_override_cls = (_torch_backend(base, cache) if base is not None
                                        else plain_backends()[cache])
        return installed(module)


_version_checked = False


def _check_version() -> None:
    global _version_checked
    if _version_checked:
        return
    _version_checked = True
    torch = sys.modules.get("torch")
    v = str(getattr(torch, "__version__", "")) if torch else ""
    mm = ".".join(v.split("+")[0].split(".")[:2])
    if mm and mm not in TESTED_TORCH:
        log.info("ptxcache: PyTorch %s; this package was checked against %s", v,
                 ", ".join(TESTED_TORCH))


def _install_autotune(module: Any) -> None:
    autotune.install(module)


def _install_triton_key(module: Any) -> None:
    triton_key.install(module)


def _install_pgo(module: Any) -> None:
    pgo.install(module)


# The modules of PyTorch's whose import this package waits for, and what it
# does right after each is imported.
_AFTER_IMPORT: dict[str, Any] = {MODULE: lambda m: install(m),
                                 autotune.MODULE: _install_autotune,
                                 triton_key.MODULE: _install_triton_key,
                                 triton_key.TRITON_MODULE: _install_triton_key,
                                 pgo.MODULE: _install_pgo,
                                 bytecode.MODULE: lambda m: bytecode.install(m),
                                 torch_key.MODULE: lambda m: torch_key.install(m)}


class _ImportHook:
    """Calls install() right after torch._inductor.remote_cache is first
    imported, before anything can create a remote cache, and
    ptxcache.autotune's install() right after triton_heuristics is (the
    standard library's import machinery; nothing of PyTorch's is patched
    by this hook itself)."""

    def __init__(self) -> None:
        self.pending = dict(_AFTER_IMPORT)

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        then = self.pending.get(fullname)
        if then is None:
            return None

        def after(module: Any) -> None:
            self.pending.pop(fullname, None)
            if not self.pending:
                _remove_hook()
            try:
                then(module)
            except Exception:
                log.warning("ptxcache: cannot install into %s", fullname, exc_info=True)

        return wrapped_spec(self, fullname, path, target, after=after)


_hook: _ImportHook | None = None


def _remove_hook() -> None:
    global _hook
    if _hook is not None and _hook in sys.meta_path:
        sys.meta_path.remove(_hook)
    _hook = None


def install_on_import() -> str:
    """install() now if PyTorch's remote_cache module is loaded, else as
    soon as it is (and ptxcache.autotune's, for triton_heuristics, the
    same way). Returns "installed" or "on import"."""
    global _hook
    how = "installed"
    with _lock:
        waiting = {}
        for name, then in _AFTER_IMPORT.items():
            if name not in sys.modules:
                waiting[name] = then
    for name, then in _AFTER_IMPORT.items():
        if name not in waiting:
            then(sys.modules[name])
    if waiting:
        with _lock:
            if _hook is None:
                _hook = _ImportHook()
                sys.meta_path.insert(0, _hook)
            _hook.pending = waiting
        if MODULE in waiting:
            how = "on import"
    return how
