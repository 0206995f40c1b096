# SPDX-License-Identifier: Apache-2.0
"""Test stand-in for torch/_inductor/runtime/compile_tasks.py (PyTorch
2.11): _reload_python_module as 2.11 has it, line for line (the loader of
every module Inductor generates; PyCodeCache.load_by_key_path calls it).
The worker-side functions of the real module are left out."""
from __future__ import annotations

import sys
from types import ModuleType


def _reload_python_module(
    key: str, path: str, set_sys_modules: bool = True
) -> ModuleType:
    with open(path) as f:
        try:
            code = compile(f.read(), path, "exec", dont_inherit=True)
        except Exception as e:
            raise RuntimeError(
                f"Failed to import {path}\n{type(e).__name__}: {e}"
            ) from None
        mod = ModuleType(f"{__name__}.{key}")
        mod.__file__ = path
        mod.key = key  # type: ignore[attr-defined]
        exec(code, mod.__dict__, mod.__dict__)
        if set_sys_modules:
            sys.modules[mod.__name__] = mod
        return mod
