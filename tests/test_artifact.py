# SPDX-License-Identifier: Apache-2.0
"""Artifact entries (daemon/artifact.c): the JIT's own cache entries, per
scope, produced once across processes, through the real daemon, the real
CLI, real SQLite files and a real redis-server."""
import errno
import os
import signal
import socket
import subprocess
import tempfile
import time

from harness import CLI, Daemon, Raw, Skip, frame, mp_pack, mp_unpack
from redis_fixture import RedisServer
from sysutil import cli_as, make_reachable, tmpfs

GET, PUT, RELEASE, PROGRESS, ERROR = 10, 11, 12, 0xfe, 0xff
B = 65534   # nobody: the second user


class Client:
    """One connection speaking the artifact requests; progress frames are
    collected, not answered."""

    def __init__(self, path, timeout=30):
        self.raw = Raw(path, timeout=timeout)
        self.next_id = 0
        self.progress = 0

    def send(self, ftype, **fields):
        self.next_id += 1
        self.raw.send(frame(ftype, mp_pack(dict(id=self.next_id, **fields))))
        return self.next_id

    def reply(self, want_id=None):
        while True:
            f = self.raw.recv_frame(progress=True)
            assert f is not None, "the daemon closed the connection"
            ftype, body = f[0], mp_unpack(f[1])
            if ftype == PROGRESS:
                self.progress += 1
                continue
            if want_id is None or body.get("id") == want_id:
                return ftype, body

    def call(self, ftype, **fields):
        return self.reply(self.send(ftype, **fields))

    def get(self, ns, key, **kw):
        ftype, body = self.call(GET, ns=ns, key=key, **kw)
        assert ftype in (GET | 0x80, ERROR), ftype
        return body

    def put(self, ns, key, value, **kw):
        return self.call(PUT, ns=ns, key=key, value=value, **kw)[1]

    def close(self):
        self.raw.close()


def cli(d, *args, input=None):
    return subprocess.run([CLI, "--socket", d.socket] + list(args), input=input,
                          capture_output=True, timeout=120)


def reachable_daemon(extra=()):
    if os.geteuid() != 0:
        raise Skip("needs root to run clients as other users")
    d = Daemon(workers=1, extra=["--allow-users", str(B)] + list(extra))
    make_reachable(d.socket)
    return d


def test_cli_put_get_exit_codes_and_bytes():
    value = os.urandom(300000)
    with Daemon(workers=1) as d:
        r = cli(d, "artifact", "get", "triton", "k1")
        assert r.returncode == 1 and r.stdout == b"", r
        with tempfile.NamedTemporaryFile() as f:
            f.write(value)
            f.flush()
            assert cli(d, "artifact", "put", "triton", "k1", f.name).returncode == 0
        r = cli(d, "artifact", "get", "triton", "k1")
        assert r.returncode == 0 and r.stdout == value
        out = os.path.join(d.tmp, "got")
        assert cli(d, "artifact", "get", "triton", "k1", "-o", out).returncode == 0
        assert open(out, "rb").read() == value
        # Another namespace, another key: misses.
        assert cli(d, "artifact", "get", "inductor-fx", "k1").returncode == 1
        assert cli(d, "artifact", "get", "triton", "k2").returncode == 1
        r = cli(d, "artifact", "get", "Triton!", "k1")
        assert r.returncode == 2 and b"'ns'" in r.stderr, r
        s = d.stats()
        assert (s["artifact_hits"], s["artifact_misses"], s["artifact_puts"]) == (2, 3, 1), s
        assert s["artifact_entries"] == 1 and s["artifact_bytes"] > 0, s
        prom = cli(d, "stats", "--prometheus").stdout.decode()
        assert "ptxcache_artifact_hits_total 2" in prom, prom
        assert "ptxcache_artifact_entries 1" in prom, prom


def test_debug_log_follows_each_get_and_put_by_hash():
    """--log-level debug: one line per answer, naming the connection (and,
    once, its peer's pid), the namespace and the derived key's hash, never
    the client's key."""
    import re
    with Daemon(workers=1, extra=["--log-level", "debug"]) as d:
        with tempfile.NamedTemporaryFile() as f:
            f.write(b"x" * 1000)
            f.flush()
            assert cli(d, "artifact", "put", "triton", "some/path/key", f.name).returncode == 0
        assert cli(d, "artifact", "get", "triton", "some/path/key").returncode == 0
        assert cli(d, "artifact", "get", "triton", "other/path/key").returncode == 1
        text = d.logtext()
        lines = re.findall(r"conn (\d+): artifact (get|put) triton ([0-9a-f]{16}): (.*) \((\d+) bytes\)",
                           text)
        assert [(op, out, n) for _c, op, _h, out, n in lines] == [
            ("put", "stored", "1000"), ("get", "hit", "1000"), ("get", "miss", "0")], text
        assert lines[0][2] == lines[1][2] != lines[2][2], lines
        for conn, *_ in lines:
            assert re.search(r"conn %s: uid %d pid \d+" % (conn, os.geteuid()), text), text
        assert "path/key" not in text


def test_artifacts_survive_restart_and_kill_9():
    with Daemon(workers=1) as d:
        c = Client(d.socket)
        for i in range(20):
            assert c.put("triton", "key%d" % i, b"v%d" % i * 1000)["stored"]
        c.close()
        d.stop(signal.SIGKILL)      # right after the replies
        d.start()
        for i in range(20):
            r = cli(d, "artifact", "get", "triton", "key%d" % i)
            assert r.returncode == 0 and r.stdout == b"v%d" % i * 1000
        assert cli(d, "verify").returncode == 0


def test_a_second_uid_never_sees_the_first_uids_artifact():
    with reachable_daemon() as d:
        c = Client(d.socket)
        assert c.put("inductor-fx", "graph", b"def f(): return 'root'\n")["stored"]
        c.close()
        r = cli_as(d.socket, B, B, "artifact", "get", "inductor-fx", "graph")
        assert r.returncode == 1 and r.stdout == b"", r
        # B's own entry under the same name is B's, and root's stays root's.
        r = cli_as(d.socket, B, B, "artifact", "put", "inductor-fx", "graph", "-",
                   input=b"def f(): return 'nobody'\n")
        assert r.returncode == 0, r.stderr
        assert cli_as(d.socket, B, B, "artifact", "get", "inductor-fx",
                      "graph").stdout == b"def f(): return 'nobody'\n"
        assert cli(d, "artifact", "get", "inductor-fx", "graph").stdout == \
            b"def f(): return 'root'\n"
        # B's listing shows B's artifact alone; show of root's says no such entry.
        ls = cli_as(d.socket, B, B, "ls", "--kind", "artifact", "--json")
        import json
        mine = json.loads(ls.stdout)
        assert len(mine) == 1 and mine[0]["components"]["scope"] == "u%d" % B, mine
        every = json.loads(cli(d, "ls", "--kind", "artifact", "--json").stdout)
        assert len(every) == 2
        roots = [e["key"] for e in every if e["components"]["scope"] == "u0"]
        r = cli_as(d.socket, B, B, "show", roots[0])
        assert r.returncode != 0 and b"no such entry" in r.stderr, r
        # After a restart, the same.
        d.stop()
        d.start()
        make_reachable(d.socket)
        assert cli_as(d.socket, B, B, "artifact", "get", "inductor-fx",
                      "graph").stdout == b"def f(): return 'nobody'\n"
        assert cli(d, "artifact", "get", "inductor-fx", "graph").stdout == \
            b"def f(): return 'root'\n"


def test_a_group_shares_one_scope():
    gid = 4242
    with reachable_daemon(extra=["--artifact-groups", str(gid), "--allow-users",
                                 "%d,54321" % B]) as d:
        r = cli_as(d.socket, B, B, "artifact", "put", "triton", "k", "-", groups=(gid,),
                   input=b"shared")
        assert r.returncode == 0, r.stderr
        r = cli_as(d.socket, 54321, 54321, "artifact", "get", "triton", "k", groups=(gid,))
        assert r.returncode == 0 and r.stdout == b"shared", r
        # The group as a primary group, with no supplementary ones, is in too.
        r = cli_as(d.socket, 54321, gid, "artifact", "get", "triton", "k")
        assert r.returncode == 0 and r.stdout == b"shared", r
        # Outside the group: a miss, for the same uid too.
        assert cli_as(d.socket, 54321, 54321, "artifact", "get", "triton", "k").returncode == 1
        assert cli_as(d.socket, B, B, "artifact", "get", "triton", "k").returncode == 1


def test_sharing_trust_is_one_scope():
    with reachable_daemon(extra=["--sharing", "trust"]) as d:
        assert cli(d, "artifact", "put", "triton", "k", "-", input=b"x").returncode == 0
        r = cli_as(d.socket, B, B, "artifact", "get", "triton", "k")
        assert r.returncode == 0 and r.stdout == b"x", r


def _racer(path, n, go_r, out_w):
    """A child: wait for the pipe, get with a lease, produce if leased."""
    os.read(go_r, 1)
    c = Client(path, timeout=60)
    body = c.get("inductor-fx", "the-graph", lease=True)
    if body.get("found"):
        res = b"hit"
    else:
        assert "lease" in body, body
        time.sleep(0.5)     # the compile
        assert c.put("inductor-fx", "the-graph", b"G" * 5000, lease=body["lease"])["stored"]
        res = b"put"
    os.write(out_w, res + b"\n")
    c.close()


def test_n_processes_one_missing_key_one_put_n_minus_1_hits():
    n = 12
    with Daemon(workers=1) as d:
        go_r, go_w = os.pipe()
        out_r, out_w = os.pipe()
        pids = []
        for i in range(n):
            pid = os.fork()
            if pid == 0:
                try:
                    _racer(d.socket, n, go_r, out_w)
                    os._exit(0)
                except BaseException:
                    import traceback
                    traceback.print_exc()
                    os._exit(1)
            pids.append(pid)
        os.write(go_w, b"x" * n)
        codes = [os.waitpid(p, 0)[1] for p in pids]
        assert codes == [0] * n, codes
        os.close(out_w)
        lines = os.read(out_r, 4096).split()
        assert sorted(lines) == [b"hit"] * (n - 1) + [b"put"], lines
        s = d.stats()
        assert s["artifact_puts"] == 1 and s["artifact_leases"] == 1, s
        assert s["artifact_wait_hits"] + s["artifact_hits"] == n - 1, s


def test_a_producer_killed_hands_the_lease_on_at_once():
    with Daemon(workers=1, extra=["--artifact-lease-timeout", "600"]) as d:
        child = subprocess.Popen(["python3", "-c", """
import sys, time
sys.path.insert(0, %r)
from test_artifact import Client
c = Client(%r)
b = c.get("triton", "k", lease=True)
assert "lease" in b, b
print("leased", flush=True)
time.sleep(600)
""" % (os.path.dirname(os.path.abspath(__file__)), d.socket)], stdout=subprocess.PIPE)
        assert child.stdout.readline() == b"leased\n"
        w = Client(d.socket)
        wid = w.send(GET, ns="triton", key="k", lease=True)
        d.wait_stats(lambda s: s["artifact_waits"] == 1, "w waiting on the child's lease")
        t0 = time.time()
        child.send_signal(signal.SIGKILL)
        child.wait()
        ftype, body = w.reply(wid)
        handed = time.time() - t0
        assert not body["found"] and body["lease"], body
        assert w.progress >= 1, "no progress frame while waiting"
        assert handed < 10, handed  # the bound is 600 s: it was the close
        assert w.put("triton", "k", b"v", lease=body["lease"])["stored"]
        s = d.stats()
        assert s["artifact_lease_closes"] == 1 and s["artifact_lease_handoffs"] == 1, s


def test_a_lease_handed_on_answers_the_new_holders_other_gets_of_the_key():
    # A connection that waits twice for a key and is handed its lease
    # would wait on itself: its other get is answered at once, as a
    # holder's get is (a miss with its token), and another connection's
    # wait goes on until the put.
    with Daemon(workers=1) as d:
        x, c, o = Client(d.socket), Client(d.socket), Client(d.socket)
        assert x.get("triton", "k", lease=True)["lease"]
        # (The second's own bound, 20 s, would answer it without the token.)
        cids = [c.send(GET, ns="triton", key="k", lease=True, wait_ms=ms) for ms in (600000, 20000)]
        assert [c.raw.recv_frame(progress=True)[0] for _ in cids] == [PROGRESS] * 2
        oid = o.send(GET, ns="triton", key="k", lease=True, wait_ms=600000)
        assert o.raw.recv_frame(progress=True)[0] == PROGRESS
        x.close()
        first, second = (c.reply(i)[1] for i in cids)
        assert not first["found"] and first["lease"], first
        assert second == {"id": cids[1], "found": False, "lease": first["lease"]}, second
        assert c.put("triton", "k", b"v", lease=first["lease"])["stored"]
        assert o.reply(oid)[1]["value"] == b"v"
        s = d.stats()
        assert s["artifact_lease_handoffs"] == 1 and s["artifact_wait_timeouts"] == 0, s


def test_release_and_expiry_end_a_lease_early_or_at_its_bound():
    with Daemon(workers=1, extra=["--artifact-lease-timeout", "2"]) as d:
        p, w = Client(d.socket), Client(d.socket)
        lease = p.get("triton", "r", lease=True)["lease"]
        # A release: the entry will not be stored, so every waiter misses at
        # once, one that asked for a lease too.
        wids = [w.send(GET, ns="triton", key="r"), w.send(GET, ns="triton", key="r", lease=True)]
        time.sleep(0.3)
        t0 = time.time()
        ftype, body = p.call(RELEASE, lease=lease)
        assert ftype == RELEASE | 0x80, body
        assert [w.reply(i)[1] for i in wids] == [{"id": i, "found": False} for i in wids]
        assert time.time() - t0 < 1.5
        # A lease not filled ends at its bound; the waiter takes over.
        p.get("triton", "e", lease=True)
        wid = w.send(GET, ns="triton", key="e", lease=True)
        t0 = time.time()
        body = w.reply(wid)[1]
        assert body.get("lease") and 1.5 < time.time() - t0 < 10, (body, time.time() - t0)
        # The expired producer's late put is refused: its lease passed on.
        assert p.put("triton", "e", b"late")["code"] == "conflict"
        s = d.stats()
        assert s["artifact_lease_releases"] == 1 and s["artifact_lease_expiries"] == 1, s


def test_a_waiters_own_timeout_is_a_miss():
    with Daemon(workers=1) as d:
        p, w = Client(d.socket), Client(d.socket)
        p.get("triton", "slow", lease=True)
        t0 = time.time()
        body = w.get("triton", "slow", wait_ms=700)
        assert not body["found"] and "lease" not in body and time.time() - t0 >= 0.6, body
        assert not w.get("triton", "slow", wait_ms=0)["found"]
        assert d.stats()["artifact_wait_timeouts"] == 1


def test_a_stopping_daemon_answers_gets_at_once_and_stores_puts():
    """SIGTERM while a compile finishes: a get on a connection already open
    is a miss at once, with no lease and no wait (the loop ends when the
    compile does, and nobody would be answered then); a put is stored."""
    import threading
    from sysutil import small_ir
    with Daemon(workers=1, extra=["--log-level", "info"]) as d:
        (w,) = d.workers()
        a, b = Client(d.socket), Client(d.socket)
        assert a.put("triton", "before", b"old")["stored"]
        os.kill(w, signal.SIGSTOP)      # hold a compile in flight
        out = {}
        t = threading.Thread(target=lambda: out.update(
            r=d.cli("compile", "-", input=small_ir("stop"), check=False)))
        t.start()
        try:
            d.wait_stats(lambda s: s["jobs_running"] >= 1, "the compile's start")
            d.proc.send_signal(signal.SIGTERM)
            deadline = time.time() + 60
            while "stopping; 1 compiles in flight" not in d.logtext():
                assert time.time() < deadline, d.logtext()
                time.sleep(0.02)
            t0 = time.time()
            got = a.get("triton", "new", lease=True)
            assert got.get("found") is False and "lease" not in got, got
            got = b.get("triton", "new", lease=True)
            assert got.get("found") is False and "lease" not in got, got
            assert time.time() - t0 < 5 and a.progress == b.progress == 0
            assert a.get("triton", "before")["value"] == b"old"
            assert a.put("triton", "new", b"made while stopping")["stored"]
        finally:
            os.kill(w, signal.SIGCONT)
        t.join(120)
        assert out["r"].returncode == 0, out["r"].stderr     # the compile was answered
        assert d.proc.wait(60) == 0, d.logtext()
        a.close()
        b.close()
        d.log.close()
        d.start()
        assert cli(d, "artifact", "get", "triton", "new").stdout == b"made while stopping"


def test_bad_input_gets_clear_errors_and_the_daemon_serves_on():
    with Daemon(workers=1, extra=["--artifact-max-value", "4096",
                                  "--artifact-max-leases", "50"]) as d:
        c = Client(d.socket)
        cases = [
            (dict(ns="", key="k"), "'ns'"),
            (dict(ns="a" * 33, key="k"), "'ns'"),
            (dict(ns="-x", key="k"), "'ns'"),
            (dict(ns="x/y", key="k"), "'ns'"),
            (dict(ns="x", key=""), "'key'"),
            (dict(ns="x", key="k" * 1025), "'key'"),
            (dict(ns="x", key="a\nb"), "'key'"),
            (dict(ns=7, key="k"), "'ns'"),
        ]
        for fields, word in cases:
            ftype, body = c.call(GET, **fields)
            assert ftype == ERROR and body["code"] == "invalid" and word in body["message"], \
                (fields, body)
        body = c.put("x", "big", b"v" * 5000)
        assert body["code"] == "invalid" and "artifact-max-value" in body["message"], body
        body = c.call(PUT, ns="x", key="k", value="a str, not bin")[1]
        assert body["code"] == "invalid", body
        # Another client's lease: a put without it conflicts, with its token is denied.
        o = Client(d.socket)
        tok = o.get("x", "held", lease=True)["lease"]
        assert c.put("x", "held", b"v")["code"] == "conflict"
        assert c.put("x", "held", b"v", lease=tok)["code"] == "denied"
        # A token of this connection's own but for another key, or one that
        # names no lease at all, is denied too, and nothing is stored.
        mine = c.get("x", "mine", lease=True)["lease"]
        assert c.put("x", "other", b"v", lease=mine)["code"] == "denied"
        assert c.put("x", "mine", b"v", lease=mine + 1000)["code"] == "denied"
        assert not c.get("x", "other", wait_ms=0)["found"]
        assert c.put("x", "mine", b"v", lease=mine)["stored"]
        assert c.call(RELEASE, lease=tok)[1]["code"] == "invalid"
        assert c.call(RELEASE, lease=123456789)[1]["code"] == "invalid"
        # A flood of distinct keys: leases past the scope's bound are busy.
        codes = []
        for i in range(60):
            b = c.get("x", "flood%d" % i, lease=True)
            codes.append("lease" if "lease" in b else b.get("code"))
        assert codes.count("lease") == 49 and codes.count("busy") == 11, codes
        c.close()   # its 49 leases end with it
        # Thousands of waiters on one key: all answered by one put.
        waiters = [Client(d.socket) for _ in range(8)]
        ids = [[w.send(GET, ns="x", key="held") for _ in range(250)] for w in waiters]
        time.sleep(0.5)
        assert o.put("x", "held", b"V" * 1000, lease=tok)["stored"]
        for w, wids in zip(waiters, ids):
            for i in wids:
                assert w.reply(i)[1] == {"id": i, "found": True, "value": b"V" * 1000}
        # One connection may not wait on more than 256 requests.
        p = Client(d.socket)
        p.get("x", "again", lease=True)
        w = waiters[0]
        wids = [w.send(GET, ns="x", key="again") for _ in range(257)]
        assert w.reply(wids[-1])[1]["code"] == "busy"
        assert d.cli("ping").returncode == 0
        s = d.stats()
        assert s["artifact_waiting"] == 256 and s["artifact_leases_held"] == 1, s
        p.close()
        for i in wids[:-1]:
            assert not w.reply(i)[1]["found"]
        assert d.stats()["artifact_waiting"] == 0


def test_the_cap_evicts_artifacts_and_a_users_share_holds():
    with reachable_daemon(extra=["--max-size", "2M", "--artifact-share", "25"]) as d:
        r = cli_as(d.socket, B, B, "artifact", "put", "triton", "kept", "-",
                   input=os.urandom(100000))
        assert r.returncode == 0, r.stderr
        c = Client(d.socket)
        for i in range(40):     # 4 MB of incompressible bytes from root
            assert c.put("triton", "a%d" % i, os.urandom(100000))["stored"]
        s = d.stats()
        assert s["artifact_bytes"] <= 2 << 20, s
        assert s["artifact_share_evictions"] > 0, s
        # root's artifacts stayed within its share; nobody's survived it.
        assert cli_as(d.socket, B, B, "artifact", "get", "triton", "kept").returncode == 0
        assert cli(d, "artifact", "get", "triton", "a39").returncode == 0
        assert cli(d, "artifact", "get", "triton", "a0").returncode == 1
        # A value over the share alone is refused, saying why.
        body = c.put("triton", "huge", os.urandom(600000))
        assert body["code"] == "internal" and "artifact-share" in body["message"], body


def test_the_size_cap_evicts_artifacts_oldest_first():
    with reachable_daemon(extra=["--max-size", "1M", "--artifact-share", "60"]) as d:
        c = Client(d.socket)
        for i in range(5):      # root: within its share
            assert c.put("triton", "c%d" % i, os.urandom(100000))["stored"]
        for i in range(6):      # and nobody's: together over the cap
            r = cli_as(d.socket, B, B, "artifact", "put", "triton", "b%d" % i, "-",
                       input=os.urandom(100000))
            assert r.returncode == 0, r.stderr
        s = d.stats()
        assert s["artifact_bytes"] <= 1 << 20 and s["evictions"] > 0, s
        assert s["artifact_share_evictions"] == 0, s
        assert cli(d, "artifact", "get", "triton", "c0").returncode == 1
        assert cli_as(d.socket, B, B, "artifact", "get", "triton", "b5").returncode == 0


def test_ls_evict_purge_know_artifacts():
    with Daemon(workers=1) as d:
        c = Client(d.socket)
        c.put("triton", "t1", b"1")
        c.put("inductor-fx", "f1", b"2")
        import json
        ls = json.loads(cli(d, "ls", "--namespace", "triton", "--json").stdout)
        assert [e["components"]["key"] for e in ls] == ["t1"], ls
        assert json.loads(cli(d, "ls", "--kind", "artifact", "--json").stdout).__len__() == 2
        r = cli(d, "evict", "--namespace", "inductor-fx", "--json")
        assert json.loads(r.stdout)["removed"] == 1, r
        r = cli(d, "purge", "--kind", "artifact", "--json")
        assert json.loads(r.stdout)["removed"] == 1, r
        assert cli(d, "artifact", "get", "triton", "t1").returncode == 1


def _node(redis, tmp, name, url=None, extra=()):
    """A daemon on the tier's defaults (l2-timeout-ms, l2-max-value) but
    for extra."""
    secret = os.path.join(tmp, "secret")
    with open(secret, "wb") as f:
        f.write(b"artifact test secret\n")
    d = Daemon(workers=1, extra=["--l2", url or redis.url, "--l2-secret-file", secret,
                                 "--allow-users", "%d,54321" % B] + list(extra))
    make_reachable(d.socket)
    return d


def test_artifacts_of_1_to_100_mb_cross_nodes_on_the_defaults():
    """What a fresh node meets: FX graphs of tens of MB put on one node are
    got, exact, on another, with no timeout and no breaker opening."""
    if os.geteuid() != 0:
        raise Skip("needs root to make the socket reachable")
    for tcp in (False, True):
        r = RedisServer(tcp=tcp)
        tmp = tempfile.mkdtemp()
        url = r.tcp_url() if tcp else r.url
        try:
            with _node(r, tmp, "a", url) as a, _node(r, tmp, "b", url) as b:
                sizes = [1, 8, 40, 100] if not tcp else [8, 40]
                for mb in sizes:
                    value = os.urandom(mb << 20)
                    key = "graph-%d" % mb
                    writes = a.stats()["l2_writes"]
                    assert cli(a, "artifact", "put", "inductor-fx", key, "-",
                               input=value).returncode == 0
                    a.wait_stats(lambda s: s["l2_writes"] > writes, "the %d MB publish" % mb)
                    got = cli(b, "artifact", "get", "inductor-fx", key)
                    assert got.returncode == 0, got.stderr
                    assert got.stdout == value, "%d MB: not the bytes put" % mb
                for d in (a, b):
                    s = d.stats()
                    assert (s["l2_timeouts"], s["l2_errors"], s["l2_breaker_opens"],
                            s["l2_rejects"]) == (0, 0, 0, 0), s
                assert b.stats()["artifact_l2_hits"] == len(sizes)
                # Each put was spooled to its file; the tier was given a
                # mapping of the file.
                assert a.stats()["artifact_spooled_puts"] == len(sizes)
                assert b.stats()["l2_bytes_read"] > sum(sizes) << 20
        finally:
            r.cleanup()


def _published(a, r, key, value):
    """Put value under triton/key on node a and wait for its publish."""
    writes = a.stats()["l2_writes"]
    assert cli(a, "artifact", "put", "triton", key, "-", input=value).returncode == 0
    a.wait_stats(lambda s: s["l2_writes"] > writes, "the publish")


def test_a_tier_value_that_does_not_verify_reaches_no_waiter():
    """Waiters are answered before the value is stored, but only ever with
    a value whose every chunk opened. Node b, on the tier's defaults,
    reaches Redis through a gate (redis_fixture.Gate) that holds its
    GETRANGE of the key 20 ms, within the default silence bound of 50 ms:
    four gets sent at once on four connections, the first asks the tier
    and the other three wait on that one fetch (artifact_waits). The value
    was changed in Redis (a chunk of a chunked one, the whole of a small
    one): the one fetch is a reject, every waiter a miss with no byte of
    it, and nothing of it is stored on b."""
    if os.geteuid() != 0:
        raise Skip("needs root to make the socket reachable")
    from redis_fixture import Gate
    n = 4
    r = RedisServer()
    tmp = tempfile.mkdtemp()
    hold = set()                # the key names whose next GETRANGE is held

    def before_command(args):
        if args[0].upper() == b"GETRANGE" and args[1] in hold:
            hold.discard(args[1])
            time.sleep(0.02)

    gate = Gate(r, before_command=before_command)
    try:
        with _node(r, tmp, "a") as a, _node(r, tmp, "b", gate.url) as b:
            for size in (100 << 10, 3 << 20):       # from memory; from a memfd
                key = "bad-%d" % size
                _published(a, r, key, os.urandom(size))
                names = [k.decode() if isinstance(k, bytes) else k
                         for k in r.keys("ptxcache:artifact:*")]
                whole = [x for x in names if x.count(":") == 3 and "lease" not in x]
                assert len(whole) == 1, names
                if size > 1 << 20:      # chunked: change chunk 1 (of 4)
                    target = [x for x in names if x.endswith(":1") and "lease" not in x]
                else:                   # whole: change the value under the key
                    target = whole
                assert len(target) == 1, names
                stored = bytearray(r.get(target[0]))
                stored[len(stored) // 2] ^= 1
                r.set(target[0], bytes(stored))
                hold.add(whole[0].encode())
                s0 = b.stats()
                fetches = gate.seen(lambda x: x[1] == whole[0].encode())
                clients = [Client(b.socket) for _ in range(n)]
                ids = [c.send(GET, ns="triton", key=key) for c in clients]
                replies = [c.reply(i)[1] for c, i in zip(clients, ids)]
                for c in clients:
                    c.close()
                assert all(not x["found"] and "value" not in x for x in replies), \
                    [(x["found"], len(x.get("value", b""))) for x in replies]
                assert hold == set(), "the fetch never reached Redis"
                s = b.stats()
                assert s["artifact_waits"] == s0["artifact_waits"] + n - 1, (s0, s)
                assert gate.seen(lambda x: x[1] == whole[0].encode()) == fetches + 1
                assert s["l2_rejects"] == s0["l2_rejects"] + 1, (s0, s)
                assert s["artifact_l2_hits"] == 0 and s["artifact_wait_hits"] == 0, s
                r.flushall()
                # Nothing was stored on b: with the tier empty, still a miss.
                assert cli(b, "artifact", "get", "triton", key).returncode == 1
    finally:
        gate.close()
        r.cleanup()


def test_a_tier_value_is_stored_after_its_answer_and_the_next_get_is_local():
    """The first get on a node that lacks the value is answered from the
    tier (then stored); the second is a local hit: the tier is not asked,
    even once it is empty."""
    if os.geteuid() != 0:
        raise Skip("needs root to make the socket reachable")
    r = RedisServer()
    tmp = tempfile.mkdtemp()
    try:
        with _node(r, tmp, "a") as a, _node(r, tmp, "b") as b:
            sizes = (1000, 100 << 10, 1 << 20, 5 << 20)
            values = {}
            for size in sizes:
                values[size] = os.urandom(size)
                _published(a, r, "v%d" % size, values[size])
            for size in sizes:
                got = cli(b, "artifact", "get", "triton", "v%d" % size)
                assert got.returncode == 0 and got.stdout == values[size], size
            s = b.stats()
            assert s["artifact_l2_hits"] == len(sizes), s
            asked = s["l2_hits"] + s["l2_misses"]
            r.flushall()
            for size in sizes:
                got = cli(b, "artifact", "get", "triton", "v%d" % size)
                assert got.returncode == 0 and got.stdout == values[size], size
            s = b.stats()
            assert s["l2_hits"] + s["l2_misses"] == asked, s
            assert s["artifact_l2_hits"] == len(sizes), s
            # The ones a descriptor answers are files of b's own cache now.
            assert any(os.scandir(os.path.join(b.cache_dir, "blobs"))), "no blob file"
    finally:
        r.cleanup()


def test_redis_carries_artifacts_within_their_scope():
    if os.geteuid() != 0:
        raise Skip("needs root to run clients as other users")
    r = RedisServer()
    tmp = tempfile.mkdtemp()
    try:
        with _node(r, tmp, "a") as a, _node(r, tmp, "b") as b:
            assert cli(a, "artifact", "put", "triton", "k", "-", input=b"root's").returncode == 0
            rb = cli_as(a.socket, B, B, "artifact", "put", "triton", "k", "-", input=b"B's")
            assert rb.returncode == 0, rb.stderr
            deadline = time.time() + 10
            while len(r.command("KEYS", "ptxcache:artifact:*")) < 2:
                assert time.time() < deadline, "nothing published"
                time.sleep(0.05)
            keys = sorted(k.decode() if isinstance(k, bytes) else k
                          for k in r.command("KEYS", "ptxcache:artifact:*"))
            assert keys[0].startswith("ptxcache:artifact:u0:"), keys
            assert keys[1].startswith("ptxcache:artifact:u%d:" % B), keys
            # Node b has neither locally: each user gets their own from Redis.
            assert cli(b, "artifact", "get", "triton", "k").stdout == b"root's"
            assert cli_as(b.socket, B, B, "artifact", "get", "triton", "k").stdout == b"B's"
            assert b.stats()["artifact_l2_hits"] == 2
            # A uid with nothing of its own finds nothing.
            assert cli_as(b.socket, 54321, 54321, "artifact", "get", "triton",
                          "k").returncode == 1
            # After a restart of node b, its local copies answer.
            b.stop()
            b.start()
            assert cli(b, "artifact", "get", "triton", "k").stdout == b"root's"
    finally:
        r.cleanup()


def test_artifact_ls_table_shows_namespace_and_scope():
    """`ptxcache ls` names each artifact's namespace and scope in its table
    (the target column is empty for them): in columns of their own when
    only artifacts are listed, as NS/SCOPE beside PTX entries."""
    with Daemon(workers=1) as d:
        with tempfile.NamedTemporaryFile() as f:
            f.write(b"value")
            f.flush()
            assert cli(d, "artifact", "put", "triton", "lsKEY", f.name).returncode == 0
            assert cli(d, "artifact", "put", "inductor-fx", "lsKEY2", f.name).returncode == 0
        scope = "u%d" % os.getuid()
        out = cli(d, "ls", "--kind", "artifact").stdout.decode()
        head, *rows = out.splitlines()
        assert head.split()[:4] == ["KEY", "KIND", "NAMESPACE", "SCOPE"], out
        assert sorted(r.split()[2:4] for r in rows) == [["inductor-fx", scope], ["triton", scope]], out
        d.cli("compile", "--arch", "sm_80", "-o", os.devnull, "-",
              input=b'target triple = "nvptx64-nvidia-cuda"\n'
                    b'define ptx_kernel void @k_ls() {\n  ret void\n}\n')
        out = cli(d, "ls").stdout.decode()
        cells = [r.split()[2] for r in out.splitlines()[1:]]
        assert sorted(cells) == sorted(["inductor-fx/" + scope, "triton/" + scope, "sm_80"]), out


def test_concurrent_puts_share_a_commit_and_each_is_durable_before_its_reply():
    """Eight connections put at once, each four requests in one write: the
    four are read in one turn of the loop, so they share one commit at the
    least (the daemon's own counters: at most one commit per four puts;
    a commit per put is four times that), and every put answered "stored"
    is in the cache after a kill -9 that lands while others are still
    arriving."""
    import threading
    PER_WRITE = 4
    d = Daemon(workers=1)
    try:
        acked, lock, stop = {}, threading.Lock(), threading.Event()

        def writer(n):
            c = Client(d.socket, timeout=10)
            i = 0
            try:
                while not stop.is_set():
                    batch, frames = {}, []
                    for _ in range(PER_WRITE):
                        key = "w%d-%d" % (n, i)
                        i += 1
                        c.next_id += 1
                        batch[c.next_id] = key
                        frames.append(frame(PUT, mp_pack(dict(id=c.next_id, ns="triton", key=key,
                                                                value=key.encode() * 64))))
                    c.raw.send(b"".join(frames))
                    for rid, key in batch.items():
                        ftype, body = c.reply(rid)
                        if ftype == PUT | 0x80 and body.get("stored"):
                            with lock:
                                acked[key] = key.encode() * 64
            except (AssertionError, OSError, ConnectionError):
                pass            # the daemon was killed mid-request

        threads = [threading.Thread(target=writer, args=(n,)) for n in range(8)]
        for t in threads:
            t.start()
        deadline = time.time() + 60
        while len(acked) < 2000:
            assert time.time() < deadline and all(t.is_alive() for t in threads), len(acked)
            time.sleep(0.01)
        s = d.stats()
        assert 0 < s["artifact_put_commits"] * PER_WRITE <= s["artifact_puts"], s
        d.proc.kill()           # SIGKILL: nothing flushed on the way out
        stop.set()
        for t in threads:
            t.join()
        d.proc.wait()
        with lock:
            acked = dict(acked)
        d.start()
        c = Client(d.socket)
        missing = [k for k, v in acked.items() if c.get("triton", k).get("value") != v]
        assert missing == [], (len(missing), len(acked), missing[:5])
        c.close()
    finally:
        d.cleanup()


def test_a_failing_put_in_a_batch_loses_and_acknowledges_no_other():
    """Three puts in one write, so in one batch (one commit): the middle
    one, over the scope's share, is refused saying why; the other two are
    stored and durable (they survive a kill -9), the refused one is not."""
    with Daemon(workers=1, extra=["--max-size", "100K", "--artifact-share", "1"]) as d:
        c = Client(d.socket)
        commits = d.stats()["artifact_put_commits"]
        puts = [("small-a", b"a" * 10), ("big", os.urandom(2000)), ("small-b", b"b" * 10)]
        c.raw.s.sendall(b"".join(frame(PUT, mp_pack(dict(id=i + 1, ns="triton", key=key,
                                                         value=value)))
                                 for i, (key, value) in enumerate(puts)))
        answers = {}
        while len(answers) < 3:
            ftype, body = c.reply()
            answers[body["id"]] = (ftype, body)
        assert answers[1][0] == PUT | 0x80 and answers[1][1]["stored"], answers
        assert answers[3][0] == PUT | 0x80 and answers[3][1]["stored"], answers
        assert answers[2][0] == ERROR and "artifact-share" in answers[2][1]["message"], answers
        assert d.stats()["artifact_put_commits"] == commits + 1
        d.proc.kill()
        d.proc.wait()
        d.start()
        c = Client(d.socket)
        assert c.get("triton", "small-a")["value"] == b"a" * 10
        assert c.get("triton", "small-b")["value"] == b"b" * 10
        assert not c.get("triton", "big")["found"]
        c.close()


def _fill(path):
    """Write path until its disk has no byte left (ENOSPC)."""
    with open(path, "wb", buffering=0) as f:
        for chunk in (1 << 20, 4096, 1):
            try:
                while True:
                    f.write(b"\0" * chunk)
            except OSError as e:
                assert e.errno == errno.ENOSPC, e


def _puts_in_one_write(c, puts):
    """Puts of (key, value) in one write, so that one turn of the loop
    reads them all: {id: (frame type, body)} of their answers."""
    c.raw.s.sendall(b"".join(frame(PUT, mp_pack(dict(id=i + 1, ns="triton", key=key, value=value)))
                             for i, (key, value) in enumerate(puts)))
    answers = {}
    while len(answers) < len(puts):
        ftype, body = c.reply()
        answers[body["id"]] = (ftype, body)
    return answers


def test_a_batch_whose_commit_fails_is_answered_by_what_was_committed():
    """Eight puts in one write, so in one batch, whose COMMIT fails for
    real: the cache's disk (a tmpfs) was filled to its last byte after the
    daemon started, and the WAL frames the commit appends find no room.
    Nothing of the batch was committed, so none of its puts is answered
    from it: each is redone alone (the first makes room, giving back the
    reserve) and answered "stored" once its own commit is done; every one
    is in the cache after a kill -9."""
    with tmpfs(64 << 20) as mnt:
        d = Daemon(workers=1, cache_dir=os.path.join(mnt, "cache"), extra=["--max-size", "0"])
        try:
            c = Client(d.socket)
            puts = [("k%d" % i, os.urandom(1024)) for i in range(8)]
            before = d.stats()
            _fill(os.path.join(mnt, "filler"))
            answers = _puts_in_one_write(c, puts)
            c.close()
            assert all(f == PUT | 0x80 and b["stored"] for f, b in answers.values()), answers
            s, log = d.stats(), d.logtext()
            d.proc.kill()
            d.proc.wait()
            os.unlink(os.path.join(mnt, "filler"))
            d.start()
            c = Client(d.socket)
            missing = [key for key, value in puts if c.get("triton", key).get("value") != value]
            assert missing == [], missing
            c.close()
            # The batch's COMMIT failed and its puts were redone one by
            # one: a commit each, none for the batch; the first made room.
            assert ("database or disk is full; storing %d entries one by one" % len(puts)
                    in log), log
            assert s["disk_full_retries"] == before["disk_full_retries"] + 1, s
            assert s["artifact_put_commits"] == before["artifact_put_commits"] + len(puts), s
        finally:
            d.cleanup()


def test_puts_whose_commit_fails_are_refused_and_are_not_there():
    """A full disk with no room to make: the cache's tmpfs was all but
    filled before the daemon started (too little left for its reserve
    file), then to its last byte, and the cache holds nothing to evict.
    Four puts in one write: the batch's COMMIT fails, each put's own
    COMMIT again, after the room-making that finds none; each client is
    answered with the error, none with "stored", and after a kill -9
    (the filler gone) none of them is in the cache."""
    with tmpfs(4 << 20) as mnt:
        with open(os.path.join(mnt, "before"), "wb") as f:
            f.write(b"\0" * ((4 << 20) - (600 << 10)))
        d = Daemon(workers=1, cache_dir=os.path.join(mnt, "cache"), extra=["--max-size", "0"])
        try:
            assert not os.path.exists(os.path.join(d.cache_dir, "reserve"))
            c = Client(d.socket)
            puts = [("k%d" % i, os.urandom(1024)) for i in range(4)]
            _fill(os.path.join(mnt, "filler"))
            answers = _puts_in_one_write(c, puts)
            c.close()
            for ftype, body in answers.values():
                assert ftype == ERROR and "database or disk is full" in body["message"], answers
            log = d.logtext()
            d.proc.kill()
            d.proc.wait()
            os.unlink(os.path.join(mnt, "filler"))
            d.start()
            c = Client(d.socket)
            assert [key for key, _ in puts if c.get("triton", key)["found"]] == []
            c.close()
            assert "storing %d entries one by one" % len(puts) in log, log
        finally:
            d.cleanup()
