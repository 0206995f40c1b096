# SPDX-License-Identifier: Apache-2.0
"""Test stand-in for torch/_inductor/codecache.py (PyTorch 2.11): what
ptxcache.bytecode and ptxcache.torch_key see of it. PyCodeCache's
load_by_key_path (through the name _reload_python_module imported from
compile_tasks, in a top-level process) and torch_key() with its
torch_key_cache wrapper and build_code_hash, as 2.11 has them (the stand-in
hashes the stand-in's own package; dynamo_timed and the fbcode branch are
left out). Each time torch_key's hash is computed, a file named after the
process goes to $JITSTUB_MARKS."""
from __future__ import annotations

import hashlib
import os
import pkgutil
from typing import Any, Callable
from types import ModuleType

import torch
from torch._inductor import config
from torch._inductor.runtime.compile_tasks import _reload_python_module

_TORCH_PATH = os.path.dirname(os.path.abspath(torch.__file__))


def build_code_hash(roots, prefix, hasher):
    for lib in sorted(pkgutil.iter_modules(roots, prefix), key=lambda x: x.name):
        spec = lib.module_finder.find_spec(lib.name, None)
        assert spec is not None
        module = spec.origin
        assert module is not None
        with open(module, "rb") as f:
            hasher.update(spec.name.encode("utf-8"))
            hasher.update(f.read())
        if lib.ispkg:
            # need to also hash submodules
            build_code_hash(spec.submodule_search_locations, f"{spec.name}.", hasher)


def torch_key_cache(func: Callable[[], bytes]) -> Callable[[], bytes]:
    _cache: list[bytes] = []

    def wrapper() -> bytes:
        if len(_cache) == 0:
            _cache.append(func())
        return _cache[0]

    def set_val(val: bytes) -> None:
        assert len(_cache) == 0
        _cache.append(val)

    def clear() -> None:
        _cache.clear()

    wrapper.set = set_val  # type: ignore[attr-defined]
    wrapper.clear = clear  # type: ignore[attr-defined]
    return wrapper


@torch_key_cache
def torch_key() -> bytes:
    assert not config.is_fbcode()

    def get_code_hash(root: str) -> bytes:
        extra_files = (
            "codegen/aoti_runtime/interface.cpp",
            "script.ld",
        )
        inductor_root = os.path.dirname(__file__)
        extra_files = [os.path.join(inductor_root, x) for x in extra_files]
        hasher = hashlib.sha256()
        hasher.update(torch.__version__.encode("utf-8"))
        build_code_hash([root], "", hasher)
        for path in extra_files:
            if os.path.exists(path):
                with open(path, "rb") as f:
                    hasher.update(f.read())
        return hasher.digest()

    marks = os.environ.get("JITSTUB_MARKS")
    if marks:
        os.makedirs(marks, exist_ok=True)
        open(os.path.join(marks, "torch_key.%d" % os.getpid()), "w").close()
    return get_code_hash(_TORCH_PATH)


class PyCodeCache:
    modules: list[ModuleType] = []
    modules_no_attr: dict[str, ModuleType] = {}
    linemaps: dict[str, list[tuple[Any, ...]]] = {}

    @classmethod
    def load_by_key_path(
        cls,
        key: str,
        path: str,
        linemap: list[tuple[int, str]] | None = None,
        attrs: dict[str, Any] | None = None,
    ) -> ModuleType:
        if linemap is None:
            linemap = []
        if attrs is None and path in cls.modules_no_attr:
            return cls.modules_no_attr[path]
        in_toplevel = True     # in_toplevel_process(): not a compile worker
        mod = _reload_python_module(key, path, set_sys_modules=in_toplevel)
        if in_toplevel:
            cls.linemaps[path] = list(zip(*linemap))
        if attrs is not None:
            for k, v in attrs.items():
                setattr(mod, k, v)
        if in_toplevel:
            if attrs is None:
                cls.modules_no_attr[path] = mod
            cls.modules.append(mod)
        return mod
