# SPDX-License-Identifier: Apache-2.0
"""The package's one switch for every JIT on the node:

    PTXCACHE_JIT=1 python3 serve.py

or, from code, before the first compile:

    import ptxcache.jit
    ptxcache.jit.enable()

It turns on, each where its own switch does not say 0:

| JIT | how | its own switch |
| --- | --- | --- |
| Triton, Inductor (and their ptxas) | their own caches' backends (ptxcache.torch) | PTXCACHE_TORCH=0 |
| JAX | its persistent compilation cache, per key, with leases (ptxcache.jax) | PTXCACHE_JAX=0 |
| CuPy, DeepGEMM, a directory you declare | their cache directories, file by file (ptxcache.jitdirs, which says why numba-cuda's, FlashInfer's and vLLM's are left out) | PTXCACHE_JIT_DIRS_OFF=1 (or a list of kinds) |

``PTXCACHE_TORCH=1``, the switch before this one, keeps turning on the
first row alone. ptxcache.pth runs enable() at start-up in every Python
process that has either set (children inherit PTXCACHE_JIT); like the
others, it imports none of the JITs: each part waits for its JIT's
module to be imported.
"""
from __future__ import annotations

import logging
import os
from typing import Any

from . import jax as jax_adapter
from . import jitdirs
from . import torch as torch_adapter

__all__ = ["enable", "state", "ENV_SWITCH", "on"]

log = logging.getLogger(__name__)

ENV_SWITCH = "PTXCACHE_JIT"

_state: dict[str, Any] = {}


def on(env: dict | None = None, name: str = ENV_SWITCH) -> bool:
    """Whether a switch variable is set to something other than 0."""
    env = os.environ if env is None else env
    return env.get(name, "0") not in ("", "0")


def enable() -> dict[str, Any]:
    """Every part whose own switch is not 0; what each did. Safe to call
    more than once; a part that fails is logged and the others go on."""
    os.environ.setdefault(ENV_SWITCH, "1")
    # Each part's own switch; jitdirs reads its own (PTXCACHE_JIT_DIRS_OFF).
    parts = {"torch": (torch_adapter.ENV_SWITCH, torch_adapter.enable),
             "jax": (jax_adapter.ENV_SWITCH, jax_adapter.install_on_import),
             "jitdirs": (None, jitdirs.enable)}
    for name, (switch, turn_on) in parts.items():
        if switch and os.environ.get(switch) == "0":
            _state[name] = "off (%s=0)" % switch
            continue
        try:
            _state[name] = turn_on()
        except Exception as e:
            log.warning("ptxcache: cannot enable %s", name, exc_info=True)
            _state[name] = "failed: %s" % e
    return dict(_state)


def state() -> dict[str, Any]:
    """What enable() did in this process ({} if it was not called)."""
    return dict(_state)
