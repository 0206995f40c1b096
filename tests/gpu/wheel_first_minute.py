#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The first minute of a new user on a GPU machine (issue 25): pip install
the wheel into the machine's own environment, set PTXCACHE_TORCH=1 and
nothing else (no daemon started, no socket named), then fresh processes of
torch_cache.py's models. The first starts the user's own daemon (the
package's autostart); the second is served by it. The anchors of the same
call: the model cold and with its local caches warm, without the package.
Each run a fresh process with fresh Inductor and Triton cache directories.

    python3 tests/gpu/wheel_first_minute.py --wheel gpu-wheel/ptxcache-*.whl --out $OUT \\
        [--models cnn,mixer] [--mode default]

Writes results.json to OUT and prints a table. Not part of `make test`.
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import torch_cache  # noqa: E402


def env_for(work, tag, package, dirs=None):
    cdir = dirs or tempfile.mkdtemp(prefix="wf-%s-" % tag, dir=work)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PTXCACHE_", "TRITON_", "TORCHINDUCTOR_", "TORCH_COMPILE"))}
    env.update(TORCHINDUCTOR_CACHE_DIR=os.path.join(cdir, "inductor"),
               TRITON_CACHE_DIR=os.path.join(cdir, "triton"), PYTHONUNBUFFERED="1")
    if package:
        env["PTXCACHE_TORCH"] = "1"
    return env, cdir


def install(wheel):
    """pip install the wheel into this interpreter's environment, as a
    user would; whether it worked."""
    pip = [sys.executable, "-m", "pip", "install", "--no-index", "--no-deps", "-q", wheel]
    r = subprocess.run(pip, capture_output=True, text=True)
    if r.returncode != 0 and "externally-managed" in r.stderr:
        r = subprocess.run(pip + ["--break-system-packages"], capture_output=True, text=True)
    print("pip install %s: exit %d %s" % (os.path.basename(wheel), r.returncode,
                                          r.stderr.strip()[-300:]), flush=True)
    return r.returncode == 0


def run(work, model, mode, env, tag, timeout):
    p, out, t0 = torch_cache.start_child(work, model, mode, env, tag)
    r = torch_cache.finish_child(p, out, t0, timeout)
    print("  %-7s %s" % (tag, ("%.1f s" % r["compile_s"]) if "compile_s" in r else r["error"]),
          flush=True)
    return r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--wheel", required=True)
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--models", default="cnn,mixer")
    ap.add_argument("--mode", default="default")
    ap.add_argument("--timeout", type=int, default=300)
    args = ap.parse_args()
    wheel = sorted(glob.glob(args.wheel))[-1]
    if not install(wheel):
        return 1
    status = subprocess.run([sys.executable, "-m", "ptxcache", "status"],
                            capture_output=True, text=True, env=env_for(tempfile.gettempdir(),
                                                                        "st", True)[0])
    results = {"wheel": os.path.basename(wheel), "status_before": status.stdout[-2000:]}
    work = tempfile.mkdtemp(prefix="wheel-first-minute-")
    for model in args.models.split(","):
        res = results.setdefault(model, {})
        print("%s/%s:" % (model, args.mode), flush=True)
        env, dirs = env_for(work, "cold", False)
        res["cold"] = run(work, model, args.mode, env, "cold", args.timeout)
        env, _ = env_for(work, "local", False, dirs)
        res["local"] = run(work, model, args.mode, env, "local", args.timeout)
        for tag in ("first", "second"):
            env, _ = env_for(work, tag, True)
            res[tag] = run(work, model, args.mode, env, tag, args.timeout)
    status = subprocess.run([sys.executable, "-m", "ptxcache", "status"],
                            capture_output=True, text=True, env=env_for(work, "st", True)[0])
    results["status_after"] = status.stdout[-3000:]
    print(status.stdout[-1500:])
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(results, f, indent=1, default=str)
    print("| model / mode | cold | local caches warm | pip wheel, 1st process (starts the "
          "daemon) | 2nd process | 2nd / local |")
    print("| --- | --- | --- | --- | --- | --- |")
    for model in args.models.split(","):
        res = results[model]
        s = {k: res[k].get("compile_s") for k in ("cold", "local", "first", "second")}
        ratio = "%.2fx" % (s["second"] / s["local"]) if s["second"] and s["local"] else "-"
        print("| %s/%s | %s | %s | %s | %s | %s |" % (
            model, args.mode, *("%.1f s" % v if v else "-" for v in s.values()), ratio))
    return 0


if __name__ == "__main__":
    sys.exit(main())
