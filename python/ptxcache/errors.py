# SPDX-License-Identifier: Apache-2.0
"""The package's exceptions: one hierarchy under PtxcacheError, whose
messages say what failed first and name the socket or request concerned
(``cannot connect to ptxcached at '/run/ptxcache/ptxcached.sock': ...``)."""
from __future__ import annotations

__all__ = ["PtxcacheError", "ConnectError", "DaemonTimeout", "ProtocolError", "ServerError",
           "Unsupported", "Denied", "Busy", "Conflict", "Invalid"]


class PtxcacheError(Exception):
    """Anything that went wrong talking to ptxcached."""


class ConnectError(PtxcacheError):
    """The socket could not be reached, or the daemon closed the connection."""


class DaemonTimeout(PtxcacheError):
    """The daemon said nothing (no reply, no progress) for the silence bound,
    or a request outlived its overall bound."""


class ProtocolError(PtxcacheError):
    """The daemon sent bytes that are not a frame or reply of the protocol."""


class ServerError(PtxcacheError):
    """An error frame from the daemon; ``code`` is its code ("invalid",
    "denied", "busy", ...), the message is the daemon's."""

    code = ""
    # True for an error the daemon sent before closing the connection (not
    # allowed, too many connections, shutting down): about the daemon, not
    # about one request.
    connection = False

    def __init__(self, code: str, message: str, request: str = "") -> None:
        self.code = code
        self.daemon_message = message
        where = " (%s)" % request if request else ""
        super().__init__("ptxcached refused%s: %s [%s]" % (where, message, code))


class Unsupported(ServerError):
    """The daemon does not know the request type (a daemon older than the
    request)."""


class Denied(ServerError):
    """The daemon will not serve this uid, or this request from it."""


class Busy(ServerError):
    """A per-user or per-connection bound was reached (leases, waits, jobs)."""


class Conflict(ServerError):
    """A put without a lease while another client produces that key."""


class Invalid(ServerError):
    """A field the daemon refused: namespace, key, value too large."""


_BY_CODE = {"unsupported": Unsupported, "denied": Denied, "busy": Busy,
            "conflict": Conflict, "invalid": Invalid}


def server_error(code: str, message: str, request: str = "") -> ServerError:
    """The ServerError subclass for an error frame's code."""
    return _BY_CODE.get(code, ServerError)(code, message, request)
