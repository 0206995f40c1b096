# SPDX-License-Identifier: Apache-2.0
"""Hard faults, SQLite's crash tests in miniature: the daemon killed with
SIGKILL at random points while clients write, a corrupt blob, a corrupt
database file. Every result acknowledged to a client must be in the cache
after restart with the right bytes, and `ptxcached --verify` must pass.

The random points come from a seeded generator (PTXCACHE_CRASH_SEED picks
another seed, PTXCACHE_CRASH_ROUNDS another round count); the seed is
printed so a failure can be replayed."""
import json
import os
import random
import signal
import sqlite3
import subprocess
import threading
import time

from harness import DAEMON, Daemon

ROUNDS = int(os.environ.get("PTXCACHE_CRASH_ROUNDS", "20"))
CLIENTS = 4

TEMPLATE = """target triple = "nvptx64-nvidia-cuda"
define ptx_kernel void @k_%s(ptr addrspace(1) %%a, float %%x) {
  %%v = load float, ptr addrspace(1) %%a
  %%w = fmul float %%v, %%x
  %%y = fadd float %%w, %d.0
  store float %%y, ptr addrspace(1) %%a
  ret void
}
"""


def kernel(tag, n):
    return (TEMPLATE % (tag, n)).encode()


def compile_json(d, ir, timeout=60):
    """The CLI's JSON reply, or None if the request was not acknowledged."""
    try:
        r = d.cli("compile", "--json", "-", input=ir, check=False, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None
    if r.returncode != 0:
        return None
    try:
        return json.loads(r.stdout)
    except ValueError:
        return None


def verify(cache_dir):
    r = subprocess.run([DAEMON, "--verify", "--cache-dir", cache_dir], capture_output=True,
                       timeout=120)
    return r.returncode, (r.stdout + r.stderr).decode(errors="replace")


def test_kill9_at_random_points_loses_no_acknowledged_result():
    seed = int(os.environ.get("PTXCACHE_CRASH_SEED", str(int(time.time()))))
    rng = random.Random(seed)
    acked = {}              # key -> (ir, ptx)
    lock = threading.Lock()
    tried = 0
    restart_s = []

    with Daemon(workers=2) as d:
        for rnd in range(ROUNDS):
            stop = threading.Event()

            def client(t):
                nonlocal tried
                i = 0
                while not stop.is_set() and i < 200:
                    # Mostly new kernels; now and then one acknowledged
                    # before (a hit, or a recompile racing the kill).
                    ir = kernel("r%d_c%d_%d" % (rnd, t, i), i)
                    i += 1
                    with lock:
                        tried += 1
                    j = compile_json(d, ir)
                    if j and j.get("status") == "ok":
                        with lock:
                            prev = acked.get(j["key"])
                            assert prev is None or prev[1] == j["ptx"], "two answers for one key"
                            acked[j["key"]] = (ir, j["ptx"])

            threads = [threading.Thread(target=client, args=(t,)) for t in range(CLIENTS)]
            for t in threads:
                t.start()
            # Kill somewhere between "just started" and "well into the
            # stream of puts".
            time.sleep(rng.uniform(0.02, 0.6))
            d.proc.send_signal(signal.SIGKILL)
            d.proc.wait()
            stop.set()
            for t in threads:
                t.join(120)
                assert not t.is_alive(), "a client hung after the daemon died"
            d.log.close()
            t0 = time.time()
            d.start()
            restart_s.append(time.time() - t0)

        # Every acknowledged result is a hit, byte for byte.
        assert len(acked) > ROUNDS, "too few compiles were acknowledged (%d)" % len(acked)
        before = d.stats()
        for key, (ir, ptx) in sorted(acked.items()):
            j = compile_json(d, ir)
            assert j is not None, "no answer for %s" % key
            assert j["key"] == key, (j["key"], key)
            assert j["cached"] is True, "acknowledged entry %s lost after kill -9" % key
            assert j["ptx"] == ptx, "entry %s has other bytes after kill -9" % key
        after = d.stats()
        assert after["compiles"] == before["compiles"], (before, after)
        assert after["corrupt_blobs"] == 0, after
        d.stop()
        assert not [f for f in os.listdir(d.cache_dir) if ".corrupt-" in f], os.listdir(d.cache_dir)
        rc, out = verify(d.cache_dir)
        assert rc == 0 and "0 problems found" in out, out
    print("     seed %d: %d rounds of kill -9 survived, %d requests, %d acknowledged, all hits; "
          "verify ok; restart to first answer max %.2f s" % (seed, ROUNDS, tried, len(acked),
                                                             max(restart_s)))


def test_corrupt_blob_is_recompiled_not_served():
    ir = kernel("corrupt_blob", 1)
    with Daemon() as d:
        first = compile_json(d, ir)
        assert first and first["status"] == "ok", first
        d.stop()
        db = sqlite3.connect(os.path.join(d.cache_dir, "cache.db"))
        (blob,) = db.execute("SELECT data FROM entries WHERE key = ?",
                             (bytes.fromhex(first["key"]),)).fetchone()
        bad = bytearray(blob)
        for i in range(len(bad) // 2, len(bad) // 2 + 8):
            bad[i] ^= 0x5A
        db.execute("UPDATE entries SET data = ? WHERE key = ?", (bytes(bad), bytes.fromhex(first["key"])))
        db.commit()
        db.close()
        rc, out = verify(d.cache_dir)
        assert rc != 0 and first["key"] in out, out
        d.start()
        again = compile_json(d, ir)
        assert again["cached"] is False and again["ptx"] == first["ptx"], again
        s = d.stats()
        assert s["corrupt_blobs"] == 1 and s["compiles"] == 1, s
        third = compile_json(d, ir)
        assert third["cached"] is True and third["ptx"] == first["ptx"], third
        d.stop()
        rc, out = verify(d.cache_dir)
        assert rc == 0, out


def test_corrupt_database_is_moved_aside_and_daemon_serves():
    ir = kernel("corrupt_db", 2)
    with Daemon() as d:
        assert compile_json(d, ir)["status"] == "ok"
        d.stop()
        path = os.path.join(d.cache_dir, "cache.db")
        with open(path, "r+b") as f:
            f.seek(0)
            f.write(b"this is not a database" * 200)
        d.start()
        j = compile_json(d, ir)
        assert j["status"] == "ok" and j["cached"] is False, j
        aside = [f for f in os.listdir(d.cache_dir) if f.startswith("cache.db.corrupt-")]
        assert len(aside) == 1, os.listdir(d.cache_dir)
        assert "corrupt" in d.logtext() and aside[0] in d.logtext(), d.logtext()
        assert compile_json(d, ir)["cached"] is True


def test_second_daemon_refused_while_first_serves_after_kill9():
    """The cache lock is a flock: a SIGKILLed daemon's lock dies with it, so
    a restart is never refused by a stale lock, and a live one always is."""
    with Daemon() as d:
        d.proc.send_signal(signal.SIGKILL)
        d.proc.wait()
        d.log.close()
        d.start()
        r = subprocess.run([DAEMON, "--socket", os.path.join(d.tmp, "b.sock"), "--cache-dir",
                            d.cache_dir, "--workers", "1"], capture_output=True, timeout=60)
        assert r.returncode != 0 and b"in use" in r.stderr, r.stderr
        d.cli("ping")
