# SPDX-License-Identifier: Apache-2.0
"""The shared tier end to end: two real daemons (two nodes, separate cache
directories) and one real redis-server."""
import concurrent.futures
import contextlib
import json
import os
import resource
import selectors
import signal
import socket
import sys
import tempfile
import threading
import time

from harness import ROOT, SANITIZED, TRITON_FLAGS, Daemon, Skip, llc, status_kb, triton_kernels
from redis_fixture import RedisServer
from test_l2_live import unseal

sys.path.insert(0, os.path.join(ROOT, "python"))
from ptxcache import Client  # noqa: E402

SECRET = b"cluster secret for the tests\n"


def node(redis, tmp, *extra):
    """A daemon on the tier's defaults."""
    secret = os.path.join(tmp, "secret")
    with open(secret, "wb") as f:
        f.write(SECRET)
    return Daemon(extra=["--l2", redis.url, "--l2-secret-file", secret] + list(extra))


def compile_all(d, kernels):
    return [d.cli("llc", *TRITON_FLAGS, k, "-o", "-").stdout for k in kernels]


def wait_for(pred, what, limit=60):
    deadline = time.time() + limit
    while not pred():
        assert time.time() < deadline, "timed out waiting for " + what
        time.sleep(0.05)


def secret_file(tmp):
    path = os.path.join(tmp, "secret")
    with open(path, "wb") as f:
        f.write(SECRET)
    return path


class HostileRedis:
    """A Redis on loopback ports that answers every GETRANGE with a reply
    whose header claims billions: "*2000000000" and then nothing (array),
    or "$3000000000" and zeros as fast as they go (bulk); or an array
    that claims a million and brings 40 strings of 8 MiB, then nothing
    (elements); or with nil and a "+OK" no command asked for (extra). Or a
    cluster: of
    itself alone (ask), with an ASK redirection to itself, whose ASKING's
    "+OK" trickles for 3 s; or whose first slot map names 1,023 masters
    of its own ports, and every later one a master at a port of its own
    no map named before, which answers gets with nil, where every other
    port sends them with a MOVED (churn). +OK to anything else. No real
    Redis sends these; one under an attacker's control may."""

    def __init__(self, mode):
        self.mode, self.sent, self.maps = mode, 0, 0
        self.socks = [self._listen() for _ in range(1025 if mode == "churn" else 1)]
        self.port = self.socks[0].getsockname()[1]
        self.other = self.socks[-1].getsockname()[1]
        self.url = ("redis-cluster://127.0.0.1:%d" if mode in ("ask", "churn") else
                    "redis://127.0.0.1:%d/0") % self.port
        threading.Thread(target=self._accept, daemon=True).start()

    def _listen(self):
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        return sock

    def _accept(self):
        with selectors.DefaultSelector() as sel:
            for sock in self.socks:
                sel.register(sock, selectors.EVENT_READ)
            while True:
                for key, _ in sel.select():
                    try:
                        c, _ = key.fileobj.accept()
                    except OSError:
                        return
                    threading.Thread(target=self._serve,
                                     args=(c, key.fileobj.getsockname()[1]), daemon=True).start()

    @staticmethod
    def _slots(ranges):
        return b"*%d\r\n" % len(ranges) + b"".join(
            b"*3\r\n:%d\r\n:%d\r\n*2\r\n$9\r\n127.0.0.1\r\n:%d\r\n" % r for r in ranges)

    def _serve(self, c, port):
        f = c.makefile("rb")
        try:
            while True:
                line = f.readline()
                if not line:
                    return
                args = [f.read(int(f.readline()[1:]) + 2)[:-2] for _ in range(int(line[1:]))]
                cmd = args[0].upper()
                if cmd == b"CLUSTER":
                    self.maps += 1
                    c.sendall(self._slots([(i, i, sock.getsockname()[1])
                                           for i, sock in enumerate(self.socks[1:-1])]
                                          if self.mode == "churn" and self.maps == 1 else
                                          [(0, 16383, self.other)]))
                elif cmd == b"ASKING":
                    c.sendall(b"+")
                    for _ in range(150):
                        time.sleep(0.02)
                        c.sendall(b"O")
                    c.sendall(b"K\r\n")
                elif cmd != b"GETRANGE":
                    c.sendall(b"+OK\r\n")
                elif self.mode == "ask":
                    c.sendall(b"-ASK 1 127.0.0.1:%d\r\n" % self.port)
                elif self.mode == "churn":
                    c.sendall(b"$-1\r\n" if port == self.other else
                              b"-MOVED %d 127.0.0.1:%d\r\n" % (self.slot(args[1]), self.other))
                elif self.mode == "array":
                    c.sendall(b"*2000000000\r\n")
                elif self.mode == "elements":
                    block = b"$%d\r\n%s\r\n" % (8 << 20, bytes(8 << 20))
                    c.sendall(b"*1000000\r\n")
                    for _ in range(40):
                        c.sendall(block)
                        self.sent += len(block)
                    time.sleep(30)
                elif self.mode == "extra":
                    c.sendall(b"$-1\r\n+OK\r\n")
                else:
                    c.sendall(b"$3000000000\r\n")
                    block = bytes(1 << 20)
                    while True:
                        c.sendall(block)
                        self.sent += len(block)
        except OSError:
            return
        finally:
            c.close()

    @staticmethod
    def slot(key):
        """The cluster's hash slot of key (no hash tags in the tier's keys)."""
        crc = 0
        for b in key:
            crc ^= b << 8
            for _ in range(8):
                crc = (crc << 1) ^ 0x1021 if crc & 0x8000 else crc << 1
        return (crc & 0xffff) % 16384

    def close(self):
        for sock in self.socks:
            sock.close()


@contextlib.contextmanager
def on_hostile_redis(mode):
    """A daemon whose tier is a HostileRedis(mode): (daemon, redis)."""
    with tempfile.TemporaryDirectory() as t:
        redis = HostileRedis(mode)
        try:
            with Daemon(workers=1, extra=["--l2", redis.url, "--l2-secret-file",
                                          secret_file(t)]) as d:
                yield d, redis
        finally:
            redis.close()


def test_a_redis_whose_replies_claim_billions_holds_neither_the_loop_nor_memory():
    # hiredis takes a reply's header on trust: an array of 2e9 allocated at
    # once and freed for 40 s on the loop; a bulk of 3 GB buffered whole;
    # an array's strings kept until its last (320 MB here, and on until the
    # command's 10 s bound). A reply past what the tier can ask for ends
    # its connection: the get misses, the daemon answers everyone, its
    # memory stays near a chunk.
    for mode in ("array", "bulk", "elements"):
        with on_hostile_redis(mode) as (d, redis):
            base = status_kb(d.proc.pid, "VmRSS")
            with Client(d.socket, timeout=5) as c:
                assert c.artifact_get("t", "k").value is None
                for _ in range(3):
                    c.ping()    # within 5 s: the loop is not held
                    time.sleep(1)
                s = c.stats()
            peak = status_kb(d.proc.pid, "VmHWM") - base
            if mode == "array":     # refused at its header
                assert s["l2_errors"] >= 1, (mode, s)
            else:                   # dropped at a chunk's bytes, or the 10 s bound;
                                    # at 64 MiB of an array's strings
                assert s["l2_errors"] + s["l2_timeouts"] >= 1, (mode, s)
                assert SANITIZED or peak < 160 << 10, (mode, peak, redis.sent)


def test_a_reply_no_command_asked_for_ends_its_connection_not_the_daemon():
    # hiredis 0.14 takes a reply with no command waiting for a
    # subscriber's and asserts: the daemon aborted on 15 bytes from Redis.
    with on_hostile_redis("extra") as (d, _), Client(d.socket, timeout=5) as c:
        for _ in range(3):
            assert c.artifact_get("t", "k").value is None
        c.ping()
        s = c.stats()
    assert s["l2_misses"] == 3, s       # each asked Redis again


def test_redirections_that_trickle_end_within_a_commands_bound():
    # Each ASK sends the command again, and each ASKING answer trickles
    # for 3 s: the command's 10 s bound counts from its first send (it
    # started again at each, up to 60 s), so the get is answered within it.
    with on_hostile_redis("ask") as (d, _), Client(d.socket) as c:
        t0 = time.time()
        assert c.artifact_get("t", "k").value is None
        took = time.time() - t0
        s = c.stats()
    assert took < 14, took      # the bound is 10 s: at 60 s, redirections' sum
    assert s["l2_redirects"] >= 2 and s["l2_misses"] == 0, s


def test_a_slot_map_of_1023_masters_once_does_not_keep_the_cluster_out():
    # The first map names 1,023 masters (with the seed, the most nodes the
    # daemon keeps: a hostile map, or a fleet whose masters came back at new
    # addresses month after month); then the cluster's one master is at a
    # new address. The nodes no map names any longer make room for it: gets
    # reach it (misses) rather than failing until a restart.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 2048:
        raise Skip("1,025 listening sockets need a descriptor limit of 2,048")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 2048), hard))
    with on_hostile_redis("churn") as (d, redis):
        with Client(d.socket) as c:
            for _ in range(50):
                assert c.artifact_get("t", "k").value is None
                s = c.stats()
                if s["l2_misses"]:
                    break
                time.sleep(0.2)
        assert s["l2_misses"] >= 1 and s["l2_map_refreshes"] >= 2, s
        assert redis.maps >= 2 and "unusable slot map" not in d.logtext()


def test_second_node_gets_first_nodes_kernels_without_compiling():
    kernels = triton_kernels()[:6]
    with RedisServer() as r, tempfile.TemporaryDirectory() as t:
        with node(r, t) as a:
            first = compile_all(a, kernels)
            # Each compile twice: at once for its user alone, and for
            # everyone once confirmed (sharing = confirm, flight.c).
            wait_for(lambda: a.stats()["l2_writes"] == 2 * len(kernels), "writes to Redis")
        with node(r, t) as b:
            second = compile_all(b, kernels)
            s = b.stats()
            assert s["compiles"] == 0 and s["l2_hits"] == len(kernels), s
            assert s["entries"] == len(kernels), s       # stored locally too
            assert first == second == [llc(TRITON_FLAGS + [k, "-o", "-"]).stdout for k in kernels]
            # Now local hits: Redis is not asked again.
            compile_all(b, kernels)
            assert b.stats()["l2_hits"] == len(kernels)


def test_read_only_node_publishes_nothing():
    k = triton_kernels()[:2]
    with RedisServer() as r, tempfile.TemporaryDirectory() as t:
        with node(r, t, "--l2-read-only", "yes") as a:
            compile_all(a, k)
            assert a.stats()["l2_writes"] == 0
        assert r.keys("ptxcache:*") == []


def test_tampered_values_are_rejected_compiled_locally_never_stored():
    kernels = triton_kernels()[:5]
    with RedisServer() as r, tempfile.TemporaryDirectory() as t:
        with node(r, t) as a:
            compile_all(a, kernels)
            wait_for(lambda: a.stats()["l2_writes"] == 2 * len(kernels), "writes to Redis")
        # The values for everyone are tampered with; the user's own (the
        # same bytes, not confirmed yet) are gone.
        for k in r.keys("ptxcache:own:*"):
            r.delete(k)
        keys = sorted(r.keys("ptxcache:*"))
        assert len(keys) == len(kernels)
        good = [r.get(k) for k in keys]
        flip = bytearray(good[0])
        flip[len(flip) // 2] ^= 1
        r.set(keys[0], bytes(flip))                     # a flipped payload byte
        bad_mac = bytearray(good[1])
        bad_mac[-1] ^= 0x80
        r.set(keys[1], bytes(bad_mac))                  # a broken tag
        r.set(keys[2], good[3])                         # another key's valid value
        r.set(keys[3], good[3][:4] + b"\x09" + good[3][5:])  # wrong version
        r.set(keys[4], good[4][: len(good[4]) // 2])    # truncated
        with node(r, t) as b:
            out = compile_all(b, kernels)
            s = b.stats()
            assert s["l2_rejects"] == 5 and s["l2_hits"] == 0, s
            assert out == [llc(TRITON_FLAGS + [k, "-o", "-"]).stdout for k in kernels]
            # Each compile is confirmed in the background before it is
            # published again (sharing = confirm): one more compile each,
            # in idle time.
            wait_for(lambda: b.stats()["confirmations"] == len(kernels), "confirmations")
            s = b.stats()
            assert s["compiles"] == s["confirm_compiles"] == len(kernels), s
            wait_for(lambda: b.stats()["l2_writes"] == 2 * len(kernels), "writes to Redis")
            # What B stored came from its own compiles: repeats are local
            # hits with the right bytes.
            assert compile_all(b, kernels) == out
            assert b.stats()["compiles"] == len(kernels)


def test_redis_gone_and_back_every_request_answered():
    kernels = triton_kernels()[:12]
    with RedisServer() as r, tempfile.TemporaryDirectory() as t:
        with node(r, t) as a:
            compile_all(a, kernels[:2])
            r.stop()
            out = compile_all(a, kernels[2:10])
            assert all(out), "a request went unanswered"
            s = a.stats()
            assert s["l2_errors"] + s["l2_timeouts"] >= 1 and s["l2_breaker_opens"] >= 1, s
            r.start()
            # Recovery: the breaker's probe finds Redis again and writes go on.
            before = a.stats()["l2_writes"]

            def recovered():
                a.cli("compile", "-", input=("; %f\n" % time.time()).encode() + open(kernels[10], "rb").read())
                return a.stats()["l2_writes"] > before
            wait_for(recovered, "recovery after Redis returned")


def test_slow_redis_times_out_and_requests_are_answered():
    k = triton_kernels()[:3]
    with RedisServer() as r, tempfile.TemporaryDirectory() as t:
        with node(r, t) as a:
            sleeper = r.sleep(2)
            out = compile_all(a, k)
            sleeper.join()
            assert all(out)
            assert a.stats()["l2_timeouts"] >= 1, a.stats()


def test_burst_of_identical_requests_reads_redis_once():
    k = triton_kernels()[0]
    with RedisServer() as r, tempfile.TemporaryDirectory() as t:
        with node(r, t) as a:
            compile_all(a, [k])
            wait_for(lambda: a.stats()["l2_writes"] == 2, "the write to Redis, once confirmed")
        r.reset_stats()
        with node(r, t, "--workers", "1") as b:
            with concurrent.futures.ThreadPoolExecutor(8) as ex:
                outs = list(ex.map(lambda _: compile_all(b, [k])[0], range(8)))
            assert len(set(outs)) == 1
            s = b.stats()
            reads = r.calls("getrange") + r.calls("get")
            assert reads == 1, (reads, s)
            assert s["compiles"] == 0 and s["l2_hits"] == 1, s


def test_sealed_value_with_impossible_status_is_compiled_not_trusted():
    """A value that verifies (right secret, identity, key) but carries a
    status no daemon stores: the request compiles locally and the bad value
    is never answered or stored."""
    from test_l2_live import seal
    k = triton_kernels()[0]
    ir = open(k, "rb").read()
    with RedisServer() as r, tempfile.TemporaryDirectory() as t:
        with node(r, t, "--l2-read-only", "yes") as a:
            key = json.loads(a.cli("compile", "--json", "-", input=ir).stdout)["key"]
            identity = a.stats()["compiler"].encode()
        r.set("ptxcache:" + key, seal(key, b"not ptx", kind=1, status=99,
                                     identity=identity, secret=SECRET.rstrip(b"\n")))
        # sharing = trust: the count below is of this request's compiles
        # alone, without the background confirmation of sharing = confirm.
        with node(r, t, "--sharing", "trust") as b:
            got = json.loads(b.cli("compile", "--json", "-", input=ir).stdout)
            s = b.stats()
            assert got["status"] == "ok" and "not ptx" not in got["ptx"], got
            assert s["compiles"] == 1 and s["l2_hits"] in (0, 1), s
            again = json.loads(b.cli("compile", "--json", "-", input=ir).stdout)
            assert again["cached"] and again["ptx"] == got["ptx"]


def write_conf(path, **settings):
    """A config file: l2_secret_file=... becomes l2-secret-file = ..."""
    with open(path, "w") as f:
        for name, value in settings.items():
            f.write("%s = %s\n" % (name.replace("_", "-"), value))


def reload(d, n):
    """SIGHUP, then wait for the daemon's n-th "configuration reloaded"."""
    d.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: d.logtext().count("configuration reloaded") >= n, "reload %d" % n)


def test_sighup_moves_the_shared_tier_and_answers_the_lookup_in_flight():
    """SIGHUP applies the Redis tier's settings (address, secret file,
    prefix, read-only, timeouts) without a restart; a lookup in flight on
    the old server when the reload comes is answered from it, checked
    under the secret it was sent with, and nothing counts as an error."""
    k1, k2, k3 = triton_kernels()[:3]
    new_secret = b"the rotated cluster secret"
    with RedisServer() as ra, RedisServer() as rb, tempfile.TemporaryDirectory() as t:
        # Another node has published k2 to A.
        with node(ra, t) as other:
            compile_all(other, [k2])
            wait_for(lambda: other.stats()["l2_writes"] == 2, "the write to A, once confirmed")
        s2 = os.path.join(t, "secret2")
        with open(s2, "wb") as f:
            f.write(new_secret + b"\n")
        conf = os.path.join(t, "ptxcached.conf")
        # The one tuned timeout in the tier's tests, as the setting is part
        # of what the reload applies: the lookup held across the reload
        # waits on a Redis that is silent for 2 s (DEBUG SLEEP).
        write_conf(conf, l2=ra.url, l2_secret_file=os.path.join(t, "secret"),
                   l2_timeout_ms=20000)
        # sharing = trust: compiles counted are the requests' own (no
        # background confirmation before publishing).
        with Daemon(extra=["--config", conf, "--log-level", "info", "--sharing", "trust"]) as d:
            compile_all(d, [k1])
            wait_for(lambda: d.stats()["l2_writes"] == 1, "the write to A")
            # A stops answering for a while; the lookup of k2 waits on it.
            sleeper = ra.sleep(2)
            with concurrent.futures.ThreadPoolExecutor(1) as ex:
                pending = ex.submit(compile_all, d, [k2])
                wait_for(lambda: d.stats()["misses"] == 2, "the lookup of k2 going to A")
                write_conf(conf, l2=rb.url, l2_secret_file=s2, l2_prefix="p2:",
                           l2_timeout_ms=20000)
                reload(d, 1)
                # Meanwhile the tier is B's: a miss there, compiled, written.
                compile_all(d, [k3])
                wait_for(lambda: d.stats()["l2_writes"] == 2, "the write to B")
                out = pending.result(timeout=120)
            sleeper.join()
            s = d.stats()
            assert out == [llc(TRITON_FLAGS + [k2, "-o", "-"]).stdout], out
            assert s["l2_hits"] == 1 and s["compiles"] == 2, s      # k2 came from A
            assert s["l2_errors"] == 0 and s["l2_timeouts"] == 0 and s["l2_rejects"] == 0, s
            keys = rb.keys("p2:*")
            assert len(keys) == 1 and rb.keys("ptxcache:*") == [], rb.keys()
            everyones = [k for k in ra.keys("ptxcache:*") if not k.startswith("ptxcache:own:")]
            assert ra.keys("p2:*") == [] and len(everyones) == 2, ra.keys()
            identity = s["compiler"].encode()
            value = rb.get(keys[0])
            assert unseal(keys[0], value, identity=identity, secret=new_secret)
            try:
                unseal(keys[0], value, identity=identity, secret=SECRET.rstrip(b"\n"))
                raise AssertionError("sealed under the old secret")
            except AssertionError as e:
                assert "does not open" in str(e), e
            # Read-only from the next reload on: B gets nothing more.
            write_conf(conf, l2=rb.url, l2_secret_file=s2, l2_prefix="p2:", l2_read_only="yes")
            reload(d, 2)
            compile_all(d, [triton_kernels()[3]])
            assert d.stats()["compiles"] == 3
            time.sleep(0.2)     # a write, were there one, would be on its way
            assert len(rb.keys("p2:*")) == 1 and d.stats()["l2_writes"] == 2
            # An unreadable secret file: the tier keeps its settings.
            write_conf(conf, l2=ra.url, l2_secret_file=os.path.join(t, "missing"))
            reload(d, 3)
            assert "the shared tier keeps its settings" in d.logtext(), d.logtext()
            compile_all(d, [k2])        # a local hit now: nothing asked of A
            assert d.stats()["l2_hits"] == 1


def test_host_name_resolved_again_when_reconnecting():
    """The URL names a host; the name moves to another address (here: a
    private /etc/hosts, in a mount namespace of the daemon's own) and the
    old server goes away. Without a restart, the daemon's next connection
    goes where the name points now."""
    if os.geteuid() != 0:
        raise Skip("needs root for a private /etc/hosts")
    name = "redis.ptxcache.test"
    with RedisServer(tcp=True) as ra, tempfile.TemporaryDirectory() as t:
        with RedisServer(tcp=True, host="127.0.0.2", port=ra.port) as rb:
            hosts = os.path.join(t, "hosts")
            with open(hosts, "w") as f:
                f.write("127.0.0.1 %s\n" % name)
            secret = os.path.join(t, "secret")
            with open(secret, "wb") as f:
                f.write(SECRET)
            wrap = ["unshare", "-m", "sh", "-c", 'mount --bind "$0" /etc/hosts && exec "$@"', hosts]
            with Daemon(wrap=wrap, extra=["--l2", "redis://%s:%d/0" % (name, ra.port),
                                          "--l2-secret-file", secret, "--log-level", "info"]) as d:
                kernels = triton_kernels()
                compile_all(d, kernels[:1])
                # The user's own entry, then everyone's once confirmed: both
                # land on A before the name moves.
                wait_for(lambda: d.stats()["l2_writes"] == 2, "the writes to A")
                assert ra.keys("ptxcache:*") and rb.keys("ptxcache:*") == []
                with open(hosts, "w") as f:       # the same file: the mount follows it
                    f.write("127.0.0.2 %s\n" % name)
                ra.stop()
                n = [0]

                def moved():
                    n[0] += 1
                    ir = ("; %d\n" % n[0]).encode() + open(kernels[1], "rb").read()
                    d.cli("compile", "-", input=ir)
                    return rb.keys("ptxcache:*") != []
                wait_for(moved, "a write reaching the server the name points to now", limit=30)
                assert "'%s' now resolves to 127.0.0.2 (was 127.0.0.1)" % name in d.logtext()
