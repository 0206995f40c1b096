#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Proof of the Python package (python/ptxcache) on a real GPU: how long a
fresh process's torch.compile takes with Triton's and Inductor's own caches
on ptxcached, against the anchors. Not part of `make test` (CI has no GPU);
see tests/gpu/README.md.

    python3 tests/gpu/torch_cache.py --bundle gpu-carry-py/bundle.tar.xz --out $OUT \
        [--models cnn,mixer] [--modes default,max-autotune-no-cudagraphs]
        [--runs cold,local,pkg-l2,four] [--daemon-log debug]
    python3 tests/gpu/torch_cache.py --bundle ... --out $OUT --repeat 3 \
        --cases vit/default,vit-train/max-autotune-no-cudagraphs [--runs pkg-l2,plain,profile,precompile]

Two models of this script's own: `cnn`, inference (a small convolutional
net, eval, no_grad), and `mixer`, one training step (two MLP-Mixer blocks,
forward, cross-entropy, backward; the gradients are the output). Issue 29's
`vit` (a small vision transformer in bf16, inference) and `vit-train` (one
training step of it). With --repeat N, the series of tests/gpu/README.md's
issue-29 section instead: cold anchors, then N rounds of local / pkg-warm /
pkg-l2 alternating, medians in the table, each run's counters, requests
per namespace and Dynamo's stage timers in results.json. For each
model and mode, every run a fresh process with fresh TORCHINDUCTOR_CACHE_DIR
and TRITON_CACHE_DIR unless said otherwise, timed from the compiled
module's first call to its results on the host:

  cold      no package, every cache cold (Triton's own ptxas)
  local     no package, the cold run's own cache directories again
            (Triton's and Inductor's local caches warm): the anchor
  pkg-cold  PTXCACHE_TORCH=1 (ptxcache.pth), a cold daemon (with Redis)
  pkg-warm  the same, that daemon now warm
  pkg-warm2 the same again, a second fresh process on that daemon
  pkg-l2    the same, a second daemon with its own store, sharing Redis
  four      four processes started together, PTXCACHE_TORCH=1, a cold
            daemon: graph compiles (FX cache misses) and waits

Outputs are compared bit for bit with the cold run's (in default mode they
must be equal; max-autotune chooses kernels by benchmarking, so its last
bits may differ). Writes results.json and results.md to OUT as it goes
(a run that times out still leaves the others). `--report OUT...` merges
the results.json of several calls into one table.

The daemon is the static build (`tests/gpu/carry_torch.sh` makes the
bundle: ptxcached, ptxcache, redis-server with its libraries, the package)
and runs Triton's own ptxas, so every cubin is the one Triton would make.
"""
import argparse
import gzip
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

CHILD = r'''
import hashlib, json, os, sys, time
t_start = time.time()
if os.environ.get("TC_CALL_ENABLE") == "1":
    import ptxcache.torch
    ptxcache.torch.enable()
import torch, torch.nn as nn, torch.nn.functional as F
model_name, mode, out_path = sys.argv[1], sys.argv[2], sys.argv[3]
if os.environ.get("TC_PRECOMPILE") == "1":
    torch._dynamo.config.caching_precompile = True
torch.manual_seed(0)
dev = "cuda"

class CNN(nn.Module):
    def __init__(s):
        super().__init__()
        s.c1, s.b1 = nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32)
        s.c2, s.b2 = nn.Conv2d(32, 64, 3, stride=2, padding=1), nn.BatchNorm2d(64)
        s.c3, s.b3 = nn.Conv2d(64, 128, 3, stride=2, padding=1), nn.BatchNorm2d(128)
        s.fc = nn.Linear(128, 10)
    def forward(s, x):
        x = F.relu(s.b1(s.c1(x)))
        x = F.relu(s.b2(s.c2(x)))
        x = F.silu(s.b3(s.c3(x)))
        return F.softmax(s.fc(x.mean((2, 3))), -1)

class MixerBlock(nn.Module):
    def __init__(s, tokens=64, ch=128):
        super().__init__()
        s.n1, s.n2 = nn.LayerNorm(ch), nn.LayerNorm(ch)
        s.t1, s.t2 = nn.Linear(tokens, 2 * tokens), nn.Linear(2 * tokens, tokens)
        s.h1, s.h2 = nn.Linear(ch, 4 * ch), nn.Linear(4 * ch, ch)
    def forward(s, x):
        y = s.n1(x).transpose(1, 2)
        x = x + s.t2(F.gelu(s.t1(y))).transpose(1, 2)
        return x + s.h2(F.gelu(s.h1(s.n2(x))))

class Mixer(nn.Module):
    def __init__(s):
        super().__init__()
        s.inp = nn.Linear(48, 128)
        s.blocks = nn.Sequential(MixerBlock(), MixerBlock())
        s.norm, s.head = nn.LayerNorm(128), nn.Linear(128, 10)
    def forward(s, x):
        return s.head(s.norm(s.blocks(s.inp(x))).mean(1))

class ViTBlock(nn.Module):
    def __init__(s, d, heads):
        super().__init__()
        s.heads = heads
        s.n1, s.n2 = nn.LayerNorm(d), nn.LayerNorm(d)
        s.qkv, s.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        s.f1, s.f2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
    def forward(s, x):
        b, t, d = x.shape
        q, k, v = s.qkv(s.n1(x)).view(b, t, 3, s.heads, d // s.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, t, d)
        x = x + s.proj(a)
        return x + s.f2(F.gelu(s.f1(s.n2(x))))

class ViT(nn.Module):
    # A small vision transformer: 8x8 patches of a 64x64 image, 4 blocks.
    def __init__(s, d=256, depth=4, heads=4, patch=8, img=64):
        super().__init__()
        s.patch = nn.Conv2d(3, d, patch, patch)
        s.cls = nn.Parameter(torch.zeros(1, 1, d))
        s.pos = nn.Parameter(torch.randn(1, (img // patch) ** 2 + 1, d) * 0.02)
        s.blocks = nn.ModuleList([ViTBlock(d, heads) for _ in range(depth)])
        s.norm, s.head = nn.LayerNorm(d), nn.Linear(d, 10)
    def forward(s, x):
        x = s.patch(x).flatten(2).transpose(1, 2)
        x = torch.cat([s.cls.expand(x.shape[0], -1, -1), x], 1) + s.pos
        for blk in s.blocks:
            x = blk(x)
        return s.head(s.norm(x[:, 0]))

train = model_name in ("mixer", "vit-train")
if model_name == "cnn":
    model = CNN().to(dev).eval()
    x = torch.randn(64, 3, 64, 64, device=dev)
elif model_name == "mixer":
    model = Mixer().to(dev)
    x = torch.randn(32, 64, 48, device=dev)
else:
    model = ViT().to(dev, torch.bfloat16)
    if not train:
        model.eval()
    x = torch.randn(32, 3, 64, 64, device=dev, dtype=torch.bfloat16)
if train:
    target = torch.randint(0, 10, (x.shape[0],), device=dev)
compiled = torch.compile(model, mode=None if mode == "default" else mode)
prof = None
if os.environ.get("TC_PROFILE") == "1":
    import cProfile
    prof = cProfile.Profile()
torch.cuda.synchronize()
t0 = time.time()
if prof:
    prof.enable()
if not train:
    with torch.no_grad():
        out = compiled(x)
    outs = [out]
else:
    loss = F.cross_entropy(compiled(x).float(), target)
    loss.backward()
    outs = [loss.detach()] + [p.grad for p in model.parameters()]
torch.cuda.synchronize()
t1 = time.time()
if prof:
    prof.disable()
    prof.dump_stats(out_path + ".prof")
from torch._dynamo.utils import counters
h = hashlib.sha256()
for o in outs:
    h.update(o.detach().float().cpu().contiguous().numpy().tobytes())
res = {"compile_s": t1 - t0, "import_s": t0 - t_start, "sha256": h.hexdigest(),
       "counters": {k: dict(v) for k, v in counters.items()
                    if k in ("inductor", "aot_autograd", "stats", "dynamo_cache")},
       "torch": torch.__version__}
if os.environ.get("TC_GUARDS") == "1":
    # Guards kept: another batch size must compile again.
    before = dict(counters["stats"])
    with torch.no_grad():
        compiled(x[: x.shape[0] // 2])
    res["guards"] = {"before": before, "after": dict(counters["stats"])}
try:
    from torch._dynamo.utils import compilation_time_metrics as ctm
    res["stages"] = {k: round(sum(v), 4) for k, v in ctm.items()}
except Exception as e:
    res["stages"] = repr(e)
try:
    import triton
    res["triton"] = triton.__version__
except Exception:
    pass
if "ptxcache" in sys.modules:
    import ptxcache.artifacts, ptxcache.torch, ptxcache.inductor, ptxcache.autotune
    res["ptxcache"] = {"state": ptxcache.torch.state(), "counts": ptxcache.artifacts.store().counts,
                       "layers": ptxcache.artifacts.store().layers(),
                       "installed": ptxcache.inductor.installed(),
                       "autotune": dict(ptxcache.autotune.counts,
                                        installed=ptxcache.autotune.installed())}
try:
    from torch._inductor import remote_cache
    res["remote_cache_stats"] = {k: vars(v) for k, v in remote_cache.cache_stats._stats.items()}
except Exception as e:
    res["remote_cache_stats"] = repr(e)
res["env"] = {k: os.environ.get(k) for k in ("TRITON_CACHE_MANAGER", "TRITON_PTXAS_PATH",
              "TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE", "TORCHINDUCTOR_AUTOTUNE_REMOTE_CACHE",
              "PTXCACHE_AUTOTUNE_RECHECK", "TC_PRECOMPILE")}
with open(out_path, "w") as f:
    json.dump(res, f)
'''


def log(*a):
    print(*a, flush=True)


class Tools:
    """The carried binaries: ptxcached, ptxcache, redis-server (+ libs)."""

    def __init__(self, bundle, bindir, work):
        if bundle:
            d = os.path.join(work, "bundle")
            with tarfile.open(bundle) as t:
                t.extractall(d)
            bindir = d
        self.dir = os.path.abspath(bindir)
        self.daemon = os.path.join(self.dir, "ptxcached")
        self.cli = os.path.join(self.dir, "ptxcache")
        self.redis = os.path.join(self.dir, "redis", "redis-server")
        self.redis_libs = os.path.join(self.dir, "redis", "lib")
        pkg = os.path.join(self.dir, "python")
        self.python_dir = pkg if os.path.isdir(os.path.join(pkg, "ptxcache")) else os.path.join(ROOT, "python")
        for p in (self.daemon, self.cli):
            assert os.access(p, os.X_OK), "missing %s" % p


def triton_ptxas():
    import importlib.util
    spec = importlib.util.find_spec("triton")
    for loc in (spec.submodule_search_locations or []) if spec else []:
        p = os.path.join(loc, "backends", "nvidia", "bin", "ptxas")
        if os.access(p, os.X_OK):
            return p
    return shutil.which("ptxas")


class Redis:
    def __init__(self, tools, work, keep=False):
        """keep: save the data in work when stopped, and load what an
        earlier one saved there (a later device call on the same machine)."""
        self.sock = os.path.join(work, "redis.sock")
        self.keep = keep
        env = dict(os.environ, LD_LIBRARY_PATH=tools.redis_libs)
        # A save point makes redis-server save on SIGTERM; it never fires
        # during a run.
        self.proc = subprocess.Popen([tools.redis, "--port", "0", "--unixsocket", self.sock,
                                      "--save", "86400 1" if keep else "", "--appendonly", "no",
                                      "--dir", work],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        deadline = time.time() + 10
        while not os.path.exists(self.sock):
            if self.proc.poll() is not None or time.time() > deadline:
                raise RuntimeError("redis-server did not start (exit %s)" % self.proc.poll())
            time.sleep(0.05)

    def stop(self):
        if self.keep:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=120)
                return
            except subprocess.TimeoutExpired:
                pass
        self.proc.kill()
        self.proc.wait()


class Daemon:
    def __init__(self, tools, work, name, redis=None, secret=None, log_level="warning", reuse=False):
        """reuse: start on the state a daemon of this name left in work."""
        self.tools = tools
        self.dir = os.path.join(work, name)
        os.makedirs(self.dir, exist_ok=reuse)
        self.sock = os.path.join(self.dir, "s.sock")
        args = [tools.daemon, "--socket", self.sock, "--cache-dir", os.path.join(self.dir, "cache"),
                "--log-level", log_level]     # workers: the default, one per core
        p = triton_ptxas()
        if p:
            args += ["--ptxas", p]
        if redis:
            args += ["--l2", "unix:" + redis.sock, "--l2-secret-file", secret]
        self.log = open(os.path.join(self.dir, "log"), "ab")
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=self.log)
        deadline = time.time() + 60
        while subprocess.run([tools.cli, "--socket", self.sock, "ping"],
                             capture_output=True).returncode != 0:
            if self.proc.poll() is not None or time.time() > deadline:
                raise RuntimeError("ptxcached did not start: %s" % open(self.log.name).read()[-2000:])
            time.sleep(0.1)

    def stats(self):
        r = subprocess.run([self.tools.cli, "--socket", self.sock, "stats", "--json"],
                           capture_output=True, text=True)
        return json.loads(r.stdout) if r.returncode == 0 else {}

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


_PTH_MADE = []


def pth_base(work, tools):
    """A site holding ptxcache.pth, as an install has: a PYTHONUSERBASE
    of our own, or, where PyTorch itself lives in the user's own site (pip
    install --user), that site, or in a virtual environment (no user site)
    its site-packages; a file made there is removed again at exit. Returns
    (PYTHONUSERBASE or None, whether the interpreter reads a user site)."""
    import importlib.util
    import site
    torch_at = (importlib.util.find_spec("torch") or importlib.util.find_spec("os")).origin or ""
    own = site.getusersitepackages()
    if torch_at.startswith(own + os.sep):
        os.makedirs(own, exist_ok=True)
        dst = os.path.join(own, "ptxcache.pth")
        if not os.path.exists(dst):
            shutil.copy(os.path.join(tools.python_dir, "ptxcache.pth"), dst)
            _PTH_MADE.append(dst)
        return None, bool(site.ENABLE_USER_SITE)
    if not site.ENABLE_USER_SITE:
        # A virtual environment (no user site): where installing the
        # package into it puts the file, its site-packages.
        import sysconfig
        dst = os.path.join(sysconfig.get_paths()["purelib"], "ptxcache.pth")
        if not os.path.exists(dst):
            shutil.copy(os.path.join(tools.python_dir, "ptxcache.pth"), dst)
            _PTH_MADE.append(dst)
        return None, True
    base = os.path.join(work, "userbase")
    r = subprocess.run([sys.executable, "-c", "import site; print(site.getusersitepackages(), "
                        "site.ENABLE_USER_SITE)"], env=dict(os.environ, PYTHONUSERBASE=base),
                       capture_output=True, text=True)
    d, enabled = r.stdout.split()
    os.makedirs(d, exist_ok=True)
    shutil.copy(os.path.join(tools.python_dir, "ptxcache.pth"), d)
    return base, enabled == "True"


def child_env(work, tools, tag, dirs=None, daemon=None, pth=None):
    cdir = dirs or tempfile.mkdtemp(prefix="tc-%s-" % tag, dir=work)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PTXCACHE_", "TRITON_", "TORCHINDUCTOR_", "TORCH_COMPILE"))}
    env.update(TORCHINDUCTOR_CACHE_DIR=os.path.join(cdir, "inductor"),
               TRITON_CACHE_DIR=os.path.join(cdir, "triton"), PYTHONUNBUFFERED="1")
    if daemon is not None:
        env.update(PTXCACHE_SOCKET=daemon.sock, PTXCACHE_BIN=tools.cli,
                   XDG_CACHE_HOME=os.path.join(work, "xdg"),
                   PYTHONPATH=tools.python_dir + (os.pathsep + env["PYTHONPATH"]
                                                  if env.get("PYTHONPATH") else ""))
        base, enabled = pth
        if enabled:
            env["PTXCACHE_TORCH"] = "1"
            if base:
                env["PYTHONUSERBASE"] = base
        else:       # a venv without user site: the one call instead
            env["TC_CALL_ENABLE"] = "1"
    return env, cdir


def start_child(work, model, mode, env, tag):
    out = os.path.join(work, "out-%s-%s-%s-%d.json" % (model, mode, tag, time.time_ns()))
    script = os.path.join(work, "child.py")
    if not os.path.exists(script):
        with open(script, "w") as f:
            f.write(CHILD)
    t0 = time.time()
    p = subprocess.Popen([sys.executable, script, model, mode, out], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return p, out, t0


def finish_child(p, out, t0, timeout):
    try:
        text, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        text, _ = p.communicate()
        return {"error": "timed out after %d s" % timeout, "tail": text[-3000:]}
    wall = time.time() - t0
    if p.returncode != 0 or not os.path.exists(out):
        return {"error": "exit %s" % p.returncode, "tail": text[-3000:]}
    with open(out) as f:
        r = json.load(f)
    r["process_s"] = wall
    r["pid"] = p.pid
    warns = [line for line in text.splitlines() if "ptxcache" in line and "WARNING" in line.upper()]
    if warns:
        r["warnings"] = warns[:5]
    dropped = [line for line in text.splitlines() if "caching_precompile" in line
               or "package" in line.lower() and "dynamo" in line.lower()]
    if dropped:
        r["precompile_notes"] = dropped[:12]
    return r


def run_one(work, model, mode, env, tag, timeout):
    p, out, t0 = start_child(work, model, mode, env, tag)
    r = finish_child(p, out, t0, timeout)
    log("  %-9s %s" % (tag, ("%.1f s" % r["compile_s"]) if "compile_s" in r else r["error"]))
    return r


def fx_misses(r):
    c = r.get("counters", {}).get("inductor", {})
    return c.get("fxgraph_cache_miss", 0)


def one_case(args, tools, work, model, mode, results):
    key = "%s/%s" % (model, mode)
    res = results.setdefault(key, {})
    log("%s:" % key)
    t = args.timeout
    runs = set(args.runs.split(","))
    pth = pth_base(work, tools)
    # Anchors: cold, then the cold run's own directories again.
    if "cold" in runs:
        env, dirs = child_env(work, tools, "cold")
        res["cold"] = run_one(work, model, mode, env, "cold", t)
        if "local" in runs:
            env, _ = child_env(work, tools, "local", dirs=dirs)
            res["local"] = run_one(work, model, mode, env, "local", t)
        save(args, results)
    # The package: a daemon with Redis, then a second one on that Redis.
    redis = secret = None
    if os.access(tools.redis, os.X_OK):
        try:
            redis = Redis(tools, tempfile.mkdtemp(prefix="redis-", dir=work))
            secret = os.path.join(work, "l2-secret")
            with open(secret, "w") as f:
                f.write(hashlib.sha256(os.urandom(32)).hexdigest())
        except Exception as e:
            res["redis_error"] = str(e)
            redis = None
    name = "d1-%s-%s" % (model, mode.replace("-", ""))
    d1 = Daemon(tools, work, name, redis, secret, log_level=args.daemon_log)
    try:
        for tag in ("pkg-cold", "pkg-warm", "pkg-warm2"):
            # pkg-warm2: another fresh process on the same daemon, with
            # what the first warm one stored too.
            env, _ = child_env(work, tools, tag.replace("-", ""), daemon=d1, pth=pth)
            log_at = os.path.getsize(d1.log.name)
            res[tag] = run_one(work, model, mode, env, tag, t)
            res[tag]["daemon"] = {k: v for k, v in d1.stats().items() if k.startswith("artifact")}
            res[tag]["daemon_log_at"] = log_at
            save(args, results)
        if args.daemon_log != "warning":
            with open(d1.log.name, "rb") as f, gzip.open(os.path.join(args.out, name + ".log.gz"), "wb") as g:
                shutil.copyfileobj(f, g)
        if redis and "pkg-l2" in runs:
            time.sleep(2.0)     # the daemon publishes to Redis in the background
            d2 = Daemon(tools, work, "d2-%s-%s" % (model, mode.replace("-", "")), redis, secret)
            try:
                env, _ = child_env(work, tools, "pkgl2", daemon=d2, pth=pth)
                res["pkg-l2"] = run_one(work, model, mode, env, "pkg-l2", t)
                res["pkg-l2"]["daemon"] = {k: v for k, v in d2.stats().items()
                                           if k.startswith("artifact") or k.startswith("l2_")}
            finally:
                d2.stop()
        elif "pkg-l2" in runs:
            res["pkg-l2"] = {"error": "not run: no redis-server (%s)" % res.get("redis_error", "not carried")}
    finally:
        d1.stop()
        if redis:
            redis.stop()
    save(args, results)
    if "four" not in runs:
        return
    # Four processes together on a cold daemon.
    d3 = Daemon(tools, work, "d3-%s-%s" % (model, mode.replace("-", "")))
    try:
        started = [start_child(work, model, mode, child_env(work, tools, "four%d" % i, daemon=d3,
                                                                pth=pth)[0], "four%d" % i)
                   for i in range(4)]
        four = [finish_child(p, out, t0, t) for p, out, t0 in started]
        s = d3.stats()
        res["four"] = {"runs": four, "daemon": {k: v for k, v in s.items() if k.startswith("artifact")},
                       "graph_compiles": sum(fx_misses(r) for r in four),
                       "graphs": fx_misses(res["cold"]) or None}
        log("  four      graph compiles %s (graphs %s), waits %s, wait hits %s, leases %s"
            % (res["four"]["graph_compiles"], res["four"]["graphs"], s.get("artifact_waits"),
               s.get("artifact_wait_hits"), s.get("artifact_leases")))
    finally:
        d3.stop()
    save(args, results)


DELTA = ("compiles", "hits", "misses", "requests", "artifact_hits", "artifact_misses",
         "artifact_puts", "artifact_l2_hits", "artifact_waits")


def timed(d, work, model, mode, env, tag, t):
    """run_one, with what the run asked of daemon d (its counters' change)."""
    before = d.stats() if d else {}
    r = run_one(work, model, mode, env, tag, t)
    if d:
        after = d.stats()
        r["daemon_delta"] = {k: after.get(k, 0) - before.get(k, 0) for k in DELTA if k in after}
    return r


def profile_text(path, n=45):
    import io
    import pstats
    s = io.StringIO()
    try:
        pstats.Stats(path, stream=s).sort_stats("cumulative").print_stats(n)
    except Exception as e:
        return repr(e)
    return s.getvalue()[-12000:]


def series_case(args, tools, work, model, mode, results, deadline):
    """The issue-29 series: cold anchors, then args.repeat rounds of
    local / pkg-warm / pkg-l2 (each a fresh process, the pkg ones with
    fresh directories, a fresh second daemon each round), alternating;
    then the optional runs: plain (PyTorch's own recheck), profile,
    precompile."""
    key = "%s/%s" % (model, mode)
    res = results.setdefault(key, {})
    log("%s:" % key)
    t = args.timeout
    runs = set(args.runs.split(","))
    pth = pth_base(work, tools)
    env, dirs = child_env(work, tools, "cold")
    res["cold"] = run_one(work, model, mode, env, "cold", t)
    save(args, results)
    redis = Redis(tools, tempfile.mkdtemp(prefix="redis-", dir=work))
    secret = os.path.join(work, "l2-secret")
    with open(secret, "w") as f:
        f.write(hashlib.sha256(os.urandom(32)).hexdigest())
    name = "d1-%s-%s" % (model, mode.replace("-", ""))
    d1 = Daemon(tools, work, name, redis, secret)
    try:
        env, _ = child_env(work, tools, "pkgcold", daemon=d1, pth=pth)
        res["pkg-cold"] = timed(d1, work, model, mode, env, "pkg-cold", t)
        save(args, results)
        time.sleep(2.0)     # the daemon publishes to Redis in the background
        for i in range(args.repeat):
            if time.time() > deadline:
                res["cut"] = "after %d rounds: out of time" % i
                break
            env, _ = child_env(work, tools, "local", dirs=dirs)
            res.setdefault("local", []).append(run_one(work, model, mode, env, "local", t))
            env, _ = child_env(work, tools, "pkgwarm", daemon=d1, pth=pth)
            res.setdefault("pkg-warm", []).append(timed(d1, work, model, mode, env, "pkg-warm", t))
            if "pkg-l2" in runs:
                d2 = Daemon(tools, work, "d2-%s-%s-%d" % (model, mode.replace("-", ""), i), redis, secret)
                try:
                    env, _ = child_env(work, tools, "pkgl2", daemon=d2, pth=pth)
                    r = timed(d2, work, model, mode, env, "pkg-l2", t)
                    r["l2"] = {k: v for k, v in d2.stats().items() if k.startswith("l2_")}
                    res.setdefault("pkg-l2", []).append(r)
                finally:
                    d2.stop()
            save(args, results)
        if "plain" in runs and time.time() < deadline:
            env, _ = child_env(work, tools, "pkgplain", daemon=d1, pth=pth)
            env["PTXCACHE_AUTOTUNE_RECHECK"] = "0"
            res["pkg-plain"] = timed(d1, work, model, mode, env, "pkg-plain", t)
        if "profile" in runs and not model.endswith("-train") and time.time() < deadline:
            for tag, d in (("prof-local", None), ("prof-pkg", d1)):
                if d is None:
                    env, _ = child_env(work, tools, "proflocal", dirs=dirs)
                else:
                    env, _ = child_env(work, tools, "profpkg", daemon=d1, pth=pth)
                env["TC_PROFILE"] = "1"
                p, out, t0 = start_child(work, model, mode, env, tag)
                r = finish_child(p, out, t0, t)
                r["profile"] = profile_text(out + ".prof")
                log("  %-9s %s" % (tag, fmt(r)))
                res[tag] = r
        save(args, results)
    finally:
        d1.stop()
        redis.stop()
    if ("precompile" in runs and mode == "default" and not model.endswith("-train")
            and time.time() < deadline):
        # Dynamo's caching_precompile with local caches alone: a cold run,
        # then warm runs on its directories; one with another batch size.
        env, pdirs = child_env(work, tools, "pccold")
        env["TC_PRECOMPILE"] = "1"
        res["pc-cold"] = run_one(work, model, mode, env, "pc-cold", t)
        for i in range(2):
            env, _ = child_env(work, tools, "pcwarm", dirs=pdirs)
            env["TC_PRECOMPILE"] = "1"
            if i == 1:
                env["TC_GUARDS"] = "1"
            res.setdefault("pc-warm", []).append(run_one(work, model, mode, env, "pc-warm", t))
        env, _ = child_env(work, tools, "localg", dirs=dirs)
        env["TC_GUARDS"] = "1"
        res["local-guards"] = run_one(work, model, mode, env, "local-g", t)
    save(args, results)


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    return None if not n else xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def _times(v):
    rs = v if isinstance(v, list) else [v] if isinstance(v, dict) else []
    return [r["compile_s"] for r in rs if "compile_s" in r]


def counters_of(r):
    """The counters of one run, for the table."""
    c = r.get("counters", {})
    ind, aot = c.get("inductor", {}), c.get("aot_autograd", {})
    p = r.get("ptxcache", {})
    lay = p.get("layers", {})
    out = {"fx_hit": ind.get("fxgraph_cache_hit", 0), "fx_miss": ind.get("fxgraph_cache_miss", 0),
           "aot_hit": aot.get("autograd_cache_hit", 0), "coordesc": ind.get("coordesc_tuning_bench", 0),
           "select_algo": ind.get("select_algorithm_autotune", 0)}
    if lay:
        out["autotune_hits"] = lay.get("inductor-autotune", {}).get("hits", 0)
        out["requests"] = int(sum(v.get("gets", 0) + v.get("puts", 0) for v in lay.values()))
        out["trips"] = int(sum(v.get("trips", 0) + v.get("puts", 0) for v in lay.values()))
        out["get_s"] = {ns: round(v.get("get_s", 0), 3) for ns, v in lay.items()}
    if "daemon_delta" in r:
        out["ptxas_compiles"] = r["daemon_delta"].get("compiles")
    if p.get("autotune"):
        out["recheck"] = {k: p["autotune"].get(k) for k in ("marked", "replaced")}
    return out


def series_table(results):
    rows = ["| model / mode | cold | local caches warm (median) | pkg, cold daemon | "
            "pkg, warm daemon (median; 1st) | pkg, 2nd daemon via Redis (median) | "
            "warm / local | Redis / local | pkg, PyTorch's own recheck |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for key, res in results.items():
        if not isinstance(res, dict) or "cold" not in res:
            continue
        m = {k: median(_times(res.get(k))) for k in ("local", "pkg-warm", "pkg-l2")}
        first = _times(res.get("pkg-warm"))[:1]

        def s(v):
            return "%.2f s" % v if v is not None else "-"

        def ratio(a, b):
            return "%.2fx" % (a / b) if a is not None and b else "-"
        rows.append("| %s | %s | %s (%s) | %s | %s; %s | %s (%s) | %s | %s | %s |" % (
            key, fmt(res.get("cold")), s(m["local"]), len(_times(res.get("local"))),
            fmt(res.get("pkg-cold")), s(m["pkg-warm"]), s(first[0] if first else None),
            s(m["pkg-l2"]), len(_times(res.get("pkg-l2"))), ratio(m["pkg-warm"], m["local"]),
            ratio(m["pkg-l2"], m["local"]), fmt(res.get("pkg-plain"))))
    return "\n".join(rows) + "\n"


def dump_sources(out):
    """PyTorch's files this work reads, as installed, to OUT/torch-src.tar.gz."""
    import importlib.util
    spec = importlib.util.find_spec("torch")
    root = os.path.dirname(spec.origin)
    files = ["_inductor/runtime/triton_heuristics.py", "_inductor/runtime/autotune_cache.py",
             "_inductor/runtime/coordinate_descent_tuner.py", "_inductor/codecache.py",
             "_inductor/select_algorithm.py", "_inductor/remote_cache.py", "_inductor/config.py",
             "_inductor/output_code.py", "_inductor/triton_bundler.py",
             "_inductor/compile_fx.py", "_inductor/async_compile.py",
             "_functorch/_aot_autograd/autograd_cache.py",
             "_functorch/_aot_autograd/aot_autograd_result.py",
             "_dynamo/precompile_context.py", "_dynamo/package.py", "_dynamo/config.py",
             "_dynamo/convert_frame.py", "_dynamo/guards.py", "_dynamo/eval_frame.py",
             "compiler/__init__.py"]
    with tarfile.open(os.path.join(out, "torch-src.tar.gz"), "w:gz") as t:
        for f in files:
            p = os.path.join(root, f)
            if os.path.exists(p):
                t.add(p, arcname="torch/" + f)


def save(args, results):
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    with open(os.path.join(args.out, "results.md"), "w") as f:
        f.write(series_table(results) if getattr(args, "repeat", 0) else table(results))


def fmt(r):
    if not r:
        return "-"
    if "compile_s" not in r:
        return r.get("error", "?")
    return "%.1f s" % r["compile_s"]


def table(results):
    rows = ["| model / mode | cold | local caches warm | pkg, cold daemon | pkg, warm daemon | "
            "pkg, warm daemon, 2nd process | pkg, 2nd daemon via Redis | warm daemon / local | "
            "outputs = cold's | four together: graph compiles (graphs), waits, wait hits |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for key, res in results.items():
        loc, warm = res.get("local", {}), res.get("pkg-warm", {})
        ratio = ("%.2fx" % (warm["compile_s"] / loc["compile_s"])
                 if "compile_s" in warm and "compile_s" in loc else "-")
        ref = res.get("cold", {}).get("sha256")
        same = []
        for k in ("local", "pkg-cold", "pkg-warm", "pkg-warm2", "pkg-l2"):
            if res.get(k, {}).get("sha256"):
                same.append("%s %s" % (k, "yes" if res[k]["sha256"] == ref else "no"))
        f = res.get("four", {})
        d = f.get("daemon", {})
        four = ("%s (%s), %s, %s" % (f.get("graph_compiles"), f.get("graphs"), d.get("artifact_waits"),
                                     d.get("artifact_wait_hits")) if f else "-")
        rows.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            key, fmt(res.get("cold")), fmt(loc), fmt(res.get("pkg-cold")), fmt(warm),
            fmt(res.get("pkg-warm2")), fmt(res.get("pkg-l2")), ratio, ", ".join(same) or "-",
            four))
    return "\n".join(rows) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bundle", help="the tar.xz tests/gpu/carry_torch.sh made")
    ap.add_argument("--bin", help="a directory with ptxcached, ptxcache (and redis/) instead")
    ap.add_argument("--out", required=False, default=os.environ.get("OUT", "."))
    ap.add_argument("--models", default="cnn,mixer")
    ap.add_argument("--modes", default="default,max-autotune-no-cudagraphs")
    ap.add_argument("--timeout", type=int, default=400, help="seconds a run may take")
    ap.add_argument("--runs", default="cold,local,pkg-l2,four",
                    help="which runs besides pkg-cold, pkg-warm, pkg-warm2 (local needs cold)")
    ap.add_argument("--daemon-log", default="warning",
                    help="the first daemon's --log-level; other than warning, its log is "
                         "written to OUT/d1-*.log.gz (debug: every artifact get and put)")
    ap.add_argument("--report", nargs="*", help="merge these results.json into one table")
    ap.add_argument("--repeat", type=int, default=0,
                    help="the issue-29 series: this many rounds of local / pkg-warm / pkg-l2, "
                         "alternating; --runs adds plain, profile, precompile")
    ap.add_argument("--cases", help="model/mode,... in this order (instead of --models x --modes)")
    ap.add_argument("--budget", type=int, default=560,
                    help="seconds after which a series starts no new round")
    ap.add_argument("--sources", action="store_true",
                    help="also write PyTorch's files this work reads to OUT/torch-src.tar.gz")
    args = ap.parse_args()
    if args.report:
        merged = {}
        for p in args.report:
            with open(p if p.endswith(".json") else os.path.join(p, "results.json")) as f:
                merged.update(json.load(f))
        sys.stdout.write(series_table(merged) if args.repeat else table(merged))
        return 0
    os.makedirs(args.out, exist_ok=True)
    work = tempfile.mkdtemp(prefix="torch-cache-")
    tools = Tools(args.bundle, args.bin or os.path.join(ROOT, "gpu-carry-py"), work)
    results = {}
    if args.sources:
        dump_sources(args.out)
    deadline = time.time() + args.budget
    cases = ([tuple(c.split("/", 1)) for c in args.cases.split(",")] if args.cases else
             [(m, o) for m in args.models.split(",") for o in args.modes.split(",")])
    for model, mode in cases:
        if args.repeat and time.time() > deadline:
            results["%s/%s" % (model, mode)] = {"error": "not run: out of time"}
            continue
        if True:
            try:
                if args.repeat:
                    series_case(args, tools, work, model, mode, results, deadline)
                else:
                    one_case(args, tools, work, model, mode, results)
            except Exception as e:
                results.setdefault("%s/%s" % (model, mode), {})["error"] = repr(e)
                save(args, results)
                log("  failed: %r" % e)
    save(args, results)
    sys.stdout.write(series_table(results) if args.repeat else table(results))
    for p in _PTH_MADE:
        os.unlink(p)
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
