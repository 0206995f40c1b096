# SPDX-License-Identifier: Apache-2.0
"""Jobs for tests/test_python.py, each run as its own process with
tests/jitstubs and python/ on PYTHONPATH: what Triton's compile() and
Inductor's FX graph cache do with their remote caches, step by step.

    jobs.py triton KEY NAME MARKDIR [--sleep S] [--fail]
    jobs.py fx KEY MARKDIR [--sleep S] [--bypass]
    jobs.py gets NS N GOFILE         N artifact gets, pausing for GOFILE after the first
    jobs.py autotune cold|warm DIR KERNELS [--backend-hash H]
                                     Inductor's autotuner on a graph's kernels: cold
                                     compiles and tunes them; warm is an FX graph hit
    jobs.py tkey                     PyTorch asking for Triton's installation hash
    jobs.py pgo SIZES [ARG...]       Dynamo's automatic dynamic over a frame called with
                                     these sizes, its profile read and written as 2.11 does

Each prints one JSON line: what it got and how long it took.
"""
import argparse
import base64
import hashlib
import json
import logging
import os
import sys
import time


def mark(markdir, what):
    os.makedirs(markdir, exist_ok=True)
    with open(os.path.join(markdir, "%s.%d" % (what, os.getpid())), "w"):
        pass


def triton(a):
    # Triton's compile(): the group first; on a miss each stage's file,
    # the metadata, then the group.
    from triton.runtime.cache import get_cache_manager
    t0 = time.time()
    m = get_cache_manager(a.key)
    meta = a.name + ".json"
    group = m.get_group(meta)
    if group is not None and meta in group:
        files = {os.path.basename(p): hashlib.sha256(open(p, "rb").read()).hexdigest()
                 for p in group.values()}
        return {"result": "hit", "files": files, "s": time.time() - t0}
    mark(a.markdir, "compile")
    time.sleep(a.sleep)
    if a.fail:
        del m
        raise RuntimeError("the compile failed")
    paths = {}
    for ext in ("ttir", "ptx", "cubin"):
        data = ("%s %s %s" % (a.key, a.name, ext)).encode() * 100
        paths["%s.%s" % (a.name, ext)] = m.put(data, "%s.%s" % (a.name, ext), binary=True)
    paths[meta] = m.put(json.dumps({"name": a.name}), meta, binary=False)
    m.put_group(meta, paths)
    files = {os.path.basename(p): hashlib.sha256(open(p, "rb").read()).hexdigest()
             for p in paths.values()}
    return {"result": "compiled", "files": files, "s": time.time() - t0}


def fx(a):
    # FxGraphCache: remote get of the graph's key; on a miss compile, then
    # (unless the graph cannot be stored) a put of {"data": b64, ...}.
    from torch._inductor.remote_cache import create_cache
    t0 = time.time()
    rc = create_cache("fx-graph-v1", False, "FbRemoteFxGraphCache", "RemoteFxGraphCache")
    if rc is None:
        return {"result": "no cache", "s": time.time() - t0}
    got = rc.get(a.key)
    if got is not None:
        return {"result": "hit", "data": base64.b64decode(got["data"]).decode(), "s": time.time() - t0}
    mark(a.markdir, "compile")
    time.sleep(a.sleep)
    if not a.bypass:
        rc.put(a.key, {"data": base64.b64encode(b"graph " + a.key.encode()).decode(),
                       "time_taken_ms": int(a.sleep * 1000)})
    out = {"result": "compiled", "s": time.time() - t0}
    if a.then:
        # The same thread's next graph: the unfilled lease is let go.
        out["next"] = rc.get(a.then)
        time.sleep(a.hold)
    return out


def gets(a):
    from ptxcache.artifacts import store
    st = store()
    out = []
    st.put(a.ns, "present", b"value")
    for i in range(a.n):
        t0 = time.time()
        v = st.get(a.ns, "present")
        out.append([v is not None, round(time.time() - t0, 3)])
        if i == 0:
            print("first", flush=True)
            while not os.path.exists(a.gofile):
                time.sleep(0.02)
    return {"gets": out, "counts": st.counts}


def autotune(a):
    # KERNELS: {name: [[candidate BLOCKs], {BLOCK: time}, {options}]}, the
    # options: "scale_from" (a reduction whose configs of at least that
    # BLOCK _dynamic_scale_rblock halves) and "warm_times" (the times a
    # warm process measures: a near tie that goes the other way there).
    # cold: each kernel compiled afresh (cached_autotune), run once
    # (benchmarks, then coordinate descent, results stored). warm: what an
    # FX graph hit does with the unpickled autotuner (StaticAutotunerFuture):
    # its compiled candidates, recheck_autotune_cache, precompile(), run().
    import torch._inductor.runtime.triton_heuristics as th
    from ptxcache.artifacts import store
    kernels = json.loads(a.kernels)
    chosen = {}
    for name, spec in sorted(kernels.items()):
        blocks, times, opts = spec[0], spec[1], (spec[2] if len(spec) > 2 else {})
        if a.phase == "warm":
            times = opts.get("warm_times", times)
        th.TIMES = {int(k): v for k, v in times.items()}
        meta = {"coordinate_descent_tuning": True, "autotune_local_cache": True,
                "autotune_remote_cache": True, "backend_hash": a.backend_hash,
                "stub_scale_from": opts.get("scale_from")}
        configs = [th.Config({"BLOCK": b}) for b in blocks]
        filename = os.path.join(a.dir, "c%s.py" % hashlib.sha256(name.encode()).hexdigest()[:16])
        if a.phase == "cold":
            k = th.cached_autotune(configs, filename, meta)
        else:
            k = th.CachingAutotuner(configs, filename, meta)
            k.compile_results = [th.CompileResult(c) for c in configs]
            k.recheck_autotune_cache(lambda: th.CachingAutotuner(configs, filename, meta))
            k.precompile()
        chosen[name] = k.run().kwargs["BLOCK"]
    try:
        import ptxcache.autotune as pa
        fix = {"installed": pa.installed(), **pa.counts}
    except ImportError:
        fix = None
    return {"chosen": chosen, "counters": th.counters, "layers": store().layers(), "fix": fix}


def tkey(a):
    # PyTorch's CacheBase.get_system(): triton_key from triton_compat, at
    # each call (twice here: the second must not ask again).
    import torch._inductor.runtime.triton_compat as tc
    import triton.runtime.cache as trc
    from ptxcache.artifacts import store
    k1 = tc.triton_key()
    k2 = tc.triton_key()
    # Triton's own get_cache_key(), for a kernel loaded from its cache.
    k3 = trc.triton_key()
    try:
        import ptxcache.triton_key as ptk
        counts = dict(ptk.counts)
    except ImportError:
        counts = None
    return {"key": k1, "same": k1 == k2 == k3, "counts": counts, "layers": store().layers()}


def pgo(a):
    # Dynamo's automatic dynamic for one frame: a size first seen compiles
    # static, a second size marks the input dynamic and compiles once more
    # (the dynamic graph then serves every size); the profile, loaded at
    # the first compile, may say it is dynamic from the start. After each
    # compile the profile is written.
    import torch._dynamo.pgo as p
    import torch.compiler.config as cc
    compiles, graphs = [], set()
    for n in [int(x) for x in a.sizes.split(",")]:
        seen = p.get_code_state().setdefault("forward", {}).setdefault("L['x']", [])
        dynamic = len(set(seen + [n])) > 1
        graph = "dynamic" if dynamic else "static %d" % n
        if n not in seen:
            seen.append(n)
        if graph not in graphs:
            graphs.add(graph)
            compiles.append(graph)
            p.put_code_state()
    try:
        import ptxcache.torch as pt
        state = pt.state().get("pgo")
    except ImportError:
        state = None
    return {"compiles": compiles, "job_id": cc.job_id, "profile_hits": len(p.hits), "pgo": state}


def main():
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd")
    t = sub.add_parser("triton")
    t.add_argument("key")
    t.add_argument("name")
    t.add_argument("markdir")
    t.add_argument("--sleep", type=float, default=0.0)
    t.add_argument("--fail", action="store_true")
    t.add_argument("--hold", type=float, default=0.0)
    f = sub.add_parser("fx")
    f.add_argument("key")
    f.add_argument("markdir")
    f.add_argument("--sleep", type=float, default=0.0)
    f.add_argument("--bypass", action="store_true")
    f.add_argument("--then")
    f.add_argument("--hold", type=float, default=0.0)
    g = sub.add_parser("gets")
    g.add_argument("ns")
    g.add_argument("n", type=int)
    g.add_argument("gofile")
    u = sub.add_parser("autotune")
    u.add_argument("phase", choices=("cold", "warm"))
    u.add_argument("dir")
    u.add_argument("kernels")
    u.add_argument("--backend-hash", default="gpu-a:triton-3.6")
    sub.add_parser("tkey")
    o = sub.add_parser("pgo")
    o.add_argument("sizes")
    o.add_argument("rest", nargs="*")
    a = ap.parse_args()
    try:
        r = {"triton": triton, "fx": fx, "gets": gets, "autotune": autotune, "tkey": tkey,
             "pgo": pgo}[a.cmd](a)
    except RuntimeError as e:
        r = {"result": "failed", "error": str(e)}
        if getattr(a, "hold", 0):
            time.sleep(a.hold)
    print(json.dumps(r), flush=True)


if __name__ == "__main__":
    sys.exit(main())
