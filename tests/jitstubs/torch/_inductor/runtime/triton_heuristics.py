# SPDX-License-Identifier: Apache-2.0
"""Test stand-in for torch/_inductor/runtime/triton_heuristics.py (PyTorch
2.11): check_autotune_cache, and CachingAutotuner's
recheck_autotune_cache (an FX graph cache hit narrowing its compiled
candidates to the stored best), precompile() (its _dynamic_scale_rblock:
a reduction whose registers limit its occupancy gets each config again
with its R-block halved, here every config of at least
inductor_meta["stub_scale_from"]), run() (benchmark the candidates left,
then coordinate descent unless the config carries found_by_coordesc) and
the save hook, as PyTorch has them. Kernels are not compiled or run: a
"compile" and a "benchmark" are counted, and a benchmark's time is the
config's place in the kernel's table of times (TIMES)."""
import copy
import hashlib
import os

from .autotune_cache import AutotuneCache

# What this process did (Inductor's counters["inductor"]["coordesc_tuning_bench"]
# and the benchmarks and Triton compiles of CachingAutotuner).
counters = {"benchmarks": 0, "coordesc_tuning_bench": 0, "compiles": 0}
# {BLOCK: time}: the fake timing of each config; coordinate descent moves
# to the fastest neighbour (BLOCK * 2 or / 2) while it is faster.
TIMES = {}


class Config:
    def __init__(self, kwargs, num_warps=4, num_stages=1):
        self.kwargs = dict(kwargs)
        self.num_warps = num_warps
        self.num_stages = num_stages
        self.found_by_coordesc = False

    def __repr__(self):
        return "Config(%r, %d, %d)" % (self.kwargs, self.num_warps, self.num_stages)


def triton_config_to_hashable(cfg):
    items = sorted(cfg.kwargs.items())
    items.append(("num_warps", cfg.num_warps))
    items.append(("num_stages", cfg.num_stages))
    return tuple(items)


def hash_configs(configs):
    h = hashlib.sha256()
    for cfg in configs:
        h.update(("%s %s %s\n" % (sorted(cfg.kwargs.items()), cfg.num_warps, cfg.num_stages)).encode())
    return h.hexdigest()


def check_autotune_cache(configs, filename, inductor_meta):
    autotune_cache = None
    info = {}
    if filename is not None and (len(configs) > 1 or inductor_meta.get("coordinate_descent_tuning")):
        autotune_cache = AutotuneCache.create(inductor_meta, filename, hash_configs(configs))
        if autotune_cache:
            best = autotune_cache.read_best(inductor_meta, configs)
            if best:
                configs = [best]
                info["best_config"] = triton_config_to_hashable(best)
                info["autotune_cache_state"] = "hit"
            else:
                info["autotune_cache_state"] = "miss"
    return configs, autotune_cache, info


class CompileResult:
    def __init__(self, config):
        self.config = config


class _Fn:
    def __init__(self, fn):
        self.fn = fn


class CachingAutotuner:
    def __init__(self, configs, filename, inductor_meta, save_cache_hook=None,
                 autotune_cache_info=None):
        self.configs = configs
        self.filename = filename
        self.inductor_meta = inductor_meta
        self.save_cache_hook = save_cache_hook
        self.compile_results = []
        self.launchers = []
        self.fn = _Fn(None)     # dropped when pickled, as PyTorch's
        self.autotune_cache_info = autotune_cache_info

    def _precompile_config(self, cfg):
        counters["compiles"] += 1
        return CompileResult(cfg)

    def precompile(self):
        if not self.compile_results:
            self.compile_results = [self._precompile_config(c) for c in self.configs]
        self._make_launchers()
        self._dynamic_scale_rblock()

    def _make_launchers(self):
        if len(self.launchers) != len(self.compile_results):
            self.launchers = [r.config for r in self.compile_results]

    def _dynamic_scale_rblock(self):
        # PyTorch 2.11's, with the register test a threshold: unconditional
        # on what the autotune cache said.
        start = self.inductor_meta.get("stub_scale_from")
        if not start:
            return
        seen = {triton_config_to_hashable(r.config) for r in self.compile_results}
        for result in list(self.compile_results):
            if result.config.kwargs["BLOCK"] < start:
                continue
            new = copy.deepcopy(result.config)
            new.kwargs["BLOCK"] //= 2
            if triton_config_to_hashable(new) not in seen:
                seen.add(triton_config_to_hashable(new))
                self.compile_results.append(self._precompile_config(new))
        self._make_launchers()

    def recheck_autotune_cache(self, reload_kernel_from_src):
        # PyTorch 2.11's, line for line.
        configs = [result.config for result in self.compile_results]
        (cached_configs, _, autotune_cache_info) = check_autotune_cache(
            configs, self.filename, self.inductor_meta)
        self.autotune_cache_info = autotune_cache_info
        if len(cached_configs) == 1 and len(configs) > 1:
            best_config = cached_configs[0]
            best_config_hash = triton_config_to_hashable(best_config)
            for compile_result in self.compile_results:
                if triton_config_to_hashable(compile_result.config) == best_config_hash:
                    self.compile_results = [compile_result]
                    return
            if best_config.found_by_coordesc:
                if self.fn.fn is None:
                    self.fn = reload_kernel_from_src().fn
                self.compile_results = [self._precompile_config(best_config)]

    def bench(self, cfg):
        counters["benchmarks"] += 1
        return TIMES.get(cfg.kwargs["BLOCK"], 100.0)

    def autotune_to_one_config(self):
        timings = {id(c): (self.bench(c), c) for c in self.launchers}
        best = min(timings.values(), key=lambda t: t[0])[1]
        self.launchers = [best]
        if self.save_cache_hook:
            self.save_cache_hook(best, 0)

    def coordinate_descent_tuning(self, cfg):
        best, t = cfg, self.bench(cfg)
        while True:
            moved = False
            for b in (best.kwargs["BLOCK"] * 2, best.kwargs["BLOCK"] // 2):
                if b < 1:
                    continue
                cand = copy.copy(best)
                cand.kwargs = dict(best.kwargs, BLOCK=b)
                counters["coordesc_tuning_bench"] += 1
                ct = self.bench(cand)
                if ct < t:
                    best, t, moved = cand, ct, True
                    break
            if not moved:
                break
        best = copy.copy(best)
        best.found_by_coordesc = True
        if self.save_cache_hook:
            self.save_cache_hook(best, 0, found_by_coordesc=True)
        return best

    def run(self):
        if len(self.launchers) != 1:
            if len(self.launchers) == 0:
                self.precompile()
            if len(self.launchers) > 1:
                self.autotune_to_one_config()
        if not getattr(self.launchers[0], "found_by_coordesc", False) and \
                self.inductor_meta.get("coordinate_descent_tuning", False):
            self.launchers = [self.coordinate_descent_tuning(self.launchers[0])]
        return self.launchers[0]


def cached_autotune(configs, filename, inductor_meta):
    """A kernel compiled afresh (an FX graph miss): the cache narrows the
    configs before they are compiled."""
    configs, cache, info = check_autotune_cache(configs, filename, inductor_meta)

    def save(cfg, time_taken_ns, found_by_coordesc=False, **_):
        if cache:
            cache.save(cfg, time_taken_ns, found_by_coordesc=found_by_coordesc)
    return CachingAutotuner(configs, filename, inductor_meta, save, info)
