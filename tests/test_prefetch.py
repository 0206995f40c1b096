# SPDX-License-Identifier: Apache-2.0
"""ptxcache.prefetch against the real daemon, in real processes started as
a job is (PTXCACHE_TORCH=1 and ptxcache.pth: the torch part, prefetch
included, turned on as the import of torch begins; the stand-in's here):
a job's second process finds its entries fetched ahead and asks the daemon
for none of them itself; the record's bound; another tenant's scope; a
daemon killed mid-prefetch; a key asked for while its batch is on the wire.

A relay between the job and the daemon (Relay) holds the daemon's replies
on a connection once its first reply has passed: a slow daemon, made
deterministic, the one fault here that the real daemon cannot be told to
produce (every byte and descriptor is the daemon's own).
"""
import array
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

from harness import Daemon
from test_python import PKG, clean_env, need_artifacts, pth_site, warnings_in
from test_tenants import tenant_daemon

NOT_UNDER_SANITIZERS = "the Python package's own logic; the daemon's paths it takes are test_artifact's and test_tenants'"

NS = "inductor-fx"

# A job: PF_N entries of NS got with a lease as an FX graph is, each put
# on a miss (PF_SIZE bytes); with PF_GO set, it waits for a line on stdin
# first and prints "asking" before its gets. Prints one JSON line.
JOB = r"""
import json, logging, os, sys, time
logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
import torch  # noqa: F401 - what turns the package's torch part on
from ptxcache.artifacts import store
from ptxcache import prefetch
n, size = int(os.environ["PF_N"]), int(os.environ.get("PF_SIZE", "64"))
if os.environ.get("PF_SETTLE") and prefetch._job is not None:
    # As importing torch takes a while: the prefetch done first (else a
    # key asked for before its batch is sent is the program's to ask).
    for _ in range(6000):
        if not prefetch._job.fetching:
            break
        time.sleep(0.01)
if os.environ.get("PF_GO"):
    print("ready", flush=True)
    sys.stdin.readline()
    print("asking", flush=True)
st = store()
got = []
for i in range(n):
    key = "graph-%d" % i
    value = ((b"%d:" % i) * size)[:size]
    v = st.get("inductor-fx", key, lease=True)
    got.append(None if v is None else v == value)
    if v is None:
        st.put("inductor-fx", key, value)
print(json.dumps({"got": got, "counts": st.counts, "layers": st.layers(),
                  "job": prefetch._job is not None}), flush=True)
"""


def job_env(tmp, sock, **extra):
    return clean_env(tmp, sock, PTXCACHE_TORCH="1", PYTHONUSERBASE=pth_site(tmp),
                     PTXCACHE_SILENCE_MS="30000", **extra)


def write_job(tmp):
    path = os.path.join(tmp, "job.py")
    with open(path, "w") as f:
        f.write(JOB)
    return path


def run_job(script, env, **extra):
    r = subprocess.run([sys.executable, script], env=dict(env, **extra), capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
    out = json.loads([x for x in r.stdout.splitlines() if x.startswith("{")][-1])
    return out, r.stderr


def hits(d):
    s = d.stats()
    return s["artifact_hits"], s["artifact_misses"]


def test_prefetch_second_process_asks_for_none_of_its_entries():
    """The job's first process compiles (misses, puts) and leaves the
    record at exit; the second finds every entry in the table: the daemon
    answers the record's get and the prefetch's, and no get of the
    program's own (no round trip in its layer). PTXCACHE_PREFETCH=0: the
    program asks for each."""
    tmp = tempfile.mkdtemp(prefix="ptxcache-pf-")
    try:
        with Daemon(workers=1) as d:
            need_artifacts(d)
            env, script = job_env(tmp, d.socket, PF_N="12", PF_SETTLE="1"), write_job(tmp)
            first, err = run_job(script, env)
            assert first["job"] and first["got"] == [None] * 12 and first["counts"]["puts"] == 12, first
            assert not warnings_in(err), err
            h0, m0 = hits(d)
            second, err = run_job(script, env)
            assert not warnings_in(err), err
            assert second["got"] == [True] * 12, second
            c = second["counts"]
            assert c["prefetched"] == 12 and c["prefetch_used"] == 12, c
            assert c["prefetch_wasted_bytes"] == 0 and c["leases"] == 0 and c["puts"] == 0, c
            assert second["layers"][NS]["trips"] == 0 and second["layers"][NS]["hits"] == 12, second
            h1, m1 = hits(d)
            # The record and the 12 entries, once each; no miss.
            assert (h1 - h0, m1 - m0) == (13, 0), (h0, m0, h1, m1)
            # Off: no prefetch, a get per entry.
            off, _ = run_job(script, env, PTXCACHE_PREFETCH="0")
            assert not off["job"] and off["counts"]["prefetched"] == 0, off
            assert off["layers"][NS]["trips"] == 12 and off["got"] == [True] * 12, off
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def test_prefetch_record_over_the_bound_fetches_its_first_entries():
    """A record of 20 entries (written by a process with the default bound)
    and a process whose bound is 5 entries, then 3 entries' bytes: it
    fetches the first ones in the record's order (the last run's order of
    first use) up to the bound, the others the normal way; the record it
    leaves holds no more than its bound."""
    tmp = tempfile.mkdtemp(prefix="ptxcache-pf-")
    try:
        with Daemon(workers=1) as d:
            need_artifacts(d)
            env, script = job_env(tmp, d.socket, PF_N="20", PF_SIZE="1024", PF_SETTLE="1"), write_job(tmp)
            run_job(script, env)
            out, _ = run_job(script, env, PTXCACHE_PREFETCH_ENTRIES="5")
            c = out["counts"]
            assert c["prefetched"] == 5 and c["prefetch_used"] == 5, c
            assert out["layers"]["(prefetch)"]["gets"] == 1 + 5, out["layers"]
            assert out["layers"][NS]["trips"] == 15 and out["got"] == [True] * 20, out
            # Bytes: 3 KiB of the record's 1 KiB values (as the record says).
            out, _ = run_job(script, env, PTXCACHE_PREFETCH_MB=str(3.5 / 1024))
            assert out["counts"]["prefetched"] == 3, out["counts"]
            assert out["layers"]["(prefetch)"]["gets"] == 1 + 3, out["layers"]
            from ptxcache.artifacts import ArtifactStore
            st = ArtifactStore(d.socket)
            from ptxcache import prefetch
            rec = json.loads(st.get(prefetch.RECORD_NS, job_id_of(script, env)))
            assert len(rec["entries"]) == 3, rec
            assert [e[1] for e in rec["entries"]] == ["graph-0", "graph-1", "graph-2"], rec
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def job_id_of(script, env):
    r = subprocess.run([sys.executable, "-c", "import sys; from ptxcache import prefetch; "
                        "sys.argv = [sys.argv[1]]; print(prefetch.job_id())", script],
                       env=dict(env, PTXCACHE_TORCH="0"), capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def test_prefetch_another_tenant_sees_neither_the_record_nor_the_entries():
    """The same job on tenant y's socket after it ran on x's: y's process
    finds no record and fetches nothing; given x's record in its own scope,
    it fetches y's values under those keys, never x's."""
    tmp = tempfile.mkdtemp(prefix="ptxcache-pf-")
    try:
        d = tenant_daemon("x,y", workers=1)
        with d:
            need_artifacts(d)
            script = write_job(tmp)
            ex = job_env(tmp, d.sock("x"), PF_N="6", PF_SIZE="256", PF_SETTLE="1")
            ey = job_env(tmp, d.sock("y"), PF_N="6", PF_SIZE="64", PF_SETTLE="1")
            run_job(script, ex)
            again, _ = run_job(script, ex)
            assert again["counts"]["prefetched"] == 6 and again["got"] == [True] * 6, again
            from ptxcache.artifacts import ArtifactStore
            from ptxcache import prefetch
            jid = job_id_of(script, ex)
            rec = ArtifactStore(d.sock("x")).get(prefetch.RECORD_NS, jid)
            assert rec and b"graph-5" in rec, rec
            y = ArtifactStore(d.sock("y"))
            assert y.get(prefetch.RECORD_NS, jid) is None
            other, _ = run_job(script, ey)
            assert other["counts"]["prefetched"] == 0 and other["got"] == [None] * 6, other
            assert other["layers"]["(prefetch)"]["hits"] == 0, other["layers"]
            # x's record in y's scope: its keys are looked up in y's scope,
            # which holds y's 64-byte values (x's, of 256 bytes, would not
            # compare equal).
            assert y.put(prefetch.RECORD_NS, jid, rec)
            mixed, _ = run_job(script, ey)
            assert mixed["counts"]["prefetched"] == 6 and mixed["got"] == [True] * 6, mixed
            assert mixed["counts"]["prefetch_bytes"] == 6 * 64, mixed
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


class Relay:
    """Between clients and the daemon at upstream: every byte and
    descriptor both ways; while holding, a connection's replies after its
    first whole frame wait (self.held is set once some are waiting) until
    release(). The daemon's end closing closes the client's."""

    def __init__(self, upstream, path):
        self.upstream, self.path = upstream, path
        self.holding, self.released, self.held = True, threading.Event(), threading.Event()
        self.srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.srv.bind(path)
        self.srv.listen(16)
        threading.Thread(target=self._accept, daemon=True).start()

    def release(self):
        self.released.set()

    def _accept(self):
        while True:
            try:
                down, _ = self.srv.accept()
            except OSError:
                return
            up = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                up.connect(self.upstream)
            except OSError:
                down.close()        # the daemon is gone: so is the connection
                continue
            threading.Thread(target=self._pump, args=(down, up, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(up, down, True), daemon=True).start()

    def _pump(self, src, dst, replies):
        """src to dst; replies: hold what follows the first frame."""
        buf = bytearray()       # held
        passed = not replies
        src.settimeout(0.05)
        try:
            while True:
                if buf and (passed and self.released.is_set()):
                    dst.sendall(bytes(buf))
                    buf.clear()
                try:
                    data, anc, _flags, _ = src.recvmsg(1 << 16, socket.CMSG_SPACE(16 * 4))
                except socket.timeout:
                    continue
                fds = array.array("i")
                for level, kind, blob in anc:
                    if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                        fds.frombytes(blob[:len(blob) - len(blob) % fds.itemsize])
                if not data:
                    break
                if not passed:
                    buf += data
                    if len(buf) >= 8 and len(buf) >= 8 + struct.unpack(">I", buf[4:8])[0]:
                        n = 8 + struct.unpack(">I", buf[4:8])[0]
                        dst.sendmsg([bytes(buf[:n])], _rights(fds))
                        fds = array.array("i")
                        del buf[:n]
                        passed = True
                    data = b""
                elif replies and (buf or not self.released.is_set()):
                    assert not fds, "the relay holds no descriptors"
                    buf += data
                    data = b""
                if buf and passed:
                    self.held.set()
                if data:
                    dst.sendmsg([data], _rights(fds))
                for fd in fds:
                    os.close(fd)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self):
        self.srv.close()
        self.released.set()


def _rights(fds):
    return [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)] if fds else []


def main_thread_blocked(pid):
    """Whether the process's main thread sleeps in futex() (a wait on a
    lock or event), not in a socket read."""
    try:
        with open("/proc/%d/task/%d/syscall" % (pid, pid)) as f:
            return f.read().split()[0] == "202"
    except (OSError, IndexError):
        return False


def start_held_job(tmp, d, script, n):
    relay = Relay(d.socket, os.path.join(tmp, "relay.sock"))
    env = job_env(tmp, relay.path, PF_N=str(n), PF_GO="1")
    p = subprocess.Popen([sys.executable, script], env=env, stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "ready"
    # The record has passed, the first batch's replies are held.
    assert relay.held.wait(60), "the prefetch never sent a batch"
    p.stdin.write("go\n")
    p.stdin.flush()
    assert p.stdout.readline().strip() == "asking"
    return relay, p


def test_prefetch_get_of_a_key_in_flight_waits_for_it_and_asks_once():
    """The program asks for its first entry while the prefetch's batch is
    on the wire (the daemon's replies held): it waits for that batch and
    takes the value from it; the daemon sees one get of the key, the
    prefetch's."""
    tmp = tempfile.mkdtemp(prefix="ptxcache-pf-")
    relay = None
    try:
        with Daemon(workers=1) as d:
            need_artifacts(d)
            script = write_job(tmp)
            run_job(script, job_env(tmp, d.socket, PF_N="4", PF_GO="1"), PF_GO="")
            h0, m0 = hits(d)
            relay, p = start_held_job(tmp, d, script, 4)
            deadline = time.monotonic() + 60
            while not main_thread_blocked(p.pid) and p.poll() is None:
                assert time.monotonic() < deadline, "the program neither waited nor ended"
                time.sleep(0.01)
            relay.release()
            out, err = p.communicate(timeout=120)
            assert p.returncode == 0, (out, err)
            r = json.loads(out.splitlines()[-1])
            assert r["got"] == [True] * 4 and r["counts"]["prefetch_used"] == 4, r
            assert r["layers"][NS]["trips"] == 0 and r["counts"]["prefetch_timeouts"] == 0, r
            h1, m1 = hits(d)
            assert (h1 - h0, m1 - m0) == (5, 0), (h0, m0, h1, m1)
    finally:
        if relay:
            relay.close()
        shutil.rmtree(tmp, ignore_errors=True)


def test_prefetch_daemon_killed_mid_prefetch_leaves_the_program_working():
    """SIGKILL of the daemon while the prefetch's batch is on the wire and
    the program waits for a key of it: the prefetch stops, the program's
    gets are misses at once (the daemon is down), its puts are skipped,
    one warning, exit 0."""
    tmp = tempfile.mkdtemp(prefix="ptxcache-pf-")
    relay = None
    try:
        with Daemon(workers=1) as d:
            need_artifacts(d)
            script = write_job(tmp)
            run_job(script, job_env(tmp, d.socket, PF_N="200", PF_GO="1"), PF_GO="")
            relay, p = start_held_job(tmp, d, script, 200)
            deadline = time.monotonic() + 60
            while not main_thread_blocked(p.pid) and p.poll() is None:
                assert time.monotonic() < deadline, "the program neither waited nor ended"
                time.sleep(0.01)
            d.stop(signal.SIGKILL)
            out, err = p.communicate(timeout=120)
            assert p.returncode == 0, (out, err)
            r = json.loads(out.splitlines()[-1])
            c = r["counts"]
            assert r["got"] == [None] * 200, r
            assert c["prefetch_used"] == 0 and c["prefetch_timeouts"] == 0, c
            assert c["errors"] == 1 and c["skipped"] >= 199 + 200, c
            assert len(warnings_in(err)) == 1 and "Traceback" not in err, err
    finally:
        if relay:
            relay.close()
        shutil.rmtree(tmp, ignore_errors=True)


def test_prefetch_compile_workers_neither_fetch_nor_write_the_jobs_record():
    """Inductor's compile workers inherit the job's variables (its
    TORCH_COMPILE_JOB_ID too) and run ptxcache.pth, but are not the job:
    the same program run as PyTorch runs a worker's script fetches
    nothing and leaves the job's record as it was (its reads would age
    the record's entries out)."""
    tmp = tempfile.mkdtemp(prefix="ptxcache-pf-")
    try:
        with Daemon(workers=1) as d:
            need_artifacts(d)
            env, script = job_env(tmp, d.socket, PF_N="4", PF_SETTLE="1",
                                  TORCH_COMPILE_JOB_ID="train-7"), write_job(tmp)
            run_job(script, env)
            record = lambda: subprocess.run(  # noqa: E731
                [sys.executable, "-c", "import sys; from ptxcache.artifacts import store; "
                 "sys.stdout.write(repr(store().get('job-entries', 'torch:train-7')))"],
                env=env, capture_output=True, text=True, timeout=60).stdout
            before = record()
            assert "graph-3" in before, before
            worker_dir = os.path.join(tmp, "torch", "_inductor", "compile_worker")
            os.makedirs(worker_dir)
            worker = os.path.join(worker_dir, "__main__.py")
            shutil.copy(script, worker)
            for _ in range(3):
                out, _ = run_job(worker, env, PF_N="1")
                assert not out["job"] and out["counts"]["prefetched"] == 0, out
            assert record() == before
            # The job's own process still finds its four entries.
            out, _ = run_job(script, env)
            assert out["counts"]["prefetch_used"] == 4, out
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
