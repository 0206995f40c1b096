# SPDX-License-Identifier: Apache-2.0
"""A JAX program for tests/test_jax.py, run as its own process with
tests/jitstubs and python/ on PYTHONPATH: jit-compiles computations as
pxla does (compiler.compile_or_get_cached through its module attribute).

    jaxjobs.py NAMES [--threads] [--hold S] [--dir D]

NAMES: computations, comma-separated, compiled one after the other (or
each in its own thread, --threads). With JAXJOB_INSTALL=1 the process
calls ptxcache.jax.install_on_import() before importing jax (what the
package's switch does at start-up). --hold: stay alive S seconds after
compiling. Prints one JSON line: for each computation "hit", "compiled"
or "failed" and its executable's hash, and the package's counts.
"""
import argparse
import hashlib
import json
import logging
import os
import sys
import threading
import time


def main():
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    ap = argparse.ArgumentParser()
    ap.add_argument("names")
    ap.add_argument("--threads", action="store_true")
    ap.add_argument("--hold", type=float, default=0.0)
    ap.add_argument("--dir")
    a = ap.parse_args()
    how = None
    if os.environ.get("JAXJOB_INSTALL") == "1":
        import ptxcache.jax
        how = ptxcache.jax.install_on_import()
    import jax
    from jax._src import xla_bridge
    from jax._src.interpreters import pxla
    if a.dir:
        jax.config.update("jax_compilation_cache_dir", a.dir)
    out = {}
    marks = os.environ.get("JAXSTUB_MARKS", "")

    def one(name):
        module = xla_bridge.Module(name, "module @%s { stablehlo.add ... }" % name)
        try:
            exe = pxla._cached_compilation(module, name, {"opt": 3}, xla_bridge.devices())
        except RuntimeError as e:
            out[name] = ["failed", str(e)]
            return
        mine = "compile.%s.%d." % (name, os.getpid())
        compiled = any(f.startswith(mine) for f in os.listdir(marks)) if os.path.isdir(marks) else None
        out[name] = ["compiled" if compiled else "hit", hashlib.sha256(exe.payload).hexdigest()]

    names = a.names.split(",")
    if a.threads:
        ts = [threading.Thread(target=one, args=(n,)) for n in names]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    else:
        for n in names:
            one(n)
    time.sleep(a.hold)
    r = {"results": out, "how": how}
    if "ptxcache.jax" in sys.modules:
        import ptxcache.artifacts
        import ptxcache.jax
        r.update(installed=ptxcache.jax.installed(), counts=ptxcache.artifacts.store().counts,
                 jax=dict(ptxcache.jax.counts))
    print(json.dumps(r), flush=True)


if __name__ == "__main__":
    sys.exit(main())
