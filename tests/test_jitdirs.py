# SPDX-License-Identifier: Apache-2.0
"""ptxcache.jitdirs: JIT cache directories kept file by file on the daemon,
with the real daemon, a real redis-server shared by two daemons ("nodes"),
and real child processes running tests/jitstubs/jitstand.py over the
stand-ins of tests/jitstubs/jitdirs/ (CuPy's temp file + rename, DeepGEMM's
directory renamed into place, an index file like numba's)."""
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from harness import CLI, ROOT, Daemon
from redis_fixture import RedisServer

PKG = os.path.join(ROOT, "python")
STUBS = os.path.join(ROOT, "tests", "jitstubs")
STAND = os.path.join(STUBS, "jitstand.py")
TOOLS = os.path.join(STUBS, "jitdirs")
SECRET = b"cluster secret for the jitdirs tests\n"
GPU = "NVIDIA H100 80GB HBM3/sm_90;cuda=13000;nvrm=580.65.06"

NOT_UNDER_SANITIZERS = "the Python package's own logic; the daemon's artifact and Redis paths are test_artifact's and test_l2's"


def fake_site(tmp, cupy="14.0.0"):
    """Installed metadata of the tools (their versions are part of the
    identity), without the tools: the stand-ins are what imports."""
    site = os.path.join(tmp, "site-" + cupy)
    for name, dist, ver in (("cupy_cuda13x", "cupy-cuda13x", cupy),
                            ("deep_gemm", "deep_gemm", "2.1.0")):
        d = os.path.join(site, "%s-%s.dist-info" % (name, ver))
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "METADATA"), "w") as f:
            f.write("Metadata-Version: 2.1\nName: %s\nVersion: %s\n" % (dist, ver))
    return site


def env_for(tmp, sock, home, gpu=GPU, **extra):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PTXCACHE_", "PYTHON", "CUPY_", "DG_", "XDG_", "JITSTAND"))}
    env.update(PYTHONPATH=os.pathsep.join([PKG, TOOLS, fake_site(tmp)]), HOME=home,
               PYTHONDONTWRITEBYTECODE="1", PTXCACHE_SOCKET=sock, PTXCACHE_AUTOSTART="0",
               PTXCACHE_BIN=CLI)
    if gpu is not None:
        env["PTXCACHE_GPU_IDENTITY"] = gpu
    env.update(extra)
    return env


def stand(env, tool, model, n, expect_rc=0):
    p = subprocess.run([sys.executable, STAND, tool, model, str(n)], env=env,
                       capture_output=True, text=True, timeout=120)
    if expect_rc is not None:
        assert p.returncode == expect_rc, (p.returncode, p.stdout, p.stderr)
    lines = [x for x in p.stdout.splitlines() if x.startswith("{")]
    return (json.loads(lines[-1]) if lines else None), p.stderr


def node(redis, tmp, name):
    secret = os.path.join(tmp, "secret")
    with open(secret, "wb") as f:
        f.write(SECRET)
    return Daemon(workers=1, extra=["--l2", redis.url, "--l2-secret-file", secret])


def settle(d):
    """Until the daemon has handed every put to Redis (the tier writes
    after the reply): its l2 writes stop moving."""
    last, same = -1, 0
    deadline = time.time() + 60
    while same < 5:
        assert time.time() < deadline, d.stats()
        w = d.stats()["l2_writes"]
        same = same + 1 if w == last else 0
        last = w
        time.sleep(0.1)


def files(d):
    out = {}
    for dp, _dn, fns in os.walk(d):
        for fn in fns:
            p = os.path.join(dp, fn)
            with open(p, "rb") as f:
                out[os.path.relpath(p, d)] = hashlib.sha256(f.read()).hexdigest()
    return out


def entries(d, ns):
    r = subprocess.run([CLI, "ls", "--kind", "artifact", "--namespace", ns, "--json"],
                       env=dict(os.environ, PTXCACHE_SOCKET=d.socket), capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)
    return rows if isinstance(rows, list) else rows.get("entries", rows)


def test_jitdirs_node_b_finds_node_a_files_before_it_compiles():
    tmp = tempfile.mkdtemp(prefix="ptxcache-jitdirs-")
    try:
        with RedisServer() as redis, node(redis, tmp, "a") as a, node(redis, tmp, "b") as b:
            for tool in ("cupy", "deep_gemm"):
                ha, hb = os.path.join(tmp, tool, "a"), os.path.join(tmp, tool, "b")
                ra, _ = stand(env_for(tmp, a.socket, ha), tool, "m", 12)
                assert ra["compiles"] == 12 and ra["status"]["dirs"][tool]["served"], ra
                settle(a)
                # A program of node B that never imports the tool leaves its
                # directory alone: no fetch, no probe.
                sub = ".cupy/kernel_cache" if tool == "cupy" else ".deep_gemm/cache"
                r = subprocess.run([sys.executable, "-c", "from ptxcache import jitdirs; "
                                    "import json, threading; s = jitdirs.enable(); "
                                    "[t.join() for t in threading.enumerate() "
                                    "if t.name.startswith('ptxcache-jitdirs-fill')]; "
                                    "print(json.dumps(s))"],
                                   env=env_for(tmp, b.socket, hb), capture_output=True,
                                   text=True, timeout=60)
                assert r.returncode == 0 and json.loads(r.stdout)["dirs"][tool]["served"], r
                assert files(os.path.join(hb, sub)) == {}, files(os.path.join(hb, sub))
                rb, err = stand(env_for(tmp, b.socket, hb), tool, "m", 12)
                # B's fresh process found A's files in place before its JIT
                # looked: it compiled nothing; the outputs and bytes are A's.
                assert (rb["compiles"], rb["hits"]) == (0, 12), (rb, err)
                assert rb["digest"] == ra["digest"]
                fa, fb = files(os.path.join(ha, sub)), files(os.path.join(hb, sub))
                assert fa == fb and len(fa) == (12 if tool == "cupy" else 24), (fa, fb)
                assert rb["status"]["dirs"][tool]["materialized"] == 12, rb["status"]
                assert rb["status"]["dirs"][tool]["fetches"] == 1, rb["status"]   # one request
            assert b.stats()["artifact_l2_hits"] > 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def test_jitdirs_many_files_come_in_few_requests():
    """300 files: two requests (BATCH_FILES 256 a request), every file in
    place before the tool's import returns."""
    tmp = tempfile.mkdtemp(prefix="ptxcache-jitdirs-")
    try:
        with Daemon(workers=1) as d:
            ra, _ = stand(env_for(tmp, d.socket, os.path.join(tmp, "a")), "cupy", "m", 300)
            assert ra["compiles"] == 300, ra
            rb, _ = stand(env_for(tmp, d.socket, os.path.join(tmp, "b")), "cupy", "m", 300)
            row = rb["status"]["dirs"]["cupy"]
            assert (rb["compiles"], row["materialized"], row["fetches"]) == (0, 300, 2), rb
            assert rb["digest"] == ra["digest"] and len(rb["seen"]) == 300, rb
            # Where the fill went is said (status()'s ms): 300 files fetched
            # and written take time, a node that had them fetched nothing.
            assert row["ms"]["fetch"] > 0 and row["ms"]["write"] > 0, row["ms"]
            assert ra["status"]["dirs"]["cupy"]["ms"]["fetch"] == 0, ra["status"]
            # A directory that has them all fetches nothing.
            rc, _ = stand(env_for(tmp, d.socket, os.path.join(tmp, "b")), "cupy", "m", 300)
            row = rc["status"]["dirs"]["cupy"]
            assert (rc["compiles"], row["present"], row["materialized"], row["fetches"]) == \
                (0, 300, 0, 0), rc
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def test_jitdirs_identity_that_differs_only_in_compute_capability_is_not_served():
    tmp = tempfile.mkdtemp(prefix="ptxcache-jitdirs-")
    try:
        with Daemon(workers=1) as d:
            sm90, sm80 = GPU, GPU.replace("sm_90", "sm_80")
            ra, _ = stand(env_for(tmp, d.socket, os.path.join(tmp, "a"), gpu=sm90), "cupy", "m", 6)
            assert ra["compiles"] == 6
            rb, _ = stand(env_for(tmp, d.socket, os.path.join(tmp, "b"), gpu=sm80), "cupy", "m", 6)
            assert rb["compiles"] == 6 and rb["status"]["dirs"]["cupy"]["materialized"] == 0, rb
            rc, _ = stand(env_for(tmp, d.socket, os.path.join(tmp, "c"), gpu=sm90), "cupy", "m", 6)
            assert rc["compiles"] == 0 and rc["digest"] == ra["digest"], rc
            # A tool version is part of it too: another CuPy is not served.
            e = env_for(tmp, d.socket, os.path.join(tmp, "e"), gpu=sm90)
            e["PYTHONPATH"] = os.pathsep.join([PKG, TOOLS, fake_site(tmp, "14.0.1")])
            re_, _ = stand(e, "cupy", "m", 6)
            assert re_["compiles"] == 6, re_
            assert "14.0.1" in re_["status"]["dirs"]["cupy"]["identity"]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def test_jitdirs_half_written_file_is_never_published():
    tmp = tempfile.mkdtemp(prefix="ptxcache-jitdirs-")
    try:
        with RedisServer() as redis, node(redis, tmp, "a") as a, node(redis, tmp, "b") as b:
            ha = os.path.join(tmp, "a")
            # The 4th compile writes half its temporary file and is killed.
            ra, _ = stand(env_for(tmp, a.socket, ha, JITSTAND_CRASH_AT="4"), "cupy", "m", 6,
                          expect_rc=-9)
            kc = os.path.join(ha, ".cupy", "kernel_cache")
            left = [f for f in os.listdir(kc) if f.startswith("tmp")]
            assert len(left) == 1, os.listdir(kc)
            # A next process on node A starts (its scan sees the directory
            # with the temporary file in it) and compiles nothing new.
            r2, _ = stand(env_for(tmp, a.socket, ha), "cupy", "m", 3)
            assert r2["compiles"] == 0
            settle(a)
            stored = {e.get("key") for e in entries(a, "jit-file")}
            with open(os.path.join(kc, left[0]), "rb") as f:
                half = hashlib.sha256(f.read()).hexdigest()
            assert half not in stored and len(stored) == 3, stored
            hb = os.path.join(tmp, "b")
            rb, _ = stand(env_for(tmp, b.socket, hb), "cupy", "m", 6)
            assert (rb["compiles"], rb["hits"]) == (3, 3), rb
            assert not [s for s in rb["seen"] if s.startswith("tmp")], rb["seen"]
            assert len(rb["seen"]) == 3, rb["seen"]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def test_jitdirs_declared_directory_is_served_and_its_index_is_not():
    tmp = tempfile.mkdtemp(prefix="ptxcache-jitdirs-")
    try:
        with RedisServer() as redis, node(redis, tmp, "a") as a, node(redis, tmp, "b") as b:
            da, db, dc = (os.path.join(tmp, x, "objs") for x in "abc")
            ea = env_for(tmp, a.socket, os.path.join(tmp, "a"), JITIDX_DIR=da,
                         PTXCACHE_JIT_DIRS="mine=%s:tool-v1@jitidx" % da)
            ra, _ = stand(ea, "jitidx", "m", 5)
            assert ra["compiles"] == 5 and "index.nbi" in os.listdir(da)
            assert ra["status"]["dirs"]["mine"]["identity"].endswith("declared=tool-v1")
            settle(a)
            eb = env_for(tmp, b.socket, os.path.join(tmp, "b"), JITIDX_DIR=db,
                         PTXCACHE_JIT_DIRS="mine=%s:tool-v1@jitidx" % db)
            rb, _ = stand(eb, "jitidx", "m", 5)
            assert (rb["compiles"], rb["hits"]) == (0, 5), rb
            # The data files came; the mutable index did not.
            assert len(rb["seen"]) == 5 and "index.nbi" not in rb["seen"], rb["seen"]
            ec = env_for(tmp, b.socket, os.path.join(tmp, "c"), JITIDX_DIR=dc,
                         PTXCACHE_JIT_DIRS="mine=%s:tool-v2@jitidx" % dc)
            rc, _ = stand(ec, "jitidx", "m", 5)
            assert rc["compiles"] == 5, rc     # what the user adds is part of the identity
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def test_jitdirs_directory_not_writable_is_skipped_with_one_line():
    tmp = tempfile.mkdtemp(prefix="ptxcache-jitdirs-")
    try:
        with Daemon(workers=1) as d:
            blocker = os.path.join(tmp, "afile")
            with open(blocker, "w") as f:
                f.write("x")
            bad = os.path.join(blocker, "cache")       # under a file: cannot exist
            e = env_for(tmp, d.socket, os.path.join(tmp, "h"), JITIDX_DIR=bad,
                        PTXCACHE_JIT_DIRS="mine=%s@jitidx" % bad)
            # What the directory is is found when its module is imported.
            r = subprocess.run([sys.executable, "-c",
                                "import json, logging; logging.basicConfig(level=logging.INFO); "
                                "from ptxcache import jitdirs; jitdirs.enable(); import jitidx; "
                                "print(json.dumps(jitdirs.status()))"],
                               env=e, capture_output=True, text=True, timeout=60)
            assert r.returncode == 0, r.stderr
            st = json.loads(r.stdout)
            row = st["dirs"]["mine"]
            assert not row["served"] and "cannot create" in row["why"], st
            lines = [x for x in r.stderr.splitlines() if "mine" in x]
            assert len(lines) == 1, r.stderr
            # No GPU and no override: nothing is served, said once.
            e2 = env_for(tmp, d.socket, os.path.join(tmp, "h2"), gpu=None)
            e2["PATH"] = os.environ.get("PATH", "")
            r2 = subprocess.run([sys.executable, "-c",
                                 "import json, logging; logging.basicConfig(level=logging.INFO); "
                                 "from ptxcache import jitdirs; jitdirs.enable(); "
                                 "import cupy, deep_gemm; print(json.dumps(jitdirs.status()))"],
                                env=e2, capture_output=True, text=True, timeout=60)
            assert r2.returncode == 0, r2.stderr
            st2 = json.loads(r2.stdout)
            if "no identity" not in st2["dirs"]["cupy"].get("why", ""):
                assert st2["dirs"]["cupy"]["served"], st2     # a machine with a GPU
            else:
                assert len([x for x in r2.stderr.splitlines() if "no JIT directory" in x]) == 1
            assert not [k for k in os.listdir(d.cache_dir) if k.endswith(".part")]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def test_jitdirs_two_models_producing_the_same_file_store_one_copy():
    tmp = tempfile.mkdtemp(prefix="ptxcache-jitdirs-")
    try:
        with Daemon(workers=1) as d:
            r1, _ = stand(env_for(tmp, d.socket, os.path.join(tmp, "job1")), "cupy", "shared", 8)
            r2, _ = stand(env_for(tmp, d.socket, os.path.join(tmp, "job2"),
                                  PTXCACHE_JIT_DIRS_OFF="1"), "cupy", "shared", 8)
            assert r2["compiles"] == 8          # the second job's own compiles, not served
            # A third job (another model, same kernels, its own directory)
            # publishes into the same store: one copy of each file.
            r3, _ = stand(env_for(tmp, d.socket, os.path.join(tmp, "job3"),
                                  PTXCACHE_GPU_IDENTITY=GPU + ";job3"), "cupy", "shared", 8)
            assert r3["compiles"] == 8 and r3["digest"] == r1["digest"]
            keys = [e.get("key") for e in entries(d, "jit-file")]
            assert len(keys) == len(set(keys)) == 8, keys
            assert r2["status"]["off"] == "PTXCACHE_JIT_DIRS_OFF=1"
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
