# SPDX-License-Identifier: Apache-2.0
"""Triton's remote cache on ptxcached.

Triton is pointed at it with two variables (ptxcache.torch.enable() and
PTXCACHE_TORCH=1 set them):

    TRITON_CACHE_MANAGER=triton.runtime.cache:RemoteCacheManager
    TRITON_REMOTE_CACHE_BACKEND=ptxcache.triton:Backend

Triton's RemoteCacheManager makes one backend per cache key (a compiled
kernel's hash, a launcher's) with ``Backend(key)``, then calls
``get([filename, ...]) -> {filename: bytes}`` and ``put(filename, data)``;
it keeps a local copy of what it gets in its own cache directory
(FileCacheManager). A compile asks for the kernel's group file
(``__grp__NAME.json``) first; on a miss it compiles, puts each stage's
file, then the group file last. So:

- a get that misses takes the key's lease: other processes compiling the
  same kernel wait for our group file instead of compiling it again;
- a backend that is dropped with leases it did not fill (the compile
  raised, or Triton chose not to store) releases them, so the waiters do
  not sit out the daemon's lease timeout;
- a daemon that is down or misses is not the end: the backend then serves
  the file from Triton's own local cache directory when it is there (and
  puts it to the daemon, filling our lease), so a fresh daemon learns from
  warm local caches and a dead one costs no more than Triton's own cache.

Triton's names this package touches: triton.runtime.cache.RemoteCacheManager
(named in TRITON_CACHE_MANAGER, not imported), RemoteCacheBackend (a base
class: Triton's knob checks a backend's bases for that name) and
FileCacheManager(key).cache_dir (the local copy's directory); the
variables TRITON_CACHE_MANAGER, TRITON_REMOTE_CACHE_BACKEND,
TRITON_CACHE_DIR, TRITON_HOME, TRITON_PTXAS_PATH.

``TritonArtifacts`` is the whole logic, as a plain class: Backend is it
with Triton's ``RemoteCacheBackend`` as a base (Triton checks for that base
by name), made when first asked for, so importing this module never
imports Triton.
"""
from __future__ import annotations

import logging
import os
import weakref
from typing import Any, Callable

from .artifacts import ArtifactStore, store

__all__ = ["TritonArtifacts", "backend_class", "NAMESPACE", "BACKEND_SPEC", "MANAGER_SPEC",
           "local_cache_dir"]

log = logging.getLogger(__name__)

NAMESPACE = "triton"
BACKEND_SPEC = "ptxcache.triton:Backend"
MANAGER_SPEC = "triton.runtime.cache:RemoteCacheManager"


def local_cache_dir() -> str:
    """Triton's own cache directory, as its FileCacheManager finds it."""
    d = os.environ.get("TRITON_CACHE_DIR", "").strip()
    if d:
        return d
    home = os.environ.get("TRITON_HOME") or os.path.expanduser("~")
    return os.path.join(home, ".triton", "cache")


def _release_all(st: ArtifactStore, keys: list[str]) -> None:
    for k in keys:
        st.release(NAMESPACE, k)


class TritonArtifacts:
    """Triton's RemoteCacheBackend interface over ptxcached, for one cache
    key (a directory of Triton's cache)."""

    def __init__(self, key: str, artifacts: ArtifactStore | None = None,
                 local_dir: Callable[[], str] | None = None) -> None:
        self._key = str(key)
        self._store = artifacts
        self._local_dir = local_dir or (lambda: os.path.join(local_cache_dir(), self._key))
        # The keys whose leases this backend took: released when it goes.
        self._taken: list[str] = []
        self._finalizer: Any = None

    def _st(self) -> ArtifactStore:
        return self._store if self._store is not None else store()

    def _name(self, filename: str) -> str:
        return "%s/%s" % (self._key, filename)

    def get(self, filenames: list[str]) -> dict[str, bytes]:
        """{filename: data} of those found; a miss takes the lease."""
        try:
            return self._get(list(filenames))
        except Exception:       # a cache lookup never breaks a compile
            log.warning("ptxcache: Triton cache lookup failed", exc_info=True)
            return {}

    def _get(self, filenames: list[str]) -> dict[str, bytes]:
        st = self._st()
        names = {self._name(f): f for f in filenames}
        found = st.get_many(NAMESPACE, list(names), lease=True)
        out = {names[k]: v for k, v in found.items()}
        for k, f in names.items():
            if f in out:
                continue
            if st.holds(NAMESPACE, k):
                self._took(st, k)
            data = self._local(f)
            if data is not None:
                out[f] = data
                if st.holds(NAMESPACE, k):
                    st.put(NAMESPACE, k, data)
        return out

    def _took(self, st: ArtifactStore, k: str) -> None:
        self._taken.append(k)
        if self._finalizer is None:
            self._finalizer = weakref.finalize(self, _release_all, st, self._taken)

    def _local(self, filename: str) -> bytes | None:
        """filename from Triton's local cache directory, if there."""
        try:
            with open(os.path.join(self._local_dir(), filename), "rb") as f:
                return f.read()
        except OSError:
            return None

    def put(self, filename: str, data: bytes) -> None:
        try:
            if not isinstance(data, (bytes, bytearray)):
                data = str(data).encode("utf-8")
            self._st().put(NAMESPACE, self._name(filename), bytes(data))
        except Exception:
            log.warning("ptxcache: Triton cache store failed", exc_info=True)

    def release(self) -> None:
        """Give up the leases this backend took and did not fill."""
        if self._finalizer is not None:
            self._finalizer()


_backend_cls: type | None = None


def backend_class() -> type:
    """TritonArtifacts with Triton's RemoteCacheBackend as a base (Triton
    refuses a TRITON_REMOTE_CACHE_BACKEND class without that base)."""
    global _backend_cls
    if _backend_cls is None:
        from triton.runtime.cache import FileCacheManager, RemoteCacheBackend

        class Backend(TritonArtifacts, RemoteCacheBackend):  # type: ignore[misc, valid-type]
            """ptxcached as Triton's remote cache (ptxcache.triton)."""

            def __init__(self, key: str) -> None:
                # Triton's own directory for this key, as RemoteCacheManager
                # materialises it (FileCacheManager honours its knobs).
                def local_dir() -> str:
                    return FileCacheManager(key).cache_dir
                TritonArtifacts.__init__(self, key, local_dir=local_dir)

            def get(self, filenames: list[str]) -> dict[str, bytes]:
                return TritonArtifacts.get(self, filenames)

            def put(self, filename: str, data: bytes) -> None:
                TritonArtifacts.put(self, filename, data)

        Backend.__module__ = __name__
        Backend.__qualname__ = "Backend"
        _backend_cls = Backend
    return _backend_cls


def __getattr__(name: str) -> Any:
    # TRITON_REMOTE_CACHE_BACKEND=ptxcache.triton:Backend: Triton imports this
    # module and asks for Backend, with Triton imported already.
    if name == "Backend":
        return backend_class()
    raise AttributeError("module %r has no attribute %r" % (__name__, name))
