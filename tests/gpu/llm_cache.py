#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A language model's fleet start: tests/gpu/torch_cache.py's series on a
decoder-only model from `transformers` (a LlamaConfig, random weights, no
download), bf16, inference at several sequence lengths and one training
step, all in one fresh process per run. Not part of `make test` (CI has
no GPU); see tests/gpu/README.md, "A language model's fleet start".

    python3 tests/gpu/llm_cache.py --bundle gpu-carry-py/bundle.tar.xz --out $OUT \\
        [--mode default] [--layers 16] [--repeat 3] [--runs pkg-warm,pkg-l2,nopgo,own,four,profile]
        [--wheel ptxcache-*.whl] [--work DIR [--resume]] [--budget 420] [--timeout 200] [--sources]

Runs (each a fresh process; the package's with fresh TORCHINDUCTOR_CACHE_DIR
and TRITON_CACHE_DIR, the local anchor on the cold run's). Started at once,
since their times are not compared:
  cold      no package, every cache cold (the reference outputs)
  pkg-cold  the package (PTXCACHE_TORCH=1) on a cold daemon that has Redis
  own-first (own) the pip-installed wheel with PTXCACHE_TORCH=1 alone: it
            starts the user's own daemon and compiles
  four      (four) four processes of the package on another cold daemon
then --repeat rounds, alternating:
  local     no package, the cold run's directories again: the anchor
  pkg-warm  the package on the first daemon, now warm (rounds 2 and 3
            are the second and third processes on it)
  nopgo     pkg-warm with PTXCACHE_PGO_JOB_ID=0 (no job id for Dynamo's
            profile of dynamic shapes: the second length compiles again)
  pkg-l2    the package on a fresh second daemon sharing only Redis
  own       a warm process on the user's own daemon
and at the end profile: cProfile of one local and one pkg-warm process.

A call's device time is short: --work keeps the cold directories, the
first daemon's cache and Redis's data, and a later call on the same
machine with --resume uses them instead of compiling again.

Each process runs the lengths, the first length again (through the
dynamic graph, which a process given the PGO profile runs from its first
call: the reference for that one), then the training step, and that step
twice more after the timed span, on the same inputs and weights (do this
process's own kernels give the same bits each time? atomic adds need
not). The timed span is the compiled model's first call to the end of
the training step's backward (every phase synchronised); each phase's time,
output hash (logits, or loss and every gradient), Dynamo's counters and
stage timers, and the package's requests per namespace are kept in
results.json.
"""
import argparse
import io
import json
import os
import pstats
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import torch_cache as tc  # noqa: E402

CHILD = r'''
import hashlib, json, os, sys, time
t_start = time.time()
if os.environ.get("TC_CALL_ENABLE") == "1":
    import ptxcache.torch
    ptxcache.torch.enable()
import torch
import transformers
from transformers import LlamaConfig, LlamaForCausalLM
# The output path comes in the environment: the arguments are part of the
# program's identity (ptxcache.pgo), the same in every run.
mode, out_path = sys.argv[1], os.environ["LLM_OUT"]
layers = int(os.environ.get("LLM_LAYERS", "16"))
lens = [int(x) for x in os.environ.get("LLM_LENS", "128,256,384").split(",")]
batch, train_len = 4, int(os.environ.get("LLM_TRAIN_LEN", "256"))
# "infer", "train" or both: the inference lengths, the training step.
phases_wanted = os.environ.get("LLM_PHASES", "infer,train").split(",")
dev = "cuda"
cfg = LlamaConfig(vocab_size=32000, hidden_size=1024, intermediate_size=2816,
                  num_hidden_layers=layers, num_attention_heads=16, num_key_value_heads=8,
                  max_position_embeddings=2048)
torch.manual_seed(0)
with torch.device(dev):
    model = LlamaForCausalLM(cfg)
model = model.to(torch.bfloat16)
g = torch.Generator(device=dev).manual_seed(1)
ids = {n: torch.randint(0, cfg.vocab_size, (batch, n), device=dev, generator=g) for n in lens}
tr = torch.randint(0, cfg.vocab_size, (batch, train_len), device=dev, generator=g)
compiled = torch.compile(model, mode=None if mode == "default" else mode)
# What Inductor's R-block scaling (CachingAutotuner._dynamic_scale_rblock)
# added in this process: configs timed again at run time.
import torch._inductor.runtime.triton_heuristics as th
scaled = {"calls": 0, "added": 0}
_scale = getattr(th.CachingAutotuner, "_dynamic_scale_rblock", None)
def _counted_scale(self):
    before = len(self.compile_results or [])
    r = _scale(self)
    scaled["calls"] += 1
    scaled["added"] += len(self.compile_results or []) - before
    return r
if _scale is not None:
    th.CachingAutotuner._dynamic_scale_rblock = _counted_scale
else:
    scaled = None
# The config each kernel ran with, noted at its launches (a warm output
# that differs from its producer's: which kernels ran another config?).
# At run(), not __init__: a warm process's autotuners come unpickled from
# Inductor's bundle, and __init__ never runs for them.
ran, seen = {}, set()
_run = th.CachingAutotuner.run
def _noted_run(self, *a, **k):
    r = _run(self, *a, **k)
    if id(self) in seen:        # its first launch chose its config
        return r
    seen.add(id(self))
    try:
        name = (getattr(self, "inductor_meta", None) or {}).get("kernel_name") or self.fn.__name__
        ls = getattr(self, "launchers", None) or []
        ran.setdefault(name, set()).add(" | ".join(sorted(str(getattr(l, "config", "?")) for l in ls)))
    except Exception:
        pass
    return r
th.CachingAutotuner.run = _noted_run
# The kernels this process timed its configs of (a warm process that times
# again may choose another config, and a reduction's bits with it).
benchmarked = []
_bench = getattr(th.CachingAutotuner, "benchmark_all_configs", None)
def _noted_bench(self, *a, **k):
    benchmarked.append((getattr(self, "inductor_meta", None) or {}).get("kernel_name")
                       or getattr(self.fn, "__name__", "?"))
    return _bench(self, *a, **k)
if _bench is not None:
    th.CachingAutotuner.benchmark_all_configs = _noted_bench
def kernel_configs():
    return {k: sorted(v) for k, v in ran.items()}
prof = None
if os.environ.get("TC_PROFILE") == "1":
    import cProfile
    prof = cProfile.Profile()
from torch._dynamo.utils import counters
phases, outs = [], []
torch.cuda.synchronize()
t_init = time.time()
t0 = time.time()
if prof:
    prof.enable()
model.eval()
with torch.no_grad():
    for n in (lens if "infer" in phases_wanted else []):
        ta = time.time()
        logits = compiled(input_ids=ids[n], use_cache=False).logits
        torch.cuda.synchronize()
        phases.append({"phase": "infer%d" % n, "s": time.time() - ta,
                       "unique_graphs": counters["stats"].get("unique_graphs", 0)})
        outs.append(logits)
    # The first length again, now through the dynamic graph (the newest of
    # the frame's entries, checked first): what a process given the PGO
    # profile computes for it from the start.
    if "infer" not in phases_wanted or len(lens) < 2:
        pass
    else:
      ta = time.time()
      logits = compiled(input_ids=ids[lens[0]], use_cache=False).logits
      torch.cuda.synchronize()
      phases.append({"phase": "again%d" % lens[0], "s": time.time() - ta,
                     "unique_graphs": counters["stats"].get("unique_graphs", 0)})
      outs.append(logits)
loss = None
if "train" in phases_wanted:
    model.train()
    ta = time.time()
    loss = compiled(input_ids=tr, labels=tr, use_cache=False).loss
    loss.backward()
    torch.cuda.synchronize()
    phases.append({"phase": "train%d" % train_len, "s": time.time() - ta,
                   "unique_graphs": counters["stats"].get("unique_graphs", 0)})
t1 = time.time()
if prof:
    prof.disable()
    prof.dump_stats(out_path + ".prof")
def train_hash(loss):
    h = hashlib.sha256(loss.detach().float().cpu().numpy().tobytes())
    for p in model.parameters():
        if p.grad is not None:
            h.update(p.grad.float().cpu().numpy().tobytes())
    return h.hexdigest()
hashes = {}
for ph, o in zip(phases, outs):
    hashes[ph["phase"]] = hashlib.sha256(o.float().cpu().numpy().tobytes()).hexdigest()
if loss is not None:
    hashes["train%d" % train_len] = train_hash(loss)
# The training step twice more, outside the timed span, on the same
# inputs and weights: where this process's own repeats differ, its kernels
# are not deterministic (atomic adds), whatever any cache gave it.
again = []
for _ in range(2 if loss is not None else 0):
    model.zero_grad(set_to_none=True)
    loss = compiled(input_ids=tr, labels=tr, use_cache=False).loss
    loss.backward()
    torch.cuda.synchronize()
    again.append(train_hash(loss))
res = {"compile_s": t1 - t0, "import_s": t_init - t_start, "phases": phases, "hashes": hashes,
       "counters": {k: dict(v) for k, v in counters.items()},
       "torch": torch.__version__, "transformers": transformers.__version__,
       "attn": getattr(model.config, "_attn_implementation", None),
       "params": sum(p.numel() for p in model.parameters()),
       "job_id": getattr(torch.compiler.config, "job_id", None),
       "train_len": train_len, "train_again": again, "scaled": scaled,
       "kernel_configs": kernel_configs(), "benchmarked": benchmarked}
try:
    from torch._dynamo.utils import compilation_time_metrics as ctm
    res["stages"] = {k: round(sum(v), 4) for k, v in ctm.items()}
except Exception as e:
    res["stages"] = repr(e)
if "ptxcache" in sys.modules:
    import ptxcache.artifacts, ptxcache.torch, ptxcache.inductor
    res["ptxcache"] = {"state": ptxcache.torch.state(), "counts": ptxcache.artifacts.store().counts,
                       "layers": ptxcache.artifacts.store().layers(),
                       "installed": ptxcache.inductor.installed()}
    try:
        import ptxcache.triton_key as ptk, ptxcache.autotune as pat
        res["ptxcache"]["triton_key"] = dict(ptk.counts)
        res["ptxcache"]["autotune"] = dict(pat.counts)
    except Exception:
        pass
with open(out_path, "w") as f:
    json.dump(res, f, default=str)
'''

# What a profile's breakdown names: (label, file suffix, function name).
BREAKDOWN = [
    ("whole first calls (OptimizedModule.__call__ ... backward)", None, None),
    ("Dynamo: _compile (all frames)", "_dynamo/convert_frame.py", "_compile"),
    ("Dynamo: tracing (InstructionTranslator.run)", "_dynamo/symbolic_convert.py", "run"),
    ("Dynamo: guards (CheckFunctionManager.__init__)", "_dynamo/guards.py", "__init__"),
    ("backend: OutputGraph.call_user_compiler", "_dynamo/output_graph.py", "call_user_compiler"),
    ("AOTAutograd: autograd_cache_key", "_aot_autograd/autograd_cache.py", "autograd_cache_key"),
    ("AOTAutograd: AOTAutogradCache._lookup", "_aot_autograd/autograd_cache.py", "_lookup"),
    ("AOTAutograd: AOTAutogradCache.try_load", "_aot_autograd/autograd_cache.py", "try_load"),
    ("FX graph: FxGraphCache._lookup_graph", "_inductor/codecache.py", "_lookup_graph"),
    ("FX graph: FxGraphCache.load_with_key", "_inductor/codecache.py", "load_with_key"),
    ("FX graph: iterate_over_candidates", "_inductor/codecache.py", "iterate_over_candidates"),
    ("output code: PyCodeCache.load_by_key_path", "_inductor/codecache.py", "load_by_key_path"),
    ("Triton bundle: TritonBundler.read_and_emit", "_inductor/triton_bundler.py", "read_and_emit"),
    ("kernels: CachingAutotuner.precompile", "runtime/triton_heuristics.py", "precompile"),
    ("kernels: StaticAutotunerFuture / warm_precompile", "_inductor/async_compile.py", "warm_precompile"),
    ("Triton: triton_key", "runtime/cache.py", "triton_key"),
    ("package: ArtifactStore.get_many", "ptxcache/artifacts.py", "get_many"),
    ("package: ArtifactStore.put", "ptxcache/artifacts.py", "put"),
    ("package: Client.call", "ptxcache/client.py", "call"),
    ("package: triton_key._lookup", "ptxcache/triton_key.py", "_lookup"),
    ("package: Triton backend (ptxcache/triton.py), all", "ptxcache/triton.py", "*"),
    ("RemoteCache.get (PyTorch's, with decode)", "_inductor/remote_cache.py", "get"),
    ("JSON decode (json.loads)", "json/__init__.py", "loads"),
    ("base64 decode", "base64.py", "b64decode"),
]


def breakdown(path):
    """{label: cumulative seconds} of BREAKDOWN's functions in a profile,
    the callees of AOTAutogradCache._lookup and FxGraphCache._lookup_graph,
    and the top of the cumulative list."""
    st = pstats.Stats(path)
    out = {}
    total = max((v[3] for v in st.stats.values()), default=0.0)
    for label, suffix, name in BREAKDOWN:
        if suffix is None:
            out[label] = round(total, 3)
            continue
        s = 0.0
        for (f, _line, fn), v in st.stats.items():
            if f.endswith(suffix) and (fn == name or name == "*" and not fn.startswith("<")):
                s += v[3] if name != "*" else v[2]
        out[label] = round(s, 3)
    text = io.StringIO()
    s2 = pstats.Stats(path, stream=text)
    s2.sort_stats("cumulative")
    for pat in ("autograd_cache.py:.*\\(_lookup\\)", "remote_cache.py:.*\\(get\\)",
                "autograd_cache.py:.*\\(try_load\\)", "codecache.py:.*\\(_lookup_graph\\)"):
        s2.print_callees(pat)
    s2.print_stats(60)
    return out, text.getvalue()[-30000:]


def start(work, mode, env, tag):
    out = os.path.join(work, "llm-%s-%d.json" % (tag, time.time_ns()))
    script = os.path.join(work, "llm_child.py")
    if not os.path.exists(script):
        with open(script, "w") as f:
            f.write(CHILD)
    p = subprocess.Popen([sys.executable, script, mode], env=dict(env, LLM_OUT=out),
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return p, out, time.time()


def run(work, mode, env, tag, timeout, d=None):
    before = d.stats() if d else {}
    p, out, t0 = start(work, mode, env, tag)
    r = tc.finish_child(p, out, t0, timeout)
    if d:
        after = d.stats()
        r["daemon_delta"] = {k: after.get(k, 0) - before.get(k, 0) for k in tc.DELTA if k in after}
    tc.log("  %-9s %s" % (tag, line(r)))
    return r


def graphs(r):
    c = r.get("counters", {})
    return c.get("stats", {}).get("unique_graphs")


def line(r):
    if "compile_s" not in r:
        return r.get("error", "?") + " " + r.get("tail", "")[-1500:]
    c = r.get("counters", {})
    ind, aot = c.get("inductor", {}), c.get("aot_autograd", {})
    lay = r.get("ptxcache", {}).get("layers", {})
    train = r.get("hashes", {}).get("train%d" % r.get("train_len", 0))
    again = r.get("train_again", [])
    steady = "-" if not again else "same" if set(again) == {train} else "differ"
    return ("%.1f s (phases %s; graphs %s; fx hit/miss %s/%s; aot hit %s; job %s; requests %s; "
            "MB in %.1f; coordesc %s; scaled %s; recheck %s; training step repeated: %s; "
            "kernels timed %s)"
            % (r["compile_s"], " ".join("%.1f" % p["s"] for p in r["phases"]),
               graphs(r), ind.get("fxgraph_cache_hit", 0), ind.get("fxgraph_cache_miss", 0),
               aot.get("autograd_cache_hit", 0), r.get("job_id"),
               int(sum(v.get("gets", 0) + v.get("puts", 0) for v in lay.values())),
               sum(v.get("bytes_in", 0) for v in lay.values()) / 1e6,
               ind.get("coordesc_tuning_bench", 0), r.get("scaled"),
               r.get("ptxcache", {}).get("autotune"), steady, len(r.get("benchmarked", []))))


def env_for(work, tools, tag, args, dirs=None, daemon=None, pth=None, **extra):
    env, cdir = tc.child_env(work, tools, tag, dirs=dirs, daemon=daemon, pth=pth)
    env.update(LLM_LAYERS=str(args.layers), LLM_LENS=args.lens, LLM_TRAIN_LEN=str(args.train_len),
               LLM_PHASES=args.phases)
    env.update(extra)
    return env, cdir


def save(args, results):
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(results, f, indent=1, default=str)
    with open(os.path.join(args.out, "results.md"), "w") as f:
        f.write(table(results))


def together(work, mode, jobs, t):
    """Start every (tag, env, daemon) of jobs at once; {tag: result}."""
    before = {tag: d.stats() for tag, _env, d in jobs if d}
    started = [(tag, d) + start(work, mode, env, tag) for tag, env, d in jobs]
    out = {}
    for tag, d, p, path, t0 in started:
        r = out[tag] = tc.finish_child(p, path, t0, t)
        if d:
            after = d.stats()
            r["daemon_delta"] = {k: after.get(k, 0) - before[tag].get(k, 0)
                                 for k in tc.DELTA if k in after}
        tc.log("  %-9s %s" % (tag, line(r)))
    return out


def own_env(work, tools, args, tag):
    """A process with the installed wheel and PTXCACHE_TORCH=1 alone: the
    first such process starts the user's own daemon (autostart)."""
    env, _ = env_for(work, tools, tag, args, PTXCACHE_TORCH="1",
                     XDG_CACHE_HOME=os.path.join(work, "own-xdg"),
                     XDG_RUNTIME_DIR=os.path.join(work, "own-run"))
    os.makedirs(env["XDG_RUNTIME_DIR"], mode=0o700, exist_ok=True)
    return env


def series(args, tools, work, results, deadline):
    """The cold runs (at once: their times are not compared), then rounds
    of the warm runs against local, then the profiles. With --resume,
    the state-MODE.json that an earlier call on this machine left in
    --work gives that call's cold directories, first daemon, Redis and
    cold results: the cold runs it made are not made again, so they can
    be split over calls (--cold-runs) where one call's limit is too short
    for them at once."""
    mode = args.mode
    res = results.setdefault(mode, {})
    t = args.timeout
    runs = set(args.runs.split(","))
    pth = tc.pth_base(work, tools)
    state_path = os.path.join(work, "state-%s.json" % mode)
    d1_name = "d1-llm-%s" % mode.replace("-", "")
    redis = d1 = d3 = None
    state = {}
    if args.resume and os.path.exists(state_path):
        with open(state_path) as f:
            state = json.load(f)
        res["resumed"] = state["dirs"]
    have = state.get("runs", {})        # cold runs made by earlier calls: tag -> result
    res.update(have)
    wanted = set(args.cold_runs.split(",")) | ({"own-first"} if "own" in runs else set())
    todo = [k for k in ("cold", "pkg-cold", "own-first") if k in wanted and k not in have]
    # With --work, Redis saves its data there when stopped, for a resumed
    # call's pkg-l2.
    redis_dir = os.path.join(work, "redis-" + mode) if args.work else tempfile.mkdtemp(dir=work)
    secret = os.path.join(work, "l2-secret-" + mode)
    try:
        env, dirs = env_for(work, tools, "cold", args, dirs=state.get("dirs"))
        state["dirs"] = dirs
        jobs = [("cold", env, None)] if "cold" in todo else []
        if "pkg-cold" in todo or "pkg-cold" in have:
            os.makedirs(redis_dir, exist_ok=True)
            redis = tc.Redis(tools, redis_dir, keep=bool(args.work))
        if "pkg-cold" in todo:
            if not os.path.exists(secret):
                with open(secret, "w") as f:
                    f.write(os.urandom(16).hex())
            d1 = tc.Daemon(tools, work, d1_name, redis, secret,
                           reuse=os.path.isdir(os.path.join(work, d1_name)))
            jobs.append(("pkg-cold", env_for(work, tools, "pkgcold", args, daemon=d1, pth=pth)[0], d1))
        elif "pkg-cold" in have:
            d1 = tc.Daemon(tools, work, d1_name, reuse=True)
            if not os.path.exists(os.path.join(redis_dir, "dump.rdb")):
                runs.discard("pkg-l2")      # Redis's data was not saved
        else:
            runs -= {"pkg-warm", "nopgo", "pkg-l2", "profile"}
        if "own-first" in todo:
            jobs.append(("own-first", own_env(work, tools, args, "ownfirst"), None))
        if "four" in runs:
            d3 = tc.Daemon(tools, work, "d3-llm-%s-%d" % (mode.replace("-", ""), time.time_ns()))
            jobs += [("four%d" % i, env_for(work, tools, "four%d" % i, args, daemon=d3, pth=pth)[0], None)
                     for i in range(4)]
        with open(state_path, "w") as f:
            json.dump(state, f)
        made = together(work, mode, jobs, max(t, args.cold_timeout))
        res.update(made)
        if "four" in runs:
            four(res, d3)
        state["runs"] = dict(have, **{k: v for k, v in made.items() if k in todo and "compile_s" in v})
        with open(state_path, "w") as f:
            json.dump(state, f)
        if "pkg-cold" in made:
            # Each FX graph entry's size (issue 36 asks for one over 8 MB).
            res["fx_entries"] = subprocess.run(
                [tools.cli, "--socket", d1.sock, "ls", "--namespace", "inductor-fx"],
                capture_output=True, text=True).stdout[-4000:]
            settle(d1)
        # The anchor's cold run, and the producer of each warm run asked for.
        needed = ({"cold"} | ({"pkg-cold"} if runs & {"pkg-warm", "nopgo", "pkg-l2", "profile"} else set())
                  | ({"own-first"} if "own" in runs else set()))
        if not needed <= set(state["runs"]):
            res["cut"] = "the cold runs are not all made yet: %s" % sorted(state["runs"])
            return
        save(args, results)
        for i in range(args.repeat):
            if time.time() > deadline:
                res["cut"] = "after %d rounds: out of time" % i
                break
            env, _ = env_for(work, tools, "local", args, dirs=dirs)
            res.setdefault("local", []).append(run(work, mode, env, "local", t))
            if "pkg-warm" in runs:
                env, _ = env_for(work, tools, "pkgwarm", args, daemon=d1, pth=pth)
                res.setdefault("pkg-warm", []).append(run(work, mode, env, "pkg-warm", t, d1))
            if "nopgo" in runs and i < args.nopgo_rounds:
                env, _ = env_for(work, tools, "nopgo", args, daemon=d1, pth=pth, PTXCACHE_PGO_JOB_ID="0")
                res.setdefault("nopgo", []).append(run(work, mode, env, "nopgo", t, d1))
            if "pkg-l2" in runs:
                d2 = tc.Daemon(tools, work, "d2-llm-%d" % i, redis, secret)
                try:
                    env, _ = env_for(work, tools, "pkgl2", args, daemon=d2, pth=pth)
                    r = run(work, mode, env, "pkg-l2", t, d2)
                    r["l2"] = {k: v for k, v in d2.stats().items() if k.startswith("l2_")}
                    res.setdefault("pkg-l2", []).append(r)
                finally:
                    d2.stop()
            if "own" in runs:
                res.setdefault("own", []).append(run(work, mode, own_env(work, tools, args, "own"), "own", t))
            save(args, results)
        if "profile" in runs and time.time() < deadline + 120:
            profiles(args, tools, work, res, mode, dirs, d1, pth, t)
    finally:
        for x in (d1, d3, redis):
            if x:
                x.stop()
    save(args, results)


def settle(d, most=60.0):
    """Wait until the daemon's background publishing to Redis is done:
    its tier writes unchanged for 2 s (at most `most` seconds)."""
    end, last, since = time.time() + most, None, time.time()
    while time.time() < end:
        n = d.stats().get("l2_writes")
        if n != last:
            last, since = n, time.time()
        elif time.time() - since >= 2.0:
            return
        time.sleep(0.25)


def four(res, d3):
    """The four processes at once on a cold daemon: how many graphs they
    compiled together, against the graphs one of them needed."""
    s = d3.stats()
    runs = [res.pop("four%d" % i) for i in range(4)]
    res["four"] = {"runs": runs, "daemon": {k: v for k, v in s.items() if k.startswith("artifact")},
                   "graph_compiles": sum(r.get("counters", {}).get("inductor", {})
                                         .get("fxgraph_cache_miss", 0) for r in runs),
                   "graphs": sum(runs[0].get("counters", {}).get("inductor", {})
                                 .get(k, 0) for k in ("fxgraph_cache_hit", "fxgraph_cache_miss"))}
    tc.log("  four      %s; graph compiles %s (graphs %s), waits %s"
           % (" ".join(tc.fmt(r) for r in runs), res["four"]["graph_compiles"],
              res["four"]["graphs"], s.get("artifact_waits")))


def profiles(args, tools, work, res, mode, dirs, d1, pth, t):
    """One local and one pkg-warm process under cProfile: the breakdown."""
    for tag, d in (("prof-local", None), ("prof-pkg", d1)):
        if d is None:
            env, _ = env_for(work, tools, "proflocal", args, dirs=dirs, TC_PROFILE="1")
        else:
            env, _ = env_for(work, tools, "profpkg", args, daemon=d1, pth=pth, TC_PROFILE="1")
        p, out, t0 = start(work, mode, env, tag)
        r = tc.finish_child(p, out, t0, t)
        if os.path.exists(out + ".prof"):
            shutil.copy(out + ".prof", os.path.join(work, "profiles", tag + "-" + mode + ".prof"))
            try:
                r["breakdown"], r["profile"] = breakdown(out + ".prof")
            except Exception as e:
                r["breakdown"] = repr(e)
        tc.log("  %-9s %s" % (tag, line(r)))
        tc.log("    %s" % json.dumps(r.get("breakdown")))
        res[tag] = r


def _times(v):
    rs = v if isinstance(v, list) else [v] if isinstance(v, dict) else []
    return [r["compile_s"] for r in rs if "compile_s" in r]


def same(r, ref):
    """Which of r's phases equal ref's output from the same graph: the
    same phase, or for the first length, ref's run of it again after the
    others (the dynamic graph, which a process given the PGO profile runs
    from its first call)."""
    if not r or not ref or "hashes" not in r or "hashes" not in ref:
        return "-"
    h, rh = r["hashes"], ref["hashes"]
    eq = [k for k in h if h[k] == rh.get(k) or
          k.startswith("infer") and h[k] == rh.get("again" + k[len("infer"):])]
    return "all" if len(eq) == len(h) else ("%s of %d" % (",".join(eq) or "none", len(h)))


# Each run's producer: the process whose directories or daemon it found warm.
PRODUCER = {"local": "cold", "pkg-warm": "pkg-cold", "nopgo": "pkg-cold", "pkg-l2": "pkg-cold",
            "own": "own-first", "prof-local": "cold", "prof-pkg": "pkg-cold"}


def config_diff(r, ref):
    """The kernels r ran with another launcher config than ref ran them
    with (names both ran): "n of m: names..."."""
    a, b = (r or {}).get("kernel_configs"), (ref or {}).get("kernel_configs")
    if not a or not b:
        return "-"
    both = sorted(set(a) & set(b))
    other = [k for k in both if a[k] != b[k]]
    return "%d of %d%s" % (len(other), len(both), (": " + ", ".join(other[:4])) if other else "")


def table(results):
    rows = ["| mode | run | times (s) | median | / local | graphs (Dynamo) | FX hit/miss | "
            "requests | MB from the daemon (FX graph) | outputs = cold's | = pkg-cold's | "
            "= its producer's | kernels on another config than its producer |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for mode, res in results.items():
        if not isinstance(res, dict) or "local" not in res:
            continue
        loc = tc.median(_times(res.get("local")))
        for k in ("cold", "pkg-cold", "own-first", "local", "pkg-warm", "nopgo", "pkg-l2", "own",
                  "prof-local", "prof-pkg"):
            v = res.get(k)
            if not v:
                continue
            rs = v if isinstance(v, list) else [v]
            ts = _times(v)
            m = tc.median(ts)
            r0 = rs[-1]
            c = r0.get("counters", {}).get("inductor", {})
            lay = r0.get("ptxcache", {}).get("layers", {})
            req = int(sum(x.get("gets", 0) + x.get("puts", 0) for x in lay.values())) if lay else "-"
            mb = ("%.1f (%.1f)" % (sum(x.get("bytes_in", 0) for x in lay.values()) / 1e6,
                                   lay.get("inductor-fx", {}).get("bytes_in", 0) / 1e6) if lay else "-")
            prod = res.get(PRODUCER.get(k, ""))
            rows.append("| %s | %s | %s | %s | %s | %s | %s/%s | %s | %s | %s | %s | %s | %s |" % (
                mode, k, ", ".join("%.2f" % x for x in ts) or r0.get("error", "-"),
                "%.2f" % m if m is not None else "-",
                "%.2fx" % (m / loc) if m is not None and loc else "-",
                ", ".join(str(graphs(x)) for x in rs), c.get("fxgraph_cache_hit", 0),
                c.get("fxgraph_cache_miss", 0), req, mb,
                "; ".join(same(x, res.get("cold")) for x in rs),
                "; ".join(same(x, res.get("pkg-cold")) for x in rs),
                "; ".join(same(x, prod) for x in rs), "; ".join(config_diff(x, prod) for x in rs)))
        f = res.get("four")
        if f:
            rows.append("| %s | four at once | %s | | | | compiles %s (graphs %s) | | | %s | |" % (
                mode, ", ".join(tc.fmt(r) for r in f["runs"]), f["graph_compiles"], f["graphs"],
                "; ".join(same(x, res.get("cold")) for x in f["runs"])))
    return "\n".join(rows) + "\n"


def dump_sources(out):
    """PyTorch's files this work reads, and where job_id is used, to OUT."""
    import importlib.util
    root = os.path.dirname(importlib.util.find_spec("torch").origin)
    r = subprocess.run(["grep", "-rn", "-e", "job_id", "-e", "TORCH_COMPILE_JOB_ID", "-e",
                        "STICKY_PGO", "--include=*.py", root], capture_output=True, text=True)
    with open(os.path.join(out, "job_id_grep.txt"), "w") as f:
        f.write("\n".join(x for x in r.stdout.splitlines() if "/test" not in x))
    files = ["_dynamo/pgo.py", "compiler/config.py", "_dynamo/aot_compile.py", "_dynamo/package.py",
             "_dynamo/precompile_context.py", "_dynamo/guards.py", "_dynamo/eval_frame.py",
             "_dynamo/convert_frame.py", "compiler/__init__.py", "_functorch/_aot_autograd/autograd_cache.py",
             "_inductor/codecache.py", "_inductor/remote_cache.py", "_inductor/output_code.py",
             "_dynamo/aot_compile_types.py", "_utils_internal.py", "_dynamo/config.py",
             "_inductor/runtime/triton_heuristics.py", "_inductor/runtime/autotune_cache.py",
             "_inductor/runtime/coordinate_descent_tuner.py"]
    with tarfile.open(os.path.join(out, "torch-src.tar.gz"), "w:gz") as t:
        for f in files:
            p = os.path.join(root, f)
            if os.path.exists(p):
                t.add(p, arcname="torch/" + f)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bundle", help="the tar.xz tests/gpu/carry_torch.sh made")
    ap.add_argument("--bin", help="a directory with ptxcached, ptxcache (and redis/) instead")
    ap.add_argument("--python", help="the package's directory (python/) to use instead of the bundle's")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--mode", default="default")
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--lens", default="128,256,384")
    ap.add_argument("--train-len", type=int, default=None,
                    help="the training step's length (default: the middle of --lens, so that "
                         "one length given is one shape)")
    ap.add_argument("--phases", default="infer,train", help="infer, train, or both")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--runs", default="pkg-warm,pkg-l2",
                    help="of pkg-warm, pkg-l2, nopgo, own (needs --wheel), four, profile")
    ap.add_argument("--wheel", help="the wheel (make wheel) that own runs pip install")
    ap.add_argument("--work", help="a directory kept for a later call's --resume (else a temporary one)")
    ap.add_argument("--resume", action="store_true",
                    help="reuse the cold directories and first daemon of an earlier call's --work")
    ap.add_argument("--cold-timeout", type=int, default=300, help="for the runs started at once")
    ap.add_argument("--cold-runs", default="cold,pkg-cold",
                    help="which of cold and pkg-cold this call makes (a resumed call skips those made)")
    ap.add_argument("--nopgo-rounds", type=int, default=1, help="rounds that run nopgo too")
    ap.add_argument("--timeout", type=int, default=240)
    ap.add_argument("--budget", type=int, default=480, help="no new round after this many seconds")
    ap.add_argument("--sources", action="store_true")
    ap.add_argument("--report", nargs="*", help="print the table of these results.json")
    args = ap.parse_args()
    if args.train_len is None:
        lens = [int(x) for x in args.lens.split(",")]
        args.train_len = lens[len(lens) // 2]
    if args.report:
        merged = {}
        for p in args.report:
            with open(p if p.endswith(".json") else os.path.join(p, "results.json")) as f:
                for k, v in json.load(f).items():
                    merged[k if k not in merged else "%s (%s)" % (k, p)] = v
        sys.stdout.write(table(merged))
        return 0
    t_begin = time.time()
    os.makedirs(args.out, exist_ok=True)
    if args.sources:
        try:
            dump_sources(args.out)
        except Exception as e:
            tc.log("sources: %r" % e)
    if args.wheel:
        import glob
        import wheel_first_minute
        if not wheel_first_minute.install(sorted(glob.glob(args.wheel))[-1]):
            return 1
    work = args.work or tempfile.mkdtemp(prefix="llm-cache-")
    os.makedirs(os.path.join(work, "profiles"), exist_ok=True)
    tools = tc.Tools(args.bundle, args.bin or os.path.join(tc.ROOT, "gpu-carry-py"), work)
    if args.python:
        tools.python_dir = os.path.abspath(args.python)
    results = {}
    try:
        series(args, tools, work, results, t_begin + args.budget)
    except Exception as e:
        results.setdefault(args.mode, {})["error"] = repr(e)
        tc.log("failed: %r" % e)
    save(args, results)
    profs = os.listdir(os.path.join(work, "profiles"))
    if profs:
        with tarfile.open(os.path.join(args.out, "profiles.tar.gz"), "w:gz") as t:
            for p in profs:
                t.add(os.path.join(work, "profiles", p), arcname=p)
    sys.stdout.write(table(results))
    for p in tc._PTH_MADE:
        os.unlink(p)
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
