# SPDX-License-Identifier: Apache-2.0
"""What the package's import hooks share: the module spec the other finders
give a name, with its loader's exec_module wrapped, so that a hook runs its
own work right before or right after the module's code.

A hook (inductor.py's and jax.py's install their backends right after
PyTorch's or JAX's module is imported; jitdirs.py holds a tool's import
until its cache directory is filled) is a meta path finder whose
find_spec() returns wrapped_spec(...) for the names it waits for and None
for the others. The standard library's import machinery only: nothing of
the module is patched but its own loader object's exec_module.
"""
from __future__ import annotations

import sys

TYPE_CHECKING = False
if TYPE_CHECKING:      # typing: 5 ms of an import; the names are annotations only
    from typing import Any, Callable

__all__ = ["wrapped_spec"]


def wrapped_spec(hook: Any, fullname: str, path: Any, target: Any,
                 before: Callable[[], None] | None = None,
                 after: Callable[[Any], None] | None = None) -> Any:
    """The spec of fullname from the finders after hook on sys.meta_path,
    its exec_module running before() first and after(module) last. A spec
    without exec_module (a namespace package) is returned as it is, once
    before() has run (here, under the import system's lock)."""
    spec = None
    for finder in sys.meta_path:
        if finder is hook or not hasattr(finder, "find_spec"):
            continue
        spec = finder.find_spec(fullname, path, target)
        if spec is not None:
            break
    if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
        if before is not None:
            before()
        return spec
    run = spec.loader.exec_module

    def exec_module(module: Any) -> None:
        if before is not None:
            before()
        run(module)
        if after is not None:
            after(module)

    spec.loader.exec_module = exec_module   # this module's own loader object
    return spec
