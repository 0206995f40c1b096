#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Proof of ptxcache.jitdirs on a real GPU with CuPy (14, CUDA 13): how
long a fresh process takes to compile and run ~50 distinct CuPy kernels
(RawKernel, RawModule, ElementwiseKernel, ReductionKernel) with CuPy's
kernel cache directory on ptxcached, against CuPy's own warm directory.
Not part of `make test` (CI has no GPU); see tests/gpu/README.md.

    python3 tests/gpu/cupy_cache.py --bundle gpu-carry-py/bundle.tar.xz --out $OUT [--rounds 3]

Every run is a fresh process, timed from its start (the interpreter, the
materialization at cupy's import included) to the last kernel's results on
the host:

  cold      no package, an empty CUPY_CACHE_DIR (every kernel compiled)
  local     no package, the first cold run's directory again: the anchor
  pkg-cold  ptxcache.jitdirs on, a cold daemon with Redis (once, to warm it)
  pkg-warm  the same daemon, warm; a fresh empty CUPY_CACHE_DIR
  pkg-l2    a fresh daemon with its own store, sharing only Redis; a fresh
            empty CUPY_CACHE_DIR

local, pkg-warm and pkg-l2 alternate for --rounds rounds; the table has
their medians (the process's whole time, the interpreter's start and
ptxcache.pth's work included). The package's processes are started as a
user's job is, with PTXCACHE_JIT=1 and ptxcache.pth. Every run's outputs are hashed and must equal the first
cold run's bit for bit; pkg-warm and pkg-l2 must compile nothing (their
directories hold every file before CuPy's import returns). Writes
results.json and results.md to OUT as it goes. The daemon and Redis are
the static build of tests/gpu/carry_torch.sh, started as torch_cache.py
starts them.
"""
import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from torch_cache import _PTH_MADE, Daemon, Redis, Tools, log, pth_base  # noqa: E402

CHILD = r'''
import hashlib, json, os, sys, time
t0 = time.time()
if os.environ.get("CC_JITDIRS") == "1":
    from ptxcache import jitdirs
    jitdirs.enable()
t_enable = time.time()
import cupy as cp
t_import = time.time()
d = os.environ["CUPY_CACHE_DIR"]
before = len([f for f in os.listdir(d) if f.endswith(".cubin")]) if os.path.isdir(d) else 0
n = 1 << 16
x = cp.arange(n, dtype=cp.float32) / n
y = cp.arange(n, dtype=cp.float32)[::-1] / n
outs = []
for i in range(20):             # RawKernel: one source each
    k = cp.RawKernel(r"""
extern "C" __global__ void axpb_%d(const float* x, const float* y, float* o, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) o[i] = x[i] * %d.5f + y[i] * y[i] - %d.0f;
}""" % (i, i + 1, i), "axpb_%d" % i)
    o = cp.empty_like(x)
    k(((n + 255) // 256,), (256,), (x, y, o, cp.int32(n)))
    outs.append(o)
for i in range(8):              # RawModule: two kernels in one module
    m = cp.RawModule(code=r"""
extern "C" __global__ void sq_%d(float* o, const float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) o[i] = x[i] * x[i] + %d;
}
extern "C" __global__ void mx_%d(float* o, const float* x, const float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) o[i] = fmaxf(x[i], y[i]) * %d;
}""" % (i, i, i, i + 2))
    o1, o2 = cp.empty_like(x), cp.empty_like(x)
    m.get_function("sq_%d" % i)(((n + 255) // 256,), (256,), (o1, x, cp.int32(n)))
    m.get_function("mx_%d" % i)(((n + 255) // 256,), (256,), (o2, x, y, cp.int32(n)))
    outs += [o1, o2]
for i in range(16):             # ElementwiseKernel
    e = cp.ElementwiseKernel("float32 a, float32 b", "float32 z",
                             "z = a * a * %d.0f - b / (1.0f + %d.0f * a)" % (i + 1, i), "ew_%d" % i)
    outs.append(e(x, y))
for i in range(8):              # ReductionKernel
    r = cp.ReductionKernel("float32 a", "float32 s", "a * a + %d.0f * a" % i, "a + b", "s = a",
                           "0", "red_%d" % i)
    outs.append(r(x))
h = hashlib.sha256()
for o in outs:
    h.update(cp.asnumpy(o).tobytes())
t_end = time.time()
after = len([f for f in os.listdir(d) if f.endswith(".cubin")])
st = None
if "ptxcache.jitdirs" in sys.modules:
    s = sys.modules["ptxcache.jitdirs"].status()
    st = s["dirs"].get("cupy")
    if st is not None:
        st["enable_ms"] = s.get("enable_ms")
print(json.dumps({"t0": t0, "t_end": t_end, "total_s": t_end - t0, "enable_s": t_enable - t0, "import_s": t_import - t_enable,
                  "kernels_s": t_end - t_import, "digest": h.hexdigest(), "files_before": before,
                  "files_after": after, "new_files": after - before, "jitdirs": st,
                  "cupy": cp.__version__}))
'''


def run(work, tag, cache_dir, daemon=None, tools=None, pth=None, timeout=300, extra=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PTXCACHE_", "CUPY_"))}
    env.update(CUPY_CACHE_DIR=cache_dir, PYTHONUNBUFFERED="1")
    if daemon is not None:
        # The package's one switch, read by ptxcache.pth at the
        # interpreter's start, as a user's job has it (else the call).
        base, enabled = pth
        if enabled:
            env["PTXCACHE_JIT"] = "1"
            if base:
                env["PYTHONUSERBASE"] = base
        else:
            env["CC_JITDIRS"] = "1"
        env.update(PTXCACHE_SOCKET=daemon.sock, PTXCACHE_BIN=tools.cli,
                   PTXCACHE_AUTOSTART="0", XDG_CACHE_HOME=os.path.join(work, "xdg"),
                   PYTHONPATH=tools.python_dir + (os.pathsep + env["PYTHONPATH"]
                                                  if env.get("PYTHONPATH") else ""))
    env.update(extra or {})
    t0 = time.time()
    p = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True,
                       timeout=timeout)
    wall = time.time() - t0
    lines = [x for x in p.stdout.splitlines() if x.startswith("{")]
    if p.returncode != 0 or not lines:
        return {"tag": tag, "error": (p.stderr or p.stdout)[-3000:], "rc": p.returncode}
    r = json.loads(lines[-1])
    # Before the script's first line (the interpreter, ptxcache.pth) and
    # after its last (the exit: atexit work, threads).
    r.update(tag=tag, wall_s=wall, pre_s=r["t0"] - t0, exit_s=t0 + wall - r["t_end"])
    if daemon is not None:
        r["daemon"] = {k: v for k, v in daemon.stats().items()
                       if k.startswith(("artifact", "l2_hits", "l2_misses", "l2_writes"))}
    ms = (r.get("jitdirs") or {}).get("ms")
    log("%-9s %6.2f s (start %.2f s, import %.2f s, kernels %.2f s, exit %.2f s) new files %s "
        "digest %s%s" % (tag, r["wall_s"], r["pre_s"], r["import_s"], r["kernels_s"], r["exit_s"],
                         r["new_files"], r["digest"][:12],
                         "; fill ms: enable %s, %s" % (r["jitdirs"].get("enable_ms"), ", ".join(
                             "%s %.0f" % kv for kv in ms.items())) if ms else ""))
    return r


def write(out, res):
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(res, f, indent=1)
    rows = ["| run | median process s | median import s | median kernels s | runs | new files | same outputs |",
            "| --- | ---: | ---: | ---: | ---: | --- | --- |"]
    ref = res.get("reference")
    for tag in ("cold", "local", "pkg-cold", "pkg-warm", "pkg-l2", "pkg-probed", "pkg-present"):
        rs = [r for r in res["runs"] if r.get("tag") == tag and "total_s" in r]
        if not rs:
            continue
        med = lambda k: statistics.median(r[k] for r in rs)  # noqa: E731
        rows.append("| %s | %.2f | %.2f | %.2f | %d | %s | %s |" % (
            tag, med("wall_s"), med("import_s"), med("kernels_s"), len(rs),
            ",".join(str(r["new_files"]) for r in rs),
            all(r["digest"] == ref for r in rs)))
    with open(os.path.join(out, "results.md"), "w") as f:
        f.write("\n".join(rows) + "\n\n" + "\n".join(res["checks"]) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bundle")
    ap.add_argument("--bin")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--more", action="store_true",
                    help="two more package runs a round: pkg-probed (the GPU's identity given "
                         "as a parent process's probe, so none is made) and pkg-present (the "
                         "directory already filled: the package's cost where nothing is fetched)")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    work = tempfile.mkdtemp(prefix="cupy-cache-")
    tools = Tools(a.bundle, a.bin, work)
    res = {"runs": [], "checks": [], "gpu": subprocess.run(
        ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
        capture_output=True, text=True).stdout.strip()}
    secret = os.path.join(work, "secret")
    with open(secret, "wb") as f:
        f.write(os.urandom(32).hex().encode())
    redis = Redis(tools, tempfile.mkdtemp(prefix="redis-", dir=work))
    d1 = Daemon(tools, work, "d1", redis, secret)
    others = []
    try:
        first = run(work, "cold", os.path.join(work, "cold-0"))
        res["runs"].append(first)
        if "error" in first:
            res["checks"].append("FAIL: the cold run: %s" % first["error"][-500:])
            write(a.out, res)
            return 1
        res["reference"] = first["digest"]
        res["cupy"] = first["cupy"]
        pth = pth_base(work, tools)
        res["runs"].append(run(work, "pkg-cold", os.path.join(work, "pkgcold"), d1, tools, pth))
        time.sleep(1.0)         # the tier's writes follow the replies
        for i in range(a.rounds):
            res["runs"].append(run(work, "local", os.path.join(work, "cold-0")))
            res["runs"].append(run(work, "pkg-warm", os.path.join(work, "warm-%d" % i), d1, tools, pth))
            d2 = Daemon(tools, work, "d2-%d" % i, redis, secret)
            others.append(d2)
            res["runs"].append(run(work, "pkg-l2", os.path.join(work, "l2-%d" % i), d2, tools, pth))
            d2.stop()
            if a.more:
                ident = (res["runs"][1].get("jitdirs") or {}).get("identity", "")
                probed = {"PTXCACHE_GPU_IDENTITY_PROBED": os.environ.get("CUDA_VISIBLE_DEVICES", "") + "|"
                          + ident.split(";", 1)[-1]}
                res["runs"].append(run(work, "pkg-probed", os.path.join(work, "probed-%d" % i),
                                       d1, tools, pth, extra=probed))
                res["runs"].append(run(work, "pkg-present", os.path.join(work, "warm-%d" % i),
                                       d1, tools, pth))
            write(a.out, res)
        ok = True
        for r in res["runs"]:
            if "error" in r:
                res["checks"].append("FAIL: %s: %s" % (r["tag"], r["error"][-300:]))
                ok = False
                continue
            if r["digest"] != res["reference"]:
                res["checks"].append("FAIL: %s: outputs differ from the cold run's" % r["tag"])
                ok = False
            if r["tag"].startswith("pkg-") and r["tag"] != "pkg-cold" and r["new_files"] != 0:
                res["checks"].append("FAIL: %s compiled %d kernels" % (r["tag"], r["new_files"]))
                ok = False
        res["checks"].append("all outputs identical, pkg-warm and pkg-l2 compiled nothing"
                             if ok else "some checks failed")
        write(a.out, res)
        return 0 if ok else 1
    finally:
        for d in [d1] + others:
            try:
                d.stop()
            except Exception:
                pass
        redis.stop()
        for p in _PTH_MADE:
            os.unlink(p)


if __name__ == "__main__":
    sys.exit(main())
