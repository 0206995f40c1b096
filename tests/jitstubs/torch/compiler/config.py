# SPDX-License-Identifier: Apache-2.0
"""Test stand-in: torch/compiler/config.py's job_id and cache_key_tag
(PyTorch 2.11: read from the environment when the module is imported)."""
import os

job_id = next((os.environ[v] for v in ("TORCH_COMPILE_JOB_ID", "TORCH_COMPILE_STICKY_PGO_KEY")
               if v in os.environ), None)
cache_key_tag = os.environ.get("TORCH_COMPILE_CACHE_KEY_TAG", "")
