# SPDX-License-Identifier: Apache-2.0
"""The bytecode of Inductor's output code modules, kept on ptxcached, so
that a fresh process loads a module without compiling its source.

PyTorch loads every module it generates (a graph's output code, each
Triton kernel's module) with ``PyCodeCache.load_by_key_path`` (in
``torch._inductor.codecache``), which calls
``torch._inductor.runtime.compile_tasks._reload_python_module(key, path,
set_sys_modules)``; that function reads the file, runs ``compile(source,
path, "exec", dont_inherit=True)`` and executes the code in a new module.
Every process compiles again, with or without Inductor's local caches:
0.45 s on an H100 for a 16-layer LLM's modules (issue 58).

install() gives ``compile_tasks`` a module-level name ``compile`` (this
module's compile()), which that function's ``compile`` resolves to before
the builtin: PyTorch's function itself is left as it is (its file
reading, module object, ``__file__``, ``sys.modules``, and the
RuntimeError it raises for bad source are all PyTorch's own), and only
its call of ``compile`` is served here. Any other caller, and any call
other than a str source in "exec" mode with no flags but ``__future__``
ones, goes straight to the builtin with exactly the arguments it would
have had (the caller's ``__future__`` flags included where it inherits
them). Inductor's name ``_reload_python_module`` imported into
``codecache`` is the same function, so it needs nothing of its own.

The rules:
- Namespace ``python-bytecode``, the caller's scope; key: the
  interpreter's context (``sys.implementation.cache_tag``,
  ``importlib.util.MAGIC_NUMBER``, ``marshal.version``, the compile flags,
  the optimize level in effect (``sys.flags.optimize`` for -1), whether
  column positions are kept (``-X no_debug_ranges``)) and the SHA-256 of
  the source. The value: a header (a format tag, the magic number, that
  context, ``importlib.util.source_hash`` of the source (PEP 552's check of
  a hash-based .pyc) and its SHA-256), the SHA-256 of the payload, and
  the payload, ``marshal.dumps(code)``.
- A value is used only if its header equals, byte for byte, the one this
  interpreter makes for this source, its payload's digest matches, and
  ``marshal.loads`` gives a code object. Anything else (another
  interpreter's or optimize level's, another source's, a truncated or
  garbled value, a daemon that is down) compiles from the source exactly
  as PyTorch does; nothing stale or foreign is ever executed.
- A loaded code object names the path it was compiled from: its
  ``co_filename`` (and its nested code objects') is set to this process's
  path by ``_imp._fix_co_filename(code, path)``, as importlib's
  SourceLoader does for a .pyc, so tracebacks, ``inspect`` and linecache
  name this process's file.
- After a compile (a miss) the bytecode is stored with
  ``artifacts.store().put`` (never raising; a failure is a miss next time).
- ``PTXCACHE_BYTECODE=0`` leaves PyTorch alone.

Why the program is the same: CPython's ``compile()`` is a pure function of
the source text, the filename (put only in ``co_filename``, fixed as
above), the compiler flags (``__future__`` features, kept in the key), the
optimize level and the interpreter that compiles (its bytecode format,
named by the magic number, and its ``-X no_debug_ranges`` setting, both in
the key). ``marshal`` writes and reads code objects losslessly for the
interpreter of the same magic number: it is how every .pyc is loaded, and
a PEP 552 hash-based .pyc is trusted on exactly this check (magic, flags,
source hash). One thing is not bit-for-bit: a set constant (``x in {..}``)
is rebuilt by marshal in the order the compiling process iterated it, so
with colliding hashes its own iteration order may differ from a fresh
compile's; that order already differs between processes (string hashes
are randomised per process), and .pyc files have the same property.

PyTorch's names touched (checked against 2.11's source): the module
``torch._inductor.runtime.compile_tasks``, its function
``_reload_python_module`` (looked up; it must be a Python function of that
module's globals that calls ``compile``), and a new global ``compile`` in
that module.
"""
from __future__ import annotations

import __future__ as _future
import builtins
import hashlib
import importlib.util
import logging
import marshal
import os
import struct
import sys
import types
from typing import Any, Callable

__all__ = ["install", "installed", "NAMESPACE", "MODULE", "FUNCTION", "ENV", "counts",
           "context", "header", "key_for", "decode"]

log = logging.getLogger(__name__)

NAMESPACE = "python-bytecode"
MODULE = "torch._inductor.runtime.compile_tasks"
FUNCTION = "_reload_python_module"
ENV = "PTXCACHE_BYTECODE"
TESTED_TORCH = ("2.11",)
FORMAT = b"ptxcache-pyc 1\0"

try:
    import _imp
    _fix_co_filename: Callable[[types.CodeType, str], None] | None = _imp._fix_co_filename
except (ImportError, AttributeError):  # pragma: no cover - not CPython
    _fix_co_filename = None

# What compile() inherits from its caller's code (CPython's PyCF_MASK):
# the __future__ features' flags, none of CO_NESTED's kind.
FUTURE_FLAGS = 0
for _name in ("division", "absolute_import", "with_statement", "print_function",
              "unicode_literals", "barry_as_FLUFL", "generator_stop", "annotations"):
    _f = getattr(_future, _name, None)
    if _f is not None:
        FUTURE_FLAGS |= _f.compiler_flag

# This process: "loaded" (from the daemon), "compiled" (from the source),
# "rejected" (a value found that failed a check, then compiled), "stored".
counts = {"loaded": 0, "compiled": 0, "rejected": 0, "stored": 0}

_compile = builtins.compile
_MARK = "_ptxcache_bytecode"


def _debug_ranges() -> str:
    """Whether this interpreter keeps column positions in code objects
    (off with -X no_debug_ranges / PYTHONNODEBUGRANGES)."""
    c = _compile("x", "<ptxcache>", "eval", 0, True)
    positions = getattr(c, "co_positions", None)
    if positions is None:
        return "none"
    return "1" if any(p[2] is not None for p in positions()) else "0"


_RANGES = _debug_ranges()


def context(flags: int, optimize: int) -> str:
    """What, besides the source, decides the code object compile() makes
    in this interpreter (-1 for optimize: the interpreter's level)."""
    if optimize == -1:
        optimize = sys.flags.optimize
    return "%s magic=%s marshal=%d flags=%#x optimize=%d ranges=%s" % (
        sys.implementation.cache_tag, importlib.util.MAGIC_NUMBER.hex(), marshal.version, flags,
        optimize, _RANGES)


def key_for(ctx: str, sha: bytes) -> str:
    return "%s sha256=%s" % (ctx, sha.hex())


def header(ctx: str, data: bytes, sha: bytes) -> bytes:
    """The header a value for this source (data: its UTF-8, sha: its
    SHA-256) must start with in this interpreter."""
    c = ctx.encode()
    return (FORMAT + importlib.util.MAGIC_NUMBER + struct.pack("<H", len(c)) + c
            + importlib.util.source_hash(data) + sha)


def decode(value: bytes, head: bytes) -> types.CodeType | None:
    """The code object in value if it is one made for head, else None."""
    n = len(head)
    if len(value) < n + 32:
        return None
    view = memoryview(value)
    if view[:n] != head:
        return None
    payload = view[n + 32:]
    if hashlib.sha256(payload).digest() != view[n:n + 32]:
        return None
    try:
        code = marshal.loads(payload)
    except Exception:
        return None
    return code if type(code) is types.CodeType else None


def _cached_compile(source: str, filename: str, flags: int, optimize: int) -> types.CodeType:
    from .artifacts import store
    try:
        data = source.encode("utf-8", "surrogatepass")
        sha = hashlib.sha256(data).digest()
        ctx = context(flags, optimize)
        key, head = key_for(ctx, sha), header(ctx, data, sha)
    except Exception:
        return _compile(source, filename, "exec", flags, True, optimize)
    value = None
    try:
        value = store().get(NAMESPACE, key)
    except Exception:
        log.debug("ptxcache: bytecode lookup failed", exc_info=True)
    if value is not None:
        code = decode(value, head)
        if code is not None:
            assert _fix_co_filename is not None
            _fix_co_filename(code, filename)
            counts["loaded"] += 1
            return code
        counts["rejected"] += 1
        log.debug("ptxcache: the stored bytecode of %s does not match; compiled", filename)
    code = _compile(source, filename, "exec", flags, True, optimize)
    counts["compiled"] += 1
    try:
        payload = marshal.dumps(code)
        if store().put(NAMESPACE, key, head + hashlib.sha256(payload).digest() + payload):
            counts["stored"] += 1
    except Exception:
        log.debug("ptxcache: bytecode store failed", exc_info=True)
    return code


def _make_compile(target: types.CodeType) -> Callable[..., Any]:
    def compile(source: Any, filename: Any, mode: Any, flags: int = 0, dont_inherit: bool = False,
                optimize: int = -1, **kw: Any) -> Any:
        """builtins.compile, served from ptxcached for PyTorch's
        _reload_python_module (ptxcache.bytecode)."""
        caller = sys._getframe(1).f_code
        if not dont_inherit and isinstance(flags, int):
            # What the builtin would inherit from the caller's code.
            flags |= caller.co_flags & FUTURE_FLAGS
        if (caller is not target or kw or mode != "exec" or type(source) is not str
                or type(filename) is not str or type(flags) is not int
                or flags & ~FUTURE_FLAGS or optimize not in (-1, 0, 1, 2)):
            return _compile(source, filename, mode, flags, True, optimize, **kw)
        return _cached_compile(source, filename, flags, optimize)

    setattr(compile, _MARK, True)
    return compile


def installed(module: Any = None) -> bool:
    module = module if module is not None else sys.modules.get(MODULE)
    return module is not None and getattr(getattr(module, "compile", None), _MARK, False)


def install(module: Any) -> bool:
    """Serve compile_tasks._reload_python_module's compile() from the
    daemon (once). True if it is."""
    if os.environ.get(ENV) == "0" or _fix_co_filename is None:
        return False
    if installed(module):
        return True
    fn = getattr(module, FUNCTION, None)
    code = getattr(fn, "__code__", None)
    if (not isinstance(fn, types.FunctionType) or code is None
            or fn.__globals__ is not getattr(module, "__dict__", None)
            or "compile" not in code.co_names):
        log.info("ptxcache: %s.%s is not the function this was written for; bytecode stays local",
                 MODULE, FUNCTION)
        return False
    if "compile" in module.__dict__:
        log.info("ptxcache: %s has its own compile; bytecode stays local", MODULE)
        return False
    torch = sys.modules.get("torch")
    v = str(getattr(torch, "__version__", "")) if torch else ""
    if ".".join(v.split("+")[0].split(".")[:2]) not in TESTED_TORCH:
        log.info("ptxcache: PyTorch %s; ptxcache.bytecode was checked against %s", v,
                 ", ".join(TESTED_TORCH))
    module.compile = _make_compile(code)
    return True
