#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A JIT's cache directory on the daemon (python/ptxcache/jitdirs.py), on
this machine, against what a process pays without it (make bench):

- start: an interpreter that imports no JIT, `python3 -c pass`, with
  ptxcache.pth installed and PTXCACHE_JIT=1 against the switch off (the
  floor: the switch must cost such a process nothing);
- fill: a fresh process importing a stand-in CuPy (tests/jitstubs/jitdirs/
  cupy: the import itself is a few milliseconds, so what is timed is the
  fill) whose CUPY_CACHE_DIR holds N files of SIZE random bytes, named as
  CuPy names its cubins:
    local  the directory already warm, no switch (CuPy's own warm cache:
           the anchor);
    pkg    an empty directory, PTXCACHE_JIT=1, the files on a warm daemon
           (a fresh pod on a node whose daemon has them);
    copy   an empty directory, no switch; the process copies the warm
           directory's files into it before the import (a local copy:
           what a mechanism that moves whole directories costs at best,
           the network left out);
    present  PTXCACHE_JIT=1 again on pkg's directory, now full: what the
           package costs where nothing is fetched.
  A set NxSIZE+Mms makes the stand-in's import run Python for M ms first
  (JITSTAND_IMPORT_MS), as CuPy's own does: the fill then runs beside an
  import that holds the interpreter's lock.

Fresh processes, the three alternating for --rounds rounds; medians of
the process's wall time. The files are published by a process that
imports the stand-in with the warm directory (the start's scan: files
the fleet's manifest lacks). Writes OUT/jitdirs.json and prints a table.

usage: bench/jitdirs.py [--build build] [--out DIR] [--rounds 7]
                        [--sets 63x30000,1000x30000,63x30000+200ms]
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))

COPY_THEN_IMPORT = ("import os, shutil, sys\n"
                    "src, dst = sys.argv[1], os.environ['CUPY_CACHE_DIR']\n"
                    "os.makedirs(dst, exist_ok=True)\n"
                    "for n in os.listdir(src):\n"
                    "    shutil.copyfile(os.path.join(src, n), os.path.join(dst, n))\n"
                    "import cupy\n")


def wall(argv, env):
    t = time.perf_counter()
    r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    s = time.perf_counter() - t
    assert r.returncode == 0, r.stderr
    return s


def one_set(d, tmp, n, size, rounds, busy_ms=0):
    from test_jitdirs import env_for
    from test_python import pth_site
    warm = os.path.join(tmp, "warm-%d-%d" % (n, busy_ms))
    os.makedirs(warm)
    for i in range(n):
        with open(os.path.join(warm, "%032x_2.cubin" % (i * 7919 + size)), "wb") as f:
            f.write(os.urandom(size))
    # Each set its own GPU identity, so its own manifest.
    env = env_for(tmp, d.socket, tmp, gpu="bench-%dx%d+%d" % (n, size, busy_ms),
                  PYTHONDONTWRITEBYTECODE="", JITSTAND_IMPORT_MS=str(busy_ms))
    on = dict(env, PTXCACHE_JIT="1", PYTHONUSERBASE=pth_site(tmp))
    wall([sys.executable, "-c", "import cupy"], dict(on, CUPY_CACHE_DIR=warm))     # publishes
    times = {"local": [], "pkg": [], "copy": [], "present": []}
    for r in range(rounds):
        fresh = os.path.join(tmp, "fresh-%d-%d-%d" % (n, busy_ms, r))
        times["local"].append(wall([sys.executable, "-c", "import cupy"], dict(env, CUPY_CACHE_DIR=warm)))
        times["pkg"].append(wall([sys.executable, "-c", "import cupy"], dict(on, CUPY_CACHE_DIR=fresh)))
        assert len(os.listdir(fresh)) == n, "the package's process did not fill its directory"
        times["present"].append(wall([sys.executable, "-c", "import cupy"], dict(on, CUPY_CACHE_DIR=fresh)))
        times["copy"].append(wall([sys.executable, "-c", COPY_THEN_IMPORT, warm],
                                  dict(env, CUPY_CACHE_DIR=fresh + "-copy")))
    return {k: statistics.median(v) for k, v in times.items()}


def start_cost(d, tmp, rounds):
    from test_jitdirs import env_for
    from test_python import pth_site
    env = dict(env_for(tmp, d.socket, tmp, PYTHONDONTWRITEBYTECODE=""), PYTHONUSERBASE=pth_site(tmp))
    off, on = [], []
    for _ in range(rounds):
        off.append(wall([sys.executable, "-c", "pass"], env))
        on.append(wall([sys.executable, "-c", "pass"], dict(env, PTXCACHE_JIT="1")))
    return {"off": statistics.median(off), "on": statistics.median(on)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.environ.get("PTXCACHE_BUILD", "build"))
    ap.add_argument("--out", default=None)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--sets", default="63x30000,1000x30000,63x30000+200ms")
    a = ap.parse_args()
    os.environ["PTXCACHE_BUILD"] = a.build
    from harness import Daemon
    tmp = tempfile.mkdtemp(prefix="ptxcache-bench-jitdirs-")
    out = {"rounds": a.rounds, "sets": {}}
    try:
        with Daemon(workers=1) as d:
            out["start"] = start_cost(d, tmp, a.rounds)
            for spec in a.sets.split(","):
                files, _, busy = spec.partition("+")
                n, size = (int(x) for x in files.split("x"))
                out["sets"][spec] = one_set(d, tmp, n, size, a.rounds, int(busy.rstrip("ms") or 0))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    s = out["start"]
    print("JIT directories (bench/jitdirs.py), medians of %d fresh processes:" % a.rounds)
    print("  python3 -c pass: switch off %.1f ms, PTXCACHE_JIT=1 %.1f ms (%.3fx)"
          % (s["off"] * 1e3, s["on"] * 1e3, s["on"] / s["off"]))
    print("  %-16s %9s %9s %9s %9s %9s %9s" % ("files", "local", "pkg", "copy", "present",
                                                "pkg/local", "pkg/copy"))
    for spec, t in out["sets"].items():
        print("  %-16s %7.1f ms %6.1f ms %6.1f ms %6.1f ms %8.3fx %8.3fx"
              % (spec, t["local"] * 1e3, t["pkg"] * 1e3, t["copy"] * 1e3, t["present"] * 1e3,
                 t["pkg"] / t["local"], t["pkg"] / t["copy"]))
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, "jitdirs.json"), "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
