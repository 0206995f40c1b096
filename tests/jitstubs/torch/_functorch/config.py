# SPDX-License-Identifier: Apache-2.0
"""Test stand-in: torch/_functorch/config.py's remote AOTAutograd switch."""
import os

v = os.environ.get("TORCHINDUCTOR_AUTOGRAD_REMOTE_CACHE")
enable_remote_autograd_cache = True if v == "1" else False if v == "0" else None
