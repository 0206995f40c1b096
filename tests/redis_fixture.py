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

    with RedisCluster() as c:    # 3 masters, a replica each, on TCP
        c.url                    # "redis-cluster://127.0.0.1:P1,...", for l2 = ...
        c.masters(); c.owner(slot); c.kill_master(node)   # and its replica takes over
        c.migrate_slot(slot, to) # or begin_migration / move_keys / finish_migration
        c.freeze(node); c.thaw(node)        # SIGSTOP / SIGCONT: one shard silent
        c.stop_all(); c.start_all()         # the whole cluster gone, then back

    with Gate(r, before_command=f, before_reply=g) as gate:   # a proxy, gate.url
        ...                      # f(args) runs before each command goes on,
                                 # g(args of its command) before each reply

Raises harness.Skip when redis-server (or, for a cluster, redis-cli) is not
installed (mk/deps.sh installs them).
"""
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from typing import Callable, Dict, List, Optional

from harness import Skip

REDIS_SERVER = os.environ.get("REDIS_SERVER", "redis-server")
REDIS_CLI = os.environ.get("REDIS_CLI", "redis-cli")


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


# ---- a Redis Cluster ---------------------------------------------------


def _free_cluster_port(host: str, taken: List[int]) -> int:
    """A port p free on host with p + 10000 (its cluster bus) free too."""
    for _ in range(200):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((host, 0))
            p = s.getsockname()[1]
        if p + 10000 > 65535 or p in taken or p + 10000 in taken:
            continue
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                s.bind((host, p + 10000))
        except OSError:
            continue
        return p
    raise AssertionError("no free port pair for a cluster node")


class ClusterNode(RedisServer):
    """One redis-server in cluster mode: TCP on 127.0.0.1 (what the cluster
    announces), its own temp dir and nodes.conf; the fixture's own
    connection is its Unix socket."""

    def __init__(self, port: int, node_timeout_ms: int):
        super().__init__(start=False, tcp=True, port=port, extra=[
            "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
            "--cluster-node-timeout", str(node_timeout_ms),
            "--cluster-replica-validity-factor", "0",
            "--cluster-require-full-coverage", "no",
            "--cluster-allow-reads-when-down", "no"])
        self.frozen = False

    def myid(self) -> str:
        return self.command("CLUSTER", "MYID").decode()

    def cluster_info(self) -> Dict[str, str]:
        text = self.command("CLUSTER", "INFO").decode()
        return dict(l.strip().split(":", 1) for l in text.splitlines() if ":" in l)

    def role(self) -> str:
        return self.info("replication").get("role", "").strip()

    def dbsize(self) -> int:
        return self.command("DBSIZE")

    def stop(self):
        if self.frozen:
            self.thaw()
        super().stop()

    def kill(self):
        """SIGKILL: gone at once, as a crashed machine."""
        self._close()
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.frozen = False

    def freeze(self):
        """SIGSTOP: connections stay open, nothing is answered."""
        self._close()
        self.proc.send_signal(signal.SIGSTOP)
        self.frozen = True

    def thaw(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
        self.frozen = False


class RedisCluster:
    """masters redis-servers in cluster mode with replicas each, created
    with redis-cli --cluster create; cleanup() leaves no process behind."""

    def __init__(self, masters: int = 3, replicas: int = 1, node_timeout_ms: int = 1000):
        if not shutil.which(REDIS_SERVER) or not shutil.which(REDIS_CLI):
            raise Skip("redis-server or redis-cli not installed (mk/deps.sh installs them)")
        self.host = "127.0.0.1"
        self.nodes: List[ClusterNode] = []
        try:
            taken: List[int] = []
            for _ in range(masters * (1 + replicas)):
                p = _free_cluster_port(self.host, taken)
                taken += [p, p + 10000]
                self.nodes.append(ClusterNode(p, node_timeout_ms))
            for n in self.nodes:
                n.start()
            r = subprocess.run([REDIS_CLI, "--cluster", "create"]
                               + ["%s:%d" % (self.host, n.port) for n in self.nodes]
                               + ["--cluster-replicas", str(replicas), "--cluster-yes"],
                               capture_output=True, text=True, timeout=120)
            if r.returncode != 0:
                raise AssertionError("redis-cli --cluster create failed:\n%s%s"
                                     % (r.stdout, r.stderr))
            self.wait_ok()
        except BaseException:
            self.cleanup()
            raise

    # ---- addresses ------------------------------------------------------

    @property
    def url(self) -> str:
        """Every node as a seed, as l2 = takes it."""
        return "redis-cluster://" + ",".join("%s:%d" % (self.host, n.port) for n in self.nodes)

    def seed_url(self, *nodes: ClusterNode) -> str:
        return "redis-cluster://" + ",".join("%s:%d" % (self.host, n.port) for n in nodes)

    def alive(self) -> List[ClusterNode]:
        return [n for n in self.nodes if n.running() and not n.frozen]

    def by_port(self, port: int) -> ClusterNode:
        return next(n for n in self.nodes if n.port == port)

    def slots(self, via: Optional[ClusterNode] = None) -> List[list]:
        via = via or self.alive()[0]
        return via.command("CLUSTER", "SLOTS")

    def owner(self, slot: int, via: Optional[ClusterNode] = None) -> ClusterNode:
        for start, end, master, *_ in self.slots(via):
            if start <= slot <= end:
                return self.by_port(master[1])
        raise AssertionError("slot %d is not served" % slot)

    def masters(self) -> List[ClusterNode]:
        ports = sorted({e[2][1] for e in self.slots()})
        return [self.by_port(p) for p in ports]

    def replica_of(self, master: ClusterNode) -> ClusterNode:
        mid = master.myid()
        for n in self.alive():
            if n is not master:
                info = n.command("CLUSTER", "NODES").decode()
                for line in info.splitlines():
                    f = line.split()
                    if "myself" in f[2] and f[3] == mid:
                        return n
        raise AssertionError("no replica of %d" % master.port)

    def keyslot(self, key) -> int:
        return self.alive()[0].command("CLUSTER", "KEYSLOT", key)

    def countkeys(self, node: ClusterNode) -> int:
        """Keys held by node's own slots (DBSIZE on a master)."""
        return node.dbsize()

    # ---- waiting --------------------------------------------------------

    def wait_ok(self, timeout: float = 60):
        """Until every live node says cluster_state:ok, all 16384 slots
        are served and every replica's link to its master is up."""
        deadline = time.time() + timeout
        last = None
        while time.time() < deadline:
            try:
                ok = True
                for n in self.alive():
                    ci = n.cluster_info()
                    last = (n.port, ci.get("cluster_state"), ci.get("cluster_slots_ok"))
                    if ci.get("cluster_state") != "ok" or ci.get("cluster_slots_ok") != "16384":
                        ok = False
                        break
                    rep = n.info("replication")
                    if rep.get("role") == "slave" and rep.get("master_link_status") != "up":
                        ok = False
                        last = (n.port, "replica link", rep.get("master_link_status"))
                        break
                    # Every node must agree on the owners (a slot moved
                    # but not yet known everywhere answers MOVED in loops).
                if ok and len({str(self.slots(n)) for n in self.alive()}) == 1:
                    return
            except (OSError, ConnectionError, RedisError) as e:
                last = repr(e)
            time.sleep(0.1)
        raise AssertionError("cluster not ok within %d s: %s" % (timeout, last))

    # ---- faults ---------------------------------------------------------

    def kill_master(self, master: ClusterNode, timeout: float = 60) -> ClusterNode:
        """SIGKILL master; returns its replica once that serves the slots."""
        replica = self.replica_of(master)
        master.kill()
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                if replica.role() == "master" and all(
                        e[2][1] != master.port for e in self.slots(replica)):
                    break
            except (OSError, ConnectionError, RedisError):
                pass
            time.sleep(0.1)
        else:
            raise AssertionError("the replica of %d was not promoted" % master.port)
        self.wait_ok(timeout)
        return replica

    def restart(self, node: ClusterNode):
        """Start a killed node again (it rejoins, as a replica if it was
        failed over)."""
        node.start()

    def freeze(self, node: ClusterNode):
        node.freeze()

    def thaw(self, node: ClusterNode):
        node.thaw()

    def set_maxmemory(self, nbytes: int, policy: str = "allkeys-lru"):
        for n in self.alive():
            n.command("CONFIG", "SET", "maxmemory", nbytes)
            n.command("CONFIG", "SET", "maxmemory-policy", policy)

    def begin_migration(self, slot: int, to: ClusterNode) -> ClusterNode:
        """Mark slot MIGRATING on its owner and IMPORTING on to; keys not
        moved yet are served by the owner, the others answer ASK."""
        src = self.owner(slot)
        assert src is not to
        to.command("CLUSTER", "SETSLOT", slot, "IMPORTING", src.myid())
        src.command("CLUSTER", "SETSLOT", slot, "MIGRATING", to.myid())
        return src

    def move_keys(self, slot: int, src: ClusterNode, to: ClusterNode, count: int = 0) -> int:
        """MIGRATE count of slot's keys (0: all) from src to to; how many."""
        moved = 0
        while True:
            want = 100 if not count else min(100, count - moved)
            if want <= 0:
                return moved
            keys = src.command("CLUSTER", "GETKEYSINSLOT", slot, want)
            if not keys:
                return moved
            src.command("MIGRATE", self.host, to.port, "", 0, 10000, "REPLACE", "KEYS", *keys)
            moved += len(keys)

    def finish_migration(self, slot: int, src: ClusterNode, to: ClusterNode):
        """SETSLOT NODE on every master: slot is to's; src answers MOVED."""
        tid = to.myid()
        to.command("CLUSTER", "SETSLOT", slot, "NODE", tid)
        src.command("CLUSTER", "SETSLOT", slot, "NODE", tid)
        for n in self.alive():
            if n not in (src, to) and n.role() == "master":
                n.command("CLUSTER", "SETSLOT", slot, "NODE", tid)
        self.wait_ok()

    def migrate_slot(self, slot: int, to: ClusterNode,
                     between: Optional[Callable[[str], None]] = None):
        """Move slot to to, the way redis-cli --cluster reshard does;
        between(step) runs after each step ("importing", "half moved",
        "all moved"), for load while the slot is on its way."""
        src = self.begin_migration(slot, to)
        if between:
            between("importing")
        n = len(src.command("CLUSTER", "GETKEYSINSLOT", slot, 100000))
        self.move_keys(slot, src, to, count=max(1, n // 2))
        if between:
            between("half moved")
        self.move_keys(slot, src, to)
        if between:
            between("all moved")
        self.finish_migration(slot, src, to)

    def stop_all(self):
        """Every node stopped (SIGTERM: nodes.conf kept, data gone)."""
        for n in self.nodes:
            n.stop()

    def start_all(self, timeout: float = 60):
        """Every node started again with its nodes.conf; back to ok."""
        for n in self.nodes:
            if not n.running():
                n.start()
        self.wait_ok(timeout)

    def cleanup(self):
        for n in self.nodes:
            try:
                n.cleanup()
            except Exception:
                if n.proc and n.proc.poll() is None:
                    n.proc.kill()
                    n.proc.wait()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.cleanup()


# ---- a gate in front of one server ------------------------------------


def _resp_end(buf: bytes, pos: int = 0) -> Optional[int]:
    """Where the RESP item at buf[pos:] ends, or None while incomplete."""
    nl = buf.find(b"\r\n", pos)
    if nl < 0:
        return None
    t, n = buf[pos:pos + 1], buf[pos + 1:nl]
    if t in (b"+", b"-", b":"):
        return nl + 2
    if t == b"$":
        end = nl + 2 + int(n) + 2 if int(n) >= 0 else nl + 2
        return end if end <= len(buf) else None
    if t == b"*":
        pos = nl + 2
        for _ in range(max(int(n), 0)):
            pos = _resp_end(buf, pos)
            if pos is None:
                return None
        return pos
    raise ValueError("bad RESP %r" % buf[pos:pos + 40])


def _resp_args(item: bytes) -> List[bytes]:
    """The strings of a command (an array of bulk strings)."""
    args, pos = [], item.find(b"\r\n") + 2
    while pos < len(item):
        nl = item.find(b"\r\n", pos)
        n = int(item[pos + 1:nl])
        args.append(item[nl + 2:nl + 2 + n])
        pos = nl + 2 + n + 2
    return args


class Gate:
    """A Unix-socket proxy in front of a RedisServer, for a fault that no
    real Redis makes on cue: something happening at an exact point of a
    client's stream of commands. Each command a client sends is parsed and
    handed to before_command(args) (its strings, bytes) before it goes on;
    each reply to before_reply(args of its command) before it goes back.
    Either may block (to hold the stream there) or act on the server through
    its own connection (to change a key between two commands). Replies are
    taken in the order of their commands (RESP2, no pipelining tricks)."""

    def __init__(self, redis: RedisServer, before_command=None, before_reply=None):
        self.redis = redis
        self.before_command = before_command or (lambda args: None)
        self.before_reply = before_reply or (lambda args: None)
        self.path = os.path.join(redis.tmp, "gate-%d.sock" % id(self))
        self.url = "unix:" + self.path
        self.commands: List[List[bytes]] = []     # every command seen, in order
        self.error: Optional[BaseException] = None
        self.lock = threading.Lock()
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.path)
        self.listener.listen(16)
        self.socks: List[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            server.connect(self.redis.socket)
            asked: List[List[bytes]] = []
            cond = threading.Condition()
            self.socks += [client, server]
            threading.Thread(target=self._up, args=(client, server, asked, cond),
                             daemon=True).start()
            threading.Thread(target=self._down, args=(server, client, asked, cond),
                             daemon=True).start()

    def _pump(self, src, dst, item_done):
        buf = b""
        try:
            while True:
                data = src.recv(1 << 20)
                if not data:
                    break
                buf += data
                while True:
                    end = _resp_end(buf)
                    if end is None:
                        break
                    item, buf = buf[:end], buf[end:]
                    item_done(item)
                    dst.sendall(item)
        except (OSError, ValueError, AssertionError) as e:
            if not isinstance(e, OSError):
                self.error = self.error or e
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _up(self, client, server, asked, cond):
        def command(item):
            args = _resp_args(item)
            with self.lock:
                self.commands.append(args)
            with cond:
                asked.append(args)
                cond.notify()
            self.before_command(args)
        self._pump(client, server, command)

    def _down(self, server, client, asked, cond):
        def reply(item):
            with cond:
                cond.wait_for(lambda: asked, timeout=30)
                args = asked.pop(0)
            self.before_reply(args)
        self._pump(server, client, reply)

    def seen(self, pred) -> int:
        """How many commands seen so far pred(args) holds for."""
        with self.lock:
            return sum(1 for a in self.commands if pred(a))

    def close(self):
        self.listener.close()
        for s in self.socks:
            try:
                s.close()
            except OSError:
                pass
        if self.error:
            raise self.error

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
