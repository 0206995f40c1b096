# SPDX-License-Identifier: Apache-2.0
"""Tenants by socket (daemon/tenant.h): besides its main socket the daemon
serves DIR/NAME.sock for each of `tenants`, and a connection's identity is
(tenant, uid). Pods that all run as root, each given its own socket, never
see, change, list or evict each other's artifacts, locally or through a
real redis-server; one tenant's compile reaches another only once another
worker confirmed it; sockets come and go on SIGHUP; names are checked.
The clients are one uid (root when the suite runs as root: the case the
tenants exist for) on real sockets of a real daemon; socket-mode's test
adds another uid, the groups' test two uids in two artifact-groups."""
import json
import os
import signal
import sqlite3
import stat
import subprocess
import tempfile
import time

from harness import (CLI, DAEMON, LLC, PROBE_DAEMON, TRITON_FLAGS, Daemon, Raw, Skip, frame, llc,
                     mp_pack, mp_unpack, small_ir)
from sysutil import cli_as, make_reachable
from redis_fixture import RedisServer
from test_large import FdClient, blob_files, value

FLAGS = ["-mtriple=nvptx64", "-mcpu=sm_90a"]
SECRET = b"cluster secret for the tenant tests\n"
GET, PUT, ERROR = 10, 11, 0xff


def tenant_daemon(names="x,y", extra=(), **kw):
    """A daemon with tenants names under its own tenant-dir; .sock(name)
    is a tenant's socket ("-": the main one)."""
    tmp = tempfile.mkdtemp(prefix="ptxcache-tenants-")
    tdir = os.path.join(tmp, "tenants")
    d = Daemon(workers=kw.pop("workers", 2),
               extra=["--tenant-dir", tdir, "--tenants", names] + list(extra), **kw)
    d.tenant_dir = tdir
    d.sock = lambda name: d.socket if name == "-" else os.path.join(tdir, name + ".sock")
    return d


def cli(path, *args, input=None, check=False):
    r = subprocess.run([CLI, "--socket", path] + list(args), input=input,
                       capture_output=True, timeout=120)
    if check:
        assert r.returncode == 0, (args, r.stderr)
    return r


def put(path, ns, key, value):
    r = cli(path, "artifact", "put", ns, key, "-", input=value)
    assert r.returncode == 0, r.stderr
    assert b"stored" in r.stdout or r.stdout == b"", r.stdout


def get(path, ns, key):
    """The value, or None on a miss."""
    r = cli(path, "artifact", "get", ns, key)
    assert r.returncode in (0, 1), r.stderr
    return r.stdout if r.returncode == 0 else None


def ls(path):
    r = cli(path, "ls", "--kind", "artifact", "--json", check=True)
    return json.loads(r.stdout)


def stats(path):
    return json.loads(cli(path, "stats", "--json", check=True).stdout)


def llc_bytes(ir):
    return subprocess.run([LLC] + FLAGS, input=ir, capture_output=True, check=True).stdout


def compile_on(path, ir):
    r = cli(path, "llc", *FLAGS, input=ir)
    assert r.returncode == 0, r.stderr
    return r.stdout


def wait_for(pred, what, limit=60):
    deadline = time.time() + limit
    while not pred():
        assert time.time() < deadline, "timed out waiting for " + what
        time.sleep(0.05)


def test_tenant_sockets_are_made_like_the_main_one():
    """DIR/NAME.sock for each tenant, with the main socket's mode and owner;
    a client learns its tenant from stats (it names none); they go with the
    daemon."""
    with tenant_daemon("pod-a,pod-b") as d:
        main = os.stat(d.socket)
        for name in ("pod-a", "pod-b"):
            st = os.stat(d.sock(name))
            assert stat.S_ISSOCK(st.st_mode), name
            assert stat.S_IMODE(st.st_mode) == stat.S_IMODE(main.st_mode) == 0o600, oct(st.st_mode)
            assert (st.st_uid, st.st_gid) == (main.st_uid, main.st_gid)
            s = stats(d.sock(name))
            assert s["tenant"] == name and s["tenants"] == 2, s
        assert stats(d.socket)["tenant"] == "-"
        d.stop()
        assert not os.path.exists(d.sock("pod-a")) and not os.path.exists(d.sock("pod-b"))


def test_same_uid_on_two_tenants_never_sees_changes_lists_or_evicts_the_other():
    """Root on x, root on y and root on the main socket: three scopes.
    Each is served its own value under the same name, lists its own alone,
    cannot show another's by its hash, and evicts and purges its own alone;
    root on a tenant's socket is no admin."""
    with tenant_daemon() as d:
        x, y, main = d.sock("x"), d.sock("y"), d.sock("-")
        put(x, "inductor-fx", "graph", b"def f(): return 'x'\n")
        assert get(y, "inductor-fx", "graph") is None
        assert get(main, "inductor-fx", "graph") is None
        put(y, "inductor-fx", "graph", b"def f(): return 'y'\n")
        assert get(x, "inductor-fx", "graph") == b"def f(): return 'x'\n"
        assert get(y, "inductor-fx", "graph") == b"def f(): return 'y'\n"
        assert get(main, "inductor-fx", "graph") is None
        put(x, "triton", "k2", b"x's kernel")
        put(main, "triton", "k2", b"main's kernel")
        assert get(y, "triton", "k2") is None
        # No field of a request names a tenant or a scope: y asking for
        # x's in x's name is y asking for its own.
        c = Raw(y)
        c.send(frame(GET, mp_pack({"id": 1, "ns": "triton", "key": "k2", "tenant": "x",
                                   "scope": "x/u0", "uid": 0})))
        ftype, body = c.recv_frame()
        assert ftype in (GET | 0x80, ERROR) and "value" not in mp_unpack(body), body
        c.close()

        lx, ly = ls(x), ls(y)
        assert sorted(e["components"]["key"] for e in lx) == ["graph", "k2"], lx
        assert all(e["components"]["tenant"] == "x" for e in lx), lx
        assert [e["components"]["tenant"] for e in ly] == ["y"], ly
        # The main socket's root is the admin: it sees all four; its own
        # entry's components are those of a daemon without tenants.
        every = ls(main)
        assert len(every) == 4, every
        mains = [e for e in every if "tenant" not in e["components"]]
        assert len(mains) == 1 and mains[0]["components"]["scope"] == "u0", mains
        x_keys = [e["key"] for e in lx]
        r = cli(y, "show", x_keys[0])
        assert r.returncode != 0 and b"no such entry" in r.stderr, r
        assert cli(x, "show", x_keys[0]).returncode == 0

        # Root on a tenant's socket may not rewrite the cache for everyone.
        r = cli(y, "purge")
        assert r.returncode != 0 and b"evicting needs root" in r.stderr, r
        r = cli(y, "evict", "--max-size", "0")
        assert r.returncode != 0 and b"evicting needs root" in r.stderr, r
        # Its own artifacts, and nobody else's.
        r = cli(y, "purge", "--kind", "artifact", "--json", check=True)
        assert json.loads(r.stdout)["removed"] == 1, r.stdout
        assert ls(y) == [] and len(ls(x)) == 2 and len(ls(main)) == 3
        assert get(x, "inductor-fx", "graph") == b"def f(): return 'x'\n"
        r = cli(x, "evict", "--kind", "artifact", "--namespace", "triton", "--json", check=True)
        assert json.loads(r.stdout)["removed"] == 1, r.stdout
        assert get(x, "triton", "k2") is None
        assert get(main, "triton", "k2") == b"main's kernel"
        assert get(x, "inductor-fx", "graph") == b"def f(): return 'x'\n"

        # After a restart (the tenants' numbers come from the cache), the same.
        d.stop()
        d.start()
        assert get(x, "inductor-fx", "graph") == b"def f(): return 'x'\n"
        assert get(y, "inductor-fx", "graph") is None
        assert get(main, "triton", "k2") == b"main's kernel"


def test_same_uid_on_one_tenants_socket_shares_as_today():
    """Two processes of one uid on one tenant's socket share its scope, its
    entries and its leases, as two on the main socket do."""
    with tenant_daemon() as d:
        x = d.sock("x")
        put(x, "triton", "shared", b"one process put it")
        assert get(x, "triton", "shared") == b"one process put it"
        # A lease taken by one connection makes another of the same
        # identity wait for its put, and get its value.
        a, b = Raw(x, timeout=30), Raw(x, timeout=30)
        a.send(frame(GET, mp_pack({"id": 1, "ns": "triton", "key": "leased", "lease": True})))
        ftype, body = a.recv_frame()
        reply = mp_unpack(body)
        assert ftype == GET | 0x80 and reply.get("lease"), reply
        b.send(frame(GET, mp_pack({"id": 1, "ns": "triton", "key": "leased", "wait_ms": 20000})))
        wait_for(lambda: stats(x)["artifact_waiting"] == 1, "the second connection waiting")
        a.send(frame(PUT, mp_pack({"id": 2, "ns": "triton", "key": "leased",
                                   "value": b"made once", "lease": reply["lease"]})))
        assert a.recv_frame()[0] == PUT | 0x80
        ftype, body = b.recv_frame()
        assert ftype == GET | 0x80 and mp_unpack(body)["value"] == b"made once"
        a.close()
        b.close()
        # A lease on x is nothing to y: y's key is another, its own lease
        # at once (a get that will not wait, of x's key, would be a miss).
        c = Raw(x, timeout=30)
        c.send(frame(GET, mp_pack({"id": 1, "ns": "triton", "key": "held", "lease": True})))
        assert mp_unpack(c.recv_frame()[1]).get("lease")
        r = Raw(d.sock("y"), timeout=30)
        r.send(frame(GET, mp_pack({"id": 1, "ns": "triton", "key": "held", "lease": True,
                                   "wait_ms": 0})))
        assert mp_unpack(r.recv_frame()[1]).get("lease"), "y met x's lease"
        c.close()
        r.close()


def test_per_user_limits_are_per_identity():
    """max-connections-per-uid counts (tenant, uid): root's connections on
    x do not use up root's on y or on the main socket."""
    with tenant_daemon(extra=["--max-connections-per-uid", "2"]) as d:
        held = [Raw(d.sock("x")) for _ in range(2)]
        third = Raw(d.sock("x"))
        ftype, body = third.recv_frame()
        assert ftype == ERROR and b"too many connections for this user" in body, body
        assert stats(d.sock("y"))["tenant"] == "y"
        assert stats(d.socket)["tenant"] == "-"
        for c in held + [third]:
            c.close()


def test_max_jobs_per_uid_and_the_fair_queue_are_per_identity():
    """max-jobs-per-uid 1: root's second compile on x waits, while root's
    on y runs beside x's first (another identity, another owner in the
    fair queue); all three finish."""
    def compile_frame(rid, tag):
        return frame(3, mp_pack({"id": rid, "input": small_ir(tag), "cpu": "sm_90a",
                                 "features": "+ptx90"}))
    with tenant_daemon(extra=["--max-jobs-per-uid", "1", "--sharing", "trust"]) as d:
        ws = d.workers()
        for w in ws:
            os.kill(w, signal.SIGSTOP)
        try:
            x, y = Raw(d.sock("x"), timeout=120), Raw(d.sock("y"), timeout=120)
            x.send(compile_frame(1, "jobs_x1") + compile_frame(2, "jobs_x2"))
            d.wait_stats(lambda s: s["jobs_running"] + s["jobs_queued"] == 2, "x's two")
            y.send(compile_frame(1, "jobs_y1"))
            s = d.wait_stats(lambda s: s["jobs_running"] == 2, "y's beside x's first")
            assert s["jobs_queued"] == 1 and s["users_waiting"] == 1, s
        finally:
            for w in ws:
                os.kill(w, signal.SIGCONT)
        done = [mp_unpack(x.recv_frame()[1]) for _ in range(2)] + [mp_unpack(y.recv_frame()[1])]
        assert all(r["status"] == 0 for r in done), done


def node(redis, tmp, *extra):
    """A daemon with tenants x and y on the shared tier (one node)."""
    secret = os.path.join(tmp, "secret")
    with open(secret, "wb") as f:
        f.write(SECRET)
    return tenant_daemon(extra=["--l2", redis.url, "--l2-secret-file", secret] + list(extra))


def test_redis_tier_keeps_tenants_apart_across_nodes():
    """Two daemons, one redis-server: what A's tenant x puts is served to
    B's tenant x, never to B's tenant y or B's main socket; in Redis it
    lies under a space that names the tenant. A compile of x's, not yet
    confirmed, reaches B's x through x's own key and never B's y."""
    k = small_ir("tenant_l2")
    with RedisServer() as r, tempfile.TemporaryDirectory() as t:
        with node(r, t, "--confirm-workers", "0") as a:
            put(a.sock("x"), "inductor-fx", "graph", b"def f(): return 'x on a'\n")
            assert compile_on(a.sock("x"), k) == llc_bytes(k)
            wait_for(lambda: stats(a.socket)["l2_writes"] == 2, "A's two writes")
            keys = r.keys("ptxcache:*")
            assert any(key.startswith("ptxcache:artifact:x/u0:") for key in keys), keys
            assert any(key.startswith("ptxcache:own:x/u0:") for key in keys), keys
        with node(r, t, "--confirm-workers", "0") as b:
            assert get(b.sock("y"), "inductor-fx", "graph") is None
            assert get(b.socket, "inductor-fx", "graph") is None
            assert get(b.sock("x"), "inductor-fx", "graph") == b"def f(): return 'x on a'\n", \
                (stats(b.socket), sorted(r.keys("ptxcache:*")))
            s = stats(b.socket)
            assert s["artifact_l2_hits"] == 1 and s["l2_hits"] == 1, s
            # The kernel: y compiles its own (x's value is x's alone) ...
            assert compile_on(b.sock("y"), k) == llc_bytes(k)
            s = stats(b.socket)
            assert s["compiles"] == 1 and s["l2_hits"] == 1, s
            # ... and x is served x's own from Redis, without compiling.
            assert compile_on(b.sock("x"), k) == llc_bytes(k)
            s = stats(b.socket)
            assert s["compiles"] == 1 and s["l2_hits"] == 2, s
            # y's put under the same name is y's: x's in Redis is unchanged.
            writes = stats(b.socket)["l2_writes"]
            put(b.sock("y"), "inductor-fx", "graph", b"def f(): return 'y on b'\n")
            # Published in the background: in Redis before B goes.
            wait_for(lambda: stats(b.socket)["l2_writes"] == writes + 1, "B's write")
        with node(r, t) as c:
            assert get(c.sock("x"), "inductor-fx", "graph") == b"def f(): return 'x on a'\n", \
                stats(c.socket)
            assert get(c.sock("y"), "inductor-fx", "graph") == b"def f(): return 'y on b'\n", \
                (stats(c.socket), sorted(r.keys("ptxcache:*")))
            assert get(c.socket, "inductor-fx", "graph") is None


def write_conf(path, **settings):
    with open(path, "w") as f:
        for name, value in settings.items():
            f.write("%s = %s\n" % (name.replace("_", "-"), value))


def reload(d, n):
    d.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: d.logtext().count("configuration reloaded") >= n, "reload %d" % n)


def test_sighup_adds_and_removes_tenant_sockets():
    """A reload binds the sockets of tenants it adds and removes those of
    tenants it drops, closing their connections; tenants that stay keep
    their socket and connections; a bad list leaves them all as they
    were."""
    with tempfile.TemporaryDirectory() as t:
        conf = os.path.join(t, "ptxcached.conf")
        tdir = os.path.join(t, "tenants")
        sock = lambda n: os.path.join(tdir, n + ".sock")
        write_conf(conf, tenant_dir=tdir, tenants="a")
        with Daemon(workers=1, extra=["--config", conf, "--log-level", "info"]) as d:
            assert stats(sock("a"))["tenant"] == "a"
            assert not os.path.exists(sock("b"))
            put(sock("a"), "triton", "k", b"a's")
            stay = Raw(sock("a"))

            write_conf(conf, tenant_dir=tdir + "/", tenants="a,b")     # the same dir
            reload(d, 1)
            assert "stay as they were" not in d.logtext(), d.logtext()
            assert stats(sock("b"))["tenant"] == "b"
            assert stats(sock("a"))["tenants"] == 2
            stay.send(frame(GET, mp_pack({"id": 1, "ns": "triton", "key": "k"})))
            assert mp_unpack(stay.recv_frame()[1])["value"] == b"a's"
            gone = Raw(sock("b"))
            gone.send(frame(GET, mp_pack({"id": 1, "ns": "triton", "key": "k"})))
            assert "value" not in mp_unpack(gone.recv_frame()[1])

            # A bad name: nothing changes, and the log says why.
            write_conf(conf, tenant_dir=tdir, tenants="a,Bad")
            reload(d, 2)
            assert "'Bad' is not a valid tenant name" in d.logtext()
            assert os.path.exists(sock("a")) and os.path.exists(sock("b"))
            assert stats(sock("b"))["tenants"] == 2

            write_conf(conf, tenant_dir=tdir, tenants="b")
            reload(d, 3)
            assert not os.path.exists(sock("a"))
            assert cli(sock("a"), "ping").returncode != 0
            assert stay.closed(), "a connection of a removed tenant stayed open"
            gone.send(frame(GET, mp_pack({"id": 2, "ns": "triton", "key": "k"})))
            assert gone.recv_frame() is not None, "b's connection was closed"
            assert stats(sock("b"))["tenants"] == 1

            # Added again: the same tenant, its entries as they were.
            write_conf(conf, tenant_dir=tdir, tenants="b,a")
            reload(d, 4)
            assert get(sock("a"), "triton", "k") == b"a's"
            assert get(sock("b"), "triton", "k") is None

            # Another directory: the sockets move, the tenants stay.
            tdir2 = os.path.join(t, "tenants2")
            write_conf(conf, tenant_dir=tdir2, tenants="b,a")
            reload(d, 5)
            assert os.listdir(tdir) == [] and sorted(os.listdir(tdir2)) == ["a.sock", "b.sock"]
            assert get(os.path.join(tdir2, "a.sock"), "triton", "k") == b"a's"
            gone.send(frame(GET, mp_pack({"id": 3, "ns": "triton", "key": "k"})))
            assert gone.recv_frame() is not None, "b's connection was closed by the move"

            write_conf(conf)
            reload(d, 6)
            assert os.listdir(tdir2) == []
            assert stats(d.socket)["tenants"] == 0
            gone.close()
            stay.close()


BAD_NAMES = ["Upper", "a/b", "..", "../x", ".", "-", "a.b", "b!", "x" * 33, "é", "a_b",
             "/etc/x"]


def test_invalid_tenant_names_are_refused_with_a_clear_error():
    """A name that is not 1 to 32 of [a-z0-9-] (a path, a dot, uppercase,
    33 bytes, the main socket's "-"), a name twice, or tenants without a
    tenant-dir: the daemon does not start, and says which and why; nothing
    is made outside the tenant-dir. 32 bytes and digits are fine."""
    with tempfile.TemporaryDirectory() as t:
        tdir = os.path.join(t, "tenants")
        valid = "1 to 32 bytes of [a-z0-9-]"
        cases = [(n, ["'%s' is not a valid tenant name" % n, valid]) for n in BAD_NAMES]
        cases += [("ok,ok", ["'ok' is listed twice"]),
                  (",".join("t%d" % i for i in range(257)), ["more than 256 tenants"]),
                  ("ok " + "y" * 40, ["'%s' is not a valid" % ("y" * 40), valid])]
        for names, wants in cases:
            r = subprocess.run([DAEMON, "--socket", os.path.join(t, "main.sock"),
                                "--cache-dir", os.path.join(t, "cache"), "--workers", "1",
                                "--tenant-dir", tdir, "--tenants", names],
                               capture_output=True, timeout=60)
            err = r.stderr.decode(errors="replace")
            assert r.returncode != 0, (names, err)
            assert all(w in err for w in wants), (names, err)
            # Nothing bound, inside the tenant-dir or out of it.
            assert not os.path.exists(tdir), (names, os.listdir(tdir))
            assert sorted(os.listdir(t)) == ["cache"], (names, os.listdir(t))
        r = subprocess.run([DAEMON, "--socket", os.path.join(t, "main.sock"),
                            "--cache-dir", os.path.join(t, "cache"), "--workers", "1",
                            "--tenants", "a"], capture_output=True, timeout=60)
        assert r.returncode != 0 and b"'a' needs a tenant-dir" in r.stderr, r.stderr
    with tenant_daemon("x" * 32 + ",0-9,a--b") as d:
        for n in ("x" * 32, "0-9", "a--b"):
            assert stats(d.sock(n))["tenant"] == n


def _compile_json(path, ir):
    """(cached, PTX) of one compile on the socket at path: whether that very
    request was answered from the cache, and the bytes it got."""
    r = cli(path, "compile", "--json", "--arch", "sm_90a", "--ptx-isa", "90", "-O3", "-", input=ir)
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    assert j["status"] == "ok", j
    return j["cached"], j["ptx"].encode()


def _fd_get(path, ns, key):
    """A get that asks for the value's descriptor: (found, the descriptor
    or None)."""
    c = FdClient(path)
    try:
        _, body, fd = c.call(GET, ns=ns, key=key, fd=True)
    finally:
        c.close()
    return body["found"], fd


def test_a_large_value_by_descriptor_reaches_its_own_tenant_alone():
    """A value over the inline limit, put by root on x: root on y and on
    the main socket get neither the value nor a descriptor; x gets its
    file's. The same bytes put on y are another file: the descriptors x
    and y are given are of two inodes."""
    v = value(1 << 20, 3)
    with tenant_daemon() as d:
        x, y, main = d.sock("x"), d.sock("y"), d.sock("-")
        put(x, "t", "k", v)
        for other in (y, main):
            assert _fd_get(other, "t", "k") == (False, None), other
        found, fx = _fd_get(x, "t", "k")
        assert found and fx is not None and os.pread(fx, len(v) + 1, 0) == v
        put(y, "t", "k", v)
        found, fy = _fd_get(y, "t", "k")
        assert found and fy is not None and os.pread(fy, len(v) + 1, 0) == v
        files = blob_files(d)
        assert len(files) == 2 and len({os.stat(f).st_ino for f in files}) == 2, files
        # x's, asked again after y's put: still its own file.
        found, fx2 = _fd_get(x, "t", "k")
        assert found and os.pread(fx2, len(v) + 1, 0) == v
        assert os.fstat(fx).st_ino == os.fstat(fx2).st_ino != os.fstat(fy).st_ino
        assert _fd_get(main, "t", "k") == (False, None)
        for fd in (fx, fx2, fy):
            os.close(fd)
        assert d.stats()["artifact_fd_hits"] == 3


def test_a_large_value_of_a_group_reaches_its_group_on_its_tenant_alone():
    """With artifact-groups G1,G2: a large value one member of G1 put on
    tenant x is served (by descriptor) to another member of G1 on x; not
    to a member of G2 on x, nor to a member of G1 on y, its putter
    included. G2's put of the same bytes on x is a file of its own."""
    if os.geteuid() != 0:
        raise Skip("needs root to run clients as other users and groups")
    g1, g2, a, b = 4242, 4343, 65534, 54321
    v = value(1 << 20, 4)
    with tenant_daemon(extra=["--artifact-groups", "%d,%d" % (g1, g2),
                              "--allow-users", "%d,%d" % (a, b)]) as d:
        x, y = d.sock("x"), d.sock("y")
        make_reachable(x)
        make_reachable(y)

        def as_(path, uid, group, *args, input=None):
            r = cli_as(path, uid, uid, "artifact", *args, groups=(group,), input=input)
            assert r.returncode in (0, 1), (args, r.stderr)
            return r

        assert as_(x, a, g1, "put", "t", "k", "-", input=v).returncode == 0
        fd_hits = d.stats()["artifact_fd_hits"]
        r = as_(x, b, g1, "get", "t", "k")
        assert r.returncode == 0 and r.stdout == v, len(r.stdout)
        assert d.stats()["artifact_fd_hits"] == fd_hits + 1
        assert as_(x, b, g2, "get", "t", "k").returncode == 1
        for uid in (a, b):
            assert as_(y, uid, g1, "get", "t", "k").returncode == 1, uid
        assert len(blob_files(d)) == 1
        assert as_(x, b, g2, "put", "t", "k", "-", input=v).returncode == 0
        files = blob_files(d)
        assert len(files) == 2 and len({os.stat(f).st_ino for f in files}) == 2, files
        r = as_(x, a, g2, "get", "t", "k")
        assert r.returncode == 0 and r.stdout == v
        assert as_(x, b, g1, "get", "t", "k").stdout == v


def test_sharing_confirm_keeps_one_tenants_compile_from_another_until_confirmed():
    """As for two uids (test_confirm.py), for one uid on two tenants'
    sockets, without background confirmation, request by request: x's
    compiles are compiled for x, and x's next requests hit; y's requests
    for the same kernels are not answered from x's entry but compiled for
    y (each gets llc's bytes, uncached), which confirms x's entry; then z
    and the main socket are answered from the confirmed entry, and y's own
    second request hits too."""
    kernels = [small_ir("tenant_confirm%d" % i) for i in range(2)]
    truth = [llc(TRITON_FLAGS, input=k).stdout for k in kernels]
    assert all(truth)
    with tenant_daemon("x,y,z", extra=["--confirm-workers", "0"]) as d:
        for k, t in zip(kernels, truth):
            assert _compile_json(d.sock("x"), k) == (False, t)
        for k, t in zip(kernels, truth):         # x's own entry: x hits
            assert _compile_json(d.sock("x"), k) == (True, t)
        # Not confirmed yet: y is not served x's entry, but its own compile.
        for k, t in zip(kernels, truth):
            assert _compile_json(d.sock("y"), k) == (False, t)
        s = stats(d.socket)
        assert s["confirmations"] == 2 and s["confirm_mismatches"] == 0, s
        # Confirmed: everyone else hits, with the same bytes.
        for k, t in zip(kernels, truth):
            for path in (d.sock("z"), d.socket, d.sock("y")):
                assert _compile_json(path, k) == (True, t), path


def test_a_tenants_compromised_worker_changes_only_what_that_tenant_receives():
    """Tenant x's worker is taken over (the test-only "compromise" probe):
    x gets its altered bytes; root on y, on the main socket and on x's
    neighbour z, the same uid, get llc's; the mismatch is an alarm."""
    k = small_ir("tenant_victim")
    with tenant_daemon("x,y", binary=PROBE_DAEMON) as d:
        r = cli(d.sock("x"), "compile", "--json", "-",
                input=b"; ptxcache-probe: compromise\n" + small_ir("tenant_takeover"))
        assert b"compromise: ok" in r.stdout, r.stdout
        altered = compile_on(d.sock("x"), k)
        assert altered.startswith(b"// altered by a compromised worker"), altered[:80]
        assert compile_on(d.sock("y"), k) == llc_bytes(k)
        assert compile_on(d.socket, k) == llc_bytes(k)
        s = stats(d.socket)
        assert s["confirm_mismatches"] == 1, s
        assert compile_on(d.sock("x"), k) == altered


def test_socket_mode_and_group_apply_to_every_socket_the_daemon_makes():
    """socket-mode and socket-group: the main socket and each tenant's get
    them; a member of the group reaches a tenant's socket and is served as
    that tenant; a uid outside it is kept out by the mode; bad values are
    refused."""
    if os.geteuid() != 0:
        raise Skip("needs root to give sockets a group and run clients as other users")
    gid, other = 54321, 65534
    with tenant_daemon("x", extra=["--socket-mode", "0660", "--socket-group", str(gid)]) as d:
        for path in (d.socket, d.sock("x")):
            st = os.stat(path)
            assert stat.S_IMODE(st.st_mode) == 0o660 and st.st_gid == gid, (path, oct(st.st_mode),
                                                                            st.st_gid)
        make_reachable(d.sock("x"), 0o660)
        r = cli_as(d.sock("x"), other, other, "stats", "--json", groups=(gid,))
        assert r.returncode == 0 and json.loads(r.stdout)["tenant"] == "x", r.stderr
        r = cli_as(d.sock("x"), other, other, "ping")
        assert r.returncode != 0, r
    with tempfile.TemporaryDirectory() as t:
        for flag, value, want in (("--socket-mode", "0999", b"bad mode '0999' for socket-mode"),
                                  ("--socket-mode", "rw", b"bad mode 'rw'"),
                                  ("--socket-group", "no-such-group-here",
                                   b"socket-group: no group 'no-such-group-here'")):
            r = subprocess.run([DAEMON, "--socket", os.path.join(t, "main.sock"),
                                "--cache-dir", os.path.join(t, "cache"), "--workers", "1",
                                flag, value], capture_output=True, timeout=60)
            assert r.returncode != 0 and want in r.stderr, (value, r.stderr)
            assert not os.path.exists(os.path.join(t, "main.sock"))


def derive(*parts):
    """daemon/key.c's key_derive(): SHA-256 over the magic, the schema
    version and each (name, value) length-prefixed."""
    import hashlib
    import struct
    enc = b"ptxcache-key\0" + struct.pack(">I", 1)
    for name, value in parts:
        for field in (name.encode(), value.encode()):
            enc += struct.pack(">I", len(field)) + field
    return hashlib.sha256(enc).hexdigest()


def test_main_socket_keys_are_those_of_a_daemon_without_tenants():
    """The main socket's artifact keys, Redis keys and own keys are what a
    daemon without tenants derives (so existing caches and Redis entries
    stay valid); a tenant's hold its name as a component of its own."""
    k = small_ir("tenant_main_keys")
    with RedisServer() as r, tempfile.TemporaryDirectory() as t:
        with node(r, t, "--confirm-workers", "0") as d:
            put(d.socket, "triton", "same", b"main's")
            put(d.sock("x"), "triton", "same", b"x's")
            compile_on(d.socket, k)
            wait_for(lambda: stats(d.socket)["l2_writes"] == 3, "three writes")
            old = derive(("kind", "artifact"), ("scope", "u0"), ("namespace", "triton"),
                         ("key", "same"))
            new = derive(("kind", "artifact"), ("tenant", "x"), ("scope", "u0"),
                         ("namespace", "triton"), ("key", "same"))
            keys = sorted(e["key"] for e in ls(d.socket))
            assert keys == sorted([old, new]), (keys, old, new)
            (ptx,) = [e["key"] for e in json.loads(cli(d.socket, "ls", "--kind", "ptx", "--json",
                                                          check=True).stdout)]
            own = derive(("kind", "own"), ("tenant", "u0"), ("key", ptx))
            in_redis = set(r.keys("ptxcache:*"))
            assert {"ptxcache:artifact:u0:" + old, "ptxcache:artifact:x/u0:" + new,
                    "ptxcache:own:u0:" + own} <= in_redis, in_redis


def test_tenants_from_the_environment_and_the_config_file():
    """PTXCACHE_TENANT_DIR and PTXCACHE_TENANTS, as every setting has; the
    config file's tenant-dir and tenants are test_sighup's."""
    with tempfile.TemporaryDirectory() as t:
        tdir = os.path.join(t, "env-tenants")
        with Daemon(workers=1, env={"PTXCACHE_TENANT_DIR": tdir,
                                    "PTXCACHE_TENANTS": "team-a, team-b"}) as d:
            assert sorted(os.listdir(tdir)) == ["team-a.sock", "team-b.sock"]
            assert stats(os.path.join(tdir, "team-b.sock"))["tenant"] == "team-b"
            assert stats(d.socket)["tenants"] == 2


def test_python_status_names_the_tenant():
    """python3 -m ptxcache status, in a pod given a tenant's socket, says
    which tenant it is (and nothing on the main socket)."""
    import sys
    env = {k: v for k, v in os.environ.items() if not k.startswith("PTXCACHE_")}
    env["PYTHONPATH"] = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                     "python")
    with tenant_daemon("pod-a", workers=1) as d:
        for path, tenant in ((d.sock("pod-a"), "pod-a"), (d.socket, "-")):
            e = dict(env, PTXCACHE_SOCKET=path)
            r = subprocess.run([sys.executable, "-m", "ptxcache", "status", "--json", "--no-import"],
                               env=e, capture_output=True, text=True, timeout=60)
            assert r.returncode == 0, r.stderr
            assert json.loads(r.stdout)["daemon"]["tenant"] == tenant, r.stdout
            r = subprocess.run([sys.executable, "-m", "ptxcache", "status", "--no-import"], env=e,
                               capture_output=True, text=True, timeout=60)
            assert ("tenant pod-a" in r.stdout) == (tenant == "pod-a"), r.stdout


def damage_row(d, key):
    """The value of the entry key (hex) overwritten with zeros in the
    daemon's store: the entry no longer decodes."""
    db = sqlite3.connect(os.path.join(d.cache_dir, "cache.db"))
    n = db.execute("UPDATE entries SET data = zeroblob(length(data)) WHERE hex(key) = ?",
                   (key.upper(),)).rowcount
    db.commit()
    db.close()
    assert n == 1, key


def test_a_tenant_learns_nothing_of_anothers_entries():
    """Hostile beta, after alpha compiled a kernel and stored an artifact:
    ls (of every kind), show of alpha's keys, explain of a kernel one flag
    from alpha's and evict name no key, component or namespace of alpha's,
    and verify neither reports nor removes alpha's damaged entry. Alpha
    sees its own; the same kernel is beta's too once beta compiled it
    itself; root on the main socket sees everything."""
    ir = small_ir("tenant_view")
    flags = ["--arch", "sm_90a", "--ptx-isa", "90"]
    with tenant_daemon("alpha,beta") as d:
        alpha, beta, main = d.sock("alpha"), d.sock("beta"), d.sock("-")
        ptx = json.loads(cli(alpha, "compile", *flags, "--json", "-", input=ir,
                             check=True).stdout)["key"]
        put(alpha, "alpha-secret-ns", "alpha-secret-key", b"alpha's value")
        mine = json.loads(cli(alpha, "ls", "--json", check=True).stdout)
        kinds = sorted(e["kind"] for e in mine)
        assert kinds == ["artifact", "ptx"], mine
        art = [e["key"] for e in mine if e["kind"] == "artifact"][0]
        # What beta must never learn: alpha's keys and names. (The IR's own
        # hash is beta's to know: beta sends the same IR below.)
        secrets = [ptx, art, "alpha-secret-ns", "alpha-secret-key"]

        def reveals(out):
            text = out if isinstance(out, str) else out.decode()
            return [s for s in secrets if s in text]

        assert json.loads(cli(beta, "ls", "--json", check=True).stdout) == []
        for kind in ("ptx", "cubin", "artifact"):
            r = cli(beta, "ls", "--kind", kind, "--json", check=True)
            assert json.loads(r.stdout) == [], (kind, r.stdout)
        assert reveals(cli(beta, "ls", check=True).stdout) == []
        for key in (ptx, art):
            r = cli(beta, "show", key)
            assert r.returncode != 0 and b"no such entry" in r.stderr, r
            assert reveals(r.stdout + r.stderr) == []
        # One flag away from alpha's: alpha's entry is no nearest for beta.
        r = cli(beta, "explain", *flags, "-O2", "--json", "-", input=ir, check=True)
        e = json.loads(r.stdout)
        assert e["cached"] is False and e["nearest"] is None, e
        assert reveals(r.stdout) == [], r.stdout
        text = cli(beta, "explain", *flags, "-O2", "-", input=ir, check=True).stdout
        assert reveals(text) == [], text
        # Alpha's very kernel: beta's own request has alpha's key (beta
        # derives it), but it is not "cached" for beta.
        e = json.loads(cli(beta, "explain", *flags, "--json", "-", input=ir,
                           check=True).stdout)
        assert e["key"] == ptx and e["cached"] is False and e["nearest"] is None, e
        r = cli(beta, "evict", "--kind", "artifact", "--json", check=True)
        assert json.loads(r.stdout) == {"removed": 0, "entries": 0, "bytes": 0}, r.stdout

        # Alpha sees its own, and explain names it as the nearest.
        e = json.loads(cli(alpha, "explain", *flags, "-O2", "--json", "-", input=ir,
                           check=True).stdout)
        assert e["nearest"]["key"] == ptx, e
        assert cli(alpha, "show", art, check=True).returncode == 0
        # Root on the main socket: everything.
        every = {e["key"] for e in json.loads(cli(main, "ls", "--json", check=True).stdout)}
        assert {ptx, art} <= every, every
        assert json.loads(cli(main, "explain", *flags, "-O2", "--json", "-", input=ir,
                              check=True).stdout)["nearest"]["key"] == ptx

        # Beta compiles the same kernel itself: that entry is beta's too,
        # alpha's artifact still is not.
        cli(beta, "compile", *flags, "-", input=ir, check=True)
        seen = json.loads(cli(beta, "ls", "--json", check=True).stdout)
        assert [e["key"] for e in seen] == [ptx], seen
        assert cli(beta, "show", art).returncode != 0
        # After a restart, the same.
        d.stop()
        d.start()
        assert [e["key"] for e in json.loads(cli(beta, "ls", "--json", check=True).stdout)] \
            == [ptx]
        assert len(json.loads(cli(alpha, "ls", "--json", check=True).stdout)) == 2

        # Alpha's artifact damaged in the store: beta's verify neither
        # reports it nor removes it, alpha's and root's report it.
        damage_row(d, art)
        r = cli(beta, "verify", "--json", check=True)
        assert json.loads(r.stdout) == {"problems": 0, "report": []}, r.stdout
        for who in (alpha, main):
            r = cli(who, "verify", "--json")
            assert r.returncode == 1, (r.stdout, r.stderr)
            v = json.loads(r.stdout)
            assert v["problems"] == 1 and v["report"][0].startswith("entry %s: " % art), v
