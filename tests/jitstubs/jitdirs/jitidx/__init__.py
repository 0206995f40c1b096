# SPDX-License-Identifier: Apache-2.0
"""A JIT with an index, as numba's cache keeps one (numba-cuda
core/caching.py `IndexDataCacheFile`: `_open_for_write` writes
`<path>.tmp.<uuid>` and os.replace()s it): data files `<sha>.bin` found by
name, and a mutable `index.nbi` listing them, rewritten (temp + rename)
after each compile. The directory is $JITIDX_DIR."""
import hashlib
import json
import os
import uuid

STATS = {"compiles": 0, "hits": 0}


def _replace(path, data):
    tmp = "%s.tmp.%s" % (path, uuid.uuid4().hex[:16])
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def compile(source):
    d = os.environ["JITIDX_DIR"]
    os.makedirs(d, exist_ok=True)
    name = hashlib.sha256(source.encode()).hexdigest()[:40] + ".bin"
    path = os.path.join(d, name)
    if os.path.exists(path):
        STATS["hits"] += 1
        with open(path, "rb") as f:
            return f.read()
    STATS["compiles"] += 1
    data = b"OBJ" + hashlib.sha384(source.encode()).digest() * 8
    _replace(path, data)
    idx = os.path.join(d, "index.nbi")
    try:
        with open(idx) as f:
            names = json.load(f)
    except (OSError, ValueError):
        names = []
    _replace(idx, json.dumps(sorted(set(names) | {name})).encode())
    return data
