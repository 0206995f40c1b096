#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""JAX's persistent compilation cache on ptxcached (python/ptxcache/jax.py)
on a real GPU: how long a fresh process takes to compile and run a
12-layer decoder's forward and a training step, against JAX's own local
cache. Not part of `make test` (CI has no GPU); see tests/gpu/README.md.

    python3 tests/gpu/jax_cache.py --bundle gpu-carry-py/bundle.tar.xz --out $OUT [--rounds 3]

The bundle is tests/gpu/carry_torch.sh's (static ptxcached and ptxcache,
redis-server); the daemons and Redis are started as tests/gpu/torch_cache.py
starts them (its classes). The model, in jax.numpy: 12 pre-norm decoder
layers (hidden 1024, 16 heads, causal attention, GELU MLP x4), sequence
256, batch 4, bf16 weights and activations, fp32 loss; one jit for the
forward (logits' loss), one for a training step (value_and_grad, SGD).
Every run is a fresh process, timed from before the first jit call to
both results on the host:

  cold      no package, an empty JAX cache directory (JAX writes it)
  local     no package, that directory again: the anchor
  pkg-cold  the package (no directory), a cold daemon with Redis
  pkg-warm  a fresh process on that daemon, now warm
  pkg-l2    a fresh process on a fresh daemon sharing only Redis
  four      four processes at once on a cold daemon: misses (compiles)
            per process and the daemon's counters

local, pkg-warm and pkg-l2 alternate for --rounds rounds (median in
results.md). Every run's outputs (loss, logits' checksum, the step's
updated parameters) are hashed and compared with the cold run's. The
package is switched on as a user's job has it: PTXCACHE_JIT=1 and
ptxcache.pth (where the interpreter reads no site for it, the call of
ptxcache.jax.install_on_import() before jax is imported).
JAX's minimum compile time to store (1 s) is left as JAX has it, in
every run. results.json is rewritten after each run.
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
import torch_cache as tc  # noqa: E402  (Tools, Redis, Daemon: no torch imported)

CHILD = r'''
import hashlib, json, os, sys, time
t_start = time.time()
how = "ptxcache.pth" if "ptxcache.jax" in sys.modules else None
if os.environ.get("JC_PKG") == "1":
    import ptxcache.jax
    how = ptxcache.jax.install_on_import()
import jax, jax.numpy as jnp
import numpy as np
out_path = sys.argv[1]
L, D, H, T, B, V = 12, 1024, 16, 256, 4, 8192
dt = jnp.bfloat16

def init(key):
    ks = jax.random.split(key, 2 + L)
    def lin(k, i, o):
        return (jax.random.normal(k, (i, o), jnp.float32) / np.sqrt(i)).astype(dt)
    layers = []
    for k in ks[2:]:
        k1, k2, k3, k4 = jax.random.split(k, 4)
        layers.append({"qkv": lin(k1, D, 3 * D), "o": lin(k2, D, D), "up": lin(k3, D, 4 * D),
                       "down": lin(k4, 4 * D, D), "n1": jnp.ones((D,), dt), "n2": jnp.ones((D,), dt)})
    return {"emb": lin(ks[0], V, D), "out": lin(ks[1], D, V), "layers": layers}

def norm(x, g):
    x32 = x.astype(jnp.float32)
    x32 = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, -1, keepdims=True) + 1e-6)
    return (x32 * g.astype(jnp.float32)).astype(dt)

def layer(x, p):
    q, k, v = jnp.split(norm(x, p["n1"]) @ p["qkv"], 3, -1)
    sh = lambda t: t.reshape(B, T, H, D // H).transpose(0, 2, 1, 3)
    q, k, v = sh(q), sh(k), sh(v)
    s = (q @ k.transpose(0, 1, 3, 2)).astype(jnp.float32) / np.sqrt(D // H)
    s = jnp.where(jnp.tril(jnp.ones((T, T), bool)), s, -1e9)
    a = (jax.nn.softmax(s, -1).astype(dt) @ v).transpose(0, 2, 1, 3).reshape(B, T, D)
    x = x + a @ p["o"]
    return x + jax.nn.gelu(norm(x, p["n2"]) @ p["up"]) @ p["down"]

def loss(params, tokens):
    x = params["emb"][tokens]
    for p in params["layers"]:
        x = layer(x, p)
    logits = (norm(x, jnp.ones((D,), dt)) @ params["out"]).astype(jnp.float32)
    lp = jax.nn.log_softmax(logits[:, :-1], -1)
    return -jnp.mean(jnp.take_along_axis(lp, tokens[:, 1:, None], -1)), logits

@jax.jit
def forward(params, tokens):
    l, logits = loss(params, tokens)
    return l, jnp.sum(jnp.abs(logits))

@jax.jit
def step(params, tokens):
    (l, _), g = jax.value_and_grad(loss, has_aux=True)(params, tokens)
    return l, jax.tree.map(lambda p, g: (p.astype(jnp.float32) - 1e-2 * g.astype(jnp.float32)).astype(dt), params, g)

t0 = time.time()
params = jax.jit(init)(jax.random.PRNGKey(0))
tokens = jax.random.randint(jax.random.PRNGKey(1), (B, T), 0, V)
fl, fsum = forward(params, tokens)
sl, new = step(params, tokens)
leaves = [fl, fsum, sl] + jax.tree.leaves(new)
host = [np.asarray(x.astype(jnp.float32)) for x in leaves]
t1 = time.time()
h = hashlib.sha256()
for a in host:
    h.update(a.tobytes())
res = {"compile_s": t1 - t0, "import_s": t0 - t_start, "sha256": h.hexdigest(),
       "loss": float(fl), "jax": jax.__version__, "device": jax.devices()[0].device_kind,
       "platform_version": jax.devices()[0].client.platform_version}
if "ptxcache.jax" in sys.modules:
    import ptxcache.artifacts
    res["ptxcache"] = {"how": how, "installed": ptxcache.jax.installed(),
                       "jax": dict(ptxcache.jax.counts),
                       "counts": ptxcache.artifacts.store().counts,
                       "layers": ptxcache.artifacts.store().layers()}
d = os.environ.get("JAX_COMPILATION_CACHE_DIR")
if d and os.path.isdir(d):
    res["dir_entries"] = len([f for f in os.listdir(d) if f.endswith("-cache")])
with open(out_path, "w") as f:
    json.dump(res, f)
'''


def log(*a):
    print(*a, flush=True)


def env_for(work, tools, jax_dir=None, daemon=None):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PTXCACHE_", "JAX_COMPILATION", "JAX_PERSISTENT"))}
    # Every run alike: memory taken as needed (four processes share the
    # GPU), and XLA's deterministic reductions and scatters, without which
    # two processes running one executable differ in their last bits (JAX's
    # own warm directory against its cold run did, in every run), and an
    # output could not be compared with its producer's.
    env.update(PYTHONUNBUFFERED="1", XLA_PYTHON_CLIENT_PREALLOCATE="false",
               XLA_FLAGS="--xla_gpu_deterministic_ops=true")
    if jax_dir:
        env["JAX_COMPILATION_CACHE_DIR"] = jax_dir
    if daemon is not None:
        # The package's one switch, read by ptxcache.pth at the
        # interpreter's start, as a user's job has it (else the call).
        base, enabled = tc.pth_base(work, tools)
        if enabled:
            env["PTXCACHE_JIT"] = "1"
            if base:
                env["PYTHONUSERBASE"] = base
        else:
            env["JC_PKG"] = "1"
        env.update(PTXCACHE_SOCKET=daemon.sock, PTXCACHE_BIN=tools.cli,
                   PTXCACHE_AUTOSTART="0", XDG_CACHE_HOME=os.path.join(work, "xdg"),
                   PYTHONPATH=tools.python_dir + (os.pathsep + env["PYTHONPATH"]
                                                  if env.get("PYTHONPATH") else ""))
    return env


def start(work, env):
    script = os.path.join(work, "child.py")
    if not os.path.exists(script):
        with open(script, "w") as f:
            f.write(CHILD)
    out = os.path.join(work, "out-%d.json" % time.time_ns())
    t0 = time.time()
    p = subprocess.Popen([sys.executable, script, out], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    return p, out, t0


def finish(p, out, t0, timeout):
    try:
        text, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        text, _ = p.communicate()
        return {"error": "timed out after %d s" % timeout, "tail": text[-3000:]}
    if p.returncode != 0 or not os.path.exists(out):
        return {"error": "exit %s" % p.returncode, "tail": text[-3000:]}
    with open(out) as f:
        r = json.load(f)
    r["process_s"] = time.time() - t0
    warns = [line for line in text.splitlines() if "ptxcache" in line and "WARN" in line.upper()]
    if warns:
        r["warnings"] = warns[:5]
    return r


def run(work, env, tag, timeout, results, args):
    r = finish(*start(work, env), timeout)
    cold = results.get("cold", {}).get("sha256")
    if "sha256" in r and cold:
        r["same_as_cold"] = r["sha256"] == cold
    results.setdefault("runs", []).append(dict(r, tag=tag))
    log("  %-9s %s%s" % (tag, ("%.2f s (process %.1f s)" % (r["compile_s"], r["process_s"]))
                         if "compile_s" in r else r["error"],
                         "" if r.get("same_as_cold", True) else "  OUTPUT DIFFERS"))
    save(args, results)
    return r


def daemon_stats(d):
    return {k: v for k, v in d.stats().items() if k.startswith(("artifact", "l2_"))}


def save(args, results):
    runs = results.get("runs", [])
    med = {}
    for tag in ("cold", "local", "pkg-cold", "pkg-warm", "pkg-l2"):
        xs = [r["compile_s"] for r in runs if r.get("tag") == tag and "compile_s" in r]
        if xs:
            med[tag] = {"median_s": round(statistics.median(xs), 3), "n": len(xs),
                        "all_s": [round(x, 3) for x in xs]}
    results["medians"] = med
    results["outputs_equal_cold"] = all(r.get("same_as_cold", True) for r in runs)
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    with open(os.path.join(args.out, "results.md"), "w") as f:
        f.write("| run | median s (first call to results) | n |\n| --- | --- | --- |\n")
        for tag, m in med.items():
            f.write("| %s | %.2f | %d |\n" % (tag, m["median_s"], m["n"]))
        f.write("\noutputs equal to the cold run's: %s\n" % results["outputs_equal_cold"])
        if "four" in results:
            f.write("four at once: misses per process %s, daemon %s\n" % (
                results["four"].get("misses"), results["four"].get("daemon")))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bundle")
    ap.add_argument("--bin", help="a directory with ptxcached, ptxcache, redis/ (instead of --bundle)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--timeout", type=int, default=180)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    work = tempfile.mkdtemp(prefix="jaxcache-")
    tools = tc.Tools(args.bundle, args.bin, work)
    results = {"started": time.strftime("%Y-%m-%d %H:%M:%S")}
    t_all = time.time()
    jdir = os.path.join(work, "jaxdir")
    log("cold and local anchors:")
    results["cold"] = run(work, env_for(work, tools, jax_dir=jdir), "cold", args.timeout, results, args)
    redis = tc.Redis(tools, tempfile.mkdtemp(prefix="redis-", dir=work))
    secret = os.path.join(work, "l2-secret")
    with open(secret, "w") as f:
        f.write(hashlib.sha256(os.urandom(32)).hexdigest())
    daemons = []
    try:
        d1 = tc.Daemon(tools, work, "d1", redis, secret)
        daemons.append(d1)
        r = run(work, env_for(work, tools, daemon=d1), "pkg-cold", args.timeout, results, args)
        r["daemon"] = daemon_stats(d1)
        time.sleep(2.0)     # the daemon hands entries to Redis after its reply
        for i in range(args.rounds):
            log("round %d:" % (i + 1))
            run(work, env_for(work, tools, jax_dir=jdir), "local", args.timeout, results, args)
            r = run(work, env_for(work, tools, daemon=d1), "pkg-warm", args.timeout, results, args)
            r["daemon"] = daemon_stats(d1)
            d2 = tc.Daemon(tools, work, "d2-%d" % i, redis, secret)
            daemons.append(d2)
            r = run(work, env_for(work, tools, daemon=d2), "pkg-l2", args.timeout, results, args)
            r["daemon"] = daemon_stats(d2)
            d2.stop()
        log("four processes at once, a cold daemon (its own store, no Redis):")
        d3 = tc.Daemon(tools, work, "d3")
        daemons.append(d3)
        env = env_for(work, tools, daemon=d3)
        started = [start(work, env) for _ in range(4)]
        four = [finish(p, o, t0, args.timeout) for p, o, t0 in started]
        cold = results["cold"].get("sha256")
        results["four"] = {
            "compile_s": [round(r.get("compile_s", -1), 2) for r in four],
            "misses": [r.get("ptxcache", {}).get("counts", {}).get("misses") for r in four],
            "hits": [r.get("ptxcache", {}).get("counts", {}).get("hits") for r in four],
            "leases": [r.get("ptxcache", {}).get("counts", {}).get("leases") for r in four],
            "same_as_cold": [r.get("sha256") == cold for r in four],
            "errors": [r["error"] for r in four if "error" in r],
            "daemon": daemon_stats(d3), "runs": four}
        log("  misses per process %s, hits %s, outputs equal cold %s" % (
            results["four"]["misses"], results["four"]["hits"], results["four"]["same_as_cold"]))
    finally:
        for d in daemons:
            try:
                d.stop()
            except Exception:
                pass
        redis.stop()
    results["wall_s"] = round(time.time() - t_all, 1)
    save(args, results)
    log(open(os.path.join(args.out, "results.md")).read())


if __name__ == "__main__":
    main()
