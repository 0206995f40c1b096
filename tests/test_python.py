# SPDX-License-Identifier: Apache-2.0
"""The Python package (python/ptxcache) against the real daemon: its client,
the Triton and Inductor adapters through the interfaces they implement
(called as Triton's RemoteCacheManager and Inductor's RemoteCache call
them: tests/jitstubs/ stands in for both, which this machine does not
have), the one switch, scopes of two uids, concurrent processes, and a
daemon that is down, slow or refusing.
"""
import io
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

from harness import CLI, ROOT, Daemon, Skip
from sysutil import make_reachable, setpriv

PKG = os.path.join(ROOT, "python")
STUBS = os.path.join(ROOT, "tests", "jitstubs")
JOBS = os.path.join(STUBS, "jobs.py")
NOBODY = 65534
if PKG not in sys.path:
    sys.path.insert(0, PKG)

import ptxcache  # noqa: E402
from ptxcache import artifacts, client, errors, wire  # noqa: E402

# tests/run.py: left out of make check-asan.
NOT_UNDER_SANITIZERS = "the Python package's own logic; the daemon's paths it takes are test_artifact's, test_large's and test_tenants'"


def clean_env(tmp, sock=None, **extra):
    """The environment of a job: nothing of ptxcache's, Triton's or
    PyTorch's from ours; the package and the stand-ins importable; the
    ptxcache binary (the ptxas front's target) the one under test, which
    need not be the source tree's build/ (make check-asan)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PTXCACHE_", "TRITON_", "TORCH", "PYTHON", "XDG_"))}
    env.update(PYTHONPATH=PKG + os.pathsep + STUBS, HOME=tmp, XDG_CACHE_HOME=os.path.join(tmp, "xdg"),
               TRITON_CACHE_DIR=os.path.join(tmp, "triton"), PYTHONDONTWRITEBYTECODE="1",
               PTXCACHE_BIN=CLI, PTXCACHE_AUTOSTART="0")
    if sock:
        env["PTXCACHE_SOCKET"] = sock
    env.update(extra)
    return env


TRITON_ENV = {"TRITON_CACHE_MANAGER": "triton.runtime.cache:RemoteCacheManager",
              "TRITON_REMOTE_CACHE_BACKEND": "ptxcache.triton:Backend"}


def pth_site(tmp):
    """A user site directory holding ptxcache.pth, as an install has it:
    PYTHONUSERBASE=<returned> makes Python read it at start-up."""
    base = os.path.join(tmp, "userbase")
    r = subprocess.run([sys.executable, "-c", "import site; print(site.getusersitepackages())"],
                       env=dict(os.environ, PYTHONUSERBASE=base), capture_output=True, text=True)
    d = r.stdout.strip()
    os.makedirs(d, exist_ok=True)
    shutil.copy(os.path.join(PKG, "ptxcache.pth"), d)
    return base


def job(env, *args, timeout=120, python=None):
    return subprocess.Popen([python or sys.executable, JOBS] + list(args), env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def result(p, timeout=120):
    out, err = p.communicate(timeout=timeout)
    assert p.returncode == 0, (p.returncode, out, err)
    lines = [line for line in out.splitlines() if line.startswith("{")]
    assert lines, (out, err)
    return json.loads(lines[-1]), err


def need_artifacts(d):
    try:
        with client.Client(d.socket) as c:
            c.artifact_get("ptxcache", "probe", wait_ms=0)
    except errors.Unsupported:
        raise Skip("this daemon does not serve artifact requests")


def warnings_in(err):
    return [line for line in err.splitlines() if line.startswith("WARNING") and "ptxcache" in line]


# ---- the package on its own -------------------------------------------------

def test_python_imports_from_a_lone_clone_without_side_effects():
    tmp = tempfile.mkdtemp(prefix="ptxcache-py-")
    try:
        env = clean_env(tmp)
        env["PYTHONPATH"] = PKG     # no stand-ins: nothing of PyTorch's or Triton's
        code = ("import os, sys; before = dict(os.environ); import ptxcache, ptxcache.torch, "
                "ptxcache.triton, ptxcache.inductor, ptxcache.__main__; "
                "assert dict(os.environ) == before; "
                "assert not [m for m in sys.modules if m.split('.')[0] in ('torch', 'triton', 'msgpack_x')]; "
                "import socket; print(ptxcache.__version__, ptxcache.Client.__name__)")
        r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                           timeout=60, cwd=tmp)
        assert r.returncode == 0 and r.stdout.startswith("0."), r.stderr
        assert not os.listdir(tmp), os.listdir(tmp)    # no file written
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def test_python_codec_agrees_with_msgpack():
    sample = {"id": 7, "ns": "triton", "key": "k" * 300, "value": b"\x00\xff" * 40000, "lease": True,
              "neg": -3, "big": 1 << 40, "small": -(1 << 40), "f": 0.5, "none": None,
              "list": [1, "two", b"3", {"x": False}], "e": "", "b": b""}
    assert wire.unpack(wire.pack(sample)) == sample
    pythons = [p for p in (sys.executable, "/usr/bin/python3") if os.path.exists(p)]
    with_msgpack = [p for p in pythons
                    if subprocess.run([p, "-c", "import msgpack"], capture_output=True).returncode == 0]
    if not with_msgpack:
        raise Skip("no interpreter here has the msgpack module (python3-msgpack)")
    code = ("import sys; sys.path.insert(0, %r); from ptxcache import wire; import msgpack; "
            "assert wire.codec_name().startswith('msgpack'); "
            "d = sys.stdin.buffer.read(); o = msgpack.unpackb(d, raw=False); "
            "sys.stdout.buffer.write(msgpack.packb(o, use_bin_type=True))" % PKG)
    r = subprocess.run([with_msgpack[0], "-c", code], input=wire.pack(sample), capture_output=True)
    assert r.returncode == 0, r.stderr
    assert wire.unpack(r.stdout) == sample


def test_python_socket_is_found_as_the_c_clients_find_it():
    assert client.socket_and_source({"PTXCACHE_SOCKET": "/x/s.sock", "XDG_RUNTIME_DIR": "/r"}) == \
        ("/x/s.sock", "PTXCACHE_SOCKET")
    tmp = tempfile.mkdtemp(prefix="ptxcache-py-")
    try:
        own = os.path.join(tmp, "ptxcache", "ptxcached.sock")
        os.makedirs(os.path.dirname(own))
        open(own, "w").close()
        assert client.socket_and_source({"XDG_RUNTIME_DIR": tmp}) == (own, "XDG_RUNTIME_DIR")
        p, _ = client.socket_and_source({})
        if not os.path.exists(client.SYSTEM_SOCKET):
            assert p == "/tmp/ptxcache-%d/ptxcached.sock" % os.getuid(), p
        # The C client agrees (ptxcache ping names the socket it tried).
        r = subprocess.run([CLI, "ping"], env={"PATH": "/usr/bin:/bin", "XDG_RUNTIME_DIR": tmp},
                           capture_output=True, text=True, timeout=30)
        assert own in r.stderr, r.stderr
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# ---- the client ------------------------------------------------------------------

def test_python_client_speaks_the_protocol():
    with Daemon(workers=1) as d:
        need_artifacts(d)
        with ptxcache.Client(d.socket) as a, ptxcache.Client(d.socket) as b:
            h = a.hello()
            assert h["proto"] == 1 and h["pid"] == d.proc.pid, h
            a.ping()
            assert "workers" in a.stats()
            r = a.artifact_get("triton", "k1", lease=True)
            assert not r.found and r.lease is not None, r
            # Another client: the key is being produced; no wait, no lease.
            r2 = b.artifact_get("triton", "k1", lease=True, wait_ms=0)
            assert not r2.found and r2.lease is None, r2
            try:
                b.artifact_put("triton", "k1", b"theirs")
                raise AssertionError("a put over another's lease was stored")
            except errors.Conflict as e:
                assert "conflict" in str(e), e
            assert a.artifact_put("triton", "k1", b"v1" * 1000, lease=r.lease)
            got = b.artifact_get("triton", "k1")
            assert got.found and got.value == b"v1" * 1000, got
            # Several keys at once, in order, with leases for the missing.
            many = b.artifact_get_many("triton", ["k1", "k2", "k3"], lease=True)
            assert [m.found for m in many] == [True, False, False], many
            assert many[1].lease and many[2].lease and many[1].lease != many[2].lease
            b.artifact_release(many[1].lease)
            r3 = a.artifact_get("triton", "k2", lease=True, wait_ms=0)
            assert r3.lease is not None, r3       # released: a may produce it
            try:
                a.artifact_get("Not A Namespace", "k")
                raise AssertionError("a bad namespace was accepted")
            except errors.Invalid as e:
                assert "invalid" in str(e)
            a.ping()    # the connection is still good after an error reply


def test_python_client_errors_name_what_failed():
    tmp = tempfile.mkdtemp(prefix="ptxcache-py-")
    try:
        missing = os.path.join(tmp, "none.sock")
        try:
            ptxcache.Client(missing).ping()
            raise AssertionError("connected to nothing")
        except errors.ConnectError as e:
            assert str(e).startswith("cannot connect to ptxcached at '%s'" % missing), e
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    with Daemon(workers=1) as d:
        c = ptxcache.Client(d.socket, timeout=1.0)
        c.ping()
        os.kill(d.proc.pid, signal.SIGSTOP)
        try:
            t0 = time.monotonic()
            try:
                c.ping()
                raise AssertionError("a stopped daemon answered")
            except errors.DaemonTimeout as e:
                assert d.socket in str(e), e
            assert 0.9 < time.monotonic() - t0 < 5
        finally:
            os.kill(d.proc.pid, signal.SIGCONT)
        c.ping()    # a new connection once it answers again
        c.close()


def test_python_progress_frames_keep_a_waiting_get_alive():
    """A get waiting for a producer longer than the silence bound is kept
    alive by the daemon's progress frames, and gets the producer's value."""
    with Daemon(workers=1) as d:
        need_artifacts(d)
        with ptxcache.Client(d.socket) as a, ptxcache.Client(d.socket, timeout=1.5) as b:
            lease = a.artifact_get("inductor-fx", "slow", lease=True).lease
            assert lease is not None
            import threading
            threading.Timer(3.5, lambda: a.artifact_put("inductor-fx", "slow", b"done",
                                                        lease=lease)).start()
            t0 = time.monotonic()
            r = b.artifact_get("inductor-fx", "slow", lease=True, wait_ms=20000)
            waited = time.monotonic() - t0
            assert r.found and r.value == b"done", r
            assert waited > 3.0, waited     # twice the silence bound, alive throughout


def test_python_a_forked_child_gets_its_own_connection():
    with Daemon(workers=1) as d:
        need_artifacts(d)
        st = artifacts.ArtifactStore(d.socket)
        assert st.put("triton", "fork", b"parent")
        pid = os.fork()
        if pid == 0:
            try:
                ok = artifacts.store() is not st and \
                    artifacts.ArtifactStore(d.socket).get("triton", "fork") == b"parent"
                c = st._client()
                c.ping()    # the parent's handle, in the child: reconnects
                os._exit(0 if ok else 1)
            except BaseException:
                os._exit(2)
        _, status = os.waitpid(pid, 0)
        assert os.WEXITSTATUS(status) == 0, status
        assert st.get("triton", "fork") == b"parent"   # the parent's connection is intact


def test_python_a_child_forked_mid_request_is_not_stuck_and_holds_no_lease():
    # Another thread of the parent is inside a request (it holds the
    # connection's lock, and the socket is open) when the process forks:
    # the child's copy of the client gets a lock and a connection of its
    # own, and the parent's connection is not the child's to keep open, so
    # the parent's lease ends when the parent closes it (the child lives on).
    import threading
    with Daemon(workers=1) as d:
        need_artifacts(d)
        holder, other = client.Client(d.socket), client.Client(d.socket)
        assert holder.artifact_get("triton", "busy", lease=True).lease
        c = client.Client(d.socket)
        assert c.artifact_get("triton", "forked", lease=True).lease
        t = threading.Thread(target=lambda: c.artifact_get("triton", "busy", wait_ms=3000))
        t.start()
        time.sleep(0.3)         # the thread waits, in the request, c's lock held
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                c.ping()        # on a connection of its own, at once
                code = 0
            except BaseException:
                code = 2
            os.write(w, b"%d" % code)
            time.sleep(10)      # the child lives on
            os._exit(code)
        try:
            import select
            assert select.select([r], [], [], 10)[0], "the child is stuck on the parent's lock"
            assert os.read(r, 1) == b"0"
            t.join()
            c.close()           # the parent's end of its lease on "forked"
            got = other.artifact_get("triton", "forked", lease=True, wait_ms=5000)
            assert got.lease is not None, "the child kept the parent's connection open"
        finally:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            holder.close()
            other.close()


def test_python_a_finalizers_release_inside_the_stores_lock_waits_for_nothing():
    # A garbage collection inside a block that holds the store's lock runs
    # a finalizer that releases a lease (a Triton backend's): it must not
    # wait for that lock (it deadlocked); the next call releases it.
    import threading
    with Daemon(workers=1) as d:
        need_artifacts(d)
        st = artifacts.ArtifactStore(d.socket)
        assert st.get("triton", "gc", lease=True) is None and st.holds("triton", "gc")
        done = threading.Event()
        with st._lock:          # as a `with self._lock:` block of the store's own
            t = threading.Thread(target=lambda: (st.release("triton", "gc"), done.set()))
            t.start()           # (another thread here: this one holds the lock)
            t.join(5)
            assert done.is_set(), "release waited for the store's lock"
        assert st.holds("triton", "gc")             # deferred, not lost
        st.get("triton", "other")                   # the next call releases it
        with client.Client(d.socket) as o:
            assert o.artifact_get("triton", "gc", lease=True, wait_ms=0).lease is not None


def test_python_a_lease_of_a_connection_gone_is_never_released_on_its_successor():
    # The daemon restarts: a lease taken before is gone with its
    # connection, and the new daemon numbers its leases from 1 again. The
    # old lease's release must not give up the new one of the same number.
    with tempfile.TemporaryDirectory() as t:
        cache = os.path.join(t, "cache")
        st = artifacts.ArtifactStore(os.path.join(t, "run", "ptxcached.sock"), retry_s=0)
        d = Daemon(workers=1, cache_dir=cache)
        try:
            need_artifacts(d)
            st.path = d.socket
            assert st.get("triton", "old", lease=True) is None and st.holds("triton", "old")
        finally:
            d.stop()
        with Daemon(workers=1, cache_dir=cache) as d:
            st.path = d.socket
            st._client().path = d.socket
            assert st.get("triton", "new", lease=True) is None and st.holds("triton", "new")
            st.release("triton", "old")
            with client.Client(d.socket) as o:
                got = o.artifact_get("triton", "new", lease=True, wait_ms=0)
                assert got.lease is None, "the old lease's release gave up the new one"


def test_python_a_malformed_message_is_a_wire_error_in_either_codec():
    # An array as a map's key, and nesting past any stack: a WireError
    # (the built-in codec let TypeError and RecursionError out).
    saved = wire._msgpack
    try:
        for codec in [None] + ([saved] if saved else []):
            wire._msgpack = codec
            for bad in (b"\x81\x90\x01", b"\x91" * 100000 + b"\xc0"):
                try:
                    wire.unpack(bad)
                    raise AssertionError("%r decoded" % bad[:8])
                except wire.WireError:
                    pass
    finally:
        wire._msgpack = saved


# ---- Triton ------------------------------------------------------------------------

def test_python_triton_processes_compile_a_kernel_once():
    """Four processes compiling the same kernel through Triton's
    RemoteCacheManager: one compiles, the others wait for its files."""
    tmp = tempfile.mkdtemp(prefix="ptxcache-py-")
    try:
        with Daemon(workers=1) as d:
            need_artifacts(d)
            marks = os.path.join(tmp, "marks")
            procs = [job(clean_env(tmp, d.socket, TRITON_CACHE_DIR=os.path.join(tmp, "t%d" % i),
                                   **TRITON_ENV), "triton", "KERNELKEY", "add_kernel", marks,
                         "--sleep", "2") for i in range(4)]
            res = [result(p) for p in procs]
            assert sorted(r["result"] for r, _ in res) == ["compiled", "hit", "hit", "hit"], res
            assert len(os.listdir(marks)) == 1
            assert all(r["files"] == res[0][0]["files"] for r, _ in res), res
            assert len(res[0][0]["files"]) == 4
            s = d.stats()
            assert s["artifact_waits"] >= 1 and s["artifact_wait_hits"] >= 1, s
            assert not any(warnings_in(err) for _, err in res), res
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def test_python_triton_failed_compile_hands_its_lease_on():
    """A compile that raises drops Triton's cache manager; the backend
    releases its lease then, not when the process ends."""
    tmp = tempfile.mkdtemp(prefix="ptxcache-py-")
    try:
        with Daemon(workers=1) as d:
            need_artifacts(d)
            marks = os.path.join(tmp, "marks")
            env = clean_env(tmp, d.socket, **TRITON_ENV)
            a = job(dict(env, TRITON_CACHE_DIR=os.path.join(tmp, "a")), "triton", "FAILKEY", "k",
                    marks, "--sleep", "1", "--fail", "--hold", "20")
            deadline = time.time() + 30
            while not (os.path.isdir(marks) and os.listdir(marks)):
                assert time.time() < deadline and a.poll() is None, a.communicate()
                time.sleep(0.05)
            t0 = time.time()
            r, _ = result(job(dict(env, TRITON_CACHE_DIR=os.path.join(tmp, "b")), "triton",
                              "FAILKEY", "k", marks))
            assert r["result"] == "compiled" and time.time() - t0 < 10, r
            assert a.poll() is None     # the failed producer is still alive
            assert d.stats()["artifact_lease_releases"] >= 1
            a.kill()
            a.communicate()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def test_python_triton_keeps_its_local_cache_when_the_daemon_is_down():
    tmp = tempfile.mkdtemp(prefix="ptxcache-py-")
    try:
        d = Daemon(workers=1)
        try:
            need_artifacts(d)
            env = clean_env(tmp, d.socket, PTXCACHE_SILENCE_MS="2000", **TRITON_ENV)
            d.stop(signal.SIGKILL)
            marks = os.path.join(tmp, "marks")
            r1, err1 = result(job(env, "triton", "DOWNKEY", "k", marks))
            assert r1["result"] == "compiled" and len(warnings_in(err1)) == 1, (r1, err1)
            # Down still: Triton's own local copy serves, as without ptxcache.
            r2, err2 = result(job(env, "triton", "DOWNKEY", "k", marks))
            assert r2["result"] == "hit" and r2["files"] == r1["files"], r2
            assert len(os.listdir(marks)) == 1
            # A fresh daemon learns the kernel from that local copy...
            d.start()
            r3, err3 = result(job(env, "triton", "DOWNKEY", "k", marks))
            assert r3["result"] == "hit" and not warnings_in(err3), (r3, err3)
            # ... and serves it to a process with an empty Triton cache.
            r4, _ = result(job(dict(env, TRITON_CACHE_DIR=os.path.join(tmp, "fresh")), "triton",
                               "DOWNKEY", "k", marks))
            assert r4["result"] == "hit" and r4["files"] == r1["files"], r4
            assert len(os.listdir(marks)) == 1
        finally:
            d.cleanup()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# ---- Inductor ----------------------------------------------------------------------

_EVERY_CACHE = r"""
import json, os, sys
import torch._inductor.config as ic           # imported before enable()
import ptxcache.torch
r = ptxcache.torch.enable()
from torch._inductor import remote_cache as rc
import torch._functorch.config as fc, torch._dynamo.config as dc
out = {"set": sorted(r["set"]), "kept": r["kept"],
       "config": [ic.fx_graph_remote_cache, ic.autotune_remote_cache, ic.bundled_autotune_remote_cache,
                  fc.enable_remote_autograd_cache, dc.automatic_dynamic_remote_pgo]}
ids = {"RemoteFxGraphCache": "fx-graph-v1", "RemoteAOTAutogradCache": "autograd-experimental",
       "RemoteAutotuneCache": "0123abcd", "RemoteBundledAutotuneCache": "bundled-autotune-v1",
       "RemoteDynamoPGOCache": "dynamo-pgo"}
for cls, cid in ids.items():
    c = rc.create_cache(cid, False, "Fb" + cls, cls)
    miss = c.get("key-" + cls)
    c.put("key-" + cls, {"data": "value of " + cls, "time_taken_ms": 1})
    out[cls] = [type(c.backend).__name__, isinstance(c.backend, rc.RemoteCacheBackend), miss,
                c.get("key-" + cls)]
out["stats"] = {name: vars(st) for name, st in rc.cache_stats._stats.items()}
print(json.dumps(out))
"""


def test_python_inductor_backends_serve_every_remote_cache():
    tmp = tempfile.mkdtemp(prefix="ptxcache-py-")
    try:
        with Daemon(workers=1) as d:
            need_artifacts(d)
            env = clean_env(tmp, d.socket, TORCH_DYNAMO_AUTOMATIC_DYNAMIC_REMOTE_PGO="0")
            r = subprocess.run([sys.executable, "-c", _EVERY_CACHE], env=env, capture_output=True,
                               text=True, timeout=120)
            assert r.returncode == 0, r.stderr
            out = json.loads(r.stdout)
            # Config modules imported before enable() got the switches; the
            # one set to 0 stayed off; the autotune cache, which compile
            # workers read too, stays off where they would not run the hook
            # (no ptxcache.pth installed); the bundled autotune cache is
            # left alone (inductor.NOT_SWITCHED_ON: PyTorch 2.11's bundle
            # fails a training graph's compile under dynamic shapes).
            assert out["config"] == [True, None, None, True, False], out
            assert out["kept"] == {"TORCH_DYNAMO_AUTOMATIC_DYNAMIC_REMOTE_PGO": "0"}, out
            assert "TORCHINDUCTOR_BUNDLED_AUTOTUNE_REMOTE_CACHE" not in out["set"], out
            assert "TRITON_CACHE_MANAGER" in out["set"] and "TRITON_PTXAS_PATH" in out["set"], out
            for cls in ("RemoteFxGraphCache", "RemoteAOTAutogradCache", "RemoteAutotuneCache",
                        "RemoteBundledAutotuneCache", "RemoteDynamoPGOCache"):
                name, is_backend, miss, hit = out[cls]
                assert name.startswith("Ptxcache") and is_backend and miss is None, out[cls]
                assert hit == {"data": "value of " + cls, "time_taken_ms": 1}, out[cls]
            # PyTorch's own stats saw our backends.
            assert out["stats"]["backend:PtxcacheFxGraphCacheBackend"]["hit"] == 1, out["stats"]
            # Each in its own namespace, under PyTorch's own key.
            with ptxcache.Client(d.socket) as c:
                v = c.artifact_get("inductor-aot", "pt2:autograd-experimental::key-RemoteAOTAutogradCache:c1")
                assert v.found and json.loads(v.value)["data"] == "value of RemoteAOTAutogradCache"
                assert c.artifact_get("dynamo-pgo", "pt2:dynamo-pgo::key-RemoteDynamoPGOCache:c1").found
            assert d.stats()["artifact_leases"] == 1     # the FX graph's miss alone
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def test_python_inductor_graph_compiled_once_with_the_environment_alone():
    """PTXCACHE_TORCH=1 and an installed ptxcache.pth, code unchanged: three
    processes compile one FX graph once; a graph Inductor does not store
    lets its waiters go when the producer moves to its next graph."""
    tmp = tempfile.mkdtemp(prefix="ptxcache-py-")
    try:
        with Daemon(workers=1) as d:
            need_artifacts(d)
            env = clean_env(tmp, d.socket, PTXCACHE_TORCH="1", PYTHONUSERBASE=pth_site(tmp))
            marks = os.path.join(tmp, "m1")
            procs = [job(env, "fx", "fgraph1", marks, "--sleep", "2") for _ in range(3)]
            res = [result(p) for p in procs]
            assert sorted(r["result"] for r, _ in res) == ["compiled", "hit", "hit"], res
            assert len(os.listdir(marks)) == 1
            assert all(r.get("data", "graph fgraph1") == "graph fgraph1" for r, _ in res)
            # Bypass: the producer never puts, and goes on to its next graph.
            marks = os.path.join(tmp, "m2")
            a = job(env, "fx", "fgraph2", marks, "--sleep", "1", "--bypass", "--then", "fgraph3",
                    "--hold", "20")
            deadline = time.time() + 30
            while not (os.path.isdir(marks) and os.listdir(marks)):
                assert time.time() < deadline and a.poll() is None, a.communicate()
                time.sleep(0.05)
            t0 = time.time()
            r, _ = result(job(env, "fx", "fgraph2", marks, "--bypass"))
            assert r["result"] == "compiled" and time.time() - t0 < 10, r
            assert a.poll() is None
            a.kill()
            a.communicate()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# ---- autotuning on a warm process --------------------------------------------------

# A graph's kernels, as (candidate BLOCKs, {BLOCK: benchmark time},
# options): descent stays on the candidate autotuning chose (k1: case 1
# of ptxcache/autotune.py), moves off the candidates (k2: PyTorch's own
# case), is the only candidate and moves (k3: case 2) or stays (k4); k5
# is a reduction that _dynamic_scale_rblock halves from BLOCK 16 (case
# 3): its producer chose 16 over 32 and 8, and a warm process, timing 16
# against 8 again, would find 8 faster by a hair.
_KERNELS = json.dumps({
    "k1": [[8, 16], {"8": 5, "16": 3, "32": 4}],
    "k2": [[8, 16], {"8": 5, "16": 4, "32": 2, "64": 3}],
    "k3": [[8], {"8": 5, "16": 3, "32": 4, "4": 9}],
    "k4": [[8], {"8": 2, "16": 3, "4": 3}],
    "k5": [[32], {"32": 5, "16": 4, "8": 4.1}, {"scale_from": 16,
                                                "warm_times": {"32": 5, "16": 4, "8": 3.9}}],
})


def test_python_a_warm_process_tunes_nothing_and_a_changed_gpu_tunes_again():
    """Max-autotune's coordinate descent, stored by a cold process, is
    believed by a warm one whose FX graph hit (no benchmark, and a Triton
    compile only for a stored best outside the candidates: from Triton's
    cache on a real node), with one autotune get a kernel, and runs the
    producer's choice, not a halved R-block timed again; with
    PTXCACHE_AUTOTUNE_RECHECK=0 (PyTorch 2.11's own methods) the warm
    process tunes 4 of the 5 kernels again, and chooses otherwise for the
    reduction; another backend hash (GPU, Triton) misses and tunes
    everything, as PyTorch means it to."""
    tmp = tempfile.mkdtemp(prefix="ptxcache-py-")
    try:
        with Daemon(workers=1) as d:
            need_artifacts(d)
            env = clean_env(tmp, d.socket, PTXCACHE_TORCH="1", PYTHONUSERBASE=pth_site(tmp))

            def run(phase, sub, *extra, **env_extra):
                r, err = result(job(dict(env, **env_extra), "autotune", phase,
                                    os.path.join(tmp, sub), _KERNELS, *extra))
                assert not warnings_in(err), err
                return r

            cold = run("cold", "cold")
            assert cold["counters"]["benchmarks"] > 0 and cold["fix"]["installed"], cold
            assert cold["chosen"] == {"k1": 16, "k2": 32, "k3": 16, "k4": 8, "k5": 16}, cold
            warm = run("warm", "warm1")
            assert warm["chosen"] == cold["chosen"], warm
            assert warm["counters"]["benchmarks"] == 0, warm
            assert warm["counters"]["coordesc_tuning_bench"] == 0, warm
            # k2 (PyTorch's own), k3 and k5 (ours): the stored best, outside
            # the candidates, loaded; nothing else (k5 not halved again).
            assert warm["counters"]["compiles"] == 3, warm
            assert warm["fix"]["marked"] == 2 and warm["fix"]["replaced"] == 2, warm
            assert warm["fix"]["unscaled"] == 5, warm
            lay = warm["layers"]["inductor-autotune"]
            assert lay["gets"] == 5 and lay["trips"] == 5 and lay["hits"] == 5, warm["layers"]
            assert "puts" not in warm["layers"].get("inductor-autotune", {}) or lay["puts"] == 0, warm
            # PyTorch's own methods: k1, k3, k4 and k5 tuned again, and k5,
            # halved and timed against the producer's choice, runs another.
            plain = run("warm", "warm2", PTXCACHE_AUTOTUNE_RECHECK="0")
            assert plain["counters"]["coordesc_tuning_bench"] > 0, plain
            assert plain["chosen"] == dict(cold["chosen"], k5=8), plain
            assert plain["fix"]["marked"] == plain["fix"]["unscaled"] == 0, plain
            # Another GPU or Triton: PyTorch's key differs, everything tunes.
            other = run("warm", "warm3", "--backend-hash", "gpu-b:triton-3.6")
            assert other["layers"]["inductor-autotune"]["hits"] == 0, other
            assert other["counters"]["benchmarks"] >= cold["counters"]["benchmarks"], (other, cold)
            assert other["fix"]["marked"] == other["fix"]["replaced"] == other["fix"]["unscaled"] == 0, \
                other
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def test_python_triton_key_is_computed_once_per_installation():
    """Triton's installation hash (triton_key(), 0.35 s of every fresh
    process on an H200) comes from the daemon in a second process, is
    computed again once a file of Triton's changes, and is Triton's own
    with PTXCACHE_TRITON_KEY=0."""
    tmp = tempfile.mkdtemp(prefix="ptxcache-py-")
    try:
        stubs = os.path.join(tmp, "stubs")
        shutil.copytree(STUBS, stubs, ignore=shutil.ignore_patterns("__pycache__"))
        with Daemon(workers=1) as d:
            need_artifacts(d)
            marks = os.path.join(tmp, "marks")
            env = clean_env(tmp, d.socket, PTXCACHE_TORCH="1", PYTHONUSERBASE=pth_site(tmp),
                            PYTHONPATH=PKG + os.pathsep + stubs, JITSTUB_MARKS=marks)

            def run(**extra):
                # The copy's jobs.py: its directory is the first on sys.path.
                p = subprocess.Popen([sys.executable, os.path.join(stubs, "jobs.py"), "tkey"],
                                     env=dict(env, **extra), stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
                r, err = result(p)
                assert not warnings_in(err), err
                assert r["same"], r
                return r

            def computed():
                return len(os.listdir(marks)) if os.path.isdir(marks) else 0

            first = run()
            assert first["counts"] == {"stored": 0, "computed": 1} and computed() == 1, first
            second = run()
            assert second["key"] == first["key"], (first, second)
            assert second["counts"] == {"stored": 1, "computed": 0} and computed() == 1, second
            assert second["layers"]["triton-key"]["gets"] == 1, second
            # A file of Triton's changes in place (its size and times, not
            # its name): computed again.
            with open(os.path.join(stubs, "triton", "runtime", "__init__.py"), "a") as f:
                f.write("# another Triton\n")
            third = run()
            assert third["counts"] == {"stored": 0, "computed": 1} and computed() == 2, third
            assert third["key"] != first["key"], third
            # Switched off: Triton's own function, the same answer.
            off = run(PTXCACHE_TRITON_KEY="0")
            assert off["key"] == third["key"] and computed() == 3, off
            assert "triton-key" not in off["layers"], off
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# ---- scopes ------------------------------------------------------------------------

def _copy_for_others(tmp):
    """The package and stand-ins where another uid can read them (the tree
    may sit in a 0700 directory)."""
    d = os.path.join(tmp, "shared")
    shutil.copytree(PKG, os.path.join(d, "python"), ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(STUBS, os.path.join(d, "stubs"), ignore=shutil.ignore_patterns("__pycache__"))
    for root, dirs, files in os.walk(tmp):
        os.chmod(root, 0o755)
        for f in files:
            os.chmod(os.path.join(root, f), 0o644)
    return os.path.join(d, "python"), os.path.join(d, "stubs")


_AS_OTHER = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
from ptxcache.artifacts import ArtifactStore
st = ArtifactStore(sys.argv[2])
seen = st.get("inductor-fx", "shared-key")
stored = st.put("inductor-fx", "shared-key", b"nobody's value")
print(json.dumps({"seen": seen and seen.decode(), "stored": stored,
                  "again": (st.get("inductor-fx", "shared-key") or b"").decode(), "counts": st.counts}))
"""


def test_python_two_uids_never_see_each_others_artifacts():
    if os.geteuid() != 0:
        raise Skip("needs root to run a client as another uid")
    tmp = tempfile.mkdtemp(prefix="ptxcache-py-")
    try:
        os.chmod(tmp, 0o755)
        pkg, _ = _copy_for_others(tmp)
        with Daemon(workers=1, extra=["--allow-users", str(NOBODY)]) as d:
            need_artifacts(d)
            make_reachable(d.socket)
            mine = artifacts.ArtifactStore(d.socket)
            assert mine.put("inductor-fx", "shared-key", b"root's value")
            r = subprocess.run(setpriv(NOBODY, NOBODY) + [sys.executable, "-c", _AS_OTHER, pkg, d.socket],
                               capture_output=True, text=True, timeout=60,
                               env={"PATH": "/usr/bin:/bin", "HOME": "/"})
            assert r.returncode == 0, r.stderr
            other = json.loads(r.stdout)
            assert other["seen"] is None and other["stored"], other
            assert other["again"] == "nobody's value", other
            assert mine.get("inductor-fx", "shared-key") == b"root's value"
            assert not other["counts"]["errors"], other
    finally:
        shutil.rmtree(tmp, ignore_errors=True)



def test_python_dynamic_shapes_profile_has_a_job_id_per_program():
    """Without TORCH_COMPILE_JOB_ID, PyTorch keeps no profile of dynamic
    shapes: every fresh process compiles a frame static, then again
    dynamic. The package gives each program its own job id (its script's
    path and content, its arguments): a second process of the same program
    compiles dynamic at once; another program, other arguments, an edited
    script, PTXCACHE_PGO_JOB_ID=0 or another uid do not share it; the
    user's own id wins."""
    tmp = tempfile.mkdtemp(prefix="ptxcache-py-")
    try:
        os.chmod(tmp, 0o755)
        pkg, stubs = _copy_for_others(tmp)
        script = os.path.join(stubs, "jobs.py")
        with Daemon(workers=1, extra=["--allow-users", str(NOBODY)]) as d:
            need_artifacts(d)
            env = clean_env(tmp, d.socket, PTXCACHE_TORCH="1", PYTHONUSERBASE=pth_site(tmp),
                            PYTHONPATH=pkg + os.pathsep + stubs)

            def run(*args, as_user=None, script=script, **extra):
                cmd = [sys.executable, script, "pgo", "128,256,384"] + list(args)
                if as_user is not None:
                    cmd = setpriv(as_user, as_user) + cmd
                p = subprocess.Popen(cmd, env=dict(env, **extra), stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
                r, err = result(p)
                assert not warnings_in(err), err
                return r

            first = run()
            assert first["job_id"].startswith("ptxcache-") and first["pgo"]["source"] == "ptxcache", first
            assert first["compiles"] == ["static 128", "dynamic"] and first["profile_hits"] == 0, first
            second = run()
            assert second["job_id"] == first["job_id"], (first, second)
            assert second["compiles"] == ["dynamic"] and second["profile_hits"] == 1, second
            # Other arguments: another job id, its own profile.
            other = run("variant-b")
            assert other["job_id"] not in (None, first["job_id"]), other
            assert other["compiles"] == ["static 128", "dynamic"], other
            # Switched off: PyTorch's behaviour, no job id.
            off = run(PTXCACHE_PGO_JOB_ID="0")
            assert off["job_id"] is None and off["pgo"]["source"] == "off", off
            assert off["compiles"] == ["static 128", "dynamic"], off
            # The user's job id wins, and is the one used.
            mine = run(TORCH_COMPILE_JOB_ID="my-job")
            assert mine["job_id"] == "my-job" and mine["pgo"]["source"] == "TORCH_COMPILE_JOB_ID", mine
            assert mine["compiles"] == ["static 128", "dynamic"], mine
            # An edited script is another program.
            edited = os.path.join(stubs, "jobs_edited.py")
            with open(script) as f, open(edited, "w") as g:
                g.write(f.read() + "\n# edited\n")
            os.chmod(edited, 0o644)
            ed = run(script=edited)
            assert ed["job_id"] not in (None, first["job_id"]) and ed["profile_hits"] == 0, ed
            # Another uid, the same program: the same job id, but the
            # daemon keeps its profile apart.
            if os.geteuid() == 0:
                make_reachable(d.socket)
                nobody = run(as_user=NOBODY, HOME="/", XDG_CACHE_HOME=os.path.join(tmp, "xdg-nobody"))
                assert nobody["job_id"] == first["job_id"], nobody
                assert nobody["compiles"] == ["static 128", "dynamic"], nobody
                assert nobody["profile_hits"] == 0, nobody
            assert run()["compiles"] == ["dynamic"]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def test_python_pgo_identity_of_a_program():
    """ptxcache.pgo.identity(): the script's real path, its content and
    the arguments; python -c by its code; none without a program."""
    from ptxcache import pgo
    tmp = tempfile.mkdtemp(prefix="ptxcache-py-")
    try:
        a = os.path.join(tmp, "train.py")
        with open(a, "w") as f:
            f.write("print(1)\n")
        link = os.path.join(tmp, "link.py")
        os.symlink(a, link)
        base, why = pgo.identity([a, "--lr", "1"], [])
        assert base.startswith(pgo.PREFIX) and a in why, (base, why)
        assert pgo.identity([link, "--lr", "1"], [])[0] == base       # the real path
        assert pgo.identity([a, "--lr", "2"], [])[0] != base
        assert pgo.identity([a, "--lr1"], [])[0] != base              # arguments kept apart
        with open(a, "a") as f:
            f.write("print(2)\n")
        assert pgo.identity([a, "--lr", "1"], [])[0] != base
        c1 = pgo.identity(["-c", "x"], ["python3", "-c", "import torch", "x"])[0]
        c2 = pgo.identity(["-c", "x"], ["python3", "-c", "import torch; 1", "x"])[0]
        assert c1 and c2 and c1 != c2
        assert pgo.identity([""], ["python3"]) [0] is None
        assert pgo.identity(["-"], ["python3", "-"])[0] is None
        assert pgo.identity([os.path.join(tmp, "gone.py")], [])[0] is None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

# ---- a daemon that is down, slow or refusing ---------------------------------------------

def test_python_daemon_stopped_midway_is_a_miss_with_one_warning():
    tmp = tempfile.mkdtemp(prefix="ptxcache-py-")
    try:
        with Daemon(workers=1) as d:
            need_artifacts(d)
            go = os.path.join(tmp, "go")
            p = job(clean_env(tmp, d.socket), "gets", "triton", "6", go)
            assert p.stdout.readline().strip() == "first"
            d.stop(signal.SIGKILL)
            open(go, "w").close()
            r, err = result(p)
            hits = [g[0] for g in r["gets"]]
            assert hits == [True, False, False, False, False, False], r
            assert all(g[1] < 2.0 for g in r["gets"][1:]), r      # no timeout waited out
            assert len(warnings_in(err)) == 1, err
            assert "cache miss" in warnings_in(err)[0] and d.socket in err, err
            assert r["counts"]["skipped"] == 4, r
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def test_python_slow_daemon_is_a_miss_after_the_silence_bound():
    with Daemon(workers=1) as d:
        need_artifacts(d)
        st = artifacts.ArtifactStore(d.socket, timeout=1.0)
        assert st.put("triton", "slow", b"v")
        logs = io.StringIO()
        h = logging.StreamHandler(logs)
        lg = logging.getLogger("ptxcache")
        lg.addHandler(h)
        os.kill(d.proc.pid, signal.SIGSTOP)
        try:
            t0 = time.monotonic()
            assert st.get("triton", "slow") is None
            assert 0.9 < time.monotonic() - t0 < 5
            t1 = time.monotonic()
            assert st.get("triton", "slow") is None and not st.put("triton", "x", b"y")
            assert time.monotonic() - t1 < 0.5
        finally:
            os.kill(d.proc.pid, signal.SIGCONT)
            lg.removeHandler(h)
        assert logs.getvalue().count("ptxcache:") == 1, logs.getvalue()
        assert "did not answer" in logs.getvalue() or "no answer" in logs.getvalue(), logs.getvalue()
        # After retry_s, asked again, silently.
        st.retry_s = 0
        st._down_until = 0.0
        assert st.get("triton", "slow") == b"v"


def test_python_a_lease_given_up_while_the_store_is_down_ends_at_once():
    """A process holds a lease when another of its threads finds the daemon
    silent past the bound: the store answers misses for retry_s, and the
    lease's put is skipped. The lease then ends with its connection, so
    another process waiting for the key becomes its producer at once,
    not at the end of its wait (or the lease's timeout, 300 s)."""
    with Daemon(workers=1) as d:
        need_artifacts(d)
        st = artifacts.ArtifactStore(d.socket, timeout=1.0, retry_s=600)
        assert st.get("triton", "held", lease=True) is None and st.holds("triton", "held")
        os.kill(d.proc.pid, signal.SIGSTOP)
        try:
            other = threading.Thread(target=st.get, args=("triton", "other"))
            other.start()
            other.join(30)
        finally:
            os.kill(d.proc.pid, signal.SIGCONT)
        assert not st.available() and st.counts["errors"] == 1, st.counts
        assert not st.put("triton", "held", b"v") and not st.holds("triton", "held")
        with client.Client(d.socket) as o:
            got = o.artifact_get("triton", "held", lease=True, wait_ms=5000)
        assert not got.found and got.lease is not None, "the lease outlived its put"


def test_python_refusing_daemon_is_a_miss_with_one_warning():
    if os.geteuid() != 0:
        raise Skip("needs root to run a client as another uid")
    tmp = tempfile.mkdtemp(prefix="ptxcache-py-")
    try:
        os.chmod(tmp, 0o755)
        pkg, _ = _copy_for_others(tmp)
        with Daemon(workers=1) as d:     # serves root and its own user, not 65534
            make_reachable(d.socket)
            code = _AS_OTHER.replace("print(", "import logging; logging.basicConfig(); print(")
            r = subprocess.run(setpriv(NOBODY, NOBODY) + [sys.executable, "-c", code, pkg, d.socket],
                               capture_output=True, text=True, timeout=60,
                               env={"PATH": "/usr/bin:/bin", "HOME": "/"})
            assert r.returncode == 0, r.stderr
            out = json.loads(r.stdout)
            assert out["seen"] is None and not out["stored"] and out["again"] == "", out
            w = [line for line in r.stderr.splitlines() if "ptxcache:" in line]
            assert len(w) == 1 and "denied" in w[0], r.stderr
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def test_python_switch_costs_a_process_that_imports_no_jit_nothing():
    """PTXCACHE_JIT=1 and ptxcache.pth: a process that imports no JIT gets
    the hook's finder and nothing else (no part imported, no thread, no
    variable set, no warning with no daemon); the import of each JIT
    begins by turning its part on, and PTXCACHE_TORCH=1 alone turns on
    the torch part only."""
    from ptxcache import jit, jitdirs
    assert set(jit.PARTS["jitdirs"][3]) == {k["module"] for k in jitdirs.KINDS.values() if k["served"]}
    tmp = tempfile.mkdtemp(prefix="ptxcache-py-")
    probe = ("import json, os, sys, threading\n{imp}\n"
             "print(json.dumps({{'mods': sorted(m for m in sys.modules if m.startswith('ptxcache')),"
             " 'threads': threading.active_count(),"
             " 'triton': os.environ.get('TRITON_CACHE_MANAGER')}}))")
    try:
        env = clean_env(tmp, os.path.join(tmp, "no-daemon.sock"), PTXCACHE_JIT="1",
                        PYTHONUSERBASE=pth_site(tmp), PTXCACHE_GPU_IDENTITY="test-gpu",
                        CUPY_CACHE_DIR=os.path.join(tmp, "cupy"))
        env["PYTHONPATH"] += os.pathsep + os.path.join(STUBS, "jitdirs")

        def run(imp, **extra):
            r = subprocess.run([sys.executable, "-c", probe.format(imp=imp)], env=dict(env, **extra),
                               capture_output=True, text=True, timeout=60)
            assert r.returncode == 0, r.stderr
            return json.loads(r.stdout.splitlines()[-1]), r.stderr

        got, err = run("")
        assert got == {"mods": ["ptxcache", "ptxcache._autoload", "ptxcache.errors", "ptxcache.jit"],
                       "threads": 1, "triton": None}, got
        assert err == "", err
        got, _ = run("import torch")
        assert {"ptxcache.torch", "ptxcache.prefetch"} <= set(got["mods"]), got
        assert "ptxcache.jitdirs" not in got["mods"] and got["triton"] == TRITON_ENV["TRITON_CACHE_MANAGER"], got
        # (The stand-in has no installed metadata: its directory is found
        # not served, but its import waited for that answer.)
        got, _ = run("import cupy\nfrom ptxcache import jitdirs\n"
                     "assert jitdirs.status()['dirs']['cupy']['ready'], jitdirs.status()")
        assert "ptxcache.jitdirs" in got["mods"] and "ptxcache.torch" not in got["mods"], got
        got, _ = run("import cupy, torch", PTXCACHE_JIT="0", PTXCACHE_TORCH="1")
        assert "ptxcache.torch" in got["mods"] and "ptxcache.jitdirs" not in got["mods"], got
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# ---- status --------------------------------------------------------------------------------

def test_python_status_says_what_is_wired():
    tmp = tempfile.mkdtemp(prefix="ptxcache-py-")
    try:
        with Daemon(workers=1) as d:
            need_artifacts(d)
            env = clean_env(tmp, d.socket, PTXCACHE_TORCH="1", PYTHONUSERBASE=pth_site(tmp))
            r = subprocess.run([sys.executable, "-m", "ptxcache", "status", "--json"], env=env,
                               capture_output=True, text=True, timeout=60)
            assert r.returncode == 0, r.stderr
            s = json.loads(r.stdout)
            assert s["daemon"]["reachable"] and s["daemon"]["artifacts"], s["daemon"]
            assert s["package"]["pth_installed"] and s["triton"]["wired"], s
            assert s["ptxas"]["wired"] and os.readlink(s["ptxas"]["front"]) == env["PTXCACHE_BIN"], s["ptxas"]
            caches = s["inductor"]["caches"]
            assert all(c["wired"] for n, c in caches.items() if n != "RemoteBundledAutotuneCache"), caches
            assert not caches["RemoteBundledAutotuneCache"]["wired"], caches
            assert "left off" in caches["RemoteBundledAutotuneCache"]["note"], caches
            assert caches["RemoteDynamoPGOCache"]["job_id_from"] == "ptxcache", caches
            r = subprocess.run([sys.executable, "-m", "ptxcache", "status"], env=env,
                               capture_output=True, text=True, timeout=60)
            assert "RemoteFxGraphCache           wired" in r.stdout, r.stdout
            assert "PGO job id: each program its own" in r.stdout, r.stdout
            r = subprocess.run([sys.executable, "-m", "ptxcache", "status", "--json"],
                               env=dict(env, TORCH_COMPILE_JOB_ID="j1"), capture_output=True,
                               text=True, timeout=60)
            pgo = json.loads(r.stdout)["inductor"]["caches"]["RemoteDynamoPGOCache"]
            assert pgo["job_id_from"] == "TORCH_COMPILE_JOB_ID" and "j1" in pgo["note"], pgo
            # Switched off: says so.
            off = clean_env(tmp, d.socket)
            r = subprocess.run([sys.executable, "-m", "ptxcache", "status", "--json"], env=off,
                               capture_output=True, text=True, timeout=60)
            s = json.loads(r.stdout)
            assert not s["triton"]["wired"] and not s["ptxas"]["wired"], s
            assert not any(c["wired"] for c in s["inductor"]["caches"].values()), s["inductor"]
            assert s["inductor"]["caches"]["RemoteDynamoPGOCache"]["job_id_from"] is None, s["inductor"]
            d.stop(signal.SIGKILL)
            r = subprocess.run([sys.executable, "-m", "ptxcache", "status"], env=off,
                               capture_output=True, text=True, timeout=60)
            assert r.returncode == 1 and "NOT reachable" in r.stdout, r.stdout
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def test_python_status_is_no_job_and_prefetches_nothing():
    """`python3 -m ptxcache status` turns the waiting parts on to say what
    a program gets, but is no job: it starts no prefetch of its own (no
    thread, no request for a record of its own command line)."""
    tmp = tempfile.mkdtemp(prefix="ptxcache-py-")
    code = ("import atexit, runpy, sys, threading\n"
            "atexit.register(lambda: print('THREADS', sorted(t.name for t in threading.enumerate())))\n"
            "sys.argv = ['ptxcache', 'status', '--json']\n"
            "runpy.run_module('ptxcache', run_name='__main__', alter_sys=True)\n")
    try:
        with Daemon(workers=1) as d:
            need_artifacts(d)
            env = clean_env(tmp, d.socket, PTXCACHE_TORCH="1", PYTHONUSERBASE=pth_site(tmp))
            r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                               text=True, timeout=60)
            assert r.returncode == 0, r.stderr
            s = json.loads(r.stdout[:r.stdout.rindex("THREADS")])
            assert s["inductor"]["caches"]["RemoteFxGraphCache"]["wired"], s["inductor"]
            assert "ptxcache-prefetch" not in r.stdout.split("THREADS")[-1], r.stdout[-300:]
            # A program with the same switch does prefetch (the test's premise).
            job = subprocess.run([sys.executable, "-c", "import threading, torch\n"
                                  "print(sorted(t.name for t in threading.enumerate()))"],
                                 env=env, capture_output=True, text=True, timeout=60)
            assert "ptxcache-prefetch" in job.stdout, (job.stdout, job.stderr)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def test_python_a_value_the_daemon_refuses_is_not_stored_and_not_an_outage():
    """Over artifact-max-value: that put is not stored, its lease is given
    up for the waiters, and the daemon is still asked (no warning)."""
    with Daemon(workers=1, extra=["--artifact-max-value", "4096"]) as d:
        need_artifacts(d)
        logs = io.StringIO()
        h = logging.StreamHandler(logs)
        logging.getLogger("ptxcache").addHandler(h)
        try:
            st = artifacts.ArtifactStore(d.socket)
            assert st.get("inductor-fx", "huge", lease=True) is None and st.holds("inductor-fx", "huge")
            assert not st.put("inductor-fx", "huge", b"x" * 10000)
            other = artifacts.ArtifactStore(d.socket)
            assert other.get("inductor-fx", "huge", lease=True) is None
            assert other.holds("inductor-fx", "huge")      # handed on at once
            assert st.available() and st.put("inductor-fx", "small", b"x" * 100)
            assert st.get("inductor-fx", "small") == b"x" * 100
        finally:
            logging.getLogger("ptxcache").removeHandler(h)
        assert "ptxcache:" not in logs.getvalue(), logs.getvalue()


def test_python_a_value_over_every_limit_is_refused_here_and_the_store_stays_up():
    """A put over artifact-max-value and max-request both is refused at
    its header with the connection, which reads as the daemon gone (every
    get a miss for retry_s). The package has the daemon's limit from its
    hello and refuses such a value itself, its lease handed on."""
    with Daemon(workers=1, extra=["--artifact-max-value", "4096", "--max-request", "2048"]) as d:
        need_artifacts(d)
        st = artifacts.ArtifactStore(d.socket)
        assert st.put("inductor-fx", "small", b"s" * 100)
        assert st.get("inductor-fx", "huge", lease=True) is None and st.holds("inductor-fx", "huge")
        # Past what any put frame may be (artifact-max-value and 64 KiB).
        assert not st.put("inductor-fx", "huge", b"x" * (200 << 10))
        assert st.available() and st.counts["errors"] == 0, st.counts
        assert st.get("inductor-fx", "small") == b"s" * 100
        other = artifacts.ArtifactStore(d.socket)
        assert other.get("inductor-fx", "huge", lease=True) is None
        assert other.holds("inductor-fx", "huge")      # handed on at once


# ---- a hostile daemon ------------------------------------------------------------------

def test_python_a_hostile_daemons_descriptors_are_closed_and_its_sizes_refused():
    # A daemon may send a descriptor with any frame: those the client does
    # not take (with progress frames here) are closed, not kept. And a
    # value's descriptor must be of at most REPLY_MAX bytes, as an inline
    # value: a sparse file of more is refused before a byte of it is read.
    import socket
    import struct
    import threading
    tmp = tempfile.mkdtemp(prefix="ptxcache-py-")
    path, big = os.path.join(tmp, "s.sock"), os.path.join(tmp, "sparse")
    with open(big, "wb") as f:
        f.truncate(client.REPLY_MAX + 1)
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(1)

    def serve():
        c, _ = srv.accept()
        fd = os.open(big, os.O_RDONLY)
        for first in (True, False):
            hdr = c.recv(wire.HEADER, socket.MSG_WAITALL)
            rid = wire.unpack(c.recv(wire.parse_header(hdr, 1 << 20)[1], socket.MSG_WAITALL))["id"]
            if first:
                for _ in range(40):
                    c.sendmsg([wire.frame(wire.T_PROGRESS, {"id": rid, "fd": True})],
                              [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack("i", fd))])
                c.sendall(wire.frame(wire.T_ARTIFACT_GET | wire.REPLY, {"id": rid, "found": False}))
            else:
                reply = {"id": rid, "found": True, "fd": True, "value_len": client.REPLY_MAX + 1}
                c.sendmsg([wire.frame(wire.T_ARTIFACT_GET | wire.REPLY, reply)],
                          [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack("i", fd))])
        c.recv(1)
        c.close()

    def open_on_big():          # the daemon's own one, and any the client kept
        fds = []
        for fd in os.listdir("/proc/self/fd"):
            try:
                fds += [fd] if os.readlink("/proc/self/fd/" + fd) == big else []
            except OSError:
                pass
        return len(fds)

    threading.Thread(target=serve, daemon=True).start()
    c = client.Client(path)
    try:
        assert c.artifact_get("t", "k").value is None
        assert open_on_big() == 1
        try:
            c.artifact_get("t", "k")
            raise AssertionError("a value of more than REPLY_MAX bytes was taken")
        except errors.ProtocolError as e:
            assert "at most %d bytes" % client.REPLY_MAX in str(e), e
        assert open_on_big() == 1
    finally:
        c.close()
        srv.close()
        shutil.rmtree(tmp)


# ---- a daemon of another version ---------------------------------------------------

class OldDaemon:
    """A stand-in for a ptxcached of another version: it says so in its
    hello (0.1.0 had no version field: the server string alone) and
    answers every artifact get with a miss, every put as stored."""

    def __init__(self, path):
        import socket
        import threading
        self.srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.srv.bind(path)
        self.srv.listen(8)
        self.path = path
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        import threading
        while True:
            try:
                c, _ = self.srv.accept()
            except OSError:
                return
            threading.Thread(target=self._conn, args=(c,), daemon=True).start()

    def _conn(self, c):
        buf = b""
        try:
            while True:
                while len(buf) < wire.HEADER or len(buf) < wire.HEADER + wire.parse_header(
                        buf[:wire.HEADER], 1 << 30)[1]:
                    more = c.recv(65536)
                    if not more:
                        return
                    buf += more
                t, n = wire.parse_header(buf[:wire.HEADER], 1 << 30)
                body = wire.unpack(buf[wire.HEADER:wire.HEADER + n])
                buf = buf[wire.HEADER + n:]
                reply = {"id": body["id"]}
                if t == wire.T_HELLO:
                    reply.update(proto=1, server="ptxcached 0.1.0", compiler="LLVM", pid=1)
                elif t == wire.T_ARTIFACT_GET:
                    reply.update(found=False)
                elif t == wire.T_ARTIFACT_PUT:
                    reply.update(stored=True)
                c.sendall(wire.frame(t | wire.REPLY, reply))
        finally:
            c.close()

    def close(self):
        self.srv.close()


def test_python_a_daemon_of_another_version_is_named_in_the_warning_and_status():
    tmp = tempfile.mkdtemp(prefix="ptxcache-py-")
    old = OldDaemon(os.path.join(tmp, "old.sock"))
    try:
        env = clean_env(tmp, old.path, **TRITON_ENV)
        r, err = result(job(env, "triton", "OLDKEY", "k", os.path.join(tmp, "marks")))
        assert r["result"] == "compiled", r
        w = warnings_in(err)
        assert len(w) == 1 and "version 0.1.0" in w[0] and ptxcache.__version__ in w[0], err
        r = subprocess.run([sys.executable, "-m", "ptxcache", "status", "--json", "--no-import"],
                           env=env, capture_output=True, text=True, timeout=60)
        d = json.loads(r.stdout)["daemon"]
        assert d["version"] == "0.1.0" and d["same_version"] is False, d
        r = subprocess.run([sys.executable, "-m", "ptxcache", "status", "--no-import"],
                           env=env, capture_output=True, text=True, timeout=60)
        assert "version 0.1.0, NOT this package's %s" % ptxcache.__version__ in r.stdout, r.stdout
        assert "is version 0.1.0, this package %s" % ptxcache.__version__ in r.stdout, r.stdout
        # The same daemon version: no warning.
        with Daemon(workers=1) as d:
            need_artifacts(d)
            _, err = result(job(clean_env(tmp, d.socket, **TRITON_ENV), "triton", "NEWKEY", "k",
                                os.path.join(tmp, "marks2")))
            assert not warnings_in(err), err
    finally:
        old.close()
        shutil.rmtree(tmp, ignore_errors=True)


def test_python_status_says_which_daemon_is_in_use_and_why():
    tmp = tempfile.mkdtemp(prefix="ptxcache-py-")
    try:
        def st(**extra):
            env = clean_env(tmp, XDG_RUNTIME_DIR=os.path.join(tmp, "run"), **extra)
            r = subprocess.run([sys.executable, "-m", "ptxcache", "status", "--json", "--no-import"],
                               env=env, capture_output=True, text=True, timeout=60)
            return json.loads(r.stdout)
        nobody = os.path.join(tmp, "node.sock")
        s = st(PTXCACHE_NODE_SOCKET=nobody)
        assert s["daemon"]["in_use"] == "none" and nobody in s["daemon"]["why"], s["daemon"]
        assert "PTXCACHE_AUTOSTART=0" in s["next"][0], s["next"]
        s = st(PTXCACHE_NODE_SOCKET=nobody, PTXCACHE_AUTOSTART="1")
        assert "starts ptxcached for you" in s["next"][0], s["next"]
        assert any("PTXCACHE_JIT=1" in n for n in s["next"]), s["next"]
        with Daemon(workers=1) as d:
            s = st(PTXCACHE_NODE_SOCKET=d.socket)
            assert s["daemon"]["in_use"] == "node service" and s["daemon"]["reachable"], s["daemon"]
            assert s["daemon"]["same_version"], s["daemon"]
            s = st(PTXCACHE_SOCKET=d.socket)
            assert s["daemon"]["in_use"] == "given", s["daemon"]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
