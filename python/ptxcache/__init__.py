# SPDX-License-Identifier: Apache-2.0
"""ptxcache: the node's GPU compile cache daemon (ptxcached), from Python.

- ``ptxcache.Client``: the daemon's protocol (hello, ping, stats, artifact
  get/put/release with leases); ``ptxcache.errors`` its exceptions.
- ``ptxcache.torch.enable()`` (or ``PTXCACHE_TORCH=1``): Triton's and
  Inductor's own caches, and their ptxas, on the daemon.
- ``ptxcache.triton``, ``ptxcache.inductor``: the backends behind that.
- ``python3 -m ptxcache status``: what is wired and what is not.

Importing this package imports neither PyTorch nor Triton, opens no socket
and changes no environment variable.
"""
from __future__ import annotations

from .client import ArtifactReply, Client, default_socket
from .errors import (Busy, Conflict, ConnectError, DaemonTimeout, Denied, Invalid, ProtocolError,
                     PtxcacheError, ServerError, Unsupported)

__all__ = ["Client", "ArtifactReply", "default_socket", "PtxcacheError", "ConnectError",
           "DaemonTimeout", "ProtocolError", "ServerError", "Unsupported", "Denied", "Busy",
           "Conflict", "Invalid", "__version__"]

__version__ = "0.2.0"  # the project's VERSION (Makefile)
