#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""ptxcache.triton_key on a real installation: fresh processes ask
PyTorch for its system hash (CacheBase.get_system(), which computes
Triton's triton_key()) without the package, then with it on a daemon
(the first computes and stores, the next ones get it), and each compares
the answer with Triton's own function and says how often that function
ran in it (the package answers Triton's own name from the daemon too).
Not part of `make test`; see tests/gpu/README.md.

    python3 tests/gpu/triton_key_check.py --bundle gpu-carry-py/bundle.tar.xz --out $OUT
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import torch_cache  # noqa: E402

CHILD = r'''
import json, os, sys, time
if os.environ.get("TC_CALL_ENABLE") == "1":
    import ptxcache.torch
    ptxcache.torch.enable()
import torch
import torch._inductor.runtime.triton_compat as tc
from torch._inductor.codecache import CacheBase
t0 = time.time()
system = CacheBase.get_system()
t1 = time.time()
import triton.runtime.cache as trc
own = trc.triton_key()      # what Triton's get_cache_key() asks
# How often Triton's own function ran (its lru_cache's misses): 0 where
# the package answered both names from the daemon.
k = trc.triton_key
orig = k.__wrapped__ if getattr(k, "_ptxcache_triton_key", False) else k
out = {"get_system_s": t1 - t0, "equal": system["version"]["triton"] == own,
       "wrapped": bool(getattr(tc.triton_key, "_ptxcache_triton_key", False)),
       "wrapped_triton": orig is not k, "triton_own_computed": orig.cache_info().misses}
if "ptxcache.triton_key" in sys.modules:
    import ptxcache.triton_key as k
    out["counts"] = k.counts
print(json.dumps(out))
'''


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bundle", required=True)
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="tkey-")
    tools = torch_cache.Tools(args.bundle, None, work)
    script = os.path.join(work, "child.py")
    with open(script, "w") as f:
        f.write(CHILD)
    pth = torch_cache.pth_base(work, tools)
    d = torch_cache.Daemon(tools, work, "d")
    res = {"plain": [], "package": []}
    try:
        for i in range(args.runs):
            for tag, daemon in (("plain", None), ("package", d)):
                env, _ = torch_cache.child_env(work, tools, tag, daemon=daemon,
                                               pth=pth if daemon else None)
                t0 = time.time()
                r = subprocess.run([sys.executable, script], env=env, capture_output=True,
                                   text=True, timeout=120)
                line = [x for x in r.stdout.splitlines() if x.startswith("{")]
                out = json.loads(line[-1]) if line else {"error": r.stderr[-2000:]}
                out["process_s"] = time.time() - t0
                res[tag].append(out)
                print(tag, json.dumps(out), flush=True)
    finally:
        d.stop()
    import importlib.util
    spec = importlib.util.find_spec("triton")
    if spec and spec.origin:
        shutil.copy(os.path.join(os.path.dirname(spec.origin), "runtime", "cache.py"),
                    os.path.join(args.out, "triton-runtime-cache.py"))
    with open(os.path.join(args.out, "triton_key.json"), "w") as f:
        json.dump(res, f, indent=1)
    for p in torch_cache._PTH_MADE:
        os.unlink(p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
