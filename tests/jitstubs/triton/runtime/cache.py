# SPDX-License-Identifier: Apache-2.0
"""Test stand-in for triton/runtime/cache.py (Triton 3.6): the cache
managers a TRITON_REMOTE_CACHE_BACKEND class is used by, with Triton's call
shapes (see tests/jitstubs/README.md)."""
import functools
import hashlib
import importlib
import json
import os
import uuid


class CacheManager:
    def __init__(self, key, override=False, dump=False):
        pass


class FileCacheManager(CacheManager):
    def __init__(self, key, override=False, dump=False):
        self.key = key
        self.cache_dir = os.path.join(os.environ.get("TRITON_CACHE_DIR", "").strip() or
                                      os.path.join(os.path.expanduser("~"), ".triton", "cache"), key)
        os.makedirs(self.cache_dir, exist_ok=True)

    def get_file(self, filename):
        p = os.path.join(self.cache_dir, filename)
        return p if os.path.exists(p) else None

    def put(self, data, filename, binary=True):
        if not isinstance(data, bytes):
            data = str(data).encode()
        p = os.path.join(self.cache_dir, filename)
        tmp = "%s.tmp.%d.%s" % (p, os.getpid(), uuid.uuid4().hex)
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, p)
        return p

    def get_group(self, filename):
        p = self.get_file("__grp__" + filename)
        if p is None:
            return None
        with open(p) as f:
            names = json.load(f).get("child_paths")
        out = {c: self.get_file(c) for c in names}
        return None if None in out.values() else out

    def put_group(self, filename, group):
        return self.put(json.dumps({"child_paths": sorted(group)}), "__grp__" + filename, binary=False)


class RemoteCacheBackend:
    def __init__(self, key):
        pass

    def get(self, filenames):
        raise NotImplementedError

    def put(self, filename, data):
        raise NotImplementedError


def _backend_class():
    # As triton.knobs' env_class: MODULE:CLASS, whose bases must include a
    # class named RemoteCacheBackend.
    spec = os.environ["TRITON_REMOTE_CACHE_BACKEND"]
    mod, _, name = spec.partition(":")
    cls = getattr(importlib.import_module(mod), name)
    if not any(c.__name__ == "RemoteCacheBackend" for c in cls.mro()):
        raise RuntimeError("Unable to use '%s' from TRITON_REMOTE_CACHE_BACKEND: not of type "
                           "'RemoteCacheBackend'" % spec)
    return cls


class RemoteCacheManager(CacheManager):
    def __init__(self, key, override=False, dump=False):
        self._backend = _backend_class()(key)
        self._override, self._dump = override, dump
        self._file_cache_manager = FileCacheManager(key, override=override, dump=dump)

    def _materialize(self, filename, data):
        return self._file_cache_manager.put(data, filename, binary=True)

    def get_file(self, filename):
        if self._dump or self._override:
            return self._file_cache_manager.get_file(filename)
        results = self._backend.get([filename])
        if len(results) == 0:
            return None
        (_, data), = results.items()
        return self._materialize(filename, data)

    def put(self, data, filename, binary=True):
        if self._dump or self._override:
            return self._file_cache_manager.put(data, filename, binary=binary)
        if not isinstance(data, bytes):
            data = str(data).encode("utf-8")
        self._backend.put(filename, data)
        return self._materialize(filename, data)

    def get_group(self, filename):
        if self._dump or self._override:
            return self._file_cache_manager.get_group(filename)
        p = self.get_file("__grp__" + filename)
        if p is None:
            return None
        with open(p) as f:
            child_paths = json.load(f).get("child_paths")
        if child_paths is None:
            return None
        got = self._backend.get(child_paths)
        if set(got) != set(child_paths):
            return None
        return {c: self._materialize(c, d) for c, d in got.items()}

    def put_group(self, filename, group):
        if self._dump or self._override:
            return self._file_cache_manager.put_group(filename, group)
        return self.put(json.dumps({"child_paths": sorted(group)}), "__grp__" + filename)


def get_cache_manager(key):
    spec = os.environ.get("TRITON_CACHE_MANAGER")
    if spec:
        mod, _, name = spec.partition(":")
        return getattr(importlib.import_module(mod), name)(key)
    return FileCacheManager(key)


@functools.lru_cache()
def triton_key():
    # Triton's: a SHA-256 of its own files and its version. Each time it is
    # computed, a file named after the process goes to $JITSTUB_MARKS.
    import triton
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    h = hashlib.sha256()
    for d, dirs, files in os.walk(root):
        dirs[:] = sorted(x for x in dirs if x != "__pycache__")
        for f in sorted(files):
            with open(os.path.join(d, f), "rb") as fh:
                h.update(hashlib.sha256(fh.read()).digest())
    marks = os.environ.get("JITSTUB_MARKS")
    if marks:
        os.makedirs(marks, exist_ok=True)
        open(os.path.join(marks, "triton_key.%d" % os.getpid()), "w").close()
    return "%s-%s" % (triton.__version__, h.hexdigest())
