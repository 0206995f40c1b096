# SPDX-License-Identifier: Apache-2.0
"""Stand-in for CuPy's kernel cache (cupy/cuda/compiler.py
`_compile_with_cache_cuda`, as read for CuPy 14): one file per kernel,
`<md5 of the key>_2.cubin` in $CUPY_CACHE_DIR (default ~/.cupy/kernel_cache),
holding the cubin's md5 (32 hex bytes) then the cubin, written to a
tempfile.NamedTemporaryFile(dir=cache_dir, delete=False) and moved into
place with shutil.move; a file whose md5 does not match is recompiled.
The "compile" is a deterministic function of the source (sha256 chain),
large when the source asks (`#big`). JITSTAND_CRASH_AT=<n>: the n-th
compile writes half its temporary file and the process kills itself.
JITSTAND_IMPORT_MS=<n>: the import runs Python for about n ms first, as
CuPy's own import does (about 0.4 s on an H100 host), holding the
interpreter's lock a fill beside it needs (bench/jitdirs.py)."""
import hashlib
import os
import shutil
import signal
import tempfile
import time

_busy = time.perf_counter() + int(os.environ.get("JITSTAND_IMPORT_MS", "0")) / 1000
while time.perf_counter() < _busy:
    sum(range(1000))

STATS = {"compiles": 0, "hits": 0}


def cache_dir():
    return os.environ.get("CUPY_CACHE_DIR", os.path.expanduser("~/.cupy/kernel_cache"))


def _cubin(source):
    n = 20000 if "#big" in source else 64     # x 32 bytes: 640 KB or 2 KB
    h = hashlib.sha256(source.encode()).digest()
    out = []
    for _ in range(n):
        out.append(h)
        h = hashlib.sha256(h).digest()
    return b"CUBIN" + b"".join(out)


def compile_with_cache(source):
    d = cache_dir()
    os.makedirs(d, exist_ok=True)
    key = "('90', ('-ftz=true',), (13, 0), 'nvrtc') %s" % source
    path = os.path.join(d, "%s_2.cubin" % hashlib.md5(key.encode()).hexdigest())
    if os.path.exists(path):
        with open(path, "rb") as f:
            data = f.read()
        if len(data) >= 32 and data[:32] == hashlib.md5(data[32:]).hexdigest().encode():
            STATS["hits"] += 1
            return data[32:]
    cubin = _cubin(source)
    STATS["compiles"] += 1
    head = hashlib.md5(cubin).hexdigest().encode()
    crash = os.environ.get("JITSTAND_CRASH_AT")
    with tempfile.NamedTemporaryFile(dir=d, delete=False) as tf:
        tf.write(head)
        if crash and int(crash) == STATS["compiles"]:
            tf.write(cubin[:len(cubin) // 2])
            tf.flush()
            os.kill(os.getpid(), signal.SIGKILL)
        tf.write(cubin)
        temp_path = tf.name
    shutil.move(temp_path, path)
    return cubin
