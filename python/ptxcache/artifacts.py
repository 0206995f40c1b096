# SPDX-License-Identifier: Apache-2.0
"""What the Triton and Inductor adapters share: artifact get and put as a
cache that can only miss, never fail, and the leases that make concurrent
processes compile a key once.

The rules:
- Nothing here raises to a caller. A daemon that is down, slow, refusing,
  or too old to serve artifacts makes the call that found out a miss (or an
  unstored put), logs one warning for the process, and the store then
  answers misses at once, without asking, until ``retry_s`` (30 s,
  ``$PTXCACHE_RETRY_S``) have passed; then it asks again, silently. A daemon
  that does not serve artifact requests at all is not asked again.
- A get that misses with ``lease=True`` makes this process the key's
  producer (the daemon holds the others' gets of it until our put). The
  lease is ours until put() fills it or release() gives it up; leases
  still held when their connection closes (process exit) end with it.
- One connection per thread (a get that waits for another process's
  producer must not hold up this process's other threads), made again in
  a child after fork(), which lets go of the parent's connections, locks
  and leases at once (client.py). A lease belongs to the connection that
  took it, and ends with it; put() and release() from another thread go
  through that connection, never through its successor. While the store
  answers misses without asking, a lease that put() or release() gives
  up cannot be released by a request: its connection is closed instead
  (unless a request is on it), which ends its leases at once, rather than
  leaving the processes waiting for them to the lease's timeout.
- release() may be called from a finalizer (the Triton adapter releases
  what a compile that raised left unfilled), so it never waits on this
  thread: where the store's lock is held (by a block of this thread's that
  a garbage collection interrupted) the next call of the store releases
  it; where the lease's connection is busy in this very thread, the
  release is queued and sent as soon as that connection is free.
"""
from __future__ import annotations

import collections
import dataclasses
import hashlib
import logging
import os
import threading
import time
import weakref

TYPE_CHECKING = False
if TYPE_CHECKING:      # typing: 5 ms of an import; the names are annotations only
    from typing import Any, Iterable

from . import __version__
from . import wire
from .client import Client, version_of
from .errors import Conflict, Denied, PtxcacheError, ServerError, Unsupported

__all__ = ["ArtifactStore", "store", "reset_store", "artifact_key"]

log = logging.getLogger(__name__)

KEY_MAX = 1024          # PROTOCOL.md: keys of 1 to 1024 bytes
# The daemon's artifact-wait default and cap: the longest a get waits for
# another process's producer (a large graph with max-autotune takes minutes).
DEFAULT_WAIT_MS = 300000
DEFAULT_RETRY_S = 30.0


def artifact_key(text: str) -> str:
    """text as a protocol key: itself when it fits, else its SHA-256."""
    if 0 < len(text.encode("utf-8")) <= KEY_MAX:
        return text
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def _env_number(name: str, default: float) -> float:
    try:
        v = float(os.environ.get(name, ""))
        return v if v >= 0 else default
    except ValueError:
        return default


@dataclasses.dataclass
class _Lease:
    client: Client
    token: int
    thread: int
    since: float
    generation: int     # the client's connection that took it: it ends with it

    def live(self) -> bool:
        """Whether the connection that took it is still the client's."""
        return self.client.generation == self.generation


# Every ArtifactStore, for a child after fork() (_after_fork()).
_stores: "weakref.WeakSet[ArtifactStore]" = weakref.WeakSet()


class ArtifactStore:
    """Artifact get/put/release over per-thread connections to one daemon."""

    def __init__(self, path: str | None = None, timeout: float | None = None,
                 wait_ms: int | None = None, retry_s: float | None = None) -> None:
        self.path = path
        self.timeout = timeout
        self.wait_ms = int(wait_ms if wait_ms is not None else
                           _env_number("PTXCACHE_WAIT_MS", DEFAULT_WAIT_MS))
        self.retry_s = retry_s if retry_s is not None else _env_number("PTXCACHE_RETRY_S",
                                                                        DEFAULT_RETRY_S)
        self._local = threading.local()
        self._lock = threading.Lock()
        # Releases asked for while _lock was held (a finalizer that ran in
        # a block of this very thread's): done by the next call.
        self._deferred: collections.deque[tuple[str, str]] = collections.deque()
        self._leases: dict[tuple[str, str], _Lease] = {}
        self._pending: dict[int, list[int]] = {}    # id(client) -> tokens to release
        self._clients: "weakref.WeakValueDictionary[int, Client]" = weakref.WeakValueDictionary()
        self._down_until = 0.0
        self._version_checked = False
        self.daemon_version: str | None = None
        self.max_value: int | None = None   # the daemon's artifact-max-value (hello)
        self._gone = False          # the daemon serves no artifacts: never ask again
        self._warned = False
        self.counts = {"hits": 0, "misses": 0, "puts": 0, "leases": 0, "releases": 0,
                       "errors": 0, "skipped": 0,
                       # ptxcache.prefetch: entries fetched ahead, used, and
                       # the bytes of those never used; in-flight waits that
                       # met their bound.
                       "prefetched": 0, "prefetch_used": 0, "prefetch_bytes": 0,
                       "prefetch_wasted_bytes": 0, "prefetch_timeouts": 0}
        # ptxcache.prefetch.Job when this process prefetches and records its
        # job's entries: get_many() asks its table first, gets that hit and
        # puts are noted in it.
        self.job: Any = None
        # Per namespace: requests, round trips and the seconds and bytes
        # they took, as this process saw them (`layers()`).
        self._layers: dict[str, dict[str, float]] = {}
        _stores.add(self)

    def _forked(self) -> None:
        """In a child after fork(): the parent's leases and locks are not
        the child's (its clients let go of the parent's connections)."""
        self._lock = threading.Lock()
        self._deferred.clear()
        self._leases.clear()
        self._pending.clear()
        self.job = None     # the parent's table may be half-filled: none here

    def layers(self) -> dict[str, dict[str, float]]:
        """{namespace: {gets, hits, trips, get_s, bytes_in, puts, put_s,
        bytes_out}}: what each layer cost this process so far."""
        with self._lock:
            return {ns: dict(v) for ns, v in self._layers.items()}

    def _account(self, ns: str, **add: float) -> None:
        with self._lock:
            d = self._layers.setdefault(ns, {"gets": 0, "hits": 0, "trips": 0, "get_s": 0.0,
                                             "bytes_in": 0, "puts": 0, "put_s": 0.0,
                                             "bytes_out": 0})
            for k, v in add.items():
                d[k] += v

    # ---- failure handling ------------------------------------------------

    def available(self) -> bool:
        """False while the store answers misses without asking (after a
        failure, for retry_s; for good after an Unsupported)."""
        return not self._gone and time.monotonic() >= self._down_until

    def _failed(self, what: str, e: Exception) -> None:
        self.counts["errors"] += 1
        if isinstance(e, Unsupported):
            self._gone = True
            msg = ("ptxcached at '%s' does not serve artifact entries (a daemon older than this "
                   "package?): %s; the JIT's caches stay local" % (self._path(), e))
        else:
            self._down_until = time.monotonic() + self.retry_s
            msg = ("%s failed, so it is a cache miss: %s; the JIT's own caches carry on without "
                   "ptxcached (asking again every %.0f s)" % (what, e, self.retry_s))
        if not self._warned:
            self._warned = True
            log.warning("ptxcache: %s", msg)
        else:
            log.debug("ptxcache: %s", msg)
        with self._lock:
            self._forget_client(self._local.__dict__.get("client"))

    def _recovered(self) -> None:
        if self._down_until:
            self._down_until = 0.0
            log.info("ptxcache: ptxcached at '%s' answers again", self._path())

    def _path(self) -> str:
        return self._client().path

    # ---- connections -------------------------------------------------------

    def _client(self) -> Client:
        c = self._local.__dict__.get("client")
        if c is None:
            c = Client(self.path, self.timeout)
            self._local.client = c
            self._clients[id(c)] = c
        return c

    def _check_version(self, c: Client) -> None:
        """Once per process, after the first get the daemon answered or
        before the first put: a daemon of another version than this package
        is named in a warning (it serves, but may lack what this package asks
        for), and its artifact-max-value kept for puts."""
        if self._version_checked:
            return
        self._version_checked = True
        try:
            h = c.hello()
        except PtxcacheError:
            return          # the request that follows finds out and says so
        v = self.daemon_version = version_of(h)
        m = h.get("artifact_max_value")
        if isinstance(m, int) and not isinstance(m, bool) and m > 0:
            self.max_value = m
        if v != __version__:
            log.warning("ptxcache: ptxcached at '%s' is version %s, this package is %s; "
                        "'python3 -m ptxcache status' says what to do", c.path, v or "unknown",
                        __version__)

    def _forget_client(self, c: Client | None) -> None:
        """Leases of a connection that failed ended with it (caller holds _lock)."""
        if c is None:
            return
        for k in [k for k, v in self._leases.items() if v.client is c]:
            del self._leases[k]
        self._pending.pop(id(c), None)

    def _flush(self, c: Client) -> None:
        """Send the releases queued for c (called with c's lock free). A
        connection that has closed took its leases with it: nothing to send."""
        with self._lock:
            tokens = self._pending.pop(id(c), [])
        if not c.connected or not self.available():
            return
        for t in tokens:
            try:
                c.artifact_release(t)
                self.counts["releases"] += 1
            except ServerError as e:
                log.debug("ptxcache: release of a lease: %s", e)
            except PtxcacheError as e:
                log.debug("ptxcache: release of a lease: %s", e)
                return

    # ---- the cache -----------------------------------------------------------

    def get(self, ns: str, key: str, lease: bool = False) -> bytes | None:
        """The value of ns/key in this user's scope, or None. lease: a miss
        makes this process the producer (see the module's comment)."""
        r = self.get_many(ns, [key], lease)
        return r.get(key)

    def get_many(self, ns: str, keys: Iterable[str], lease: bool = False) -> dict[str, bytes]:
        """{key: value} of those keys found; the others miss (with a lease
        each, if lease and nobody else produces them)."""
        keys = [k for k in keys]
        if not keys:
            return {}
        job = self.job
        out: dict[str, bytes] = {}
        if job is not None and ns != job.RECORD_NS:
            out, keys = job.take(self, ns, keys)
            if not keys:
                return out
        self._release_deferred()
        if not self.available():
            self.counts["skipped"] += len(keys)
            return out
        c = self._client()
        wire_keys = [artifact_key(k) for k in keys]
        t0 = time.monotonic()
        try:
            replies = c.artifact_get_many(ns, wire_keys, lease=lease, wait_ms=self.wait_ms)
        except PtxcacheError as e:
            self._failed("artifact get '%s' %s" % (ns, _short(keys[0])), e)
            return out
        except Exception as e:      # never let a cache lookup break a compile
            self._failed("artifact get '%s' %s" % (ns, _short(keys[0])), e)
            return out
        now = time.monotonic()
        self._account(ns, gets=len(keys), trips=1, get_s=now - t0,
                      hits=sum(1 for r in replies if not isinstance(r, ServerError) and r.found),
                      bytes_in=sum(len(r.value) for r in replies
                                   if not isinstance(r, ServerError) and r.value is not None))
        self._recovered()
        self._check_version(c)
        for k, r in zip(keys, replies):
            if isinstance(r, ServerError):
                if isinstance(r, Unsupported):
                    self._failed("artifact get", r)
                    return out
                # busy (too many leases or waits), invalid (a key or
                # namespace the daemon refuses): a miss, not a failure.
                log.debug("ptxcache: artifact get '%s' %s: %s", ns, _short(k), r)
                self.counts["misses"] += 1
                continue
            if r.found and r.value is not None:
                out[k] = r.value
                self.counts["hits"] += 1
                if job is not None:
                    job.note(ns, k, len(r.value))
                continue
            self.counts["misses"] += 1
            if r.lease is not None:
                self.counts["leases"] += 1
                with self._lock:
                    old = self._leases.get((ns, k))
                    self._leases[(ns, k)] = _Lease(c, r.lease, threading.get_ident(), now,
                                                   c.generation)
                if old is not None and old.token != r.lease:
                    self._release_lease(old)
        self._flush(c)
        return out

    def put(self, ns: str, key: str, value: bytes) -> bool:
        """Store value under ns/key; fills this process's lease on it if it
        holds one. True if the daemon stored it."""
        self._release_deferred()
        job = self.job
        if job is not None:
            job.forget(ns, key)     # a value fetched ahead is this one's elder
        with self._lock:
            held = self._leases.pop((ns, key), None)
        if not self.available():
            self.counts["skipped"] += 1
            if held is not None:
                self._end_unfilled(held)
            return False
        if held is not None and not held.live():
            held = None         # it ended with its connection: a plain put
        c = held.client if held is not None else self._client()
        self._check_version(c)
        if self.max_value is not None and len(value) > self.max_value:
            # Refused here, not sent: the daemon would refuse it, and one
            # over its max-request too would end the connection, which
            # reads as the daemon gone. Waiters go on.
            log.debug("ptxcache: artifact put '%s' %s not stored: %d bytes, over the daemon's "
                      "artifact-max-value (%d)", ns, _short(key), len(value), self.max_value)
            self.counts["skipped"] += 1
            if held is not None:
                self._release_lease(held)
            return False
        wk = artifact_key(key)
        t0 = time.monotonic()
        try:
            try:
                ok = c.artifact_put(ns, wk, value, held.token if held is not None else None)
            except Denied:
                if held is None:
                    raise
                # The lease had ended (its timeout): a plain put.
                ok = c.artifact_put(ns, wk, value)
        except Conflict as e:
            log.debug("ptxcache: artifact put '%s' %s: %s", ns, _short(key), e)
            return False
        except ServerError as e:
            if e.connection or isinstance(e, Unsupported):
                self._failed("artifact put '%s' %s" % (ns, _short(key)), e)
                return False
            # This value, not the daemon: too large, over the user's share,
            # a store that could not take it. Not stored; waiters go on.
            log.debug("ptxcache: artifact put '%s' %s not stored: %s", ns, _short(key), e)
            if held is not None:
                self._release_lease(held)
            return False
        except PtxcacheError as e:
            self._failed("artifact put '%s' %s" % (ns, _short(key)), e)
            return False
        except Exception as e:
            self._failed("artifact put '%s' %s" % (ns, _short(key)), e)
            return False
        self._account(ns, puts=1, put_s=time.monotonic() - t0, bytes_out=len(value))
        self._recovered()
        self.counts["puts"] += 1
        if job is not None and ok:
            job.note(ns, key, len(value))
        self._flush(c)
        return ok

    def prefetch_get(self, entries: list[tuple[str, str]]) -> list[bytes | None] | None:
        """For ptxcache.prefetch's thread: the values of entries (ns, key),
        None for each missing, in one round trip on this thread's
        connection, without a lease and without waiting for a producer
        (a key being produced is the normal path's). None if the daemon
        failed: the store then answers misses, as after any failure."""
        if not entries:
            return []
        if not self.available():
            return None
        c = self._client()
        reqs = [(wire.T_ARTIFACT_GET, Client._get_fields(ns, artifact_key(k), False, 0))
                for ns, k in entries]
        t0 = time.monotonic()
        try:
            replies = c.call(reqs, 0.0)
            values = [None if isinstance(r, ServerError) else Client._artifact_reply(r).value
                      for r in replies]
        except Exception as e:      # PtxcacheError or anything: the prefetch stops
            self._failed("artifact prefetch of %d entries" % len(entries), e)
            return None
        self._account("(prefetch)", gets=len(entries), trips=1, get_s=time.monotonic() - t0,
                      hits=sum(1 for v in values if v is not None),
                      bytes_in=sum(len(v) for v in values if v is not None))
        self._recovered()
        return values

    def holds(self, ns: str, key: str) -> bool:
        """True if this process holds the lease on ns/key."""
        with self._lock:
            return (ns, key) in self._leases

    def leases(self, ns: str | None = None, thread: int | None = None) -> list[str]:
        """Keys whose leases this process holds (in ns, taken by thread)."""
        with self._lock:
            return [k for (n, k), v in self._leases.items()
                    if (ns is None or n == ns) and (thread is None or v.thread == thread)]

    def release(self, ns: str, key: str) -> None:
        """Give up this process's lease on ns/key, if it holds one (it will
        not put that key): another process waiting for it may produce it.
        Waits for the store's lock a moment only (another thread holds it
        for microseconds): a finalizer may call this inside a block of
        this very thread that holds it (a garbage collection there), and
        the next call of the store then releases it."""
        if not self._lock.acquire(timeout=0.1):
            self._deferred.append((ns, key))
            return
        try:
            held = self._leases.pop((ns, key), None)
        finally:
            self._lock.release()
        if held is not None:
            self._release_lease(held)

    def _release_deferred(self) -> None:
        while self._deferred:
            try:
                ns, key = self._deferred.popleft()
            except IndexError:
                return
            self.release(ns, key)

    def release_thread(self, ns: str, keep: str | None = None) -> None:
        """Release every lease in ns that this thread took, but keep."""
        me = threading.get_ident()
        for k in self.leases(ns, me):
            if k != keep:
                self.release(ns, k)

    def _release_lease(self, held: _Lease) -> None:
        if not held.live():
            return              # it ended with its connection (a new daemon's
                                # token of the same number is another lease)
        if not self.available():
            self._end_unfilled(held)
            return
        c = held.client
        if not c.lock.acquire(blocking=False):
            # In use: by this thread (a finalizer run inside a request) or
            # another; the next request on it, or its close, sends it.
            with self._lock:
                self._pending.setdefault(id(c), []).append(held.token)
            return
        c.lock.release()
        with self._lock:
            self._pending.setdefault(id(c), []).append(held.token)
        self._flush(c)

    def _end_unfilled(self, held: _Lease) -> None:
        """While the store is down: end held (and every other lease of its
        connection, none of which a put fills now) by closing the
        connection, unless a request is on it."""
        c = held.client
        if held.live() and c.close_if_free():
            with self._lock:
                self._forget_client(c)


def _short(key: str) -> str:
    return "'%s'" % (key if len(key) <= 80 else key[:77] + "...")


_store: ArtifactStore | None = None
_store_pid = 0
_store_lock = threading.Lock()


def store() -> ArtifactStore:
    """The process's ArtifactStore (a new one in a child after fork)."""
    global _store, _store_pid
    s = _store
    if s is not None and _store_pid == os.getpid():
        return s
    with _store_lock:
        if _store is None or _store_pid != os.getpid():
            _store, _store_pid = ArtifactStore(), os.getpid()
        return _store


def reset_store() -> None:
    """Forget the process's store (its connections close when collected):
    the next store() reads the environment again."""
    global _store
    with _store_lock:
        _store = None


def _after_fork() -> None:
    # The child has one thread, and maybe a copy of a lock another thread
    # of the parent held: new ones, and a new store (new connections); a
    # store still referenced (a backend's) forgets the parent's leases.
    global _store, _store_lock
    _store, _store_lock = None, threading.Lock()
    for st in list(_stores):
        st._forked()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)
