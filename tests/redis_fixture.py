# SPDX-License-Identifier: Apache-2.0
"""A real redis-server for ptxcache's shared-tier tests, on a private Unix
socket in a temp dir, with no persistence, plus a minimal RESP client so
tests can read, write and tamper with raw values.

    with RedisServer() as r:
        r.url                    # "unix:/tmp/.../redis.sock", for l2 = ...
        RedisServer(tcp=True).tcp_url(db=3)   # "redis://127.0.0.1:PORT/3"
        r.set(b"k", b"v"); r.get(b"k"); r.keys("ptxcache:*")
        r.stop(); r.start()      # same socket path: clients reconnect
        r.pause(500)             # every client's commands wait 500 ms
        r.sleep(0.5)             # the server itself blocks (DEBUG SLEEP)
        r.calls("getrange")      # how many GETRANGEs it has served

Raises harness.Skip when redis-server is not installed (mk/deps.sh
installs it).
"""
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time

from harness import Skip

REDIS_SERVER = os.environ.get("REDIS_SERVER", "redis-server")


class RedisError(Exception):
    """An error reply (-ERR ...) from Redis."""


def _encode(args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        if isinstance(a, str):
            a = a.encode()
        elif isinstance(a, int):
            a = str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


class _Reader:
    def __init__(self, sock):
        self.sock = sock
        self.buf = b""

    def _fill(self):
        chunk = self.sock.recv(1 << 20)
        if not chunk:
            raise ConnectionError("redis closed the connection")
        self.buf += chunk

    def _line(self):
        while b"\r\n" not in self.buf:
            self._fill()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _exact(self, n):
        while len(self.buf) < n + 2:
            self._fill()
        data, self.buf = self.buf[:n], self.buf[n + 2:]
        return data

    def reply(self):
        line = self._line()
        t, rest = line[:1], line[1:]
        if t == b"+":
            return rest.decode()
        if t == b"-":
            raise RedisError(rest.decode(errors="replace"))
        if t == b":":
            return int(rest)
        if t == b"$":
            n = int(rest)
            return None if n < 0 else self._exact(n)
        if t == b"*":
            n = int(rest)
            return None if n < 0 else [self.reply() for _ in range(n)]
        raise ValueError("bad RESP reply %r" % line[:40])


class RedisServer:
    """redis-server on a private Unix socket; cleanup() stops and removes it."""

    def __init__(self, start=True, tcp=False, extra=(), host="127.0.0.1", port=0):
        """tcp: also listen on a free loopback port (self.port, and
        tcp_url()), or on host:port when port is given (another loopback
        address, 127.0.0.2, can then serve the same port); the fixture
        itself always talks over the socket."""
        if not shutil.which(REDIS_SERVER):
            raise Skip("redis-server not installed (mk/deps.sh installs it)")
        self.tmp = tempfile.mkdtemp(prefix="ptxcache-redis-")
        self.socket = os.path.join(self.tmp, "redis.sock")
        self.url = "unix:" + self.socket
        self.log_path = os.path.join(self.tmp, "redis.log")
        self.host = host
        self.port = port
        if tcp and not port:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                s.bind((host, 0))
                self.port = s.getsockname()[1]
        self.args = [REDIS_SERVER, "--port", str(self.port), "--bind", host,
                     "--unixsocket", self.socket,
                     "--unixsocketperm", "700", "--save", "", "--appendonly", "no",
                     "--daemonize", "no", "--dir", self.tmp, "--logfile", self.log_path,
                     "--enable-debug-command", "local"] + list(extra)
        self.proc = None
        self._conn = None
        if start:
            self.start()

    # ---- life cycle ---------------------------------------------------

    def start(self, timeout=20):
        assert self.proc is None or self.proc.poll() is not None, "already running"
        self.proc = subprocess.Popen(self.args, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError("redis-server exited with %s:\n%s"
                                     % (self.proc.returncode, self.logtext()))
            try:
                if self.command("PING") == "PONG":
                    return self
            except (OSError, ConnectionError, RedisError):
                self._close()
            time.sleep(0.02)
        raise AssertionError("redis-server did not answer PING within %d s" % timeout)

    def stop(self):
        """Stop it (SIGTERM, then SIGKILL); its data is gone (no persistence)."""
        self._close()
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def tcp_url(self, db=0, user=None, password=None):
        assert self.port, "started without tcp=True"
        cred = ""
        if password is not None:
            cred = "%s:%s@" % (user or "", password)
        return "redis://%s%s:%d/%d" % (cred, self.host, self.port, db)

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def logtext(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def cleanup(self):
        self.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.cleanup()

    # ---- commands -----------------------------------------------------

    def _close(self):
        if self._conn:
            self._conn[0].close()
            self._conn = None

    def _connect(self, timeout=10):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(timeout)
        s.connect(self.socket)
        return s, _Reader(s)

    def command(self, *args):
        """One command on the fixture's own connection; its reply (bytes,
        str for status replies, int, list or None), or RedisError."""
        if self._conn is None:
            self._conn = self._connect()
        s, r = self._conn
        try:
            s.sendall(_encode(args))
            return r.reply()
        except (OSError, ConnectionError):
            self._close()
            raise

    def get(self, key):
        return self.command("GET", key)

    def set(self, key, value):
        return self.command("SET", key, value)

    def delete(self, *keys):
        return self.command("DEL", *keys)

    def keys(self, pattern="*", db=0):
        if db:
            self.command("SELECT", db)
        try:
            return sorted(k.decode() for k in self.command("KEYS", pattern))
        finally:
            if db:
                self.command("SELECT", 0)

    def flushall(self):
        return self.command("FLUSHALL")

    def info(self, section):
        text = self.command("INFO", section).decode()
        return dict(l.split(":", 1) for l in text.splitlines() if ":" in l)

    def calls(self, command):
        """How many times command (e.g. "getrange", "set") was served since
        the start or the last reset_stats()."""
        v = self.info("commandstats").get("cmdstat_" + command.lower())
        if not v:
            return 0
        return int(dict(kv.split("=") for kv in v.split(","))["calls"])

    def reset_stats(self):
        return self.command("CONFIG", "RESETSTAT")

    # ---- making it slow -----------------------------------------------

    def pause(self, ms):
        """CLIENT PAUSE: for ms, every client's commands wait (this one's
        reply comes at once); connections are still accepted."""
        return self.command("CLIENT", "PAUSE", int(ms), "ALL")

    def sleep(self, seconds):
        """DEBUG SLEEP on a connection of its own, in a thread: the whole
        server stops answering for that long. Returns the thread."""
        def run():
            s, r = self._connect(timeout=seconds + 30)
            try:
                s.sendall(_encode(["DEBUG", "SLEEP", str(seconds)]))
                r.reply()
            finally:
                s.close()
        t = threading.Thread(target=run, daemon=True)
        t.start()
        # Asleep, nothing can be asked of it: give the command time to
        # arrive (a grace period, not a measurement).
        time.sleep(0.05)
        return t
