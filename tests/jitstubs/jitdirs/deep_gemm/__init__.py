# SPDX-License-Identifier: Apache-2.0
"""Stand-in for DeepGEMM's JIT cache (csrc/jit/compiler.hpp
`Compiler::build`): one directory per kernel,
$DG_JIT_CACHE_DIR (default $HOME/.deep_gemm)/cache/kernel.<name>.<hash>/
with kernel.cu and kernel.cubin, built in tmp/<uuid>/ and renamed whole
into cache/ (a rename that fails because another got there first is fine)."""
import hashlib
import os
import shutil
import uuid

STATS = {"compiles": 0, "hits": 0}


def cache_dir():
    return os.environ.get("DG_JIT_CACHE_DIR") or os.path.join(os.environ["HOME"], ".deep_gemm")


def build(name, code):
    root = cache_dir()
    sig = "%s$$NVCC13.0$$-std=c++20 --gpu-architecture=sm_90a$$%s" % (name, code)
    d = os.path.join(root, "cache", "kernel.%s.%s" % (name, hashlib.sha256(sig.encode()).hexdigest()[:32]))
    cubin = os.path.join(d, "kernel.cubin")
    if os.path.exists(cubin):
        STATS["hits"] += 1
        with open(cubin, "rb") as f:
            return f.read()
    STATS["compiles"] += 1
    tmp = os.path.join(root, "tmp", uuid.uuid4().hex)
    os.makedirs(tmp)
    with open(os.path.join(tmp, "kernel.cu"), "w") as f:
        f.write(code)
    data = b"SASS" + hashlib.sha512(code.encode()).digest() * 16
    with open(os.path.join(tmp, "kernel.cubin"), "wb") as f:
        f.write(data)
    os.makedirs(os.path.dirname(d), exist_ok=True)
    try:
        os.rename(tmp, d)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
    with open(cubin, "rb") as f:
        return f.read()
