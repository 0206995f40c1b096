# SPDX-License-Identifier: Apache-2.0
"""Run at interpreter start-up by ptxcache.pth when PTXCACHE_JIT or
PTXCACHE_TORCH is set (and not "0"): ptxcache.jit.enable() (every JIT) or
ptxcache.torch.enable() (Triton's and Inductor's caches alone), neither of
which imports a JIT. A failure here is logged, never raised: it would stop
every Python program on the machine from starting."""
import os


def run() -> None:
    try:
        if os.environ.get("PTXCACHE_JIT", "0") not in ("", "0"):
            from . import jit
            jit.enable()
        else:
            from . import torch as _torch
            _torch.enable()
    except Exception:  # pragma: no cover - a broken install must not break Python
        import logging
        logging.getLogger("ptxcache").warning("ptxcache: enabling failed", exc_info=True)
