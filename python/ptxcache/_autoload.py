# SPDX-License-Identifier: Apache-2.0
"""Run at interpreter start-up by ptxcache.pth when PTXCACHE_TORCH is set
(and not "0"): ptxcache.torch.enable(), which imports neither PyTorch nor
Triton. A failure here is logged, never raised: it would stop every Python
program on the machine from starting."""


def run() -> None:
    try:
        from . import torch as _torch
        _torch.enable()
    except Exception:  # pragma: no cover - a broken install must not break Python
        import logging
        logging.getLogger("ptxcache").warning("ptxcache: PTXCACHE_TORCH is set but enabling "
                                              "failed", exc_info=True)
