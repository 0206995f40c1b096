# SPDX-License-Identifier: Apache-2.0
"""Load: several users at once, many concurrent `ptxcache llc` clients each
(as a build runs them), over a mix of kernels that hit, miss and fail to
compile, on a daemon with 2 workers. Every answer must be llc's own
(stdout, exit status, stderr), nothing may be refused below the memory
bound (refused_jobs stays 0), and the users must be served alike: the
slowest user's mean latency within a bounded factor of the fastest's.
The figures (requests, refusals, per-user latency) are printed."""
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

from harness import TRITON_FLAGS, Daemon, Skip, cli_for_others, llc, small_ir, triton_kernels
from sysutil import make_reachable, setpriv
from test_llc_front import normalise_stderr

USERS = (0, 65534, 54321)
CLIENTS = 24            # concurrent clients per user
REQUESTS = 16           # each, one after the other
SPREAD = 4.0            # slowest user's mean latency / fastest's, at most

# One user's clients: threads, each running its plan of `ptxcache llc` calls
# one after the other; prints one JSON list of
# [thread, input index, exit status, sha256 of stdout, stderr hex, seconds].
_DRIVER = r"""
import hashlib, json, os, subprocess, sys, threading, time
job = json.load(sys.stdin)
env = dict(os.environ, PTXCACHE_SOCKET=job["sock"], PTXCACHE_LLC=job["llc"], HOME="/")
out, lock = [], threading.Lock()
go = threading.Barrier(len(job["plan"]))

def client(t, plan):
    go.wait()
    for i in plan:
        t0 = time.monotonic()
        r = subprocess.run([job["cli"], "llc"] + job["flags"] + [job["inputs"][i], "-o", "-"],
                           capture_output=True, env=env, timeout=300)
        dt = time.monotonic() - t0
        with lock:
            out.append([t, i, r.returncode, hashlib.sha256(r.stdout).hexdigest(),
                        r.stderr.hex(), dt])

ts = [threading.Thread(target=client, args=(t, p)) for t, p in enumerate(job["plan"])]
for t in ts:
    t.start()
for t in ts:
    t.join()
json.dump(out, sys.stdout)
"""


def inputs(d):
    """The kernels, in a directory every user can read: small ones of the
    project's, a few of the corpus, and IR that does not parse."""
    os.chmod(d, 0o755)
    paths = []

    def put(name, data):
        p = os.path.join(d, name)
        with open(p, "wb") as f:
            f.write(data)
        os.chmod(p, 0o644)
        paths.append(p)
    for i in range(24):
        put("small%d.ll" % i, small_ir("load%d" % i))
    seen = []
    for k in sorted(triton_kernels(), key=os.path.getsize):
        with open(k, "rb") as f:
            b = f.read()
        if b not in seen:
            seen.append(b)
    for n, b in enumerate(seen[:96:6]):     # 16 of the smaller part: 7-180 KB
        put("corpus%d.ll" % n, b)
    for i in range(3):
        put("broken%d.ll" % i, b"this is not IR %d\n" % i)
    return paths


def plans(n_inputs, uid):
    """Each client's requests: a skewed pick, so that most kernels come
    back (hits, and misses of other users' kernels) and a few stay rare."""
    rng = random.Random(1000 + uid)
    weights = [1.0 / (1 + i % 9) for i in range(n_inputs)]
    return [rng.choices(range(n_inputs), weights, k=REQUESTS) for _ in range(CLIENTS)]


def test_users_at_once_all_answered_as_llc_fairly():
    if os.geteuid() != 0:
        raise Skip("needs root to run clients as other users")
    with tempfile.TemporaryDirectory() as t, \
            Daemon(workers=2, extra=["--allow-users", "65534,54321"]) as d:
        make_reachable(d.socket)
        paths = inputs(t)
        want = []
        for p in paths:
            r = llc(TRITON_FLAGS + [p, "-o", "-"])
            want.append((r.returncode, hashlib.sha256(r.stdout).hexdigest(),
                         normalise_stderr(r.stderr)))
        assert sum(w[0] != 0 for w in want) == 3, "the broken inputs must fail in llc"
        # The front's own fallback must not run: every answer is the daemon's.
        no_llc = os.path.join(t, "no-llc")
        with open(no_llc, "w") as f:
            f.write("#!/bin/sh\necho 'the real llc ran' >&2\nexit 99\n")
        os.chmod(no_llc, 0o755)
        drivers = {}
        t0 = time.monotonic()
        for uid in USERS:
            job = {"cli": cli_for_others(), "sock": d.socket, "llc": no_llc, "flags": TRITON_FLAGS,
                   "inputs": paths, "plan": plans(len(paths), uid)}
            p = subprocess.Popen(setpriv(uid, uid) + [sys.executable, "-c", _DRIVER],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE)
            p.stdin.write(json.dumps(job).encode())
            p.stdin.close()
            drivers[uid] = p
        results = {}
        for uid, p in drivers.items():
            out = p.stdout.read()
            assert p.wait(600) == 0, p.stderr.read().decode(errors="replace")
            results[uid] = json.loads(out)
        wall = time.monotonic() - t0
        s = d.stats()

        wrong = []
        for uid, rows in results.items():
            assert len(rows) == CLIENTS * REQUESTS, (uid, len(rows))
            for _, i, rc, sha, err, _ in rows:
                got = (rc, sha, normalise_stderr(bytes.fromhex(err)))
                if got != want[i]:
                    wrong.append((uid, os.path.basename(paths[i]), got[0], want[i][0],
                                  got[2][:200], want[i][2][:200]))
        assert not wrong, "%d answers differ from llc's: %r" % (len(wrong), wrong[:3])
        total = sum(len(r) for r in results.values())
        assert s["refused_jobs"] == 0, s
        assert s["hits"] + s["misses"] == total, s
        # The cache served: each input compiled at most once per user.
        assert s["hits"] > 0 and s["compiles"] <= len(USERS) * len(paths), s
        assert s["worker_crashes"] == 0 and s["jobs_queued"] == 0, s

        lat = {uid: sorted(r[5] for r in rows) for uid, rows in results.items()}
        mean = {uid: sum(v) / len(v) for uid, v in lat.items()}
        spread = max(mean.values()) / min(mean.values())
        errors = sum(1 for rows in results.values() for r in rows if want[r[1]][0] != 0)
        print("     %d users x %d clients x %d requests = %d in %.1f s: %d hits, %d misses "
              "(%d joined in flight), %d compiles, %d failing to compile, %d refused"
              % (len(USERS), CLIENTS, REQUESTS, total, wall, s["hits"], s["misses"],
                 s["dedup_joins"], s["compiles"], errors, s["refused_jobs"]))
        for uid in USERS:
            v = lat[uid]
            print("     uid %5d: mean %.3f s, p50 %.3f s, max %.3f s" %
                  (uid, mean[uid], v[len(v) // 2], v[-1]))
        print("     slowest user's mean / fastest's: %.2f (bound %.1f); workers started %d"
              % (spread, SPREAD, s["workers_spawned"]))
        assert spread <= SPREAD, mean
