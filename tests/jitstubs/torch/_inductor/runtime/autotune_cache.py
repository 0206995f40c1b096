# SPDX-License-Identifier: Apache-2.0
"""Test stand-in for torch/_inductor/runtime/autotune_cache.py (PyTorch
2.11): AutotuneCache's keys (local file beside the kernel, remote cache
keyed by backend_hash + configs_hash), its save() and
_load_cached_autotuning, as PyTorch has them; no bundler."""
import hashlib
import json
import os

from ..remote_cache import create_cache


class AutotuneCache:
    def __init__(self, configs_hash):
        self.configs_hash = configs_hash
        self.local_cache = None
        self.remote_cache = None

    @staticmethod
    def create(inductor_meta, filename, configs_hash):
        cache = AutotuneCache(configs_hash)
        key = hashlib.sha256(("%s:" % os.path.basename(filename)).encode()).hexdigest()
        if inductor_meta.get("autotune_local_cache", True):
            cache.local_cache = "%s/%s.best_config" % (os.path.dirname(filename), key)
        if inductor_meta.get("autotune_remote_cache") and inductor_meta.get("backend_hash"):
            rkey = hashlib.sha256((inductor_meta["backend_hash"] + configs_hash +
                                   "autotune-best-config-v2").encode()).hexdigest()
            rc = create_cache(rkey, False, "FbRemoteAutotuneCache", "RemoteAutotuneCache")
            if rc is not None:
                cache.remote_cache = (rc, key)
        return cache if cache.local_cache or cache.remote_cache else None

    def _read(self):
        if self.local_cache and os.path.exists(self.local_cache):
            with open(self.local_cache) as f:
                return json.load(f)
        if self.remote_cache:
            rc, key = self.remote_cache
            best = rc.get(key)
            if isinstance(best, dict):
                return best
        return None

    def read_best(self, inductor_meta, configs):
        best = self._read()
        return _load_cached_autotuning(best, self.configs_hash, configs, inductor_meta) if best else None

    def save(self, config, time_taken_ns, found_by_coordesc=False):
        data = {**config.kwargs, "num_warps": config.num_warps, "num_stages": config.num_stages,
                "configs_hash": self.configs_hash, "found_by_coordesc": found_by_coordesc,
                "time_taken_ms": time_taken_ns // 1000000}
        if self.local_cache:
            os.makedirs(os.path.dirname(self.local_cache), exist_ok=True)
            with open(self.local_cache, "w") as f:
                json.dump(data, f)
        if self.remote_cache:
            rc, key = self.remote_cache
            rc.put(key, data)


def _load_cached_autotuning(best_config, configs_hash, configs, inductor_meta):
    from .triton_heuristics import Config
    if best_config is None:
        return None
    if best_config.pop("configs_hash", None) != configs_hash:
        return None
    best_config.pop("time_taken_ms", None)
    if inductor_meta.get("coordinate_descent_tuning") and best_config.pop("found_by_coordesc", False):
        num_warps = best_config.pop("num_warps")
        num_stages = best_config.pop("num_stages")
        c = Config(best_config, num_warps=num_warps, num_stages=num_stages)
        c.found_by_coordesc = True
        return c
    matching = [c for c in configs
                if all(v == best_config.get(k) for k, v in c.kwargs.items())
                and c.num_warps == best_config.get("num_warps")
                and c.num_stages == best_config.get("num_stages")]
    return matching[0] if len(matching) == 1 else None
