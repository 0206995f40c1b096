# SPDX-License-Identifier: Apache-2.0
"""ptxcache: the node's GPU compile cache daemon (ptxcached), from Python.

- ``ptxcache.Client``: the daemon's protocol (hello, ping, stats, artifact
  get/put/release with leases); ``ptxcache.errors`` its exceptions.
- ``ptxcache.torch.enable()`` (or ``PTXCACHE_TORCH=1``): Triton's and
  Inductor's own caches, and their ptxas, on the daemon.
- ``ptxcache.triton``, ``ptxcache.inductor``: the backends behind that.
- ``python3 -m ptxcache status``: what is wired and what is not.

Importing this package imports neither PyTorch nor Triton, opens no socket
and changes no environment variable; ``Client`` and the rest of the client
module are imported when first named (ptxcache.pth imports this package in
every process that has the switch set, most of which never talk to the
daemon).
"""
from __future__ import annotations

from .errors import (Busy, Conflict, ConnectError, DaemonTimeout, Denied, Invalid, ProtocolError,
                     PtxcacheError, ServerError, Unsupported)

__all__ = ["Client", "ArtifactReply", "default_socket", "PtxcacheError", "ConnectError",
           "DaemonTimeout", "ProtocolError", "ServerError", "Unsupported", "Denied", "Busy",
           "Conflict", "Invalid", "__version__"]

_FROM_CLIENT = ("Client", "ArtifactReply", "default_socket")

__version__ = "0.2.0"  # the project's VERSION (Makefile)


def __getattr__(name: str) -> object:
    if name in _FROM_CLIENT:
        from . import client
        return getattr(client, name)
    raise AttributeError("module %r has no attribute %r" % (__name__, name))
