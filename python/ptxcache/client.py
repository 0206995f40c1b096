# SPDX-License-Identifier: Apache-2.0
"""A client of ptxcached's protocol (proto/PROTOCOL.md): hello, ping, stats
and the artifact requests (get, put, release, with leases).

The socket is found as the C clients find it (client/lib.c):
``$PTXCACHE_SOCKET``, else ``$XDG_RUNTIME_DIR/ptxcache/ptxcached.sock`` (or
``/tmp/ptxcache-$UID/ptxcached.sock`` without XDG_RUNTIME_DIR), else, when
that does not exist, the node's service socket
``/run/ptxcache/ptxcached.sock`` (``$PTXCACHE_NODE_SOCKET`` where set). A
Client whose socket was not given (no path, no ``$PTXCACHE_SOCKET``) that
finds no daemon there tries the other of the two, then starts the user's
own (ptxcache.autostart), as the C fronts do.

Timeouts: the daemon must say something within the silence bound
(``timeout``; by default ``$PTXCACHE_SILENCE_MS``, the C clients' own
setting, else 5 s) while a request is
outstanding: a reply, or a ``progress`` frame, which it sends about once a
second while a request waits for a producer. A get that waits is also
bounded overall by its own ``wait_ms`` plus the silence bound.

A Client is one connection. It is a context manager, may be used from
several threads (requests are serialised by ``lock``), and reconnects by
itself in a child after fork() and when the daemon closed an idle
connection. Errors are exceptions from ptxcache.errors.
"""
from __future__ import annotations

import dataclasses
import errno
import json
import os
import select
import socket
import stat
import struct
import threading
import time
import weakref

TYPE_CHECKING = False
if TYPE_CHECKING:      # typing: 5 ms of an import; the names are annotations only
    from typing import Any, Iterable

from . import autostart, wire
from .errors import ConnectError, DaemonTimeout, ProtocolError, PtxcacheError, ServerError, server_error

__all__ = ["Client", "ArtifactReply", "default_socket", "socket_and_source", "SYSTEM_SOCKET",
           "DEFAULT_TIMEOUT", "version_of"]

# Where the node's systemd service listens (systemd/ptxcached.socket).
SYSTEM_SOCKET = "/run/ptxcache/ptxcached.sock"
# The silence bound, as the C library's default (ptxcache_connect).
DEFAULT_TIMEOUT = 5.0
# Replies carry artifacts of up to artifact-max-value (256 MiB by default).
REPLY_MAX = 1 << 30
# Descriptors received ahead of the frames that claim them (each rides on
# its frame's first byte): more unclaimed than this is a daemon misbehaving.
FDS_MAX = 16


def socket_and_source(env: dict | None = None) -> tuple[str, str]:
    """The socket path a client uses, and where it came from (for status)."""
    env = os.environ if env is None else env
    p = env.get("PTXCACHE_SOCKET")
    if p:
        return p, "PTXCACHE_SOCKET"
    x = env.get("XDG_RUNTIME_DIR")
    if x:
        own, src = os.path.join(x, "ptxcache", "ptxcached.sock"), "XDG_RUNTIME_DIR"
    else:
        own, src = "/tmp/ptxcache-%d/ptxcached.sock" % os.getuid(), "default"
    node = autostart.node_socket(env)
    if not os.path.exists(own) and os.path.exists(node):
        return node, "the node's service"
    return own, src


def version_of(hello: dict) -> str | None:
    """The daemon's version from its hello reply: its ``version`` field,
    else (older daemons) the end of ``server``, "ptxcached 0.2.0"."""
    v = hello.get("version")
    if isinstance(v, str) and v:
        return v
    server = hello.get("server")
    if isinstance(server, str) and server.startswith("ptxcached "):
        return server.split()[1]
    return None


def default_socket() -> str:
    """The socket path a client uses (see the module's comment)."""
    return socket_and_source()[0]


def _env_timeout() -> float:
    v = os.environ.get("PTXCACHE_SILENCE_MS")
    try:
        return int(v) / 1000.0 if v and int(v) > 0 else DEFAULT_TIMEOUT
    except ValueError:
        return DEFAULT_TIMEOUT


@dataclasses.dataclass
class ArtifactReply:
    """An artifact_get's answer: the value when found; lease is the token
    when the caller became the key's producer."""
    found: bool
    value: bytes | None = None
    lease: int | None = None


_NAMES = {wire.T_HELLO: "hello", wire.T_PING: "ping", wire.T_STATS: "stats",
          wire.T_ARTIFACT_GET: "artifact_get", wire.T_ARTIFACT_PUT: "artifact_put",
          wire.T_ARTIFACT_RELEASE: "artifact_release"}


# Every Client, for a child after fork() (_after_fork()).
_clients: "weakref.WeakSet[Client]" = weakref.WeakSet()


class Client:
    """One connection to ptxcached. Connects on first use."""

    def __init__(self, path: str | None = None, timeout: float | None = None) -> None:
        # A socket someone named is theirs: never another, never started.
        self.explicit = bool(path or os.environ.get("PTXCACHE_SOCKET"))
        self.path = path or default_socket()
        self.how = "given" if self.explicit else None   # own, node, started
        self.timeout = timeout if timeout and timeout > 0 else _env_timeout()
        self.lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._pid = 0
        self._next_id = 0
        self._used = False      # a request went over this connection
        self._fds: list[int] = []   # descriptors received, not yet claimed
        self._pending = bytearray()     # bytes read past the frame taken last
        self._scratch = memoryview(bytearray(_READ_AHEAD))     # what reads ahead land in
        self._bound_s = 0.0     # the socket's timeouts when below self.timeout
        self._last = 0.0        # when the last exchange ended (monotonic)
        # Which connection this is (a lease lives as long as the one that
        # took it: ArtifactStore checks).
        self.generation = 0
        _clients.add(self)

    def _forked(self) -> None:
        """In a child after fork(): the parent's connection is not the
        child's. Its descriptors are closed here (the parent's stay open:
        the daemon sees the parent's end, and its leases end, when the
        parent ends), and the lock is a new one (another of the parent's
        threads may have held it)."""
        self.lock = threading.Lock()
        s, self._sock = self._sock, None
        if s is not None:
            s.close()
        fds, self._fds = self._fds, []
        for fd in fds:
            os.close(fd)
        self._pending = bytearray()

    # ---- connection ---------------------------------------------------

    def connect(self) -> None:
        """Open the connection if it is not open (again, after a fork or a
        close by the daemon). ConnectError if the socket cannot be reached."""
        if self._sock is not None and self._pid == _pid:
            return
        self._drop()
        try:
            s = self._open(self.path)
        except ConnectError:
            if self.explicit:
                raise
            s = self._find_or_start()
        self._sock, self._pid, self._used, self._bound_s = s, _pid, False, 0.0
        self.generation += 1

    def _open(self, path: str) -> socket.socket:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        try:
            s.connect(path)
        except socket.timeout:
            s.close()
            raise DaemonTimeout("timed out after %.0f ms connecting to ptxcached at '%s'"
                                % (self.timeout * 1000, path)) from None
        except OSError as e:
            s.close()
            raise ConnectError("cannot connect to ptxcached at '%s': %s"
                               % (path, e.strerror or e)) from None
        # Blocking from here, the silence bound the socket's own (SO_RCVTIMEO,
        # SO_SNDTIMEO): a read or a send waits in the kernel, with no poll()
        # before it and no exception for a read tried too soon; one that
        # hears nothing for the bound fails with EAGAIN (_bound()).
        s.settimeout(None)
        _socket_bound(s, self.timeout)
        return s

    def _find_or_start(self) -> socket.socket:
        """No daemon at the default socket: the user's own or the node's,
        whichever answers, else the user's own started (ptxcache.autostart)."""
        first = None
        for path, how in ((autostart.own_socket(), "own"), (autostart.node_socket(), "node")):
            try:
                s = self._open(path)
            except ConnectError as e:
                first = first or e
                continue
            self.path, self.how = path, how
            return s
        if not autostart.enabled():
            raise ConnectError("%s (PTXCACHE_AUTOSTART=0: no daemon started)" % first)
        how, path = autostart.start()
        s = self._open(path)
        self.path, self.how = path, how
        return s

    def close(self) -> None:
        """Close the connection; leases it held end with it."""
        with self.lock:
            self._drop()

    def close_if_free(self) -> bool:
        """Close the connection unless a request is on it (True if closed)."""
        if not self.lock.acquire(blocking=False):
            return False
        try:
            self._drop()
        finally:
            self.lock.release()
        return True

    def _drop(self) -> None:
        fds, self._fds = self._fds, []
        self._pending = bytearray()
        if self._pid == _pid:
            for fd in fds:
                os.close(fd)
        s, self._sock = self._sock, None
        if s is not None and self._pid == _pid:
            try:
                s.close()
            except OSError:
                pass

    @property
    def connected(self) -> bool:
        return self._sock is not None and self._pid == _pid

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _stale(self) -> bool:
        """True if the daemon has written to or closed a connection on which
        nothing is outstanding (an idle close, a shutdown): it is of no use.
        Asked only of a connection idle for a second or more: the daemon
        closes no connection for idling less (idle-timeout is at least 1 s),
        and one closed for another reason is tried again all the same
        (_Retry)."""
        if self._pending:
            return True
        if time.monotonic() - self._last < 1.0:
            return False
        try:
            r, _, _ = select.select([self._sock], [], [], 0)
        except (OSError, ValueError):
            return True
        return bool(r)

    # ---- requests ------------------------------------------------------

    def call(self, requests: list[tuple[int, dict]], wait_s: float = 0.0) -> list[dict | ServerError]:
        """Send requests [(type, fields)] together and return their replies
        in the same order: each a reply body, or the ServerError the daemon
        answered that request with. wait_s: how long any of them may wait on
        the daemon's side beyond the silence bound. Raises for what ends the
        connection (ConnectError, DaemonTimeout, ProtocolError, or a
        ServerError sent with id 0)."""
        with self.lock:
            for attempt in (0, 1):
                fresh = not self.connected
                if not fresh and self._used and self._stale():
                    self._drop()
                    fresh = True
                self.connect()
                try:
                    out = self._exchange(requests, wait_s)
                    self._last = time.monotonic()
                    return out
                except _Retry:
                    # The daemon had closed this idle connection before it
                    # saw our request: once more on a new one.
                    self._drop()
                    if fresh or attempt:
                        raise ConnectError("ptxcached at '%s' closed the connection" % self.path) from None
                except PtxcacheError:
                    self._drop()
                    raise
                except BaseException:
                    self._drop()    # interrupted mid-frame: the stream is unusable
                    raise
            raise AssertionError("unreachable")

    def _exchange(self, requests: list[tuple[int, dict]], wait_s: float) -> list[dict | ServerError]:
        assert self._sock is not None
        ids: dict[int, int] = {}
        types: list[int] = []
        out = []
        for i, (t, fields) in enumerate(requests):
            self._next_id += 1
            rid = self._next_id
            ids[rid] = i
            types.append(t)
            out.extend(wire.frame_parts(t, dict(fields, id=rid)))
        reused = self._used
        self._used = True
        deadline = time.monotonic() + self.timeout + wait_s
        results: list[dict | ServerError | None] = [None] * len(requests)
        try:
            self._send_all(out, deadline)
        except _Closed as e:
            # A daemon that refuses the connection sends its reason and
            # closes: read it. A reused connection closed while idle is
            # retried by call().
            got = self._reason(deadline)
            if got is not None:
                raise got from None
            if reused:
                raise _Retry() from None
            raise ConnectError("cannot send to ptxcached at '%s': %s" % (self.path, e)) from None
        heard = False
        left = len(requests)
        while left:
            try:
                ftype, body = self._read_frame(deadline)
            except _Closed:
                if reused and not heard:
                    raise _Retry() from None
                raise ConnectError("ptxcached at '%s' closed the connection" % self.path) from None
            heard = True
            rid = body.get("id")
            fd = body.pop("_fd", None)
            if fd is not None and (rid not in ids or results[ids[rid]] is not None
                                   or ftype != types[ids[rid]] | wire.REPLY):
                os.close(fd)    # a frame we do not wait for: its descriptor too
                fd = None
            if ftype == wire.T_PROGRESS:
                continue        # the silence bound restarts with every frame
            if ftype == wire.T_ERROR:
                err = server_error(str(body.get("code", "")), str(body.get("message", "")),
                                   _NAMES.get(types[ids[rid]], "") if rid in ids else "")
                if rid in ids and results[ids[rid]] is None:
                    results[ids[rid]] = err
                    left -= 1
                    continue
                if rid == 0 or rid is None:
                    err.connection = True   # the daemon ends the connection
                    raise err
                continue        # an error for a request we gave up on
            if rid not in ids or results[ids[rid]] is not None:
                continue        # a stray reply to an abandoned request
            i = ids[rid]
            if ftype != types[i] | wire.REPLY:
                raise ProtocolError("ptxcached answered %s with frame type 0x%02x"
                                    % (_NAMES.get(types[i], types[i]), ftype))
            if fd is not None:
                try:
                    body["value"] = _read_value(fd, body.get("value_len"))
                finally:
                    os.close(fd)
            results[i] = body
            left -= 1
        return results  # type: ignore[return-value]

    def _reason(self, deadline: float) -> ServerError | None:
        """After a failed send: the error frame the daemon sent, if any."""
        try:
            ftype, body = self._read_frame(min(deadline, time.monotonic() + 1.0))
        except (PtxcacheError, _Closed):
            return None
        if ftype == wire.T_ERROR:
            err = server_error(str(body.get("code", "")), str(body.get("message", "")))
            err.connection = True
            return err
        return None

    def _send_all(self, parts: list[bytes | memoryview], deadline: float) -> None:
        """Send the buffers in order, as one stream (sendmsg: a large value
        goes from the caller's memory)."""
        sock = self._sock
        assert sock is not None
        views = [memoryview(p).cast("B") for p in parts if len(p)]
        while views:
            self._bound(deadline)
            try:
                n = sock.sendmsg(views[:64])
            except BlockingIOError:
                raise DaemonTimeout("timed out after %.0f ms sending to ptxcached at '%s'"
                                    % (self.timeout * 1000, self.path)) from None
            except OSError as e:
                if e.errno in (errno.EPIPE, errno.ECONNRESET, errno.ENOTCONN):
                    raise _Closed(e.strerror) from None
                raise ConnectError("cannot send to ptxcached at '%s': %s" % (self.path, e)) from None
            while views and n >= len(views[0]):
                n -= len(views.pop(0))
            if n:
                views[0] = views[0][n:]

    def _bound(self, deadline: float) -> None:
        """Before a read or a send: its wait on the socket ends at the
        silence bound, and not past deadline once that is nearer than half
        the bound (nearer, a system call each time would shorten it)."""
        left = deadline - time.monotonic()
        if left <= 0:
            raise DaemonTimeout("ptxcached at '%s' did not answer in time" % self.path)
        if left < self.timeout / 2 or self._bound_s:
            bound = left if left < self.timeout / 2 else 0.0
            if bound != self._bound_s:
                assert self._sock is not None
                _socket_bound(self._sock, bound or self.timeout)
                self._bound_s = bound

    def _recv(self, view: memoryview, deadline: float) -> int:
        """One read into view (more than 0 bytes), its descriptors queued."""
        sock = self._sock
        assert sock is not None
        self._bound(deadline)
        try:
            # recvmsg: a reply may bring its value's descriptor
            # (SCM_RIGHTS on its first byte; PROTOCOL.md).
            r, anc, flags, _ = sock.recvmsg_into([view], _ANC_SPACE, _CLOEXEC)
        except BlockingIOError:
            if self._bound_s:
                raise DaemonTimeout("ptxcached at '%s' did not answer in time" % self.path) from None
            raise DaemonTimeout("no answer from ptxcached at '%s' for %.0f ms"
                                % (self.path, self.timeout * 1000)) from None
        except OSError as e:
            if e.errno in (errno.ECONNRESET, errno.EPIPE):
                raise _Closed(e.strerror) from None
            raise ConnectError("cannot read from ptxcached at '%s': %s" % (self.path, e)) from None
        if anc or flags & _CTRUNC:
            self._take_fds(anc, flags)
        if r == 0:
            raise _Closed("end of stream")
        return r

    def _read_exact(self, n: int, deadline: float) -> bytearray:
        """The stream's next n bytes. Up to _READ_AHEAD at a time, so that a
        small reply's header and body come in one read; a larger body is
        read straight into the buffer returned, never past its end."""
        have = self._pending
        if n <= _READ_AHEAD:
            while len(have) < n:
                got = self._recv(self._scratch, deadline)
                have += self._scratch[:got]
            out = have[:n]
            del have[:n]
            return out
        # What a read ahead left is less than _READ_AHEAD, so less than n.
        buf = bytearray(n)
        view = memoryview(buf)
        got = len(have)
        view[:got] = have
        have.clear()
        while got < n:
            got += self._recv(view[got:], deadline)
        return buf

    def _take_fds(self, anc: list, flags: int) -> None:
        """Queue the descriptors a read brought: exactly one per read (the
        daemon sends one per message, and the kernel ends a read after it);
        anything else, or a truncated one, ends the connection."""
        got: list[int] = []
        for level, kind, data in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                n = len(data) - len(data) % 4
                got.extend(int.from_bytes(data[i:i + 4], "little", signed=True)
                           for i in range(0, n, 4))
        if flags & _CTRUNC or len(got) > 1 or len(self._fds) + len(got) > FDS_MAX:
            for fd in got:
                os.close(fd)
            raise ProtocolError("ptxcached at '%s' sent %s" % (
                self.path, "a descriptor this process could not take (out of descriptors?)"
                if flags & _CTRUNC else "more descriptors than replies"))
        self._fds.extend(got)

    def _read_frame(self, deadline: float) -> tuple[int, dict]:
        hdr = self._read_exact(wire.HEADER, deadline)
        try:
            ftype, n = wire.parse_header(bytes(hdr), REPLY_MAX)
            # The buffer itself, not a copy of it: a value of tens of MB
            # (an FX graph) is copied once, into the bytes unpack returns.
            body = wire.unpack(self._read_exact(n, deadline))
        except wire.WireError as e:
            raise ProtocolError("malformed reply from ptxcached at '%s': %s" % (self.path, e)) from None
        if not isinstance(body, dict):
            raise ProtocolError("malformed reply from ptxcached at '%s': not a map" % self.path)
        if body.get("fd") is True:
            # Its descriptor came with its first byte, so it is here now.
            if not self._fds:
                raise ProtocolError("malformed reply from ptxcached at '%s': a descriptor "
                                    "announced, none sent" % self.path)
            body["_fd"] = self._fds.pop(0)
        return ftype, body

    def _one(self, t: int, fields: dict, wait_s: float = 0.0) -> dict:
        r = self.call([(t, fields)], wait_s)[0]
        if isinstance(r, ServerError):
            raise r
        return r

    # ---- the requests ----------------------------------------------------

    def hello(self) -> dict:
        """The daemon's identity: proto, server, compiler, pid, assembler."""
        return self._one(wire.T_HELLO, {})

    def ping(self) -> None:
        self._one(wire.T_PING, {})

    def stats(self) -> dict:
        """The daemon's counters (``ptxcache stats --json``)."""
        r = self._one(wire.T_STATS, {})
        try:
            return json.loads(r["json"])
        except (KeyError, TypeError, ValueError) as e:
            raise ProtocolError("malformed stats reply from ptxcached at '%s': %s" % (self.path, e)) from None

    @staticmethod
    def _get_fields(ns: str, key: str | bytes, lease: bool, wait_ms: int | None) -> dict:
        # fd: a large value may come as its file's descriptor, read here
        # with the one copy reading a file costs (_read_value()).
        f: dict = {"ns": ns, "key": key, "lease": bool(lease), "fd": True}
        if wait_ms is not None:
            f["wait_ms"] = max(0, int(wait_ms))
        return f

    @staticmethod
    def _artifact_reply(r: dict) -> ArtifactReply:
        found = r.get("found")
        if not isinstance(found, bool):
            raise ProtocolError("malformed artifact_get reply: no 'found'")
        value = r.get("value")
        if found and not isinstance(value, (bytes, bytearray)):
            raise ProtocolError("malformed artifact_get reply: found without a value")
        lease = r.get("lease")
        return ArtifactReply(found, bytes(value) if found else None,
                             lease if isinstance(lease, int) and not isinstance(lease, bool) else None)

    def artifact_get(self, ns: str, key: str | bytes, lease: bool = False,
                     wait_ms: int | None = None) -> ArtifactReply:
        """Look up ns/key in the caller's scope. lease: on a miss with no
        producer, become the producer (reply.lease). While another client
        produces the key, wait up to wait_ms (the daemon's artifact-wait by
        default and at most) for its put."""
        r = self._one(wire.T_ARTIFACT_GET, self._get_fields(ns, key, lease, wait_ms),
                      (wait_ms if wait_ms is not None else 300000) / 1000.0)
        return self._artifact_reply(r)

    def artifact_get_many(self, ns: str, keys: Iterable[str | bytes], lease: bool = False,
                          wait_ms: int | None = None) -> list[ArtifactReply | ServerError]:
        """artifact_get of several keys at once (sent together, answered in
        any order); one answer or ServerError per key, in order."""
        reqs = [(wire.T_ARTIFACT_GET, self._get_fields(ns, k, lease, wait_ms)) for k in keys]
        if not reqs:
            return []
        out: list[ArtifactReply | ServerError] = []
        for r in self.call(reqs, (wait_ms if wait_ms is not None else 300000) / 1000.0):
            out.append(r if isinstance(r, ServerError) else self._artifact_reply(r))
        return out

    def artifact_put(self, ns: str, key: str | bytes, value: bytes, lease: int | None = None) -> bool:
        """Store value under ns/key in the caller's scope (committed before
        the reply); with lease, as that key's producer. Conflict if another
        client holds the key's lease and this one did not pass its own."""
        f: dict = {"ns": ns, "key": key, "value": bytes(value)}
        if lease is not None:
            f["lease"] = lease
        return bool(self._one(wire.T_ARTIFACT_PUT, f).get("stored"))

    def artifact_release(self, lease: int) -> None:
        """Give up a lease without a put: the next waiter may produce."""
        self._one(wire.T_ARTIFACT_RELEASE, {"lease": lease})


_ANC_SPACE = socket.CMSG_SPACE(4 * 4)
# recvmsg's flags as plain ints: an operator on socket's enum members runs
# Python code of the enum module on every read.
_CLOEXEC = int(socket.MSG_CMSG_CLOEXEC)
_CTRUNC = int(socket.MSG_CTRUNC)
# What one read asks for when a frame's end is near (_read_exact()).
_READ_AHEAD = 64 << 10


def _socket_bound(s: socket.socket, seconds: float) -> None:
    """A blocking socket's reads and sends fail with EAGAIN after seconds
    without progress."""
    us = max(1000, int(seconds * 1e6))
    tv = struct.pack("@ll", us // 1000000, us % 1000000)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, tv)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, tv)


def _read_value(fd: int, n: object) -> bytes:
    """A value sent as a descriptor: checked (a regular file of exactly the
    reply's value_len bytes), read into bytes with one copy."""
    if not isinstance(n, int) or isinstance(n, bool) or n < 0 or n > REPLY_MAX:
        raise ProtocolError("malformed artifact_get reply: a descriptor without 'value_len' "
                            "(of at most %d bytes)" % REPLY_MAX)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_size != n:
        raise ProtocolError("malformed artifact_get reply: its descriptor is not a file of "
                            "the value's %d bytes" % n)
    data = os.pread(fd, n, 0)
    if len(data) == n:
        return data
    parts = [data]      # a read of more than 2 GiB comes in pieces
    got = len(data)
    while got < n:
        more = os.pread(fd, n - got, got)
        if not more:
            raise ProtocolError("malformed artifact_get reply: its file is shorter than its value")
        parts.append(more)
        got += len(more)
    return b"".join(parts)


# This process's pid, which a connection is of: os.getpid() is a system
# call, and a request would ask it twice. A child learns its own at fork:
# CPython runs the at-fork hooks in every child it makes (os.fork,
# os.forkpty, multiprocessing), and C that forks and then runs Python must
# call PyOS_AfterFork_Child for Python's own state, which runs them too.
_pid = os.getpid()


def _after_fork() -> None:
    global _pid
    _pid = os.getpid()
    for c in list(_clients):
        c._forked()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


class _Closed(Exception):
    """The stream ended (internal)."""


class _Retry(Exception):
    """A reused connection turned out closed before the daemon saw the
    request (internal)."""
