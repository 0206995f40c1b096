# SPDX-License-Identifier: Apache-2.0
"""JAX's persistent compilation cache on ptxcached: each compiled XLA
executable is an artifact (namespace ``jax``), in the user's scope, sealed
on the Redis tier (both the daemon's doing), and produced once by N
processes or nodes compiling the same computation at once (a lease).

How JAX 0.11 uses its cache (jax/_src/compiler.py, compilation_cache.py):
compile_or_get_cached() asks _get_cache_key(), which gives a key only where
compilation_cache.is_cache_used(backend) (jax_enable_compilation_cache, on
by default, and a GPU/TPU/CPU backend that serializes executables: no
directory needed); then _cache_read() -> get_executable_and_time() ->
_get_cache(backend).get(key); on a miss _compile_and_write_cache()
compiles and _cache_write() stores the entry through
put_executable_and_time() -> .put(key, value), unless JAX decides not to:
the process is not process 0 of a multi-process job, the compile took
less than jax_persistent_cache_min_compile_time_secs (JAX's default 1 s;
install() sets 0 where the user left it: _store_every_compile()), or the
entry is smaller than
jax_persistent_cache_min_entry_size_bytes (0). _get_cache() returns the
module's ``_cache`` whenever it is set and only builds JAX's own directory
cache (_initialize_cache(), which needs jax_compilation_cache_dir) while
it is None. install() sets ``_cache`` to ``JaxArtifacts``; JAX then uses
the daemon with no directory configured.

The rules:
- A get that misses inside compile_or_get_cached() takes a lease, so the
  other processes wait on the daemon for our put instead of compiling.
  install() wraps compiler.compile_or_get_cached (pxla calls it by its
  module attribute) so that when the call ends, however it ends, every
  lease this thread took during it and did not fill is released at once:
  every put JAX makes of that key happens inside that call (_cache_write
  is reached only from _compile_and_write_cache, itself only from
  compile_or_get_cached), so a lease still held at its end will never be
  filled: a write JAX skipped (min compile time, min entry size, not
  process 0), a compile that raised, a key only probed (AutoPGLE's
  _is_executable_in_cache). The waiters are answered found: false and
  compile themselves. Leases are per thread (artifacts.py: one connection
  per thread, release_thread()), so JAX compiling in several threads
  releases each thread's own. A get outside that call (no context) misses
  and a put there is dropped: every entry carries the call's device kinds.
- No lease where JAX will not write: a process other than process 0 of a
  multi-process job (jax._src.distributed.global_state.process_id).
- jax_compilation_cache_dir set by the user: JAX keeps one ``_cache``,
  so it cannot use both the daemon and its directory cache. The daemon
  serves (it is the node-wide and fleet-wide tier, with the same keys);
  this is logged once per process. The directory still serves what JAX
  gives XLA from it (get_compile_options(): XLA's per-fusion autotune and
  kernel caches). A ``_cache`` that is neither None nor JAX's own (a
  cache of someone else's) is kept. reset_cache() sets ``_cache`` to None:
  the next compile_or_get_cached puts ours back.
- jax_enable_compilation_cache=False (the user's own off switch) keeps
  the cache off: is_cache_used() is JAX's, untouched. PTXCACHE_JAX=0
  leaves JAX alone. Nothing here raises into JAX; a daemon that is down
  is a miss (artifacts.py: one warning a process) and JAX compiles.

Exactness: JAX's key (jax/_src/cache_key.py get(): the computation,
jaxlib's version, backend.platform and platform_version
(_hash_platform), XLA_FLAGS and --xla argv flags (_hash_xla_flags), the
serialized compile options (_hash_serialized_compile_options), the
devices' topology fingerprint (_hash_accelerator_config, else the
devices), the compression, a custom hook) identifies a compatible
executable. To it the daemon key adds what this module can see and JAX's
key may not state for every backend: the device kinds of the call's
devices, the NVIDIA driver's version (/proc/driver/nvidia/version; XLA
reads the driver's version when it compiles) and jax's own version.

JAX's names this module touches (all private; checked against JAX 0.11.0,
TESTED_JAX; each is looked up, never assumed):
- jax._src.compiler.compile_or_get_cached (wrapped; called positionally by
  pxla._cached_compilation as (backend, computation, devices, ...));
- jax._src.compilation_cache._cache (set), reset_cache() (behaviour above);
- jax._src.compilation_cache_interface.CacheInterface (a base class: get,
  put, _path);
- jax._src.config.compilation_cache_dir.value (read);
  .persistent_cache_min_compile_time_secs.value (read) and
  .config.update() of that option (to 0, where it is JAX's default);
- jax._src.distributed.global_state.process_id (read);
- jax.version.__version__ (read).
"""
from __future__ import annotations

import functools
import hashlib
import importlib
import logging
import os
import sys
import threading
from typing import Any

from .artifacts import ArtifactStore, store
from .hooks import wrapped_spec

__all__ = ["JaxArtifacts", "install", "installed", "install_on_import", "TESTED_JAX",
           "MODULE", "NAMESPACE", "ENV_SWITCH"]

log = logging.getLogger(__name__)

MODULE = "jax._src.compiler"
CACHE_MODULE = "jax._src.compilation_cache"
INTERFACE_MODULE = "jax._src.compilation_cache_interface"
NAMESPACE = "jax"
ENV_SWITCH = "PTXCACHE_JAX"
# The JAX versions whose sources this was written against and tested on.
TESTED_JAX = ("0.11",)

_tls = threading.local()
_lock = threading.Lock()
counts = {"calls": 0, "released": 0, "outside": 0}


class _Context:
    """What one compile_or_get_cached call adds to its keys."""

    def __init__(self, suffix: str, lease: bool) -> None:
        self.suffix = suffix
        self.lease = lease


def _driver_version() -> str:
    try:
        with open("/proc/driver/nvidia/version") as f:
            head = f.readline(4096)
    except OSError:
        return "none"
    words = head.split()
    for w in words:
        if w[:1].isdigit() and "." in w:
            return w
    return hashlib.sha256(head.encode()).hexdigest()[:16]


_driver: str | None = None


def _context(devices: Any) -> _Context:
    global _driver
    if _driver is None:
        _driver = _driver_version()
    try:
        flat = list(devices.flat) if hasattr(devices, "flat") else list(devices)
        kinds = sorted({str(getattr(d, "device_kind", "?")) for d in flat})
    except Exception:
        kinds = ["?"]
    dist = sys.modules.get("jax._src.distributed")
    pid = getattr(getattr(dist, "global_state", None), "process_id", None)
    suffix = "kinds=%s;driver=%s;jax=%s" % (",".join(kinds), _driver, _jax_version())
    return _Context(suffix, pid == 0)


class JaxArtifacts:
    """JAX's CacheInterface (get/put of bytes by key) on the daemon."""

    namespace = NAMESPACE
    _path = None        # CacheInterface's attribute; reset_cache() logs it

    def __init__(self, artifacts: ArtifactStore | None = None) -> None:
        self._store = artifacts

    def _st(self) -> ArtifactStore:
        return self._store if self._store is not None else store()

    def get(self, key: str) -> bytes | None:
        ctx = getattr(_tls, "ctx", None)
        if ctx is None:
            counts["outside"] += 1
            return None
        try:
            return self._st().get(self.namespace, key + "|" + ctx.suffix, lease=ctx.lease)
        except Exception:
            log.warning("ptxcache: JAX cache lookup failed", exc_info=True)
            return None

    def put(self, key: str, value: bytes) -> None:
        ctx = getattr(_tls, "ctx", None)
        if ctx is None:
            counts["outside"] += 1
            return
        try:
            self._st().put(self.namespace, key + "|" + ctx.suffix, bytes(value))
        except Exception:
            log.warning("ptxcache: JAX cache store failed", exc_info=True)

    def release_unfilled(self) -> None:
        """Release the leases this thread took and did not fill."""
        try:
            st = self._st()
            n = len(st.leases(self.namespace, threading.get_ident()))
            if n:
                st.release_thread(self.namespace)
                counts["released"] += n
        except Exception:
            log.warning("ptxcache: JAX cache lease release failed", exc_info=True)


_made: type | None = None


def _cache_class(cc_iface: Any) -> type:
    """JaxArtifacts with JAX's CacheInterface as a base, where there is one."""
    global _made
    base = getattr(cc_iface, "CacheInterface", None) if cc_iface is not None else None
    if base is None:
        return JaxArtifacts
    if _made is None or base not in _made.__mro__:
        _made = type("PtxcacheJaxCache", (JaxArtifacts, base),
                     {"__module__": __name__, "get": JaxArtifacts.get, "put": JaxArtifacts.put})
    return _made


def _ours(c: Any) -> bool:
    return isinstance(c, JaxArtifacts)


def _jaxs_own(c: Any) -> bool:
    return getattr(type(c), "__module__", "").startswith("jax.")


_dir_logged = False


def _set_cache(cc: Any) -> None:
    """Put our cache in JAX's ``_cache`` where it is None or JAX's own."""
    global _dir_logged
    cur = getattr(cc, "_cache", None)
    if cur is not None and not _ours(cur) and not _jaxs_own(cur):
        return
    cfg = getattr(cc, "config", None)
    d = getattr(getattr(cfg, "compilation_cache_dir", None), "value", None)
    if d and not _dir_logged:
        _dir_logged = True
        log.warning("ptxcache: jax_compilation_cache_dir is set (%s), and JAX keeps one cache: "
                    "ptxcached serves it, the directory keeps XLA's autotune and kernel caches "
                    "(PTXCACHE_JAX=0 gives JAX's cache back to the directory)", d)
    if _ours(cur):
        return
    iface = sys.modules.get(INTERFACE_MODULE)
    cc._cache = _cache_class(iface)()


def _wrap(fn: Any) -> Any:
    @functools.wraps(fn)
    def compile_or_get_cached(*args: Any, **kwargs: Any) -> Any:
        if getattr(_tls, "ctx", None) is not None:      # nested: the outer call's scope
            return fn(*args, **kwargs)
        cache = None
        try:
            cc = sys.modules.get(CACHE_MODULE)
            if cc is not None:
                _set_cache(cc)      # after a reset_cache()
                cache = cc._cache if _ours(cc._cache) else None
            if cache is not None:
                devices = args[2] if len(args) > 2 else kwargs.get("devices", ())
                _tls.ctx = _context(devices)
                counts["calls"] += 1
        except Exception:
            log.warning("ptxcache: JAX cache set-up failed", exc_info=True)
        try:
            return fn(*args, **kwargs)
        finally:
            _tls.ctx = None
            if cache is not None:
                cache.release_unfilled()

    compile_or_get_cached.__ptxcache_wraps__ = fn       # type: ignore[attr-defined]
    return compile_or_get_cached


def _jax_version() -> str:
    v = getattr(sys.modules.get("jax.version"), "__version__", None) or \
        getattr(sys.modules.get("jax"), "__version__", None)
    return str(v) if v else "unknown"


_version_checked = False


def _check_version() -> None:
    global _version_checked
    if _version_checked:
        return
    _version_checked = True
    v = _jax_version()
    mm = ".".join(v.split("+")[0].split(".")[:2])
    if mm not in TESTED_JAX:
        log.info("ptxcache: JAX %s; this package was checked against %s", v, ", ".join(TESTED_JAX))


def installed() -> dict[str, str]:
    """{"jax": version or "absent", "cache": "ptxcache" | "jax's own" |
    "other" | "none" | "absent", "compile": "wrapped" | "plain" | "absent",
    "dir": the user's jax_compilation_cache_dir or ""}."""
    comp, cc = sys.modules.get(MODULE), sys.modules.get(CACHE_MODULE)
    if comp is None or cc is None:
        return {"jax": _jax_version() if "jax" in sys.modules else "absent", "cache": "absent",
                "compile": "absent", "dir": ""}
    cur = getattr(cc, "_cache", None)
    cache = ("ptxcache" if _ours(cur) else "none" if cur is None else
             "jax's own" if _jaxs_own(cur) else "other")
    f = getattr(comp, "compile_or_get_cached", None)
    d = getattr(getattr(getattr(cc, "config", None), "compilation_cache_dir", None), "value", None)
    return {"jax": _jax_version(), "cache": cache,
            "compile": "absent" if f is None else
            "wrapped" if hasattr(f, "__ptxcache_wraps__") else "plain", "dir": d or ""}


def install(compiler: Any = None) -> dict[str, str]:
    """Wrap compile_or_get_cached and set JAX's cache (importing
    jax._src.compiler unless given it). Returns installed()."""
    with _lock:
        if compiler is None:
            compiler = importlib.import_module(MODULE)
        _check_version()
        cc = sys.modules.get(CACHE_MODULE)
        f = getattr(compiler, "compile_or_get_cached", None)
        if cc is None or not hasattr(cc, "_cache") or not callable(f):
            log.warning("ptxcache: this JAX (%s) has no %s._cache or %s.compile_or_get_cached; "
                        "its cache stays its own", _jax_version(), CACHE_MODULE, MODULE)
            return installed()
        if not hasattr(f, "__ptxcache_wraps__"):
            compiler.compile_or_get_cached = _wrap(f)
        _set_cache(cc)
        _store_every_compile()
        return installed()


# JAX's option and its variable: the shortest compile worth storing.
MIN_TIME = "jax_persistent_cache_min_compile_time_secs"
MIN_TIME_ENV = "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"
JAX_MIN_TIME_DEFAULT = 1.0


def _store_every_compile() -> None:
    """JAX stores only compiles of a second and more by default: a
    directory's entry costs a file, and a small compile is quicker than
    reading it back from a slow disk. A daemon's entry costs a request:
    every compile is worth keeping, so that a fresh process compiles
    nothing the fleet has (a 12-layer decoder's warm process compiled 10
    of its 13 computations again under JAX's default). So the option is
    set to 0 where the user left it at JAX's default and did not set its
    variable; a value of the user's is kept."""
    cfg = sys.modules.get("jax._src.config")
    state = getattr(cfg, MIN_TIME[len("jax_"):], None)
    if MIN_TIME_ENV in os.environ or getattr(state, "value", None) != JAX_MIN_TIME_DEFAULT:
        return
    try:
        cfg.config.update(MIN_TIME, 0.0)
    except Exception:
        log.info("ptxcache: cannot set %s; JAX keeps compiles of %s s and more", MIN_TIME,
                 JAX_MIN_TIME_DEFAULT, exc_info=True)


class _ImportHook:
    """Calls install() right after jax._src.compiler is first imported
    (before JAX can compile anything): the standard library's import
    machinery, as ptxcache.inductor's hook does for PyTorch."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != MODULE:
            return None

        def after(module: Any) -> None:
            _remove_hook()
            try:
                install(module)
            except Exception:
                log.warning("ptxcache: cannot install into %s", fullname, exc_info=True)

        return wrapped_spec(self, fullname, path, target, after=after)


_hook: _ImportHook | None = None


def _remove_hook() -> None:
    global _hook
    with _lock:
        if _hook is not None and _hook in sys.meta_path:
            sys.meta_path.remove(_hook)
        _hook = None


def install_on_import() -> str:
    """install() now if JAX's compiler module is loaded, else as soon as it
    is. Returns "installed", "on import" or "off" (PTXCACHE_JAX=0)."""
    global _hook
    if os.environ.get(ENV_SWITCH, "").strip() == "0":
        return "off"
    if MODULE in sys.modules:
        install(sys.modules[MODULE])
        return "installed"
    with _lock:
        if _hook is None:
            _hook = _ImportHook()
            sys.meta_path.insert(0, _hook)
    return "on import"
