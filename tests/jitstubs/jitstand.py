#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A program that compiles through a stand-in JIT (tests/jitstubs/jitdirs/:
cupy, deep_gemm, jitidx) with ptxcache.jitdirs enabled first, as the
start-up switch would, then prints one JSON line: the JIT's compiles and
hits, a digest of the outputs, the directory as the JIT first saw it and
jitdirs.status().

    jitstand.py TOOL MODEL N [--skip-enable]

MODEL names the kernel set (kernels "<MODEL>-<i>" for i < N; the model
"shared" is kernels "k-<i>", common to every program that asks for it);
kernel 1 of the cupy set is large (a value the daemon keeps as a file)."""
import hashlib
import json
import logging
import os
import sys

logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s %(message)s")
tool, model, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
if "--skip-enable" not in sys.argv:
    from ptxcache import jitdirs
    jitdirs.enable()
else:
    jitdirs = None


def listing(d):
    out = []
    for dp, _dn, fns in os.walk(d):
        for fn in fns:
            out.append(os.path.relpath(os.path.join(dp, fn), d))
    return sorted(out)


mod = __import__(tool)     # held here until the directory is filled
if tool == "cupy":
    seen = listing(mod.cache_dir())
    run = mod.compile_with_cache
elif tool == "deep_gemm":
    seen = listing(os.path.join(mod.cache_dir(), "cache"))
    run = lambda src: mod.build("gemm%d" % (len(src) % 7), src)  # noqa: E731
else:
    seen = listing(os.environ["JITIDX_DIR"])
    run = mod.compile
prefix = "k" if model == "shared" else model
h = hashlib.sha256()
for i in range(n):
    src = "__global__ void %s_%d() {}%s" % (prefix, i, " #big" if i == 1 else "")
    h.update(run(src))
print(json.dumps({"compiles": mod.STATS["compiles"], "hits": mod.STATS["hits"],
                  "digest": h.hexdigest(), "seen": seen,
                  "status": jitdirs.status() if jitdirs else None}), flush=True)
