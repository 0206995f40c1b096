# SPDX-License-Identifier: Apache-2.0
"""A warm process believes the coordinate-descent results it finds.

Inductor's coordinate-descent tuner (max-autotune's
``coordinate_descent_tuning``) stores a kernel's best config with
``found_by_coordesc: true`` in the autotune cache (local file, and the
remote cache on ptxcached). A process whose FX graph is a cache hit does
not compile its kernels: it unpickles each ``CachingAutotuner`` with the
compiled candidate configs and calls ``recheck_autotune_cache`` to narrow
them to the stored best one. PyTorch 2.11's version of that method
(``torch/_inductor/runtime/triton_heuristics.py``) loses the mark in two
cases, and ``run()`` then runs coordinate descent again (benchmarks, and
Triton compiles of the configs it tries):

1. the stored best is one of the candidates: the candidate's own config
   object is kept, and it has no ``found_by_coordesc``;
2. the kernel had one candidate only: ``len(configs) > 1`` is required
   before the stored result is used at all, so it is dropped.

(A stored best outside the candidates is compiled and marked; PyTorch
already handles that one.) install() wraps the method: PyTorch's own runs
first, unchanged, and what PyTorch's own lookup returned inside it
(``check_autotune_cache``, with its key and its ``configs_hash`` check;
the module's function is wrapped to remember it, so nothing is asked
twice) is looked at after; only where that is a config that carries
``found_by_coordesc``, the one compile
result left is given a copy of its config with the mark, and in case 2
the stored config replaces the candidate (compiled from Triton's cache,
as PyTorch does for a best outside the candidates). Nothing else is
changed, so whatever makes PyTorch miss (another GPU, PyTorch or Triton
version: ``backend_hash``, the FX graph's key; other candidates:
``configs_hash``) still makes it tune.

3. Then ``precompile()`` runs ``_dynamic_scale_rblock`` whatever the
   cache said: a reduction whose registers limit its occupancy gets its
   one config again with the largest R-block halved, and ``run()``
   benchmarks the two. The producer never timed that pair (its halved
   configs came from the candidates, before coordinate descent), so where
   they nearly tie a warm process may take the other one, run other
   kernels than the producer (other bits), tune again from there and
   store its choice over the producer's. install() also wraps that
   method: where the cache narrowed the kernel to the stored best (the
   autotune cache info says ``hit``, and the one compile result left is
   its ``best_config``), the kernel keeps that one config, as later
   PyTorch does (a cache hit skips the scaling there); anywhere else
   PyTorch's method runs.

``PTXCACHE_AUTOTUNE_RECHECK=0`` leaves PyTorch's methods alone.

PyTorch's names this module touches (private; each looked up, never
assumed, and without any of them it does nothing):
``torch._inductor.runtime.triton_heuristics``: ``CachingAutotuner``
(``recheck_autotune_cache``, ``_dynamic_scale_rblock``,
``compile_results``, ``filename``, ``inductor_meta``, ``fn``,
``_precompile_config``, ``autotune_cache_info``), ``check_autotune_cache``
(replaced by a wrapper that calls it), ``triton_config_to_hashable``.
Measured on an H200 (tests/gpu/README.md, issue 29): cases 1 and 2 took
a warm max-autotune process from 18 coordinate-descent benchmarks and 9
ptxas compiles to none.
"""
from __future__ import annotations

import copy
import functools
import logging
import os
import threading
from typing import Any, Callable

__all__ = ["install", "installed", "MODULE", "ENV", "counts"]

log = logging.getLogger(__name__)

MODULE = "torch._inductor.runtime.triton_heuristics"
ENV = "PTXCACHE_AUTOTUNE_RECHECK"
_MARK = "_ptxcache_recheck"

# What the wrappers did in this process: kernels whose stored
# coordinate-descent result it kept marked (a candidate's config), those
# of one candidate whose stored result it put in place, and kernels
# narrowed to their stored best whose R-block scaling was skipped (case
# 3; whether or not it would have added a config).
counts = {"marked": 0, "replaced": 0, "unscaled": 0}


def installed(module: Any = None) -> bool:
    import sys
    module = module or sys.modules.get(MODULE)
    cls = getattr(module, "CachingAutotuner", None) if module is not None else None
    return bool(cls is not None and getattr(getattr(cls, "recheck_autotune_cache", None), _MARK,
                                            False))


def _marked(cfg: Any) -> Any:
    c = copy.copy(cfg)
    c.found_by_coordesc = True
    return c


_seen = threading.local()


def _wrap_check(check: Callable) -> Callable:
    """PyTorch's check_autotune_cache, remembering (in this thread, inside
    recheck_autotune_cache only) the config it returned: the wrapper needs
    PyTorch's own answer, and asking again would cost a second lookup."""

    @functools.wraps(check)
    def check_autotune_cache(*a: Any, **k: Any) -> Any:
        r = check(*a, **k)
        if getattr(_seen, "on", False):
            _seen.cached = r[0]
        return r

    setattr(check_autotune_cache, _MARK, True)
    return check_autotune_cache


def _wrap(module: Any, orig: Callable) -> Callable:
    hashable = getattr(module, "triton_config_to_hashable")

    @functools.wraps(orig)
    def recheck_autotune_cache(self: Any, reload_kernel_from_src: Callable[[], Any]) -> None:
        if (os.environ.get(ENV) == "0"
                or not self.inductor_meta.get("coordinate_descent_tuning")):
            return orig(self, reload_kernel_from_src)
        configs = [r.config for r in self.compile_results]
        _seen.on, _seen.cached = True, None
        try:
            orig(self, reload_kernel_from_src)
        finally:
            _seen.on = False
        cached, _seen.cached = _seen.cached, None
        if not cached or len(cached) != 1 or len(self.compile_results) != 1:
            return
        best = cached[0]
        result = self.compile_results[0]
        if (not getattr(best, "found_by_coordesc", False)
                or getattr(result.config, "found_by_coordesc", False)):
            return      # not coordinate descent's, or PyTorch compiled it marked
        if hashable(result.config) == hashable(best):
            # Case 1 (or 2 where descent stayed put): the same config, marked.
            result.config = _marked(result.config)
            counts["marked"] += 1
            return
        if len(configs) != 1:
            return      # PyTorch chose otherwise: its choice stands
        # Case 2: the only candidate, and coordinate descent had moved off
        # it: what PyTorch does for a stored best outside the candidates.
        if getattr(self.fn, "fn", None) is None:
            self.fn = reload_kernel_from_src().fn
        self.compile_results = [self._precompile_config(best)]
        counts["replaced"] += 1

    setattr(recheck_autotune_cache, _MARK, True)
    return recheck_autotune_cache


def _wrap_scale(module: Any, orig: Callable) -> Callable:
    hashable = getattr(module, "triton_config_to_hashable")

    @functools.wraps(orig)
    def _dynamic_scale_rblock(self: Any) -> Any:
        info = getattr(self, "autotune_cache_info", None) or {}
        results = getattr(self, "compile_results", None) or []
        if (os.environ.get(ENV) != "0" and info.get("autotune_cache_state") == "hit"
                and len(results) == 1 and hashable(results[0].config) == info.get("best_config")):
            counts["unscaled"] += 1
            return None
        return orig(self)

    setattr(_dynamic_scale_rblock, _MARK, True)
    return _dynamic_scale_rblock


def install(module: Any) -> bool:
    """Wrap module.CachingAutotuner.recheck_autotune_cache and, where it
    has one, _dynamic_scale_rblock (once). True if the first is wrapped."""
    cls = getattr(module, "CachingAutotuner", None)
    orig = getattr(cls, "recheck_autotune_cache", None) if cls is not None else None
    if orig is None or not hasattr(module, "triton_config_to_hashable"):
        log.info("ptxcache: this PyTorch has no %s.CachingAutotuner.recheck_autotune_cache; "
                 "left alone", MODULE)
        return False
    check = getattr(module, "check_autotune_cache", None)
    if check is None:
        log.info("ptxcache: this PyTorch has no %s.check_autotune_cache; left alone", MODULE)
        return False
    if getattr(orig, _MARK, False):
        return True
    if not getattr(check, _MARK, False):
        module.check_autotune_cache = _wrap_check(check)
    cls.recheck_autotune_cache = _wrap(module, orig)
    scale = getattr(cls, "_dynamic_scale_rblock", None)
    if scale is not None and not getattr(scale, _MARK, False):
        cls._dynamic_scale_rblock = _wrap_scale(module, scale)
    return True
