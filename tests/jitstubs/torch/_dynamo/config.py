# SPDX-License-Identifier: Apache-2.0
"""Test stand-in: torch/_dynamo/config.py's remote PGO switch."""
import os

v = os.environ.get("TORCH_DYNAMO_AUTOMATIC_DYNAMIC_REMOTE_PGO")
automatic_dynamic_remote_pgo = True if v == "1" else False if v == "0" else None
