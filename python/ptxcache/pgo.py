# SPDX-License-Identifier: Apache-2.0
"""A job identity for PyTorch's profile of dynamic shapes (PGO), where the
user gave none.

Dynamo compiles a frame static first and again, dynamic, when a second
shape arrives ("automatic dynamic"). It keeps what it learnt (which
inputs' dimensions turned out dynamic) in a profile, locally
(``<inductor cache dir>/dynamo/code_state_<key>.pkl``) and in the remote
cache ``RemoteDynamoPGOCache`` (this package's namespace ``dynamo-pgo``),
so that a fresh process compiles dynamic from the start. PyTorch 2.11
reads and writes that profile only under a job id
(``torch._dynamo.pgo.get_cache_key()``: ``f"{job_id}:{rank}:{tag}"``, the
job id from ``torch.compiler.config.job_id``, i.e. ``TORCH_COMPILE_JOB_ID``
or ``TORCH_COMPILE_STICKY_PGO_KEY``); without one, every fresh process
of a fleet compiles twice. A pod rarely has one.

install() gives it one where the user set neither variable and nothing set
``job_id``: ``ptxcache-`` and a SHA-256 of what identifies the program,
the main script's real path, a SHA-256 of its content and its arguments
(``sys.argv[1:]``); for ``python -c CODE``, the code and its arguments.
The same program run the same way gets the same profile; an edited
script, other arguments or another script get another, never a shared
one. An interactive interpreter, or a program read from stdin, gets none
(PyTorch's behaviour, no profile). The id is set in this process's
``torch.compiler.config`` only, not in the environment, so that a child
process running another program does not inherit it.

Across users: the daemon keeps every artifact in its caller's scope (the
uid, or the socket's tenant), so a profile is read only by the user or
tenant that wrote it; a profile only decides which dimensions compile
dynamic (PyTorch's guards still check every shape; a stale profile costs
speed, never a wrong result).

What else reads ``job_id`` in PyTorch 2.11 (``grep -rn job_id torch/``):
only ``torch/_dynamo/pgo.py``'s cache key (tests/gpu/README.md, the LLM
section, records the grep). ``PTXCACHE_PGO_JOB_ID=0`` leaves it unset.
"""
from __future__ import annotations

import hashlib
import logging
import os
import sys
from typing import Any

__all__ = ["install", "identity", "state", "MODULE", "ENV", "USER_VARS", "PREFIX"]

log = logging.getLogger(__name__)

MODULE = "torch.compiler.config"
ENV = "PTXCACHE_PGO_JOB_ID"
# PyTorch's own variables for torch.compiler.config.job_id.
USER_VARS = ("TORCH_COMPILE_JOB_ID", "TORCH_COMPILE_STICKY_PGO_KEY")
PREFIX = "ptxcache-"

_state: dict[str, Any] = {}


def _file_sha256(path: str) -> str | None:
    h = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    except OSError:
        return None
    return h.hexdigest()


def _c_code(orig_argv: list[str]) -> str | None:
    """The CODE of `python ... -c CODE ...`, from sys.orig_argv."""
    for i, a in enumerate(orig_argv[1:], 1):
        if a == "-c" and i + 1 < len(orig_argv):
            return orig_argv[i + 1]
        if a.startswith("-c") and len(a) > 2:
            return a[2:]
    return None


def identity(argv: list[str] | None = None,
             orig_argv: list[str] | None = None) -> tuple[str | None, str]:
    """(the job id for this program, what it was derived from) or (None,
    why there is none). argv, orig_argv: sys.argv, sys.orig_argv."""
    argv = list(sys.argv if argv is None else argv)
    orig_argv = list(getattr(sys, "orig_argv", []) if orig_argv is None else orig_argv)
    if not argv or argv[0] in ("", "-"):
        return None, "no program file (an interactive interpreter or stdin)"
    h = hashlib.sha256()
    if argv[0] == "-c":
        code = _c_code(orig_argv)
        if code is None:
            return None, "python -c, but its code is not in sys.orig_argv"
        h.update(b"code\0" + code.encode("utf-8", "surrogateescape") + b"\0")
        what = "python -c CODE (%d characters) and %d arguments" % (len(code), len(argv) - 1)
    else:
        path = os.path.realpath(argv[0])
        digest = _file_sha256(path)
        if digest is None:
            return None, "the main script '%s' cannot be read" % argv[0]
        h.update(b"script\0" + path.encode("utf-8", "surrogateescape") + b"\0"
                 + digest.encode() + b"\0")
        what = "the script %s (sha256 %s...) and %d arguments" % (path, digest[:12], len(argv) - 1)
    for a in argv[1:]:
        h.update(a.encode("utf-8", "surrogateescape") + b"\0")
    return PREFIX + h.hexdigest()[:32], what


def install(module: Any) -> bool:
    """Set module.job_id (torch.compiler.config's) to this program's
    identity, unless the user gave one or PTXCACHE_PGO_JOB_ID=0. True if
    set. What was done is in state()."""
    if os.environ.get(ENV) == "0":
        _state.update(job_id=None, source="off", why="%s=0" % ENV)
        return False
    given = getattr(module, "job_id", None)
    mine = _state.get("source") == "ptxcache" and given == _state.get("job_id")
    if given is not None and not mine:
        src = next((v for v in USER_VARS if os.environ.get(v) is not None), "set in the program")
        _state.update(job_id=given, source=src, why="the user's")
        return False
    if not hasattr(module, "job_id"):
        _state.update(job_id=None, source="absent", why="%s has no job_id" % MODULE)
        return False
    jid, what = identity()
    if jid is None:
        _state.update(job_id=None, source="none", why=what)
        return False
    module.job_id = jid
    _state.update(job_id=jid, source="ptxcache", why=what)
    log.debug("ptxcache: PyTorch's PGO job id is %s, from %s", jid, what)
    return True


def state() -> dict[str, Any]:
    """{job_id, source ("ptxcache", a variable of USER_VARS, "set in the
    program", "off", "none", "absent"), why}; {} before install()."""
    return dict(_state)
