# SPDX-License-Identifier: Apache-2.0
"""Run at interpreter start-up by ptxcache.pth when PTXCACHE_JIT or
PTXCACHE_TORCH is set (and not "0"): ptxcache.jit.enable_on_import() for
every JIT, or for Triton's and Inductor's caches alone. It imports neither
a JIT nor a part of this package: each part is turned on when its JIT's
import begins. A failure here is logged, never raised: it would stop every
Python program on the machine from starting."""


def run() -> None:
    try:
        from . import jit
        jit.enable_on_import() if jit.on() else jit.enable_on_import(("torch",))
    except Exception:  # pragma: no cover - a broken install must not break Python
        import logging
        logging.getLogger("ptxcache").warning("ptxcache: enabling failed", exc_info=True)
