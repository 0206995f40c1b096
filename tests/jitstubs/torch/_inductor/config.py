# SPDX-License-Identifier: Apache-2.0
"""Test stand-in: the switches of torch/_inductor/config.py that ptxcache sets."""
import os


def _tristate(name):
    v = os.environ.get(name)
    return True if v == "1" else False if v == "0" else None


fx_graph_remote_cache = _tristate("TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE")
autotune_remote_cache = _tristate("TORCHINDUCTOR_AUTOTUNE_REMOTE_CACHE")
bundled_autotune_remote_cache = _tristate("TORCHINDUCTOR_BUNDLED_AUTOTUNE_REMOTE_CACHE")


def is_fbcode():
    # torch/_inductor/config.py's: not a Meta-internal build.
    return False
