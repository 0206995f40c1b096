#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Proof of portable -lineinfo cubins (daemon/cubin_debug.c) on a real GPU:
torch.compile (Inductor, max-autotune-no-cudagraphs) and JAX through the
ptxas front, each run a fresh process with fresh cache directories, as
every new pod, job or user has. Not part of `make test` (CI has no GPU);
see tests/gpu/README.md.

    python3 tests/gpu/lineinfo.py --bin DIR --out OUTDIR

Inductor, five fresh processes: (1) the real ptxas; (2) the front, cold
daemon; (3) the front, warm daemon: every cubin from the cache (0 new
compiles), outputs bit-identical to (1), and each cubin the front wrote
byte-identical to what the real ptxas writes for that run's own PTX and
files. (4) and (5) the same under two users' default Inductor
directories (/tmp/torchinductor_alice, /tmp/torchinductor_carol).
JAX: twice with XLA_FLAGS=--xla_gpu_enable_libnvptxcompiler=false and the
front first on PATH (the second all hits), then twice with
--xla_gpu_cuda_data_dir as well, with the PTX of any miss compared.

Every ptxas call goes through a logging wrapper that keeps the PTX and the
cubin, so that the real ptxas can be run on the same input afterwards.
Prints one line per figure and writes summary.json to OUTDIR.
"""
import argparse
import concurrent.futures
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

WRAPPER = r'''#!/usr/bin/env python3
import json, os, shutil, subprocess, sys
args = sys.argv[1:]
target = os.environ["LI_TARGET"]
cmd = ([target, "ptxas"] if os.environ.get("LI_FRONT") == "1" else [target]) + args
if "--version" in args or "-V" in args:
    os.execv(cmd[0], cmd)
log = os.environ["LI_LOG"]
os.makedirs(log, exist_ok=True)
n = "%d-%d" % (os.getpid(), len(os.listdir(log)))
if os.environ.get("LI_FRONT") == "1":
    # Would this call hit, and if not, which key component differs?
    e = subprocess.run([target, "explain", "--json", "--ptxas"] + args, capture_output=True)
    with open(os.path.join(log, n + ".explain"), "wb") as f:
        f.write(e.stdout if e.returncode == 0 else b'{"error": %r}' % e.stderr[-300:])
r = subprocess.run(cmd)
out = None
for i, a in enumerate(args):
    if a in ("-o", "--output-file") and i + 1 < len(args):
        out = args[i + 1]
    elif a.startswith("--output-file="):
        out = a.split("=", 1)[1]
# the input: Triton's ends in .ptx, XLA's is a bare temporary file
ptx = [a for a in args if not a.startswith("-") and a != out and os.path.isfile(a)]
if ptx:
    shutil.copy(ptx[0], os.path.join(log, n + ".ptx"))
if out and os.path.exists(out):
    shutil.copy(out, os.path.join(log, n + ".cubin"))
with open(os.path.join(log, n + ".json"), "w") as f:
    json.dump({"args": args, "cwd": os.getcwd(), "rc": r.returncode,
               "input": ptx[0] if ptx else None, "output": out}, f)
sys.exit(r.returncode)
'''

MODEL = r'''
import os, sys, torch, torch.nn as nn, torch.nn.functional as F, time
torch.manual_seed(0)
if os.environ.get("LI_DET") == "1":
    # Inductor's deterministic mode: no benchmark-driven choice that could
    # change numerics between processes (kernel configs are fixed).
    torch.use_deterministic_algorithms(True)
    import torch._inductor.config as ic
    ic.deterministic = True
class Block(nn.Module):
    def __init__(s, d=256, h=4):
        super().__init__()
        s.h = h
        s.ln1, s.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        s.qkv, s.o = nn.Linear(d, 3 * d), nn.Linear(d, d)
        s.fc1, s.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
    def forward(s, x):
        b, t, d = x.shape
        q, k, v = s.qkv(s.ln1(x)).split(d, dim=-1)
        q, k, v = (y.view(b, t, s.h, d // s.h).transpose(1, 2) for y in (q, k, v))
        a = torch.softmax(q @ k.transpose(-1, -2) / (d // s.h) ** 0.5, dim=-1) @ v
        x = x + s.o(a.transpose(1, 2).reshape(b, t, d))
        return x + s.fc2(F.gelu(s.fc1(s.ln2(x))))
m = Block().cuda()
x = torch.randn(8, 128, 256, device="cuda")
t0 = time.time()
f = torch.compile(m, mode=sys.argv[2] if sys.argv[2] != "default" else None)
with torch.no_grad():
    y = f(x)
torch.cuda.synchronize()
print("compile_s %.1f" % (time.time() - t0))
torch.save(y.cpu(), sys.argv[1])
'''

JAXPROG = r'''
import sys, jax, jax.numpy as jnp
@jax.jit
def f(x, w):
    h = jnp.tanh(x @ w)
    return jax.nn.softmax(h, axis=-1).sum(axis=0) + jnp.cumsum(x, axis=1).mean()
x = jnp.arange(512 * 256, dtype=jnp.float32).reshape(512, 256) / 1e5
w = jnp.ones((256, 384), dtype=jnp.float32) / 100
print("jax_sum %.6f" % float(f(x, w).sum()))
'''


def sh(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


class Daemon:
    def __init__(self, bindir, work, name, ptxas, workers):
        self.cli = os.path.join(bindir, "ptxcache")
        self.sock = os.path.join(work, name + ".sock")
        self.env = dict(os.environ, PTXCACHE_SOCKET=self.sock)
        self.proc = subprocess.Popen(
            [os.path.join(bindir, "ptxcached"), "--socket", self.sock, "--cache-dir",
             os.path.join(work, name + "-cache"), "--workers", str(workers), "--ptxas", ptxas,
             "--log-level", "warning"], stdout=open(os.path.join(work, name + ".log"), "w"),
            stderr=subprocess.STDOUT)
        for _ in range(600):
            if sh([self.cli, "ping"], env=self.env).returncode == 0:
                return
            time.sleep(0.1)
        raise SystemExit("daemon %s did not start" % name)

    def stats(self):
        return json.loads(sh([self.cli, "stats", "--json"], env=self.env, check=True).stdout)

    def stop(self):
        self.proc.terminate()
        self.proc.wait(60)


def wrapper_dir(work, name, target, front, log, real):
    d = os.path.join(work, "bin-" + name)
    os.makedirs(d, exist_ok=True)
    p = os.path.join(d, "ptxas")
    with open(p, "w") as f:
        f.write(WRAPPER)
    os.chmod(p, 0o755)
    env = {"LI_TARGET": target, "LI_FRONT": "1" if front else "0", "LI_LOG": log,
           "PTXCACHE_PTXAS": real}
    return d, p, env


def check_against_real(real, log):
    """Each logged call: the real ptxas on the same PTX, same arguments,
    same source files (still in place): byte-identical to what was served?"""
    calls = []
    for j in sorted(glob.glob(os.path.join(log, "*.json"))):
        c = json.load(open(j))
        stem = j[:-5]
        if c["rc"] == 0 and os.path.exists(stem + ".cubin") and os.path.exists(stem + ".ptx"):
            calls.append((c, stem))

    def one(item):
        c, stem = item
        tmp = tempfile.mkdtemp()
        inp, out = os.path.join(tmp, "in.ptx"), os.path.join(tmp, "out.cubin")
        shutil.copy(stem + ".ptx", inp)
        args = []
        skip = False
        for i, a in enumerate(c["args"]):
            if skip:
                skip = False
                continue
            if a == c["input"]:
                args.append(inp)
            elif a in ("-o", "--output-file"):
                args += [a, out]
                skip = True
            elif a.startswith("--output-file="):
                args.append("--output-file=" + out)
            else:
                args.append(a)
        r = subprocess.run([real] + args, capture_output=True, cwd=c["cwd"] if os.path.isdir(c["cwd"]) else tmp)
        ok = r.returncode == 0 and open(out, "rb").read() == open(stem + ".cubin", "rb").read()
        shutil.rmtree(tmp)
        return ok

    with concurrent.futures.ThreadPoolExecutor(16) as ex:
        res = list(ex.map(one, calls))
    return len(res), sum(res)


def explain_misses(log, earlier_logs):
    """The calls that missed, by the key component that differed from the
    nearest stored entry; for a different PTX, the first lines that differ
    from an earlier run's PTX of the same entry function."""
    by = {}
    diffs = []
    earlier = {}
    for lg in earlier_logs:
        for p in glob.glob(os.path.join(lg, "*.ptx")):
            t = open(p, "rb").read().decode(errors="replace")
            earlier.setdefault(entry_name(t), t)
    for e in glob.glob(os.path.join(log, "*.explain")):
        try:
            j = json.load(open(e))
        except ValueError:
            by["unreadable"] = by.get("unreadable", 0) + 1
            continue
        if j.get("cached"):
            continue
        near = j.get("nearest") or {}
        names = ",".join(sorted(x["name"] for x in near.get("differing", []))) or "no entry"
        by[names] = by.get(names, 0) + 1
        if len(diffs) < 3 and "asm_args" in names or names == "input_sha256" and not diffs:
            diffs.append({"differing": [(x["name"], str(x["stored"])[:160], str(x["requested"])[:160])
                                        for x in near.get("differing", [])
                                        if x["name"] != "input_sha256"],
                          "args": json.load(open(e[:-8] + ".json"))["args"]})
        ptx = e[:-8] + ".ptx"
        if "input_sha256" in names and os.path.exists(ptx) and len(diffs) < 5:
            t = open(ptx, "rb").read().decode(errors="replace")
            old = earlier.get(entry_name(t))
            if old is None:
                diffs.append({"entry": entry_name(t), "earlier": "none with this name"})
            else:
                keep = lambda x: [l for l in x.splitlines() if not l.lstrip().startswith((".loc", ".file", ".b8", "//"))]
                a, b = keep(old), keep(t)
                d = [("-" + x, "+" + y) for x, y in zip(a, b) if x != y][:4]
                diffs.append({"entry": entry_name(t), "lines": (len(a), len(b)), "diff": d})
    return by, diffs


def code_only(t):
    """The PTX without anything that names or depends on a source path
    (debug sections, .file, .loc and comments): what must match for a hit."""
    out, in_dbg = [], False
    for l in t.splitlines():
        x = l.split("//")[0].strip()
        if x.startswith(".section"):
            in_dbg = True
            continue
        if in_dbg:
            if x.startswith("}"):
                in_dbg = False
            continue
        if x and not x.startswith((".loc", ".file")):
            out.append(x)
    return "\n".join(out)


def gap_check(log, earlier_logs):
    """Misses whose code (code_only) equals a PTX of an earlier run: a miss
    the path normalisation should have turned into a hit."""
    seen = set()
    for lg in earlier_logs:
        for p in glob.glob(os.path.join(lg, "*.ptx")):
            seen.add(code_only(open(p, "rb").read().decode(errors="replace")))
    n = same = 0
    for e in glob.glob(os.path.join(log, "*.explain")):
        try:
            if json.load(open(e)).get("cached"):
                continue
        except ValueError:
            continue
        p = e[:-8] + ".ptx"
        if os.path.exists(p):
            n += 1
            same += code_only(open(p, "rb").read().decode(errors="replace")) in seen
    return n, same


def entry_name(t):
    i = t.find(".entry ")
    return t[i + 7:t.find("(", i)].strip() if i >= 0 else "?"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--skip-jax", action="store_true")
    ap.add_argument("--skip-inductor", action="store_true")
    o = ap.parse_args()
    bindir = os.path.abspath(o.bin)
    os.makedirs(o.out, exist_ok=True)
    work = tempfile.mkdtemp(prefix="li-")
    summary = {}
    import triton
    tptxas = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "ptxas")
    print("triton's ptxas:", tptxas, sh([tptxas, "--version"]).stdout.strip().splitlines()[-1])
    front = os.path.join(bindir, "ptxcache")

    if not o.skip_inductor:
        d = Daemon(bindir, work, "inductor", tptxas, 16)
        det = os.environ.get("LI_DET") == "1"
        runs = [("a default: real ptxas", False, None, "default"),
                ("b default: front, cold daemon", True, None, "default"),
                ("c default: front, warm daemon", True, None, "default"),
                ("d default: front, user alice", True, "alice", "default"),
                ("e default: front, user carol", True, "carol", "default"),
                ("f max-autotune: front", True, None, "max-autotune-no-cudagraphs"),
                ("g max-autotune: front again", True, None, "max-autotune-no-cudagraphs")]
        pick = os.environ.get("LI_IND_RUNS")
        if pick:
            runs = [r for r in runs if r[0][0] in pick.split(",")]
        outs = {}
        logs = []
        for label, use_front, user, mode in runs:
            i = label[0]
            log = os.path.join(work, "log" + i)
            wdir, wpath, wenv = wrapper_dir(work, "ind" + i, front if use_front else tptxas,
                                            use_front, log, tptxas)
            env = dict(os.environ, **wenv, PTXCACHE_SOCKET=d.sock, TRITON_PTXAS_PATH=wpath,
                       TRITON_CACHE_DIR=tempfile.mkdtemp(prefix="triton-", dir=work))
            if user:
                env["USER"] = env["LOGNAME"] = user
                env.pop("TORCHINDUCTOR_CACHE_DIR", None)
                shutil.rmtree("/tmp/torchinductor_" + user, ignore_errors=True)
            else:
                env["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(dir="/tmp")
            s0 = d.stats()
            t0 = time.time()
            y = os.path.join(work, "y%s.pt" % i)
            r = sh([sys.executable, "-c", MODEL, y, mode], env=env, timeout=420)
            wall = time.time() - t0
            s1 = d.stats()
            if r.returncode != 0:
                print(label, "FAILED", r.stderr[-3000:])
                summary[label] = {"failed": r.stderr[-2000:]}
                continue
            calls = len(glob.glob(os.path.join(log, "*.json")))
            delta = {k: s1[k] - s0[k] for k in ("compiles", "hits", "misses", "lineinfo_hits",
                                               "lineinfo_layout_misses", "dedup_joins")}
            import torch
            outs[i] = torch.load(y)
            first = "a" if mode == "default" else "f"
            same = bool(torch.equal(outs[i], outs[first])) if first in outs else None
            prev = chr(ord(i) - 1)
            same_prev = bool(torch.equal(outs[i], outs[prev])) if prev in outs else None
            n, ok = check_against_real(tptxas, log) if use_front else (0, 0)
            misses, pdiff = explain_misses(log, logs) if use_front else ({}, [])
            gap = gap_check(log, logs) if use_front else (0, 0)
            logs.append(log)
            summary[label] = dict(wall_s=round(wall, 1), ptxas_calls=calls, **delta,
                                  misses_by_component=misses, ptx_diffs=pdiff[:2],
                                  misses_with_code_seen_before=gap,
                                  output_bit_identical_to_run1=same,
                                  output_bit_identical_to_previous=same_prev, deterministic=det,
                                  cubins_checked=n, cubins_identical_to_real_ptxas=ok,
                                  compile_line=[l for l in r.stdout.splitlines() if "compile_s" in l])
            print(label, json.dumps(summary[label]), flush=True)
        d.stop()

    if not o.skip_jax:
        cuda = "/usr/local/cuda/bin/ptxas"
        jptxas = cuda if os.path.exists(cuda) else tptxas
        d = Daemon(bindir, work, "jax", jptxas, 16)
        ptx_sets = []
        base = "--xla_gpu_enable_libnvptxcompiler=false"
        jruns = os.environ.get("LI_JAX_RUNS", "flag,flag,data,data").split(",")
        extra = {"flag": "", "data": " --xla_gpu_cuda_data_dir=/usr/local/cuda",
                 "noautotune": " --xla_gpu_autotune_level=0"}
        for k, flags in enumerate(base + extra[j] for j in jruns):
            log = os.path.join(work, "jlog%d" % k)
            wdir, wpath, wenv = wrapper_dir(work, "jax%d" % k, front, True, log, jptxas)
            env = dict(os.environ, **wenv, PTXCACHE_SOCKET=d.sock, XLA_FLAGS=flags,
                       PATH=wdir + ":" + os.environ["PATH"],
                       JAX_COMPILATION_CACHE_DIR=tempfile.mkdtemp(dir=work))
            s0 = d.stats()
            t0 = time.time()
            r = sh([sys.executable, "-c", JAXPROG], env=env, timeout=300)
            s1 = d.stats()
            label = "jax run %d (%s)" % (k + 1, jruns[k])
            ptx = {}
            for p in glob.glob(os.path.join(log, "*.ptx")):
                ptx[p] = open(p, "rb").read()
            ptx_sets.append(ptx)
            jm, jd = explain_misses(log, [os.path.join(work, "jlog%d" % q) for q in range(k)])
            summary[label] = dict(wall_s=round(time.time() - t0, 1), rc=r.returncode,
                                  misses_by_component=jm, ptx_diffs=jd,
                                  ptxas_calls=len(glob.glob(os.path.join(log, "*.json"))),
                                  compiles=s1["compiles"] - s0["compiles"],
                                  hits=s1["hits"] - s0["hits"],
                                  lineinfo_hits=s1["lineinfo_hits"] - s0["lineinfo_hits"],
                                  out=r.stdout.strip()[-200:], err=r.stderr[-1500:] if r.returncode else "")
            if k >= 1:
                # What differs in a PTX the second run sent that the first did not?
                old = set(v for ps in ptx_sets[:k] for v in ps.values())
                diffs = []
                for p, b in ptx_sets[k].items():
                    if b in old:
                        continue
                    same = [a for a in old if entry_name(a.decode(errors="replace")) ==
                            entry_name(b.decode(errors="replace"))]
                    best = min(same or old, key=lambda a: abs(len(a) - len(b))) if old else b""
                    la, lb = best.decode(errors="replace").splitlines(), b.decode(errors="replace").splitlines()
                    import difflib
                    dl = [l[:200] for l in difflib.unified_diff(la, lb, lineterm="", n=0)][2:14]
                    diffs.append({"ptx": os.path.basename(p), "entry": entry_name(lb and "\n".join(lb) or ""),
                                  "same_entry_before": bool(same), "lines": (len(la), len(lb)),
                                  "diff": dl})
                summary[label]["new_ptx_vs_previous_run"] = diffs[:4]
                calls = [json.load(open(j))["args"] for j in glob.glob(os.path.join(log, "*.json"))]
                summary[label]["args_seen"] = sorted(set(" ".join(a[:-3]) for a in calls))[:6]
            print(label, json.dumps(summary[label]), flush=True)
        d.stop()

    with open(os.path.join(o.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    subprocess.run(["tar", "-czf", os.path.join(o.out, "logs.tar.gz"), "-C", work] +
                   [p for p in os.listdir(work) if p.endswith(".log")])


if __name__ == "__main__":
    main()
