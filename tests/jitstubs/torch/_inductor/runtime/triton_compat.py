# SPDX-License-Identifier: Apache-2.0
"""Test stand-in for torch/_inductor/runtime/triton_compat.py (PyTorch
2.11): where PyTorch takes Triton's names from (CacheBase.get_system()
imports triton_key from here at each call)."""
try:
    from triton.runtime.cache import triton_key
    HAS_TRITON = True
except ImportError:
    HAS_TRITON = False

    def triton_key():
        return None
